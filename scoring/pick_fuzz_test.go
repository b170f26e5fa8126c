package scoring

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/gpuroute/gpuroute/scoring/prefix"
)

// replicasFromBytes builds a fleet deterministically from fuzz input: 6
// bytes per replica, and which replicas serve the request's model (nil when
// every one does).
func replicasFromBytes(b []byte, now int64) ([]Replica, []int, []bool) {
	n := min(len(b)/6, 40)
	rs := make([]Replica, n)
	cached := make([]int, n)
	var served []bool
	names := HardwareNames()
	for i := range rs {
		c := b[i*6 : i*6+6]
		h, _ := LookupHardware(names[int(c[0])%len(names)])
		addr := "10.1.0." + strconv.Itoa(i) + ":80"
		rs[i] = Replica{
			Addr: addr, Hardware: h,
			WaitingRequests: int(c[1] % 32), RunningRequests: int(c[2] % 64),
			KVUsage:      float64(c[3]) / 200, // may exceed 1
			Healthy:      c[4]&1 == 0,
			Drain:        DrainState(c[4] >> 1 % 4),
			AdapterSlots: int(c[5]%4) - 1,
			ScrapedNanos: now - int64(c[5]>>2)*int64(1e8),
		}
		if c[4]&8 != 0 {
			rs[i].DrainDeadlineNanos = now - 1
		}
		if c[5]&64 != 0 {
			rs[i].Adapters = []Adapter{{Name: "fr", Tier: AdapterTier(c[3] % 3), Active: c[3]&4 != 0}}
		}
		cached[i] = int(c[2]) * 100
		if c[0]&128 != 0 && served == nil {
			served = make([]bool, n)
			for k := range served {
				served[k] = b[k*6]&64 == 0
			}
		}
	}
	return rs, cached, served
}

// FuzzPick: Pick decides deterministically, never panics, chooses only a
// healthy open replica that serves the model, accounts for every replica,
// and equals
// pickPlain, the rule written plainly (as TestPickMatchesPlain holds it on
// histories); the ledger survives the dispatch.
func FuzzPick(f *testing.F) {
	f.Add([]byte("abcdefghijklmnopqrstuvwx"), uint16(1000), false)
	f.Add([]byte{0, 0, 0, 0, 0, 0, 1, 5, 5, 250, 2, 66}, uint16(0), true)
	f.Add([]byte{}, uint16(10), true)
	f.Add([]byte{0x80, 1, 2, 3, 0, 5, 0x41, 1, 2, 3, 0, 5, 2, 1, 2, 3, 0, 5}, uint16(500), false) // a model two of three serve
	f.Fuzz(func(t *testing.T, b []byte, prompt uint16, adapter bool) {
		now := int64(1e12)
		rs, cached, served := replicasFromBytes(b, now)
		req := Request{PromptTokens: int(prompt), Chain: []uint64{uint64(prompt) * 0x9e3779b97f4a7c15}, MaxTokens: int(prompt % 500),
			ServedBy: served}
		if adapter {
			req.Adapter = "fr"
		}
		p := DefaultParams()
		// l for Pick, twin for pickPlain: the same (empty) history.
		l, twin := NewLedger(p, 64, 16), NewLedger(p, 64, 16)
		if len(rs) > 0 {
			// Another worker, with its own (slower) calibration of the
			// replicas, has a prefill in flight on one of them, started up
			// to a second ago; its work reaches this one as Board.Sum adds it.
			peer := NewLedger(p, 64, 16)
			at := now - int64(prompt%1000)*1e6
			var pd Decision
			Pick(&p, &req, rs, cached, peer, at, &pd)
			if pd.Index >= 0 {
				peer.Dispatch(pd.Index, &req, int(prompt), at, pd.Top[0].StartNanos)
			}
			for i := range rs {
				slow := rs[i].Hardware
				slow.PrefillSecPerToken *= 1 + float64(prompt%4)
				w := peer.WorkOn(i, &slow, rs[i].ScrapedNanos)
				rs[i].PeerWork = Work{}
				rs[i].PeerWork.AddAt(&w, now)
			}
			l.SetPeerRate(peer.Rate(now))
			twin.SetPeerRate(peer.Rate(now))
		}
		var d1, d2, plain Decision
		Pick(&p, &req, rs, cached, l, now, &d1)
		pickPlain(&p, &req, rs, cached, twin, now, &plain)
		if diff := diffDecisions(&d1, &plain, fusesMultiplyAdd()); diff != "" {
			t.Fatalf("Pick(%d replicas, prompt %d, adapter %v) %s", len(rs), prompt, adapter, diff)
		}
		Pick(&p, &req, rs, cached, l, now, &d2)
		if d1.Index != d2.Index || d1.Reason != d2.Reason {
			t.Fatalf("Pick = %d (%v) then %d (%v), want equal", d1.Index, d1.Reason, d2.Index, d2.Reason)
		}
		if d1.Index < -1 || d1.Index >= len(rs) {
			t.Fatalf("Pick = %d, want in [-1, %d)", d1.Index, len(rs))
		}
		if d1.Index < 0 {
			if d1.Eligible != 0 || d1.Reason != ReasonNoReplica {
				t.Fatalf("Pick = -1 with %d eligible (%v)", d1.Eligible, d1.Reason)
			}
			return
		}
		r := &rs[d1.Index]
		if !r.Healthy || r.DrainAt(now) != Serving || served != nil && !served[d1.Index] {
			t.Fatalf("Pick = %d: healthy %v, drain %v, serves the model %v; want a healthy open replica that serves it",
				d1.Index, r.Healthy, r.DrainAt(now), served == nil || served[d1.Index])
		}
		c, ok := d1.Chosen()
		if !ok || c.Index != d1.Index || math.IsNaN(c.TotalSec()) || c.TotalSec() < 0 {
			t.Fatalf("Chosen() = %+v, %v for index %d", c, ok, d1.Index)
		}
		if d1.Eligible+d1.NoModel+d1.Unhealthy+d1.Draining+d1.NoAdapterSlot != len(rs) {
			t.Fatalf("counts %d+%d+%d+%d+%d, want %d replicas", d1.Eligible, d1.NoModel, d1.Unhealthy, d1.Draining, d1.NoAdapterSlot, len(rs))
		}
		// Dispatch and progress never corrupt the ledger.
		fl := l.Dispatch(d1.Index, &req, int(prompt), now, d1.Top[0].StartNanos)
		l.Progress(fl, int(prompt%7))
		l.Done(fl, int(prompt%300))
		if l.InFlight() != 0 || l.work.reps[d1.Index].Work != (Work{}) {
			t.Fatalf("ledger after Done = %+v, want empty", l.work.reps[d1.Index])
		}
	})
}

// benchFleet: n replicas with mixed load, cached prefixes, a ledger with
// in-flight work, as a steady-state decision sees them.
func benchFleet(n int) ([]Replica, []int, *Ledger, Request) {
	now := int64(1e12)
	rng := rand.New(rand.NewPCG(uint64(n), 7))
	rs := fleet("h100", n, now)
	names := HardwareNames()
	cached := make([]int, n)
	p := DefaultParams()
	l := NewLedger(p, n, 1024)
	for i := range rs {
		rs[i].Hardware, _ = LookupHardware(names[i%len(names)])
		rs[i].WaitingRequests = rng.IntN(8)
		rs[i].RunningRequests = rng.IntN(64)
		rs[i].KVUsage = rng.Float64()
		// Keys set as the router sets them once per snapshot.
		rs[i].Adapters = []Adapter{{Name: "a" + strconv.Itoa(i%5), Tier: TierGPU, Active: true}, {Name: "fr", Tier: TierHost}}
		for j := range rs[i].Adapters {
			rs[i].Adapters[j].Hash = prefix.HashString(rs[i].Adapters[j].Name)
		}
		cached[i] = rng.IntN(3000)
		for j := 0; j < 3; j++ {
			req := Request{PromptTokens: 1000, MaxTokens: 500}
			f := l.Dispatch(i, &req, 800, now-int64(rng.IntN(1e9)), 0)
			if j == 0 {
				l.Progress(f, 10)
			}
		}
	}
	req := Request{PromptTokens: 4000, Chain: []uint64{1, 2, 3, 4, 5}, Model: "llama", Adapter: "fr", MaxTokens: 256}
	return rs, cached, l, req
}

// BenchmarkPickAdapters64 is BenchmarkPick/64 with the ledger remembering
// LoRA placements on every replica (its 256 placements: 4 on each, as many
// as the replicas' adapter slots), so the adapter terms price a send to
// each candidate with its LRU model (reloadCost).
func BenchmarkPickAdapters64(b *testing.B) {
	rs, cached, l, req := benchFleet(64)
	now := int64(1e12)
	for i := range rs {
		for a := range 10 {
			r := Request{PromptTokens: 100, MaxTokens: 10, Model: "llama", Adapter: "ad" + strconv.Itoa((i+a)%24)}
			f := l.Dispatch(i, &r, 100, now-int64(a)*1e9, 0)
			l.Done(f, 10)
		}
	}
	p := DefaultParams()
	var d Decision
	Pick(&p, &req, rs, cached, l, now, &d)
	b.ReportAllocs()
	for b.Loop() {
		Pick(&p, &req, rs, cached, l, now, &d)
	}
}

// BenchmarkPickAdaptersFull64 is BenchmarkPickAdapters64 as a live router
// meets it: caches over full (2 GPU and 3 host slots for 4 adapters), the
// requested adapter remembered on a third of the replicas or on none, the
// clock moving 0.1 ms a request, and one replica's adapters changed by each
// request (the one it was sent to), so one replica solves its caches again.
func BenchmarkPickAdaptersFull64(b *testing.B) {
	rs, cached, l, req := benchFleet(64)
	now := int64(1e12)
	for i := range rs {
		rs[i].AdapterSlots, rs[i].AdapterHostSlots = 2, 3
		for a := range 4 {
			name := "ad" + strconv.Itoa((i+a)%24)
			if a == 0 && i%3 == 0 {
				name = "fr"
			}
			r := Request{PromptTokens: 100, MaxTokens: 10, Model: "llama", Adapter: name}
			f := l.Dispatch(i, &r, 100, now-int64(a+1)*1e9, 0)
			l.Done(f, 10)
		}
	}
	p := DefaultParams()
	var d Decision
	reqs := [2]Request{req, req}
	reqs[1].Adapter = "absent"
	Pick(&p, &reqs[0], rs, cached, l, now, &d)
	Pick(&p, &reqs[1], rs, cached, l, now, &d)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		n++
		l.adapters.ver[n%len(rs)]++
		Pick(&p, &reqs[n&1], rs, cached, l, now+int64(n)*1e5, &d)
	}
}

func TestPickAllocs(t *testing.T) {
	rs, cached, l, req := benchFleet(64)
	p := DefaultParams()
	var d Decision
	Pick(&p, &req, rs, cached, l, 1e12, &d)
	if a := testing.AllocsPerRun(100, func() { Pick(&p, &req, rs, cached, l, 1e12, &d) }); a != 0 {
		t.Fatalf("Pick allocs = %v, want 0", a)
	}
}

func BenchmarkPick(b *testing.B) {
	for _, n := range []int{8, 64, 256} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			rs, cached, l, req := benchFleet(n)
			benchPick(b, rs, cached, l, &req)
		})
	}
}

// BenchmarkPickBase64 is BenchmarkPick/64 for a request without an adapter,
// the common case on the plugin's request path (issue #4).
func BenchmarkPickBase64(b *testing.B) {
	rs, cached, l, req := benchFleet(64)
	req.Adapter = ""
	benchPick(b, rs, cached, l, &req)
}

// benchPick times Pick with default parameters, after one warm-up call.
func benchPick(b *testing.B, rs []Replica, cached []int, l *Ledger, req *Request) {
	p := DefaultParams()
	var d Decision
	Pick(&p, req, rs, cached, l, 1e12, &d)
	b.ReportAllocs()
	for b.Loop() {
		Pick(&p, req, rs, cached, l, 1e12, &d)
	}
}

// BenchmarkPickAfterScrape64 is the first Pick after a scrape with 2,048
// requests in flight over 64 replicas: every replica's snapshot time has
// moved, so the ledger recounts which requests each scrape has not seen.
// The snapshot times alternate between two values a nanosecond apart, so
// every call does the same work (advancing them past the clock would
// change the recount's outcome as the benchmark runs).
func BenchmarkPickAfterScrape64(b *testing.B) {
	rs, cached, _, req := benchFleet(64)
	req.Adapter = ""
	l := NewLedger(DefaultParams(), len(rs), 2048)
	for i := range 2048 {
		l.Dispatch(i%len(rs), &Request{PromptTokens: 500, MaxTokens: 200, Model: "m"}, 500, int64(i)*1e6, 0)
	}
	p := DefaultParams()
	var d Decision
	b.ReportAllocs()
	step := int64(1)
	for b.Loop() {
		for i := range rs {
			rs[i].ScrapedNanos += step
		}
		step = -step
		Pick(&p, &req, rs, cached, l, 1e12, &d)
	}
}
