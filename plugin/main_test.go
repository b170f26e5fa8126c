package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// forbidden lists packages the wasm module must not link (docs/abi.md "Envoy
// behaviour", WASI: fmt/os/log drag in os file setup and netpoll, which dies
// with "poll_oneoff failed" in Envoy before proxy-wasm-cpp-host PR #533; reflect,
// encoding/json and regexp are heavy on the request path). The time package
// is allowed: time.Now and Duration are a clock_time_get call and an integer;
// what the module must avoid is sleeping or timers, which park the runtime in
// poll_oneoff (the GC-stress tests in hostsim run under ENOSYS to catch that).
var forbidden = []string{
	"fmt", "os", "log", "reflect", "encoding/json", "encoding/binary", "regexp",
	"net/http", "github.com/buger/jsonparser", "github.com/tetratelabs/wazero",
}

// TestWasmDeps holds the module's import graph, as built for wasip1, to the
// rule: `go list -deps` must not name a forbidden package.
func TestWasmDeps(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not in PATH")
	}
	cmd := exec.Command(gobin, "list", "-deps", ".")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps (wasip1) failed: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, d := range deps {
		for _, f := range forbidden {
			if d == f {
				t.Errorf("wasip1 build of ./plugin links %q, which the module must not contain", d)
			}
		}
	}
}
