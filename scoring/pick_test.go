package scoring

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/gpuroute/gpuroute/scoring/prefix"
)

const sec = int64(time.Second)

// fleet returns n healthy, fresh, idle replicas of hardware hw.
func fleet(hw string, n int, now int64) []Replica {
	h, _ := LookupHardware(hw)
	rs := make([]Replica, n)
	for i := range rs {
		addr := "10.0.0." + strconv.Itoa(i+1) + ":8000"
		rs[i] = Replica{Addr: addr, AddrHash: prefix.HashString(addr), Engine: "vllm", Hardware: h,
			Healthy: true, ScrapedNanos: now, AdapterSlots: 4}
	}
	return rs
}

// startOf returns the StartNanos the Pick that filled d gave replica i (0
// when it was not scored), to dispatch there as if Pick had chosen it.
func startOf(d *Decision, i int) int64 {
	if i < 0 || i >= len(d.cands) || d.cands[i].Index != i {
		return 0
	}
	return d.cands[i].StartNanos
}

func linear(h Hardware) Hardware { h.PrefillSecPerToken2 = 0; return h }

// exactParams has no tie epsilon, so the rule can be checked exactly.
func exactParams() Params { p := DefaultParams(); p.TieEpsilonSec = 0; return p }

// TestPickProposition checks the rule's proposition (docs/design.md "The
// decision"): with two
// replicas, warm A wins exactly when W(A) − W(B) < P(n) − P(n−k); with
// linear prefill that is t_prefill(k) without the fixed cost; with
// heterogeneous hardware each side uses its own profile. W includes the
// running batch's interference, which depends (weakly, through the number
// of prefill steps) on the uncached tokens, so each side's W is its own.
func TestPickProposition(t *testing.T) {
	now := 100 * sec
	rng := rand.New(rand.NewPCG(1, 2))
	cases := []struct {
		name   string
		hwA    string
		hwB    string
		linear bool
	}{
		{name: "linear h100", hwA: "h100", hwB: "h100", linear: true},
		{name: "quadratic h100", hwA: "h100", hwB: "h100"},
		{name: "heterogeneous a100 warm vs h100 cold", hwA: "a100", hwB: "h100"},
		{name: "heterogeneous l4 warm vs l40s cold", hwA: "l4", hwB: "l40s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := exactParams()
			var d Decision
			flips := [2]int{}
			for iter := 0; iter < 3000; iter++ {
				rs := fleet("h100", 2, now)
				rs[0].Hardware, _ = LookupHardware(tc.hwA)
				rs[1].Hardware, _ = LookupHardware(tc.hwB)
				if tc.linear {
					rs[0].Hardware, rs[1].Hardware = linear(rs[0].Hardware), linear(rs[1].Hardware)
				}
				rs[0].WaitingRequests = rng.IntN(12)
				rs[1].WaitingRequests = rng.IntN(12)
				rs[0].RunningRequests = rng.IntN(200)
				rs[1].RunningRequests = rng.IntN(200)
				p.DefaultPromptTokens = 50 + rng.IntN(3000)
				n := 100 + rng.IntN(12000)
				k := rng.IntN(n)
				req := Request{PromptTokens: n, Chain: []uint64{uint64(iter)}}
				Pick(&p, &req, rs, []int{k, 0}, nil, now, &d)
				wA, wB := waitOf(&d, 0), waitOf(&d, 1)
				// W from the reported queue and batch: each waiting request
				// is a fixed cost plus its mean prompt; the running batch
				// adds half a step plus its per-sequence cost in every step
				// the queued and uncached prompt tokens take (KV is free).
				for i, w := range []float64{wA, wB} {
					h := rs[i].Hardware
					queued := float64(rs[i].WaitingRequests * p.DefaultPromptTokens)
					want := float64(rs[i].WaitingRequests)*h.PrefillFixedSec + queued*h.PrefillSecPerToken
					if b := rs[i].RunningRequests; b > 0 {
						uncached := n - []int{k, 0}[i]
						steps := math.Ceil((queued + float64(uncached)) / float64(p.PrefillChunkTokens-b))
						want += h.DecodeStepSeconds(b)/2 + steps*float64(b)*h.DecodeStepSecPerSeq
					}
					if math.Abs(w-want) > 1e-9 {
						t.Fatalf("W(%d) = %v, want %v", i, w, want)
					}
				}
				gain := rs[1].Hardware.PrefillSeconds(n) - rs[0].Hardware.PrefillSeconds(n-k)
				if tc.linear && tc.hwA == tc.hwB {
					h := rs[0].Hardware
					if tk := h.PrefillSecPerToken * float64(k); math.Abs(gain-tk) > 1e-9 {
						t.Fatalf("linear P(n) − P(n−k) = %v, want t_prefill(k) = %v", gain, tk)
					}
				}
				diff := wA - wB
				if math.Abs(diff-gain) < 1e-9 {
					continue
				}
				wantA := diff < gain
				if got := d.Index == 0; got != wantA {
					t.Fatalf("Pick(W(A)=%v, W(B)=%v, n=%d, k=%d) = %d, want warm A %v (gain %v)", wA, wB, n, k, d.Index, wantA, gain)
				}
				flips[d.Index]++
			}
			if flips[0] == 0 || flips[1] == 0 {
				t.Fatalf("choices %v: want both replicas chosen somewhere", flips)
			}
		})
	}
}

// TestPickQuadraticUsesDifference pins a case where P(n) − P(n−k) and
// P(k) disagree: a 10k-token prompt with 5k cached.
func TestPickQuadraticUsesDifference(t *testing.T) {
	now := 10 * sec
	p := exactParams()
	rs := fleet("h100", 2, now)
	h := rs[0].Hardware
	n, k := 10000, 5000
	gain := h.PrefillSeconds(n) - h.PrefillSeconds(n-k)
	pk := h.PrefillSeconds(k)
	if gain <= pk {
		t.Fatalf("P(n) − P(n−k) = %v, want > P(k) = %v", gain, pk)
	}
	// Put A's queue between the two thresholds.
	gap := (gain + pk) / 2
	p.DefaultPromptTokens = 100
	perReq := h.PrefillFixedSec + 100*h.PrefillSecPerToken
	rs[0].WaitingRequests = int(gap / perReq)
	var d Decision
	Pick(&p, &Request{PromptTokens: n}, rs, []int{k, 0}, nil, now, &d)
	if w := waitOf(&d, 0); w <= pk || w >= gain {
		t.Fatalf("setup W(A) = %v, want in (%v, %v)", w, pk, gain)
	}
	if d.Index != 0 || d.Reason != ReasonPrefixAffinity {
		t.Fatalf("Pick = %d (%v), want 0 (prefix-affinity)", d.Index, d.Reason)
	}
}

func waitOf(d *Decision, idx int) float64 {
	for i := 0; i < d.NumTop; i++ {
		if d.Top[i].Index == idx {
			return d.Top[i].WaitSec
		}
	}
	return math.NaN()
}

// TestFixedPoliciesLose sweeps prefix length × load on the warm replica:
// "always warm" and "always least-loaded" each pick a replica with higher
// ETTFT somewhere, and ETTFT is never worse than either.
func TestFixedPoliciesLose(t *testing.T) {
	now := 10 * sec
	p := exactParams()
	var d Decision
	warmWorse, leastWorse := 0, 0
	for _, n := range []int{500, 2000, 8000, 16000} {
		for _, frac := range []float64{0.1, 0.5, 0.9} {
			for load := 0; load <= 30; load += 2 {
				rs := fleet("h100", 3, now)
				rs[0].WaitingRequests = load // warm
				rs[1].WaitingRequests = 1    // least loaded
				rs[2].WaitingRequests = 3
				k := int(frac * float64(n))
				cached := []int{k, 0, k / 4}
				req := Request{PromptTokens: n}
				Pick(&p, &req, rs, cached, nil, now, &d)
				cost := func(i int) float64 {
					for j := 0; j < d.NumTop; j++ {
						if d.Top[j].Index == i {
							return d.Top[j].TotalSec()
						}
					}
					t.Fatalf("replica %d missing from Top", i)
					return 0
				}
				warm, least := 0, 1 // by construction
				best := cost(d.Index)
				if best > cost(warm)+1e-12 || best > cost(least)+1e-12 {
					t.Fatalf("n=%d k=%d load=%d: ETTFT pick %d costs %v, worse than warm %v or least %v", n, k, load, d.Index, best, cost(warm), cost(least))
				}
				if cost(warm) > best+1e-9 {
					warmWorse++
				}
				if cost(least) > best+1e-9 {
					leastWorse++
				}
			}
		}
	}
	if warmWorse == 0 || leastWorse == 0 {
		t.Fatalf("always-warm worse in %d cells, always-least-loaded worse in %d: want both > 0", warmWorse, leastWorse)
	}
}

// TestTokenBalancingBeatsCounts: bimodal work (20 vs 20,000 tokens) where
// request counts say nothing about the delay a replica holds. With
// continuous batching that delay is queued prompt tokens, and remaining
// output tokens once the KV cache is full.
func TestTokenBalancingBeatsCounts(t *testing.T) {
	now := 10 * sec
	ratio := func(t [2]int64) float64 {
		return float64(max(t[0], t[1])) / float64(max(min(t[0], t[1]), 1))
	}
	// Queued prompts: balancing counts puts every long prompt on one
	// replica; ETTFT balances the prefill tokens ahead.
	t.Run("bimodal prompts", func(t *testing.T) {
		p := DefaultParams()
		pattern := []int{20000, 20, 20, 20} // repeated
		run := func(byCount bool) (tokens [2]int64) {
			rs := fleet("h100", 2, now)
			l := NewLedger(p, 2, 64)
			var d Decision
			for i := 0; i < 16; i++ {
				n := pattern[i%len(pattern)]
				req := Request{PromptTokens: n, Model: "m", Chain: []uint64{uint64(i)}}
				idx := 0
				if byCount {
					if l.InFlightOn(1) < l.InFlightOn(0) {
						idx = 1
					}
				} else {
					Pick(&p, &req, rs, nil, l, now, &d)
					idx = d.Index
				}
				l.Dispatch(idx, &req, n, now, startOf(&d, idx))
				tokens[idx] += int64(n)
			}
			return tokens
		}
		if c := run(true); ratio(c) < 10 {
			t.Fatalf("least-request prompt tokens per replica = %v, want ≥ 10× imbalance (the misplacement this test shows)", c)
		}
		if tk := run(false); ratio(tk) > 1.5 {
			t.Fatalf("ETTFT prompt tokens per replica = %v, want ≤ 1.5× imbalance", tk)
		}
	})
	// Running outputs: replica 0 runs one 20,000-token generation, replica
	// 1 three 20-token ones. Least-request sends the next request to 0.
	// With free KV the decodes only slow the prefill's steps, so the smaller
	// batch is right; with the KV cache full (the long ones fill it) the
	// request waits for completions, which come ~1,000× sooner on 1.
	tests := []struct {
		name    string
		kvUsage float64
		want    int
	}{
		{name: "free kv: smaller batch", kvUsage: 0.2, want: 0},
		{name: "full kv: sooner completions", kvUsage: 0.999, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := exactParams()
			rs := fleet("h100", 2, now)
			l := NewLedger(p, 2, 64)
			for i, out := range []int{20000, 20, 20, 20} {
				idx := min(i, 1)
				f := l.Dispatch(idx, &Request{PromptTokens: 1000, MaxTokens: out, Model: "m"}, 1000, now, 0)
				l.FirstToken(f)
			}
			for i := range rs {
				rs[i].KVUsage = tt.kvUsage
				rs[i].WaitingRequests, rs[i].RunningRequests = 0, l.InFlightOn(i)
				rs[i].ScrapedNanos = now + 1
			}
			if l.InFlightOn(0) >= l.InFlightOn(1) {
				t.Fatalf("setup: in flight %d, %d; want fewer on 0", l.InFlightOn(0), l.InFlightOn(1))
			}
			var d Decision
			Pick(&p, &Request{PromptTokens: 1000, Model: "m"}, rs, nil, l, now+2, &d)
			if d.Index != tt.want {
				t.Fatalf("Pick(kv %v) = %d (w0=%v w1=%v), want %d", tt.kvUsage, d.Index, waitOf(&d, 0), waitOf(&d, 1), tt.want)
			}
		})
	}
}

// TestAdapterTolerance: a busy adapter holder loses to an idle loader
// exactly when the queue gap exceeds the load cost; storage-tier loads lose
// to host-tier loads.
func TestAdapterTolerance(t *testing.T) {
	now := 10 * sec
	p := exactParams()
	p.DefaultPromptTokens = 20 // small queued requests: fine steps in W
	var d Decision
	switched := -1
	for q := 0; q < 400; q++ {
		rs := fleet("h100", 2, now)
		rs[0].Adapters = []Adapter{{Name: "fr", Tier: TierGPU, Active: true}}
		rs[0].WaitingRequests = q
		rs[1].Adapters = []Adapter{{Name: "fr", Tier: TierHost}}
		req := Request{PromptTokens: 500, Adapter: "fr", Model: "base"}
		Pick(&p, &req, rs, nil, nil, now, &d)
		gap := waitOf(&d, 0) - waitOf(&d, 1)
		load := rs[1].Hardware.AdapterLoadHostSec
		if math.Abs(gap-load) < 1e-9 {
			continue
		}
		if want := map[bool]int{true: 1, false: 0}[gap > load]; d.Index != want {
			t.Fatalf("Pick(queue gap %v, load %v) = %d, want %d", gap, load, d.Index, want)
		}
		if d.Index == 1 && switched < 0 {
			switched = q
		}
		if d.Index == 0 && q > 0 && d.Reason != ReasonAdapterResident {
			t.Fatalf("Pick(queue %d) reason = %v, want adapter-resident", q, d.Reason)
		}
	}
	if switched <= 0 {
		t.Fatalf("holder never lost to the loader (switch at %d)", switched)
	}

	rs := fleet("h100", 2, now)
	rs[0].Adapters = []Adapter{{Name: "fr", Tier: TierStorage}}
	rs[1].Adapters = []Adapter{{Name: "fr", Tier: TierHost}}
	Pick(&p, &Request{PromptTokens: 500, Adapter: "fr"}, rs, nil, nil, now, &d)
	if d.Index != 1 {
		t.Fatalf("Pick(storage vs host) = %d, want 1 (host tier)", d.Index)
	}
}

// TestAdapterMemory: the ledger's memory of where it sent an adapter
// counts as residency until it expires.
func TestAdapterMemory(t *testing.T) {
	now := 10 * sec
	p := DefaultParams()
	l := NewLedger(p, 2, 8)
	rs := fleet("h100", 2, now)
	req := Request{PromptTokens: 100, Adapter: "de"}
	f := l.Dispatch(1, &req, 100, now, 0)
	l.Done(f, 10)
	rs[0].WaitingRequests = 0
	var d Decision
	Pick(&p, &req, rs, nil, l, now+sec, &d)
	if d.Index != 1 || d.Reason != ReasonAdapterResident && d.Reason != ReasonLeastLoaded {
		t.Fatalf("Pick(remembered on 1) = %d (%v), want 1", d.Index, d.Reason)
	}
	if c, _ := d.Chosen(); c.AdapterSec != 0 {
		t.Fatalf("Pick(remembered).AdapterSec = %v, want 0", c.AdapterSec)
	}
	Pick(&p, &req, rs, nil, l, now+int64(p.AdapterMemory)+sec, &d)
	if c, _ := d.Chosen(); c.AdapterSec == 0 {
		t.Fatalf("Pick(memory expired).AdapterSec = 0, want a load cost")
	}
}

// TestPickEligibility covers drains, health, adapter slots and staleness.
func TestPickEligibility(t *testing.T) {
	now := 100 * sec
	tests := []struct {
		name   string
		setup  func(rs []Replica)
		req    Request
		want   int
		reason Reason
	}{
		{name: "draining cheapest excluded", setup: func(rs []Replica) {
			rs[1].WaitingRequests = 5
			rs[0].Drain = Draining
			rs[0].DrainDeadlineNanos = now + 30*sec
		}, want: 1, reason: ReasonOnlyReplica},
		{name: "drained excluded", setup: func(rs []Replica) {
			rs[1].WaitingRequests = 5
			rs[0].Drain = Drained
		}, want: 1, reason: ReasonOnlyReplica},
		{name: "draining past deadline is drained", setup: func(rs []Replica) {
			rs[0].Drain = Draining
			rs[0].DrainDeadlineNanos = now - sec
		}, want: 1, reason: ReasonOnlyReplica},
		{name: "unhealthy excluded", setup: func(rs []Replica) { rs[0].Healthy = false }, want: 1, reason: ReasonOnlyReplica},
		{name: "all draining", setup: func(rs []Replica) { rs[0].Drain, rs[1].Drain = Draining, Drained }, want: -1, reason: ReasonNoReplica},
		{name: "stale idle not assumed idle", setup: func(rs []Replica) {
			rs[0].ScrapedNanos = now - 10*sec
			rs[1].WaitingRequests = 1
		}, want: 1, reason: ReasonLeastLoaded},
		{name: "never scraped penalised", setup: func(rs []Replica) {
			rs[0].ScrapedNanos = 0
			rs[1].WaitingRequests = 1
		}, want: 1, reason: ReasonLeastLoaded},
		{name: "stale but clearly better wins", setup: func(rs []Replica) {
			rs[0].ScrapedNanos = now - 10*sec
			rs[1].WaitingRequests = 40
		}, want: 0, reason: ReasonLeastLoaded},
		{name: "fresh within bound not penalised", setup: func(rs []Replica) {
			rs[0].ScrapedNanos = now - sec
			rs[1].WaitingRequests = 1
		}, want: 0, reason: ReasonLeastLoaded},
		{name: "adapter slots full and active", setup: func(rs []Replica) {
			rs[0].AdapterSlots = 1
			rs[0].Adapters = []Adapter{{Name: "other", Tier: TierGPU, Active: true}}
			rs[1].WaitingRequests = 9
		}, req: Request{PromptTokens: 10, Adapter: "fr"}, want: 1, reason: ReasonOnlyReplica},
		{name: "adapter slot evictable", setup: func(rs []Replica) {
			rs[0].AdapterSlots = 1
			rs[0].Adapters = []Adapter{{Name: "other", Tier: TierGPU}}
			rs[1].WaitingRequests = 90
		}, req: Request{PromptTokens: 10, Adapter: "fr"}, want: 0, reason: ReasonLeastLoaded},
		{name: "no lora support", setup: func(rs []Replica) { rs[0].AdapterSlots = 0 }, req: Request{PromptTokens: 10, Adapter: "fr"}, want: 1, reason: ReasonOnlyReplica},
		{name: "faster hardware", setup: func(rs []Replica) {
			rs[0].Hardware, _ = LookupHardware("l4")
			rs[1].WaitingRequests = 1
		}, req: Request{PromptTokens: 4000}, want: 1, reason: ReasonFasterHardware},
		{name: "kv full waits", setup: func(rs []Replica) {
			rs[0].KVUsage = 0.999
			rs[0].RunningRequests = 50
			rs[1].RunningRequests = 51
		}, req: Request{PromptTokens: 4000}, want: 1, reason: ReasonLeastLoaded},
		{name: "other model excluded", setup: func(rs []Replica) { rs[1].WaitingRequests = 40 },
			req: Request{ServedBy: []bool{false, true}}, want: 1, reason: ReasonOnlyReplica},
		{name: "past the mask excluded", setup: func(rs []Replica) { rs[0].WaitingRequests = 40 },
			req: Request{ServedBy: []bool{true}}, want: 0, reason: ReasonOnlyReplica},
		{name: "every replica serves", setup: func(rs []Replica) { rs[0].WaitingRequests = 40 },
			req: Request{ServedBy: []bool{true, true}}, want: 1, reason: ReasonLeastLoaded},
		{name: "no replica serves the model", setup: func(rs []Replica) {},
			req: Request{ServedBy: []bool{false, false}}, want: -1, reason: ReasonNoReplica},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := DefaultParams()
			rs := fleet("h100", 2, now)
			tt.setup(rs)
			if tt.req.PromptTokens == 0 {
				tt.req.PromptTokens = 1000
			}
			var d Decision
			Pick(&p, &tt.req, rs, nil, nil, now, &d)
			if d.Index != tt.want || d.Reason != tt.reason {
				t.Fatalf("Pick(%s) = %d (%v), want %d (%v); top %+v", tt.name, d.Index, d.Reason, tt.want, tt.reason, d.Top[:d.NumTop])
			}
		})
	}
}

// TestPickServedByCounts: a replica that does not serve the request's
// model counts as NoModel whatever else holds it back, and the others by
// why they are out; every replica is counted once.
func TestPickServedByCounts(t *testing.T) {
	now := 100 * sec
	rs := fleet("h100", 6, now)
	rs[1].Healthy = false
	rs[2].Healthy = false // and not serving
	rs[3].Drain = Draining
	rs[4].Drain = Drained                                                               // and not serving
	req := Request{PromptTokens: 100, ServedBy: []bool{true, true, false, true, false}} // rs[5] past the end
	p := DefaultParams()
	var d Decision
	Pick(&p, &req, rs, nil, nil, now, &d)
	got := [5]int{d.Eligible, d.NoModel, d.Unhealthy, d.Draining, d.NoAdapterSlot}
	if want := [5]int{1, 3, 1, 1, 0}; got != want || d.Index != 0 {
		t.Errorf("Pick(ServedBy %v) = %d, counts (eligible, no model, unhealthy, draining, no slot) %v; want 0, %v", req.ServedBy, d.Index, got, want)
	}
}

// TestLedgerSpreadsBurst: decisions made on one snapshot do not all land on
// the replica that looked idle when it was taken.
func TestLedgerSpreadsBurst(t *testing.T) {
	now := 100 * sec
	p := DefaultParams()
	rs := fleet("h100", 4, now)
	l := NewLedger(p, 4, 64)
	var d Decision
	var per [4]int
	for i := 0; i < 8; i++ {
		req := Request{PromptTokens: 2000, Chain: []uint64{uint64(i) * 7919}}
		Pick(&p, &req, rs, nil, l, now+int64(i), &d)
		l.Dispatch(d.Index, &req, req.PromptTokens, now+int64(i), d.Top[0].StartNanos)
		per[d.Index]++
	}
	if per != [4]int{2, 2, 2, 2} {
		t.Fatalf("burst of 8 over 4 idle replicas = %v, want 2 each", per)
	}
	// The next scrape reports them: the ledger must not count them twice.
	for i := range rs {
		rs[i].WaitingRequests = 2
		rs[i].ScrapedNanos = now + sec
	}
	Pick(&p, &Request{PromptTokens: 2000}, rs, nil, l, now+sec, &d)
	c, _ := d.Chosen()
	h := rs[0].Hardware
	if want := 2 * (h.PrefillFixedSec + 2000*h.PrefillSecPerToken); math.Abs(c.WaitSec-want) > 1e-9 {
		t.Fatalf("W after scrape = %v, want %v (reported and ledger work counted once)", c.WaitSec, want)
	}
}

// TestPeerWork: a router sees another router's dispatch through PeerWork
// (the snapshot does not show it yet) and so avoids piling on; without it
// both send their request to the replica that looked idle.
func TestPeerWork(t *testing.T) {
	now := 100 * sec
	p := DefaultParams()
	for _, share := range []bool{false, true} {
		rs := fleet("h100", 2, now)
		rs[1].WaitingRequests = 1 // replica 0 looks idle to both routers
		a, b := NewLedger(p, 2, 8), NewLedger(p, 2, 8)
		req := Request{PromptTokens: 4000, Chain: []uint64{42}}
		var d Decision
		Pick(&p, &req, rs, nil, a, now, &d)
		first := d.Index
		a.Dispatch(first, &req, req.PromptTokens, now, d.Top[0].StartNanos)
		for r := range rs {
			rs[r].PeerWork = Work{}
			if share {
				rs[r].PeerWork = a.WorkOn(r, &rs[r].Hardware, rs[r].ScrapedNanos)
			}
		}
		Pick(&p, &req, rs, nil, b, now+1, &d)
		if got := d.Index != first; got != share {
			t.Fatalf("Pick(second router, share=%v) = %d after the first picked %d; want a different replica exactly when sharing", share, d.Index, first)
		}
	}
}

// TestTieBreakRendezvous: identical replicas split prefixes by rendezvous
// hashing, the same way on every call, and a prefix keeps its home when
// another replica leaves.
func TestTieBreakRendezvous(t *testing.T) {
	now := 100 * sec
	p := DefaultParams()
	rs := fleet("h100", 8, now)
	var d Decision
	homes := make(map[int]int)
	for key := uint64(1); key <= 400; key++ {
		req := Request{PromptTokens: 100, Chain: []uint64{key * 0x9e3779b97f4a7c15}}
		Pick(&p, &req, rs, nil, nil, now, &d)
		if d.Reason != ReasonTieBreak {
			t.Fatalf("Pick(identical replicas).Reason = %v, want tie-break", d.Reason)
		}
		first := d.Index
		Pick(&p, &req, rs, nil, nil, now, &d)
		if d.Index != first {
			t.Fatalf("Pick(same input) = %d then %d, want equal", first, d.Index)
		}
		homes[first]++
		// Removing a different replica (unhealthy) keeps the home.
		other := (first + 1) % len(rs)
		rs[other].Healthy = false
		Pick(&p, &req, rs, nil, nil, now, &d)
		rs[other].Healthy = true
		if d.Index != first {
			t.Fatalf("Pick(without replica %d) = %d, want home %d", other, d.Index, first)
		}
	}
	for i := range rs {
		if homes[i] < 20 {
			t.Fatalf("rendezvous homes = %v, want every replica to get ≥ 20 of 400", homes)
		}
	}
}

func TestRemainingOutputEstimate(t *testing.T) {
	p := DefaultParams()
	l := NewLedger(p, 1, 8)
	tests := []struct {
		name     string
		maxTok   int
		learned  []int
		streamed int
		want     int64
	}{
		{name: "default", want: int64(p.DefaultOutputTokens)},
		{name: "max_tokens bound", maxTok: 50, want: 50},
		{name: "learned lower", maxTok: 500, learned: []int{100, 100}, want: 100},
		{name: "learned higher keeps bound", maxTok: 50, learned: []int{100}, want: 50},
		{name: "decays while streaming", maxTok: 500, learned: []int{100}, streamed: 40, want: 60},
		{name: "outlived estimate", maxTok: 500, learned: []int{100}, streamed: 300, want: 150},
		{name: "outlived near bound", maxTok: 320, learned: []int{100}, streamed: 300, want: 20},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			model := "m" + strconv.Itoa(i)
			for _, x := range tt.learned {
				f := l.Dispatch(0, &Request{Model: model}, 1, 0, 0)
				l.Done(f, x)
			}
			req := Request{Model: model, MaxTokens: tt.maxTok, PromptTokens: 10}
			f := l.Dispatch(0, &req, 10, 0, 0)
			l.Progress(f, tt.streamed)
			if tt.streamed == 0 {
				l.FirstToken(f)
			}
			if got := l.work.reps[0].DecodeTokens; got != tt.want {
				t.Fatalf("remaining(max %d, learned %v, streamed %d) = %d, want %d", tt.maxTok, tt.learned, tt.streamed, got, tt.want)
			}
			l.Cancel(f)
			if r := l.work.reps[0]; r.DecodeTokens != 0 || r.DecodeN != 0 || r.QueuedN != 0 || r.QueuedTokens != 0 {
				t.Fatalf("after Cancel replica accounting = %+v, want zero", r)
			}
		})
	}
}

func TestParamsValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Params)
		want   string
	}{
		{name: "default ok", mutate: func(*Params) {}},
		{name: "stale after", mutate: func(p *Params) { p.StaleAfter = -time.Second }, want: "scoring: stale_after must be > 0, got -1s"},
		{name: "nan penalty", mutate: func(p *Params) { p.StalePenaltySec = math.NaN() }, want: "scoring: stale_penalty_sec must be in [0, 3600], got NaN"},
		{name: "tie", mutate: func(p *Params) { p.TieEpsilonSec = -1 }, want: "scoring: tie_epsilon_sec must be in [0, 10], got -1"},
		{name: "home blocks", mutate: func(p *Params) { p.HomeBlocks = 0 }, want: "scoring: home_blocks must be >= 1, got 0"},
		{name: "adapter memory", mutate: func(p *Params) { p.AdapterMemory = -1 }, want: "scoring: adapter_memory must be >= 0, got -1ns"},
		{name: "chunk zero", mutate: func(p *Params) { p.PrefillChunkTokens = 0 }, want: "scoring: prefill_chunk_tokens must be in [1, 16777216], got 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := DefaultParams()
			tt.mutate(&p)
			err := p.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Fatalf("Validate() = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestWaitModel pins W(r) under continuous batching for one replica with
// 100 decoding requests of 500 remaining tokens each (ledger-exact), a 2,000
// token prompt and nothing queued: the batch costs half a step plus its
// per-sequence share of the one prefill step; a full KV cache or a full
// batch adds a wait for completions, the longer of the two, never both.
func TestWaitModel(t *testing.T) {
	now := 10 * sec
	h := DefaultHardware()
	const batch, remaining, n = 100, 500, 2000
	step := h.DecodeStepSeconds(batch)
	base := step/2 + 1*batch*h.DecodeStepSecPerSeq // ceil(2000 / (8192 − 100)) = 1 step
	kvWait := step * remaining
	// 100 running + this one over a limit of 91: 10 completions, one every
	// 2·500/100 steps.
	batchWait := step * 10 * 2 * remaining / batch
	tests := []struct {
		name      string
		kvUsage   float64
		maxBatch  int
		maxTokens int // the request's max_tokens (0: the default output estimate, 256)
		want      float64
	}{
		{name: "free kv, no batch limit", kvUsage: 0.5, want: base},
		{name: "batch below limit", kvUsage: 0.5, maxBatch: 256, want: base},
		{name: "full kv", kvUsage: 0.999, want: base + kvWait},
		// 380k used + 2k prompt fit in 400k, but not with the 100 × 256
		// tokens the batch generates while this request generates its
		// 256: the engine would preempt it.
		{name: "kv outgrown while it runs", kvUsage: 0.95, want: base + kvWait},
		// A 10-token answer ends before the batch grows by 1k tokens.
		{name: "short answer fits", kvUsage: 0.95, maxTokens: 10, want: base},
		// At 352k used, 256 more tokens a sequence fit; a 1,000-token
		// answer outlives the batch's 500 remaining each, and 50k do not.
		{name: "default answer fits", kvUsage: 0.88, want: base},
		{name: "long answer", kvUsage: 0.88, maxTokens: 1000, want: base + kvWait},
		{name: "full batch", kvUsage: 0.5, maxBatch: 91, want: base + batchWait},
		{name: "full kv and batch", kvUsage: 0.999, maxBatch: 91, want: base + max(kvWait, batchWait)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := exactParams()
			rs := fleet("h100", 1, now)
			rs[0].KVUsage, rs[0].MaxBatchSeqs, rs[0].RunningRequests = tt.kvUsage, tt.maxBatch, batch
			rs[0].PeerWork = Work{DecodeN: batch, DecodeTokens: batch * remaining}
			var d Decision
			Pick(&p, &Request{PromptTokens: n, MaxTokens: tt.maxTokens}, rs, nil, nil, now, &d)
			if got := waitOf(&d, 0); math.Abs(got-tt.want) > 1e-9 {
				t.Fatalf("W(kv %v, max batch %d) = %v, want %v", tt.kvUsage, tt.maxBatch, got, tt.want)
			}
		})
	}
}

// TestWarmBatchKeepsAffinity: the case the fleet simulator found. A warm
// replica decoding a large batch of long outputs still wins a long shared
// prefix over an idle cold one: its decodes only slow the prefill's steps
// (milliseconds), while the cold replica must prefill 6,000 more tokens.
// Counting the batch's 100,000 remaining tokens as queued work (6 s on an
// H100) would send the request away and lose the hit. Unless they will not
// fit: with the KV cache 80% full, the batch's remaining tokens overflow it
// and the engine would preempt the newest request, so the cold one wins.
func TestWarmBatchKeepsAffinity(t *testing.T) {
	tests := []struct {
		name    string
		kvUsage float64
		want    int
		reason  Reason
	}{
		{name: "room for the batch to finish", kvUsage: 0.6, want: 0, reason: ReasonPrefixAffinity},
		{name: "batch outgrows the cache", kvUsage: 0.8, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := 10 * sec
			p := DefaultParams()
			rs := fleet("h100", 2, now)
			rs[0].RunningRequests = 100
			rs[0].PeerWork = Work{DecodeN: 100, DecodeTokens: 100 * 1000}
			rs[0].KVUsage = tt.kvUsage
			var d Decision
			Pick(&p, &Request{PromptTokens: 7200, MaxTokens: 1000}, rs, []int{6000, 0}, nil, now, &d)
			if d.Index != tt.want || (tt.want == 0 && d.Reason != tt.reason) {
				t.Fatalf("Pick(warm busy at kv %v, cold idle) = %d (%v), want %d", tt.kvUsage, d.Index, d.Reason, tt.want)
			}
		})
	}
}

// TestExternality: when the warm replica's queue is a little longer than
// the prefill its cache saves, the greedy rule goes cold; when requests
// keep arriving at the cold replica, the extra prefill there delays them
// all, and Pick stays warm. With no arrivals the two rules agree.
func TestExternality(t *testing.T) {
	now := 100 * sec
	p := exactParams()
	rs := fleet("h100", 2, now)
	h := &rs[0].Hardware
	const n, k = 6000, 5900
	saving := h.PrefillSeconds(n) - h.PrefillSeconds(n-k)
	// A (warm) has queued prefill worth a bit more than the saving.
	queued := int64((saving*1.2 - h.PrefillFixedSec) / h.PrefillSecPerToken)
	rs[0].PeerWork = Work{QueuedN: 1, QueuedTokens: queued}
	cached := []int{k, 0}
	req := Request{PromptTokens: n, Chain: []uint64{7}}
	tests := []struct {
		name    string
		rate    float64 // arrivals per second at each replica
		want    int
		extZero bool
	}{
		{name: "idle fleet: greedy cold", rate: 0, want: 1, extZero: true},
		{name: "busy fleet: stay warm", rate: 2, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLedger(p, len(rs), 4)
			l.SetPeerRate(2 * tt.rate) // the other routers' rate to the fleet
			var d Decision
			Pick(&p, &req, rs, cached, l, now, &d)
			if d.Index != tt.want {
				t.Fatalf("Pick(rate %v) = %d, want %d; top %+v", tt.rate, d.Index, tt.want, d.Top[:d.NumTop])
			}
			// The fleet's prefill utilization ρ: each replica's λ times
			// its prefill of a mean prompt.
			busy := busyFactor(tt.rate * h.PrefillSeconds(p.DefaultPromptTokens))
			for _, c := range d.Top[:d.NumTop] {
				want := tt.rate * c.TotalSec() * busy * (c.AdapterSec + c.PrefillSec)
				if math.Abs(c.ExternalSec-want) > 1e-12 || (tt.extZero && c.ExternalSec != 0) {
					t.Errorf("replica %d ExternalSec = %v, want λ·ETTFT/(1−ρ)·(A+P) = %v", c.Index, c.ExternalSec, want)
				}
			}
		})
	}
	p.ExternalityWeight = 0
	var d Decision
	Pick(&p, &req, rs, cached, nil, now, &d)
	if d.Index != 1 {
		t.Errorf("Pick(busy fleet, externality_weight 0) = %d, want the greedy cold choice 1", d.Index)
	}
}

// TestRate: a steady stream of λ events per second reads about λ, and the
// rate decays once the events stop.
func TestRate(t *testing.T) {
	var r Rate
	const window = 10.0
	for i := range 600 { // 5 per second for 120 s
		r.Add(int64(i)*sec/5, window)
	}
	end := int64(599) * sec / 5
	if got := r.At(end, window); math.Abs(got-5) > 0.3 {
		t.Errorf("Rate after 120 s at 5/s = %v, want about 5", got)
	}
	if got, want := r.At(end+10*sec, window), r.At(end, window)/math.E; math.Abs(got-want) > 1e-9 {
		t.Errorf("Rate 10 s (one window) after the last event = %v, want %v", got, want)
	}
	var zero Rate
	if zero.At(end, window) != 0 {
		t.Errorf("zero Rate reads %v, want 0", zero.At(end, window))
	}
}

// TestAdapterSlotsBusyQueues: when every open replica's adapter slots hold
// adapters with running requests, the request is not refused: it waits on
// the replica whose batch frees a slot soonest.
func TestAdapterSlotsBusyQueues(t *testing.T) {
	now := 100 * sec
	p := exactParams()
	rs := fleet("h100", 2, now)
	for i := range rs {
		rs[i].AdapterSlots = 1
		rs[i].Adapters = []Adapter{{Name: "busy-" + strconv.Itoa(i), Tier: TierGPU, Active: true}}
		rs[i].RunningRequests = 4
	}
	rs[0].PeerWork = Work{DecodeN: 4, DecodeTokens: 4 * 2000} // long generations
	rs[1].PeerWork = Work{DecodeN: 4, DecodeTokens: 4 * 50}   // nearly done
	req := Request{PromptTokens: 500, Adapter: "new"}
	var d Decision
	Pick(&p, &req, rs, nil, nil, now, &d)
	if d.Index != 1 {
		t.Fatalf("Pick(all slots busy) = %d, want 1 (its batch frees a slot first); top %+v", d.Index, d.Top[:d.NumTop])
	}
	if c, _ := d.Chosen(); c.AdapterSec <= rs[1].Hardware.AdapterLoadStorageSec {
		t.Errorf("A with a slot wait = %v, want the storage load plus the wait for a slot", c.AdapterSec)
	}
	rs[1].AdapterSlots = 0 // serves no adapters at all: never chosen
	Pick(&p, &req, rs, nil, nil, now, &d)
	if d.Index != 0 {
		t.Errorf("Pick(replica 1 serves no adapters) = %d, want 0", d.Index)
	}
}

// TestAdapterSlotQueue: with every slot busy everywhere, a replica whose
// queue already holds other adapters waiting for a slot makes the request
// wait for one more slot per such adapter, so a burst of new adapters
// spreads instead of piling behind one replica (the engine admits them in
// order as slots free).
func TestAdapterSlotQueue(t *testing.T) {
	now := 100 * sec
	p := exactParams()
	waitingOn := func(n int) []Adapter {
		as := []Adapter{{Name: "busy", Tier: TierGPU, Active: true}}
		for i := range n {
			as = append(as, Adapter{Name: "queued-" + strconv.Itoa(i), Tier: TierStorage, Active: true})
		}
		return as
	}
	tests := []struct {
		name    string
		waiting [2]int // other adapters waiting for a slot on replicas 0 and 1
		self    bool   // the request's own adapter is among replica 0's waiting ones
		want    int
	}{
		{name: "none waiting: the sooner batch", waiting: [2]int{0, 0}, want: 0},
		{name: "two waiting ahead on the sooner batch", waiting: [2]int{2, 0}, want: 1},
		{name: "its own adapter waiting does not count", waiting: [2]int{0, 0}, self: true, want: 0},
	}
	for _, tt := range tests {
		rs := fleet("h100", 2, now)
		for i := range rs {
			rs[i].AdapterSlots = 1
			rs[i].Adapters = waitingOn(tt.waiting[i])
			rs[i].RunningRequests = 4
		}
		if tt.self {
			rs[0].Adapters = append(rs[0].Adapters, Adapter{Name: "new", Tier: TierStorage, Active: true})
		}
		rs[0].PeerWork = Work{DecodeN: 4, DecodeTokens: 4 * 100}
		rs[1].PeerWork = Work{DecodeN: 4, DecodeTokens: 4 * 150}
		req := Request{PromptTokens: 500, Adapter: "new"}
		var d Decision
		Pick(&p, &req, rs, nil, nil, now, &d)
		if d.Index != tt.want {
			t.Errorf("%s: Pick = %d, want %d; top %+v", tt.name, d.Index, tt.want, d.Top[:d.NumTop])
		}
	}
}

// TestAdapterRememberedTiers: an adapter this router sent to a replica
// counts as GPU-resident for AdapterMemory, then as held in host memory for
// AdapterHostMemory, then as not there at all.
func TestAdapterRememberedTiers(t *testing.T) {
	p := exactParams()
	rs := fleet("h100", 1, 0)
	h := &rs[0].Hardware
	l := NewLedger(p, 1, 8)
	req := Request{PromptTokens: 100, Adapter: "sql"}
	l.Cancel(l.Dispatch(0, &req, 100, 0, 0))
	tests := []struct {
		name  string
		after time.Duration
		want  float64
	}{
		{"gpu", p.AdapterMemory / 2, 0},
		{"host", p.AdapterMemory + p.AdapterHostMemory/2, h.AdapterLoadHostSec},
		{"storage", p.AdapterMemory + p.AdapterHostMemory + time.Second, h.AdapterLoadStorageSec},
	}
	for _, tt := range tests {
		now := int64(tt.after)
		rs[0].ScrapedNanos = now
		var d Decision
		Pick(&p, &req, rs, nil, l, now, &d)
		if c, ok := d.Chosen(); !ok || c.AdapterSec != tt.want {
			t.Errorf("%s: A %v after the dispatch = %v, want %v", tt.name, tt.after, c.AdapterSec, tt.want)
		}
	}
}

// TestAdapterFreshDispatchesFillSlots: adapters this router sent to a
// replica after its snapshot hold or wait for its slots although the
// snapshot (which lists adapters with requests) shows them free, so a new
// adapter goes where a slot really is free, even past a shorter reported
// queue. Adapters the snapshot already lists, and repeats of one adapter,
// are counted once.
func TestAdapterFreshDispatchesFillSlots(t *testing.T) {
	snap := 100 * sec
	now := snap + sec/100 // 10 ms after the scrape
	tests := []struct {
		name   string
		sent0  []string // adapters sent to replica 0 after the scrape
		listed []string // adapters replica 0's snapshot lists as running
		want   int
	}{
		{name: "nothing sent: the shorter queue", want: 0},
		{name: "one slot left", sent0: []string{"a1"}, want: 0},
		{name: "both slots taken since the scrape", sent0: []string{"a1", "a2"}, want: 1},
		{name: "one adapter sent twice", sent0: []string{"a1", "a1"}, want: 0},
		{name: "sent and already listed", sent0: []string{"a1", "a2"}, listed: []string{"a1", "a2"}, want: 1},
		{name: "listed only: counted once", sent0: []string{"a1"}, listed: []string{"a1"}, want: 0},
	}
	for _, tt := range tests {
		p := exactParams()
		rs := fleet("h100", 2, snap)
		for i := range rs {
			rs[i].AdapterSlots = 2
		}
		for _, name := range tt.listed {
			rs[0].Adapters = append(rs[0].Adapters, Adapter{Name: name, Tier: TierGPU, Active: true})
		}
		rs[0].RunningRequests = len(tt.listed)
		// Replica 1 reports more queued work than replica 0 will carry,
		// and as many requests sent to it (one adapter, one slot).
		rs[1].WaitingRequests = 6
		l := NewLedger(p, 2, 64)
		for _, name := range tt.sent0 {
			l.Dispatch(0, &Request{PromptTokens: 100, Adapter: name}, 100, snap+1, 0)
			l.Dispatch(1, &Request{PromptTokens: 100, Adapter: "b"}, 100, snap+1, 0)
		}
		req := Request{PromptTokens: 100, Adapter: "new"}
		var d Decision
		Pick(&p, &req, rs, nil, l, now, &d)
		if d.Index != tt.want {
			t.Errorf("%s: Pick = %d, want %d; top %+v", tt.name, d.Index, tt.want, d.Top[:d.NumTop])
		}
	}
}

// TestAdapterPendingLoads: the loads of other adapters sent to a replica
// that have not started (listed waiting for a slot, or sent after the
// snapshot and not listed) are counted at their tier's load time, since
// each runs inside an engine step that stalls the replica; a started one
// (listed running), one that was GPU-resident when sent again, and the
// request's own adapter are not.
func TestAdapterPendingLoads(t *testing.T) {
	snap := 100 * sec
	now := snap + sec/100
	p := exactParams()
	hw, _ := LookupHardware("h100")
	type send struct {
		name   string
		at     int64
		listed AdapterTier // tier the snapshot lists it with; 0xff: not listed
	}
	const unlisted = AdapterTier(0xff)
	tests := []struct {
		name  string
		sends []send
		want  float64
	}{
		{name: "nothing sent", want: 0},
		{name: "two waiting for a slot", sends: []send{{"a1", snap - sec, TierStorage}, {"a2", snap - sec, TierStorage}},
			want: 2 * hw.AdapterLoadStorageSec},
		{name: "listed running: started", sends: []send{{"a1", snap - sec, TierGPU}}, want: 0},
		{name: "sent after the scrape", sends: []send{{"a1", snap + 1, unlisted}}, want: hw.AdapterLoadStorageSec},
		{name: "resident when sent again", sends: []send{{"a1", snap - 10*sec, unlisted}, {"a1", snap + 1, unlisted}}, want: 0},
		{name: "host-cached when sent again", sends: []send{{"a1", snap - 70*sec, unlisted}, {"a1", snap + 1, unlisted}},
			want: hw.AdapterLoadHostSec},
		{name: "own adapter waiting", sends: []send{{"new", snap - sec, TierStorage}}, want: 0},
	}
	for _, tt := range tests {
		rs := fleet("h100", 2, snap)
		l := NewLedger(p, 2, 64)
		for _, s := range tt.sends {
			l.Cancel(l.Dispatch(0, &Request{PromptTokens: 100, Adapter: s.name}, 100, s.at, 0))
			if s.listed != unlisted && s.at < snap {
				rs[0].Adapters = append(rs[0].Adapters, Adapter{Name: s.name, Tier: s.listed, Active: true})
			}
		}
		var v adapterView
		l.markAdapter(&v, prefix.HashString("new"), rs, now)
		if got := v.pendingOn(0); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("%s: pendingOn(0) = %v, want %v", tt.name, got, tt.want)
		}
		if tt.want == 0 {
			continue
		}
		// The same load in W: replica 0's pending loads send a request
		// for an adapter resident nowhere to idle replica 1.
		req := Request{PromptTokens: 100, Adapter: "new"}
		var d Decision
		Pick(&p, &req, rs, nil, l, now, &d)
		if d.Index != 1 {
			t.Errorf("%s: Pick = %d, want 1 (replica 0 stalls on loads); top %+v", tt.name, d.Index, d.Top[:d.NumTop])
		}
	}
}

// TestAdapterDisplacementCost: a load that takes a slot or a host-cache
// entry from an adapter this router placed there costs that adapter's next
// request the reload, which stalls the replica's requests too, so the
// externality counts the reload once per request on the replica plus one:
// from host memory for a GPU slot, from storage (less the host load it
// would have paid) for a host-cache entry.
// TestAdapterDisplacementCost checks the price of sharing a full cache:
// with one other adapter sent once, as recently as this one, the two are
// equally likely to be the one cached (Che: e^(−λT) = 1/2 each), so this
// request costs the other half a reload, times the requests it stalls,
// times the requests of the new adapter expected to follow it there: this
// one and, for an adapter the router has not seen, as many as the
// remembered placements average (one).
func TestAdapterDisplacementCost(t *testing.T) {
	snap := 100 * sec
	now := snap + sec/100
	p := exactParams()
	const running = 3
	tests := []struct {
		name             string
		slots, hostSlots int
		want             func(h *Hardware) float64
	}{
		{name: "room everywhere", slots: 4, hostSlots: 8, want: func(*Hardware) float64 { return 0 }},
		{name: "gpu slot taken", slots: 1, hostSlots: 8,
			want: func(h *Hardware) float64 { return 0.5 * h.AdapterLoadHostSec * (1 + running) * 2 }},
		{name: "host cache full", slots: 4, hostSlots: 1,
			want: func(h *Hardware) float64 {
				return 0.5 * (h.AdapterLoadStorageSec - h.AdapterLoadHostSec) * (1 + running) * 2
			}},
	}
	ext := func(slots, hostSlots int) (float64, *Hardware) {
		rs := fleet("h100", 1, snap)
		rs[0].AdapterSlots, rs[0].AdapterHostSlots = slots, hostSlots
		rs[0].RunningRequests = running
		l := NewLedger(p, 1, 8)
		// Idle since (not listed), sent at the snapshot: not fresh, so
		// its slot is free to take.
		l.Cancel(l.Dispatch(0, &Request{PromptTokens: 100, Adapter: "old"}, 100, snap, 0))
		var d Decision
		Pick(&p, &Request{PromptTokens: 100, Adapter: "new"}, rs, nil, l, now, &d)
		c, ok := d.Chosen()
		if !ok {
			t.Fatalf("Pick(slots %d, host %d) chose nothing", slots, hostSlots)
		}
		return c.ExternalSec, &rs[0].Hardware
	}
	base, _ := ext(4, 8)
	for _, tt := range tests {
		got, h := ext(tt.slots, tt.hostSlots)
		// The old adapter's rate has decayed for 10 ms of a 60 s window.
		if want := tt.want(h); math.Abs(got-base-want) > 1e-3*want+1e-12 {
			t.Errorf("%s: ExternalSec − ExternalSec(room) = %v, want %v", tt.name, got-base, want)
		}
	}
}

// TestReloadCostByRates checks that displacement is priced by how soon the
// displaced adapters come back, not by whether the caches are full: two
// replicas whose host caches (2 slots) both hold 3 adapters, one with a
// popular adapter and two rare ones, the other with three of equal rates.
// A new adapter on the first mostly competes with the rare ones, which
// the popular one already pushes out; on the second it pushes out adapters
// that come back as often as each other. (A count of adapters against the
// slots priced both the same.)
func TestReloadCostByRates(t *testing.T) {
	snap := 100 * sec
	now := snap + sec/100
	p := exactParams()
	rs := fleet("h100", 2, snap)
	l := NewLedger(p, 2, 64)
	send := func(replica int, adapter string, times int) {
		for k := range times {
			at := snap - int64(times-k)*sec/2
			l.Cancel(l.Dispatch(replica, &Request{PromptTokens: 100, Adapter: adapter}, 100, at, 0))
		}
	}
	send(0, "hot", 30)
	send(0, "rare-a", 1)
	send(0, "rare-b", 1)
	send(1, "even-a", 10)
	send(1, "even-b", 10)
	send(1, "even-c", 10)
	for i := range rs {
		rs[i].AdapterSlots, rs[i].AdapterHostSlots = 4, 2
	}
	var d Decision
	Pick(&p, &Request{PromptTokens: 100, Adapter: "new"}, rs, nil, l, now, &d)
	ext := [2]float64{}
	for i := 0; i < d.NumTop; i++ {
		ext[d.Top[i].Index] = d.Top[i].ExternalSec
	}
	if !(ext[0] < ext[1]) {
		t.Errorf("ExternalSec(popular and rare) = %v, ExternalSec(even) = %v, want the first lower", ext[0], ext[1])
	}
	if d.Index != 0 {
		t.Errorf("Pick(new adapter) = replica %d, want 0 (its cache keeps the others)", d.Index)
	}
	// The rates are scratch the ledger keeps: no allocation per decision.
	req := Request{PromptTokens: 100, Adapter: "new"}
	if n := testing.AllocsPerRun(100, func() { Pick(&p, &req, rs, nil, l, now, &d) }); n != 0 {
		t.Errorf("Pick(adapter) allocates %v times per run, want 0", n)
	}
}

// TestCheSolveMisses checks Che's approximation on cases with closed forms.
func TestCheSolveMisses(t *testing.T) {
	tests := []struct {
		name  string
		rates []float64
		extra float64
		slots int
		want  float64
	}{
		{name: "fits", rates: []float64{1, 2, 3}, slots: 3, want: 0},
		{name: "fits with extra", rates: []float64{1, 2}, extra: 5, slots: 3, want: 0},
		{name: "zero rates absent", rates: []float64{0, 1, 0}, extra: 1, slots: 2, want: 0},
		{name: "no slots", rates: []float64{1, 1}, slots: 0, want: 0},
		// Two equal items, one slot: e^(−λT) = 1/2 each.
		{name: "two equal one slot", rates: []float64{2}, extra: 2, slots: 1, want: 1},
		// n equal items, n−1 slots: each misses with probability 1/n.
		{name: "four equal three slots", rates: []float64{1, 1, 1}, extra: 1, slots: 3, want: 0.75},
		// Scaling the rates scales the misses.
		{name: "scaled", rates: []float64{10, 10, 10}, extra: 10, slots: 3, want: 7.5},
	}
	for _, tt := range tests {
		if got, _, _ := cheSolve(tt.rates, tt.extra, tt.slots, 0); math.Abs(got-tt.want) > 1e-6 {
			t.Errorf("%s: cheSolve(%v, %v, %d) misses = %v, want %v", tt.name, tt.rates, tt.extra, tt.slots, got, tt.want)
		}
	}
}

// TestCheSolveOwn checks the extra item's own miss rate on cases with
// closed forms.
func TestCheSolveOwn(t *testing.T) {
	tests := []struct {
		name  string
		rates []float64
		extra float64
		slots int
		want  float64
	}{
		{name: "fits", rates: []float64{1, 2}, extra: 5, slots: 3, want: 0},
		{name: "no extra", rates: []float64{1, 1, 1}, slots: 2, want: 0},
		// Two equal items, one slot: each misses half its requests.
		{name: "two equal one slot", rates: []float64{2}, extra: 2, slots: 1, want: 1},
		// n equal items, n−1 slots: each misses with probability 1/n.
		{name: "four equal three slots", rates: []float64{1, 1, 1}, extra: 1, slots: 3, want: 0.25},
	}
	for _, tt := range tests {
		if _, got, _ := cheSolve(tt.rates, tt.extra, tt.slots, 0); math.Abs(got-tt.want) > 1e-6 {
			t.Errorf("%s: cheSolve(%v, %v, %d) own = %v, want %v", tt.name, tt.rates, tt.extra, tt.slots, got, tt.want)
		}
	}
}

// TestAdapterOwnReloads checks that a send is priced by the misses it
// adds to the adapter's own later requests: adapter "a" is sent often to
// replica 0 and was sent once, 70 s ago, to replica 1, whose 4 host slots
// hold one busy adapter and four rare ones. Replica 0 has a queue, so
// replica 1 (a host load away) looks sooner for this request alone, and
// the misses the send causes the others there (a displaces rare adapters
// that seldom come back) do not outweigh the queue; but the share of a's
// stream sent there would itself miss the host cache nearly every time
// and reload from storage, where on replica 0 a stays cached.
func TestAdapterOwnReloads(t *testing.T) {
	snap := 100 * sec
	now := snap + sec/100
	p := exactParams()
	rs := fleet("h100", 2, snap)
	for i := range rs {
		rs[i].AdapterSlots, rs[i].AdapterHostSlots = 4, 4
	}
	l := NewLedger(p, 2, 64)
	send := func(replica int, adapter string, times int, before int64) {
		for k := range times {
			at := snap - before - int64(times-k)*sec/2
			l.Cancel(l.Dispatch(replica, &Request{PromptTokens: 100, Adapter: adapter}, 100, at, 0))
		}
	}
	// Replica 1 first saw a 70 s ago: past the GPU memory, host-cached.
	send(1, "a", 1, 70*sec)
	send(0, "a", 30, 0)
	send(1, "b", 30, 0)
	for _, rare := range []string{"c", "d", "e", "f"} {
		send(1, rare, 1, 0)
	}
	rs[0].WaitingRequests = 17
	req := Request{PromptTokens: 100, Adapter: "a"}
	var d Decision
	Pick(&p, &req, rs, nil, l, now, &d)
	var c [2]Candidate
	for i := 0; i < d.NumTop; i++ {
		c[d.Top[i].Index] = d.Top[i]
	}
	if d.Index != 0 {
		t.Errorf("Pick(a, home 0 queued, rare on crowded 1) = replica %d (costs %v, %v), want 0",
			d.Index, c[0].CostSec(), c[1].CostSec())
	}
	if n := testing.AllocsPerRun(100, func() { Pick(&p, &req, rs, nil, l, now, &d) }); n != 0 {
		t.Errorf("Pick(adapter) allocates %v times per run, want 0", n)
	}
}

// TestCheSolveWarmStart: wherever Newton starts (below, at or above the
// root), the solve ends at the same characteristic time and miss rates.
func TestCheSolveWarmStart(t *testing.T) {
	rates := []float64{0.5, 0.3, 0.2, 0.1, 0.05, 0.05, 0.02, 0.02, 0.01}
	for _, slots := range []int{2, 4, 8} {
		miss, own, root := cheSolve(rates, 0.04, slots, 0)
		for _, from := range []float64{root / 10, root / 2, root, 2 * root, 10 * root} {
			m, o, got := cheSolve(rates, 0.04, slots, from)
			if math.Abs(got-root) > 1e-6*root || math.Abs(m-miss) > 1e-9 || math.Abs(o-own) > 1e-9 {
				t.Errorf("slots %d from %.3f: T, misses, own = %v, %v, %v; want %v, %v, %v", slots, from, got, m, o, root, miss, own)
			}
		}
	}
}

// TestAdapterPlacementStream: a load from storage makes the replica the
// adapter's home, and its later requests follow it there (they find it
// resident), so the reloads its share of a full host cache causes recur for
// every one of them, not only this request. The displacement is priced for
// the requests the adapter is expected to send within AdapterMemory (an
// unseen adapter: the mean of the remembered placements), against the
// one-time stall of loading it on a busy replica with room. Priced for one
// request, a rare adapter went to the idle replica with a full host cache
// and thrashed it (lora seed 3: 15 storage reloads after the first load of
// each adapter, always-warm none).
func TestAdapterPlacementStream(t *testing.T) {
	for _, tc := range []struct {
		name       string
		sends      int // sends of each remembered adapter in the last seconds
		adapter    string
		adapterSet int // sends of the request's adapter (to replica 2, closed)
		want       int
	}{
		{name: "one-off adapters: the stall decides", sends: 1, adapter: "new", want: 0},
		{name: "frequent adapters, unseen one: the recurring reloads decide", sends: 20, adapter: "new", want: 1},
		{name: "seen adapter that sends often", sends: 1, adapter: "x", adapterSet: 20, want: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := 100 * sec
			now := snap + sec/100
			p := exactParams()
			rs := fleet("h100", 3, snap)
			for i := range rs {
				rs[i].AdapterSlots, rs[i].AdapterHostSlots = 1, 2
			}
			rs[2].Healthy = false // where the seen adapter was, now gone
			l := NewLedger(p, 3, 64)
			send := func(replica int, adapter string, times int) {
				for k := range times {
					at := snap - int64(times-k)*sec/4
					l.Cancel(l.Dispatch(replica, &Request{PromptTokens: 100, Adapter: adapter}, 100, at, 0))
				}
			}
			send(0, "a", tc.sends) // replica 0: idle, host cache full
			send(0, "b", tc.sends)
			send(1, "c", tc.sends) // replica 1: busy, a free host slot
			send(2, tc.adapter, tc.adapterSet)
			rs[1].RunningRequests = 4
			req := Request{PromptTokens: 100, Adapter: tc.adapter}
			var d Decision
			Pick(&p, &req, rs, nil, l, now, &d)
			var c [3]Candidate
			for i := 0; i < d.NumTop; i++ {
				c[d.Top[i].Index] = d.Top[i]
			}
			if d.Index != tc.want {
				t.Errorf("Pick(%s, %d sends each) = replica %d (costs %.3f, %.3f; x %.3f, %.3f), want %d",
					tc.adapter, tc.sends, d.Index, c[0].CostSec(), c[1].CostSec(), c[0].ExternalSec, c[1].ExternalSec, tc.want)
			}
			if n := testing.AllocsPerRun(100, func() { Pick(&p, &req, rs, nil, l, now, &d) }); n != 0 {
				t.Errorf("Pick(adapter) allocates %v times per run, want 0", n)
			}
		})
	}
}

// TestExternalityByCapacity: the externality counts the fleet's arrivals
// shared among the open replicas by prefill capacity (1/P of a mean
// prompt): on one hardware class every replica gets the mean, on a mixed
// fleet the faster GPU gets more and the slower one less, so a placement on
// the slower one is not priced as if the faster one's traffic waited there.
func TestExternalityByCapacity(t *testing.T) {
	for _, tc := range []struct {
		name string
		hw   []string
	}{
		{name: "one class", hw: []string{"h100", "h100", "h100"}},
		{name: "mixed", hw: []string{"h100", "a100", "l4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultParams()
			now := 100 * sec
			rs := fleet("h100", len(tc.hw), now)
			const arrivals = 6.0 // per second, fleet-wide, reported by peers
			for i, name := range tc.hw {
				rs[i].Hardware, _ = LookupHardware(name)
			}
			l := NewLedger(p, len(rs), 4)
			l.SetPeerRate(arrivals)
			m := p.DefaultPromptTokens
			capacity := 0.0
			for i := range rs {
				capacity += 1 / rs[i].Hardware.PrefillSeconds(m)
			}
			var d Decision
			Pick(&p, &Request{PromptTokens: 2000}, rs, nil, l, now, &d)
			for k := 0; k < d.NumTop; k++ {
				c := &d.Top[k]
				share := arrivals / capacity / rs[c.Index].Hardware.PrefillSeconds(m)
				if tc.name == "one class" && math.Abs(share-arrivals/float64(len(rs))) > 1e-9 {
					t.Fatalf("share of %s on one class = %v/s, want the mean %v/s", rs[c.Index].Hardware.Name, share, arrivals/float64(len(rs)))
				}
				want := share * c.TotalSec() * busyFactor(arrivals/capacity) * c.PrefillSec
				if math.Abs(c.ExternalSec-want) > 1e-9*max(1, want) {
					t.Fatalf("ExternalSec(%s) = %v, want %v (λ %v/s)", rs[c.Index].Hardware.Name, c.ExternalSec, want, share)
				}
			}
		})
	}
}

func TestBusyFactor(t *testing.T) {
	for _, tc := range []struct{ load, want float64 }{
		{0, 1}, {-1, 1}, {math.NaN(), 1}, {0.5, 2}, {0.75, 4}, {0.9, 10}, {3, 10},
	} {
		if got := busyFactor(tc.load); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("busyFactor(%v) = %v, want %v", tc.load, got, tc.want)
		}
	}
}

// TestStallSpreadsPrefills: two replicas that differ only in how many
// generations run there (and the KV they hold): under load, the prefill
// goes where fewer of them wait for its steps, by s · ρ · u · B · P per
// replica; with no load the term is zero and the rule is the greedy one.
func TestStallSpreadsPrefills(t *testing.T) {
	now := 100 * sec
	p := exactParams()
	rs := fleet("h100", 2, now)
	rs[0].RunningRequests, rs[1].RunningRequests = 20, 120
	rs[0].KVUsage, rs[1].KVUsage = 0.2, 0.8
	h := &rs[0].Hardware
	req := Request{PromptTokens: 4000, Chain: []uint64{3}}
	for _, tc := range []struct {
		name string
		rate float64 // arrivals per second at each replica
	}{
		{name: "idle", rate: 0},
		{name: "busy", rate: 1.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLedger(p, len(rs), 4)
			l.SetPeerRate(2 * tc.rate)
			var d Decision
			Pick(&p, &req, rs, nil, l, now, &d)
			load := tc.rate * h.PrefillSeconds(p.DefaultPromptTokens)
			for _, c := range d.Top[:d.NumTop] {
				busy := busyFactor(load)
				want := tc.rate*c.TotalSec()*busy*c.PrefillSec + p.StallWeight*load*rs[c.Index].KVUsage*float64(rs[c.Index].RunningRequests)*c.PrefillSec
				if math.Abs(c.ExternalSec-want) > 1e-9*max(1, want) {
					t.Errorf("replica %d ExternalSec = %v, want %v", c.Index, c.ExternalSec, want)
				}
			}
			if d.Index != 0 {
				t.Errorf("Pick = %d, want 0 (fewer generations, and a shorter step)", d.Index)
			}
		})
	}
}

// TestHeldDelays: requests held back for capacity count among those a
// placement delays, in each replica's share of the fleet's capacity.
func TestHeldDelays(t *testing.T) {
	now := 100 * sec
	p := exactParams()
	rs := fleet("h100", 2, now)
	req := Request{PromptTokens: 3000, Chain: []uint64{5}}
	l := NewLedger(p, len(rs), 4)
	var d Decision
	Pick(&p, &req, rs, nil, l, now, &d)
	if d.Top[0].ExternalSec != 0 {
		t.Fatalf("ExternalSec with nothing held and no arrivals = %v, want 0", d.Top[0].ExternalSec)
	}
	l.SetHeld(10)
	Pick(&p, &req, rs, nil, l, now, &d)
	h := &rs[0].Hardware
	meanP := h.PrefillSeconds(p.DefaultPromptTokens)
	capacity := 2 / meanP
	want := 10 / capacity / meanP * d.Top[0].PrefillSec // 5 of the 10 each, delayed P
	if math.Abs(d.Top[0].ExternalSec-want) > 1e-9 {
		t.Fatalf("ExternalSec with 10 held = %v, want %v", d.Top[0].ExternalSec, want)
	}
}

// TestExternalityFollowsHeldContext: with arrivals, a replica prices its
// externality at its capacity share times the multiple o_r / ō of the
// fleet's held contexts it holds (CacheRoomTokens), above 1 or below, and a
// new prefix that is cold everywhere goes where fewer contexts are held,
// which the tie-break alone would not do. The agentic workload's sessions
// piled onto one replica without the factor; hetero's L4s, holding little,
// were overpriced at a floor of 1.
func TestExternalityFollowsHeldContext(t *testing.T) {
	now := 100 * sec
	p := exactParams()
	req := Request{PromptTokens: 3000, Chain: []uint64{11}}
	for _, tc := range []struct {
		name  string
		rooms []int // CacheRoomTokens per replica, as fractions of capacity in tenths
		rate  float64
		share []float64 // want heldShare per replica
	}{
		{name: "no arrivals: nothing priced", rooms: []int{2, 10}, rate: 0, share: []float64{1, 1}},
		{name: "even fleet", rooms: []int{5, 5}, rate: 2, share: []float64{1, 1}},
		{name: "one holds the contexts", rooms: []int{2, 10}, rate: 2, share: []float64{2, 0}},
		{name: "uneven", rooms: []int{4, 8}, rate: 2, share: []float64{1.5, 0.5}},
		{name: "all full", rooms: []int{0, 0}, rate: 2, share: []float64{1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := fleet("h100", len(tc.rooms), now)
			for i := range rs {
				rs[i].CacheRoomTokens = rs[i].KVCapacity() * tc.rooms[i] / 10
			}
			l := NewLedger(p, len(rs), 4)
			l.SetPeerRate(tc.rate)
			var d Decision
			Pick(&p, &req, rs, nil, l, now, &d)
			h := &rs[0].Hardware
			busy := busyFactor(tc.rate / float64(len(rs)) * h.PrefillSeconds(p.DefaultPromptTokens))
			for _, c := range d.Top[:d.NumTop] {
				lam := tc.rate / float64(len(rs)) * tc.share[c.Index]
				want := lam * c.TotalSec() * busy * (c.AdapterSec + c.PrefillSec)
				if math.Abs(c.ExternalSec-want) > 1e-12 {
					t.Errorf("rooms %v: replica %d ExternalSec = %v, want %v (share %v)", tc.rooms, c.Index, c.ExternalSec, want, tc.share[c.Index])
				}
			}
			if tc.share[0] > 1 && d.Index != 1 {
				t.Errorf("Pick(rooms %v, cold everywhere) = %d, want 1, the replica holding fewer contexts", tc.rooms, d.Index)
			}
		})
	}
}
