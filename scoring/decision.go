package scoring

import "github.com/gpuroute/gpuroute/scoring/prefix"

// Reason says why Pick chose what it chose.
type Reason uint8

// Reasons, as reported in Decision.Reason.
const (
	// ReasonNoReplica: no replica was eligible (all unhealthy, draining,
	// serving other models, or unable to hold the adapter); Decision.Index
	// is -1.
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
	// WaitSec is W(r) (waitSec): queued prefill (of the router's own
	// prefill in progress, only what is left), the running batch's
	// per-step slowdown, any KV or batch-slot wait, the loads of other
	// adapters queued there without a GPU slot yet, plus StalePenaltySec
	// when Stale.
	WaitSec float64
	// AdapterSec is A(r, a) (adapterSec).
	AdapterSec float64
	// PrefillSec is P_r(n − k) (prefillSec).
	PrefillSec float64
	// CachedTokens is k(r), clamped to [0, n−1].
	CachedTokens int
	// ExternalSec is the delay the request's own work on r imposes on
	// other requests (externalSec), scaled by Params.ExternalityWeight.
	ExternalSec float64
	// Stale is true when the replica's snapshot was older than
	// Params.StaleAfter (or missing).
	Stale bool
	// QueueSec is the part of WaitSec before the engine would start the
	// request's prefill by its own admission rule, which admits a prompt
	// that fits in free KV now (vLLM's): WaitSec with the KV wait counted
	// only when the prompt itself does not fit, and without the adapter
	// loads pending there (queueSec). Flow control holds a request on it.
	QueueSec float64
	// StartNanos is when a request sent to r at the decision's time is
	// expected to start its prefill there, on the caller's clock, or 0
	// when that is unknown (startNanos). Ledger.Dispatch takes it.
	StartNanos int64
}

// TotalSec returns ETTFT(r) = W + A + P.
func (c *Candidate) TotalSec() float64 { return c.WaitSec + c.AdapterSec + c.PrefillSec }

// CostSec is what Pick minimises: the request's own ETTFT plus the delay
// its work imposes on the requests that will queue behind it (ExternalSec).
func (c *Candidate) CostSec() float64 { return c.TotalSec() + c.ExternalSec }

// Decision is the result of Pick with its explanation. Keep one per worker
// (or per request context) and pass it to every Pick: it owns scratch that
// makes Pick allocation-free after the first call. Its scratch carries
// nothing from one Pick to the next.
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
	// NoModel, Unhealthy, Draining and NoAdapterSlot count excluded
	// replicas: those that do not serve the request's model
	// (Request.ServedBy), and of the others those unhealthy, closed to new
	// work, or unable to hold the adapter.
	NoModel, Unhealthy, Draining, NoAdapterSlot int
	// Stale counts eligible replicas with an uncertain snapshot.
	Stale int

	cands []Candidate // per replica; Index -1 for one not scored
	adapt []adapterTerms
	base  []adapterTerms // the terms of a request without an adapter
	done  []float64      // per replica, the running prefill group's progress
	// every is the ServedBy of a request every replica serves, served a
	// ServedBy padded to the fleet.
	every, served []bool
	// cached pads a cachedTokens shorter than the fleet with zeros, and
	// noLedger stands for the ledger's work on a replica it does not
	// cover.
	cached   []int
	noLedger replicaWork
	view     adapterView // the adapter memory's view of the request's adapter
}

// Chosen returns the chosen candidate's cost terms, or false when none.
func (d *Decision) Chosen() (Candidate, bool) {
	if d.Index < 0 || d.NumTop == 0 {
		return Candidate{}, false
	}
	return d.Top[0], true
}

// settle chooses among the candidates within limit of the cheapest (ties of
// them, the last at index tie, as the top list counted them) and explains
// the choice: one is chosen; among several the highest rendezvous weight of
// the prefix's home wins: its first Params.HomeBlocks blocks, or the model
// and adapter for a prompt shorter than a block, so independent routers
// agree on a new prefix's home (TestTieBreakRendezvous).
func (d *Decision) settle(p *Params, req *Request, replicas []Replica, cands []Candidate, limit float64, ties, tie int) {
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

	d.promote(cands[d.Index])
	switch {
	case d.Eligible == 1 || d.NumTop < 2:
		d.Reason = ReasonOnlyReplica
	case ties > 1:
		d.Reason = ReasonTieBreak
	default:
		d.Reason = decidingTerm(&d.Top[0], &d.Top[1], &replicas[d.Index].Hardware, max(req.PromptTokens, 1))
	}
}

// decidingTerm says what made the chosen candidate c cheaper than the
// runner-up o: the term of c's own ETTFT that favours it most. Its queue:
// least-loaded. The adapter load it spares: adapter-resident. Its prefill,
// split at the cost c would pay with o's cached tokens into the part its
// cached prefix saves (prefix-affinity) and the part its hardware saves
// (faster-hardware). When none favours c, the externality (the delay the
// request imposes on others) chose it: least-loaded. The externality is
// left out of the comparison because it follows the others (it grows with
// the request's own adapter load and prefill): a choice made for a cached
// prefix on a replica with a longer queue is prefix-affinity, not
// least-loaded (TestDecidingTerm). n is the prompt's tokens.
func decidingTerm(c, o *Candidate, h *Hardware, n int) Reason {
	asCachedAsO := prefillSec(h, float64(n-min(max(o.CachedTokens, 0), n-1)))
	reason, most := ReasonLeastLoaded, max(o.WaitSec-c.WaitSec, 0)
	if by := o.AdapterSec - c.AdapterSec; by > most {
		reason, most = ReasonAdapterResident, by
	}
	if by := asCachedAsO - c.PrefillSec; by > most {
		reason, most = ReasonPrefixAffinity, by
	}
	if by := o.PrefillSec - asCachedAsO; by > most {
		reason = ReasonFasterHardware
	}
	return reason
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
