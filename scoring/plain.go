package scoring

import "math"

// pickPlain is Pick written plainly: the definition of the rule, which
// Pick's fused loop (pick) optimises for the wasm compiler. Each replica's
// candidate composes the terms of terms.go; the cheapest cost wins, ties
// within Params.TieEpsilonSec break by rendezvous hashing (Decision.settle,
// shared with Pick). TestPickMatchesPlain and FuzzPick hold the two equal:
// the same Decision, candidate terms to the bit.
func pickPlain(p *Params, req *Request, replicas []Replica, cachedTokens []int, l *Ledger, nowNanos int64, d *Decision) {
	decide(plainPass, p, req, replicas, cachedTokens, l, nowNanos, d)
}

// plainPass is pick's definition (see pass).
func plainPass(p *Params, req *Request, replicas []Replica, cachedTokens []int, l *Ledger, nowNanos int64, d *Decision, waitForSlot bool) {
	var k pickInputs
	cachedTokens, done, reps := d.prepare(&k, p, req, replicas, cachedTokens, l, nowNanos, waitForSlot)
	best := math.Inf(1)
	for i := range replicas {
		r := &replicas[i]
		c := &d.cands[i]
		c.Index = -1
		switch {
		case !k.served[i]:
			d.NoModel++
			continue
		case !r.Healthy:
			d.Unhealthy++
			continue
		case r.Drain != Serving: // Draining or Drained: closed to new work
			d.Draining++
			continue
		case !k.terms[i].ok:
			d.NoAdapterSlot++
			continue
		}
		own := &d.noLedger.Work
		if i < len(reps) {
			own = &reps[i].Work
		}
		*c = k.candidate(p, r, i, cachedTokens[i], own, done[i], nowNanos)
		d.Eligible++
		if c.Stale {
			d.Stale++
		}
		cost := c.CostSec()
		if math.IsNaN(cost) {
			cost = math.Inf(1)
		}
		if cost < best {
			best = cost
		}
	}
	if d.Eligible == 0 {
		return
	}
	limit := best + p.TieEpsilonSec
	ties, tie := d.topPlain(limit)
	d.settle(p, req, replicas, d.cands, limit, ties, tie)
}

// candidate returns replica r's (index i) cost terms for the pass k
// describes: cached tokens of the prompt on r, own the ledger's work there,
// done its running group's progress.
func (k *pickInputs) candidate(p *Params, r *Replica, i, cached int, own *Work, done float64, nowNanos int64) Candidate {
	t := &k.terms[i]
	h := &r.Hardware
	c := Candidate{Index: i, CachedTokens: min(max(cached, 0), k.n-1)}
	uncached := float64(k.n - c.CachedTokens)
	c.PrefillSec = prefillSec(h, uncached)
	q := queueOn(r, own, k.promptMean, k.outMean)
	c.Stale = isStale(r, nowNanos, k.staleNanos)
	var admitted bool
	c.WaitSec, c.QueueSec, admitted = waitSec(p, r, &q, uncached, k.ownOut, k.chunk, t.pendingSec, done, c.Stale)
	c.AdapterSec = adapterSec(h, &q, t)
	c.StartNanos = startNanos(&r.PeerWork, &q, admitted, nowNanos)
	if p.ExternalityWeight > 0 {
		c.ExternalSec = externalSec(p, h, &c, k.load, heldShare(r, k.occupancy), k.busy, k.held, k.promptMean, q.onReplica(), float64(q.batch), kvUsage(r), t.reloadSec)
	}
	return c
}

// topPlain is fillTop's definition: each eligible candidate in replica
// order goes into Top after every listed one that does not cost more than
// it, the list cut at TopN; it returns how many cost at most limit and the
// last of them.
func (d *Decision) topPlain(limit float64) (ties, tie int) {
	d.NumTop = 0
	for i := range d.cands {
		c := &d.cands[i]
		if c.Index < 0 {
			continue
		}
		cost := c.CostSec()
		if cost <= limit {
			ties, tie = ties+1, i
		}
		if d.NumTop == TopN && !(cost < d.Top[TopN-1].CostSec()) {
			continue
		}
		pos := d.NumTop
		for pos > 0 && cost < d.Top[pos-1].CostSec() {
			pos--
		}
		d.NumTop = min(d.NumTop+1, TopN)
		copy(d.Top[pos+1:d.NumTop], d.Top[pos:])
		d.Top[pos] = *c
	}
	return ties, tie
}
