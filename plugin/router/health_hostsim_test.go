package router

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuroute/gpuroute/hostsim"
)

// Responses as Envoy hands them to the filter: an upstream's answer has
// x-envoy-upstream-service-time, Envoy's local reply does not.
var (
	respUpstream200 = [][2]string{{":status", "200"}, {"x-envoy-upstream-service-time", "3"}, {"server", "envoy"}}
	respUpstream503 = [][2]string{{":status", "503"}, {"x-envoy-upstream-service-time", "3"}, {"server", "envoy"}}
	respLocal503    = [][2]string{{":status", "503"}, {"content-type", "text/plain"}, {"server", "envoy"}}
)

// answer runs a request on worker w to its response (headers only,
// end of stream) and returns where it was routed.
func (f *testFleet) answer(w int, content string, resp [][2]string, props map[string]string) string {
	f.t.Helper()
	s, dst := f.open(w, content)
	for k, v := range props {
		s.SetProperty(k, []byte(v))
	}
	if dst != "" {
		if _, err := s.ResponseHeaders(resp, true); err != nil {
			f.t.Fatalf("ResponseHeaders = %v", err)
		}
	}
	if err := s.Done(); err != nil {
		f.t.Fatalf("Done = %v", err)
	}
	return dst
}

// status reads worker w's status endpoint.
func (f *testFleet) status(w int) statusDoc {
	f.t.Helper()
	var doc statusDoc
	f.statusInto(w, &doc)
	return doc
}

// statusInto decodes worker w's status endpoint into doc.
func (f *testFleet) statusInto(w int, doc any) {
	f.t.Helper()
	s, err := f.vms[w].Root(testRootID).NewStream()
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := s.RequestHeaders([][2]string{{":method", "GET"}, {":path", "/status"}, {":authority", "gw"}}, true); err != nil {
		f.t.Fatal(err)
	}
	lr := s.LocalReply()
	_ = s.Done()
	if lr == nil {
		f.t.Fatal("status endpoint did not answer")
	}
	if err := json.Unmarshal(lr.Body, doc); err != nil {
		f.t.Fatalf("status body %q: %v", lr.Body, err)
	}
}

type statusDoc struct {
	Leader   bool            `json:"leader"`
	Scraping string          `json:"scraping"`
	Replicas []statusReplica `json:"replicas"`
}

// statusReplica is one replica of a statusDoc.
type statusReplica struct {
	Name             string  `json:"name"`
	Healthy          bool    `json:"healthy"`
	Stale            bool    `json:"stale"`
	ScrapeAgeMs      *int64  `json:"scrape_age_ms"`
	PassiveFailures  int     `json:"passive_failures"`
	PassiveEjections int     `json:"passive_ejections"`
	EjectedForMs     *int64  `json:"ejected_for_ms"`
	Waiting          int     `json:"waiting"`
	Running          int     `json:"running"`
	KVUsage          float64 `json:"kv_usage"`
	ScrapeFailures   int     `json:"scrape_failures"`
}

const (
	addrR0 = "10.0.0.1:8000"
	addrR1 = "10.0.0.2:8000"
)

// busyR1 makes r1 report a long queue so requests prefer r0 even when it
// is uncertain (stale penalty): only an ejection moves them.
func busyR1(f *testFleet) {
	f.replicas[1].set(func(r *fakeReplica) { r.waiting, r.running = 200, 256 })
	f.advance(300 * time.Millisecond)
}

// TestPassiveEjection: Envoy's local 503s for r0 (a refused connection)
// eject it after passive_failures in a row; every worker avoids it at once
// (no tick in between); the ejection ends after the backoff, the next
// failure ejects it again for twice as long, and a 2xx clears it.
func TestPassiveEjection(t *testing.T) {
	// Flow control off: the replicas report queues over its hold bound.
	f := newTestFleet(t, 2, 2, `,"status_path":"/status","flow_control":{"enabled":false}`)
	busyR1(f)
	for i := range 3 {
		if dst := f.answer(0, "q"+strconv.Itoa(i), respLocal503, nil); dst != addrR0 {
			t.Fatalf("request %d before the ejection went to %s, want %s", i, dst, addrR0)
		}
		if i < 2 && f.metric(statPassiveEjects) != 0 {
			t.Fatalf("%s after %d failures = %d, want 0", statPassiveEjects, i+1, f.metric(statPassiveEjects))
		}
	}
	if n := f.metric(statPassiveEjects); n != 1 {
		t.Fatalf("%s after 3 local 503s = %d, want 1", statPassiveEjects, n)
	}
	for i := range 10 {
		if dst := f.route(1, "after "+strconv.Itoa(i)); dst != addrR1 {
			t.Fatalf("worker 1 request %d right after the ejection went to %s, want %s", i, dst, addrR1)
		}
	}
	st := f.status(1).Replicas[0]
	if st.Healthy || st.EjectedForMs == nil || *st.EjectedForMs <= 0 || *st.EjectedForMs > 2000 || st.PassiveEjections != 1 {
		t.Errorf("status of r0 while ejected = %+v, want unhealthy, ejected for ≤ 2000 ms, 1 ejection", st)
	}
	f.advance(2100 * time.Millisecond)
	if dst := f.answer(0, "probe", respLocal503, nil); dst != addrR0 {
		t.Fatalf("request after the backoff went to %s, want %s back", dst, addrR0)
	}
	if n := f.metric(statPassiveEjects); n != 2 {
		t.Fatalf("%s after one failure past the first ejection = %d, want 2", statPassiveEjects, n)
	}
	if st := f.status(0).Replicas[0]; st.EjectedForMs == nil || *st.EjectedForMs <= 2000 || *st.EjectedForMs > 4000 {
		t.Errorf("second ejection: status %+v, want ejected for (2000, 4000] ms", st)
	}
	f.advance(4100 * time.Millisecond)
	if dst := f.answer(1, "good", respUpstream200, nil); dst != addrR0 {
		t.Fatalf("request after the second backoff went to %s, want %s", dst, addrR0)
	}
	if st := f.status(0).Replicas[0]; !st.Healthy || st.PassiveEjections != 0 || st.PassiveFailures != 0 || st.EjectedForMs != nil {
		t.Errorf("status of r0 after a 2xx = %+v, want healthy with nothing against it", st)
	}
}

// TestPassiveSignal: only Envoy's own 5xx count; a replica's own 503 (it
// carries x-envoy-upstream-service-time, or response.code_details says
// via_upstream) does not, and passive_failures 0 turns the check off.
func TestPassiveSignal(t *testing.T) {
	details := hostsim.PropertyPath("response", "code_details")
	tests := []struct {
		name  string
		extra string
		resp  [][2]string
		props map[string]string
		want  int64 // ejections after 5 such responses
	}{
		{name: "local 503", resp: respLocal503, want: 1},
		{name: "local 504", resp: [][2]string{{":status", "504"}}, want: 1},
		{name: "local 502 with details", resp: [][2]string{{":status", "502"}},
			props: map[string]string{details: "upstream_reset_before_response_started{connection_failure}"}, want: 1},
		{name: "upstream 503", resp: respUpstream503, want: 0},
		{name: "upstream 503 by details", resp: respLocal503, props: map[string]string{details: "via_upstream"}, want: 0},
		{name: "local 500", resp: [][2]string{{":status", "500"}}, want: 0},
		{name: "local 429", resp: [][2]string{{":status", "429"}}, want: 0},
		{name: "off", extra: `,"passive_failures":0`, resp: respLocal503, want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newTestFleet(t, 1, 2, tc.extra)
			busyR1(f)
			for i := range 5 {
				f.answer(0, "q"+strconv.Itoa(i), tc.resp, tc.props)
			}
			if n := f.metric(statPassiveEjects); n != tc.want {
				t.Errorf("%s after 5 responses %v %v = %d, want %d", statPassiveEjects, tc.resp, tc.props, n, tc.want)
			}
		})
	}
}

// TestScrapePerReplica: a silent metrics endpoint holds back only its own
// scrapes; the others are scraped every tick.
func TestScrapePerReplica(t *testing.T) {
	f := newTestFleet(t, 2, 3, `,"scrape_timeout_ms":1000`)
	f.replicas[0].set(func(r *fakeReplica) { r.silent = true })
	before := []int{f.replicas[0].count(), f.replicas[1].count(), f.replicas[2].count()}
	f.advance(3 * time.Second)
	if n := f.replicas[0].count() - before[0]; n > 4 {
		t.Errorf("silent replica scraped %d times in 3 s with a 1 s timeout, want ≤ 4 (one call at a time)", n)
	}
	for i := 1; i < 3; i++ {
		if n := f.replicas[i].count() - before[i]; n < 27 {
			t.Errorf("healthy replica %d scraped %d times in 3 s at 100 ms ticks beside a silent one, want ≥ 27", i, n)
		}
	}
}

// TestStaleButAnswering: a replica whose metrics went silent but which
// keeps answering 2xx is not treated as stale (it keeps traffic); one
// whose last response is older than stale_after_ms is.
func TestStaleButAnswering(t *testing.T) {
	f := newTestFleet(t, 1, 2, `,"status_path":"/status","unhealthy_after_failures":1000,"scrape_timeout_ms":50`)
	f.advance(300 * time.Millisecond)
	f.replicas[0].set(func(r *fakeReplica) { r.silent = true })
	got := map[string]int{} // routed after the metrics are 2.2 s old
	for i := range 300 {    // 3 s of traffic, 100 requests a second
		dst := f.answer(0, strings.Repeat("tenant "+strconv.Itoa(i%8)+" context, ", 6)+strconv.Itoa(i), respUpstream200, nil)
		if i >= 220 {
			got[dst]++
		}
		f.advance(10 * time.Millisecond)
	}
	st := f.status(0).Replicas[0]
	if st.Stale || st.ScrapeAgeMs == nil || *st.ScrapeAgeMs < 2500 {
		t.Errorf("r0 answering with metrics silent for 3 s: status %+v (age %d), want stale false and scrape age ≥ 2500 ms (routed %v)", st, *st.ScrapeAgeMs, got)
	}
	if got[addrR0] < 20 {
		t.Errorf("requests routed 2.2–3 s into r0's silent metrics = %v, want r0 still served (≥ 20 of 80)", got)
	}
	f.advance(2500 * time.Millisecond) // no traffic: the evidence ages out
	if st := f.status(0).Replicas[0]; !st.Stale {
		t.Errorf("r0 with no metrics and no response for 2.5 s: status %+v, want stale", st)
	}
}

// TestWallClockStepBack: after the wall clock steps back 10 minutes the
// plugin keeps routing and scraping, shows no negative ages, does not end
// a drain early, and an ejection from before the step does not last the
// 10 minutes.
func TestWallClockStepBack(t *testing.T) {
	f := newTestFleet(t, 2, 2, `,"status_path":"/status"`)
	busyR1(f)
	for i := range 3 {
		f.answer(0, "q"+strconv.Itoa(i), respLocal503, nil)
	}
	if f.metric(statPassiveEjects) != 1 {
		t.Fatalf("%s = %d, want 1", statPassiveEjects, f.metric(statPassiveEjects))
	}
	f.replicas[1].set(func(r *fakeReplica) { r.waiting, r.running = 0, 0 })
	f.h.StepWallClock(-10 * time.Minute)
	for w := range f.vms {
		for _, st := range f.status(w).Replicas {
			if st.ScrapeAgeMs != nil && *st.ScrapeAgeMs < 0 {
				t.Errorf("worker %d status right after the step: %+v, want no negative age", w, st)
			}
			if st.EjectedForMs != nil {
				t.Errorf("worker %d status right after the step: %s ejected for %d ms, want the pre-step ejection over", w, st.Name, *st.EjectedForMs)
			}
		}
	}
	f.advance(500 * time.Millisecond)
	for w := range f.vms {
		for _, st := range f.status(w).Replicas {
			if st.Stale || !st.Healthy {
				t.Errorf("worker %d status 500 ms after the step: %+v, want fresh and healthy (scrapes go on)", w, st)
			}
		}
	}
	seen := map[string]bool{}
	for i := range 40 {
		seen[f.answer(i%2, strings.Repeat("tenant "+strconv.Itoa(i)+" after the step, ", 8), respUpstream200, nil)] = true
	}
	if !seen[addrR0] || !seen[addrR1] {
		t.Errorf("destinations after the step = %v, want both replicas in use", seen)
	}
	// A drain deadline 2 s ahead of the stepped clock is not ended early.
	s, dst := f.open(0, "long")
	if _, err := s.ResponseHeaders(respUpstream200, false); err != nil {
		t.Fatal(err)
	}
	i := 0
	if dst == addrR1 {
		i = 1
	}
	deadline := f.h.WallTime().Add(2 * time.Second).UnixMilli()
	f.configure(f.config(`,"status_path":"/status"`, map[int]string{i: `"state":"draining","drain_deadline_ms":` + strconv.FormatInt(deadline, 10)}))
	f.advance(1500 * time.Millisecond)
	if s.Ended() {
		t.Errorf("stream on a draining replica ended 0.5 s before its deadline after a backward step")
	}
	f.advance(700 * time.Millisecond)
	if !s.Ended() {
		t.Errorf("stream on a draining replica still open past its deadline")
	}
	_ = s.Done()
}
