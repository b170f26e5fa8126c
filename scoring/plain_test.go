package scoring

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/gpuroute/gpuroute/scoring/prefix"
)

// The operands of fusesMultiplyAdd: variables, so the compiler cannot fold
// the expression.
var fmaX, fmaY, fmaZ = 1 + 0x1p-30, 1 - 0x1p-30, -1.0

// fusesMultiplyAdd reports whether the compiler fuses x*y + z into one
// rounding on this platform (it may on arm64 or with GOAMD64=v3, never on
// wasm or amd64 v1): (1+2⁻³⁰)(1−2⁻³⁰) − 1 is 0 rounded twice, −2⁻⁶⁰ fused.
// Pick's loop and pickPlain write the same expressions, but a fusing
// compiler may fuse them differently, an ulp apart.
func fusesMultiplyAdd() bool { return fmaX*fmaY+fmaZ != 0 }

// sameFloat compares two terms: bit for bit (NaN equal to NaN), or within
// 1e-12 relative (and 1e-15 absolute) where the compiler fuses
// multiply-adds, enough for an ulp or two of each of the dozen roundings
// in a term.
func sameFloat(a, b float64, fused bool) bool {
	if math.Float64bits(a) == math.Float64bits(b) || (math.IsNaN(a) && math.IsNaN(b)) {
		return true
	}
	return fused && math.Abs(a-b) <= 1e-15+1e-12*max(math.Abs(a), math.Abs(b))
}

// sameCandidate reports whether a and b are the same terms (sameFloat).
func sameCandidate(a, b *Candidate, fused bool) bool {
	return a.Index == b.Index && a.CachedTokens == b.CachedTokens && a.Stale == b.Stale && a.StartNanos == b.StartNanos &&
		sameFloat(a.WaitSec, b.WaitSec, fused) && sameFloat(a.AdapterSec, b.AdapterSec, fused) &&
		sameFloat(a.PrefillSec, b.PrefillSec, fused) && sameFloat(a.ExternalSec, b.ExternalSec, fused)
}

// diffDecisions returns how got (Pick) differs from want (pickPlain), or
// "" when they agree: the counts, every scored replica's terms, and,
// unless the compiler fuses multiply-adds (where an ulp can move a tie or
// reorder equal costs), the choice, its reason and the top list.
func diffDecisions(got, want *Decision, fused bool) string {
	if got.Eligible != want.Eligible || got.NoModel != want.NoModel || got.Unhealthy != want.Unhealthy || got.Draining != want.Draining ||
		got.NoAdapterSlot != want.NoAdapterSlot || got.Stale != want.Stale {
		return "counts " + counts(got) + ", want " + counts(want)
	}
	if len(got.cands) != len(want.cands) {
		return "scored " + strconv.Itoa(len(got.cands)) + " replicas, want " + strconv.Itoa(len(want.cands))
	}
	for i := range want.cands {
		g, w := &got.cands[i], &want.cands[i]
		if (g.Index < 0) != (w.Index < 0) || w.Index >= 0 && !sameCandidate(g, w, fused) {
			return "replica " + strconv.Itoa(i) + " terms " + show(g) + ", want " + show(w)
		}
	}
	if fused {
		return ""
	}
	if got.Index != want.Index || got.Reason != want.Reason || got.NumTop != want.NumTop {
		return "chose " + strconv.Itoa(got.Index) + " (" + got.Reason.String() + ", " + strconv.Itoa(got.NumTop) + " listed), want " +
			strconv.Itoa(want.Index) + " (" + want.Reason.String() + ", " + strconv.Itoa(want.NumTop) + ")"
	}
	for i := range want.NumTop {
		if !sameCandidate(&got.Top[i], &want.Top[i], false) {
			return "Top[" + strconv.Itoa(i) + "] " + show(&got.Top[i]) + ", want " + show(&want.Top[i])
		}
	}
	return ""
}

func counts(d *Decision) string {
	return strconv.Itoa(d.Eligible) + " eligible, " + strconv.Itoa(d.NoModel) + " serving other models, " +
		strconv.Itoa(d.Unhealthy) + " unhealthy, " + strconv.Itoa(d.Draining) +
		" draining, " + strconv.Itoa(d.NoAdapterSlot) + " without a slot, " + strconv.Itoa(d.Stale) + " stale"
}

func show(c *Candidate) string {
	g := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	return "{" + strconv.Itoa(c.Index) + " w=" + g(c.WaitSec) + " a=" + g(c.AdapterSec) + " p=" + g(c.PrefillSec) +
		" x=" + g(c.ExternalSec) + " k=" + strconv.Itoa(c.CachedTokens) + " start=" + strconv.FormatInt(c.StartNanos, 10) +
		" stale=" + strconv.FormatBool(c.Stale) + "}"
}

// twinFleet drives two ledgers through the same history, one priced by
// Pick and one by pickPlain, over one fleet that both read.
type twinFleet struct {
	rng      *rand.Rand
	p        Params
	replicas []Replica
	cached   []int
	fast     *Ledger
	plain    *Ledger
	flights  [][2]Flight // in flight, in both ledgers
	now      int64
	uniform  bool // one profile, mostly idle replicas
}

var twinAdapters = []string{"", "", "sql", "fr", "de", "rare1", "rare2", "rare3"}

func newTwinFleet(seed uint64) *twinFleet {
	rng := rand.New(rand.NewPCG(seed, 11))
	n := 1 + rng.IntN(12)
	p := DefaultParams()
	switch rng.IntN(4) {
	case 0:
		p.TieEpsilonSec = 0
	case 1:
		p.TieEpsilonSec = 0.5 // wide ties: the rendezvous tie-break decides
	}
	p.ExternalityWeight = []float64{0, 1, 1, 3}[rng.IntN(4)]
	p.PrefillChunkTokens = []int{8192, 2048, 256}[rng.IntN(3)] // small: several prefill steps
	p.AdapterToleranceSec = []float64{0, 0, 0.2}[rng.IntN(3)]
	tf := &twinFleet{rng: rng, p: p, replicas: make([]Replica, n), now: 1000 * sec}
	maxReplicas := n
	if rng.IntN(4) == 0 {
		maxReplicas = max(n-2, 1) // a fleet larger than the ledger
	}
	tf.fast, tf.plain = NewLedger(p, maxReplicas, 48), NewLedger(p, maxReplicas, 48)
	names := HardwareNames()
	// A uniform fleet prices idle replicas exactly alike: equal costs, in
	// the top list and in the tie-break.
	tf.uniform = rng.IntN(3) == 0
	uniform, _ := LookupHardware(names[rng.IntN(len(names))])
	for i := range tf.replicas {
		h, _ := LookupHardware(names[rng.IntN(len(names))])
		if rng.IntN(3) == 0 {
			h.PrefillSecPerToken *= 0.5 + rng.Float64() // calibrated
		}
		if tf.uniform {
			h = uniform
		}
		addr := "10.2.0." + strconv.Itoa(i) + ":8000"
		tf.replicas[i] = Replica{Addr: addr, Hardware: h, AdapterSlots: rng.IntN(5) - 1, AdapterHostSlots: rng.IntN(6)}
		if rng.IntN(2) == 0 {
			tf.replicas[i].AddrHash = 0 // Pick hashes the address
		} else {
			tf.replicas[i].AddrHash = prefix.HashString(addr)
		}
	}
	return tf
}

// step changes the fleet's snapshot as a scrape would, and the peers' work.
func (tf *twinFleet) step() {
	rng := tf.rng
	tf.now += int64(rng.IntN(400)) * 1e6
	for i := range tf.replicas {
		r := &tf.replicas[i]
		if rng.IntN(3) != 0 {
			continue // this replica's snapshot did not move
		}
		r.Healthy = rng.IntN(8) != 0
		r.Drain = []DrainState{Serving, Serving, Serving, Serving, Draining, Drained}[rng.IntN(6)]
		r.WaitingRequests = rng.IntN(6) * rng.IntN(4)
		r.RunningRequests = rng.IntN(60) * rng.IntN(3)
		if tf.uniform && rng.IntN(2) == 0 {
			r.WaitingRequests, r.RunningRequests = 0, 0
		}
		r.KVUsage = []float64{0, 0.3, 0.9, 0.999, 1.2, math.NaN(), rng.Float64()}[rng.IntN(7)]
		r.KVCapacityTokens = []int{0, 20_000, 400_000}[rng.IntN(3)]
		r.MaxBatchSeqs = []int{0, 0, 8, 64}[rng.IntN(4)]
		switch rng.IntN(5) {
		case 0:
			r.ScrapedNanos = 0 // never scraped
		case 1:
			r.ScrapedNanos = tf.now - 5*sec // stale
		default:
			r.ScrapedNanos = tf.now - int64(rng.IntN(500))*1e6
		}
		r.Adapters = r.Adapters[:0]
		for range rng.IntN(4) {
			name := twinAdapters[2+rng.IntN(len(twinAdapters)-2)]
			a := Adapter{Name: name, Tier: AdapterTier(rng.IntN(3)), Active: rng.IntN(2) == 0}
			if rng.IntN(2) == 0 {
				a.Hash = prefix.HashString(name)
			}
			r.Adapters = append(r.Adapters, a)
		}
		r.PeerWork = Work{}
		if !tf.uniform && rng.IntN(2) == 0 {
			q := int64(rng.IntN(4))
			r.PeerWork = Work{QueuedN: q, QueuedTokens: q * int64(rng.IntN(3000)), DecodeN: int64(rng.IntN(20)),
				DecodeTokens: int64(rng.IntN(20_000)), UnseenN: int64(rng.IntN(2)), UnseenTokens: int64(rng.IntN(2000)),
				DoneSec: rng.Float64() * 0.3}
			if rng.IntN(20) == 0 {
				r.PeerWork.DoneSec = math.NaN() // a corrupt record: W is NaN, the cost +Inf
			}
			switch rng.IntN(3) {
			case 0:
				r.PeerWork.ClearNanos = ClearUnknown
			case 1:
				r.PeerWork.ClearNanos = tf.now + int64(rng.IntN(300))*1e6 - 100e6
			}
		}
	}
	tf.cached = tf.cached[:0]
	if rng.IntN(4) != 0 {
		for range len(tf.replicas) - rng.IntN(2) { // sometimes shorter than the fleet
			tf.cached = append(tf.cached, rng.IntN(4)*rng.IntN(3000))
		}
	}
	if rng.IntN(3) == 0 {
		rate := rng.Float64() * 40
		tf.fast.SetPeerRate(rate)
		tf.plain.SetPeerRate(rate)
	}
	if rng.IntN(5) == 0 {
		pl := AdapterPlacement{Adapter: prefix.HashString(twinAdapters[2+rng.IntN(len(twinAdapters)-2)]),
			Replica: rng.IntN(len(tf.replicas)), UntilNanos: tf.now + int64(rng.IntN(90))*sec - 30*sec}
		tf.fast.MergeAdapterPlacement(pl)
		tf.plain.MergeAdapterPlacement(pl)
	}
}

// request returns a random request; adapter requests name the few adapters
// the fleet lists, so that memory, slots and reloads all come into play.
func (tf *twinFleet) request() Request {
	rng := tf.rng
	req := Request{PromptTokens: rng.IntN(3) * rng.IntN(8000), Model: "m", MaxTokens: rng.IntN(3) * rng.IntN(600),
		Adapter: twinAdapters[rng.IntN(len(twinAdapters))]}
	for range rng.IntN(6) {
		req.Chain = append(req.Chain, rng.Uint64())
	}
	if rng.IntN(4) == 0 {
		// A model some replicas serve; the mask is sometimes shorter
		// than the fleet, sometimes serves none.
		req.ServedBy = make([]bool, len(tf.replicas)-rng.IntN(2))
		for i := range req.ServedBy {
			req.ServedBy[i] = rng.IntN(3) != 0
		}
	}
	if req.Adapter != "" && rng.IntN(3) == 0 {
		req.AdapterRecent = make([]bool, len(tf.replicas))
		for i := range req.AdapterRecent {
			req.AdapterRecent[i] = rng.IntN(3) == 0
		}
	}
	return req
}

// settle moves the requests in flight on, the same in both ledgers.
func (tf *twinFleet) settle() {
	rng := tf.rng
	for k := len(tf.flights) - 1; k >= 0; k-- {
		f := tf.flights[k]
		switch rng.IntN(6) {
		case 0:
			tf.fast.FirstTokenAt(f[0], tf.now)
			tf.plain.FirstTokenAt(f[1], tf.now)
		case 1:
			n := 1 + rng.IntN(40)
			tf.fast.Progress(f[0], n)
			tf.plain.Progress(f[1], n)
		case 2:
			out := rng.IntN(500)
			tf.fast.Done(f[0], out)
			tf.plain.Done(f[1], out)
			tf.flights = append(tf.flights[:k], tf.flights[k+1:]...)
		}
	}
}

// TestPickMatchesPlain: Pick's fused loop and pickPlain, the rule written
// plainly, make the same decision with the same terms, to the bit, on
// random fleets and requests through a history of dispatches: models
// only some replicas serve, LoRA
// adapters (slots, tiers, memory, reloads, all slots busy), stale and
// missing snapshots, full KV caches and batches, peers' work and windows,
// drains and unhealthy replicas, fleets larger than the ledger, ties.
func TestPickMatchesPlain(t *testing.T) {
	fused := fusesMultiplyAdd()
	seeds, steps := 300, 40
	if testing.Short() {
		seeds = 60
	}
	for seed := range uint64(seeds) {
		tf := newTwinFleet(seed)
		var fast, plain Decision
		for step := range steps {
			tf.step()
			req := tf.request()
			Pick(&tf.p, &req, tf.replicas, tf.cached, tf.fast, tf.now, &fast)
			pickPlain(&tf.p, &req, tf.replicas, tf.cached, tf.plain, tf.now, &plain)
			if diff := diffDecisions(&fast, &plain, fused); diff != "" {
				t.Fatalf("seed %d step %d: Pick(%d replicas, prompt %d, adapter %q) %s", seed, step, len(tf.replicas), req.PromptTokens, req.Adapter, diff)
			}
			if fast.Index >= 0 && plain.Index == fast.Index {
				uncached := max(req.PromptTokens-fast.Top[0].CachedTokens, 1)
				a := tf.fast.Dispatch(fast.Index, &req, uncached, tf.now, fast.Top[0].StartNanos)
				b := tf.plain.Dispatch(plain.Index, &req, uncached, tf.now, plain.Top[0].StartNanos)
				if (a == 0) != (b == 0) {
					t.Fatalf("seed %d step %d: Dispatch = %v and %v, want both accounted or neither", seed, step, a, b)
				}
				if a != 0 {
					tf.flights = append(tf.flights, [2]Flight{a, b})
				}
			}
			tf.settle()
		}
	}
}
