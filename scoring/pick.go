package scoring

import (
	"math"
	"runtime"

	"github.com/gpuroute/gpuroute/scoring/prefix"
)

// Reason says why Pick chose what it chose.
type Reason uint8

// Reasons, as reported in Decision.Reason.
const (
	// ReasonNoReplica: no replica was eligible (all unhealthy, draining,
	// or unable to hold the adapter); Decision.Index is -1.
	ReasonNoReplica Reason = iota
	// ReasonOnlyReplica: exactly one replica was eligible.
	ReasonOnlyReplica
	// ReasonLeastLoaded: the chosen replica had the least queued work.
	ReasonLeastLoaded
	// ReasonPrefixAffinity: a replica with less queued work existed, but the
	// cached prefix here saved more prefill than the queue gap costs.
	ReasonPrefixAffinity
	// ReasonAdapterResident: a replica with less queued work existed, but
	// it would have had to load the adapter.
	ReasonAdapterResident
	// ReasonFasterHardware: a replica with less queued work existed, but
	// this one prefills faster.
	ReasonFasterHardware
	// ReasonTieBreak: several replicas were within Params.TieEpsilonSec;
	// rendezvous hashing of the prefix chose among them.
	ReasonTieBreak
)

// String returns the reason's kebab-case name (stable: used in stats names
// and the explanation header).
func (r Reason) String() string {
	switch r {
	case ReasonNoReplica:
		return "no-replica"
	case ReasonOnlyReplica:
		return "only-replica"
	case ReasonLeastLoaded:
		return "least-loaded"
	case ReasonPrefixAffinity:
		return "prefix-affinity"
	case ReasonAdapterResident:
		return "adapter-resident"
	case ReasonFasterHardware:
		return "faster-hardware"
	case ReasonTieBreak:
		return "tie-break"
	}
	return "unknown"
}

// TopN is how many candidates a Decision explains.
const TopN = 4

// Candidate is one replica's cost terms, in seconds.
type Candidate struct {
	// Index is the replica's index in the slice passed to Pick.
	Index int
	// WaitSec is W(r): queued prefill (of the router's own prefill in
	// progress, only what is left: see prefillGroups), the running batch's
	// per-step slowdown, any KV or batch-slot wait, the loads of other
	// adapters queued there without a GPU slot yet (each stalls the
	// replica for its load time), plus StalePenaltySec when Stale.
	WaitSec float64
	// AdapterSec is A(r, a).
	AdapterSec float64
	// PrefillSec is P_r(n − k).
	PrefillSec float64
	// CachedTokens is k(r), clamped to [0, n−1].
	CachedTokens int
	// ExternalSec is the delay the request's own work on r (adapter load
	// and prefill, A + P) imposes on other requests: λ · ETTFT · (A + P)
	// for those arriving while it waits and prefills, where λ is the mean
	// arrival rate per open replica (the ledger's dispatches plus the other
	// routers', Ledger.SetPeerRate), plus N_r · A for the N_r requests
	// already on r that an adapter load stalls, plus (1 + N_r) times the
	// reloads the other adapters on r will need because this one shares r's
	// GPU slots and host cache with them, and that the adapter's own later
	// requests will need there beyond what they need at its home
	// (reloadCost, adapterReloads), those times the requests of the adapter
	// expected to follow it when r must load it from storage
	// (Ledger.adapterStream); scaled by Params.ExternalityWeight.
	ExternalSec float64
	// Stale is true when the replica's snapshot was older than
	// Params.StaleAfter (or missing).
	Stale bool
}

// TotalSec returns ETTFT(r) = W + A + P.
func (c *Candidate) TotalSec() float64 { return c.WaitSec + c.AdapterSec + c.PrefillSec }

// CostSec is what Pick minimises: the request's own ETTFT plus the delay
// its work imposes on the requests that will queue behind it (ExternalSec).
func (c *Candidate) CostSec() float64 { return c.TotalSec() + c.ExternalSec }

// Decision is the result of Pick with its explanation. Keep one per worker
// (or per request context) and pass it to every Pick: it owns scratch that
// makes Pick allocation-free after the first call.
type Decision struct {
	// Index is the chosen replica, or -1 when none is eligible.
	Index int
	// Reason says why.
	Reason Reason
	// Top holds up to TopN candidates: Top[0] is the chosen one, the rest
	// the cheapest others, cheapest first.
	Top    [TopN]Candidate
	NumTop int
	// Eligible counts replicas that were scored.
	Eligible int
	// Unhealthy, Draining and NoAdapterSlot count excluded replicas.
	Unhealthy, Draining, NoAdapterSlot int
	// Stale counts eligible replicas with an uncertain snapshot.
	Stale int

	cands []Candidate
	adapt []adapterTerms
	plain []adapterTerms // the terms of a request without an adapter (pick)
	done  []float64      // per replica, the running prefill group's progress (pick)
	// cached pads a cachedTokens shorter than the fleet with zeros, and
	// noLedger stands for the ledger entry of a replica the ledger does not
	// cover (pick).
	cached   []int
	noLedger repAcc
}

// Chosen returns the chosen candidate's cost terms, or false when none.
func (d *Decision) Chosen() (Candidate, bool) {
	if d.Index < 0 || d.NumTop == 0 {
		return Candidate{}, false
	}
	return d.Top[0], true
}

// Pick chooses the replica with the lowest expected time to first token for
// req among replicas, writing the result to d:
//
//	ETTFT(r) = W(r) + A(r, a) + P_r(n − k(r))
//
// cachedTokens[i] is k for replica i (prefix.Index.Lookup; nil: nothing
// cached). l is the router's ledger (nil: none); Pick brings its view of
// work-since-scrape up to date with each replica's ScrapedNanos. nowNanos
// is the caller's clock. Unhealthy, draining and drained replicas, and
// replicas that cannot hold the adapter, are excluded. Costs within
// p.TieEpsilonSec of the best are broken by rendezvous hashing of the
// prefix's first p.HomeBlocks blocks, so the result is a deterministic
// function of the inputs. Pick never panics on bad input and allocates only
// when d's scratch must grow (the first call, or a larger fleet).
func Pick(p *Params, req *Request, replicas []Replica, cachedTokens []int, l *Ledger, nowNanos int64, d *Decision) {
	pick(p, req, replicas, cachedTokens, l, nowNanos, d, false)
	if d.Eligible == 0 && d.NoAdapterSlot > 0 {
		// Every open replica has all its adapter slots busy: the engine
		// queues the request until one frees (vLLM does), so wait where
		// that, plus the rest, costs least rather than refuse it.
		pick(p, req, replicas, cachedTokens, l, nowNanos, d, true)
	}
}

// pick is Pick's pass; with waitForSlot, a replica without a free adapter
// slot is scored with the wait for one (about one mean remaining output of
// its batch per adapter already waiting there for a slot, plus one) added
// to A instead of excluded.
func pick(p *Params, req *Request, replicas []Replica, cachedTokens []int, l *Ledger, nowNanos int64, d *Decision, waitForSlot bool) {
	d.Index, d.Reason, d.NumTop = -1, ReasonNoReplica, 0
	d.Eligible, d.Unhealthy, d.Draining, d.NoAdapterSlot, d.Stale = 0, 0, 0, 0, 0
	if cap(d.cands) < len(replicas) {
		d.cands = make([]Candidate, len(replicas))
	}
	cands := d.cands[:len(replicas)]

	// The loop's invariants live in memory (a struct of more than four
	// fields is not split into registers): on wasm each value live across
	// the loop costs spills and reloads in every iteration.
	var k struct {
		n                                                 int
		promptMean, outMean, chunk, load, ownBest, stream float64
		ownOut                                            float64 // this request's expected output
		staleNanos                                        int64
		adapterHash                                       uint64
		waitForSlot                                       bool
		terms                                             []adapterTerms // one per replica
	}
	k.waitForSlot = waitForSlot
	k.ownOut = float64(l.ExpectedOutput(req))
	n := max(req.PromptTokens, 1)
	k.n = n
	var adapterHash uint64
	if req.Adapter != "" {
		adapterHash = prefix.HashString(req.Adapter)
		if l != nil {
			l.markAdapter(adapterHash, replicas, nowNanos)
		}
	}
	promptMean, outMean := float64(p.DefaultPromptTokens), float64(p.DefaultOutputTokens)
	if l != nil {
		if l.promptMean > 0 {
			promptMean = l.promptMean
		}
		if l.outputMean > 0 {
			outMean = l.outputMean
		}
	}
	staleNanos := int64(p.StaleAfter)
	chunk := float64(max(p.PrefillChunkTokens, 1))
	// The loop below calls nothing: on wasm a call in it made Go spill
	// the values live across the call in every iteration, taken or not
	// (the snapshot recount, a group's progress and the top list were
	// calls there). Their inputs do not depend on the loop, so they come
	// before it and the top list after.
	if cap(d.done) < len(replicas) {
		d.done = make([]float64, len(replicas))
	}
	done := d.done[:len(replicas)]
	capacity := prepass(replicas, l, nowNanos, promptMean, done)
	load := 0.0
	if p.ExternalityWeight > 0 {
		load = fleetLoad(l, nowNanos, capacity)
	}

	ownBest, stream := 0.0, 1.0
	if req.Adapter != "" && p.ExternalityWeight > 0 {
		ownBest = adapterReloads(p, replicas, l, nowNanos)
		stream += l.adapterStream(p.AdapterMemory.Seconds())
	}
	k.promptMean, k.outMean, k.chunk, k.load, k.ownBest, k.stream = promptMean, outMean, chunk, load, ownBest, stream
	k.staleNanos, k.adapterHash = staleNanos, adapterHash
	if req.Adapter != "" {
		if cap(d.adapt) < len(replicas) {
			d.adapt = make([]adapterTerms, len(replicas))
		}
		k.terms = d.adapt[:len(replicas)]
		adapterPass(p, req, replicas, l, nowNanos, k.terms, adapterHash, ownBest, stream, waitForSlot)
	} else {
		// Without an adapter every replica can serve it at no cost: a
		// row of such terms, read like the others, so that the loop
		// below has no branch on whether there is an adapter.
		if cap(d.plain) < len(replicas) {
			d.plain = make([]adapterTerms, len(replicas))
			for i := range d.plain {
				d.plain[i].ok = true
			}
		}
		k.terms = d.plain[:len(replicas)]
	}

	if len(cachedTokens) < len(replicas) {
		d.cached = append(d.cached[:0], cachedTokens...)
		for len(d.cached) < len(replicas) {
			d.cached = append(d.cached, 0)
		}
		cachedTokens = d.cached
	}
	cachedTokens = cachedTokens[:len(replicas)]
	var reps []repAcc
	if l != nil {
		reps = l.reps
	}

	best := math.Inf(1)
	minWait := math.Inf(1)
	// The common path through this loop is written without branches
	// (selF, b2u, conditional integer assignments): on wasm every jump
	// taken between Go's blocks goes through the function's block
	// dispatch, and the loop took about 16 of them per replica (counted
	// with binaryen's --log-execution), most of its time under wazero.
	for i := range replicas {
		r := &replicas[i]
		c := &cands[i]
		c.Index = -1
		// Not DrainAt: its deadline only turns Draining into Drained,
		// both closed, and on wasm its clock comparisons were branches
		// in every iteration (here and in the other passes).
		healthy := b2u(r.Healthy)
		if healthy&b2u(r.Drain == Serving) == 0 {
			d.Unhealthy += int(1 - healthy)
			d.Draining += int(healthy)
			continue
		}
		// A(r, a), from adapterPass.
		t := &k.terms[i]
		if !t.ok {
			d.NoAdapterSlot++
			continue
		}
		// Field by field, each once, rather than zeroing the whole
		// Candidate first: on wasm the zeroing was a run of stores per
		// replica that the writes below repeat anyway.
		c.Index, c.AdapterSec, c.ExternalSec = i, t.sec, 0
		pendingSec := t.pendingSec
		h := &r.Hardware

		// k(r) and P_r(n − k): the server recomputes at least the last
		// token, so k < n.
		cached := min(max(cachedTokens[i], 0), k.n-1)
		c.CachedTokens = cached
		// h.PrefillSeconds(n − k) written out: n − k ≥ 1, so its guard
		// for no tokens, a float result chosen by a branch on wasm, is
		// not needed.
		uncached := float64(k.n - cached)
		c.PrefillSec = h.PrefillFixedSec + h.PrefillSecPerToken*uncached + h.PrefillSecPerToken2*uncached*uncached

		// W(r): reported queue and batch, with the ledger's and the peer
		// routers' exact tokens for their own requests and means for the rest.
		// The peers' work plus the ledger's, in scalars: copying the Work
		// struct and adding another into it costs memory traffic on wasm.
		pw := &r.PeerWork
		accQueuedN, accQueuedTokens, accDecodeN := pw.QueuedN, pw.QueuedTokens, pw.DecodeN
		accDecodeTokens, accUnseenN, accUnseenTokens := pw.DecodeTokens, pw.UnseenN, pw.UnseenTokens
		lr := &d.noLedger
		if i < len(reps) {
			lr = &reps[i]
		}
		g := &lr.prefillGroups
		accQueuedN += lr.QueuedN
		accQueuedTokens += lr.QueuedTokens
		accDecodeN += lr.DecodeN
		accDecodeTokens += lr.DecodeTokens
		accUnseenN += lr.UnseenN
		accUnseenTokens += lr.UnseenTokens
		waiting, running := int64(max(r.WaitingRequests, 0)), int64(max(r.RunningRequests, 0))
		seenRouted := max(accQueuedN+accDecodeN-accUnseenN, 0)
		foreign := max(waiting+running-seenRouted, 0)
		foreignWaiting := min(foreign, waiting)
		foreignRunning := foreign - foreignWaiting

		// The model is a continuous-batching engine with chunked prefill
		// (vLLM V1, SGLang): every step runs one token of each decoding
		// request plus up to p.PrefillChunkTokens prompt tokens of the
		// requests still prefilling, admitted in arrival order while KV and
		// batch slots allow. Between the new request and its first token:
		//
		//   - Queued prefill: the prompts admitted before it. Prefill is
		//     compute bound, so their tokens cost their full per-token time
		//     whether they run alone or in chunks beside decodes, plus one
		//     fixed cost each.
		//   - Interference: running decodes do not queue ahead of it (the
		//     scheduler runs its prefill in the next steps, beside them);
		//     they make each step longer. The queued and new prompt tokens
		//     need ceil((queued + uncached) / (chunk − batch)) steps (each
		//     decode takes one budget token), and each step carries
		//     batch × DecodeStepSecPerSeq of decode work, the marginal cost
		//     of a sequence in a step. An arrival also waits, on average,
		//     for half of the step in flight.
		//   - Admission: it starts only when its prompt fits in free KV and
		//     the batch has a free slot. Both wait for running requests to
		//     finish, so the longer wait counts, not the sum. KV: when the
		//     reported usage plus unseen prompts plus this prompt, plus the
		//     tokens generated while this request runs, exceed capacity,
		//     about one mean remaining output of the batch at its step time
		//     (pessimistic: the shortest remaining output is enough when it
		//     frees enough blocks). The generation counts because the engine
		//     admits on the prompt alone and makes room for each decode step
		//     by preempting the newest request (vLLM's recompute
		//     preemption): this one, which then waits and prefills again.
		//     Counting only the prompt let a replica that looked fast now
		//     take work it had to preempt later (hetero, seeds 1-10: TTFT
		//     6.43 s mean, 26.5 s p99, 3,859 preemptions; with the
		//     generation counted 3.66 s, 17.4 s and 1,811; the other
		//     workloads unchanged). Only this request's lifetime matters:
		//     over its expected output each running sequence grows by at
		//     most that much, so a short request beside long generations is
		//     not held for their growth. Counting the batch's whole
		//     remaining output held every replica of a fleet generating
		//     20,000-token answers (the oracle on bimodal, seeds 1-3: TTFT
		//     0.180 -> 3.68 s mean). Batch: when
		//     r.MaxBatchSeqs is known and queue plus batch fill it, the
		//     excess waits for as many completions; with remaining outputs
		//     spread evenly up to twice their mean, one comes every
		//     2·mean/batch steps.
		//
		// So decode work enters W through the batch size and, under KV or
		// slot pressure, through remaining output tokens; never as a
		// sequential cost, which would push affinity traffic off a warm
		// replica whose long-running batch delays a prefill by milliseconds.
		// (Inline, not a function: a call makes Go spill every live register
		// of this loop, which doubled Pick's time.)
		qN := float64(accQueuedN + foreignWaiting)
		qTok := float64(accQueuedTokens) + float64(foreignWaiting)*k.promptMean
		w := qN*h.PrefillFixedSec + qTok*h.PrefillSecPerToken + pendingSec
		onReplica := qN + float64(accDecodeN+foreignRunning) // requests an adapter load stalls
		hold := 0.0
		if batch := accDecodeN + foreignRunning; batch > 0 {
			b := float64(batch)
			decodeTok := float64(accDecodeTokens) + float64(foreignRunning)*k.outMean/2
			step := h.DecodeStepSec + h.DecodeStepSecPerSeq*(b-1)
			// The float choices of this block are selF, not ifs (see
			// selF): each if was a jump through the block dispatch per
			// replica on wasm.
			perStep := k.chunk - b
			perStep = selF(!(perStep >= 1), perStep, 1)
			// Prefill steps: one in the common case (the queued and new
			// prompt tokens fit in one step's budget). On wasm the
			// division is cheaper than the branch that avoids it (and
			// math.Ceil is an instruction; its argument is > 1 when
			// used); natively the division always done cost more than
			// the branch (BenchmarkPickBase64 +15%).
			x := qTok + uncached
			steps := 1.0
			if onWasm {
				steps = selF(x > perStep, 1, math.Ceil(x/perStep))
			} else if x > perStep {
				steps = ceil(x / perStep)
			}
			w += step/2 + steps*b*h.DecodeStepSecPerSeq
			kvCap := float64(r.kvCapacity())
			usage := r.KVUsage
			usage = selF(!(usage <= 1), usage, 1) // NaN counts as full
			usage = selF(usage < 0, usage, 0)
			growth := selF(b*k.ownOut < decodeTok, decodeTok, b*k.ownOut)
			kvNeed := usage*kvCap + float64(accUnseenTokens) + uncached + growth + k.ownOut
			kvFull := b2u(kvCap > 0) & b2u(kvNeed > kvCap)
			hold = selF(kvFull != 0, 0, step*decodeTok/b) // one mean remaining output
			excess := qN + b + 1 - float64(r.MaxBatchSeqs)
			bw := step * excess * 2 * decodeTok / (b * b)
			hold = selF(b2u(r.MaxBatchSeqs > 0)&b2u(excess > 0)&b2u(bw > hold) != 0, hold, bw)
			w += hold
			// One slot frees about every mean remaining output; the
			// adapters already waiting for one there take the first
			// ones (the engine admits its queue in order), so this
			// request waits for one more than they do. Counting one
			// wait for all piled a startup burst of new adapters onto
			// the replica that looked soonest (lora seed 2: 7 new
			// adapters on one replica in 5 s, first tokens after 11 to
			// 22 s, and 13 adapters sharing its 4 slots from then on).
			c.AdapterSec += selF(t.slotWait, 0, step*decodeTok/b*float64(t.releases))
		}
		// Progress of the prefills in flight here, this router's and the
		// other workers' (PeerWork.DoneSec): above they count in full,
		// however long ago they started, so every busy replica looked
		// alike and the tie-break chose among them at random, where the
		// one that frees first was wanted (bimodal: 172 of 1095 requests
		// arrived with all four replicas busy). What each has done is
		// prefillGroups.window's estimate; nothing while a KV or
		// batch-slot wait means admission may not have happened. Later
		// prefills count in full: they wait for it. The other workers
		// price their windows with their own calibration of r, so their
		// credit is capped at what W counts for their queued work here.
		// (This router's groups' progress comes from prepass: a call in
		// this loop spills its live registers, see W above. selF, not
		// min: the builtin on floats is a runtime call on wasm.)
		admitted := hold == 0
		peerQueued := float64(pw.QueuedN)*h.PrefillFixedSec + float64(pw.QueuedTokens)*h.PrefillSecPerToken
		w -= selF(admitted, 0, selF(pw.DoneSec > peerQueued, pw.DoneSec, peerQueued))
		w -= selF(admitted, 0, done[i])
		// Dispatch reads this: a request sent here now starts at the
		// next step boundary if nothing foreign is queued ahead, or
		// when the other workers' groups in progress end if theirs are
		// the only prefills ahead (shared-prefix, seeds 1-6, two
		// workers: p99 1.83 s without the second case).
		start := int64(0)
		if clearAt := pw.ClearNanos; b2u(clearAt > 0)&b2u(clearAt != ClearUnknown) != 0 {
			start = max(clearAt, nowNanos)
		}
		if pw.QueuedN == 0 {
			start = nowNanos
		}
		if b2u(foreignWaiting != 0)|b2u(!admitted) != 0 {
			start = 0
		}
		g.pickNanos, g.startNanos = nowNanos, start
		stale := b2u(r.ScrapedNanos == 0) | b2u(nowNanos-r.ScrapedNanos > k.staleNanos)
		c.Stale = stale != 0
		d.Stale += int(stale)
		w += selF(stale != 0, 0, p.StalePenaltySec)
		c.WaitSec = w

		// The externality: every request that reaches r while this one's
		// work is queued or running waits A + P longer; about λ·ETTFT of
		// them arrive in that time (Little). The greedy ETTFT alone ignores
		// them, so under load it spends fleet capacity on cold prefills and
		// adapter loads that a warm replica would not need; with no recent
		// arrivals the term vanishes and the pure rule decides. λ is the
		// fleet's recent arrival rate shared among the open replicas in
		// proportion to their prefill capacity (fleetLoad divided by r's
		// prefill time of a mean prompt): what r receives when load
		// follows capacity, the fleet mean per replica on one hardware
		// class. Counting a slower replica's arrivals as a faster one's
		// overpriced every placement there, so the rule crowded the fast
		// GPUs (hetero, seeds 1-3: TTFT 9.5 s mean, 6.3 s with this). It is
		// not r's own recent rate: per replica rates are each router's
		// partial view, and replicas that are otherwise equal must stay
		// tied so independent gateways agree on a new prefix's home.
		// An adapter load also stalls the requests already on r: engines
		// load LoRA weights inside the scheduler step (vLLM's LRU adapter
		// manager activates them before the forward pass), so the whole
		// batch and queue wait A.
		// Sharing r's GPU slots and host cache with the adapters this
		// router placed there makes them reload sooner, and the adapter's
		// own share of traffic there reloads more than at its home
		// (reloadCost, adapterReloads). Each
		// reload runs inside a step too, so it costs its own request and
		// the ones on r then, counted as the ones on r now: (1 + N_r).
		if p.ExternalityWeight > 0 {
			m := k.promptMean
			meanP := h.PrefillFixedSec + h.PrefillSecPerToken*m + h.PrefillSecPerToken2*m*m
			lam := selF(!(meanP > 0), k.load/meanP, 0) // a zero profile adds no capacity (fleetLoad)
			ext := lam*c.TotalSec()*(c.AdapterSec+c.PrefillSec) + onReplica*c.AdapterSec
			// Without an adapter there is no reload: the term is +0.
			ext += t.reloadSec * (1 + onReplica)
			c.ExternalSec = p.ExternalityWeight * ext
		}

		cost := c.CostSec()
		cost = selF(cost != cost, cost, math.Inf(1))
		d.Eligible++
		// Comparisons, not min: the builtin on floats is a runtime call
		// on wasm (NaN and signed-zero rules). cost is never NaN; a NaN
		// w sticks as min would make it, and ±0 compare equal where these
		// are used.
		best = selF(cost < best, best, cost)
		minWait = selF(b2u(w < minWait)|b2u(w != w) != 0, minWait, w)
	}
	if d.Eligible == 0 {
		return
	}

	// Tie-break: highest rendezvous weight among replicas within epsilon of
	// the best. The key is the prefix's home: its first blocks, or the
	// model and adapter for a prompt shorter than a block. A single
	// replica within epsilon (a loaded fleet's usual case) needs neither.
	limit := best + p.TieEpsilonSec
	ties, tie := d.fillTop(cands, limit)
	if ties == 1 {
		d.Index = tie
	} else if ties > 1 {
		key := outputKey(req.Model, req.Adapter)
		if len(req.Chain) > 0 {
			key = req.Chain[min(len(req.Chain), max(p.HomeBlocks, 1))-1]
		}
		var bestW uint64
		for i := range replicas {
			c := &cands[i]
			if c.Index < 0 || !(c.CostSec() <= limit) {
				continue
			}
			ah := replicas[i].AddrHash
			if ah == 0 {
				ah = prefix.HashString(replicas[i].Addr)
			}
			if w := prefix.Rendezvous(key, ah); d.Index < 0 || w > bestW || (w == bestW && i < d.Index) {
				bestW, d.Index = w, i
			}
		}
	}
	if d.Index < 0 {
		// Every eligible total is +Inf (NaN or overflow in the inputs):
		// still deterministic, take the first eligible.
		d.Index = d.Top[0].Index
	}

	ch := cands[d.Index]
	d.promote(ch)
	switch {
	case d.Eligible == 1:
		d.Reason = ReasonOnlyReplica
	case ties > 1:
		d.Reason = ReasonTieBreak
	case ch.WaitSec <= minWait:
		d.Reason = ReasonLeastLoaded
	case req.Adapter != "" && ch.AdapterSec == 0 && d.loadAvoided():
		d.Reason = ReasonAdapterResident
	case ch.CachedTokens > 0:
		d.Reason = ReasonPrefixAffinity
	default:
		d.Reason = ReasonFasterHardware
	}
}

// adapterTerms is one replica's adapter terms for Pick's loop.
type adapterTerms struct {
	sec, reloadSec, pendingSec float64 // A(r, a), reloads it causes, loads queued ahead
	releases                   int     // GPU slots that must free first (with slotWait)
	ok, slotWait               bool    // r can serve the adapter; only after a slot frees
}

// adapterPass fills terms with the adapter terms of every open replica for
// pick's loop. A pass of its own, not in that loop: the call to adapterCost
// there made the loop spill all its live values on wasm for each replica,
// and the values the terms need (the hash, ownBest, stream) were more live
// values in a loop whose every one costs (Pick/64 with an adapter: about
// twice the time without one).
func adapterPass(p *Params, req *Request, replicas []Replica, l *Ledger, nowNanos int64, terms []adapterTerms, hash uint64, ownBest, stream float64, waitForSlot bool) {
	for i := range replicas {
		r := &replicas[i]
		if !r.Healthy || r.Drain != Serving || i >= len(terms) {
			continue // not scored
		}
		t := &terms[i]
		*t = adapterTerms{}
		h := &r.Hardware
		held := l.remembered(i)
		if held == TierStorage && i < len(req.AdapterRecent) && req.AdapterRecent[i] {
			held = TierHost
		}
		// The loads of other adapters sent there that have not
		// started (no GPU slot yet) run before this request's first
		// token, each inside an engine step that stalls the whole
		// replica: vLLM activates LoRAs before the forward pass. The
		// queued prefill in W does not count them.
		t.pendingSec = l.pendingOn(i)
		a, ok, rel := adapterCost(p, r, req.Adapter, hash, held, l.freshOn(i))
		t.releases = rel
		switch {
		case ok:
			t.ok = true
			t.sec = a
			t.reloadSec = l.reloadOn(i, ownBest)
			if h.AdapterLoadStorageSec > 0 && a >= h.AdapterLoadStorageSec {
				// A load from storage makes r the adapter's home: its
				// later requests find it resident here and follow it,
				// so the reloads its share of r's caches causes recur
				// for each of them, not only for this one, while the
				// loads and stalls of going elsewhere are paid once.
				// Priced for one request, a first placement or a split
				// onto an idle replica with a full host cache won over
				// a busy one with room, and stayed: lora seeds 1-7, 6
				// to 29 storage reloads beyond the first load of each
				// adapter (always-warm: none), 1 to 17 of them splits.
				// Counting the requests expected within AdapterMemory
				// (adapterStream), 0 to 18, splits 0 to 4, TTFT mean
				// 0.761 to 0.697 s on average over the seeds.
				t.reloadSec *= stream
			}
		case waitForSlot && r.AdapterSlots != 0:
			t.ok = true
			t.sec, t.slotWait = r.Hardware.AdapterLoadStorageSec+p.AdapterToleranceSec, true
			t.reloadSec = l.reloadOn(i, ownBest)
		default:
			t.ok = false
		}
	}
}

// reloadCost returns the reload seconds that one more request of the
// adapter on replica i costs, per request: others, to the other adapters
// remembered there, and own, to the adapter's own later requests there.
// r's GPU slots and host cache are LRU caches over the adapters sent
// there, at the rates this router (and its peers) sent them, in Che's
// approximation (H. Che, Y. Tung, Z. Wang, IEEE JSAC 20(7), 2002; see
// cheSolve), and this request adds one send (1/AdapterMemory per second
// in the ledger's rate) to the adapter's rate there. Extra misses of the
// GPU slots each reload from host memory, those of the host cache from
// storage instead.
//
// Each cache is solved once for all the adapters remembered on r,
// whichever one a request names, and kept while their rates only decay
// (Ledger.cheLevels); a send is priced from that solution by expanding
// Che's equation around it (cheLevel.sendDelta), in one or two
// exponentials, within 1e-4 misses per send of solving the cache without
// and with it (TestSendDelta). Solving twice per cache and replica, a
// Pick over 64 replicas with adapters cost 20 µs natively and 107 µs in
// the wasm module, against 2.2 µs without adapters. Now only the replica
// the last request went to solves again, and so does a send the expansion
// cannot price (cheLevel.sendExact: a rare adapter that one send makes a
// large share of a cache).
//
// A count of the adapters remembered against the slots said only whether
// something is displaced, the same on every replica whose caches are
// full, so a new adapter went where the queue was shortest: on lora
// seed 4 the replica without popular adapters collected 12 rare ones for
// its 8 host slots, and their requests reloaded from storage (99 storage
// loads against always-warm's 32). The rates say how soon the displaced
// ones come back: a cache shared with one popular adapter keeps its rare
// ones longer than one cycling through many.
//
// own is the other half of the same trade: a send commits part of the
// adapter's future stream to r. Where its rate is high it stays cached
// and the send adds almost no misses (or removes some: a hotter item is
// evicted less); where it is rare, among adapters that fill the caches,
// nearly every later request of that share misses and reloads. Pick
// charges own relative to the replica where it is least (adapterReloads).
func reloadCost(p *Params, r *Replica, l *Ledger, i int) (others, own float64) {
	window := p.AdapterMemory.Seconds()
	if !(window > 0) {
		return 0, 0
	}
	n, self := l.adapterRates(i)
	if n == 0 {
		return 0, 0 // nothing of this router's there to displace or be displaced by
	}
	one := 1 / window
	hostSlots := r.AdapterHostSlots
	if hostSlots <= 0 {
		hostSlots = r.AdapterSlots
	}
	// In the units of the cached levels (cheLevels): the rates when they
	// were solved. Misses per send do not depend on the units.
	gpu, host, items, toRef := l.cheLevels(i, self, r.AdapterSlots, hostSlots)
	if gpu == nil {
		return 0, 0
	}
	self, one = self*toRef, one*toRef
	gpuOthers, gpuOwn, ok := gpu.sendDelta(self, one, items, r.AdapterSlots)
	if !ok {
		rest, _ := l.otherRates(i, toRef)
		gpuOthers, gpuOwn = gpu.sendExact(rest, self, one, r.AdapterSlots)
	}
	hostOthers, hostOwn := gpuOthers, gpuOwn
	if host != gpu {
		hostOthers, hostOwn, ok = host.sendDelta(self, one, items, hostSlots)
		if !ok {
			rest, _ := l.otherRates(i, toRef)
			hostOthers, hostOwn = host.sendExact(rest, self, one, hostSlots)
		}
	}
	h := &r.Hardware
	fromHost, fromStorage := h.AdapterLoadHostSec, h.AdapterLoadStorageSec-h.AdapterLoadHostSec
	others = (gpuOthers*fromHost + hostOthers*fromStorage) / one
	own = (gpuOwn*fromHost + hostOwn*fromStorage) / one
	return others, own
}

// adapterReloads fills the ledger's reloadSec and ownSec with reloadCost
// for every open replica that can hold adapters, as of the last
// markAdapter (a few exponentials per replica whose adapters did not
// change since the last Pick, a solve of its caches for one that did),
// and returns the own cost the adapter's stream has anyway:
// at its home (the replica it was sent to most, by the ledger's rates),
// or, for an adapter with no home, the least of any replica.
//
// Only the own misses a replica adds beyond that are this choice's doing:
// the stream must go somewhere, and where it already lives is what it is
// compared with. Without the term the rule saw no cost in splitting an
// adapter's traffic: on lora seeds 4–7 8 to 10 adapters were split over
// two replicas, each replica collected 9 to 13 adapters for its 8 host
// slots, and storage reloads decided the mean (seed 5: 59 storage loads
// against always-warm's 4 after the first 30 s). Compared with the least
// of any replica rather than the home, a replica whose cache had room
// set the bar at 0, and the home of a rare adapter looked as costly as
// anywhere else (lora seed 7: TTFT mean 0.772 s against 0.733 s).
func adapterReloads(p *Params, replicas []Replica, l *Ledger, nowNanos int64) float64 {
	if l == nil {
		return 0
	}
	if len(l.adapt) == 0 {
		// Nothing remembered anywhere: nothing to displace or reload.
		clear(l.reloadSec)
		clear(l.ownSec)
		return 0
	}
	best, least := math.Inf(1), math.Inf(1)
	home := 0.0
	for i := range replicas {
		if i >= len(l.reloadSec) {
			break
		}
		r := &replicas[i]
		l.reloadSec[i], l.ownSec[i] = 0, 0
		if !r.Healthy || r.AdapterSlots == 0 || r.Drain != Serving {
			continue
		}
		others, own := reloadCost(p, r, l, i)
		l.reloadSec[i], l.ownSec[i] = others, own
		if _, self := l.adapterRates(i); self > home {
			home, best = self, own
		}
		if own < least {
			least = own
		}
	}
	if home == 0 {
		best = least
	}
	if !(best < math.Inf(1)) {
		return 0
	}
	return best
}

// onWasm selects code shapes that are faster under wazero than natively.
const onWasm = runtime.GOARCH == "wasm"

// selF returns b when cond holds, else a. The Go compiler turns an if
// that chooses between two integers into wasm's select, but one that
// chooses between two floats into a jump through the function's block
// dispatch (a br_table at the top of every Go function on wasm), which
// under wazero costs far more than the arithmetic around it; the bit
// patterns make it the first kind. Both a and b are computed either way.
func selF(cond bool, a, b float64) float64 {
	x, y := math.Float64bits(a), math.Float64bits(b)
	if cond {
		x = y
	}
	return math.Float64frombits(x)
}

// b2u is 1 for true, 0 for false: a && b written b2u(a)&b2u(b) has no
// branch on wasm.
func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// ceil is math.Ceil for the non-negative step counts of waitSec, without
// the call: values beyond 2⁵² (or NaN) are returned as they are.
func ceil(x float64) float64 {
	if !(x < 1<<52) {
		return x
	}
	c := float64(int64(x))
	if c < x {
		c++
	}
	return c
}

// promote moves the chosen candidate to Top[0].
func (d *Decision) promote(c Candidate) {
	pos := d.NumTop - 1
	for i := 0; i < d.NumTop; i++ {
		if d.Top[i].Index == c.Index {
			pos = i
			break
		}
	}
	copy(d.Top[1:pos+1], d.Top[:pos])
	d.Top[0] = c
}

// loadAvoided reports whether a listed candidate would have needed an
// adapter load.
func (d *Decision) loadAvoided() bool {
	for i := 0; i < d.NumTop; i++ {
		if d.Top[i].AdapterSec > 0 {
			return true
		}
	}
	return false
}

// fillTop sets d.Top to the TopN cheapest of the eligible cands (Index ≥
// 0), cheapest first, equal costs in replica order, and returns how many
// cost at most limit and the last of them. It keeps indices and costs
// while it selects and copies the Candidates once: inserting whole
// Candidates moved 64-byte structs about 16 times a decision (TopN times
// the log of the fleet's size), a memmove call each on wasm.
func (d *Decision) fillTop(cands []Candidate, limit float64) (ties, tie int) {
	var topIdx [TopN]int
	var topCost [TopN]float64
	n := 0
	for i := range cands {
		// One branch for the common case, a replica that is not among
		// the cheapest so far (see the loop of pick).
		c := &cands[i]
		cost := c.CostSec()
		eligible := b2u(c.Index >= 0)
		within := eligible & b2u(cost <= limit)
		ties += int(within)
		if within != 0 {
			tie = i
		}
		if eligible&(b2u(n < TopN)|b2u(cost < topCost[TopN-1])) == 0 {
			continue
		}
		pos := n
		for pos > 0 && cost < topCost[pos-1] {
			pos--
		}
		for k := min(n, TopN-1); k > pos; k-- {
			topIdx[k], topCost[k] = topIdx[k-1], topCost[k-1]
		}
		topIdx[pos], topCost[pos] = i, cost
		n = min(n+1, TopN)
	}
	d.NumTop = n
	for k, i := range topIdx[:n] {
		d.Top[k] = cands[i]
	}
	return ties, tie
}

// fleetLoad returns the fleet's recent arrivals per second (this router's
// dispatches plus the other routers', Ledger.SetPeerRate) over the open
// replicas' prefill capacity (prepass: each replica's 1/P_r of a prompt of
// the mean uncached length): the fleet's prefill utilization. A replica's
// share of the arrivals in proportion to its capacity is then
// fleetLoad/P_r. Replicas whose profile prices a prefill at nothing add no
// capacity (a zero profile would make the fleet look infinitely fast).
func fleetLoad(l *Ledger, nowNanos int64, capacity float64) float64 {
	total := 0.0
	if l != nil {
		total = l.Rate(nowNanos) + l.peerRate
	}
	if !(capacity > 0) || !(total > 0) {
		return 0
	}
	return total / capacity
}

// prepass readies pick's loop in one pass over the replicas: the ledger
// recounts the work of the replicas whose snapshot moved
// (Ledger.SyncSnapshots), done[i] is the prefill done by nowNanos of the
// group running on replica i (0 when none), and it returns the open
// replicas' prefill capacity for fleetLoad: the sum of 1/P_r of a prompt
// of promptMean tokens over the replicas whose profile prices one.
func prepass(replicas []Replica, l *Ledger, nowNanos int64, promptMean float64, done []float64) (capacity float64) {
	var reps []repAcc
	if l != nil {
		l.SyncSnapshots(replicas)
		reps = l.reps
	}
	// Hardware.PrefillSeconds of at least one token, written out without
	// its guard for none.
	x := float64(max(int(promptMean), 1))
	for i := range replicas {
		r := &replicas[i]
		h := &r.Hardware
		sec := h.PrefillFixedSec + h.PrefillSecPerToken*x + h.PrefillSecPerToken2*x*x
		open := b2u(r.Healthy) & b2u(r.Drain == Serving) & b2u(sec > 0)
		capacity += selF(open == 0, 1/sec, 0) // no branch: see the loop of pick
		done[i] = 0
		if i < len(reps) && reps[i].runStartNanos > 0 {
			done[i] = reps[i].doneSec(h, nowNanos)
		}
	}
	return capacity
}

// adapterCost returns A(r, a), whether r can serve adapter at all, and how
// many GPU slots must free before the adapter gets one (0: one is free for
// it). The slots are claimed by the adapters r lists as resident, then by
// the fresh ones, then by those it reports waiting (listed with a tier
// other than TierGPU: queued requests, no slot), which the engine admits
// first. Fresh adapters are the other adapters this router sent to r after
// its snapshot that the snapshot does not list: each holds a slot the
// snapshot shows free, or waits for one.
func adapterCost(p *Params, r *Replica, adapter string, hash uint64, remembered AdapterTier, fresh int) (float64, bool, int) {
	if r.AdapterSlots == 0 {
		return 0, false, 0
	}
	if remembered == TierGPU {
		return 0, true, 0
	}
	tier := remembered
	gpu, evictable, queued := 0, false, 0
	for i := range r.Adapters {
		a := &r.Adapters[i]
		// The keys first (hash is prefix.HashString(adapter)): comparing names
		// is a runtime call on wasm, for every listed adapter.
		if (a.Hash == 0 || a.Hash == hash) && a.Name == adapter {
			tier = min(tier, a.Tier)
			if a.Tier == TierGPU {
				return 0, true, 0
			}
			continue
		}
		if a.Tier == TierGPU {
			gpu++
			evictable = evictable || !a.Active
		} else if a.Active {
			queued++
		}
	}
	releases := 0
	if r.AdapterSlots > 0 {
		releases = max(gpu+fresh+queued-r.AdapterSlots+1, 0)
		if gpu+fresh >= r.AdapterSlots && !evictable {
			return 0, false, releases
		}
	}
	cost := r.Hardware.AdapterLoadStorageSec
	if tier == TierHost {
		cost = r.Hardware.AdapterLoadHostSec
	}
	return cost + p.AdapterToleranceSec, true, releases
}
