package scoring

import "math"

// The cost terms of ETTFT(r) = W(r) + A(r, a) + P_r(n − k(r)) and of the
// externality, one function each, in seconds. They are the definition:
// pickPlain composes them in ordinary Go, and Pick's loop computes the same
// values in the same order, fused for the wasm compiler (pick). Both are
// held equal by TestPickMatchesPlain and FuzzPick; a change to a term is a
// change here and in the loop.
//
// The replica model is a continuous-batching engine with chunked prefill
// (vLLM V1, SGLang): every step runs one token of each decoding request
// plus up to Params.PrefillChunkTokens prompt tokens of the requests still
// prefilling, admitted in arrival order while KV and batch slots allow.

// prefillSec is P_r(x): the seconds h takes to prefill x uncached tokens,
// PrefillFixedSec + PrefillSecPerToken·x + PrefillSecPerToken2·x² (the
// quadratic part is attention over the prompt). Pick passes x = n − k(r) ≥
// 1: the server recomputes at least the last token of a cached prompt.
// Hardware.PrefillSeconds is the same for a token count.
func prefillSec(h *Hardware, x float64) float64 {
	return h.PrefillFixedSec + h.PrefillSecPerToken*x + h.PrefillSecPerToken2*x*x
}

// queue is what stands between a new request and its first token on one
// replica, in requests and tokens: the reported waiting and running
// requests, of which those the routers dispatched count with their exact
// tokens (the local ledger's Work there plus Replica.PeerWork) and the
// rest, foreign, at the means.
type queue struct {
	// queuedN prompts of queuedTokens uncached tokens wait for prefill.
	queuedN, queuedTokens float64
	// batch sequences are decoding, with decodeTokens output tokens left.
	batch        int64
	decodeTokens float64
	// unseenTokens are the routers' prompt tokens the snapshot's KVUsage
	// does not show yet.
	unseenTokens int64
	// foreignWaiting of the waiting requests no router accounts for.
	foreignWaiting int64
}

// queueOn returns r's queue. A foreign waiting request costs promptMean
// uncached tokens; a foreign running one has half of outMean output tokens
// left on average. Reported requests the routers sent after the snapshot
// (Unseen) are not in its counts, so they are not taken off them
// (TestLedgerSpreadsBurst, TestPeerWork).
func queueOn(r *Replica, own *Work, promptMean, outMean float64) queue {
	pw := &r.PeerWork
	queuedN, queuedTokens := pw.QueuedN+own.QueuedN, pw.QueuedTokens+own.QueuedTokens
	decodeN, decodeTokens := pw.DecodeN+own.DecodeN, pw.DecodeTokens+own.DecodeTokens
	unseenN, unseenTokens := pw.UnseenN+own.UnseenN, pw.UnseenTokens+own.UnseenTokens
	waiting, running := int64(max(r.WaitingRequests, 0)), int64(max(r.RunningRequests, 0))
	seenRouted := max(queuedN+decodeN-unseenN, 0)
	foreign := max(waiting+running-seenRouted, 0)
	foreignWaiting := min(foreign, waiting)
	foreignRunning := foreign - foreignWaiting
	return queue{
		queuedN:        float64(queuedN + foreignWaiting),
		queuedTokens:   float64(queuedTokens) + float64(foreignWaiting)*promptMean,
		batch:          decodeN + foreignRunning,
		decodeTokens:   float64(decodeTokens) + float64(foreignRunning)*outMean/2,
		unseenTokens:   unseenTokens,
		foreignWaiting: foreignWaiting,
	}
}

// onReplica is how many requests are on the replica (queued and running):
// an adapter load stalls them all.
func (q *queue) onReplica() float64 { return q.queuedN + float64(q.batch) }

// stepSec is the seconds of one engine step with q's batch (batch > 0):
// DecodeStepSec + DecodeStepSecPerSeq·(batch − 1) (Hardware.DecodeStepSeconds).
func (q *queue) stepSec(h *Hardware) float64 {
	return h.DecodeStepSec + h.DecodeStepSecPerSeq*(float64(q.batch)-1)
}

// completionSec is about one mean remaining output of q's batch at its
// step time, step · decodeTokens / batch, in seconds: the wait for running
// requests to free KV blocks or a slot (pessimistic: the shortest
// remaining output is enough when it frees enough).
func (q *queue) completionSec(h *Hardware) float64 {
	return q.stepSec(h) * q.decodeTokens / float64(q.batch)
}

// waitSec is W(r), the seconds of work ahead of the request on r, and
// whether the request is admitted at once (no KV or batch-slot wait), for
// uncached prompt tokens, its expected output ownOut, a per-step prompt
// budget chunk, the adapter loads pending there (pendingSec), the router's
// own running group's progress there (done, prefillGroups.doneSec) and
// the replica's staleness:
//
//	W = queuedPrefillSec + pendingSec
//	  + interferenceSec + admissionSec   (with a running batch)
//	  − progressSec (peers', then own)   (when admitted)
//	  + stalePenaltySec
//
// Decode work enters W through the batch size and, under KV or slot
// pressure, through remaining output tokens; never as a sequential cost,
// which would push affinity traffic off a warm replica whose long-running
// batch delays a prefill by milliseconds (TestWarmBatchKeepsAffinity).
func waitSec(p *Params, r *Replica, q *queue, uncached, ownOut, chunk, pendingSec, done float64, stale bool) (w, queue float64, admitted bool) {
	h := &r.Hardware
	w = queuedPrefillSec(h, q) + pendingSec
	hold, start := 0.0, 0.0
	if q.batch > 0 {
		w += interferenceSec(h, q, uncached, chunk)
		hold, start = admissionSec(r, q, uncached, ownOut)
		w += hold
	}
	admitted = hold == 0
	peer, own := progressSec(h, &r.PeerWork, done, admitted)
	w -= peer
	w -= own
	w += stalePenaltySec(p, stale)
	return w, queueSec(w, hold, start, pendingSec), admitted
}

// queueSec is Candidate.QueueSec: W with the engine's own admission wait
// start in place of W's hold, and without the pending adapter loads.
func queueSec(w, hold, start, pendingSec float64) float64 { return w - hold + start - pendingSec }

// queuedPrefillSec is W's queued prefill: the prompts admitted before the
// request, queuedN · PrefillFixedSec + queuedTokens · PrefillSecPerToken
// seconds. Prefill is compute bound, so their tokens cost their full
// per-token time whether they run alone or in chunks beside decodes.
func queuedPrefillSec(h *Hardware, q *queue) float64 {
	return q.queuedN*h.PrefillFixedSec + q.queuedTokens*h.PrefillSecPerToken
}

// interferenceSec is what running decodes add to W: they do not queue
// ahead of the request (the scheduler runs its prefill in the next steps,
// beside them); they make each step longer. The queued and new prompt
// tokens need ⌈(queuedTokens + uncached) / (chunk − batch)⌉ steps (each
// decode takes one budget token), each carrying batch ·
// DecodeStepSecPerSeq of decode work, and an arrival waits on average half
// of the step in flight: stepSec/2 + steps · batch · DecodeStepSecPerSeq
// seconds (TestWaitModel).
func interferenceSec(h *Hardware, q *queue, uncached, chunk float64) float64 {
	b := float64(q.batch)
	perStep := chunk - b
	if !(perStep >= 1) {
		perStep = 1
	}
	steps := 1.0
	if x := q.queuedTokens + uncached; x > perStep {
		steps = math.Ceil(x / perStep)
	}
	return q.stepSec(h)/2 + steps*b*h.DecodeStepSecPerSeq
}

// admissionSec is W's wait for admission, in seconds: the request starts
// only when its prompt fits in free KV and the batch has a free slot. Both
// wait for running requests to finish, so the longer wait counts, not the
// sum (TestWaitModel).
//
// KV: when the reported usage plus the unseen prompts plus this prompt,
// plus the tokens generated while this request runs, exceed capacity,
// completionSec. The generation counts because the engine admits on the
// prompt alone and makes room for each decode step by preempting the
// newest request (vLLM's recompute preemption): this one, which then waits
// and prefills again. Only this request's lifetime matters: over its
// expected output each running sequence grows by at most that much
// (batch · ownOut, capped at the batch's remaining output), so a short
// request beside long generations is not held for their growth.
//
// Batch: when r.MaxBatchSeqs is known and queue plus batch fill it, the
// excess waits for as many completions; with remaining outputs spread
// evenly up to twice their mean, one comes every 2 · mean / batch steps.
//
// start is the same wait by the engine's own rule, which admits a prompt
// that fits in free KV now: completionSec only when the unseen prompts and
// this one do not, the batch wait as above (Candidate.QueueSec).
func admissionSec(r *Replica, q *queue, uncached, ownOut float64) (hold, start float64) {
	b := float64(q.batch)
	kvCap := float64(r.KVCapacity())
	usage := kvUsage(r)
	growth := q.decodeTokens
	if b*ownOut < growth {
		growth = b * ownOut
	}
	kvNow := usage*kvCap + float64(q.unseenTokens) + uncached
	kvNeed := kvNow + growth + ownOut
	if kvCap > 0 && kvNeed > kvCap {
		hold = q.completionSec(&r.Hardware)
	}
	if kvCap > 0 && kvNow > kvCap {
		start = q.completionSec(&r.Hardware)
	}
	excess := q.queuedN + b + 1 - float64(r.MaxBatchSeqs)
	batchWait := q.stepSec(&r.Hardware) * excess * 2 * q.decodeTokens / (b * b)
	if r.MaxBatchSeqs > 0 && excess > 0 {
		if batchWait > hold {
			hold = batchWait
		}
		if batchWait > start {
			start = batchWait
		}
	}
	return hold, start
}

// kvUsage is r's reported KV cache use in [0, 1]; a NaN counts as full.
func kvUsage(r *Replica) float64 {
	u := r.KVUsage
	if !(u <= 1) {
		return 1
	}
	if u < 0 {
		return 0
	}
	return u
}

// progressSec is what W takes off for the prefills in flight on r that have
// already run, in seconds: peer, the other routers' (PeerWork.DoneSec,
// capped at what W counts for their queued work here: they price their
// windows with their own calibration of r), and own, this router's running
// group's (done). Without it every busy replica looks alike and the
// tie-break chooses among them at random, where the one that frees first
// is wanted (TestPickPrefersPrefillNearEnd). Later prefills count in full:
// they wait for it. Nothing when not admitted: a KV or batch-slot wait
// means admission may not have happened.
func progressSec(h *Hardware, pw *Work, done float64, admitted bool) (peer, own float64) {
	if !admitted {
		return 0, 0
	}
	peerQueued := float64(pw.QueuedN)*h.PrefillFixedSec + float64(pw.QueuedTokens)*h.PrefillSecPerToken
	peer = pw.DoneSec
	if peer > peerQueued {
		peer = peerQueued
	}
	return peer, done
}

// isStale reports whether r's snapshot is older than staleNanos at
// nowNanos, or missing: its state is then uncertain.
func isStale(r *Replica, nowNanos, staleNanos int64) bool {
	return r.ScrapedNanos == 0 || nowNanos-r.ScrapedNanos > staleNanos
}

// stalePenaltySec is W's Params.StalePenaltySec for an uncertain replica,
// else 0: it still gets work when clearly better, but is never taken for
// idle because nobody has heard from it (TestPickEligibility).
func stalePenaltySec(p *Params, stale bool) float64 {
	if stale {
		return p.StalePenaltySec
	}
	return 0
}

// adapterSec is A(r, a) in seconds: the adapter's load cost on r from its
// tier (t.sec, adapterCost), plus, when r can serve it only after a GPU
// slot frees (t.slotWait), one completionSec per slot that must free first:
// the adapters already waiting there take the first ones, since the engine
// admits its queue in order, so a burst of new adapters spreads instead of
// piling behind one replica (TestAdapterSlotQueue).
func adapterSec(h *Hardware, q *queue, t *adapterTerms) float64 {
	a := t.sec
	if q.batch > 0 {
		wait := 0.0
		if t.slotWait {
			wait = q.completionSec(h) * float64(t.releases)
		}
		a += wait
	}
	return a
}

// startNanos is when a request sent to r at nowNanos starts its prefill
// (Candidate.StartNanos): at the next step boundary if nothing foreign is
// queued ahead and it is admitted at once; when the other routers'
// prefill groups in progress end if theirs are the only prefills ahead
// (Work.ClearNanos, TestStartBehindPeerGroup); else unknown (0).
func startNanos(pw *Work, q *queue, admitted bool, nowNanos int64) int64 {
	switch {
	case q.foreignWaiting != 0 || !admitted:
		return 0
	case pw.QueuedN == 0:
		return nowNanos
	case pw.ClearNanos > 0 && pw.ClearNanos != ClearUnknown:
		return max(pw.ClearNanos, nowNanos)
	}
	return 0
}

// externalSec is the delay, in seconds, that the request's own work on r
// imposes on other requests, times Params.ExternalityWeight (TestExternality):
//
//	(λ · ETTFT / (1 − ρ) + H_r) · (A + P) + N_r · A + reload · (1 + N_r) + s · ρ · u_r · B_r · (A + P)
//
// Every request that reaches r before r's queue next empties waits A + P
// longer. About λ·ETTFT of them arrive while this one waits and
// prefills (Little), and at the fleet's prefill utilization ρ the rest of
// r's busy period is that over 1 − ρ (busy: busyFactor, TestBusyFactor).
// λ is the fleet's recent arrival rate shared among the open replicas in
// proportion to their prefill capacity: load (fleetLoad) divided by r's
// prefill time of a mean prompt, what r receives when load follows
// capacity (TestExternalityByCapacity). It is not r's own recent rate:
// per-replica rates are each router's partial view, and replicas that are
// otherwise equal must stay tied so independent gateways agree on a new
// prefix's home. With no recent arrivals the term vanishes and the greedy
// ETTFT rule decides. H_r is r's share, in the same proportion, of the
// requests the routers hold back for capacity (held: Ledger.SetHeld): each
// of them waits for the capacity this request consumes.
//
// An adapter load also stalls the N_r requests already on r (onReplica):
// engines load LoRA weights inside the scheduler step (vLLM's LRU adapter
// manager activates them before the forward pass). Sharing r's GPU slots
// and host cache with the adapters placed there makes them reload sooner,
// and the adapter's own share of traffic there reloads more than at its
// home (reloadSec: adapterTerms.reloadSec, reloadCost); each reload runs
// inside a step too, so it costs its own request and the ones on r then,
// counted as the ones on r now.
//
// And the B_r generations running on r wait for the steps that carry this
// request's adapter load and prefill (chunked prefill shares each step with
// the batch), B_r · (A + P) seconds of decode time in all. They hold their
// KV blocks that much longer, which keeps out the requests that need them
// as often as the cache is full and the fleet busy: u_r, r's KV cache use,
// times ρ. Weighed by s = Params.StallWeight against time to first token,
// a prefill goes where fewer generations wait for it while their cache is
// tight, and the engines preempt less (TestStallSpreadsPrefills); with no
// load the term vanishes with the rest.
func externalSec(p *Params, h *Hardware, c *Candidate, load, share, busy, held, promptMean, onReplica, running, usage, reloadSec float64) float64 {
	meanP := prefillSec(h, promptMean)
	lam, heldHere := 0.0, 0.0
	if meanP > 0 {
		lam = load / meanP // a zero profile adds no capacity (fleetLoad)
		lam *= share
		heldHere = held / meanP
	}
	work := c.AdapterSec + c.PrefillSec
	ext := (lam*c.TotalSec()*busy+heldHere)*work + onReplica*c.AdapterSec
	ext += reloadSec * (1 + onReplica) // +0 without an adapter
	ext += p.StallWeight * load * usage * running * work
	return p.ExternalityWeight * ext
}

// heldShare is the factor o_r / ō by which r's arrivals differ from its
// share of the fleet's prefill capacity: r's occupancy (Replica.occupancy)
// over the open replicas' capacity-weighted mean, 1 when nothing is held
// anywhere. Requests follow their cached contexts, so a replica receives
// the fleet's requests in proportion to the contexts it holds: one holding
// more is charged for the extra requests that follow it, one holding less
// (a slow replica the router avoids) for fewer, so it is not overpriced
// (TestExternalityFollowsHeldContext).
func heldShare(r *Replica, occupancy float64) float64 {
	if !(occupancy > 0) {
		return 1
	}
	return r.occupancy() / occupancy
}
