package router

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuroute/gpuroute/hostsim"
)

// BenchmarkHeldRequest measures what holding a request costs the plugin: one
// replica kept full by the router's own dispatches, so that every new request
// is held and sent when the oldest one ends (late binding on the freed
// callback). Each op ends the oldest request and opens a new one; with
// flow control off (the "sent" run) the same op routes the new request at
// once. guest-µs/op is the module's own time per op (hostsim's TimeGuest),
// and held-extra-µs the held run's minus the sent run's, the extra plugin
// time of one held-and-resumed request (figures: docs/performance.md
// "Benchmarks").
func BenchmarkHeldRequest(b *testing.B) {
	var heldPerOp float64
	window := 0
	b.Run("held", func(b *testing.B) {
		heldPerOp, window = benchHeld(b, `,"flow_control":{"hold_wait_ms":1000}`, 0)
		b.ReportMetric(heldPerOp, "guest-µs/op")
		b.ReportMetric(float64(window), "in-flight")
	})
	b.Run("sent", func(b *testing.B) {
		perOp, _ := benchHeld(b, `,"flow_control":{"enabled":false}`, window)
		b.ReportMetric(perOp, "guest-µs/op")
		b.ReportMetric(heldPerOp-perOp, "held-extra-µs")
	})
}

// benchHeld runs b.N ops of BenchmarkHeldRequest and returns the guest
// time per op in µs and the requests in flight. With window 0 requests are
// opened until one is held (flow control on); otherwise window requests
// are opened, and every one must be sent.
func benchHeld(b *testing.B, flow string, window int) (float64, int) {
	f := newBareFleetWith(b, hostsim.Options{Start: start, TimeGuest: true}, 1, 1)
	f.configure(f.config(flow, nil))
	f.advance(300 * time.Millisecond)
	long := strings.Repeat(" a long distinct prompt that takes its prefill time", 400)
	n := 0
	open := func() *heldStream { n++; return f.openWith(0, strconv.Itoa(n)+long) }
	var live []*heldStream
	var held *heldStream
	for held == nil && (window == 0 && len(live) < 256 || len(live) < window) {
		if h := open(); h.held() {
			held = h
		} else {
			live = append(live, h)
		}
	}
	if (window == 0) != (held != nil) {
		b.Fatalf("after %d requests sent, held %v; want a request held exactly when flow control is on", len(live), held != nil)
	}
	end := func(h *heldStream) {
		if _, err := h.s.ResponseHeaders(benchResponseHeaders, false); err != nil {
			b.Fatal(err)
		}
		if _, err := h.s.ResponseBody(append(append([]byte(nil), sseChunk...), sseDone...), true); err != nil {
			b.Fatal(err)
		}
		if err := h.s.Done(); err != nil {
			b.Fatal(err)
		}
	}
	vm := f.vms[0]
	b.ResetTimer()
	g0 := vm.GuestTime()
	for range b.N {
		end(live[0])
		live = append(live[:0], live[1:]...)
		next := open()
		if held != nil {
			if !held.resumed || !next.held() {
				b.Fatalf("held request sent %v when the oldest ended, next one held %v; want both", held.resumed, next.held())
			}
			live, held = append(live, held), next
		} else {
			live = append(live, next)
		}
	}
	return float64(vm.GuestTime()-g0) / float64(time.Microsecond) / float64(b.N), len(live)
}
