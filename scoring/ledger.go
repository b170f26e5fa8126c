package scoring

import (
	"math"
	"math/bits"

	"github.com/gpuroute/gpuroute/scoring/prefix"
)

// Ledger is the router's own accounting between scrapes: the requests it
// dispatched and has not seen finish (with their prefill tokens and a
// remaining-output estimate that decays as tokens stream back), where it
// recently sent each adapter, and what it learned about output lengths.
//
// Metrics lag: without a ledger, every decision made on one snapshot sees
// the same idle replica and a burst lands on it. Pick counts a replica's
// reported queue plus the ledger's work dispatched since that report.
//
// One Ledger per Envoy worker VM; it is not safe for concurrent use.
// Replica numbers are indexes in the slice passed to Pick; when the fleet's
// membership changes, call Reset. Create it with NewLedger; methods on a nil
// *Ledger are no-ops so Pick works without one.
type Ledger struct {
	p       Params
	flights []flight
	free    []int32
	// live lists the used slots of flights (flight.at is each one's
	// position), so sync walks the requests in flight, not the capacity:
	// at maxInFlight 16384 a scan of the slots per replica made a tick of
	// 64 replicas cost milliseconds in the wasm module.
	live  []int32
	reps  []repAcc
	adapt []adapterMem
	est   []outputEst
	mark  []uint64 // scratch bitset for Pick: replicas remembered to hold the adapter in GPU memory
	host  []uint64 // scratch bitset for Pick: replicas remembered to hold it in host memory
	// fresh is scratch for Pick: per replica, the other adapters sent there
	// after its snapshot was taken that the snapshot does not list (each
	// holds or waits for a GPU slot the snapshot shows free).
	fresh []int32
	// pending is scratch for Pick: per replica, the seconds of adapter loads
	// still to run there for other adapters this router (or a peer whose
	// placements were merged) sent, that have no GPU slot yet: listed as
	// waiting by the snapshot, or sent after it and not listed.
	pending []float64
	// otherN counts, per replica, the other adapters remembered there (GPU
	// or host memory) with a send rate, and selfRate is the adapter's own
	// rate there (scratch for Pick, filled by markAdapter for adapter
	// marked at markNanos). otherRate is scratch for one replica's other
	// rates, otherFor's (-1: none) times otherScale, which only solving
	// its caches needs (otherRates): a rate costs an exponential.
	otherN     []int32
	selfRate   []float64
	otherRate  []float64
	otherFor   int
	otherScale float64
	otherAhead bool
	marked     uint64
	markNanos  int64
	// reloadSec and ownSec are scratch for Pick, per replica: the reload
	// seconds one more request of the adapter there costs the other
	// adapters there, and costs the adapter's own later requests
	// (reloadCost).
	reloadSec []float64
	ownSec    []float64
	// che caches, per replica, its two LoRA caches solved for the
	// adapters remembered there (cheLevels), so a Pick prices a send to
	// each in O(1) and solves only where the adapters changed.
	che []cheCache
	// growAt is e^((growNanos − growEpoch)/AdapterMemory), the factor by
	// which every adapter's rate shrank from growEpoch to growNanos (the
	// last Pick's time). With each cache's own factor from its solve
	// (cheCache.shrink) it converts the current rates to every cache's
	// units, one exponential a Pick (cheLevels, grow).
	growEpoch, growNanos int64
	growAt               float64
	// adaptVer counts, per replica, changes of the adapters remembered
	// there other than their common decay (a send, a new or replaced
	// entry): a cached solution is valid only within one version.
	adaptVer []uint32
	// promptMean is an EWMA of the uncached prompt tokens of dispatched
	// requests, outputMean of completed outputs; 0 until the first sample.
	promptMean float64
	outputMean float64
	// clock orders adapter-memory and estimator entries (logical, not wall time).
	clock uint32
	// total is the rate of this ledger's dispatches, peerRate the other
	// routers' (SetPeerRate): their sum is the fleet's arrival rate that
	// prices Pick's externality.
	total    Rate
	peerRate float64
}

// Flight is a handle to one dispatched request, returned by Dispatch and
// kept on the plugin's HTTP context. The zero Flight is invalid.
type Flight uint64

type flight struct {
	gen        uint32
	used       bool
	first      bool // first token seen: prefill is done
	replica    int32
	group      uint32 // prefill group (repAcc.group) while queued
	at         int32  // index in Ledger.live while used
	dispatched int64  // nowNanos at dispatch
	prefill    int64  // uncached prompt tokens still to prefill
	maxTokens  int64  // 0: none given
	expect     int64  // output estimate at dispatch
	streamed   int64  // output tokens streamed back so far
	remaining  int64  // current remaining-output estimate, as counted in reps
	key        uint64
}

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
	// prefill group in progress on the replica (prefillGroups.window), on
	// its clock; 0 when it has none or does not know when it started.
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
// its queued requests are all in the window's group.
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

// add sums o's counts, rates and summed-only fields into w.
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

// repAcc aggregates the ledger's in-flight work per replica.
type repAcc struct {
	Work
	syncedSnap int64 // the ScrapedNanos Unseen* refer to
	resync     bool  // Unseen* are being recounted (recountUnseen)
	prefillGroups
}

// cheCache is a replica's two LoRA caches (GPU slots and host memory)
// solved for all the adapters remembered there (cheLevelOf), whichever
// adapter a request names: each pricing of a send (cheLevel.sendDelta) then
// costs a few exponentials instead of solving the caches twice more, so of
// a fleet only the replica the last request went to (whose rates changed)
// solves again. The levels are solved for the rates at atNanos. The rates
// decay by one common factor between sends, and Che's solution scales with
// them (cheSolve), so they stay valid in those units until
// Ledger.adaptVer moves or the number of adapters or the slots change:
// the current rates are converted to them, not the levels to the rates.
type cheCache struct {
	set                 bool
	ver                 uint32
	entries             int // adapters remembered there, with a rate
	items               int // of them with a positive rate at atNanos
	gpuSlots, hostSlots int
	atNanos             int64
	shrink              float64 // e^(−(atNanos − Ledger.growEpoch)/AdapterMemory)
	gpu, host           cheLevel
}

// cheLevels returns replica's GPU and host cache levels as of the last
// markAdapter, self being the marked adapter's rate there, the number of
// adapters they were solved for, and toRef, the factor from the current
// rates to the units the levels are in (≥ 1: the rates when they were
// solved). Cached when still valid (see cheCache), else solved again,
// starting from the previous solution. host is gpu when the slot counts
// are equal. Nil when the ledger has no cache for replica.
func (l *Ledger) cheLevels(replica int, self float64, gpuSlots, hostSlots int) (gpu, host *cheLevel, items int, toRef float64) {
	if l == nil || replica < 0 || replica >= len(l.che) || replica >= len(l.otherN) {
		return nil, nil, 0, 0
	}
	now := l.markNanos
	entries := int(l.otherN[replica])
	if self > 0 {
		entries++
	}
	grow := l.grow(now)
	c := &l.che[replica]
	sameSlots := c.gpuSlots == gpuSlots && c.hostSlots == hostSlots
	toRef = grow * c.shrink
	if !(c.set && now >= c.atNanos && toRef < math.Inf(1)) {
		toRef = 0 // the rates since the levels were solved are unknown
	}
	if !(toRef > 0 && c.ver == l.adaptVer[replica] && c.entries == entries && sameSlots) {
		gpuFrom, hostFrom := 0.0, 0.0
		if sameSlots && toRef > 0 {
			// The previous solution in the current rates' units.
			gpuFrom, hostFrom = c.gpu.now.t*toRef, c.host.now.t*toRef
		}
		rest, ahead := l.otherRates(replica, 1)
		items = 0
		if self > 0 {
			items++
		}
		for _, x := range rest {
			if x > 0 {
				items++
			}
		}
		c.gpu = cheLevelOf(rest, self, gpuSlots, gpuFrom)
		if hostSlots != gpuSlots {
			c.host = cheLevelOf(rest, self, hostSlots, hostFrom)
		}
		// A rate stamped after now (a clock step back, or a peer's clock
		// ahead) reads undecayed until now passes it, so it does not decay
		// with the others: such a solution serves this Pick only.
		c.set, c.ver, c.entries, c.items, c.gpuSlots, c.hostSlots = !ahead, l.adaptVer[replica], entries, items, gpuSlots, hostSlots
		c.atNanos, c.shrink, toRef = now, 1/grow, 1
	}
	if hostSlots == gpuSlots {
		return &c.gpu, &c.gpu, c.items, toRef
	}
	return &c.gpu, &c.host, c.items, toRef
}

// grow returns e^((nowNanos − l.growEpoch)/AdapterMemory) (see
// Ledger.growEpoch), moving the epoch to nowNanos, and so dropping every
// cached solution, when that would leave the range of float64.
func (l *Ledger) grow(nowNanos int64) float64 {
	if nowNanos == l.growNanos && l.growAt > 0 {
		return l.growAt
	}
	w := l.p.AdapterMemory.Seconds()
	if !(w > 0) {
		return 0
	}
	x := float64(nowNanos-l.growEpoch) / 1e9 / w
	if !(x >= 0 && x <= 500) {
		l.growEpoch, x = nowNanos, 0
		for i := range l.che {
			l.che[i].set = false
		}
	}
	l.growNanos, l.growAt = nowNanos, math.Exp(x)
	return l.growAt
}

// prefillGroups follows the progress of the router's queued prefills on
// one replica, so W(r) can count what is left of the one in progress
// rather than all of it however long ago it started.
//
// A continuous-batching engine admits its waiting requests at a step
// boundary, all that fit the token budget, in arrival order (vLLM V1's
// scheduler; hostsim/fleetsim/replica.go startStep models it). The router's
// queued requests on a replica therefore form two groups: the running one,
// whose prefill started when the first of them was dispatched to a replica
// with nothing queued ahead (or when the previous group's first token came
// back: that step boundary admitted everything then waiting), and the
// pending one, dispatched while the running group was in flight, which
// starts when its first token arrives. Each queued flight carries its
// group's number (run or run+1), so first tokens, completions and
// cancellations update the sums in O(1), in any order.
type prefillGroups struct {
	run             uint32 // the running group's number; pending is run+1
	runN, runTokens int64  // queued flights and prefill tokens in the running group
	pendN, pendTok  int64  // the same for the pending group
	// runSq and pendSq sum the squares of the groups' prefill tokens
	// (attention cost grows with each prompt's square, not the sum's).
	runSq, pendSq  float64
	runN0, runTok0 int64   // the running group's size when it started (for learning)
	runSq0         float64 // and its sum of squares
	runStartNanos  int64   // when it started; 0: unknown (nothing is credited)
	// pickNanos is the last Pick's time and startNanos when it expected a
	// request sent then to start here (0: unknown), for Dispatch.
	pickNanos, startNanos int64
	// EWMAs of the observed durations of completed groups and of their
	// sizes (count, tokens, squares), and how many were observed.
	obsSec, obsN, obsTok, obsSq float64
	obsSamples                  uint32
}

// window returns when the running group, priced with h, is expected to
// have left of its prefill less than the work W(r) counts for it (from) and
// to end with its first token (until); zeros when there is no running group
// or its start is unknown (something foreign was queued ahead when it was
// sent). Between the two, the time since from is prefill already done.
//
// The duration is the profile's prefill time of its prompts, attention's
// quadratic part included (a 100k-token prompt spends more on attention
// than on the linear part, and without it a long prefill would look nearly
// done long before its end), or, where groups of this router were observed
// to take longer here (co-batched foreign work, a slower engine than the
// profile), that rate applied to this group. The work counted is its fixed
// and linear parts, so done work is duration minus remaining time, never
// more than the count. Once the duration has passed without a first token
// the estimate failed, and the group counts in full again.
func (g *prefillGroups) window(h *Hardware) (fromNanos, untilNanos int64) {
	if g.runN <= 0 || g.runStartNanos <= 0 {
		return 0, 0
	}
	full := float64(g.runN)*h.PrefillFixedSec + float64(g.runTokens)*h.PrefillSecPerToken
	dur := full + g.runSq*h.PrefillSecPerToken2
	if g.obsSamples > 0 {
		est := g.obsN*h.PrefillFixedSec + g.obsTok*h.PrefillSecPerToken + g.obsSq*h.PrefillSecPerToken2
		if est > 0 && g.obsSec > est {
			dur *= g.obsSec / est
		}
	}
	// Out-of-range durations (a corrupt profile) give no window rather
	// than an overflowed one.
	if !(dur > 0 && dur < 1e6 && full >= 0 && full <= dur) {
		return 0, 0
	}
	untilNanos = g.runStartNanos + int64(dur*1e9)
	return untilNanos - int64(full*1e9), untilNanos
}

// doneSec is the running group's prefill done by nowNanos (window).
func (g *prefillGroups) doneSec(h *Hardware, nowNanos int64) float64 {
	from, until := g.window(h)
	return doneIn(from, until, nowNanos)
}

type adapterMem struct {
	adapter uint64
	replica int32
	until   int64
	// prev is the until of the send before the last one (0: none known):
	// where the adapter was when it was last sent, so what its load costs.
	prev int64
	// rate is how often adapter was sent to replica (time constant
	// Params.AdapterMemory, the span the router counts it resident): the
	// input of the LRU model that prices displacing it (cheSolve).
	rate Rate
}

// AdapterPlacement is one entry of a Ledger's adapter memory: adapter (its
// HashString) was sent to Replica, and counts as GPU-resident there until
// UntilNanos (then as host-cached for Params.AdapterHostMemory). Routers
// that share state exchange these so each prices adapters by what all of
// them sent, not only by its own dispatches.
type AdapterPlacement struct {
	Adapter    uint64
	Replica    int
	UntilNanos int64
}

type outputEst struct {
	key   uint64
	mean  float64
	n     uint32
	stamp uint32
}

const (
	ledgerAdapterSlots = 256
	ledgerEstimators   = 64
	// ewmaAlpha weighs a new sample; ~1/20 remembers the last few dozen
	// requests, enough to follow a workload shift within seconds.
	ewmaAlpha = 0.05
)

// NewLedger returns a ledger for up to maxReplicas replicas and maxInFlight
// concurrent requests (Dispatch refuses more), using p's defaults.
func NewLedger(p Params, maxReplicas, maxInFlight int) *Ledger {
	maxReplicas = max(maxReplicas, 1)
	maxInFlight = max(maxInFlight, 1)
	l := &Ledger{
		p:       p,
		flights: make([]flight, maxInFlight),
		free:    make([]int32, 0, maxInFlight),
		live:    make([]int32, 0, maxInFlight),
		reps:    make([]repAcc, maxReplicas),
		adapt:   make([]adapterMem, 0, ledgerAdapterSlots),
		est:     make([]outputEst, 0, ledgerEstimators),
		mark:    make([]uint64, (maxReplicas+63)/64),
		host:    make([]uint64, (maxReplicas+63)/64),
		fresh:   make([]int32, maxReplicas),
		pending: make([]float64, maxReplicas),
		// One rate per adapter memory entry at most.
		otherRate: make([]float64, 0, ledgerAdapterSlots),
		otherFor:  -1,
		otherN:    make([]int32, maxReplicas),
		selfRate:  make([]float64, maxReplicas),
		reloadSec: make([]float64, maxReplicas),
		ownSec:    make([]float64, maxReplicas),
		che:       make([]cheCache, maxReplicas),
		adaptVer:  make([]uint32, maxReplicas),
	}
	for i := maxInFlight - 1; i >= 0; i-- {
		l.free = append(l.free, int32(i))
	}
	return l
}

// Reset forgets in-flight requests and adapter memory (keeps the learned
// output estimates, which do not depend on replica numbering).
func (l *Ledger) Reset() {
	if l == nil {
		return
	}
	l.free = l.free[:0]
	l.live = l.live[:0]
	for i := len(l.flights) - 1; i >= 0; i-- {
		gen := l.flights[i].gen + 1
		l.flights[i] = flight{gen: gen}
		l.free = append(l.free, int32(i))
	}
	clear(l.reps)
	clear(l.che)
	l.otherFor = -1
	clear(l.adaptVer)
	l.adapt = l.adapt[:0]
}

// InFlight returns the number of in-flight requests the ledger tracks.
func (l *Ledger) InFlight() int {
	if l == nil {
		return 0
	}
	return len(l.flights) - len(l.free)
}

// WorkOn returns the ledger's work on replica, with its unseen part counted
// against a snapshot taken at snapNanos (the replica's ScrapedNanos) and
// the window of its prefill in progress priced with h (the replica's
// profile).
func (l *Ledger) WorkOn(replica int, h *Hardware, snapNanos int64) Work {
	if l == nil || replica < 0 || replica >= len(l.reps) {
		return Work{}
	}
	if l.reps[replica].syncedSnap != snapNanos {
		l.sync(replica, snapNanos)
	}
	w := l.reps[replica].Work
	w.RunFromNanos, w.RunUntilNanos = l.reps[replica].window(h)
	w.PendingN = l.reps[replica].pendN
	return w
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
// (fleetLoad), so the routers exchange one rate each, not one per replica:
// a rate per replica changed as it decayed, so every router republished
// and every reader summed again its whole record at every tick.
func (l *Ledger) SetPeerRate(perSec float64) {
	if l != nil {
		l.peerRate = perSec
	}
}

// InFlightOn returns the number of in-flight requests on replica.
func (l *Ledger) InFlightOn(replica int) int {
	if l == nil || replica < 0 || replica >= len(l.reps) {
		return 0
	}
	return int(l.reps[replica].QueuedN + l.reps[replica].DecodeN)
}

func outputKey(model, adapter string) uint64 {
	return prefix.Finalize(prefix.HashString(model) ^ bits.RotateLeft64(prefix.HashString(adapter), 17))
}

// ExpectedOutput returns the output-length estimate for a new request:
// max_tokens is the pessimistic bound; the learned mean for its model and
// adapter replaces it when lower; with neither, Params.DefaultOutputTokens.
func (l *Ledger) ExpectedOutput(req *Request) int64 {
	learned := -1.0
	def := int64(DefaultParams().DefaultOutputTokens)
	if l != nil {
		def = int64(l.p.DefaultOutputTokens)
		key := outputKey(req.Model, req.Adapter)
		for i := range l.est {
			if l.est[i].key == key {
				learned = l.est[i].mean
				break
			}
		}
	}
	switch {
	case learned >= 0 && (req.MaxTokens <= 0 || learned < float64(req.MaxTokens)):
		return max(int64(learned+0.5), 1)
	case req.MaxTokens > 0:
		return int64(req.MaxTokens)
	}
	return def
}

// remainingOf returns the remaining-output estimate after streamed tokens:
// the expectation minus what came back; once a request outlives its
// expectation, half again what it produced so far (a long-running
// generation tends to run longer), never beyond max_tokens.
func remainingOf(f *flight) int64 {
	if f.streamed < f.expect {
		return f.expect - f.streamed
	}
	r := max(f.streamed/2, 1)
	if f.maxTokens > 0 {
		r = min(r, max(f.maxTokens-f.streamed, 0))
	}
	return r
}

// Dispatch records that req, with uncachedTokens left to prefill, was sent
// to replica at nowNanos. It returns 0 if the ledger is full or the replica
// out of range (the request is then simply not accounted).
func (l *Ledger) Dispatch(replica int, req *Request, uncachedTokens int, nowNanos int64) Flight {
	if l == nil || replica < 0 || replica >= len(l.reps) || len(l.free) == 0 {
		return 0
	}
	slot := l.free[len(l.free)-1]
	l.free = l.free[:len(l.free)-1]
	f := &l.flights[slot]
	gen := f.gen + 1
	if gen == 0 {
		gen = 1
	}
	*f = flight{
		gen:        gen,
		used:       true,
		replica:    int32(replica),
		at:         int32(len(l.live)),
		dispatched: nowNanos,
		prefill:    int64(max(uncachedTokens, 0)),
		maxTokens:  int64(max(req.MaxTokens, 0)),
		expect:     l.ExpectedOutput(req),
		key:        outputKey(req.Model, req.Adapter),
	}
	f.remaining = remainingOf(f)
	l.live = append(l.live, slot)
	r := &l.reps[replica]
	l.total.Add(nowNanos, l.p.RateWindow.Seconds())
	r.QueuedN++
	r.QueuedTokens += f.prefill
	if nowNanos > r.syncedSnap {
		r.UnseenN++
		r.UnseenTokens += f.prefill
	}
	g := &r.prefillGroups
	if g.runN == 0 {
		// Nothing of ours queued: the request starts at the next step
		// boundary, or when the other workers' groups in progress end if
		// theirs are the only prefills queued ahead, as the Pick that
		// chose this replica saw; with other work ahead its start is
		// unknown until the next first token here.
		g.run++
		f.group = g.run
		sq := float64(f.prefill) * float64(f.prefill)
		g.runN, g.runTokens, g.runSq = 1, f.prefill, sq
		g.runN0, g.runTok0, g.runSq0 = 1, f.prefill, sq
		g.runStartNanos = 0
		if g.pickNanos == nowNanos {
			g.runStartNanos = g.startNanos
		}
	} else {
		f.group = g.run + 1
		g.pendN++
		g.pendTok += f.prefill
		g.pendSq += float64(f.prefill) * float64(f.prefill)
	}
	// A queued request the router did not send costs its uncached prompt
	// tokens: the mean of what this router sends is the best guess, since
	// routers behind one gateway see the same traffic.
	l.promptMean = ewma(l.promptMean, float64(max(uncachedTokens, 1)))
	if req.Adapter != "" {
		l.rememberAdapter(prefix.HashString(req.Adapter), int32(replica), nowNanos, nowNanos+int64(l.p.AdapterMemory))
	}
	return Flight(uint64(gen)<<32 | uint64(slot))
}

func ewma(m, x float64) float64 {
	if m == 0 {
		return x
	}
	return m + ewmaAlpha*(x-m)
}

func (l *Ledger) lookup(h Flight) *flight {
	if l == nil || h == 0 {
		return nil
	}
	slot := int(uint32(h))
	if slot >= len(l.flights) {
		return nil
	}
	f := &l.flights[slot]
	if !f.used || f.gen != uint32(h>>32) {
		return nil
	}
	return f
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
	r := &l.reps[f.replica]
	r.QueuedN--
	r.QueuedTokens -= f.prefill
	l.leaveQueue(f, nowNanos, true)
	f.first = true
	r.DecodeN++
	r.DecodeTokens += f.remaining
}

// leaveQueue takes queued flight f out of its prefill group; firstToken
// says its first token came back at nowNanos (0: unknown) rather than it
// being dropped. When the running group empties, the pending one becomes
// the running one, started now if this was a first token at a known time.
func (l *Ledger) leaveQueue(f *flight, nowNanos int64, firstToken bool) {
	g := &l.reps[f.replica].prefillGroups
	sq := float64(f.prefill) * float64(f.prefill)
	switch f.group {
	case g.run:
		g.runN--
		g.runTokens -= f.prefill
		g.runSq -= sq
	case g.run + 1:
		g.pendN--
		g.pendTok -= f.prefill
		g.pendSq -= sq
	default:
		return
	}
	if g.runN > 0 {
		return
	}
	known := firstToken && nowNanos > 0
	if known && g.runStartNanos > 0 && nowNanos >= g.runStartNanos && f.group == g.run {
		// The group's step ended: learn how long a group of its size
		// took here (Pick compares it with the profile's estimate).
		g.obsSec = ewma(g.obsSec, float64(nowNanos-g.runStartNanos)/1e9)
		g.obsN = ewma(g.obsN, float64(g.runN0))
		g.obsTok = ewma(g.obsTok, float64(max(g.runTok0, 1)))
		g.obsSq = ewma(g.obsSq, max(g.runSq0, 1))
		g.obsSamples++
	}
	g.runN, g.runTokens, g.runSq = 0, 0, 0
	if g.pendN <= 0 {
		g.pendN, g.pendTok, g.pendSq = 0, 0, 0
		return
	}
	g.run++
	g.runN, g.runTokens, g.runSq = g.pendN, g.pendTok, max(g.pendSq, 0)
	g.runN0, g.runTok0, g.runSq0 = g.runN, g.runTokens, g.runSq
	g.pendN, g.pendTok, g.pendSq = 0, 0, 0
	g.runStartNanos = 0
	if known {
		g.runStartNanos = nowNanos
	}
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
	f.streamed += int64(tokens)
	old := f.remaining
	f.remaining = remainingOf(f)
	l.reps[f.replica].DecodeTokens += f.remaining - old
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
		l.learn(f.key, float64(outputTokens))
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
	// Backwards: remove moves the last live entry into the removed one's
	// place, and that entry was already looked at.
	for k := len(l.live) - 1; k >= 0; k-- {
		if k >= len(l.live) {
			continue
		}
		slot := l.live[k]
		if f := &l.flights[slot]; f.dispatched < olderThanNanos {
			l.remove(f, slot)
			n++
		}
	}
	return n
}

func (l *Ledger) remove(f *flight, slot int32) {
	r := &l.reps[f.replica]
	if f.first {
		r.DecodeN--
		r.DecodeTokens -= f.remaining
	} else {
		r.QueuedN--
		r.QueuedTokens -= f.prefill
		l.leaveQueue(f, 0, false)
	}
	if f.dispatched > r.syncedSnap {
		r.UnseenN--
		r.UnseenTokens -= f.prefill
	}
	last := len(l.live) - 1
	if at := int(f.at); at >= 0 && at <= last && l.live[at] == slot {
		moved := l.live[last]
		l.live[at] = moved
		l.flights[moved].at = int32(at)
		l.live = l.live[:last]
	}
	gen := f.gen
	*f = flight{gen: gen}
	l.free = append(l.free, slot)
}

func (l *Ledger) learn(key uint64, x float64) {
	l.clock++
	l.outputMean = ewma(l.outputMean, x)
	oldest := -1
	for i := range l.est {
		e := &l.est[i]
		if e.key == key {
			// Plain mean for the first samples, then an EWMA.
			e.n++
			if e.n < 20 {
				e.mean += (x - e.mean) / float64(e.n)
			} else {
				e.mean += ewmaAlpha * (x - e.mean)
			}
			e.stamp = l.clock
			return
		}
		if oldest < 0 || e.stamp < l.est[oldest].stamp {
			oldest = i
		}
	}
	e := outputEst{key: key, mean: x, n: 1, stamp: l.clock}
	if len(l.est) < cap(l.est) {
		l.est = append(l.est, e)
	} else if oldest >= 0 {
		l.est[oldest] = e
	}
}

// AppendAdapterPlacements appends the placements this ledger still counts
// (GPU or host memory) at nowNanos.
func (l *Ledger) AppendAdapterPlacements(dst []AdapterPlacement, nowNanos int64) []AdapterPlacement {
	if l == nil {
		return dst
	}
	for i := range l.adapt {
		a := &l.adapt[i]
		if a.until+int64(l.p.AdapterHostMemory) > nowNanos {
			dst = append(dst, AdapterPlacement{Adapter: a.adapter, Replica: int(a.replica), UntilNanos: a.until})
		}
	}
	return dst
}

// MergeAdapterPlacement adds a placement another router made; the later of
// the two memories of the same placement wins.
func (l *Ledger) MergeAdapterPlacement(pl AdapterPlacement) {
	if l == nil || pl.Replica < 0 || pl.Replica >= len(l.reps) {
		return
	}
	for i := range l.adapt {
		a := &l.adapt[i]
		if a.adapter == pl.Adapter && int(a.replica) == pl.Replica {
			if pl.UntilNanos > a.until {
				// A later send by the peer: one more request there.
				a.prev, a.until = a.until, pl.UntilNanos
				a.rate.Add(pl.UntilNanos-int64(l.p.AdapterMemory), l.p.AdapterMemory.Seconds())
				l.adaptVer[a.replica]++
			}
			return
		}
	}
	l.rememberAdapter(pl.Adapter, int32(pl.Replica), pl.UntilNanos-int64(l.p.AdapterMemory), pl.UntilNanos)
}

// rememberAdapter records a send of adapter to replica at sentNanos, counted
// resident until untilNanos.
func (l *Ledger) rememberAdapter(adapter uint64, replica int32, sentNanos, until int64) {
	victim := -1
	window := l.p.AdapterMemory.Seconds()
	for i := range l.adapt {
		a := &l.adapt[i]
		if a.adapter == adapter && a.replica == replica {
			if until > a.until {
				a.prev, a.until = a.until, until
			}
			a.rate.Add(sentNanos, window)
			l.adaptVer[replica]++
			return
		}
		if victim < 0 || a.until < l.adapt[victim].until {
			victim = i
		}
	}
	m := adapterMem{adapter: adapter, replica: replica, until: until}
	m.rate.Add(sentNanos, window)
	l.adaptVer[replica]++
	if len(l.adapt) < cap(l.adapt) {
		l.adapt = append(l.adapt, m)
	} else if victim >= 0 {
		l.adaptVer[l.adapt[victim].replica]++
		l.adapt[victim] = m
	}
}

// markAdapter fills l.mark with the replicas remembered to hold adapter in
// GPU memory at nowNanos (sent there within Params.AdapterMemory), and
// l.host with those remembered to hold it in host memory (within
// Params.AdapterHostMemory after that): engines keep recently used
// adapters in a CPU LoRA cache (vLLM --max-cpu-loras) that no metric shows.
// It also counts, per replica, the other adapters sent there since
// replicas' snapshot that the snapshot does not list (l.fresh), and fills
// the LRU model's inputs: l.selfRate, the adapter's send rate on each
// replica, and l.otherN, how many other adapters have one there.
func (l *Ledger) markAdapter(adapter uint64, replicas []Replica, nowNanos int64) {
	clear(l.mark)
	clear(l.host)
	clear(l.fresh)
	clear(l.pending)
	clear(l.selfRate)
	clear(l.otherN)
	l.marked, l.markNanos, l.otherFor = adapter, nowNanos, -1
	if len(l.adapt) == 0 {
		return
	}
	mem := int64(l.p.AdapterMemory)
	hostMem := int64(l.p.AdapterHostMemory)
	window := l.p.AdapterMemory.Seconds()
	for i := range l.adapt {
		a := &l.adapt[i]
		if int(a.replica) >= len(l.reps) || a.until+int64(l.p.AdapterHostMemory) <= nowNanos {
			continue
		}
		// The LRU model's inputs (reloadCost): the adapter's own rate
		// there, and how many others have one. Only the own rate costs an
		// exponential; the others' are only needed where a cache is
		// solved again (otherRates).
		if a.rate.perSec > 0 {
			if a.adapter == adapter {
				l.selfRate[a.replica] = a.rate.At(nowNanos, window)
			} else {
				l.otherN[a.replica]++
			}
		}
		if a.adapter != adapter {
			// Sent after the snapshot: its requests hold a slot or wait
			// for one, and the snapshot (which lists the adapters with
			// requests) counted the slot free. Until the next scrape only
			// this memory knows; at a cold start that is every slot.
			if int(a.replica) < len(replicas) && a.until > nowNanos {
				r := &replicas[a.replica]
				sent := a.until - mem
				listed, waiting := snapshotListing(r, a.adapter)
				fresh := sent > r.ScrapedNanos && !listed
				if fresh {
					l.fresh[a.replica]++
				}
				// Its load is still to come: it runs inside an engine
				// step and stalls every request there (vLLM activates
				// LoRAs before the forward pass). A fresh adapter that
				// was GPU-resident when sent likely still is.
				switch {
				case !fresh && !waiting:
				case a.prev > sent && fresh:
				case a.prev > 0 && a.prev+hostMem > sent:
					l.pending[a.replica] += r.Hardware.AdapterLoadHostSec
				default:
					l.pending[a.replica] += r.Hardware.AdapterLoadStorageSec
				}
			}
			continue
		}
		bit := uint64(1) << (uint(a.replica) & 63)
		switch {
		case a.until > nowNanos:
			l.mark[a.replica>>6] |= bit
		case a.until+int64(l.p.AdapterHostMemory) > nowNanos:
			l.host[a.replica>>6] |= bit
		}
	}
}

// otherRates returns the send rates of the adapters other than the marked
// one remembered on replica, as of the last markAdapter, times scale
// (l.otherRate, kept for the next call for the same replica and scale),
// and whether any adapter there, the marked one too, was sent after then.
func (l *Ledger) otherRates(replica int, scale float64) (rates []float64, ahead bool) {
	if l.otherFor == replica && l.otherScale == scale {
		return l.otherRate, l.otherAhead
	}
	keep := int64(l.p.AdapterHostMemory)
	window := l.p.AdapterMemory.Seconds()
	l.otherRate = l.otherRate[:0]
	for i := range l.adapt {
		a := &l.adapt[i]
		if int(a.replica) != replica || a.until+keep <= l.markNanos || !(a.rate.perSec > 0) {
			continue
		}
		if a.rate.lastNanos > l.markNanos {
			ahead = true
		}
		if a.adapter != l.marked {
			l.otherRate = append(l.otherRate, a.rate.At(l.markNanos, window)*scale)
		}
	}
	l.otherFor, l.otherScale, l.otherAhead = replica, scale, ahead
	return l.otherRate, ahead
}

// adapterRates returns how many other adapters are remembered on replica
// with a send rate, and the adapter's own rate there, as of the last
// markAdapter.
func (l *Ledger) adapterRates(replica int) (others int, self float64) {
	if l == nil || replica < 0 || replica >= len(l.otherN) {
		return 0, 0
	}
	return int(l.otherN[replica]), l.selfRate[replica]
}

// adapterStream returns how many more requests of the adapter of the last
// markAdapter the router expects within the next window seconds (Pick
// passes AdapterMemory, the span its rates cover): its recent sends to any
// replica (its rates summed, times window: a steady stream of λ reads
// λ·window), or, for an adapter remembered nowhere, the mean over the
// placements remembered, since nothing says it is rarer than the others.
// Without that prior a new tail adapter counted as one request and went to
// the idle replica whose host cache was full (lora seed 3: 47 storage
// loads with it off, 41 with it, always-warm 32). 0 with no memory.
func (l *Ledger) adapterStream(window float64) float64 {
	if l == nil || !(window > 0) {
		return 0
	}
	self := 0.0
	for _, x := range l.selfRate {
		self += x
	}
	if self > 0 {
		return self * window
	}
	// An adapter remembered nowhere: the placements' mean rate, which
	// costs an exponential each, paid only on such requests.
	keep := int64(l.p.AdapterHostMemory)
	sum, n := 0.0, 0
	for i := range l.adapt {
		a := &l.adapt[i]
		if a.until+keep <= l.markNanos || !(a.rate.perSec > 0) {
			continue
		}
		sum += a.rate.At(l.markNanos, l.p.AdapterMemory.Seconds())
		n++
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n) * window
}

// reloadOn returns the reload seconds per request that one more request
// of the adapter on replica costs, as of the last adapterReloads: the
// other adapters' extra misses plus its own beyond ownBest, the least own
// cost of any replica.
func (l *Ledger) reloadOn(replica int, ownBest float64) float64 {
	if l == nil || replica >= len(l.reloadSec) {
		return 0
	}
	sec := l.reloadSec[replica]
	if own := l.ownSec[replica] - ownBest; own > 0 {
		sec += own
	}
	return sec
}

// snapshotListing reports whether r's snapshot lists the adapter whose key
// is h, and whether as waiting for a GPU slot (any tier but TierGPU).
func snapshotListing(r *Replica, h uint64) (listed, waiting bool) {
	for i := range r.Adapters {
		if a := &r.Adapters[i]; a.key() == h {
			return true, a.Tier != TierGPU
		}
	}
	return false, false
}

// pendingOn returns the seconds of other adapters' loads still to run on
// replica, as of the last markAdapter.
func (l *Ledger) pendingOn(replica int) float64 {
	if l == nil || replica >= len(l.pending) {
		return 0
	}
	return l.pending[replica]
}

// freshOn returns how many other adapters were sent to replica after its
// snapshot and are not listed in it, as of the last markAdapter.
func (l *Ledger) freshOn(replica int) int {
	if l == nil || replica >= len(l.fresh) {
		return 0
	}
	return int(l.fresh[replica])
}

// remembered returns where the ledger believes replica holds the adapter
// last passed to markAdapter: TierGPU, TierHost, or TierStorage (nowhere).
func (l *Ledger) remembered(replica int) AdapterTier {
	if l == nil || replica>>6 >= len(l.mark) {
		return TierStorage
	}
	bit := uint64(1) << (uint(replica) & 63)
	switch {
	case l.mark[replica>>6]&bit != 0:
		return TierGPU
	case l.host[replica>>6]&bit != 0:
		return TierHost
	}
	return TierStorage
}

// SyncSnapshots recounts the work each replica's latest snapshot has not
// seen (the requests dispatched after its ScrapedNanos) for every replica
// whose snapshot moved, in one pass over the requests in flight. Pick and
// WorkOn do it per replica when they find one moved; a scrape moves them
// all at once, and one pass each made the first Pick after it O(replicas ×
// in flight): with 2,048 in flight over 64 replicas 1.02 ms under wazero
// against 21 µs (BenchmarkPickAfterScrape64). Call it before pricing every
// replica after a scrape.
func (l *Ledger) SyncSnapshots(replicas []Replica) {
	if l == nil {
		return
	}
	stale := false
	for i := range min(len(replicas), len(l.reps)) {
		if l.reps[i].syncedSnap != replicas[i].ScrapedNanos {
			l.resync(i, replicas[i].ScrapedNanos)
			stale = true
		}
	}
	if stale {
		l.recountUnseen()
	}
}

// sync recomputes replica's unseen work against a new snapshot time: the
// requests dispatched before the scrape are now in the reported counts.
// Once per scrape per replica; O(in-flight).
func (l *Ledger) sync(replica int, snapNanos int64) {
	l.resync(replica, snapNanos)
	l.recountUnseen()
}

// resync marks replica's unseen work for recounting against a snapshot
// taken at snapNanos.
func (l *Ledger) resync(replica int, snapNanos int64) {
	r := &l.reps[replica]
	r.syncedSnap, r.UnseenN, r.UnseenTokens, r.resync = snapNanos, 0, 0, true
}

// recountUnseen counts, in one pass over the requests in flight, the unseen
// work of the replicas marked by resync: the requests dispatched after
// their snapshot.
func (l *Ledger) recountUnseen() {
	for _, slot := range l.live {
		f := &l.flights[slot]
		if i := int(f.replica); i >= 0 && i < len(l.reps) {
			if r := &l.reps[i]; r.resync && f.dispatched > r.syncedSnap {
				r.UnseenN++
				r.UnseenTokens += f.prefill
			}
		}
	}
	for i := range l.reps {
		l.reps[i].resync = false
	}
}
