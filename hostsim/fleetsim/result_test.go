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
