package router

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/gpuroute/gpuroute/hostsim"
)

// guestMarkDone ends a collection's marking in the guest's runtime.
const guestMarkDone = "runtime.gcMarkDone"

// TestGCCyclesWithoutPolling: collections start and end, again and again,
// in a module whose host answers poll_oneoff with ENOSYS (Envoy 1.33–1.37),
// and the VM lives. Once any goroutine of the Go runtime has armed a timer,
// every stop of the world (each collection's start and end) polls the host
// with poll_oneoff, and the ENOSYS is fatal. The runtime's goroutines arm
// one only when they run: the memory scavenger sleeps on a timer after
// returning memory. They run only when a callback yields to the scheduler,
// so the module never yields. A build that yielded after each tick, to let
// the collector's background worker finish a cycle's marking, trapped here
// in the second round (and in the drain simulation).
func TestGCCyclesWithoutPolling(t *testing.T) {
	probe := hostsim.NewGuestProbe([]string{guestGCStart, guestMarkDone})
	h, mod := wasmHost(t, hostsim.Options{Probe: probe})
	vm, err := h.NewVM(context.Background(), mod, testVMID, nil)
	if err != nil {
		t.Fatalf("NewVM = %v", err)
	}
	body := []byte(chatBody(strings.Repeat("the shared system prompt ", 200)))
	hdrs := [][2]string{{":status", "200"}, {"content-type", "text/event-stream"}}
	for round := range 6 {
		// A configuration change replaces the root (its index, ledger
		// and memo): the old one becomes garbage.
		cfg := strings.Replace(cfgFour, `"address":"10.0.0.4:8000"`,
			`"address":"10.0.0.4:8000","state":"`+[]string{"active", "draining"}[round%2]+`"`, 1)
		root, err := vm.Configure(testRootID, []byte(cfg))
		if err != nil {
			t.Fatalf("round %d: Configure = %v", round, err)
		}
		for i := range 8 {
			s, err := root.NewStream()
			if err != nil {
				t.Fatalf("round %d: NewStream = %v", round, err)
			}
			// Chunks of 2 to 16 MiB are copied into scratch memory the
			// module drops at its next callback (it keeps 4 MiB at most):
			// garbage for the collector, then memory for the scavenger to
			// return.
			last := bytes.Repeat([]byte{' '}, (i+1)*(2<<20))
			steps := []func() error{
				func() error { _, err := s.RequestHeaders(baseRequest, false); return err },
				func() error { _, err := s.RequestBody(body, true); return err },
				func() error { _, err := s.ResponseHeaders(hdrs, false); return err },
				func() error { _, err := s.ResponseBody(last, true); return err },
				s.Done,
			}
			for j, step := range steps {
				if err := step(); err != nil {
					t.Fatalf("round %d, request %d, step %d: %v", round, i, j, err)
				}
			}
		}
		if err := root.Tick(); err != nil {
			t.Fatalf("round %d: Tick = %v", round, err)
		}
	}
	if err := vm.Err(); err != nil {
		t.Fatalf("VM failed: %v", err)
	}
	started, ended := probe.Func(guestGCStart).Calls, probe.Func(guestMarkDone).Calls
	if started < 3 || ended < 3 {
		t.Fatalf("%d collections started and %d ended, want 3 or more of each: the test shows nothing", started, ended)
	}
	t.Logf("%d collections started, %d ended", started, ended)
}
