package router

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuroute/gpuroute/hostsim"
	"github.com/gpuroute/gpuroute/plugin/shared"
	"github.com/gpuroute/gpuroute/plugin/version"
)

// TestCanaryLeavesNoTrace: the configuration canary (the throwaway VM Envoy
// configures first and destroys without proxy_on_done) takes no worker id,
// joins no worker list, takes no lease and scrapes nothing; the worker's
// own first tick, firstTickMillis later, does all of it.
func TestCanaryLeavesNoTrace(t *testing.T) {
	f := newTestFleet(t, 1, 2, "")
	if got := f.h.Canaries(); got != 1 {
		t.Fatalf("Canaries() after one configuration = %d, want 1", got)
	}
	for _, key := range []string{shared.KeyWorkerSeq, shared.KeyRegistry, shared.KeyLease, shared.KeySnapshot} {
		if _, _, ok := f.h.SharedData(testVMID, key); ok {
			t.Errorf("shared data %q after configuration, before any tick: present, want absent", key)
		}
	}
	if n := f.replicas[0].count() + f.replicas[1].count(); n != 0 {
		t.Errorf("scrapes after configuration, before any tick = %d, want 0", n)
	}
	f.advance(firstTickMillis * time.Millisecond)
	if l := lease(t, f.h); l.Holder == 0 {
		t.Errorf("lease after the first tick = %+v, want held", l)
	}
	if n := f.replicas[0].count() + f.replicas[1].count(); n != 2 {
		t.Errorf("scrapes after the first tick = %d, want 2", n)
	}
	if _, _, ok := f.h.SharedData(testVMID, shared.KeyRegistry); !ok {
		t.Errorf("worker list after the first tick: absent, want the worker")
	}
}

// configOf renders a configuration of f's replicas in the order given
// (indices into f.replicas), so a test can add, remove and renumber them.
func (f *testFleet) configOf(order []int, extra string) string {
	var b strings.Builder
	b.WriteString(`{"tick_ms":100,"replicas":[`)
	for k, i := range order {
		if k > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"name":"r` + strconv.Itoa(i) + `","address":"10.0.0.` + strconv.Itoa(i+1) +
			`:8000","metrics_cluster":"r` + strconv.Itoa(i) + `-metrics"}`)
	}
	b.WriteString("]" + extra + "}")
	return b.String()
}

// statusJSON reads worker w's status endpoint as a generic JSON value.
func (f *testFleet) statusJSON(w int) map[string]any {
	f.t.Helper()
	var doc map[string]any
	f.statusInto(w, &doc)
	return doc
}

// decisionOf reads the chosen replica's name and cached tokens from an
// x-gpuroute-decision value ("chosen=NAME reason=…; NAME w=… k=K …").
func decisionOf(explain string) (name string, cached int) {
	head, rest, _ := strings.Cut(explain, "; ")
	name = strings.TrimPrefix(strings.Fields(head)[0], "chosen=")
	for _, f := range strings.Fields(rest) {
		if k, ok := strings.CutPrefix(f, "k="); ok {
			cached, _ = strconv.Atoi(strings.TrimSuffix(k, ";"))
			break
		}
	}
	return name, cached
}

// answered runs one whole request on worker w, its response included, and
// returns its decision header.
func (f *testFleet) answered(w int, content string) string {
	f.t.Helper()
	s, _ := f.open(w, content)
	if _, err := s.ResponseHeaders([][2]string{{":status", "200"}}, false); err != nil {
		f.t.Fatal(err)
	}
	explain, _ := s.ResponseHeader(HeaderDecision)
	if _, err := s.ResponseBody([]byte(oneTokenSSE), true); err != nil {
		f.t.Fatal(err)
	}
	if err := s.Done(); err != nil {
		f.t.Fatal(err)
	}
	return explain
}

// oneTokenSSE is a streamed completion's one event and its end.
const oneTokenSSE = "data: {\"choices\":[{\"text\":\"x\"}]}\n\ndata: [DONE]\n\n"

// TestNoOpReconfigure: a configuration change that changes nothing the
// routing reads (the same replicas, another lease) changes nothing the
// operator sees or the decision uses: a stream in flight across it still
// counts (in_flight went from 1 to 0 while the replica still streamed),
// the status reads the same but for the root, and a follow-up prompt finds
// its prefix where it was.
func TestNoOpReconfigure(t *testing.T) {
	extra := `,"status_path":"/status","decision_header":true`
	f := newTestFleet(t, 2, 4, extra)
	f.advance(300 * time.Millisecond)
	system := strings.Repeat("the shared system prompt of one tenant. ", 100)
	f.answered(0, system+"first question")
	f.advance(100 * time.Millisecond) // the workers share the prefix index
	s, dst := f.open(0, "another tenant's question")
	if dst == "" {
		t.Fatal("request not routed")
	}
	// The probes' texts differ from their first character on, so that
	// each finds the same cached prefix: the system prompt.
	want := f.answered(1, system+"A probe")
	f.advance(100 * time.Millisecond) // the stats' tallies reach Envoy
	before := f.statusJSON(0)

	f.configure(f.config(extra+`,"lease_ms":1000`, nil))
	after := f.statusJSON(0)
	delete(before, "root")
	delete(after, "root")
	if !reflect.DeepEqual(before, after) {
		t.Errorf("status after a no-op reconfiguration =\n%v\nwant as before\n%v", after, before)
	}
	if got := after["in_flight"]; got != 1.0 {
		t.Errorf("in_flight after the reconfiguration = %v, want 1 (the stream still runs)", got)
	}
	got := f.answered(1, system+"B probe")
	gn, gk := decisionOf(got)
	if wn, wk := decisionOf(want); gn != wn || gk != wk || gk == 0 {
		t.Errorf("follow-up after the reconfiguration: %q, want the same choice and cached tokens (> 0) as before: %q", got, want)
	}
	if err := s.Done(); err != nil {
		t.Fatal(err)
	}
	f.advance(100 * time.Millisecond)
	if got := f.statusJSON(0)["in_flight"]; got != 0.0 {
		t.Errorf("in_flight after the stream ended = %v, want 0", got)
	}
}

// scaleLoad is TestScaleUnderLoad's traffic: two workers take a request
// every 20 ms from 12 tenants in turn, each with a long system prompt of
// its own; a response's first token comes 30 ms after its request, its
// end 200 ms after it, every tenth 2 s after. A stream the plugin resets
// is sent again, as the client or Envoy's retry would.
type scaleLoad struct {
	t        *testing.T
	f        *testFleet
	systems  []string
	flights  []*scaleFlight
	seq      int
	routable map[string]bool // the configured replicas' addresses
}

// scaleFlight is one request of a scaleLoad; times are the host's.
type scaleFlight struct {
	s                *hostsim.Stream
	tenant           int
	dst              string
	openedAt         time.Duration
	firstAt, endAt   time.Duration
	started          bool
	answered, resent bool
	reset            bool
	resetAt          time.Duration
}

// route sets the replicas a request may go to: order's.
func (l *scaleLoad) route(order []int) {
	clear(l.routable)
	for _, i := range order {
		l.routable["10.0.0."+strconv.Itoa(i+1)+":8000"] = true
	}
}

func (l *scaleLoad) open(tenant int) {
	l.t.Helper()
	l.seq++
	now := l.f.h.Now()
	s, dst := l.f.open(l.seq%2, l.systems[tenant]+"question "+strconv.Itoa(l.seq))
	if !l.routable[dst] {
		l.t.Fatalf("request %d of tenant %d at %v went to %q, want a configured replica", l.seq, tenant, now, dst)
	}
	fl := &scaleFlight{s: s, tenant: tenant, dst: dst, openedAt: now, firstAt: now + 30*time.Millisecond, endAt: now + 200*time.Millisecond}
	if l.seq%10 == 0 {
		fl.endAt = now + 2*time.Second
	}
	s.OnReset(func() { fl.reset, fl.resetAt = true, l.f.h.Now() })
	l.flights = append(l.flights, fl)
}

// run drives the load for d; with quiet, no new request opens (the open
// ones go on).
func (l *scaleLoad) run(d time.Duration, quiet bool) {
	l.t.Helper()
	for end := l.f.h.Now() + d; l.f.h.Now() < end; {
		now := l.f.h.Now()
		if !quiet {
			l.open(l.seq % len(l.systems))
		}
		for _, fl := range l.flights {
			if fl.answered || fl.s.Ended() {
				continue
			}
			if !fl.started && fl.firstAt <= now {
				fl.started = true
				_, _ = fl.s.ResponseHeaders([][2]string{{":status", "200"}}, false)
				_, _ = fl.s.ResponseBody([]byte("data: {\"choices\":[{\"text\":\"x\"}]}\n\n"), false)
			}
			if fl.endAt <= now {
				_, _ = fl.s.ResponseBody([]byte("data: [DONE]\n\n"), true)
				_ = fl.s.Done()
				fl.answered = true
			}
		}
		for _, fl := range l.flights {
			if fl.reset && !fl.resent {
				fl.resent = true
				l.open(fl.tenant)
			}
		}
		l.f.advance(20 * time.Millisecond)
	}
}

// inFlight counts the streams still open.
func (l *scaleLoad) inFlight() int {
	n := 0
	for _, fl := range l.flights {
		if !fl.answered && !fl.reset {
			n++
		}
	}
	return n
}

// probe asks, for every tenant in turn on alternate workers, where a new
// prompt of it goes and with how many cached tokens there. Tags start with
// distinct characters, so that each probe finds only its system prompt
// cached.
func (l *scaleLoad) probe(tag string) []string {
	out := make([]string, len(l.systems))
	for i, system := range l.systems {
		out[i] = l.f.answered(i%2, system+tag)
	}
	return out
}

// statusInFlight sums the in-flight requests the workers' status endpoints
// show: the gateway's on the configured replicas, and each worker's on
// the removed ones it still drains.
func (l *scaleLoad) statusInFlight() int {
	n := int(l.f.statusJSON(0)["in_flight"].(float64))
	for w := range l.f.vms {
		for _, r := range l.f.statusJSON(w)["replicas"].([]any) {
			if rep := r.(map[string]any); rep["removed"] == true {
				n += int(rep["in_flight"].(float64))
			}
		}
	}
	return n
}

// TestScaleUnderLoad scales a fleet from 4 replicas to 8 and then to 3
// through configuration changes, each renumbering the replicas it keeps,
// under a steady load on two workers: every request is routed to a
// configured replica; the in-flight work counts on across each change; each
// tenant whose prompts' home is kept finds its prefix there as before (a
// probe of every tenant, with the load paused, before and after the
// change); the streams left on the removed replicas end by their drain
// deadline (removed_drain_ms): the long ones are reset then and sent
// again, none before; and the removed replicas are then gone.
func TestScaleUnderLoad(t *testing.T) {
	const drain = 500 * time.Millisecond
	extra := `,"status_path":"/status","decision_header":true,"removed_drain_ms":` + strconv.Itoa(int(drain/time.Millisecond))
	f := newBareFleet(t, 2, 8)
	l := &scaleLoad{t: t, f: f, routable: map[string]bool{}}
	for i := range 12 {
		l.systems = append(l.systems, strings.Repeat("tenant "+strconv.Itoa(i)+" has a long system prompt of its own. ", 200))
	}
	four := []int{0, 1, 2, 3}
	f.configure(f.configOf(four, extra))
	l.route(four)
	f.advance(300 * time.Millisecond)
	l.run(time.Second, false)

	for k, step := range []struct {
		name  string
		order []int
	}{
		{"4 to 8", []int{4, 0, 5, 1, 6, 2, 7, 3}},
		{"8 to 3", []int{2, 0, 1}},
	} {
		l.run(300*time.Millisecond, true) // the short streams end
		before := l.probe(string(rune('A'+2*k)) + " probe " + step.name)
		open := l.inFlight()
		at := f.h.Now()
		f.configure(f.configOf(step.order, extra))
		l.route(step.order)
		f.advance(100 * time.Millisecond) // every worker republishes its work
		if got := l.statusInFlight(); got != open {
			t.Errorf("%s: in flight after the change = %d, want %d (the open streams)", step.name, got, open)
		}
		after := l.probe(string(rune('B'+2*k)) + " probe " + step.name)
		checked := 0
		for i := range before {
			home, k := decisionOf(before[i])
			if !slices.Contains(step.order, nameIndex(home)) {
				continue // its home was removed
			}
			if got, gk := decisionOf(after[i]); got != home || gk != k {
				t.Errorf("%s: tenant %d after the change: %q; want its home %s with k=%d, as before: %q", step.name, i, after[i], home, k, before[i])
			}
			checked++
		}
		if checked == 0 {
			t.Errorf("%s: no tenant's home was kept", step.name)
		}
		l.run(drain+400*time.Millisecond, false)
		// Resets: only of streams on removed replicas, within a tick of
		// their deadline.
		for _, fl := range l.flights {
			if fl.reset && fl.resetAt > at && (l.routable[fl.dst] || fl.resetAt < at+drain || fl.resetAt > at+drain+150*time.Millisecond) {
				t.Errorf("%s: stream to %s opened at %v reset at %v, want only those on removed replicas, within a tick of the deadline %v",
					step.name, fl.dst, fl.openedAt, fl.resetAt, at+drain)
			}
			if !fl.answered && !fl.reset && !l.routable[fl.dst] {
				t.Errorf("%s: stream to removed %s opened at %v still open past the deadline", step.name, fl.dst, fl.openedAt)
			}
		}
		for w := range f.vms {
			if reps := f.statusJSON(w)["replicas"].([]any); len(reps) != len(step.order) {
				t.Errorf("%s: worker %d's status lists %d replicas past the deadline, want %d (the removed ones gone)", step.name, w, len(reps), len(step.order))
			}
		}
	}
	resets := 0
	for _, fl := range l.flights {
		if fl.reset {
			resets++
		}
	}
	if resets == 0 || f.metric(statDrainResets) != int64(resets) {
		t.Errorf("%s = %d, streams reset %d; want equal and > 0 (the long streams on the removed replicas)", statDrainResets, f.metric(statDrainResets), resets)
	}
}

// nameIndex is the index of a testFleet replica by its name ("r3": 3).
func nameIndex(name string) int {
	i, err := strconv.Atoi(strings.TrimPrefix(name, "r"))
	if err != nil {
		return -1
	}
	return i
}

// TestStatusAggregatesWorkers: the status endpoint of either worker shows
// the whole Envoy, both workers' in-flight requests and decisions, in the
// configuration's words, with each replica's cached-prefix share and
// resident adapters; each replica has stats of its own.
func TestStatusAggregatesWorkers(t *testing.T) {
	f := newTestFleet(t, 2, 3, `,"status_path":"/status","adapters":{"sql-lora":"m"}`)
	f.configure(f.config(`,"status_path":"/status","adapters":{"sql-lora":"m"}`, map[int]string{2: `"state":"drained"`}))
	f.advance(300 * time.Millisecond)
	system := strings.Repeat("a system prompt both workers send. ", 100)
	var open []*hostsim.Stream
	for i := range 6 {
		s, dst := f.open(i%2, system+"question "+strconv.Itoa(i))
		if dst == "" {
			t.Fatalf("request %d not routed", i)
		}
		open = append(open, s)
		f.advance(100 * time.Millisecond) // shared between the workers, tallied
	}
	s, err := f.vms[1].Root(testRootID).NewStream()
	if err != nil {
		t.Fatal(err)
	}
	lora := `{"model":"sql-lora","messages":[{"role":"user","content":"select"}]}`
	if _, err := s.RequestHeaders(baseRequest, false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RequestBody([]byte(lora), true); err != nil {
		t.Fatal(err)
	}
	loraDst, _ := s.RequestHeader(HeaderDestination)
	open = append(open, s)
	f.advance(200 * time.Millisecond) // each worker's tick after the other's

	for w := range f.vms {
		doc := f.statusJSON(w)
		if doc["version"] != version.Release || doc["workers"] != 2.0 || doc["in_flight"] != float64(len(open)) || doc["held"] != 0.0 {
			t.Errorf("worker %d status: version %v, workers %v, in_flight %v, held %v; want %q, 2, %d, 0",
				w, doc["version"], doc["workers"], doc["in_flight"], doc["held"], version.Release, len(open))
		}
		total := 0.0
		for _, v := range doc["decisions"].(map[string]any) {
			total += v.(float64)
		}
		if total != float64(len(open)) {
			t.Errorf("worker %d status: decisions %v sum to %v, want %d (both workers')", w, doc["decisions"], total, len(open))
		}
		reps := doc["replicas"].([]any)
		var states []string
		shared := false
		for i, r := range reps {
			rep := r.(map[string]any)
			states = append(states, rep["state"].(string))
			if share, ok := rep["cached_prefix_share"].(float64); ok && share > 0.5 {
				shared = true
			}
			adapters := rep["adapters"].([]any)
			if want := "10.0.0." + strconv.Itoa(i+1) + ":8000"; (want == loraDst) != slices.Contains(adapters, any("sql-lora")) {
				t.Errorf("worker %d status: replica %d adapters %v, want sql-lora exactly where it was sent (%s)", w, i, adapters, loraDst)
			}
		}
		if !slices.Equal(states, []string{"active", "active", "drained"}) {
			t.Errorf("worker %d status: states %q, want active, active, drained (the configuration's words)", w, states)
		}
		if !shared {
			t.Errorf("worker %d status: no replica with a cached-prefix share over half, want the system prompt's home", w)
		}
	}
	var decisions int64
	for i := range 3 {
		decisions += f.metric("gpuroute_replica.r" + strconv.Itoa(i) + ".decisions_total")
	}
	if decisions != int64(len(open)) || f.metric("gpuroute_replica.r2.decisions_total") != 0 {
		t.Errorf("per-replica decisions sum to %d (r2 %d), want %d, none on the drained r2", decisions, f.metric("gpuroute_replica.r2.decisions_total"), len(open))
	}
	for _, s := range open {
		_ = s.Done()
	}
	f.advance(100 * time.Millisecond)
	for i := range 3 {
		if n := f.metric("gpuroute_replica.r" + strconv.Itoa(i) + ".in_flight"); n != 0 {
			t.Errorf("gpuroute_replica.r%d.in_flight after every stream ended = %d, want 0", i, n)
		}
	}
}

// TestReaddressedReplica: a replica that keeps its name but gets a new
// address (a restarted pod) is a cold engine there: the prefix cached at
// its old address is not expected at the new one, and the stream still on
// the old address drains as a removed replica's (its calibration, which is
// the hardware's, carries over: TestCalibrationAdopt).
func TestReaddressedReplica(t *testing.T) {
	extra := `,"status_path":"/status","decision_header":true`
	f := newTestFleet(t, 1, 2, extra)
	f.advance(300 * time.Millisecond)
	system := strings.Repeat("the prompt r1 holds. ", 200)
	var home *hostsim.Stream
	for i := 0; home == nil && i < 8; i++ {
		if s, dst := f.open(0, system+strconv.Itoa(i)); dst == addrR1 {
			home = s
		} else {
			_ = s.Done()
		}
	}
	if home == nil {
		t.Fatal("no request went to r1")
	}
	f.advance(100 * time.Millisecond)
	moved := `{"tick_ms":100,"replicas":[{"name":"r0","address":"10.0.0.1:8000","metrics_cluster":"r0-metrics"},` +
		`{"name":"r1","address":"10.0.0.9:8000","metrics_cluster":"r1-metrics"}]` + extra + `}`
	f.configure(moved)
	f.advance(100 * time.Millisecond)
	var retired map[string]any
	for _, r := range f.statusJSON(0)["replicas"].([]any) {
		if rep := r.(map[string]any); rep["removed"] == true {
			retired = rep
		}
	}
	if retired == nil || retired["address"] != addrR1 || retired["state"] != "draining" || retired["in_flight"] != 1.0 {
		t.Errorf("status of r1's old address after the move = %v, want it draining its one stream", retired)
	}
	probe := f.answered(0, system+"A probe")
	if !strings.Contains(probe, "r1 w=") {
		t.Fatalf("probe after the move: %q, want r1 listed", probe)
	}
	if _, rest, _ := strings.Cut(probe, "; r1 w="); !strings.Contains(strings.Split(rest, ";")[0], " k=0") {
		t.Errorf("probe after the move: %q, want r1 at its new address cold (k=0)", probe)
	}
	_ = home.Done()
}
