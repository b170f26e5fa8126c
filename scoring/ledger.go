package scoring

import "github.com/gpuroute/gpuroute/scoring/prefix"

// Ledger is the router's own accounting between scrapes: the requests it
// dispatched and has not seen finish, with their prefill tokens and a
// remaining-output estimate that decays as tokens stream back (inFlight);
// the progress of their prefills on each replica (prefillGroups); where it
// recently sent each adapter (adapterMemory); and what it learned about
// prompt and output lengths (lengths).
//
// Metrics lag: without a ledger, every decision made on one snapshot sees
// the same idle replica and a burst lands on it (TestLedgerSpreadsBurst).
// Pick counts a replica's reported queue plus the ledger's work dispatched
// since that report. Pick updates two caches of what the ledger holds, and
// nothing else: the recount of the work each replica's snapshot has not
// seen (SyncSnapshots) and the solved LRU caches of each replica's
// adapters. What a dispatch needs from the decision, Dispatch takes as
// arguments.
//
// One Ledger per Envoy worker VM; it is not safe for concurrent use.
// Replica numbers are indexes in the slice passed to Pick; when the fleet's
// membership changes, call Reset. Create it with NewLedger; methods on a nil
// *Ledger are no-ops so Pick works without one.
type Ledger struct {
	p        Params
	work     inFlight
	groups   []prefillGroups // per replica
	adapters adapterMemory
	lengths  lengths
	// total is the rate of this ledger's dispatches, peerRate the other
	// routers' (SetPeerRate): their sum is the fleet's arrival rate that
	// prices Pick's externality.
	total    Rate
	peerRate float64
	// held is how many requests the routers hold back for capacity
	// (SetHeld): every one of them waits for what a placement consumes.
	held float64
}

// NewLedger returns a ledger for up to maxReplicas replicas and maxInFlight
// concurrent requests (Dispatch refuses more), using p's defaults.
func NewLedger(p Params, maxReplicas, maxInFlight int) *Ledger {
	maxReplicas = max(maxReplicas, 1)
	maxInFlight = max(maxInFlight, 1)
	return &Ledger{
		p:        p,
		work:     newInFlight(maxReplicas, maxInFlight),
		groups:   make([]prefillGroups, maxReplicas),
		adapters: newAdapterMemory(&p, maxReplicas),
		lengths:  lengths{est: make([]outputEst, 0, ledgerEstimators)},
	}
}

// Reset forgets in-flight requests and adapter memory (keeps the learned
// lengths, which do not depend on replica numbering).
func (l *Ledger) Reset() {
	if l == nil {
		return
	}
	l.work.reset()
	clear(l.groups)
	l.adapters.reset()
}

// InFlight returns the number of in-flight requests the ledger tracks.
func (l *Ledger) InFlight() int {
	if l == nil {
		return 0
	}
	return l.work.count()
}

// InFlightOn returns the number of in-flight requests on replica.
func (l *Ledger) InFlightOn(replica int) int {
	if l == nil || replica < 0 || replica >= len(l.work.reps) {
		return 0
	}
	w := &l.work.reps[replica]
	return int(w.QueuedN + w.DecodeN)
}

// WorkOn returns the ledger's work on replica, with its unseen part counted
// against a snapshot taken at snapNanos (the replica's ScrapedNanos) and
// the window of its prefill in progress priced with h (the replica's
// profile).
func (l *Ledger) WorkOn(replica int, h *Hardware, snapNanos int64) Work {
	if l == nil || replica < 0 || replica >= len(l.work.reps) {
		return Work{}
	}
	if l.work.reps[replica].syncedSnap != snapNanos {
		l.work.sync(replica, snapNanos)
	}
	w := l.work.reps[replica].Work
	g := &l.groups[replica]
	w.RunFromNanos, w.RunUntilNanos = g.window(h)
	w.PendingN = g.pendN
	return w
}

// SyncSnapshots recounts the work each replica's latest snapshot has not
// seen (the requests dispatched after its ScrapedNanos) for every replica
// whose snapshot moved, in one pass over the requests in flight. Pick and
// WorkOn do it per replica when they find one moved; a scrape moves them
// all at once, and a pass each would make the first Pick after it
// O(replicas × in flight) (BenchmarkPickAfterScrape64). Call it before
// pricing every replica after a scrape.
func (l *Ledger) SyncSnapshots(replicas []Replica) {
	if l != nil {
		l.work.syncSnapshots(replicas)
	}
}

// Rate returns the rate, per second, at which this ledger dispatched
// recently (Params.RateWindow), decayed to nowNanos: what the other routers
// add to theirs (SetPeerRate).
func (l *Ledger) Rate(nowNanos int64) float64 {
	if l == nil {
		return 0
	}
	return l.total.At(nowNanos, l.p.RateWindow.Seconds())
}

// SetPeerRate sets the other routers' dispatch rate to the fleet, per
// second (the sum of their Rates as they last published them), which Pick
// adds to this ledger's own. Only the fleet's total prices a decision
// (fleetLoad), so the routers exchange one rate each, not one per replica,
// which would change as it decays and make every router republish its
// whole record at every tick.
func (l *Ledger) SetPeerRate(perSec float64) {
	if l != nil {
		l.peerRate = perSec
	}
}

// SetHeld sets how many requests the routers sharing this fleet hold back
// for capacity (flow control): Pick counts them among the requests a
// placement's prefill and adapter load delay (externalSec).
func (l *Ledger) SetHeld(n int) {
	if l != nil {
		l.held = float64(max(n, 0))
	}
}

// ExpectedOutput returns the output-length estimate for a new request:
// max_tokens is the pessimistic bound; the learned mean for its model and
// adapter replaces it when lower; with neither, Params.DefaultOutputTokens.
func (l *Ledger) ExpectedOutput(req *Request) int64 {
	if l == nil {
		return expectedOutput(req, -1, int64(DefaultParams().DefaultOutputTokens))
	}
	return expectedOutput(req, l.lengths.learned(outputKey(req.Model, req.Adapter)), int64(l.p.DefaultOutputTokens))
}

// Dispatch records that req, with uncachedTokens left to prefill, was sent
// to replica at nowNanos. startNanos is when its prefill is expected to
// start there: the chosen Candidate's StartNanos when Pick chose the
// replica at nowNanos (0: unknown, as for a request sent on another
// decision); W(r) then credits the prefill's progress from then
// (TestPrefillProgress). It returns 0 if the ledger is full or the replica
// out of range (the request is then simply not accounted).
func (l *Ledger) Dispatch(replica int, req *Request, uncachedTokens int, nowNanos, startNanos int64) Flight {
	if l == nil || replica < 0 || replica >= len(l.work.reps) {
		return 0
	}
	f, h := l.work.add(flight{
		replica:    int32(replica),
		dispatched: nowNanos,
		prefill:    int64(max(uncachedTokens, 0)),
		maxTokens:  int64(max(req.MaxTokens, 0)),
		expect:     l.ExpectedOutput(req),
		key:        outputKey(req.Model, req.Adapter),
	})
	if f == nil {
		return 0
	}
	l.total.Add(nowNanos, l.p.RateWindow.Seconds())
	f.group = l.groups[replica].join(f.prefill, startNanos)
	l.lengths.sent(uncachedTokens)
	if req.Adapter != "" {
		l.adapters.remember(prefix.HashString(req.Adapter), int32(replica), nowNanos, nowNanos+int64(l.p.AdapterMemory))
	}
	return h
}

// FirstToken records that the request's first token came back: its prefill
// work leaves the queue and its remaining output becomes decode work.
// Without the time, the ledger cannot tell when the next queued prefill
// started; FirstTokenAt can.
func (l *Ledger) FirstToken(h Flight) { l.FirstTokenAt(h, 0) }

// FirstTokenAt is FirstToken at nowNanos (0: unknown). A first token ends
// an engine step, and the requests of this router still waiting on that
// replica were admitted at that boundary: their prefill started then, and
// Pick credits its progress (see prefillGroups).
func (l *Ledger) FirstTokenAt(h Flight, nowNanos int64) {
	f := l.lookup(h)
	if f == nil || f.first {
		return
	}
	l.groups[f.replica].leave(f.group, f.prefill, nowNanos, true)
	l.work.firstToken(f)
}

// Progress records tokens more output tokens streamed back (SSE chunks or
// usage fields); the remaining estimate decays accordingly. It implies
// FirstToken.
func (l *Ledger) Progress(h Flight, tokens int) {
	f := l.lookup(h)
	if f == nil || tokens <= 0 {
		return
	}
	if !f.first {
		l.FirstToken(h)
	}
	l.work.stream(f, tokens)
}

// Done records that the request finished with outputTokens tokens (learned
// for its model and adapter) and forgets it. outputTokens < 0 means
// unknown: nothing is learned.
func (l *Ledger) Done(h Flight, outputTokens int) {
	f := l.lookup(h)
	if f == nil {
		return
	}
	if outputTokens >= 0 {
		l.lengths.learn(f.key, float64(outputTokens))
	}
	l.remove(f, int32(uint32(h)))
}

// Cancel forgets the request without learning from it (reset, error).
func (l *Ledger) Cancel(h Flight) {
	if f := l.lookup(h); f != nil {
		l.remove(f, int32(uint32(h)))
	}
}

// Sweep cancels requests dispatched before olderThanNanos (a lost
// response callback must not count as load forever) and returns how many.
func (l *Ledger) Sweep(olderThanNanos int64) int {
	if l == nil {
		return 0
	}
	n := 0
	live := &l.work.live
	// Backwards: remove moves the last live entry into the removed one's
	// place, and that entry was already looked at.
	for k := len(*live) - 1; k >= 0; k-- {
		if k >= len(*live) {
			continue
		}
		slot := (*live)[k]
		if f := &l.work.flights[slot]; f.dispatched < olderThanNanos {
			l.remove(f, slot)
			n++
		}
	}
	return n
}

func (l *Ledger) lookup(h Flight) *flight {
	if l == nil {
		return nil
	}
	return l.work.lookup(h)
}

// remove forgets f, in slot: out of its prefill group if still queued,
// then out of the work.
func (l *Ledger) remove(f *flight, slot int32) {
	if !f.first {
		l.groups[f.replica].leave(f.group, f.prefill, 0, false)
	}
	l.work.remove(f, slot)
}

// AppendAdapterPlacements appends the placements this ledger still counts
// (GPU or host memory) at nowNanos.
func (l *Ledger) AppendAdapterPlacements(dst []AdapterPlacement, nowNanos int64) []AdapterPlacement {
	if l == nil {
		return dst
	}
	return l.adapters.appendPlacements(dst, nowNanos)
}

// MergeAdapterPlacement adds a placement another router made; the later of
// the two memories of the same placement wins.
func (l *Ledger) MergeAdapterPlacement(pl AdapterPlacement) {
	if l == nil || pl.Replica < 0 || pl.Replica >= len(l.work.reps) {
		return
	}
	l.adapters.merge(pl)
}

// markAdapter fills v with the adapter memory's view of adapter (its
// HashString) at nowNanos against replicas' snapshots; with no ledger, an
// empty view.
func (l *Ledger) markAdapter(v *adapterView, adapter uint64, replicas []Replica, nowNanos int64) {
	if l == nil {
		v.size(0)
		v.adapter, v.nowNanos = adapter, nowNanos
		return
	}
	v.size(len(l.work.reps))
	l.adapters.view(v, adapter, replicas, nowNanos)
}
