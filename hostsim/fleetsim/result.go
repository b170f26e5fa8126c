package fleetsim

import (
	"encoding/json"
	"io"
	"math"
	"sort"
	"time"
)

// Summary is one policy's figures on one workload; its JSON names are the
// report's wire format.
type Summary struct {
	Policy         string  `json:"policy"`
	TTFTMeanSec    float64 `json:"ttft_mean_s"`
	TTFTP50Sec     float64 `json:"ttft_p50_s"`
	TTFTP90Sec     float64 `json:"ttft_p90_s"`
	TTFTP99Sec     float64 `json:"ttft_p99_s"`
	E2EP50Sec      float64 `json:"e2e_p50_s"`
	E2EP99Sec      float64 `json:"e2e_p99_s"`
	ThroughputTokS float64 `json:"throughput_tok_s"`
	PrefixHitRate  float64 `json:"prefix_hit_rate"`
	// ReuseCaptured is the prompt tokens the requests found cached, each
	// at most what was cached on some replica when it arrived, over the
	// latter: the share of the available reuse the router captured.
	ReuseCaptured float64 `json:"reuse_captured"`
	AdapterLoads  int64   `json:"adapter_loads"`
	Completed     int     `json:"completed"`
	Failed        int     `json:"failed"`
	// Shed counts the failed requests the router answered itself (429,
	// 503): the client got a response. Lost counts requests that got no
	// response at all (still held when the run ended) or that the router
	// released twice (which would reach two replicas): always 0 for a
	// correct router.
	Shed int `json:"shed,omitempty"`
	// WrongModel counts the requests the router sent to a replica that
	// does not serve their model (the engine answers 404): always 0 for a
	// correct router.
	WrongModel int          `json:"wrong_model,omitempty"`
	Lost       int          `json:"lost"`
	Migrated   int          `json:"migrated"`
	Drain      DrainSummary `json:"drain"`
	// HeldMeanSec is the mean time the router held a request before
	// dispatching or answering it, over the requests it held.
	HeldMeanSec float64 `json:"held_mean_s,omitempty"`
	// Classes holds the same figures per request class (a workload's
	// priority bands or tenants), when the workload has classes.
	Classes map[string]*Summary `json:"classes,omitempty"`
	// Seeds is the number of runs pooled into these figures (Pool), and
	// TTFTMeanBySeedSec and TTFTP99BySeedSec each run's own, in seed
	// order, so a reader sees how much of a difference is seed-to-seed.
	Seeds             int       `json:"seeds,omitempty"`
	TTFTMeanBySeedSec []float64 `json:"ttft_mean_by_seed_s,omitempty"`
	TTFTP99BySeedSec  []float64 `json:"ttft_p99_by_seed_s,omitempty"`
	// Steady is the same figures over the requests that arrived after the
	// workload's warm-up (Workload.SteadyFrom): its prefix hit rate is the
	// requests' own (cached prompt tokens at their first admission over
	// their prompt tokens), Migrated counts requests, and the adapter
	// loads and drains, which belong to no request, are left out.
	Steady *Summary `json:"steady,omitempty"`
}

// DrainSummary describes the drains of a run: the configured deadline, the
// longest time a drain took (from close to empty or deadline), and how many
// requests reached a replica after it closed.
type DrainSummary struct {
	DeadlineSec   float64 `json:"deadline_s"`
	FinishedSec   float64 `json:"finished_s"`
	NewAfterClose int     `json:"new_after_close"`
}

// Result is one run's outcome.
type Result struct {
	Summary Summary
	// TTFTSec and E2ESec are the completed requests' latencies, sorted.
	TTFTSec, E2ESec []float64
	// Load[i] is replica i's waiting+running requests sampled every
	// LoadEvery.
	Load      [][]float64
	LoadEvery time.Duration
	// Events is the number of simulation events processed; Wall the real
	// time the run took; SimTime the virtual time it covered.
	Events  uint64
	Wall    time.Duration
	SimTime time.Duration
	// HostLoads and StorageLoads split AdapterLoads by tier; Preemptions and
	// KVEvictions total the replicas'.
	HostLoads, StorageLoads, Preemptions, KVEvictions int64
	// PrefixQueries and PrefixHits are the replicas' prefix-cache lookups
	// and hits (tokens), OutputTokens the completed requests' output
	// tokens over Span, first arrival to last completion: the counts the
	// summary's rates come from, kept so Pool can weigh runs correctly.
	PrefixQueries, PrefixHits, OutputTokens int64
	Span                                    time.Duration
	// ReuseObtained and ReuseAvailable are ReuseCaptured's counts.
	ReuseObtained, ReuseAvailable int64
	// HeldN requests were held by the router, HeldSec seconds in all.
	HeldN   int
	HeldSec float64
	// Classes holds the outcomes per request class (Request.Class).
	Classes map[string]*Result
	// Steady is the result over the requests that arrived after the
	// warm-up (nil inside a Steady).
	Steady *Result
}

// SteadyFrom returns the arrival time from which w's requests are past
// the warm-up: the first arrival plus WarmUp, or, for a workload that
// declares none (traces), plus a fifth of the span from the first arrival
// to the last. It depends on the workload only, so every policy's steady
// figures cover the same requests.
func (w *Workload) SteadyFrom() time.Duration {
	if len(w.Requests) == 0 {
		return 0
	}
	first, last := w.Requests[0].Arrival, w.Requests[len(w.Requests)-1].Arrival
	if w.WarmUp > 0 {
		return first + w.WarmUp
	}
	return first + (last-first)/5
}

// SteadyRequests returns how many of w's requests arrive after the
// warm-up (at or after SteadyFrom).
func (w *Workload) SteadyRequests() int {
	n, from := 0, w.SteadyFrom()
	for _, r := range w.Requests {
		if r.Arrival >= from {
			n++
		}
	}
	return n
}

func (s *sim) result(wall time.Duration) *Result {
	res := s.resultOf(func(*reqState) bool { return true })
	res.Load, res.LoadEvery, res.Events, res.Wall, res.SimTime = s.load, s.cfg.LoadSampleEvery, s.events, wall, s.now
	sum := &res.Summary
	for _, r := range s.f.replicas {
		res.PrefixQueries += r.prefixQueries
		res.PrefixHits += r.prefixHits
		sum.AdapterLoads += r.adapterLoads
		res.HostLoads += r.hostLoads
		res.StorageLoads += r.storageLoads
		res.Preemptions += r.preemptions
		res.KVEvictions += r.kv.evictions
	}
	sum.Migrated = s.migrated
	sum.Drain.NewAfterClose = s.newAfterClose
	sum.WrongModel = s.wrongModel
	for _, d := range s.drains {
		sum.Drain.DeadlineSec = max(sum.Drain.DeadlineSec, d.deadline.Seconds())
		end := d.finish
		if !d.finished {
			end = s.now
		}
		sum.Drain.FinishedSec = max(sum.Drain.FinishedSec, (end - d.start).Seconds())
	}
	classes := map[string]bool{}
	for i := range s.states {
		if c := s.states[i].req.Class; c != "" {
			classes[c] = true
		}
	}
	for c := range classes {
		cr := s.resultOf(func(st *reqState) bool { return st.req.Class == c })
		// The replicas count prefix hits for all requests, not per class.
		cr.PrefixQueries, cr.PrefixHits = res.PrefixQueries, res.PrefixHits
		if res.Classes == nil {
			res.Classes = map[string]*Result{}
		}
		res.Classes[c] = cr
	}
	from := s.w.SteadyFrom()
	res.Steady = s.resultOf(func(st *reqState) bool { return st.req.Arrival >= from })
	for i := range s.states {
		st := &s.states[i]
		if st.req.Arrival >= from {
			res.Steady.PrefixQueries += int64(st.req.PromptTokens)
			res.Steady.PrefixHits += int64(st.cachedTokens)
			if st.migrated > 0 {
				res.Steady.Summary.Migrated++
			}
		}
	}
	res.summarize()
	return res
}

// resultOf gathers the per-request outcomes of the requests keep selects:
// latencies, completions, failures, sheds, losses, holding time and the
// output tokens over their span.
func (s *sim) resultOf(keep func(*reqState) bool) *Result {
	res := &Result{}
	sum := &res.Summary
	sum.Policy = s.p.Name()
	var first, last time.Duration = -1, 0
	heldN, heldSec := 0, 0.0
	for i := range s.states {
		st := &s.states[i]
		if !keep(st) {
			continue
		}
		if first < 0 || st.req.Arrival < first {
			first = st.req.Arrival
		}
		res.ReuseAvailable += int64(st.reusable)
		res.ReuseObtained += int64(min(st.cachedTokens, st.reusable))
		if held := st.heldTime; held > 0 || st.held {
			if st.held {
				held += s.now - st.heldSince
			}
			heldN++
			heldSec += held.Seconds()
		}
		switch {
		case st.held || st.twice:
			sum.Lost++
		case st.answered:
			sum.Shed++
		}
		if st.done {
			sum.Completed++
			res.TTFTSec = append(res.TTFTSec, (st.firstAt - st.req.Arrival).Seconds())
			res.E2ESec = append(res.E2ESec, (st.doneAt - st.req.Arrival).Seconds())
			res.OutputTokens += int64(st.req.output)
			last = max(last, st.doneAt)
		} else {
			sum.Failed++
		}
	}
	res.HeldN, res.HeldSec = heldN, heldSec
	res.Span = max(last-first, 0)
	return res
}

// summarize sorts the latencies and derives the summary's distribution
// figures and rates from them and the counts.
func (res *Result) summarize() {
	sort.Float64s(res.TTFTSec)
	sort.Float64s(res.E2ESec)
	sum := &res.Summary
	sum.TTFTMeanSec = mean(res.TTFTSec)
	sum.TTFTP50Sec = quantile(res.TTFTSec, 0.50)
	sum.TTFTP90Sec = quantile(res.TTFTSec, 0.90)
	sum.TTFTP99Sec = quantile(res.TTFTSec, 0.99)
	sum.E2EP50Sec = quantile(res.E2ESec, 0.50)
	sum.E2EP99Sec = quantile(res.E2ESec, 0.99)
	sum.ThroughputTokS = 0
	if span := res.Span.Seconds(); span > 0 {
		sum.ThroughputTokS = float64(res.OutputTokens) / span
	}
	sum.PrefixHitRate = 0
	if res.PrefixQueries > 0 {
		sum.PrefixHitRate = float64(res.PrefixHits) / float64(res.PrefixQueries)
	}
	sum.ReuseCaptured = 0
	if res.ReuseAvailable > 0 {
		sum.ReuseCaptured = float64(res.ReuseObtained) / float64(res.ReuseAvailable)
	}
	sum.HeldMeanSec = 0
	if res.HeldN > 0 {
		sum.HeldMeanSec = res.HeldSec / float64(res.HeldN)
	}
	sum.Steady = nil
	if res.Steady != nil {
		res.Steady.summarize()
		sum.Steady = &res.Steady.Summary
	}
	sum.Classes = nil
	for c, cr := range res.Classes {
		cr.summarize()
		if sum.Classes == nil {
			sum.Classes = make(map[string]*Summary, len(res.Classes))
		}
		cs := cr.Summary
		sum.Classes[c] = &cs
	}
}

// Pool merges one policy's runs of the same workload under different seeds
// into one result, as if their requests had been one run: latencies
// pooled (a p99 over several runs rests on several times the tail
// requests: one run of the shared-prefix workload has ~9 requests above
// its p99, too few to rank policies whose p99s differ by 10%), counts
// summed, rates over the summed spans, the longest drain and the load
// chart of the first run. Each run's own mean and p99 stay in the summary.
// runs must be non-empty.
func Pool(runs []*Result) *Result {
	if len(runs) == 1 {
		return runs[0]
	}
	first := runs[0]
	out := &Result{Load: first.Load, LoadEvery: first.LoadEvery}
	sum := &out.Summary
	sum.Policy = first.Summary.Policy
	sum.Seeds = len(runs)
	for _, r := range runs {
		s := &r.Summary
		out.TTFTSec = append(out.TTFTSec, r.TTFTSec...)
		out.E2ESec = append(out.E2ESec, r.E2ESec...)
		out.Events += r.Events
		out.Wall += r.Wall
		out.SimTime += r.SimTime
		out.HostLoads += r.HostLoads
		out.StorageLoads += r.StorageLoads
		out.Preemptions += r.Preemptions
		out.KVEvictions += r.KVEvictions
		out.PrefixQueries += r.PrefixQueries
		out.PrefixHits += r.PrefixHits
		out.OutputTokens += r.OutputTokens
		out.ReuseObtained += r.ReuseObtained
		out.ReuseAvailable += r.ReuseAvailable
		out.Span += r.Span
		sum.AdapterLoads += s.AdapterLoads
		sum.Completed += s.Completed
		sum.Failed += s.Failed
		sum.Migrated += s.Migrated
		sum.Drain.DeadlineSec = max(sum.Drain.DeadlineSec, s.Drain.DeadlineSec)
		sum.Drain.FinishedSec = max(sum.Drain.FinishedSec, s.Drain.FinishedSec)
		sum.Drain.NewAfterClose += s.Drain.NewAfterClose
		sum.Shed += s.Shed
		sum.WrongModel += s.WrongModel
		sum.Lost += s.Lost
		out.HeldN += r.HeldN
		out.HeldSec += r.HeldSec
		sum.TTFTMeanBySeedSec = append(sum.TTFTMeanBySeedSec, s.TTFTMeanSec)
		sum.TTFTP99BySeedSec = append(sum.TTFTP99BySeedSec, s.TTFTP99Sec)
	}
	if steady := steadyOf(runs); steady != nil {
		out.Steady = Pool(steady)
	}
	for _, r := range runs {
		for c := range r.Classes {
			if out.Classes == nil {
				out.Classes = map[string]*Result{}
			}
			if out.Classes[c] == nil {
				var cs []*Result
				for _, x := range runs {
					if xc := x.Classes[c]; xc != nil {
						cs = append(cs, xc)
					}
				}
				out.Classes[c] = Pool(cs)
			}
		}
	}
	out.summarize()
	return out
}

// steadyOf returns the runs' Steady results, nil unless every run has one.
func steadyOf(runs []*Result) []*Result {
	out := make([]*Result, 0, len(runs))
	for _, r := range runs {
		if r.Steady == nil {
			return nil
		}
		out = append(out, r.Steady)
	}
	return out
}

func mean(x []float64) float64 {
	if len(x) == 0 {
		return 0
	}
	t := 0.0
	for _, v := range x {
		t += v
	}
	return t / float64(len(x))
}

// quantile returns the q-quantile of sorted x (nearest rank), 0 if empty.
func quantile(x []float64, q float64) float64 {
	if len(x) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(x)))) - 1
	return x[min(max(i, 0), len(x)-1)]
}

// Report is the JSON document of one workload's results.
type Report struct {
	Workload string    `json:"workload"`
	Results  []Summary `json:"results"`
}

// WriteJSON writes reports as JSON: one object for one workload, an array
// for several.
func WriteJSON(w io.Writer, reports []Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if len(reports) == 1 {
		return enc.Encode(reports[0])
	}
	return enc.Encode(reports)
}
