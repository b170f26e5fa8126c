package fleetsim

import (
	"slices"
	"testing"
	"time"
)

// runOf builds a result as sim.result does, from latencies and counts.
func runOf(ttft []float64, hits, queries, outTok int64, span time.Duration, drainSec float64, afterClose int) *Result {
	r := &Result{TTFTSec: slices.Clone(ttft), E2ESec: slices.Clone(ttft), PrefixHits: hits, PrefixQueries: queries,
		OutputTokens: outTok, Span: span}
	r.Summary.Policy = "p"
	r.Summary.Completed = len(ttft)
	r.Summary.Drain = DrainSummary{DeadlineSec: 20, FinishedSec: drainSec, NewAfterClose: afterClose}
	r.summarize()
	return r
}

func TestPool(t *testing.T) {
	// Two seeds: the first fast with one slow request, the second uniform.
	a := runOf([]float64{0.1, 0.1, 0.1, 5}, 90, 100, 400, 10*time.Second, 12, 0)
	b := runOf([]float64{1, 1, 1, 1, 1, 1}, 10, 300, 600, 30*time.Second, 19.5, 1)
	p := Pool([]*Result{a, b})
	s := p.Summary
	checks := []struct {
		name      string
		got, want float64
	}{
		{"TTFTMeanSec", s.TTFTMeanSec, (0.3 + 5 + 6) / 10},
		{"TTFTP50Sec", s.TTFTP50Sec, 1},
		{"TTFTP99Sec", s.TTFTP99Sec, 5},
		{"PrefixHitRate", s.PrefixHitRate, 100.0 / 400},   // weighed by lookups, not the mean of 0.9 and 0.033
		{"ThroughputTokS", s.ThroughputTokS, 1000.0 / 40}, // summed tokens over summed spans
		{"Completed", float64(s.Completed), 10},           //
		{"Drain.FinishedSec", s.Drain.FinishedSec, 19.5},  // the longest drain
		{"Drain.NewAfterClose", float64(s.Drain.NewAfterClose), 1},
		{"Seeds", float64(s.Seeds), 2},
	}
	for _, c := range checks {
		if d := c.got - c.want; d > 1e-9 || d < -1e-9 {
			t.Errorf("Pool(a, b).%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if want := []float64{a.Summary.TTFTMeanSec, b.Summary.TTFTMeanSec}; !slices.Equal(s.TTFTMeanBySeedSec, want) {
		t.Errorf("Pool(a, b).TTFTMeanBySeedSec = %v, want %v", s.TTFTMeanBySeedSec, want)
	}
	if want := []float64{5, 1}; !slices.Equal(s.TTFTP99BySeedSec, want) {
		t.Errorf("Pool(a, b).TTFTP99BySeedSec = %v, want %v", s.TTFTP99BySeedSec, want)
	}
	if !slices.IsSorted(p.TTFTSec) || len(p.TTFTSec) != 10 {
		t.Errorf("Pool(a, b).TTFTSec = %v, want the 10 latencies sorted", p.TTFTSec)
	}
	if a.Summary.TTFTMeanSec != (0.3+5)/4 || len(a.TTFTSec) != 4 {
		t.Errorf("Pool modified its input: a.TTFTMeanSec = %v, %d latencies", a.Summary.TTFTMeanSec, len(a.TTFTSec))
	}
	if one := Pool([]*Result{b}); one != b || one.Summary.Seeds != 0 {
		t.Errorf("Pool(b) = %p (seeds %d), want b itself (%p), unchanged", one, one.Summary.Seeds, b)
	}
}

func TestSteadyFrom(t *testing.T) {
	at := func(sec ...float64) *Workload {
		w := &Workload{}
		for _, s := range sec {
			w.Requests = append(w.Requests, &Request{Arrival: time.Duration(s * float64(time.Second))})
		}
		return w
	}
	tests := []struct {
		name string
		w    *Workload
		want time.Duration
	}{
		{"declared warm-up counts from the first arrival", func() *Workload { w := at(2, 10, 50); w.WarmUp = 5 * time.Second; return w }(), 7 * time.Second},
		{"default: a fifth of the arrivals' span", at(10, 20, 60), 20 * time.Second},
		{"no requests", at(), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.w.SteadyFrom(); got != tt.want {
				t.Errorf("SteadyFrom(%d requests, warm-up %v) = %v, want %v", len(tt.w.Requests), tt.w.WarmUp, got, tt.want)
			}
		})
	}
}

// TestSteadyResult holds the steady figures to the requests past the
// warm-up: their count, their latencies (a subset of the run's), their own
// prefix hit rate, pooled across seeds like the whole run's.
func TestSteadyResult(t *testing.T) {
	var runs []*Result
	for seed := int64(1); seed <= 2; seed++ {
		w, err := Generate("few-prefixes", WorkloadOptions{Seed: seed, Duration: 90 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		reps, _ := ParseHardware(w.Hardware, 0)
		res, err := Run(Config{Replicas: reps}, w, newRoundRobin(PolicyOptions{}))
		if err != nil {
			t.Fatal(err)
		}
		after := w.SteadyRequests()
		st := res.Summary.Steady
		if st == nil || st.Completed+st.Failed != after || after == 0 || after == len(w.Requests) {
			t.Fatalf("seed %d: steady = %+v, want %d requests of %d", seed, st, after, len(w.Requests))
		}
		if st.PrefixHitRate <= res.Summary.PrefixHitRate {
			// A rotation warms every replica in the warm-up: past it, hits
			// are at least the run's.
			t.Errorf("seed %d: steady prefix hit rate %.3f, want above the whole run's %.3f", seed, st.PrefixHitRate, res.Summary.PrefixHitRate)
		}
		if len(res.Steady.TTFTSec) != st.Completed || res.Steady.TTFTSec[len(res.Steady.TTFTSec)-1] > res.TTFTSec[len(res.TTFTSec)-1] {
			t.Errorf("seed %d: steady latencies %d (max above the run's), want %d", seed, len(res.Steady.TTFTSec), st.Completed)
		}
		runs = append(runs, res)
	}
	p := Pool(runs)
	if st := p.Summary.Steady; st == nil || st.Seeds != 2 || st.Completed != runs[0].Summary.Steady.Completed+runs[1].Summary.Steady.Completed {
		t.Errorf("Pool(two runs).Steady = %+v, want the two runs' steady requests, 2 seeds", st)
	}
}
