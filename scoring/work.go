package scoring

import "math"

// Work is a router's in-flight work on one replica, in requests and tokens.
// Other routers' Work reaches Pick through Replica.PeerWork, so workers that
// share one metrics snapshot do not all send a burst to the same replica.
type Work struct {
	// QueuedN requests were dispatched and have no first token yet;
	// QueuedTokens are their uncached prompt tokens.
	QueuedN, QueuedTokens int64
	// DecodeN requests are generating; DecodeTokens are their remaining
	// output estimates.
	DecodeN, DecodeTokens int64
	// UnseenN requests were dispatched after the replica's snapshot was
	// taken, so its reported counts miss them; UnseenTokens are their
	// prompt tokens (KV not yet visible in KVUsage).
	UnseenN, UnseenTokens int64
	// RunFromNanos and RunUntilNanos are the window of the router's
	// prefill group in progress on the replica (see prefillGroups.window),
	// on its clock; 0 when it has none or does not know when it started.
	// Add leaves them alone: they describe one router, and AddAt turns
	// them into DoneSec.
	RunFromNanos, RunUntilNanos int64
	// PendingN of the QueuedN requests were sent behind that group: they
	// start when it ends.
	PendingN int64
	// DoneSec is the part of the summed routers' queued prefill, in
	// seconds, their groups in progress had done when AddAt added them:
	// Pick subtracts it from W(r) as it does its own ledger's. Each reader
	// evaluates the windows on its clock, so it is not exchanged.
	DoneSec float64
	// ClearNanos is when the summed routers' queued prefills should all
	// have ended, from their windows: a request sent before then starts
	// behind them. 0 with none queued; ClearUnknown when one of them has
	// requests queued outside a window (Add, a missing window, requests
	// behind it, or its window past). Not exchanged either.
	ClearNanos int64
}

// ClearUnknown is Work.ClearNanos when the start of a request sent behind
// the work is unknown.
const ClearUnknown = math.MaxInt64

// Add adds o to w. o's queued requests, if any, have no usable window.
func (w *Work) Add(o *Work) {
	w.add(o)
	if o.QueuedN > 0 {
		w.ClearNanos = ClearUnknown
	}
}

// AddAt adds o to w, o being another router's work on the same clock: its
// window evaluated at nowNanos goes to w.DoneSec, and to w.ClearNanos when
// its queued requests are all in the window's group (TestWorkAddAt).
func (w *Work) AddAt(o *Work, nowNanos int64) {
	w.add(o)
	w.DoneSec += doneIn(o.RunFromNanos, o.RunUntilNanos, nowNanos)
	if o.QueuedN > 0 {
		clear := int64(ClearUnknown)
		if o.PendingN == 0 && o.RunFromNanos > 0 && nowNanos < o.RunUntilNanos {
			clear = o.RunUntilNanos
		}
		w.ClearNanos = max(w.ClearNanos, clear)
	}
}

// add sums o's counts and summed-only fields into w.
func (w *Work) add(o *Work) {
	w.QueuedN += o.QueuedN
	w.QueuedTokens += o.QueuedTokens
	w.DecodeN += o.DecodeN
	w.DecodeTokens += o.DecodeTokens
	w.UnseenN += o.UnseenN
	w.UnseenTokens += o.UnseenTokens
	w.DoneSec += o.DoneSec
	w.ClearNanos = max(w.ClearNanos, o.ClearNanos)
}

// doneIn is the seconds of queued prefill a group whose window is [from,
// until) has done at nowNanos: the time since from while inside the window,
// else none (before it, the prefill's remaining time still exceeds its
// counted work; after it, the estimate failed).
func doneIn(fromNanos, untilNanos, nowNanos int64) float64 {
	if fromNanos <= 0 || nowNanos <= fromNanos || nowNanos >= untilNanos {
		return 0
	}
	return float64(nowNanos-fromNanos) / 1e9
}
