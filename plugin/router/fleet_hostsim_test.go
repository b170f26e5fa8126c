package router

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuroute/gpuroute/hostsim"
	"github.com/gpuroute/gpuroute/internal/longtest"
	"github.com/gpuroute/gpuroute/plugin/shared"
)

// Tests that need several worker VMs, metrics callouts, responses and
// time: they drive build/gpuroute.wasm in hostsim only (the SDK emulator has
// one root and no shared clock).

// fakeReplica serves vLLM-format metrics for one replica.
type fakeReplica struct {
	mu      sync.Mutex
	waiting int
	running int
	kv      float64
	status  int    // HTTP status to answer (0: 200)
	body    string // raw body instead of metrics ("" : render)
	silent  bool   // never answer (timeout)
	scrapes int
}

func (f *fakeReplica) handle(*hostsim.CallRequest) hostsim.CallReply {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scrapes++
	if f.silent {
		return hostsim.CallReply{NoAnswer: true}
	}
	body := f.body
	if body == "" {
		body = "# TYPE vllm:num_requests_waiting gauge\n" +
			"vllm:num_requests_waiting{model_name=\"m\"} " + strconv.Itoa(f.waiting) + "\n" +
			"vllm:num_requests_running{model_name=\"m\"} " + strconv.Itoa(f.running) + "\n" +
			"vllm:kv_cache_usage_perc{model_name=\"m\"} " + strconv.FormatFloat(f.kv, 'f', 3, 64) + "\n" +
			"vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"25000\"} 1\n"
	}
	return hostsim.CallReply{Status: f.status, Body: []byte(body), Latency: 5 * time.Millisecond}
}

func (f *fakeReplica) set(fn func(*fakeReplica)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeReplica) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.scrapes
}

// testFleet is one Envoy (a hostsim Host) with workers VMs of the module,
// configured with replicas fake replicas behind metrics clusters.
type testFleet struct {
	t        testing.TB
	h        *hostsim.Host
	mod      *hostsim.Module
	vms      []*hostsim.VM
	replicas []*fakeReplica
}

// start is the virtual wall clock's origin, so drain deadlines (absolute
// Unix milliseconds in the configuration) are known to tests.
var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newTestFleet(t testing.TB, workers, replicas int, extra string) *testFleet {
	t.Helper()
	f := newBareFleet(t, workers, replicas)
	f.configure(f.config(extra, nil))
	return f
}

// newBareFleet is newTestFleet without the configuration.
func newBareFleet(t testing.TB, workers, replicas int) *testFleet {
	t.Helper()
	return newBareFleetWith(t, hostsim.Options{Start: start}, workers, replicas)
}

// newBareFleetWith is newBareFleet on a host with opts.
func newBareFleetWith(t testing.TB, opts hostsim.Options, workers, replicas int) *testFleet {
	t.Helper()
	h, mod := wasmHost(t, opts)
	f := &testFleet{t: t, h: h, mod: mod}
	for i := range replicas {
		fr := &fakeReplica{}
		f.replicas = append(f.replicas, fr)
		h.AddCluster("r"+strconv.Itoa(i)+"-metrics", hostsim.ClusterFunc(fr.handle))
	}
	for range workers {
		vm, err := h.NewVM(context.Background(), mod, testVMID, nil)
		if err != nil {
			t.Fatalf("NewVM = %v", err)
		}
		f.vms = append(f.vms, vm)
	}
	return f
}

// config renders a configuration; states maps replica index to a state
// fragment such as `"state":"draining","drain_deadline_ms":…`.
func (f *testFleet) config(extra string, states map[int]string) string {
	var b strings.Builder
	b.WriteString(`{"tick_ms":100,"replicas":[`)
	for i := range f.replicas {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"name":"r` + strconv.Itoa(i) + `","address":"10.0.0.` + strconv.Itoa(i+1) +
			`:8000","metrics_cluster":"r` + strconv.Itoa(i) + `-metrics"`)
		if s, ok := states[i]; ok {
			b.WriteString("," + s)
		}
		b.WriteByte('}')
	}
	b.WriteString("]" + extra + "}")
	return b.String()
}

func (f *testFleet) configure(cfg string) {
	f.t.Helper()
	for _, vm := range f.vms {
		if _, err := vm.Configure(testRootID, []byte(cfg)); err != nil {
			f.t.Fatalf("Configure(%s) = %v", cfg, err)
		}
	}
}

func (f *testFleet) advance(d time.Duration) {
	f.t.Helper()
	if err := f.h.Advance(d); err != nil {
		f.t.Fatalf("Advance(%v) = %v", d, err)
	}
}

// open starts a chat request on worker w and returns the stream and the
// destination it got ("" when answered locally).
func (f *testFleet) open(w int, content string) (*hostsim.Stream, string) {
	f.t.Helper()
	s, err := f.vms[w].Root(testRootID).NewStream()
	if err != nil {
		f.t.Fatalf("NewStream = %v", err)
	}
	if _, err := s.RequestHeaders(baseRequest, false); err != nil {
		f.t.Fatalf("RequestHeaders = %v", err)
	}
	if _, err := s.RequestBody([]byte(chatBody(content)), true); err != nil {
		f.t.Fatalf("RequestBody = %v", err)
	}
	dst, _ := s.RequestHeader(HeaderDestination)
	return s, dst
}

// route runs one whole request without a response and returns its destination.
func (f *testFleet) route(w int, content string) string {
	f.t.Helper()
	s, dst := f.open(w, content)
	if err := s.Done(); err != nil {
		f.t.Fatalf("Done = %v", err)
	}
	return dst
}

// fleetConfigID is the configuration id of a testFleet of n replicas
// (shared.ConfigIDOf their names and addresses, as the root computes it).
func fleetConfigID(n int) uint64 {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "r" + strconv.Itoa(i) + "\x0010.0.0." + strconv.Itoa(i+1) + ":8000"
	}
	return shared.ConfigIDOf(ids)
}

// logsWith counts the guest log lines of h that contain s.
func logsWith(h *hostsim.Host, s string) int {
	n := 0
	for _, e := range h.Logs() {
		if strings.Contains(e.Message, s) {
			n++
		}
	}
	return n
}

func (f *testFleet) metric(name string) int64 {
	m, _ := f.h.Metric(name)
	return m.Value
}

// TestScrapeSteersLoad: the leader's scrapes reach every worker, one VM
// scrapes per round (not one per worker), and reported load moves traffic.
func TestScrapeSteersLoad(t *testing.T) {
	f := newTestFleet(t, 4, 2, "")
	f.replicas[0].set(func(r *fakeReplica) { r.waiting, r.running, r.kv = 40, 60, 0.9 })
	f.advance(time.Second)
	for _, r := range f.replicas {
		// 10 ticks of 100 ms, plus the scrape at configuration; 4 workers
		// would make it 40+ if they all scraped.
		if n := r.count(); n < 8 || n > 13 {
			t.Errorf("scrapes of one replica in 1 s at 100 ms ticks with 4 workers = %d, want about 10 (one leader)", n)
		}
	}
	for w := range f.vms {
		for i := range 8 {
			if dst := f.route(w, "question "+strconv.Itoa(i)); dst != "10.0.0.2:8000" {
				t.Fatalf("worker %d request %d went to %s; want the idle 10.0.0.2:8000 (10.0.0.1 reports 40 waiting)", w, i, dst)
			}
		}
	}
	if n := f.metric(statScrapes); n < 16 {
		t.Errorf("%s = %d, want ≥ 16", statScrapes, n)
	}
}

// TestLeaseHandover: when the scraping VM goes away another takes over, and
// scrapes never stop while workers are deleted one by one.
func TestLeaseHandover(t *testing.T) {
	f := newTestFleet(t, 4, 1, "")
	f.advance(time.Second)
	for i := 0; i < 3; i++ {
		if err := f.vms[i].Close(); err != nil {
			t.Fatalf("Close(vm %d) = %v", i, err)
		}
		before := f.replicas[0].count()
		// Lease lifetime is 3 ticks by default (at least 1 s): within 2 s
		// of the holder's exit someone scrapes again.
		f.advance(2 * time.Second)
		if got := f.replicas[0].count() - before; got < 5 {
			t.Fatalf("after closing VM %d: %d scrapes in 2 s, want scraping to continue (≥ 5)", i, got)
		}
	}
	if dst := f.route(3, "still routing"); dst != "10.0.0.1:8000" {
		t.Errorf("last worker routed to %q, want 10.0.0.1:8000", dst)
	}
}

// TestScrapeFailures: timeouts, 5xx and garbage age a replica's figures and,
// repeated, rule it out; it comes back when its metrics do. Nothing traps.
func TestScrapeFailures(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(*fakeReplica)
	}{
		{"timeout", func(r *fakeReplica) { r.silent = true }},
		{"http 503", func(r *fakeReplica) { r.status = 503 }},
		{"garbage", func(r *fakeReplica) { r.body = "<html>not metrics</html>" }},
		{"truncated", func(r *fakeReplica) { r.body = "vllm:num_requests_waiting 3\nvllm:num_requests_runn" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newTestFleet(t, 2, 2, `,"scrape_timeout_ms":50`)
			f.advance(500 * time.Millisecond)
			f.replicas[0].set(tc.break_)
			f.advance(time.Second)
			for i := range 20 {
				if dst := f.route(i%2, "q"+strconv.Itoa(i)); dst != "10.0.0.2:8000" {
					t.Fatalf("request %d went to %s while 10.0.0.1's metrics fail, want 10.0.0.2:8000", i, dst)
				}
			}
			if f.metric(statScrapeFailures) < 3 {
				t.Errorf("%s = %d, want ≥ 3", statScrapeFailures, f.metric(statScrapeFailures))
			}
			f.replicas[0].set(func(r *fakeReplica) { r.silent, r.status, r.body = false, 0, "" })
			f.advance(time.Second)
			seen := map[string]bool{}
			for i := range 40 {
				seen[f.route(i%2, "again "+strconv.Itoa(i))] = true
			}
			if !seen["10.0.0.1:8000"] {
				t.Errorf("after recovery destinations = %v, want 10.0.0.1:8000 back in use", seen)
			}
			for _, vm := range f.vms {
				if err := vm.Err(); err != nil {
					t.Errorf("VM failed: %v", err)
				}
			}
		})
	}
}

// TestDrainDeadline: a configuration update starts a drain; no new request
// goes to the draining replica; at the deadline what still streams from it
// is reset, and nothing outlives the deadline.
func TestDrainDeadline(t *testing.T) {
	f := newTestFleet(t, 2, 2, "")
	f.configure(f.config("", map[int]string{1: `"state":"drained"`}))
	f.advance(200 * time.Millisecond)
	var onR0 []*hostsim.Stream
	for i := range 4 {
		s, dst := f.open(i%2, "long generation "+strconv.Itoa(i))
		if dst != "10.0.0.1:8000" {
			t.Fatalf("request %d before the drain went to %s, want 10.0.0.1:8000 (the only active replica)", i, dst)
		}
		if _, err := s.ResponseHeaders([][2]string{{":status", "200"}}, false); err != nil {
			t.Fatal(err)
		}
		onR0 = append(onR0, s)
	}
	deadline := start.Add(f.h.Now() + 2*time.Second).UnixMilli()
	f.configure(f.config("", map[int]string{0: `"state":"draining","drain_deadline_ms":` + strconv.FormatInt(deadline, 10)}))
	for i := range 10 {
		if dst := f.route(i%2, "new "+strconv.Itoa(i)); dst != "10.0.0.2:8000" {
			t.Fatalf("new request %d during the drain went to %s, want 10.0.0.2:8000", i, dst)
		}
	}
	f.advance(time.Second)
	for i, s := range onR0 {
		if s.Closed(hostsim.StreamResponse) || s.Ended() {
			t.Fatalf("stream %d ended 1 s before its drain deadline", i)
		}
	}
	f.advance(1200 * time.Millisecond) // past the deadline, plus a tick
	for i, s := range onR0 {
		if !s.Closed(hostsim.StreamResponse) && !s.Ended() {
			t.Errorf("stream %d on the drained replica still open after the deadline", i)
		}
	}
	if n := f.metric(statDrainResets); n != int64(len(onR0)) {
		t.Errorf("%s = %d, want %d", statDrainResets, n, len(onR0))
	}
}

// TestStatsTallyAtTick: a routed request's counts reach Envoy at the
// root's next tick, an event's at once; a root replaced by a new
// configuration passes what it had at once, and the new root, which
// adopted its stream, counts the stream's end at its own tick.
func TestStatsTallyAtTick(t *testing.T) {
	f := newTestFleet(t, 1, 2, "")
	f.advance(200 * time.Millisecond)
	decisions0 := f.metric(statDecisions)
	s, dst := f.open(0, "tally me")
	if dst == "" {
		t.Fatal("request not routed")
	}
	if n := f.metric(statDecisions) - decisions0; n != 0 {
		t.Errorf("%s before the tick = +%d, want +0 (tallied)", statDecisions, n)
	}
	scrapes0 := f.metric(statScrapes)
	f.advance(100 * time.Millisecond)
	if n := f.metric(statScrapes) - scrapes0; n != 2 {
		t.Errorf("%s over one tick = +%d, want +2 (one per replica, at once)", statScrapes, n)
	}
	if n := f.metric(statDecisions) - decisions0; n != 1 {
		t.Errorf("%s after the tick = +%d, want +1", statDecisions, n)
	}
	if n := f.metric(statInFlight); n != 1 {
		t.Errorf("%s with one open stream = %d, want 1", statInFlight, n)
	}
	// A new configuration: the old root stops, its stream goes on.
	f.configure(f.config(`,"fallbacks":1`, nil))
	if err := s.Done(); err != nil {
		t.Fatal(err)
	}
	f.advance(100 * time.Millisecond)
	if n := f.metric(statInFlight); n != 0 {
		t.Errorf("%s after the adopted stream ended and a tick = %d, want 0", statInFlight, n)
	}
}

// TestStreamAccounting: streamed tokens and the end of a stream release
// the request's accounting exactly once, for a finished and a reset stream.
func TestStreamAccounting(t *testing.T) {
	f := newTestFleet(t, 1, 2, `,"decision_header":true`)
	f.advance(200 * time.Millisecond)
	sse := "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n"
	var streams []*hostsim.Stream
	for i := range 3 {
		s, _ := f.open(0, "count me "+strconv.Itoa(i))
		streams = append(streams, s)
	}
	f.advance(100 * time.Millisecond) // the gauge's tallies reach the host at the tick
	if n := f.metric(statInFlight); n != 3 {
		t.Fatalf("%s with 3 open streams = %d, want 3", statInFlight, n)
	}
	// Finished normally.
	s := streams[0]
	if _, err := s.ResponseHeaders([][2]string{{":status", "200"}}, false); err != nil {
		t.Fatal(err)
	}
	if got := headerValue(s.ResponseHeaderMap(), HeaderDecision); !strings.Contains(got, "chosen=r") || !strings.Contains(got, "reason=") {
		t.Errorf("%s = %q, want the decision explained", HeaderDecision, got)
	}
	for range 5 {
		if _, err := s.ResponseBody([]byte(sse), false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.ResponseBody([]byte("data: [DONE]\n\n"), true); err != nil {
		t.Fatal(err)
	}
	// Reset mid-stream, and reset before any response.
	if _, err := streams[1].ResponseBody([]byte(sse), false); err != nil {
		t.Fatal(err)
	}
	for _, s := range streams {
		if err := s.Done(); err != nil {
			t.Fatal(err)
		}
	}
	f.advance(100 * time.Millisecond)
	if n := f.metric(statInFlight); n != 0 {
		t.Errorf("%s after every stream ended = %d, want 0 (released exactly once)", statInFlight, n)
	}
}

// TestAffinityAcrossWorkersAndGateways: a prefix served by one worker is
// found warm by the others after a tick, and two independent gateways send
// a new prefix to the same home replica without talking.
func TestAffinityAcrossWorkersAndGateways(t *testing.T) {
	a := newTestFleet(t, 4, 8, "")
	b := newTestFleet(t, 4, 8, "")
	a.advance(200 * time.Millisecond)
	b.advance(200 * time.Millisecond)
	agree := 0
	for p := range 16 {
		system := strings.Repeat("tenant "+strconv.Itoa(p)+" shared context. ", 300)
		home := a.route(0, system+"first")
		if b.route(1, system+"first") == home {
			agree++
		}
		a.advance(150 * time.Millisecond) // one tick merges worker 0's dispatch
		for w := 1; w < 4; w++ {
			if dst := a.route(w, system+"follow-up "+strconv.Itoa(w)); dst != home {
				t.Errorf("prefix %d: worker %d sent a follow-up to %s, want its home %s", p, w, dst, home)
			}
		}
	}
	if agree != 16 {
		t.Errorf("two gateways agreed on the home of %d of 16 new prefixes, want 16 (rendezvous)", agree)
	}
}

// TestOverload429: with max_wait_ms set, a fleet whose every replica is
// queued beyond it sheds with 429 and an OpenAI-style body.
func TestOverload429(t *testing.T) {
	// Retry-After: about the best queue's excess over max_wait_ms, which
	// grows with the queue.
	var last int
	for _, waiting := range []int{20, 40} {
		f := newTestFleet(t, 1, 2, `,"max_wait_ms":500`)
		for _, r := range f.replicas {
			r.set(func(r *fakeReplica) { r.waiting, r.running = waiting, 256 })
		}
		f.advance(300 * time.Millisecond)
		s, dst := f.open(0, "anything")
		lr := s.LocalReply()
		if dst != "" || lr == nil || lr.Status != 429 {
			t.Fatalf("request to an overloaded fleet (%d waiting) = destination %q, local %+v; want a 429", waiting, dst, lr)
		}
		var body struct {
			Error struct{ Type string } `json:"error"`
		}
		if err := json.Unmarshal(lr.Body, &body); err != nil || body.Error.Type != "rate_limit_exceeded" {
			t.Errorf("429 body %q: %v, want an OpenAI error of type rate_limit_exceeded", lr.Body, err)
		}
		retry, err := strconv.Atoi(headerValue(lr.Headers, headerRetryAfter))
		if err != nil || retry <= last || retry > maxRetryAfterSec {
			t.Errorf("429 %s with %d waiting = %q, want seconds in (%d, %d]", headerRetryAfter, waiting, headerValue(lr.Headers, headerRetryAfter), last, maxRetryAfterSec)
		}
		last = retry
		_ = s.Done()
	}
}

func headerValue(h [][2]string, name string) string {
	for _, kv := range h {
		if strings.EqualFold(kv[0], name) {
			return kv[1]
		}
	}
	return ""
}

// TestWorkersSeeEachOthersDispatches: two worker VMs decide back to back,
// between ticks, on the same metrics snapshot. The second sees the first's
// dispatch at once (workers exchange in-flight work per request), so it
// does not pile onto the replica that looked idle.
func TestWorkersSeeEachOthersDispatches(t *testing.T) {
	f := newTestFleet(t, 2, 4, "")
	for i := 1; i < 4; i++ {
		f.replicas[i].set(func(r *fakeReplica) { r.waiting, r.running = 1, 4 })
	}
	f.advance(time.Second) // scraped: replica 0 idle, the others one queued each
	long := strings.Repeat("a long prompt for the idle replica ", 300)
	s0, first := f.open(0, "first "+long)
	defer s0.Done()
	if first != "10.0.0.1:8000" {
		t.Fatalf("worker 0 sent the first request to %s, want the idle 10.0.0.1:8000", first)
	}
	s, second := f.open(1, "second "+long)
	defer s.Done()
	if second == "10.0.0.1:8000" {
		t.Errorf("worker 1 sent the second request to %s too, right after worker 0 queued a long prompt there", second)
	}
}

// TestTickPatchesWorkRecords: at a tick a worker republishes only the
// entries of its work record that moved, as patches, so the other workers
// read those and not the whole record; a tick where nothing moved still
// republishes its time and its dispatch rate, which decays.
func TestTickPatchesWorkRecords(t *testing.T) {
	f := newTestFleet(t, 2, 4, "")
	f.advance(time.Second)
	v, _, ok := f.h.SharedData(testVMID, shared.KeyRegistry)
	var reg shared.Registry
	if !ok || reg.Decode(v) != nil || len(reg.Workers) != 2 {
		t.Fatalf("worker registry = %q (found %v), want two workers", v, ok)
	}
	record := func(worker uint64) shared.WorkRecord {
		t.Helper()
		var w shared.WorkRecord
		v, _, ok := f.h.SharedData(testVMID, shared.WorkKey(worker))
		if !ok {
			t.Fatalf("no work record for worker %x", worker)
		}
		if err := w.Decode(v); err != nil {
			t.Fatalf("work record of worker %x: %v", worker, err)
		}
		return w
	}
	// Each worker sends requests that stay in flight: their entries move
	// at the next scrape (what it has not seen yet) and the rate is up.
	var open []*hostsim.Stream
	for i := range 6 {
		s, _ := f.open(i%2, "request "+strconv.Itoa(i)+" "+strings.Repeat("of some length ", 40))
		open = append(open, s)
	}
	defer func() {
		for _, s := range open {
			_ = s.Done()
		}
	}()
	rate := map[uint64]float64{}
	for tick := range 5 {
		before := map[uint64]shared.WorkRecord{}
		for _, w := range reg.Workers {
			before[w] = record(w)
		}
		f.advance(100 * time.Millisecond)
		for _, w := range reg.Workers {
			got, was := record(w), before[w]
			if got.WrittenNanos <= was.WrittenNanos {
				t.Fatalf("tick %d: worker %x's record written at %d, not after %d", tick, w, got.WrittenNanos, was.WrittenNanos)
			}
			if len(got.Patches) == 0 || got.Seq-was.Seq > uint32(len(got.Patches)) {
				t.Fatalf("tick %d: worker %x republished its whole record (seq %d -> %d, patches %v), want patches",
					tick, w, was.Seq, got.Seq, got.Patches)
			}
			if !(got.ArrivalPerSec > 0) || (tick > 0 && !(got.ArrivalPerSec < rate[w])) {
				t.Fatalf("tick %d: worker %x's rate %v after %v, want positive and decaying", tick, w, got.ArrivalPerSec, rate[w])
			}
			rate[w] = got.ArrivalPerSec
		}
	}
}

// TestWorkersShareArrivalRate: a worker that has dispatched nothing yet
// prices the externality of its first decision with the rate the other
// worker published (the decision header's x=): the fleet's arrivals are
// every router's.
func TestWorkersShareArrivalRate(t *testing.T) {
	f := newTestFleet(t, 2, 2, `,"decision_header":true`)
	f.advance(time.Second)
	for i := range 20 {
		f.route(0, "request "+strconv.Itoa(i))
	}
	s, _ := f.open(1, "the first request of worker 1")
	defer s.Done()
	if _, err := s.ResponseHeaders([][2]string{{":status", "200"}}, false); err != nil {
		t.Fatal(err)
	}
	if why := headerValue(s.ResponseHeaderMap(), HeaderDecision); !strings.Contains(why, " x=") {
		t.Fatalf("worker 1's first decision %q prices no externality after worker 0 sent 20 requests", why)
	}
}

// TestWorkersKeepIndexAcrossRebases: on BenchmarkRequestPath64's traffic
// with four worker VMs, the shared prefix index gets new bases again and
// again, and the workers go on with their own index (shared.PrefixShare's
// lineage) instead of decoding each: only a joining worker decodes one.
func TestWorkersKeepIndexAcrossRebases(t *testing.T) {
	longtest.Skip(t) // 3,000 requests on four workers through hostsim
	const encode, decode = "scoring_prefix.__Index_.AppendBinary", "scoring_prefix.__Index_.UnmarshalBinary"
	probe := hostsim.NewGuestProbe([]string{encode, decode})
	f := newBenchFleetOf(t, hostsim.Options{Probe: probe}, benchShape{workers: 4})
	for range 3000 {
		f.step()
	}
	bases, decodes := probe.Func("github.com_gpuroute_gpuroute_"+encode).Calls, probe.Func("github.com_gpuroute_gpuroute_"+decode).Calls
	if bases < 4 {
		t.Fatalf("%d new bases in 3,000 requests: the test shows nothing", bases)
	}
	if decodes > 3 {
		t.Fatalf("%d decodes of %d new bases, want at most one per joining worker (3)", decodes, bases)
	}
	for _, vm := range f.vms {
		if err := vm.Err(); err != nil {
			t.Fatalf("VM failed: %v", err)
		}
	}
}

// TestWorkersSharePrefillProgress: worker 0 starts a long prefill on one
// replica, then another on the second 300 ms later; worker 1, which sent
// neither, sees from worker 0's published windows that the first is further
// along (its remaining wait lower by about the head start), and sends its
// request there. Counted in full, the two replicas' waits were equal.
func TestWorkersSharePrefillProgress(t *testing.T) {
	f := newTestFleet(t, 2, 2, `,"decision_header":true`)
	f.advance(time.Second) // scraped: both idle
	long := func(tag string) string { return tag + strings.Repeat(" a long prompt of its own", 1300) }
	sa, early := f.open(0, long("first"))
	defer sa.Done()
	f.advance(300 * time.Millisecond)
	sb, late := f.open(0, long("second"))
	defer sb.Done()
	if early == late || early == "" || late == "" {
		t.Fatalf("worker 0 sent its two long prompts to %q and %q, want one per replica", early, late)
	}
	f.advance(200 * time.Millisecond)
	sc, got := f.open(1, "a short question")
	defer sc.Done()
	if _, err := sc.ResponseHeaders([][2]string{{":status", "200"}}, false); err != nil {
		t.Fatal(err)
	}
	why := headerValue(sc.ResponseHeaderMap(), HeaderDecision)
	wEarly, wLate := explainedWait(why, replicaName(early)), explainedWait(why, replicaName(late))
	if got != early || !(wLate-wEarly > 0.25) {
		t.Fatalf("worker 1 sent its request to %s with W %s = %.3f s, %s = %.3f s (%q); want %s, ahead by about 0.3 s",
			got, early, wEarly, late, wLate, why, early)
	}
}

// replicaName is the name of a testFleet replica by its address: r0 is at
// 10.0.0.1:8000.
func replicaName(addr string) string {
	host, _, _ := strings.Cut(strings.TrimPrefix(addr, "10.0.0."), ":")
	i, err := strconv.Atoi(host)
	if err != nil {
		return "?" + addr
	}
	return "r" + strconv.Itoa(i-1)
}

// explainedWait returns the w= figure for the replica named name in an
// x-gpuroute-decision value, or -1.
func explainedWait(explain, name string) float64 {
	_, rest, ok := strings.Cut(explain, "; "+name+" w=")
	if !ok {
		return -1
	}
	v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// TestWorkersShareAdapterPlacements: after a tick, a worker sends a LoRA
// adapter where another worker already loaded it, rather than loading it on
// a second replica.
func TestWorkersShareAdapterPlacements(t *testing.T) {
	adapters := []string{"sql", "legal", "med", "code", "chat", "math"}
	var cfg strings.Builder
	cfg.WriteString(`,"adapters":{`)
	for i, a := range adapters {
		if i > 0 {
			cfg.WriteByte(',')
		}
		cfg.WriteString(`"` + a + `":"llama-3-8b"`)
	}
	// Flow control off: the adapters' loads put every replica's W over
	// the hold bound, and this test is about where they are loaded.
	cfg.WriteString(`},"flow_control":{"enabled":false}`)
	f := newTestFleet(t, 2, 4, cfg.String())
	f.advance(time.Second)
	send := func(w int, adapter, q string) string {
		s, err := f.vms[w].Root(testRootID).NewStream()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(map[string]any{"model": adapter, "messages": []map[string]string{{"role": "user", "content": q}}})
		if _, err := s.RequestHeaders(baseRequest, false); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RequestBody(b, true); err != nil {
			t.Fatal(err)
		}
		dst, _ := s.RequestHeader(HeaderDestination)
		if err := s.Done(); err != nil {
			t.Fatal(err)
		}
		return dst
	}
	// Long prompts that differ from their first block: their rendezvous
	// homes differ, so only shared placement knowledge makes them agree.
	long := strings.Repeat(" with enough words to fill several prefix blocks", 12)
	homes := map[string]string{}
	for _, a := range adapters {
		homes[a] = send(0, a, "first question for "+a+long)
	}
	f.advance(150 * time.Millisecond) // a tick: placements and the index are shared
	for _, a := range adapters {
		if dst := send(1, a, "another question, for "+a+" this time"+long); dst != homes[a] {
			t.Errorf("worker 1 sent %s to %s; worker 0 had loaded it on %s", a, dst, homes[a])
		}
	}
}

// TestIdleWorkersLeaveIndexAlone: once dispatches stop, no worker rewrites
// the shared prefix index (each rewrite makes every other worker apply it
// on its next tick).
func TestIdleWorkersLeaveIndexAlone(t *testing.T) {
	f := newTestFleet(t, 4, 4, "")
	f.advance(200 * time.Millisecond)
	for i := range 8 {
		f.route(i%4, strings.Repeat("shared system prompt. ", 40)+strconv.Itoa(i))
	}
	f.advance(300 * time.Millisecond) // every worker merges its dispatches
	_, before, ok := f.h.SharedData(testVMID, shared.KeyPrefixShare)
	if !ok {
		t.Fatal("no shared prefix index after 8 dispatches")
	}
	f.advance(time.Second)
	if _, after, _ := f.h.SharedData(testVMID, shared.KeyPrefixShare); after != before {
		t.Errorf("shared prefix index CAS went %d -> %d over 10 idle ticks, want it untouched", before, after)
	}
}

// TestPrefixShareTailAndBase: workers share placements by appending to the
// shared index's tail and, once the tail outgrows the base (repeated
// prefixes add to the tail only), by replacing the base; across both,
// every worker finds every prefix warm at its home, including the
// prefixes it has never sent itself (each round moves each prefix to the
// next worker). Homes alone would agree without sharing (rendezvous on an
// idle fleet); the prefix-hit tokens would not.
func TestPrefixShareTailAndBase(t *testing.T) {
	f := newTestFleet(t, 3, 8, "")
	f.advance(200 * time.Millisecond)
	gen := func() uint64 {
		v, _, ok := f.h.SharedData(testVMID, shared.KeyPrefixShare)
		var sh shared.PrefixShare
		if !ok || sh.Decode(v) != nil {
			t.Fatalf("shared prefix index missing or unreadable (%d bytes)", len(v))
		}
		return sh.Gen
	}
	const prefixes, rounds = 24, 8
	system := func(p int) string { return strings.Repeat("tenant "+strconv.Itoa(p)+" shared context. ", 600) }
	homes := make([]string, prefixes)
	gens := map[uint64]bool{}
	for round := range rounds {
		hits0 := f.metric(statPrefixHitTokens)
		for p := range prefixes {
			w := (p + round) % 3
			dst := f.route(w, system(p)+"question "+strconv.Itoa(round))
			switch {
			case round == 0:
				homes[p] = dst
			case dst != homes[p]:
				t.Errorf("round %d, prefix %d: worker %d sent it to %s, want its home %s", round, p, w, dst, homes[p])
			}
		}
		// Two ticks: a worker whose tick comes first sees the others'
		// placements of this round on its next; the round's tallies
		// reach the host.
		f.advance(200 * time.Millisecond)
		gens[gen()] = true
		// ~4,000-token prefixes; k counts whole 256-token checkpoints.
		if hits := f.metric(statPrefixHitTokens) - hits0; round > 0 && hits < prefixes*3500 {
			t.Errorf("round %d: %d prefix-hit tokens over %d dispatches of shared ~4,000-token prefixes, want >= %d",
				round, hits, prefixes, prefixes*3500)
		}
	}
	if len(gens) < 2 {
		t.Errorf("the shared index kept one base over %d dispatches, want the tail folded into a new base", prefixes*rounds)
	}
}

// TestPrefixShareGarbage: a shared prefix index no worker can read (another
// program's value under the key, a torn tail) is logged, replaced by a
// readable one at the next merge, and routing goes on; what the workers
// place afterwards is shared again.
func TestPrefixShareGarbage(t *testing.T) {
	good := shared.AppendPrefixShareEntry(shared.AppendPrefixShareHeader(nil, 1, fleetConfigID(4), 0, 0, 0), 0, []uint64{1, 2})
	shared.SetPrefixShareBase(good[:shared.PrefixShareHeaderLen]) // base: nothing, so the entry is the tail
	for _, tc := range []struct {
		name  string
		value []byte
	}{
		{"not a share", []byte("hello")},
		{"torn tail", good[:len(good)-3]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newTestFleet(t, 2, 4, "")
			f.advance(200 * time.Millisecond)
			f.h.SetSharedData(testVMID, shared.KeyPrefixShare, tc.value, 0)
			system := strings.Repeat("a tenant's shared context. ", 400)
			home := f.route(0, system+"first")
			if home == "" {
				t.Fatal("request not routed with an unreadable shared prefix index")
			}
			f.advance(300 * time.Millisecond)
			if logsWith(f.h, "shared prefix index unreadable") == 0 {
				t.Errorf("no worker logged the unreadable shared prefix index")
			}
			v, _, _ := f.h.SharedData(testVMID, shared.KeyPrefixShare)
			var sh shared.PrefixShare
			if err := sh.Decode(v); err != nil {
				t.Fatalf("shared prefix index after a merge: %v, want a readable one", err)
			}
			hits0 := f.metric(statPrefixHitTokens)
			dst := f.route(1, system+"follow-up")
			f.advance(100 * time.Millisecond) // its tallies reach the host at the tick
			if hits := f.metric(statPrefixHitTokens) - hits0; dst != home || hits == 0 {
				t.Errorf("worker 1's follow-up went to %s with %d prefix-hit tokens, want %s, warm", dst, hits, home)
			}
		})
	}
}

// TestPrefixShareGarbageLoggedOnce: idle workers facing the same
// unreadable shared index log it once each, not on every tick.
func TestPrefixShareGarbageLoggedOnce(t *testing.T) {
	f := newTestFleet(t, 2, 4, "")
	f.advance(200 * time.Millisecond)
	f.h.SetSharedData(testVMID, shared.KeyPrefixShare, []byte("not a share"), 0)
	f.advance(time.Second) // 10 ticks per worker, nothing dispatched
	if warned := logsWith(f.h, "shared prefix index unreadable"); warned != 2 {
		t.Errorf("2 idle workers logged the same unreadable index %d times over 10 ticks, want once each", warned)
	}
}

// TestScraperRole: a VM configured with "role":"scraper" (an Envoy
// bootstrap service on the main thread) takes the scrape lease from the
// worker holding it, publishes what the workers route on, stays out of the
// worker list they read on every request, and when it goes away a worker
// scrapes again.
func TestScraperRole(t *testing.T) {
	const status = `,"status_path":"/status"`
	f := newTestFleet(t, 2, 2, status)
	f.advance(time.Second)
	if l := lease(t, f.h); l.Holder == 0 || l.Holder&shared.ScraperBit != 0 {
		t.Fatalf("lease before the scraper = %+v, want a worker's", l)
	}
	if st := f.status(0); st.Scraping != "worker" {
		t.Errorf("status before the scraper: scraping %q, want \"worker\"", st.Scraping)
	}
	scraper, err := f.h.NewVM(context.Background(), f.mod, testVMID, nil)
	if err != nil {
		t.Fatalf("NewVM = %v", err)
	}
	if _, err := scraper.Configure(testRootID, []byte(f.config(status+`,"role":"scraper"`, nil))); err != nil {
		t.Fatalf("Configure(scraper) = %v", err)
	}
	f.advance(time.Second)
	if l := lease(t, f.h); l.Holder&shared.ScraperBit == 0 {
		t.Fatalf("lease with a scraper running = %+v, want the scraper's (holder with shared.ScraperBit)", l)
	}
	for w := range f.vms {
		if st := f.status(w); st.Leader || st.Scraping != "scraper" {
			t.Errorf("worker %d status with the scraper running: leader %v, scraping %q; want false, \"scraper\"", w, st.Leader, st.Scraping)
		}
	}
	v, _, ok := f.h.SharedData(testVMID, shared.KeyRegistry)
	var reg shared.Registry
	if !ok || reg.Decode(v) != nil || len(reg.Workers) != 2 {
		t.Fatalf("worker list = %v (found %v), want the 2 workers", reg.Workers, ok)
	}
	for _, id := range reg.Workers {
		if id&shared.ScraperBit != 0 {
			t.Fatalf("worker list %v holds the scraper", reg.Workers)
		}
	}
	before := f.replicas[1].count()
	f.replicas[0].set(func(r *fakeReplica) { r.waiting, r.running, r.kv = 40, 60, 0.9 })
	f.advance(time.Second)
	// One scraper: about one scrape per 100 ms tick, not one per VM.
	if n := f.replicas[1].count() - before; n < 8 || n > 13 {
		t.Errorf("scrapes of one replica in 1 s with the scraper leading = %d, want about 10", n)
	}
	for w := range f.vms {
		if dst := f.route(w, "after the scraper's scrape"); dst != "10.0.0.2:8000" {
			t.Fatalf("worker %d routed to %s; want the idle 10.0.0.2:8000 (the scraper saw 10.0.0.1 busy)", w, dst)
		}
	}
	if err := scraper.Close(); err != nil {
		t.Fatalf("Close(scraper) = %v", err)
	}
	before = f.replicas[1].count()
	f.advance(2 * time.Second)
	if got := f.replicas[1].count() - before; got < 5 {
		t.Fatalf("after the scraper left: %d scrapes in 2 s, want a worker scraping (≥ 5)", got)
	}
	if l := lease(t, f.h); l.Holder&shared.ScraperBit != 0 {
		t.Errorf("lease after the scraper left = %+v, want a worker's", l)
	}
}

// lease decodes the scrape lease in h's shared data.
func lease(t *testing.T, h *hostsim.Host) shared.Lease {
	t.Helper()
	var l shared.Lease
	v, _, ok := h.SharedData(testVMID, shared.KeyLease)
	if !ok || l.Decode(v) != nil {
		t.Fatalf("scrape lease missing or unreadable (found %v)", ok)
	}
	return l
}
