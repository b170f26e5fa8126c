package scoring

import (
	"math/bits"

	"github.com/gpuroute/gpuroute/scoring/prefix"
)

// lengths learns the lengths the router cannot know in advance: the mean
// uncached prompt of what it sends (W(r) prices a queued request it did not
// send at that mean: routers behind one gateway see the same traffic), the
// mean output of what completed, and per model and adapter the mean output
// that replaces max_tokens as a request's output estimate when lower
// (TestRemainingOutputEstimate). Estimators are kept for the most recently
// completed keys, at most ledgerEstimators.
type lengths struct {
	// promptMean is an EWMA of the uncached prompt tokens of dispatched
	// requests, outputMean of completed outputs; 0 until the first sample.
	promptMean float64
	outputMean float64
	est        []outputEst
	// clock orders the estimators by last use (logical, not wall time).
	clock uint32
}

type outputEst struct {
	key   uint64
	mean  float64
	n     uint32
	stamp uint32
}

const (
	ledgerEstimators = 64
	// ewmaAlpha weighs a new sample; ~1/20 remembers the last few dozen
	// requests, enough to follow a workload shift within seconds.
	ewmaAlpha = 0.05
)

func ewma(m, x float64) float64 {
	if m == 0 {
		return x
	}
	return m + ewmaAlpha*(x-m)
}

// outputKey keys the output estimators (and the tie-break of a prompt
// without blocks) by model and adapter.
func outputKey(model, adapter string) uint64 {
	return prefix.Finalize(prefix.HashString(model) ^ bits.RotateLeft64(prefix.HashString(adapter), 17))
}

// sent learns the uncached prompt of a dispatched request.
func (s *lengths) sent(uncachedTokens int) {
	s.promptMean = ewma(s.promptMean, float64(max(uncachedTokens, 1)))
}

// learned returns the mean output learned for key, or -1 when none.
func (s *lengths) learned(key uint64) float64 {
	for i := range s.est {
		if s.est[i].key == key {
			return s.est[i].mean
		}
	}
	return -1
}

// expectedOutput returns a new request's output estimate: max_tokens is the
// pessimistic bound; learned (its model and adapter's mean, -1: none)
// replaces it when lower; with neither, def.
func expectedOutput(req *Request, learned float64, def int64) int64 {
	switch {
	case learned >= 0 && (req.MaxTokens <= 0 || learned < float64(req.MaxTokens)):
		return max(int64(learned+0.5), 1)
	case req.MaxTokens > 0:
		return int64(req.MaxTokens)
	}
	return def
}

// learn adds a completed output of x tokens for key: a plain mean for its
// first samples, then an EWMA; a new key takes the least recently used
// estimator when all are taken.
func (s *lengths) learn(key uint64, x float64) {
	s.clock++
	s.outputMean = ewma(s.outputMean, x)
	oldest := -1
	for i := range s.est {
		e := &s.est[i]
		if e.key == key {
			e.n++
			if e.n < 20 {
				e.mean += (x - e.mean) / float64(e.n)
			} else {
				e.mean += ewmaAlpha * (x - e.mean)
			}
			e.stamp = s.clock
			return
		}
		if oldest < 0 || e.stamp < s.est[oldest].stamp {
			oldest = i
		}
	}
	e := outputEst{key: key, mean: x, n: 1, stamp: s.clock}
	if len(s.est) < cap(s.est) {
		s.est = append(s.est, e)
	} else if oldest >= 0 {
		s.est[oldest] = e
	}
}
