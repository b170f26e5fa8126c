package faults

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gpuroute/gpuroute/internal/longtest"
)

// moduleBytes reads $GPUROUTE_WASM, else build/gpuroute.wasm (make test
// builds it first).
var moduleBytes = sync.OnceValues(func() ([]byte, error) {
	p := os.Getenv("GPUROUTE_WASM")
	if p == "" {
		p = filepath.Join("..", "..", "build", "gpuroute.wasm")
	}
	return os.ReadFile(p)
})

func testOptions(t *testing.T) Options {
	t.Helper()
	wasm, err := moduleBytes()
	if err != nil {
		t.Skipf("module not built (%v): run `make wasm` or set GPUROUTE_WASM", err)
	}
	o := Options{Wasm: wasm, Requests: 200, GCRequests: 2000}
	if longtest.Enabled() {
		o.Requests, o.GCRequests = 600, 20000
	}
	return o
}

// TestScenarios runs every scenario at test size: none may trap, lose a
// request or break its own expectation.
func TestScenarios(t *testing.T) {
	o := testOptions(t)
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			r := RunOne(o, name)
			t.Logf("%s: sent %d completed %d retried %d failover %d drain-ended %d lost %d local %s errlogs %d (%.2fs)\n  %s",
				name, r.Sent, r.Completed, r.Retried, r.Failover, r.DrainEnded, r.Lost, r.LocalText(), r.ErrorLogs, r.Elapsed.Seconds(), r.Figures)
			if r.Trapped {
				t.Errorf("%s: a VM trapped: %v", name, r.Err)
			}
			if r.KnownGap != "" {
				t.Logf("%s: known gap: lost %d: %s", name, r.Lost, r.KnownGap)
			}
			if r.Err != nil {
				t.Errorf("%s: %v", name, r.Err)
			}
			if r.Sent == 0 {
				t.Errorf("%s: sent no request", name)
			}
			if got := r.Completed + r.Lost + r.Unroutable + sum(r.Local); r.Err == nil && got != r.Sent {
				t.Errorf("%s: completed %d + lost %d + unroutable %d + local %d = %d, want sent %d",
					name, r.Completed, r.Lost, r.Unroutable, sum(r.Local), got, r.Sent)
			}
		})
	}
}

func sum(m map[int]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func TestWriteTable(t *testing.T) {
	var b strings.Builder
	err := WriteTable(&b, []Result{{Name: "x", What: "y", Sent: 3, Completed: 2, Local: map[int]int{503: 1}, Figures: "f"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"scenario", "503:1", "x (y, 0.0s): f"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("WriteTable() = %q, want it to contain %q", b.String(), want)
		}
	}
}

func TestRunOneUnknown(t *testing.T) {
	if r := RunOne(Options{}, "nope"); r.Err == nil {
		t.Errorf("RunOne(nope).Err = nil, want an error naming the scenarios")
	}
}

// TestCrashWithoutFallbacks: with the recommended fallbacks 0
// (ORIGINAL_DST), a replica crash loses no request: the plugin learns from
// Envoy's 503s for the refused connections (passive health) and the
// client's re-send goes elsewhere, where it used to wait for three failed
// scrapes and lose the re-sends in between.
func TestCrashWithoutFallbacks(t *testing.T) {
	r := RunOne(testOptions(t), "replica-crash")
	if r.Err != nil || r.Lost != 0 {
		t.Errorf("replica-crash: lost %d of %d requests, want 0 (err %v): %s", r.Lost, r.Sent, r.Err, r.Figures)
	}
}
