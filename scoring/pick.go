package scoring

import (
	"math"
	"runtime"

	"github.com/gpuroute/gpuroute/scoring/prefix"
)

// Pick chooses the replica with the lowest expected time to first token for
// req among replicas, writing the result to d:
//
//	ETTFT(r) = W(r) + A(r, a) + P_r(n − k(r))
//
// plus the delay the request's work imposes on the requests behind it
// (Candidate.ExternalSec); each term is defined in terms.go, and pickPlain
// composes them plainly. cachedTokens[i] is k for replica i
// (prefix.Index.Lookup; nil: nothing cached). l is the router's ledger
// (nil: none); Pick brings its view of work-since-scrape up to date with
// each replica's ScrapedNanos. nowNanos is the caller's clock. Unhealthy,
// draining and drained replicas, and replicas that cannot hold the adapter,
// are excluded. Costs within p.TieEpsilonSec of the best are broken by
// rendezvous hashing of the prefix's first p.HomeBlocks blocks, so the
// result is a deterministic function of the inputs. Pick never panics on
// bad input and allocates only when d's scratch must grow (the first call,
// or a larger fleet: TestPickAllocs).
//
// To account for the request, pass the chosen candidate's StartNanos to
// Ledger.Dispatch.
func Pick(p *Params, req *Request, replicas []Replica, cachedTokens []int, l *Ledger, nowNanos int64, d *Decision) {
	decide(pick, p, req, replicas, cachedTokens, l, nowNanos, d)
}

// pass is one pass of Pick over the replicas (pick, or its definition
// plainPass); with waitForSlot, a replica without a free adapter slot is
// scored with the wait for one added to A instead of excluded.
type pass func(p *Params, req *Request, replicas []Replica, cachedTokens []int, l *Ledger, nowNanos int64, d *Decision, waitForSlot bool)

// decide runs pass, and when every open replica has all its adapter slots
// busy, again waiting for a slot: the engine queues the request until one
// frees (vLLM does), so it waits where that, plus the rest, costs least
// rather than being refused (TestAdapterSlotsBusyQueues).
func decide(run pass, p *Params, req *Request, replicas []Replica, cachedTokens []int, l *Ledger, nowNanos int64, d *Decision) {
	run(p, req, replicas, cachedTokens, l, nowNanos, d, false)
	if d.Eligible == 0 && d.NoAdapterSlot > 0 {
		run(p, req, replicas, cachedTokens, l, nowNanos, d, true)
	}
}

// pickInputs is what every replica's terms share in one pass: the prompt
// length n, the learned means, the chunk budget, the fleet's load, the
// adapter's own-reload bar and expected stream, the request's output
// estimate, and the adapter terms per replica.
type pickInputs struct {
	n                                                 int
	promptMean, outMean, chunk, load, ownBest, stream float64
	// busy is the busy-period factor 1/(1 − ρ) of the fleet's prefill
	// utilization load, and held the requests held back for capacity per
	// unit of the fleet's prefill capacity (externalSec).
	busy, held float64
	// occupancy is the open replicas' mean Replica.occupancy weighted by
	// prefill capacity (prepass), the share against which each replica's
	// own scales its arrivals (externalSec).
	occupancy   float64
	ownOut      float64 // this request's expected output
	staleNanos  int64
	adapterHash uint64
	waitForSlot bool
	terms       []adapterTerms // one per replica
	served      []bool         // Request.ServedBy, one per replica
}

// prepare resets d and fills k for a pass over replicas, and returns the
// cached tokens padded to the fleet, each replica's running-group progress
// and the ledger's work per replica (nil without a ledger).
func (d *Decision) prepare(k *pickInputs, p *Params, req *Request, replicas []Replica, cachedTokens []int, l *Ledger, nowNanos int64, waitForSlot bool) ([]int, []float64, []replicaWork) {
	d.Index, d.Reason, d.NumTop = -1, ReasonNoReplica, 0
	d.Eligible, d.NoModel, d.Unhealthy, d.Draining, d.NoAdapterSlot, d.Stale = 0, 0, 0, 0, 0, 0
	if cap(d.cands) < len(replicas) {
		d.cands = make([]Candidate, len(replicas))
	}
	d.cands = d.cands[:len(replicas)]
	k.waitForSlot = waitForSlot
	k.served = d.servedBy(req.ServedBy, len(replicas))
	k.ownOut = float64(l.ExpectedOutput(req))
	k.n = max(req.PromptTokens, 1)
	if req.Adapter != "" {
		k.adapterHash = prefix.HashString(req.Adapter)
		l.markAdapter(&d.view, k.adapterHash, replicas, nowNanos)
	}
	k.promptMean, k.outMean = float64(p.DefaultPromptTokens), float64(p.DefaultOutputTokens)
	if l != nil {
		if l.lengths.promptMean > 0 {
			k.promptMean = l.lengths.promptMean
		}
		if l.lengths.outputMean > 0 {
			k.outMean = l.lengths.outputMean
		}
	}
	k.staleNanos = int64(p.StaleAfter)
	k.chunk = float64(max(p.PrefillChunkTokens, 1))
	if cap(d.done) < len(replicas) {
		d.done = make([]float64, len(replicas))
	}
	done := d.done[:len(replicas)]
	capacity, heldCapacity := prepass(replicas, l, nowNanos, k.promptMean, done)
	k.load, k.busy, k.held, k.occupancy = 0, 1, 0, 0
	if capacity > 0 {
		k.occupancy = heldCapacity / capacity
	}
	if p.ExternalityWeight > 0 {
		k.load = fleetLoad(l, nowNanos, capacity)
		k.busy = busyFactor(k.load)
		if l != nil && capacity > 0 {
			k.held = l.held / capacity
		}
	}
	k.ownBest, k.stream = 0, 1
	if req.Adapter != "" && p.ExternalityWeight > 0 {
		k.ownBest = adapterReloads(p, replicas, l, &d.view)
		k.stream += l.adapterStream(&d.view, p.AdapterMemory.Seconds())
	}
	if req.Adapter != "" {
		if cap(d.adapt) < len(replicas) {
			d.adapt = make([]adapterTerms, len(replicas))
		}
		k.terms = d.adapt[:len(replicas)]
		adapterPass(p, req, replicas, &d.view, k.terms, k.adapterHash, k.ownBest, k.stream, waitForSlot)
	} else {
		// Without an adapter every replica can serve it at no cost: a row
		// of such terms, read like the others, so that the loop has no
		// branch on whether there is an adapter.
		if cap(d.base) < len(replicas) {
			d.base = make([]adapterTerms, len(replicas))
			for i := range d.base {
				d.base[i].ok = true
			}
		}
		k.terms = d.base[:len(replicas)]
	}
	if len(cachedTokens) < len(replicas) {
		d.cached = append(d.cached[:0], cachedTokens...)
		for len(d.cached) < len(replicas) {
			d.cached = append(d.cached, 0)
		}
		cachedTokens = d.cached
	}
	var reps []replicaWork
	if l != nil {
		reps = l.work.reps
	}
	return cachedTokens[:len(replicas)], done, reps
}

// servedBy returns mask (Request.ServedBy) sized to a fleet of n: a row of
// trues when it is nil, its replicas past the end not serving.
func (d *Decision) servedBy(mask []bool, n int) []bool {
	if mask == nil {
		if len(d.every) < n {
			d.every = make([]bool, n)
			for i := range d.every {
				d.every[i] = true
			}
		}
		return d.every[:n]
	}
	if len(mask) >= n {
		return mask[:n]
	}
	d.served = append(append(d.served[:0], mask...), make([]bool, n-len(mask))...)
	return d.served
}

// adapterStream is adapterMemory.stream, 0 without a ledger.
func (l *Ledger) adapterStream(v *adapterView, window float64) float64 {
	if l == nil {
		return 0
	}
	return l.adapters.stream(v, window)
}

// pick is Pick's pass, the terms of terms.go fused into one loop written
// for the wasm compiler: no calls (the inputs that need them come from
// prepare and prepass, the top list after), branch-free selects (selF,
// b2u, conditional integer assignments) on the common path, loop
// invariants in one struct in memory (docs/performance.md "Go on wasm").
// It computes what plainPass computes, in the same order, to the bit
// (TestPickMatchesPlain, FuzzPick).
func pick(p *Params, req *Request, replicas []Replica, cachedTokens []int, l *Ledger, nowNanos int64, d *Decision, waitForSlot bool) {
	var k pickInputs
	cachedTokens, done, reps := d.prepare(&k, p, req, replicas, cachedTokens, l, nowNanos, waitForSlot)
	// Sliced to the fleet here, so that the loop's indexing needs no
	// bounds checks.
	cands := d.cands[:len(replicas)]
	cachedTokens, done = cachedTokens[:len(replicas)], done[:len(replicas)]
	served := k.served[:len(replicas)]

	best := math.Inf(1)
	for i := range replicas {
		r := &replicas[i]
		c := &cands[i]
		c.Index = -1
		// Not DrainAt: its deadline only turns Draining into Drained, both
		// closed. One branch for the three exclusions, counted as
		// plainPass counts them.
		serves, healthy := b2u(served[i]), b2u(r.Healthy)
		if serves&healthy&b2u(r.Drain == Serving) == 0 {
			d.NoModel += int(1 - serves)
			d.Unhealthy += int(serves & (1 - healthy))
			d.Draining += int(serves & healthy)
			continue
		}
		t := &k.terms[i]
		if !t.ok {
			d.NoAdapterSlot++
			continue
		}
		// Field by field, each once, rather than zeroing the Candidate
		// first.
		c.Index, c.AdapterSec, c.ExternalSec = i, t.sec, 0
		pendingSec := t.pendingSec
		h := &r.Hardware

		// k(r) and P_r(n − k) (prefillSec, without its guard: n − k ≥ 1).
		cached := min(max(cachedTokens[i], 0), k.n-1)
		c.CachedTokens = cached
		uncached := float64(k.n - cached)
		c.PrefillSec = h.PrefillFixedSec + h.PrefillSecPerToken*uncached + h.PrefillSecPerToken2*uncached*uncached

		// W(r) (waitSec), from queueOn's queue: the peers' work plus the
		// ledger's, in scalars.
		pw := &r.PeerWork
		accQueuedN, accQueuedTokens, accDecodeN := pw.QueuedN, pw.QueuedTokens, pw.DecodeN
		accDecodeTokens, accUnseenN, accUnseenTokens := pw.DecodeTokens, pw.UnseenN, pw.UnseenTokens
		lr := &d.noLedger
		if i < len(reps) {
			lr = &reps[i]
		}
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

		// queuedPrefillSec + pendingSec.
		qN := float64(accQueuedN + foreignWaiting)
		qTok := float64(accQueuedTokens) + float64(foreignWaiting)*k.promptMean
		w := qN*h.PrefillFixedSec + qTok*h.PrefillSecPerToken + pendingSec
		onReplica := qN + float64(accDecodeN+foreignRunning)
		decoding := float64(accDecodeN + foreignRunning)
		// kvUsage.
		usage := r.KVUsage
		usage = selF(!(usage <= 1), usage, 1) // NaN counts as full
		usage = selF(usage < 0, usage, 0)
		hold, startHold := 0.0, 0.0
		if batch := accDecodeN + foreignRunning; batch > 0 {
			b := float64(batch)
			decodeTok := float64(accDecodeTokens) + float64(foreignRunning)*k.outMean/2
			step := h.DecodeStepSec + h.DecodeStepSecPerSeq*(b-1)
			// interferenceSec. On wasm the division is cheaper than the
			// branch that avoids it; natively the branch is
			// (BenchmarkPickBase64).
			perStep := k.chunk - b
			perStep = selF(!(perStep >= 1), perStep, 1)
			x := qTok + uncached
			steps := 1.0
			if onWasm {
				steps = selF(x > perStep, 1, math.Ceil(x/perStep))
			} else if x > perStep {
				steps = ceil(x / perStep)
			}
			w += step/2 + steps*b*h.DecodeStepSecPerSeq
			// admissionSec.
			kvCap := float64(r.KVCapacity())
			growth := selF(b*k.ownOut < decodeTok, decodeTok, b*k.ownOut)
			kvNow := usage*kvCap + float64(accUnseenTokens) + uncached
			kvNeed := kvNow + growth + k.ownOut
			kvFull := b2u(kvCap > 0) & b2u(kvNeed > kvCap)
			completion := step * decodeTok / b
			hold = selF(kvFull != 0, 0, completion)
			startHold = selF(b2u(kvCap > 0)&b2u(kvNow > kvCap) != 0, 0, completion)
			excess := qN + b + 1 - float64(r.MaxBatchSeqs)
			bw := step * excess * 2 * decodeTok / (b * b)
			batchFull := b2u(r.MaxBatchSeqs > 0) & b2u(excess > 0)
			hold = selF(batchFull&b2u(bw > hold) != 0, hold, bw)
			startHold = selF(batchFull&b2u(bw > startHold) != 0, startHold, bw)
			w += hold
			// adapterSec's slot wait.
			c.AdapterSec += selF(t.slotWait, 0, step*decodeTok/b*float64(t.releases))
		}
		// progressSec (this router's groups' progress comes from
		// prepass; selF, not min: the builtin on floats is a runtime call
		// on wasm).
		admitted := hold == 0
		peerQueued := float64(pw.QueuedN)*h.PrefillFixedSec + float64(pw.QueuedTokens)*h.PrefillSecPerToken
		w -= selF(admitted, 0, selF(pw.DoneSec > peerQueued, pw.DoneSec, peerQueued))
		w -= selF(admitted, 0, done[i])
		// startNanos.
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
		c.StartNanos = start
		// stalePenaltySec.
		stale := b2u(r.ScrapedNanos == 0) | b2u(nowNanos-r.ScrapedNanos > k.staleNanos)
		c.Stale = stale != 0
		d.Stale += int(stale)
		w += selF(stale != 0, 0, p.StalePenaltySec)
		c.WaitSec = w
		c.QueueSec = w - hold + startHold - pendingSec // queueSec

		// externalSec.
		if p.ExternalityWeight > 0 {
			m := k.promptMean
			meanP := h.PrefillFixedSec + h.PrefillSecPerToken*m + h.PrefillSecPerToken2*m*m
			lam := selF(!(meanP > 0), k.load/meanP, 0)
			share := r.occupancy() / k.occupancy // heldShare
			lam *= selF(k.occupancy > 0, 1, share)
			held := selF(!(meanP > 0), k.held/meanP, 0)
			work := c.AdapterSec + c.PrefillSec
			ext := (lam*c.TotalSec()*k.busy+held)*work + onReplica*c.AdapterSec
			ext += t.reloadSec * (1 + onReplica)
			ext += p.StallWeight * k.load * usage * decoding * work
			c.ExternalSec = p.ExternalityWeight * ext
		}

		cost := c.CostSec()
		cost = selF(cost != cost, cost, math.Inf(1))
		d.Eligible++
		// A comparison, not min (a runtime call on wasm); cost is never
		// NaN.
		best = selF(cost < best, best, cost)
	}
	if d.Eligible == 0 {
		return
	}
	limit := best + p.TieEpsilonSec
	ties, tie := d.fillTop(cands, limit)
	d.settle(p, req, replicas, cands, limit, ties, tie)
}

// onWasm selects code shapes that are faster under wazero than natively.
const onWasm = runtime.GOARCH == "wasm"

// selF returns b when cond holds, else a. The Go compiler turns an if that
// chooses between two integers into wasm's select, but one between two
// floats into a jump; the bit patterns make it the first kind
// (docs/performance.md "Go on wasm"). Both a and b are computed either way.
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

// ceil is math.Ceil for the non-negative step counts of interferenceSec,
// without the call: values beyond 2⁵² (or NaN) are returned as they are.
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

// fillTop sets d.Top to the TopN cheapest of the eligible cands (Index ≥
// 0), cheapest first, equal costs in replica order, as topPlain defines it,
// and returns how many cost at most limit and the last of them. It keeps
// indices and costs while it selects and copies the Candidates once.
func (d *Decision) fillTop(cands []Candidate, limit float64) (ties, tie int) {
	var topIdx [TopN]int
	var topCost [TopN]float64
	n := 0
	for i := range cands {
		// One branch for the common case, a replica that is not among the
		// cheapest so far.
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

// maxBusyLoad caps the utilization busyFactor reads: past it the estimate
// of ρ (recent arrivals over prefill capacity, ignoring decode time) is too
// coarse for a factor of more than 10.
const maxBusyLoad = 0.9

// busyFactor is 1/(1 − ρ) for the fleet's prefill utilization ρ (capped at
// maxBusyLoad): the remaining busy period of a replica at utilization ρ is
// its current work over 1 − ρ, so the requests that a prefill placed now
// delays are those arriving before that period ends, not only while the
// request itself waits (M/G/1; TestBusyFactor). With no load it is 1.
func busyFactor(load float64) float64 {
	if !(load > 0) {
		return 1
	}
	return 1 / (1 - min(load, maxBusyLoad))
}

// prepass readies a pass in one pass over the replicas: the ledger
// recounts the work of the replicas whose snapshot moved
// (Ledger.SyncSnapshots), done[i] is the prefill done by nowNanos of the
// group running on replica i (0 when none), and it returns the open
// replicas' prefill capacity for fleetLoad: the sum of 1/P_r of a prompt
// of promptMean tokens (at least one) over the replicas whose profile
// prices one, and the same sum with each 1/P_r times the replica's
// occupancy (heldCapacity).
func prepass(replicas []Replica, l *Ledger, nowNanos int64, promptMean float64, done []float64) (capacity, heldCapacity float64) {
	var groups []prefillGroups
	if l != nil {
		l.SyncSnapshots(replicas)
		groups = l.groups
	}
	x := float64(max(int(promptMean), 1))
	for i := range replicas {
		r := &replicas[i]
		h := &r.Hardware
		sec := h.PrefillFixedSec + h.PrefillSecPerToken*x + h.PrefillSecPerToken2*x*x
		open := b2u(r.Healthy) & b2u(r.Drain == Serving) & b2u(sec > 0)
		share := selF(open == 0, 1/sec, 0)
		capacity += share
		heldCapacity += share * r.occupancy()
		done[i] = 0
		if i < len(groups) && groups[i].runStartNanos > 0 {
			done[i] = groups[i].doneSec(h, nowNanos)
		}
	}
	return capacity, heldCapacity
}
