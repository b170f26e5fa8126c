package fleet

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
	Policy         string       `json:"policy"`
	TTFTMeanSec    float64      `json:"ttft_mean_s"`
	TTFTP50Sec     float64      `json:"ttft_p50_s"`
	TTFTP90Sec     float64      `json:"ttft_p90_s"`
	TTFTP99Sec     float64      `json:"ttft_p99_s"`
	E2EP50Sec      float64      `json:"e2e_p50_s"`
	E2EP99Sec      float64      `json:"e2e_p99_s"`
	ThroughputTokS float64      `json:"throughput_tok_s"`
	PrefixHitRate  float64      `json:"prefix_hit_rate"`
	AdapterLoads   int64        `json:"adapter_loads"`
	Completed      int          `json:"completed"`
	Failed         int          `json:"failed"`
	Migrated       int          `json:"migrated"`
	Drain          DrainSummary `json:"drain"`
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
}

func (s *sim) result(wall time.Duration) *Result {
	res := &Result{Load: s.load, LoadEvery: s.cfg.LoadSampleEvery, Events: s.events, Wall: wall, SimTime: s.now}
	sum := &res.Summary
	sum.Policy = s.p.Name()
	var first, last time.Duration = -1, 0
	var outTok int64
	for i := range s.states {
		st := &s.states[i]
		if first < 0 || st.req.Arrival < first {
			first = st.req.Arrival
		}
		if st.done {
			sum.Completed++
			res.TTFTSec = append(res.TTFTSec, (st.firstAt - st.req.Arrival).Seconds())
			res.E2ESec = append(res.E2ESec, (st.doneAt - st.req.Arrival).Seconds())
			outTok += int64(st.req.output)
			last = max(last, st.doneAt)
		} else {
			sum.Failed++
		}
	}
	sort.Float64s(res.TTFTSec)
	sort.Float64s(res.E2ESec)
	sum.TTFTMeanSec = mean(res.TTFTSec)
	sum.TTFTP50Sec = quantile(res.TTFTSec, 0.50)
	sum.TTFTP90Sec = quantile(res.TTFTSec, 0.90)
	sum.TTFTP99Sec = quantile(res.TTFTSec, 0.99)
	sum.E2EP50Sec = quantile(res.E2ESec, 0.50)
	sum.E2EP99Sec = quantile(res.E2ESec, 0.99)
	if span := (last - first).Seconds(); span > 0 {
		sum.ThroughputTokS = float64(outTok) / span
	}
	var q, h int64
	for _, r := range s.f.replicas {
		q += r.prefixQueries
		h += r.prefixHits
		sum.AdapterLoads += r.adapterLoads
		res.HostLoads += r.hostLoads
		res.StorageLoads += r.storageLoads
		res.Preemptions += r.preemptions
		res.KVEvictions += r.kv.evictions
	}
	if q > 0 {
		sum.PrefixHitRate = float64(h) / float64(q)
	}
	sum.Migrated = s.migrated
	sum.Drain.NewAfterClose = s.newAfterClose
	for _, d := range s.drains {
		sum.Drain.DeadlineSec = max(sum.Drain.DeadlineSec, d.deadline.Seconds())
		end := d.finish
		if !d.finished {
			end = s.now
		}
		sum.Drain.FinishedSec = max(sum.Drain.FinishedSec, (end - d.start).Seconds())
	}
	return res
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
