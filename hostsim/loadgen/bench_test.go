package loadgen

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpuroute/gpuroute/hostsim/fleetsim"
	"github.com/gpuroute/gpuroute/internal/longtest"
)

// TestBenchGatewayProcess runs the gpuroute target as a gpuroute-gateway
// process on the plugin configuration the bench writes ("{config}"), as
// the peers run: every request of a short few-prefixes slice completes
// through it, answered by the bench's own replicas. Long: it builds the
// gateway binary (GPUROUTE_LONG=1, make test-long).
func TestBenchGatewayProcess(t *testing.T) {
	longtest.Skip(t)
	wasm := os.Getenv("GPUROUTE_WASM")
	if wasm == "" {
		wasm = filepath.Join("..", "..", "build", "gpuroute.wasm")
	}
	if _, err := os.Stat(wasm); err != nil {
		t.Skipf("plugin module not built (%v): run `make wasm` or set GPUROUTE_WASM", err)
	}
	bin := filepath.Join(t.TempDir(), "gpuroute-gateway")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/gpuroute-gateway").CombinedOutput(); err != nil {
		t.Fatalf("go build gpuroute-gateway: %v\n%s", err, out)
	}
	w, err := fleetsim.Generate("few-prefixes", fleetsim.WorkloadOptions{Seed: 1, Duration: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Bench(context.Background(), w, 1, BenchOptions{Replicas: 2, TimeScale: 0.05, Runs: 1,
		Targets:        []string{TargetGPURoute},
		GatewayCommand: []string{bin, "--listen", "127.0.0.1:{port}", "--wasm", wasm, "--plugin-config", "{config}", "--fleet-path", "-"}})
	if err != nil {
		t.Fatal(err)
	}
	rep := res[0].Pooled
	if rep.Completed != len(w.Requests) || rep.Failed != 0 {
		t.Fatalf("Bench through the gateway process completed %d, failed %d of %d; first error %q", rep.Completed, rep.Failed, len(w.Requests), firstErr(rep))
	}
	if len(rep.Placement) != 2 || rep.Placement["replica-0"] == 0 || rep.Placement["replica-1"] == 0 {
		t.Errorf("Bench through the gateway process placed %v, want both of the bench's replicas", rep.Placement)
	}
}
