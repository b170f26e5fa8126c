package scoring

import (
	"math"
	"math/rand/v2"
	"testing"
)

// sendTolerance bounds |fast − exact| of the misses one send adds, in
// misses per send (the change of a miss rate divided by the send's rate):
// reloadCost multiplies it by a load time, so 1e-4 is 1e-4 of a load.
const sendTolerance = 1e-4

// exactSend is how reloadCost priced a send before cheLevel: solve the
// cache without and with it.
func exactSend(rest []float64, self, delta float64, slots int) (others, own float64) {
	now, ownNow, _ := cheSolve(rest, self, slots, 0)
	with, ownWith, _ := cheSolve(rest, self+delta, slots, 0)
	return with - now, ownWith - ownNow
}

// fastSend is reloadCost's pricing of one send: the level solved for all
// the items, then sendDelta, or sendExact where it declines.
func fastSend(lv *cheLevel, rest []float64, self, delta float64, slots int) (others, own float64, expanded bool) {
	items := 0
	if self > 0 {
		items++
	}
	for _, x := range rest {
		if x > 0 {
			items++
		}
	}
	others, own, ok := lv.sendDelta(self, delta, items, slots)
	if !ok {
		others, own = lv.sendExact(rest, self, delta, slots)
	}
	return others, own, ok
}

// checkSend compares fastSend with exactSend on a level solved for rest
// and self, twice (the second time sendDelta expands from wherever
// sendExact centred a cache that fits), and returns whether the second
// pricing came from the expansion.
func checkSend(t *testing.T, name string, rest []float64, self, delta float64, slots int) bool {
	t.Helper()
	lv := cheLevelOf(rest, self, slots, 0)
	wo, ww := exactSend(rest, self, delta, slots)
	expanded := false
	for pass := range 2 {
		o, w, ok := fastSend(&lv, rest, self, delta, slots)
		if math.Abs(o-wo)/delta > sendTolerance || math.Abs(w-ww)/delta > sendTolerance {
			t.Errorf("%s pass %d: send(%v, self %v, slots %d) = %v, %v per send, want %v, %v (solved twice)",
				name, pass, rest, self, slots, o/delta, w/delta, wo/delta, ww/delta)
		}
		expanded = ok
	}
	return expanded
}

func repeat(x float64, n int) []float64 {
	r := make([]float64, n)
	for i := range r {
		r[i] = x
	}
	return r
}

// TestSendDelta holds the expansion to the exact two solves on the rate
// sets Pick meets: rates in sends per AdapterMemory (60 s), so one send is
// 1/60 per second.
func TestSendDelta(t *testing.T) {
	const one = 1.0 / 60
	zipf := make([]float64, 16)
	for i := range zipf {
		zipf[i] = 20 * one / float64(i+1)
	}
	hotRare := append([]float64{40 * one}, repeat(one, 10)...)
	tests := []struct {
		name  string
		rest  []float64
		self  float64
		slots []int
	}{
		{name: "uniform, absent", rest: repeat(3*one, 10), slots: []int{2, 4, 8}},
		{name: "uniform, present", rest: repeat(3*one, 9), self: 3 * one, slots: []int{2, 4, 8}},
		{name: "zipf, hot", rest: zipf[1:], self: zipf[0], slots: []int{2, 4, 8, 12}},
		{name: "zipf, middle", rest: append(append([]float64{}, zipf[:5]...), zipf[6:]...), self: zipf[5], slots: []int{2, 4, 8, 12}},
		{name: "zipf, rare", rest: zipf[:15], self: zipf[15], slots: []int{2, 4, 8, 12}},
		{name: "zipf, absent", rest: zipf, slots: []int{2, 4, 8, 12, 16}},
		{name: "hot and rare, rare", rest: hotRare, self: one, slots: []int{2, 4, 8}},
		{name: "hot and rare, hot", rest: hotRare[1:], self: hotRare[0], slots: []int{2, 4, 8}},
		{name: "hot and rare, absent", rest: hotRare, slots: []int{2, 4, 8, 11}},
		{name: "just over the slots", rest: []float64{5 * one, 3 * one, 2 * one, one, one, one, one, one}, self: one, slots: []int{7, 8}},
		{name: "fills the slots, absent", rest: []float64{5 * one, 3 * one, 2 * one, one}, slots: []int{4}},
		{name: "one send doubles it", rest: repeat(2*one, 6), self: one, slots: []int{2, 4, 6}},
		{name: "decayed rare one send doubles", rest: []float64{0.3 * one, 0.2 * one, 4 * one, 0.5 * one, one}, self: 0.1 * one, slots: []int{1, 2, 3, 4}},
		// One item too many, and that one rare: the other items nearly
		// all fit, so the slope of Che's equation is small and a small
		// term of the expansion moves T far.
		{name: "nearly all fit, rare self", rest: []float64{1.43 * one, 1.21 * one, 0.59 * one, 1.04 * one, 0.78 * one, 0.031 * one}, self: 0.088 * one, slots: []int{3, 6}},
		{name: "fits", rest: repeat(one, 3), self: one, slots: []int{4, 8}},
		{name: "no slots", rest: repeat(one, 3), self: one, slots: []int{0}},
	}
	for _, tt := range tests {
		for _, slots := range tt.slots {
			checkSend(t, tt.name, tt.rest, tt.self, one, slots)
		}
	}
}

// TestSendDeltaRandom is TestSendDelta over random rate sets (a few
// thousand, seeded), and reports how often the expansion priced the send.
func TestSendDeltaRandom(t *testing.T) {
	const one = 1.0 / 60
	rng := rand.New(rand.NewPCG(3, 4))
	expanded, runs := 0, 0
	worst := 0.0
	for range 3000 {
		rest := make([]float64, 1+rng.IntN(16))
		for i := range rest {
			switch rng.IntN(3) {
			case 0: // a few sends, decayed up to the host memory
				rest[i] = float64(1+rng.IntN(5)) * one * math.Exp(-rng.Float64()*10)
			case 1: // busy
				rest[i] = float64(1+rng.IntN(100)) * one
			default:
				rest[i] = one * math.Exp(-rng.Float64()*3)
			}
		}
		self := 0.0
		if rng.IntN(3) > 0 {
			self = float64(1+rng.IntN(4)) * one * math.Exp(-rng.Float64()*3)
		}
		slots := 1 + rng.IntN(len(rest)+1)
		if checkSend(t, "random", rest, self, one, slots) {
			expanded++
		}
		lv := cheLevelOf(rest, self, slots, 0)
		o, w, _ := fastSend(&lv, rest, self, one, slots)
		wo, ww := exactSend(rest, self, one, slots)
		worst = max(worst, math.Abs(o-wo)/one, math.Abs(w-ww)/one)
		runs++
	}
	t.Logf("expansion priced %d of %d sends; worst difference %.2g misses per send", expanded, runs, worst)
}

// FuzzSendDelta: for any rates, the expansion agrees with the exact
// solves (or declines), and nothing is NaN.
func FuzzSendDelta(f *testing.F) {
	f.Add(uint64(1), uint8(10), uint8(4), 0.0)
	f.Add(uint64(2), uint8(5), uint8(4), 1.0)
	f.Add(uint64(3), uint8(9), uint8(8), 0.1)
	f.Add(uint64(4), uint8(16), uint8(3), 30.0)
	f.Fuzz(func(t *testing.T, seed uint64, n, slots uint8, selfSends float64) {
		const one = 1.0 / 60
		if !(selfSends >= 0 && selfSends < 1e6) {
			return
		}
		rng := rand.New(rand.NewPCG(seed, 5))
		rest := make([]float64, int(n%32)+1)
		for i := range rest {
			rest[i] = one * math.Exp(rng.NormFloat64()*2)
		}
		lv := cheLevelOf(rest, selfSends*one, int(slots%40), 0)
		o, w, _ := fastSend(&lv, rest, selfSends*one, one, int(slots%40))
		if math.IsNaN(o) || math.IsNaN(w) {
			t.Fatalf("send(%v, %v, %d) = NaN", rest, selfSends*one, slots%40)
		}
		checkSend(t, "fuzz", rest, selfSends*one, one, int(slots%40))
	})
}

// TestCheLevelUnits: a level solved for rates that have since decayed by
// a common factor k prices a send as one solved for the decayed rates,
// once the current rates are converted to its units (divided by k), as
// reloadCost does.
func TestCheLevelUnits(t *testing.T) {
	const one = 1.0 / 60
	rest := []float64{4 * one, 2 * one, one, one, 0.5 * one, 0.2 * one}
	for _, self := range []float64{0, 0.3 * one, 3 * one} {
		for _, k := range []float64{1, 0.9, 0.5, 0.1} {
			lv := cheLevelOf(rest, self, 3, 0)
			lv.sendExact(rest, self, one, 3) // centres add for a new item
			decayed := make([]float64, len(rest))
			for i, x := range rest {
				decayed[i] = x * k
			}
			items := len(rest)
			if self > 0 {
				items++
			}
			o, w, ok := lv.sendDelta(self, one/k, items, 3)
			if !ok {
				if k > 0.5 {
					t.Errorf("send(self %v, decayed %v): expansion declined, want it priced", self, k)
				}
				o, w = lv.sendExact(rest, self, one/k, 3)
			}
			o, w = o*k, w*k // back to the decayed rates' units
			wo, ww := exactSend(decayed, self*k, one, 3)
			if math.Abs(o-wo)/one > sendTolerance || math.Abs(w-ww)/one > sendTolerance {
				t.Errorf("send(self %v, decayed %v) = %v, %v per send, want %v, %v", self, k, o/one, w/one, wo/one, ww/one)
			}
		}
	}
}

// TestCheCache: a replica's cached levels are kept while its adapters'
// rates only decay together (toRef converting the current rates to their
// units), and solved again when one of them is sent there again, the set
// changes, or the slots do.
func TestCheCache(t *testing.T) {
	p := DefaultParams()
	l := NewLedger(p, 2, 8)
	mem := int64(p.AdapterMemory)
	at := int64(100 * sec)
	for i, a := range []uint64{1, 2, 3, 4, 5, 6} {
		l.adapters.remember(a, 1, at-int64(i)*sec, at-int64(i)*sec+mem)
		l.adapters.remember(a, 0, at-int64(i)*sec, at-int64(i)*sec+mem)
	}
	// solve marks adapter 9 (on neither replica) at now and returns
	// replica 1's GPU level, with 2 GPU and hostSlots host slots.
	var v adapterView
	solve := func(now int64, hostSlots int) (*cheLevel, float64) {
		l.markAdapter(&v, 9, nil, now)
		_, self := v.adapterRates(1)
		g, _, _, toRef := l.adapters.levels(&v, 1, self, 2, hostSlots)
		return g, toRef
	}
	const marker = 42.0 // no solve writes it
	g, _ := solve(at, 4)
	g.now.a[cheOrder] = marker
	if g, toRef := solve(at+10*sec, 4); g.now.a[cheOrder] != marker || math.Abs(toRef-math.Exp(10/p.AdapterMemory.Seconds())) > 1e-12 {
		t.Errorf("cheLevels 10 s later: a[%d] = %v, toRef %v; want the cached %v, e^(10/60)", cheOrder, g.now.a[cheOrder], toRef, marker)
	}
	for _, tt := range []struct {
		name         string
		change       func()
		host0, host1 int
	}{
		{"a send there", func() { l.adapters.remember(3, 1, at+20*sec, at+20*sec+mem) }, 4, 4},
		{"a new adapter there", func() { l.adapters.remember(7, 1, at+20*sec, at+20*sec+mem) }, 4, 4},
		{"other host slots", func() {}, 4, 5},
	} {
		g, _ := solve(at+20*sec, tt.host0)
		g.now.a[cheOrder] = marker
		tt.change()
		if g, toRef := solve(at+30*sec, tt.host1); g.now.a[cheOrder] == marker || toRef != 1 {
			t.Errorf("cheLevels after %s: a[%d] = %v, toRef %v; want it solved again", tt.name, cheOrder, g.now.a[cheOrder], toRef)
		}
	}
	// A send stamped after now decays from then, not with the others: no
	// level is kept until now passes it.
	l.adapters.remember(3, 1, at+60*sec, at+60*sec+mem)
	g, _ = solve(at+40*sec, 4)
	g.now.a[cheOrder] = marker
	if g, _ := solve(at+50*sec, 4); g.now.a[cheOrder] == marker {
		t.Errorf("cheLevels with a send stamped after now: kept the cached level, want it solved again")
	}
	l.markAdapter(&v, 9, nil, at+100*sec)
	g, _, _, _ = l.adapters.levels(&v, 0, 0, 2, 4)
	g.now.a[cheOrder] = marker
	l.adapters.remember(3, 1, at+100*sec, at+100*sec+mem)
	l.markAdapter(&v, 9, nil, at+100*sec)
	if g, _, _, _ := l.adapters.levels(&v, 0, 0, 2, 4); g.now.a[cheOrder] != marker {
		t.Errorf("cheLevels(replica 0) after a send to replica 1: a[%d] = %v, want the cached %v", cheOrder, g.now.a[cheOrder], marker)
	}
}

// TestReloadCostMatchesSolve drives a ledger through random sends, over
// time that moves, pauses and steps back, and after each holds every
// replica's reloadCost (cached levels, converted to the current rates) to
// the same pricing by two solves of its caches from the current rates.
func TestReloadCostMatchesSolve(t *testing.T) {
	p := DefaultParams()
	rng := rand.New(rand.NewPCG(7, 8))
	const n = 6
	now := int64(1000 * sec)
	rs := fleet("h100", n, now)
	for i := range rs {
		rs[i].AdapterSlots = 1 + rng.IntN(4)
		if rng.IntN(2) == 0 {
			rs[i].AdapterHostSlots = rs[i].AdapterSlots + 1 + rng.IntN(3)
		}
	}
	l := NewLedger(p, n, 64)
	mem := int64(p.AdapterMemory)
	window := p.AdapterMemory.Seconds()
	one := 1 / window
	for step := range 400 {
		now += int64(rng.IntN(3000)) * int64(1e6) // up to 3 s
		switch rng.IntN(40) {
		case 0: // a clock step back: sends now stamped ahead of it
			now -= int64(rng.IntN(5)) * sec
		case 1: // a lull: rates decay, placements expire
			now += int64(rng.IntN(120)) * sec
		}
		for range rng.IntN(6) {
			// Popular adapters more often than rare ones.
			a := uint64(1 + int(float64(12)*rng.Float64()*rng.Float64()))
			now += int64(rng.IntN(50)) * int64(1e6)
			l.adapters.remember(a, int32(rng.IntN(n)), now, now+mem)
		}
		adapter := uint64(1 + rng.IntN(14)) // 13 and 14 are never sent
		var v adapterView
		l.markAdapter(&v, adapter, rs, now)
		adapterReloads(&p, rs, l, &v)
		for i := range rs {
			r := &rs[i]
			rates, _ := l.adapters.otherRates(&v, i, 1)
			rest := append([]float64(nil), rates...)
			_, self := v.adapterRates(i)
			if len(rest) == 0 {
				continue
			}
			hostSlots := r.AdapterHostSlots
			if hostSlots <= 0 {
				hostSlots = r.AdapterSlots
			}
			gO, gW := exactSend(rest, self, one, r.AdapterSlots)
			hO, hW := exactSend(rest, self, one, hostSlots)
			fromHost := r.Hardware.AdapterLoadHostSec
			fromStorage := r.Hardware.AdapterLoadStorageSec - fromHost
			wantOthers := (gO*fromHost + hO*fromStorage) / one
			wantOwn := (gW*fromHost + hW*fromStorage) / one
			tol := 2 * sendTolerance * (fromHost + fromStorage)
			if math.Abs(v.reloadSec[i]-wantOthers) > tol || math.Abs(v.ownSec[i]-wantOwn) > tol {
				t.Fatalf("step %d replica %d (slots %d/%d, rates %v, self %v): reloadCost = %v, %v s, want %v, %v (solved twice)",
					step, i, r.AdapterSlots, hostSlots, rest, self, v.reloadSec[i], v.ownSec[i], wantOthers, wantOwn)
			}
		}
	}
}
