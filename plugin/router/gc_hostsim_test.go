package router

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/gpuroute/gpuroute/hostsim"
	"github.com/gpuroute/gpuroute/internal/longtest"
)

// guestMarkDone ends a collection's marking in the guest's runtime.
const guestMarkDone = "runtime.gcMarkDone"

// guestCycleStart and guestCycleEnd are called once per collection, as it
// starts marking and as it ends (runtime.gcStart and gcMarkDone are also
// called when there is nothing to start or end).
const (
	guestCycleStart = "runtime.gcResetMarkState"
	guestCycleEnd   = "runtime.gcMarkTermination"
)

// TestGCCyclesWithoutPolling: collections start and end, again and again,
// in a module whose host answers poll_oneoff with ENOSYS (Envoy 1.33–1.37),
// and the VM lives. Once any goroutine of the Go runtime has armed a timer,
// every stop of the world (each collection's start and end) polls the host
// with poll_oneoff, and the ENOSYS is fatal. The runtime's goroutines arm
// one only when they run: the memory scavenger sleeps on a timer after
// returning memory. They run only when a callback yields to the scheduler,
// so the module never yields: one that yields after a tick, to let the
// collector's background worker finish a cycle's marking, traps here.
func TestGCCyclesWithoutPolling(t *testing.T) {
	longtest.Skip(t) // six configurations and 48 requests of up to 16 MiB
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

// TestTickEndsCollection: on BenchmarkRequestPath64's traffic (two worker
// VMs, 64 replicas, a tick every 100 requests, a worker configured again
// every thousand), a collection that starts ends by the end of the next
// tick period. The request path allocates
// nothing and the collector's own workers never run in a reactor that does
// not yield, so without the tick's gcdrive.Finish a cycle begun in the
// warm-up would go on marking through thousands of requests, each paying
// the write barrier.
func TestTickEndsCollection(t *testing.T) {
	longtest.Skip(t) // 3,000 requests through hostsim
	probe := hostsim.NewGuestProbe([]string{guestCycleStart, guestCycleEnd})
	f := newBenchFleetOf(t, hostsim.Options{Probe: probe}, benchShape{workers: benchWorkers})
	cycles := func() (started, ended uint64) {
		return probe.Func(guestCycleStart).Calls, probe.Func(guestCycleEnd).Calls
	}
	// The request path allocates nothing and the ticks little, so the
	// collections that start are those a configuration's allocations
	// begin: one worker is configured again (the same bytes: its new root
	// takes the old one's state over) every thousand requests.
	cfg := []byte(benchConfig())
	first, _ := cycles()
	startedBefore, _ := cycles() // by the end of the previous tick period
	for i := range 3000 {
		if i > 0 && i%1000 == 0 {
			w := (i / 1000) % len(f.vms)
			root, err := f.vms[w].Configure(testRootID, cfg)
			if err != nil {
				t.Fatalf("before request %d: Configure = %v", i, err)
			}
			f.roots[w] = root
		}
		if i > 0 && i%benchTickEvery == 0 {
			// step runs the tick at the start of this request.
			_, ended := cycles()
			if ended < startedBefore {
				t.Fatalf("before request %d: %d collections ended of the %d started a tick period earlier: one marked through a whole tick period",
					i, ended, startedBefore)
			}
			startedBefore, _ = cycles()
		}
		f.step()
	}
	for _, vm := range f.vms {
		if err := vm.Err(); err != nil {
			t.Fatalf("VM failed: %v", err)
		}
	}
	if last, _ := cycles(); last == first {
		t.Fatal("no collection started during the requests: the test shows nothing")
	}
}
