// Package cli is gpuroute-controller's command line: run (the controller in
// a cluster), validate and render (both without one), version.
//
//	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
//
// Exit status: 0 success, 1 a configuration or fleet the plugin would
// refuse (the error names the bad value), 2 a usage error.
package cli

import (
	"errors"
	"flag"
	"io"
	"strconv"
	"strings"

	"github.com/gpuroute/gpuroute/controller/pool"
	"github.com/gpuroute/gpuroute/plugin/version"
)

// Name is the command's name in messages.
const Name = "gpuroute-controller"

// Exit statuses.
const (
	ExitOK      = 0
	ExitRefused = 1
	ExitUsage   = 2
)

const usage = `usage: gpuroute-controller COMMAND [flags]

commands:
  run       watch an InferencePool (or a Service's EndpointSlices) and publish the
            replica list to an Istio EnvoyFilter, an ECDS server and/or a file
  validate  FILE  check a plugin configuration (JSON, the gpuroute filter of an
            EnvoyFilter or an ECDS TypedExtensionConfig) with the plugin's own parser
  render    --objects FILE.yaml  print the plugin configuration for the
            Kubernetes objects in a file (kubectl get -o yaml output)
  version   print the release

"gpuroute-controller COMMAND -h" lists a command's flags.
`

// Main runs one command and returns its exit status.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		io.WriteString(stderr, usage)
		return ExitUsage
	}
	var run func([]string, io.Reader, io.Writer, io.Writer) int
	switch args[0] {
	case "run":
		run = runCommand
	case "validate":
		run = validateCommand
	case "render":
		run = renderCommand
	case "version", "--version", "-version":
		io.WriteString(stdout, Name+" "+version.Release+"\n")
		return ExitOK
	case "help", "-h", "--help", "-help":
		io.WriteString(stdout, usage)
		return ExitOK
	default:
		io.WriteString(stderr, Name+": unknown command "+quote(args[0])+"\n\n"+usage)
		return ExitUsage
	}
	return run(args[1:], stdin, stdout, stderr)
}

// parse parses a command's flags; help is not an error.
func parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (ok bool, status int) {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return false, ExitOK
		}
		return false, ExitUsage
	}
	return true, ExitOK
}

// Fleet are the flags run and render share: what to follow and how each
// replica is written.
type Fleet struct {
	Namespace, Pool, Service, Port, MetricsCluster string
	// HardwareMap holds PRODUCT=PROFILE pairs.
	HardwareMap []string
}

func (f *Fleet) register(fs *flag.FlagSet) {
	fs.StringVar(&f.Namespace, "namespace", "", "namespace of the pool or Service and its Pods (run: the kubeconfig's; render: the objects')")
	fs.StringVar(&f.Pool, "pool", "", "InferencePool (inference.networking.k8s.io/v1) to follow")
	fs.StringVar(&f.Service, "service", "", "Service whose EndpointSlices list the replicas, without the Inference Extension")
	fs.StringVar(&f.Port, "port", "", "with --service: the slices' port, by name or Pod port number (default: their only port)")
	fs.StringVar(&f.MetricsCluster, "metrics-cluster", "", "Envoy ORIGINAL_DST cluster every replica is scraped through (empty: no scraping)")
	fs.Var((*listFlag)(&f.HardwareMap), "hardware-map", "PRODUCT=PROFILE: a node GPU label value and its plugin hardware profile (repeatable)")
}

// Options returns the replica options the flags give.
func (f *Fleet) Options() (pool.Options, error) {
	o := pool.Options{MetricsCluster: f.MetricsCluster}
	for _, v := range f.HardwareMap {
		product, profile, ok := strings.Cut(v, "=")
		if !ok || product == "" || profile == "" {
			return o, errors.New("--hardware-map must be PRODUCT=PROFILE, got " + quote(v))
		}
		if o.Hardware.Products == nil {
			o.Hardware.Products = map[string]string{}
		}
		o.Hardware.Products[product] = profile
	}
	return o, nil
}

// listFlag is a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// quote quotes a bad value for a message, its first 80 bytes at most.
func quote(s string) string {
	const limit = 80
	if len(s) > limit {
		return strconv.Quote(s[:limit]) + "..."
	}
	return strconv.Quote(s)
}
