package prefix

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// memoText returns n bytes of lowercase text from rng.
func memoText(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(rng.IntN(26))
	}
	return b
}

// remember has m record text written after head on a fresh unseeded
// prompt of its hasher.
func remember(m *Memo, head, text []byte) {
	m.h.ResetDeferred()
	m.h.Write(head)
	m.Begin()
	m.Write(text)
	m.End(text)
}

// sameHasher fails unless a and b hold the same chain and characters and
// stay equal when the same suffix is written to both (which tests the
// unseeded chain value and the partial block).
func sameHasher(t *testing.T, what string, a, b *Hasher, suffix []byte) {
	t.Helper()
	if a.Chars() != b.Chars() || !slices.Equal(a.Chain(), b.Chain()) {
		t.Fatalf("%s: chars %d, chain %d blocks; want chars %d, %d blocks, equal chains",
			what, a.Chars(), len(a.Chain()), b.Chars(), len(b.Chain()))
	}
	a.Write(suffix)
	b.Write(suffix)
	if !slices.Equal(a.Chain(), b.Chain()) {
		t.Fatalf("%s: chains differ after a further %d bytes", what, len(suffix))
	}
}

// TestMemoReplayEqualsWriting: a replayed step leaves the hasher exactly as
// writing the text would, for texts of any length after a head of any
// length (so any partial block before and after), seeded before or after.
func TestMemoReplayEqualsWriting(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		head := memoText(rng, rng.IntN(300))
		text := memoText(rng, 64+rng.IntN(9000))
		suffix := memoText(rng, rng.IntN(200))
		src := append(slices.Clone(text), '"') // the source as a JSON string's contents and quote
		var m Memo
		var rec Hasher
		m.Init(&rec, 4, 1<<20, 64)
		remember(&m, head, text)

		var want, got Hasher
		seeded := round%2 == 1
		for _, h := range []*Hasher{&want, &got} {
			h.ResetDeferred()
			if seeded {
				h.SetSeed("m", "a")
			}
			h.Write(head)
		}
		want.Write(text)
		m.h = &got
		n, chars, ok := m.Recall(src, '"', 0)
		if !ok || n != len(text) || chars != len(text) {
			t.Fatalf("round %d: Replay = %d, %d, %v; want %d, %d, true", round, n, chars, ok, len(text), len(text))
		}
		sameHasher(t, "replay", &got, &want, suffix)
		var plain Hasher // End changed nothing of the recording hasher
		plain.ResetDeferred()
		plain.Write(head)
		plain.Write(text)
		sameHasher(t, "recorder", &rec, &plain, suffix)
	}
}

// TestMemoReplayDeclines: a replay needs the same source, followed by the
// end byte, from the same hasher state, with room in the chain; otherwise it
// changes nothing.
func TestMemoReplayDeclines(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	head, text := memoText(rng, 100), memoText(rng, 5000)
	record := func(m *Memo) {
		var h Hasher
		m.Init(&h, 4, 1<<20, 64)
		remember(m, head, text)
	}
	changed := func(b []byte, i int) []byte {
		c := slices.Clone(b)
		c[i] ^= 1
		return c
	}
	tests := []struct {
		name  string
		head  []byte
		rest  []byte
		block int // block chars, 0 for the default
		max   int // chain bound, 0 for the default
	}{
		{name: "same", head: head, rest: append(slices.Clone(text), '"', '}')},
		{name: "first byte differs", head: head, rest: append(changed(text, 0), '"')},
		{name: "middle byte differs", head: head, rest: append(changed(text, 2500), '"')},
		{name: "last byte differs", head: head, rest: append(changed(text, len(text)-1), '"')},
		{name: "source continues", head: head, rest: append(slices.Clone(text), 'x', '"')},
		{name: "source cut", head: head, rest: slices.Clone(text)},
		{name: "another head", head: changed(head, 10), rest: append(slices.Clone(text), '"')},
		{name: "head in another block", head: head[:99], rest: append(slices.Clone(text), '"')},
		{name: "other block size", head: head, rest: append(slices.Clone(text), '"'), block: 32},
		{name: "chain full", head: head, rest: append(slices.Clone(text), '"'), max: 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m Memo
			record(&m)
			var h, before Hasher
			for _, x := range []*Hasher{&h, &before} {
				x.Init(tt.block, tt.max)
				x.ResetDeferred()
				x.Write(tt.head)
			}
			m.h = &h
			_, _, ok := m.Recall(tt.rest, '"', 0)
			if want := tt.name == "same"; ok != want {
				t.Fatalf("Replay ok = %v, want %v", ok, want)
			}
			if !ok {
				sameHasher(t, "declined", &h, &before, text[:300])
			}
		})
	}
}

// TestMemoRecordsOnlyExactSteps: nothing is remembered for a short source,
// a seeded hasher, or a text that ran into the chain's bound.
func TestMemoRecordsOnlyExactSteps(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	text := memoText(rng, 6000)
	tests := []struct {
		name   string
		minLen int
		seeded bool
		max    int
		want   bool
	}{
		{name: "recorded", minLen: 4096, want: true},
		{name: "short", minLen: 8192},
		{name: "seeded", minLen: 4096, seeded: true},
		{name: "chain bound", minLen: 4096, max: 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m Memo
			var h Hasher
			m.Init(&h, 4, 1<<20, tt.minLen)
			h.Init(0, tt.max)
			h.ResetDeferred()
			if tt.seeded {
				h.SetSeed("m", "")
			}
			m.Begin()
			m.Write(text)
			m.End(text)
			var fresh Hasher
			fresh.ResetDeferred()
			m.h = &fresh
			_, _, ok := m.Recall(append(slices.Clone(text), '"'), '"', 0)
			if ok != tt.want {
				t.Fatalf("Replay after recording ok = %v, want %v", ok, tt.want)
			}
		})
	}
}

// TestMemoEvictsLeastRecentlyUsed: over its slots or its byte budget the
// memo forgets the step used longest ago, and the budget bounds the
// capacity it holds.
func TestMemoEvictsLeastRecentlyUsed(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	texts := make([][]byte, 4)
	for i := range texts {
		texts[i] = memoText(rng, 5000)
	}
	tests := []struct {
		name   string
		steps  int
		budget int
		want   []bool // which texts replay after recording 0, 1, 2, using 0, recording 3
	}{
		{name: "slots", steps: 3, budget: 1 << 20, want: []bool{true, false, true, true}},
		{name: "budget", steps: 8, budget: 15000, want: []bool{true, false, true, true}},
		{name: "room for all", steps: 8, budget: 20000, want: []bool{true, true, true, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m Memo
			var h Hasher
			m.Init(&h, tt.steps, tt.budget, 64)
			replay := func(text []byte) bool {
				h.ResetDeferred()
				_, _, ok := m.Recall(append(slices.Clone(text), '"'), '"', 0)
				return ok
			}
			remember(&m, nil, texts[0])
			remember(&m, nil, texts[1])
			remember(&m, nil, texts[2])
			if !replay(texts[0]) {
				t.Fatal("text 0 not replayed before the eviction")
			}
			remember(&m, nil, texts[3])
			for i, want := range tt.want {
				if got := replay(texts[i]); got != want {
					t.Errorf("replay(text %d) = %v, want %v", i, got, want)
				}
			}
			if m.held > tt.budget {
				t.Errorf("held %d bytes, budget %d", m.held, tt.budget)
			}
		})
	}
}

// TestSameBytes: both comparisons find a difference at any byte, for
// lengths around their word, stride and tail sizes.
func TestSameBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, same := range []struct {
		name string
		f    func(a, b []byte) bool
	}{{"SameBytes", SameBytes}, {"sameSource", sameSource}} {
		for _, n := range []int{0, 1, 7, 8, 31, 63, 64, 65, 100, 127, 128, 129, 135, 255, 256, 1023, 1024, 1025, 1100, 3000} {
			a := memoText(rng, n)
			if !same.f(a, slices.Clone(a)) {
				t.Fatalf("%s(%d bytes, a copy) = false", same.name, n)
			}
			for i := range n {
				b := slices.Clone(a)
				b[i] ^= 0x80
				if same.f(a, b) != bytes.Equal(a, b) {
					t.Fatalf("%s with byte %d of %d changed = true", same.name, i, n)
				}
			}
			if n > 0 && same.f(a, a[:n-1]) {
				t.Fatalf("%s of %d and %d bytes = true", same.name, n, n-1)
			}
		}
	}
}

// BenchmarkMemoReplay32KB replays a 32 KB text (the comparison dominates)
// against writing it (BenchmarkPrefixHash32KB's work).
func BenchmarkMemoReplay32KB(b *testing.B) {
	rng := rand.New(rand.NewPCG(11, 12))
	text := memoText(rng, 32<<10)
	var m Memo
	var h Hasher
	m.Init(&h, 0, 0, 0)
	remember(&m, nil, text)
	rest := append(slices.Clone(text), '"')
	b.ReportAllocs()
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		h.ResetDeferred()
		if _, _, ok := m.Recall(rest, '"', 0); !ok {
			b.Fatal("no replay")
		}
	}
}

// TestMemoMatchToken: Match's token lets Recall skip comparing the text
// again, for the step Match found only: once the slot records another
// text, the token names nothing and Recall compares.
func TestMemoMatchToken(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	a, b := memoText(rng, 5000), memoText(rng, 5000)
	var m Memo
	var h Hasher
	m.Init(&h, 1, 1<<20, 64)
	restA := append(slices.Clone(a), '"')
	remember(&m, nil, a)
	n, token, ok := m.Match(restA, '"')
	if !ok || n != len(a) || token == 0 {
		t.Fatalf("Match(a) = %d, %#x, %v; want %d, a token, true", n, token, ok, len(a))
	}
	h.ResetDeferred()
	if _, _, ok := m.Recall(restA, '"', token); !ok {
		t.Fatal("Recall(a, its token) = false, want a replay")
	}
	var want Hasher
	want.ResetDeferred()
	want.Write(a)
	sameHasher(t, "replay by token", &h, &want, b[:100])

	remember(&m, nil, b) // the only slot now holds b: a's token is stale
	h.ResetDeferred()
	if _, _, ok := m.Recall(restA, '"', token); ok {
		t.Fatal("Recall(a, a token of the slot's earlier step) = true, want false (b is remembered now)")
	}
}

// BenchmarkMemoMissTemplated is a Recall and a Match that find nothing
// among 16 remembered 32 KB texts of one length that differ only near
// their end (a templated system prompt ending with the user's name or the
// date): each is checked before the text is decoded.
func BenchmarkMemoMissTemplated(b *testing.B) {
	for _, back := range []int{1, 100} { // the differing byte's distance from the end
		b.Run(strconv.Itoa(back), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(15, 16))
			text := memoText(rng, 32<<10)
			var m Memo
			var h Hasher
			m.Init(&h, DefaultMemoSteps, 1<<20, 0)
			for i := range DefaultMemoSteps {
				t := slices.Clone(text)
				t[len(t)-back] = 'A' + byte(i)
				remember(&m, nil, t)
			}
			rest := append(slices.Clone(text), '"')
			rest[len(text)-back] = '0'
			b.ReportAllocs()
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				h.ResetDeferred()
				if _, _, ok := m.Recall(rest, '"', 0); ok {
					b.Fatal("replayed a text that differs")
				}
				if _, _, ok := m.Match(rest, '"'); ok {
					b.Fatal("matched a text that differs")
				}
			}
		})
	}
}

// BenchmarkSameBytes compares two equal slices the sizes of SameBytes' uses
// in the plugin: a streamed token event with its template (150 bytes) and a
// long prompt with a remembered one (32 KB).
func BenchmarkSameBytes(b *testing.B) {
	for _, n := range []int{150, 32 << 10} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			x := memoText(rand.New(rand.NewPCG(uint64(n), 1)), n)
			y := bytes.Clone(x)
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				if !SameBytes(x, y) {
					b.Fatalf("SameBytes(x, copy of x) = false, want true")
				}
			}
		})
	}
}
