// Command gpuroute-controller keeps gpuroute's replica list in step with a
// Kubernetes fleet, and checks and renders plugin configurations without
// one.
//
//	gpuroute-controller run --namespace llm --pool llama --envoyfilter istio-system/gpuroute
//	gpuroute-controller validate plugin.json
//	gpuroute-controller render --objects objects.yaml
//
// See controller/README.md.
package main

import (
	"os"

	"github.com/gpuroute/gpuroute/controller/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
