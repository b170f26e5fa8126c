package jsonx

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// forbiddenDeps must not be linked into the wasm module (ABI.md §1.5: fmt,
// os, log and time bring os file setup and netpoll, which dies with
// "poll_oneoff failed" in Envoy 1.33-1.37; reflect and encoding/json are heavy;
// github.com/buger/jsonparser imports fmt).
var forbiddenDeps = []string{
	"fmt", "os", "log", "time", "reflect", "encoding/json", "github.com/buger/jsonparser",
}

// TestWasmDeps lists the wasip1 import graph of the plugin and of the
// packages that parse for it (the router may not import them all yet) and
// holds it to forbiddenDeps. plugin/main_test.go checks ./plugin alone with a
// longer list.
func TestWasmDeps(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not in PATH")
	}
	const mod = "github.com/gpuroute/gpuroute/plugin"
	for _, pkg := range []string{mod, mod + "/jsonx", mod + "/openai", mod + "/config"} {
		cmd := exec.Command(gobin, "list", "-deps", pkg)
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("GOOS=wasip1 go list -deps %s failed: %v", pkg, err)
		}
		for _, d := range strings.Fields(string(out)) {
			for _, f := range forbiddenDeps {
				if d == f {
					t.Errorf("GOOS=wasip1 go list -deps %s contains %q, which the module must not link", pkg, d)
				}
			}
		}
	}
}
