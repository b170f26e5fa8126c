package router

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/gpuroute/gpuroute/hostsim"
)

// Guest runtime functions TestTickEndsGCCycle counts besides guestGCStart:
// the write barrier's entry points (runtime.gcWriteBarrier1 to 8), which
// compiled code calls only while a collection is marking, and the end of a
// cycle's marking.
const (
	guestWriteBarrier = "runtime.gcWriteBarrier"
	guestMarkDone     = "runtime.gcMarkDone"
)

// TestTickEndsGCCycle: a garbage collection that an allocation starts
// between ticks is over after the next tick, so the requests after it run
// without the collector's write barrier. Without the binding's yield the
// cycle marks only through later allocations' assists, which an
// allocation-free request path never makes.
func TestTickEndsGCCycle(t *testing.T) {
	probe := hostsim.NewGuestProbe([]string{guestWriteBarrier, guestMarkDone, guestGCStart})
	h, mod := wasmHost(t, hostsim.Options{Probe: probe})
	vm, err := h.NewVM(context.Background(), mod, testVMID, nil)
	if err != nil {
		t.Fatalf("NewVM = %v", err)
	}
	root, err := vm.Configure(testRootID, []byte(cfgFour))
	if err != nil {
		t.Fatalf("Configure = %v", err)
	}
	barriers := func() (n uint64) {
		for _, st := range probe.Stats() {
			if strings.HasPrefix(st.Name, guestWriteBarrier) {
				n += st.Calls
			}
		}
		return n
	}
	body := []byte(chatBody(strings.Repeat("the shared system prompt ", 200)))
	chunk := []byte("data: {\"choices\":[{\"delta\":{\"content\":\" token\"}}]}\n\n")
	// serve runs n whole requests, the last response chunk of the first
	// one extraBytes long.
	serve := func(n, extraBytes int) {
		t.Helper()
		for i := range n {
			s, err := root.NewStream()
			if err != nil {
				t.Fatalf("NewStream = %v", err)
			}
			steps := []func() error{
				func() error { _, err := s.RequestHeaders(baseRequest, false); return err },
				func() error { _, err := s.RequestBody(body, true); return err },
				func() error {
					_, err := s.ResponseHeaders([][2]string{{":status", "200"}, {"content-type", "text/event-stream"}}, false)
					return err
				},
				func() error { _, err := s.ResponseBody(chunk, false); return err },
				func() error {
					last := []byte("data: [DONE]\n\n")
					if i == 0 && extraBytes > 0 {
						last = bytes.Repeat([]byte{' '}, extraBytes)
					}
					_, err := s.ResponseBody(last, true)
					return err
				},
				s.Done,
			}
			for _, step := range steps {
				if err := step(); err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
			}
		}
	}
	tick := func() {
		t.Helper()
		if err := root.Tick(); err != nil {
			t.Fatalf("Tick = %v", err)
		}
	}

	serve(50, 0)
	tick()
	// Response chunks of growing size are copied into guest memory the
	// module allocates (its scratch keeps the largest so far), so the heap
	// grows until it passes the collector's goal and a cycle starts, as in
	// a long-running VM, with no allocation after it.
	started := probe.Func(guestGCStart).Calls
	for size := 128 << 10; probe.Func(guestGCStart).Calls == started; size += size / 4 {
		if size > 4<<20 {
			t.Fatal("no collection started while the module allocated 4 MiB")
		}
		serve(1, size)
	}
	w0 := barriers()
	serve(20, 0)
	if barriers() == w0 {
		t.Fatal("no write barrier ran in the requests after a collection started: it is over already, so the test shows nothing")
	}
	marked := probe.Func(guestMarkDone).Calls
	tick()
	if probe.Func(guestMarkDone).Calls == marked {
		t.Errorf("the tick did not end the collection's marking")
	}
	w1 := barriers()
	serve(20, 0)
	if n := barriers() - w1; n != 0 {
		t.Errorf("20 requests after the tick ran %d write barriers, want 0 (the collection still marks)", n)
	}
}
