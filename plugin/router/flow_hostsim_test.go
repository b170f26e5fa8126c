package router

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuroute/gpuroute/hostsim"
)

// Tests of flow control (flow.go, wake.go): requests held back while even
// their best replica cannot start them within hold_wait_ms, released when
// capacity frees, in band and tenant order.

const flowBands = `,"flow_control":{"hold_wait_ms":1000,"max_queue_ms":5000,"tenant_header":"x-tenant",` +
	`"bands":[{"name":"critical","from_header":true},{"name":"standard"},{"name":"sheddable","sheddable":true,"from_header":true}]}`

// heldStream is a request opened on a worker with extra headers, and what
// became of it: resumed (with its destination), answered, or still held.
type heldStream struct {
	s       *hostsim.Stream
	resumed bool
	dst     string
	reply   *hostsim.LocalReply
}

func (f *testFleet) openWith(w int, content string, hdrs ...[2]string) *heldStream {
	f.t.Helper()
	s, err := f.vms[w].Root(testRootID).NewStream()
	if err != nil {
		f.t.Fatalf("NewStream = %v", err)
	}
	h := &heldStream{s: s}
	s.OnRequestResumed(func() { h.resumed = true; h.dst, _ = s.RequestHeader(HeaderDestination) })
	s.OnLocalReply(func(lr *hostsim.LocalReply) { h.reply = lr })
	if _, err := s.RequestHeaders(append(append([][2]string(nil), baseRequest...), hdrs...), false); err != nil {
		f.t.Fatalf("RequestHeaders = %v", err)
	}
	if _, err := s.RequestBody([]byte(chatBody(content)), true); err != nil {
		f.t.Fatalf("RequestBody = %v", err)
	}
	if !s.RequestPaused() && h.reply == nil {
		h.dst, _ = s.RequestHeader(HeaderDestination)
	}
	return h
}

// held reports whether the request is still held: paused, no reply.
func (h *heldStream) held() bool { return h.s.RequestPaused() && h.reply == nil && !h.resumed }

// saturate makes every replica report a queue far over the hold bound.
func saturate(f *testFleet, on bool) {
	for _, r := range f.replicas {
		r.set(func(r *fakeReplica) {
			r.waiting, r.running = 0, 0
			if on {
				r.waiting, r.running = 40, 60
			}
		})
	}
}

// TestFlowHoldsWhenSaturated: a request no replica can start within
// hold_wait_ms is held (nothing upstream, no reply), and sent to the best
// replica once the scrape shows room.
func TestFlowHoldsWhenSaturated(t *testing.T) {
	f := newTestFleet(t, 1, 2, flowBands)
	saturate(f, true)
	f.advance(300 * time.Millisecond)
	h := f.openWith(0, "question one")
	if !h.held() || h.dst != "" {
		t.Fatalf("request to a saturated fleet: held %v, destination %q, reply %+v; want it held", h.held(), h.dst, h.reply)
	}
	if g := f.metric("gpuroute_flow_standard_holding"); g != 1 {
		t.Fatalf("holding gauge = %d, want 1", g)
	}
	saturate(f, false)
	f.advance(300 * time.Millisecond)
	if !h.resumed || !strings.HasPrefix(h.dst, "10.0.0.") {
		t.Fatalf("after the fleet emptied: resumed %v, destination %q; want it sent", h.resumed, h.dst)
	}
	if a, g := f.metric("gpuroute_flow_standard_admitted_total"), f.metric("gpuroute_flow_standard_holding"); a != 1 || g != 0 {
		t.Fatalf("admitted %d, holding %d; want 1, 0", a, g)
	}
	if body := h.s.RequestBodyForwarded(); !strings.Contains(string(body), "question one") {
		t.Fatalf("forwarded body %q, want the held body", body)
	}
	_ = h.s.Done()
}

// TestFlowSheds: a sheddable request that would be held gets a 429 with
// Retry-After at once; an unsaturated fleet serves it.
func TestFlowSheds(t *testing.T) {
	f := newTestFleet(t, 1, 2, flowBands)
	f.advance(300 * time.Millisecond)
	if h := f.openWith(0, "cheap", [2]string{"x-gpuroute-priority", "sheddable"}); h.dst == "" {
		t.Fatalf("sheddable request to an idle fleet: destination %q, reply %+v; want it sent", h.dst, h.reply)
	}
	saturate(f, true)
	f.advance(300 * time.Millisecond)
	h := f.openWith(0, "cheap", [2]string{"x-gpuroute-priority", "sheddable"})
	if h.reply == nil || h.reply.Status != 429 {
		t.Fatalf("sheddable request to a saturated fleet: reply %+v, held %v; want a 429", h.reply, h.held())
	}
	if ra := headerValue(h.reply.Headers, "retry-after"); ra == "" {
		t.Fatalf("429 headers %v, want Retry-After", h.reply.Headers)
	} else if n, err := strconv.Atoi(ra); err != nil || n < 1 || n > 60 {
		t.Fatalf("Retry-After %q, want whole seconds in [1, 60]", ra)
	}
	if n := f.metric("gpuroute_flow_sheddable_shed_total"); n != 1 {
		t.Fatalf("shed = %d, want 1", n)
	}
}

// TestFlowTimesOut: a request held past its band's max_queue_ms gets a
// 429 with Retry-After, and leaves the queue.
func TestFlowTimesOut(t *testing.T) {
	f := newTestFleet(t, 1, 1, `,"flow_control":{"max_queue_ms":400}`)
	saturate(f, true)
	f.advance(300 * time.Millisecond)
	h := f.openWith(0, "waits too long")
	if !h.held() {
		t.Fatalf("held %v, reply %+v; want it held", h.held(), h.reply)
	}
	f.advance(600 * time.Millisecond)
	if h.reply == nil || h.reply.Status != 429 || headerValue(h.reply.Headers, "retry-after") == "" {
		t.Fatalf("after max_queue_ms: reply %+v; want a 429 with Retry-After", h.reply)
	}
	if !strings.Contains(string(h.reply.Body), "max_queue_ms") {
		t.Fatalf("429 body %q, want it to name max_queue_ms", h.reply.Body)
	}
	if n, g := f.metric("gpuroute_flow_standard_timed_out_total"), f.metric("gpuroute_flow_standard_holding"); n != 1 || g != 0 {
		t.Fatalf("timed out %d, holding %d; want 1, 0", n, g)
	}
}

// TestFlowClientLeavesWhileHeld: a client that disconnects while held
// ends its stream (on_log, on_done, on_delete); it leaves the queue and
// nothing goes upstream when capacity returns.
func TestFlowClientLeavesWhileHeld(t *testing.T) {
	f := newTestFleet(t, 1, 1, "")
	saturate(f, true)
	f.advance(300 * time.Millisecond)
	h := f.openWith(0, "bye")
	if !h.held() {
		t.Fatal("request not held")
	}
	if err := h.s.Done(); err != nil {
		t.Fatal(err)
	}
	if c, g := f.metric("gpuroute_flow_standard_cancelled_total"), f.metric("gpuroute_flow_standard_holding"); c != 1 || g != 0 {
		t.Fatalf("cancelled %d, holding %d; want 1, 0", c, g)
	}
	saturate(f, false)
	f.advance(300 * time.Millisecond)
	if h.resumed || len(h.s.RequestBodyForwarded()) != 0 {
		t.Fatal("a request whose client left went upstream")
	}
}

// TestFlowPriority: a critical request held after a standard one is sent
// first; the standard one follows when the critical one's prefill leaves
// room, on its first token, without a tick.
func TestFlowPriority(t *testing.T) {
	f := newTestFleet(t, 1, 1, flowBands)
	saturate(f, true)
	f.advance(300 * time.Millisecond)
	long := strings.Repeat("a long shared document. ", 1500) // ~9k tokens: over a second of prefill
	std := f.openWith(0, long+"standard")
	crit := f.openWith(0, long+"critical", [2]string{"x-gpuroute-priority", "critical"})
	if !std.held() || !crit.held() {
		t.Fatalf("held: standard %v, critical %v; want both", std.held(), crit.held())
	}
	saturate(f, false)
	f.advance(250 * time.Millisecond) // a scrape shows room, and the next tick reads it
	if !crit.resumed || std.resumed {
		t.Fatalf("after room for one: critical resumed %v, standard %v; want the critical one only", crit.resumed, std.resumed)
	}
	// The critical request's first token ends its prefill: room for the next.
	if _, err := crit.s.ResponseHeaders([][2]string{{":status", "200"}}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := crit.s.ResponseBody([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n"), false); err != nil {
		t.Fatal(err)
	}
	if !std.resumed {
		t.Fatal("the standard request was not sent on the critical one's first token")
	}
}

// TestFlowRefusesBandNotAllowed: a client asking for a band it may not
// choose gets its model's or the default band, counted.
func TestFlowRefusesBandNotAllowed(t *testing.T) {
	cfg := `,"flow_control":{"bands":[{"name":"critical"},{"name":"standard"}]}`
	f := newTestFleet(t, 1, 1, cfg)
	saturate(f, true)
	f.advance(300 * time.Millisecond)
	h := f.openWith(0, "vip?", [2]string{"x-gpuroute-priority", "critical"})
	if !h.held() {
		t.Fatal("request not held")
	}
	if c, s := f.metric("gpuroute_flow_critical_holding"), f.metric("gpuroute_flow_standard_holding"); c != 0 || s != 1 {
		t.Fatalf("holding critical %d, standard %d; want 0, 1 (critical is not from_header)", c, s)
	}
	if n := f.metric("gpuroute_flow_priority_refused_total"); n != 1 {
		t.Fatalf("refused priorities = %d, want 1", n)
	}
}

// TestFlowWakesAnotherWorker: worker 1's own requests fill the replica;
// worker 0's request is held; when worker 1's request ends, worker 0 is
// woken through its shared queue and sends its request, before any tick.
func TestFlowWakesAnotherWorker(t *testing.T) {
	f := newTestFleet(t, 2, 1, `,"flow_control":{"hold_wait_ms":1000}`)
	f.advance(300 * time.Millisecond)
	// About 0.4 s of prefill each: three fit under the hold bound, a
	// fourth does not.
	long := strings.Repeat("the other worker's long prompt. ", 300)
	var busy []*heldStream
	for i := range 3 {
		b := f.openWith(1, strconv.Itoa(i)+long) // distinct from the first block: no shared prefix
		if b.dst == "" {
			t.Fatalf("worker 1's request %d was not sent: held %v reply %+v", i, b.held(), b.reply)
		}
		busy = append(busy, b)
	}
	h := f.openWith(0, "worker zero's question")
	if !h.held() {
		t.Fatalf("worker 0's request behind worker 1's prefills: held %v, destination %q; want it held", h.held(), h.dst)
	}
	for _, b := range busy {
		if _, err := b.s.ResponseHeaders([][2]string{{":status", "200"}}, false); err != nil {
			t.Fatal(err)
		}
		if _, err := b.s.ResponseBody([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n"), true); err != nil {
			t.Fatal(err)
		}
		if err := b.s.Done(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.h.Advance(0); err != nil { // deliver the queued wake at this instant
		t.Fatal(err)
	}
	if !h.resumed {
		t.Fatal("worker 0's held request was not sent when worker 1's requests ended")
	}
}

// TestFlowHeldAcrossReconfigure: a configuration change creates a new root
// in the VM; it takes over the held request, which is sent when room
// returns.
func TestFlowHeldAcrossReconfigure(t *testing.T) {
	f := newTestFleet(t, 1, 1, "")
	saturate(f, true)
	f.advance(300 * time.Millisecond)
	h := f.openWith(0, "through a reload")
	if !h.held() {
		t.Fatal("request not held")
	}
	f.configure(f.config(`,"flow_control":{"hold_wait_ms":900}`, nil))
	saturate(f, false)
	f.advance(300 * time.Millisecond)
	if !h.resumed || h.dst == "" {
		t.Fatalf("after a reconfiguration and room: resumed %v, destination %q; want it sent", h.resumed, h.dst)
	}
}

// TestFlowStatus: the status endpoint of any worker shows the requests
// every worker holds, per band, and what became of them.
func TestFlowStatus(t *testing.T) {
	f := newTestFleet(t, 2, 2, flowBands+`,"status_path":"/status"`)
	saturate(f, true)
	f.advance(300 * time.Millisecond)
	h := f.openWith(0, "question one")
	if !h.held() {
		t.Fatal("request to a saturated fleet not held")
	}
	type band struct {
		Band                    string
		Holding, Held, Admitted int64
	}
	var doc struct {
		Held int64
		Flow []band
	}
	f.statusInto(1, &doc)
	want := []band{{Band: "critical"}, {Band: "standard", Holding: 1, Held: 1}, {Band: "sheddable"}}
	if doc.Held != 1 || !slices.Equal(doc.Flow, want) {
		t.Fatalf("worker 1's status while worker 0 holds one request: held %d, flow %+v; want 1, %+v", doc.Held, doc.Flow, want)
	}
	saturate(f, false)
	f.advance(300 * time.Millisecond)
	f.statusInto(1, &doc)
	want[1] = band{Band: "standard", Held: 1, Admitted: 1}
	if doc.Held != 0 || !slices.Equal(doc.Flow, want) {
		t.Fatalf("status after the request was sent: held %d, flow %+v; want 0, %+v", doc.Held, doc.Flow, want)
	}
	_ = h.s.Done()
}

// TestFlowFairShare: a tenant with most of the requests in flight is held
// at a shorter queue than when it is alone, and a request of the tenant
// below its share is sent past it.
func TestFlowFairShare(t *testing.T) {
	const cfg = `,"flow_control":{"hold_wait_ms":1000,"tenant_header":"x-tenant"}`
	prompt := strings.Repeat(" a distinct prompt that takes some prefill", 100)
	// sentBeforeHold opens heavy's requests until one is held, after
	// light's (if any) are in flight, and returns how many were sent.
	sentBeforeHold := func(f *testFleet, light int) (int, *heldStream) {
		for i := range light {
			if h := f.openWith(0, "light "+strconv.Itoa(i)+prompt, [2]string{"x-tenant", "light"}); h.dst == "" {
				t.Fatalf("light request %d not sent to an idle fleet", i)
			}
		}
		for n := 0; n < 200; n++ {
			h := f.openWith(0, "heavy "+strconv.Itoa(n)+prompt, [2]string{"x-tenant", "heavy"})
			if h.held() {
				return n, h
			}
		}
		t.Fatal("no heavy request held after 200")
		return 0, nil
	}
	alone := newTestFleet(t, 1, 1, cfg)
	alone.advance(300 * time.Millisecond)
	nAlone, _ := sentBeforeHold(alone, 0)
	shared := newTestFleet(t, 1, 1, cfg)
	shared.advance(300 * time.Millisecond)
	nShared, held := sentBeforeHold(shared, 1)
	if nAlone < 4 || nShared >= nAlone-1 {
		t.Fatalf("heavy requests sent before one was held: %d alone, %d beside one light request; want the second well below the first", nAlone, nShared)
	}
	light := shared.openWith(0, "light again"+prompt, [2]string{"x-tenant", "light"})
	if light.held() || !held.held() {
		t.Fatalf("light request held %v, heavy still held %v; want light sent past heavy", light.held(), held.held())
	}
}

// TestFlowNoHeadOfLine: a request whose prompt cannot start before KV
// frees is held; a short one behind it that fits now is sent, not held
// behind the long one, which stays held until the replica has room for it.
func TestFlowNoHeadOfLine(t *testing.T) {
	f := newTestFleet(t, 1, 1, `,"flow_control":{"hold_wait_ms":1000}`)
	for _, r := range f.replicas {
		r.set(func(r *fakeReplica) { r.running, r.kv = 40, 0.97 }) // 12K tokens of KV free
	}
	f.advance(300 * time.Millisecond)
	long := f.openWith(0, strings.Repeat("a prompt of twenty thousand tokens. ", 2300))
	if !long.held() {
		t.Fatalf("a prompt over the free KV: held %v, destination %q; want it held", long.held(), long.dst)
	}
	short := f.openWith(0, "a short question")
	if short.held() || short.dst == "" {
		t.Fatalf("a short prompt that fits, behind a held long one: held %v, destination %q; want it sent", short.held(), short.dst)
	}
	if !long.held() {
		t.Fatal("the long prompt was sent before the replica had room for it")
	}
}
