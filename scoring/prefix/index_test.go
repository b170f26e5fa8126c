package prefix

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
)

// chainN returns a synthetic chain of n blocks sharing the first shared
// blocks with every other chain of the same family.
func chainN(family, variant uint64, n, shared int) []uint64 {
	c := make([]uint64, n)
	h := Finalize(family + 1)
	for i := range c {
		if i == shared {
			h = Finalize(h ^ (variant+1)*mixK1)
		}
		h = Finalize(h + mixK0)
		c[i] = h
	}
	return c
}

func TestPrefixIndexLookup(t *testing.T) {
	x := NewIndex(IndexConfig{BlockChars: 64, Stride: 4})
	bt := 64 / CharsPerToken
	long := chainN(1, 0, 100, 100)
	x.Record(0, long)
	x.Record(2, long[:37])
	x.Record(3, chainN(1, 9, 60, 20)) // shares 20 blocks with long
	tests := []struct {
		name  string
		chain []uint64
		want  []int
	}{
		{name: "full chain", chain: long, want: []int{100 * bt, 0, 37 * bt, 20 * bt}},
		// Resolution is the stride (4 blocks) except at a recorded tip.
		{name: "shorter query", chain: long[:50], want: []int{48 * bt, 0, 37 * bt, 20 * bt}},
		{name: "odd tip", chain: long[:39], want: []int{36 * bt, 0, 37 * bt, 20 * bt}},
		{name: "exact tip", chain: long[:37], want: []int{36 * bt, 0, 37 * bt, 20 * bt}},
		{name: "unrelated", chain: chainN(2, 0, 80, 80), want: []int{0, 0, 0, 0}},
		{name: "empty", chain: nil, want: []int{0, 0, 0, 0}},
	}
	out := make([]int, 4)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x.Lookup(tt.chain, out)
			for i := range out {
				if out[i] != tt.want[i] {
					t.Fatalf("Lookup(%s) = %v, want %v", tt.name, out, tt.want)
				}
			}
		})
	}
	x.Forget(0)
	x.Lookup(long, out)
	if out[0] != 0 {
		t.Fatalf("Lookup after Forget(0) = %v, want out[0] = 0", out)
	}
}

// TestLookupMatchesScan holds Lookup's search to a plain scan: checkpoints
// held from the first on, then the recorded tip before the next one, on
// random families of chains recorded on random replicas (no eviction, so
// every replica's chains are prefix-closed). Fleets of more than 64
// replicas share filter bits (replicas r and r+64).
func TestLookupMatchesScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for round := range 400 {
		replicas := []int{8, 130}[round%2]
		x := NewIndex(IndexConfig{BlockChars: 64, Stride: 4, MaxReplicas: replicas, MaxEntries: 1 << 16})
		var chains [][]uint64
		for range 1 + rng.IntN(12) {
			n := 1 + rng.IntN(60)
			c := chainN(uint64(rng.IntN(3)), uint64(rng.IntN(4)), n, rng.IntN(n+1))
			chains = append(chains, c)
			x.Record(rng.IntN(replicas), c)
		}
		q := chains[rng.IntN(len(chains))]
		if rng.IntN(2) == 0 {
			q = chainN(uint64(rng.IntN(3)), 99, 1+rng.IntN(60), rng.IntN(40))
		}
		out := make([]int, replicas)
		x.Lookup(q, out)
		for r := range replicas {
			rep := uint16(r + 1)
			held := func(pos int) bool { return x.find(uint32(q[pos]>>32), rep) >= 0 }
			blocks := 0
			for blocks+4 <= len(q) && held(blocks+3) {
				blocks += 4
			}
			for pos := min(blocks+3, len(q)) - 1; pos >= blocks; pos-- {
				if held(pos) {
					blocks = pos + 1
					break
				}
			}
			if want := blocks * 64 / CharsPerToken; out[r] != want {
				t.Fatalf("round %d: Lookup(%d blocks)[%d] = %d, want %d (scan)", round, len(q), r, out[r], want)
			}
		}
	}
}

func TestPrefixIndexBounds(t *testing.T) {
	x := NewIndex(IndexConfig{BlockChars: 64, Stride: 4, MaxEntries: 256, MaxReplicas: 4})
	// Replica 1 holds 16k tokens: 1000 blocks of 16 tokens, 250 checkpoints.
	x.SetCapacityTokens(1, 16*4*20) // 20 checkpoints
	out := make([]int, 4)
	for i := 0; i < 200; i++ {
		x.Record(i%4, chainN(uint64(i), 0, 40, 40))
		if x.Len() > 256 {
			t.Fatalf("Len() = %d after %d records, want ≤ 256", x.Len(), i)
		}
		if x.EncodedLen() > x.MaxEncodedLen() {
			t.Fatalf("EncodedLen() = %d after %d records, over MaxEncodedLen() = %d", x.EncodedLen(), i, x.MaxEncodedLen())
		}
		if x.count[1] > 20 {
			t.Fatalf("replica 1 entries = %d, want ≤ 20 (its KV capacity)", x.count[1])
		}
	}
	// The most recent chain survives; the oldest does not.
	x.Lookup(chainN(199, 0, 40, 40), out)
	if out[3] != 40*16 {
		t.Fatalf("Lookup(newest) = %v, want replica 3 = %d", out, 40*16)
	}
	x.Lookup(chainN(0, 0, 40, 40), out)
	if out[0] != 0 {
		t.Fatalf("Lookup(oldest) = %v, want evicted", out)
	}
}

func TestPrefixIndexEncoding(t *testing.T) {
	x := NewIndex(IndexConfig{})
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 300; i++ {
		x.Record(rng.IntN(64), chainN(uint64(rng.IntN(40)), uint64(i), 20+rng.IntN(200), 10+rng.IntN(50)))
	}
	b, err := x.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != x.EncodedLen() || len(b) > 48<<10 {
		t.Fatalf("encoded %d bytes (EncodedLen %d), want equal and ≤ 48 KiB", len(b), x.EncodedLen())
	}
	var y Index
	if err := y.UnmarshalBinary(b); err != nil {
		t.Fatalf("UnmarshalBinary(MarshalBinary()) = %v", err)
	}
	o1, o2 := make([]int, 64), make([]int, 64)
	for i := 0; i < 40; i++ {
		c := chainN(uint64(i), 0, 250, 60)
		x.Lookup(c, o1)
		y.Lookup(c, o2)
		for r := range o1 {
			if o1[r] != o2[r] {
				t.Fatalf("decoded Lookup = %v, want %v", o2, o1)
			}
		}
	}
	bad := []struct {
		name string
		b    []byte
	}{
		{name: "empty", b: nil},
		{name: "version", b: append([]byte{9}, b[1:]...)},
		{name: "truncated", b: b[:len(b)-3]},
		{name: "stride zero", b: append([]byte{1, 0}, b[2:]...)},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			var z Index
			if err := z.UnmarshalBinary(tt.b); err == nil {
				t.Fatalf("UnmarshalBinary(%s) = nil, want error", tt.name)
			}
			if z.Len() != 0 {
				t.Fatalf("after error Len() = %d, want 0", z.Len())
			}
		})
	}
}

func FuzzPrefixIndexDecode(f *testing.F) {
	x := NewIndex(IndexConfig{MaxEntries: 64, MaxReplicas: 4})
	x.Record(1, chainN(1, 0, 30, 30))
	x.SetCapacityTokens(2, 1000)
	seed, _ := x.MarshalBinary()
	f.Add(seed)
	f.Add([]byte{})
	f.Add([]byte{1, 4, 7, 0, 64, 0, 4, 0, 64, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var y Index
		if err := y.UnmarshalBinary(b); err != nil {
			if y.Len() != 0 {
				t.Fatalf("UnmarshalBinary error left %d entries", y.Len())
			}
			return
		}
		enc, _ := y.AppendBinary(nil)
		var z Index
		if err := z.UnmarshalBinary(enc); err != nil {
			t.Fatalf("UnmarshalBinary(AppendBinary()) = %v", err)
		}
		enc2, _ := z.AppendBinary(nil)
		if len(enc) != len(enc2) || !bytes.Equal(enc[:indexHeaderLen], enc2[:indexHeaderLen]) {
			t.Fatalf("re-encoding changed: %d vs %d bytes", len(enc), len(enc2))
		}
		out := make([]int, y.cfg.MaxReplicas)
		y.Lookup(chainN(1, 0, 30, 30), out)
		y.Record(0, chainN(2, 0, 10, 10))
	})
}

func TestLookupAllocs(t *testing.T) {
	x, chain := benchIndex()
	out := make([]int, 64)
	if a := testing.AllocsPerRun(100, func() { x.Lookup(chain, out) }); a != 0 {
		t.Fatalf("Lookup allocs = %v, want 0", a)
	}
	if a := testing.AllocsPerRun(100, func() { x.Record(5, chain) }); a != 0 {
		t.Fatalf("Record allocs = %v, want 0", a)
	}
}

// benchIndex: 64 replicas, each holding several chains that share a
// 100-block system prompt, and a 512-block query chain.
func benchIndex() (*Index, []uint64) {
	x := NewIndex(IndexConfig{MaxReplicas: 64})
	for r := 0; r < 64; r++ {
		for j := 0; j < 3; j++ {
			x.Record(r, chainN(uint64(r%8), uint64(r*10+j), 150, 100))
		}
	}
	return x, chainN(3, 999, 512, 100)
}

func BenchmarkIndexLookup512x64(b *testing.B) {
	x, chain := benchIndex()
	out := make([]int, 64)
	b.ReportAllocs()
	for b.Loop() {
		x.Lookup(chain, out)
	}
}

func BenchmarkIndexRecord512(b *testing.B) {
	x, chain := benchIndex()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		x.Record(i%64, chain)
		i++
	}
}

func BenchmarkIndexEncode(b *testing.B) {
	x, _ := benchIndex()
	buf := make([]byte, 0, x.EncodedLen())
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = x.AppendBinary(buf[:0])
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkIndexDecode(b *testing.B) {
	x, _ := benchIndex()
	enc, _ := x.MarshalBinary()
	var y Index
	b.ReportAllocs()
	b.SetBytes(int64(len(enc)))
	for b.Loop() {
		if err := y.UnmarshalBinary(enc); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRecordCheckpoints: recording a chain's checkpoints in one index gives
// the same lookups as recording the chain in another.
func TestRecordCheckpoints(t *testing.T) {
	cfg := IndexConfig{BlockChars: 64, Stride: 8, MaxReplicas: 4}
	full, sparse := NewIndex(cfg), NewIndex(cfg)
	var h Hasher
	h.Init(64, 0)
	h.Reset("m", "")
	h.Write([]byte(strings.Repeat("0123456789abcdef", 300))) // 75 blocks
	chain := h.Chain()
	full.Record(2, chain)
	cps := full.AppendCheckpoints(nil, chain)
	if want := len(chain)/8 + 1; len(cps) != want {
		t.Fatalf("AppendCheckpoints(%d blocks, stride 8) = %d hashes, want %d", len(chain), len(cps), want)
	}
	sparse.RecordCheckpoints(2, cps)
	a, b := make([]int, 4), make([]int, 4)
	for _, n := range []int{1, 7, 8, 20, 74, 75} {
		full.Lookup(chain[:n], a)
		sparse.Lookup(chain[:n], b)
		if a[2] != b[2] || a[2] == 0 && n >= 8 {
			t.Errorf("Lookup(%d blocks) = %d (recorded) vs %d (from checkpoints)", n, a[2], b[2])
		}
	}
}

// TestAppendCheckpoints: every Stride-th block and the last, in order.
func TestAppendCheckpoints(t *testing.T) {
	for _, stride := range []int{1, 3, 4, 16} {
		x := NewIndex(IndexConfig{Stride: stride})
		for n := 0; n <= 40; n++ {
			chain := make([]uint64, n)
			for i := range chain {
				chain[i] = uint64(i)
			}
			var want []uint64
			for pos := range chain {
				if (pos+1)%stride == 0 || pos == n-1 {
					want = append(want, uint64(pos))
				}
			}
			if got := x.AppendCheckpoints(nil, chain); !equalChains(got, want) {
				t.Fatalf("AppendCheckpoints(stride %d, %d blocks) = %v, want %v", stride, n, got, want)
			}
		}
	}
}

// TestIndexListsInvariant: after random records, forgets, drops,
// evictions, rebuilds and round trips, every replica's recency list holds
// exactly its live entries, from the most to the least recently recorded
// (evictReplica takes its end), linked both ways, the counts agree, and
// every live entry's bit is set in the filter Lookup tests before the
// table.
func TestIndexListsInvariant(t *testing.T) {
	for seed := uint64(0); seed < 10; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		x := NewIndex(IndexConfig{Stride: 1 + rng.IntN(8), MaxEntries: 16 + rng.IntN(400), MaxReplicas: 8})
		for r := 0; r < 8; r++ {
			x.SetCapacityTokens(r, rng.IntN(600))
		}
		chains := make([][]uint64, 30)
		for i := range chains {
			chains[i] = chainN(uint64(i%5), uint64(i), 5+rng.IntN(120), rng.IntN(100))
		}
		for op := 0; op < 2000; op++ {
			switch k := rng.IntN(100); {
			case k < 60:
				x.Record(rng.IntN(8), chains[rng.IntN(len(chains))])
			case k < 90:
				x.RecordCheckpoints(rng.IntN(8), x.AppendCheckpoints(nil, chains[rng.IntN(len(chains))]))
			case k < 93:
				x.Forget(rng.IntN(8))
			case k < 96:
				x.DropOlder(rng.IntN(8), x.Clock()-uint32(rng.IntN(50)))
			default:
				b, _ := x.MarshalBinary()
				var y Index
				if err := y.UnmarshalBinary(b); err != nil {
					t.Fatalf("UnmarshalBinary(MarshalBinary()) = %v", err)
				}
				x = &y
			}
		}
		live := 0
		for i := range x.slots {
			if e := x.slots[i]; e.rep != 0 && e.rep != tombRep {
				live++
				if x.filter[e.hash&x.fmask]&(1<<((e.rep-1)&63)) == 0 {
					t.Fatalf("seed %d: live entry (%#x, replica %d) has no filter bit: Lookup would miss it", seed, e.hash, e.rep-1)
				}
			}
		}
		if live != x.used {
			t.Fatalf("seed %d: %d live slots, used = %d", seed, live, x.used)
		}
		for r := range x.newest {
			n, prev := 0, int32(-1)
			for i := x.newest[r]; i >= 0; prev, i = i, x.slots[i].older {
				e := x.slots[i]
				if e.rep != uint16(r+1) || e.newer != prev {
					t.Fatalf("seed %d: replica %d list: slot %d holds rep %d, newer %d; want rep %d, newer %d", seed, r, i, e.rep, e.newer, r+1, prev)
				}
				if prev >= 0 && x.clock-e.stamp < x.clock-x.slots[prev].stamp {
					t.Fatalf("seed %d: replica %d list: slot %d (stamp %d) after slot %d (stamp %d): not in recency order", seed, r, i, e.stamp, prev, x.slots[prev].stamp)
				}
				n++
			}
			if n != int(x.count[r]) || x.oldest[r] != prev {
				t.Fatalf("seed %d: replica %d list has %d entries ending at %d, count = %d, oldest = %d", seed, r, n, prev, x.count[r], x.oldest[r])
			}
		}
	}
}

// TestPrefixIndexReplicaEvictsLittle: a replica at its KV capacity loses
// only its oldest few checkpoints per insert batch, as its engine evicts
// block by block, not a quarter of what it holds.
func TestPrefixIndexReplicaEvictsLittle(t *testing.T) {
	const capacity = 640 // checkpoints of replica 0
	x := NewIndex(IndexConfig{BlockChars: 64, Stride: 4, MaxEntries: 1 << 16, MaxReplicas: 2})
	x.SetCapacityTokens(0, 16*4*capacity)
	for i := range capacity {
		x.Record(0, chainN(uint64(i), 0, 4, 4)) // one checkpoint each
	}
	if got := x.count[0]; got != capacity {
		t.Fatalf("replica 0 holds %d checkpoints after %d one-checkpoint records, want %d", got, capacity, capacity)
	}
	x.Record(0, chainN(capacity, 0, 4, 4))
	if got, floor := int(x.count[0]), capacity-capacity/16; got < floor || got > capacity {
		t.Errorf("replica 0 holds %d checkpoints after one record over capacity %d, want in [%d, %d]", got, capacity, floor, capacity)
	}
	out := make([]int, 2)
	x.Lookup(chainN(capacity/8, 0, 4, 4), out)
	if out[0] == 0 {
		t.Errorf("Lookup(an eighth-oldest chain) = %v, want still held (the engine would still hold it)", out)
	}
}

// TestPrefixIndexReplicaEvictsOldest: a replica at its KV capacity loses
// its least recently recorded entry per new one: 80 inserts over a capacity of 640 one-checkpoint chains remove
// exactly the 80 oldest, and the oldest chain, recorded again first,
// stays. A lowered capacity drains an entry per insert.
func TestPrefixIndexReplicaEvictsOldest(t *testing.T) {
	const capacity, over = 640, 80
	x := NewIndex(IndexConfig{BlockChars: 64, Stride: 4, MaxEntries: 1 << 16, MaxReplicas: 2})
	x.SetCapacityTokens(0, 16*4*capacity)
	held := func(i int) bool {
		out := make([]int, 2)
		x.Lookup(chainN(uint64(i), 0, 4, 4), out)
		return out[0] > 0
	}
	for i := range capacity {
		x.Record(0, chainN(uint64(i), 0, 4, 4))
	}
	x.Record(0, chainN(0, 0, 4, 4)) // the oldest, now the newest
	for i := capacity; i < capacity+over; i++ {
		x.Record(0, chainN(uint64(i), 0, 4, 4))
		if got := x.count[0]; got != capacity {
			t.Fatalf("after recording chain %d: replica 0 holds %d checkpoints, want %d", i, got, capacity)
		}
	}
	for i := range capacity + over {
		if want := i == 0 || i > over; held(i) != want {
			t.Errorf("chain %d held = %v, want %v (the %d oldest go, chain 0 was recorded again)", i, held(i), want, over)
		}
	}
	x.SetCapacityTokens(0, 16*4*(capacity-10))
	for i := range 10 {
		x.Record(0, chainN(uint64(10_000+i), 0, 4, 4))
	}
	if got := x.count[0]; got != capacity-10 {
		t.Errorf("10 inserts after lowering the capacity by 10: replica 0 holds %d, want %d", got, capacity-10)
	}
}
