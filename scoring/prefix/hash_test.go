package prefix

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestHashStable pins values: the hash must agree across processes, VMs
// and gateways, so a change to it is a wire change.
func TestHashStable(t *testing.T) {
	tests := []struct {
		name string
		in   string
	}{
		{name: "empty", in: ""},
		{name: "short", in: "hello"},
		{name: "word", in: "10.0.0.1:8000"},
		{name: "long", in: strings.Repeat("abcdefghij", 10)},
	}
	seen := map[uint64]string{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := HashString(tt.in), HashString(tt.in)
			if a != b {
				t.Fatalf("HashString(%q) = %#x then %#x, want equal", tt.in, a, b)
			}
			if prev, ok := seen[a]; ok {
				t.Fatalf("HashString(%q) = HashString(%q) = %#x", tt.in, prev, a)
			}
			seen[a] = tt.in
		})
	}
	// Golden values: the hash is a wire format (shared data, cross-gateway
	// rendezvous); changing it must be deliberate.
	golden := []struct {
		in   string
		want uint64
	}{
		{in: "hello", want: 0xa8d6ec94fb8249d2},
		{in: strings.Repeat("abcdefghij", 10), want: 0xb912884120e871d2},
	}
	for _, g := range golden {
		if got := HashString(g.in); got != g.want {
			t.Errorf("HashString(%q) = %#x, want %#x", g.in, got, g.want)
		}
	}
}

func TestPrefixHasherStreaming(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	text := make([]byte, 5000)
	for i := range text {
		text[i] = byte('a' + rng.IntN(26))
	}
	var whole, parts Hasher
	whole.Init(64, 0)
	parts.Init(64, 0)
	whole.Reset("llama", "")
	whole.Write(text)
	for iter := 0; iter < 50; iter++ {
		parts.Reset("llama", "")
		rest := text
		for len(rest) > 0 {
			n := min(len(rest), 1+rng.IntN(200))
			if iter%2 == 0 {
				parts.Write(rest[:n])
			} else {
				parts.WriteString(string(rest[:n]))
			}
			rest = rest[n:]
		}
		if !equalChains(whole.Chain(), parts.Chain()) {
			t.Fatalf("chain of split writes differs from one write (iter %d)", iter)
		}
	}
	if got, want := len(whole.Chain()), 5000/64; got != want {
		t.Fatalf("len(Chain()) = %d, want %d full blocks", got, want)
	}
	if whole.Chars() != 5000 || whole.Tokens() != 1250 {
		t.Fatalf("Chars, Tokens = %d, %d, want 5000, 1250", whole.Chars(), whole.Tokens())
	}
}

func TestPrefixHasherChain(t *testing.T) {
	var h Hasher
	h.Init(16, 0)
	chainOf := func(model, adapter, text string) []uint64 {
		h.Reset(model, adapter)
		h.WriteString(text)
		return append([]uint64(nil), h.Chain()...)
	}
	base := chainOf("m", "", "system prompt 0123456789abcdef user question one!")
	other := chainOf("m", "", "system prompt 0123456789abcdef user question two?")
	tests := []struct {
		name   string
		a, b   []uint64
		common int
	}{
		{name: "shared prefix blocks equal", a: base, b: other, common: 2},
		{name: "adapter seeds differ", a: base, b: chainOf("m", "fr", "system prompt 0123456789abcdef user question one!"), common: 0},
		{name: "model seeds differ", a: base, b: chainOf("n", "", "system prompt 0123456789abcdef user question one!"), common: 0},
		{name: "first block change breaks chain", a: base, b: chainOf("m", "", "SYSTEM prompt 0123456789abcdef user question one!"), common: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := 0
			for c < min(len(tt.a), len(tt.b)) && tt.a[c] == tt.b[c] {
				c++
			}
			if c != tt.common {
				t.Fatalf("common blocks = %d, want %d", c, tt.common)
			}
		})
	}
	// Only full blocks count; the chain caps at maxBlocks.
	h.Init(16, 3)
	h.WriteString(strings.Repeat("x", 100))
	if len(h.Chain()) != 3 || h.Chars() != 100 {
		t.Fatalf("capped chain = %d blocks, %d chars, want 3, 100", len(h.Chain()), h.Chars())
	}
}

func TestPrefixHasherZeroValue(t *testing.T) {
	var z, h Hasher
	z.Reset("m", "fr")
	z.WriteString(strings.Repeat("y", 200))
	h.Init(DefaultBlockChars, 0)
	h.Reset("m", "fr")
	h.WriteString(strings.Repeat("y", 200))
	if !equalChains(z.Chain(), h.Chain()) || len(z.Chain()) != 3 {
		t.Fatalf("zero-value chain = %x, want %x", z.Chain(), h.Chain())
	}
}

func equalChains(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestHashAllocs(t *testing.T) {
	var h Hasher
	h.Init(64, 0)
	text := []byte(strings.Repeat("The quick brown fox jumps over the lazy dog. ", 700))
	allocs := testing.AllocsPerRun(100, func() {
		h.Reset("llama-3-8b", "fr")
		h.Write(text[:1000])
		h.Write(text[1000:])
		h.WriteString("tail")
		_ = HashString("10.0.0.1:8000")
	})
	if allocs != 0 {
		t.Fatalf("Hasher allocs = %v, want 0", allocs)
	}
}

func BenchmarkPrefixHash32KB(b *testing.B) {
	var h Hasher
	h.Init(DefaultBlockChars, 0)
	text := make([]byte, 32<<10)
	for i := range text {
		text[i] = byte(' ' + i%90)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		h.Reset("llama-3-8b", "")
		h.Write(text)
	}
}

// TestPrefixHasherDeferredSeed: seeding after the text (ResetDeferred, then
// SetSeed) gives the chain that seeding first gives, at every split point.
func TestPrefixHasherDeferredSeed(t *testing.T) {
	text := strings.Repeat("You are a careful assistant. Answer briefly.\n", 40)
	var first, later Hasher
	first.Init(64, 0)
	later.Init(64, 0)
	tests := []struct {
		name, model, adapter string
		split                int // bytes written before SetSeed
	}{
		{name: "seed before any text", model: "m", adapter: "", split: 0},
		{name: "seed mid-block", model: "m", adapter: "fr", split: 100},
		{name: "three blocks before the seed", model: "m", adapter: "", split: 200},
		{name: "five blocks before the seed", model: "m", adapter: "fr", split: 330},
		{name: "seed after all text", model: "m", adapter: "fr", split: len(text)},
		{name: "base model after all text", model: "llama", adapter: "", split: len(text)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first.Reset(tt.model, tt.adapter)
			first.WriteString(text)
			later.ResetDeferred()
			later.WriteString(text[:tt.split])
			later.SetSeed(tt.model, tt.adapter)
			later.WriteString(text[tt.split:])
			if !equalChains(first.Chain(), later.Chain()) || first.Seed() != later.Seed() {
				t.Fatalf("SetSeed(%q, %q) after %d bytes: chain %x, want %x", tt.model, tt.adapter, tt.split, later.Chain()[:2], first.Chain()[:2])
			}
		})
	}
	// A second SetSeed keeps the first.
	later.ResetDeferred()
	later.WriteString(text)
	later.SetSeed("m", "fr")
	later.SetSeed("other", "")
	first.Reset("m", "fr")
	first.WriteString(text)
	if !equalChains(first.Chain(), later.Chain()) {
		t.Fatalf("second SetSeed re-keyed the chain")
	}
}

// TestPrefixHasherGolden pins the first chain entries of a fixed prompt.
// The chain is shared between the VMs and gateways of one build (shared
// data, checkpoints); a change here means one round of cold prefixes when
// the new module replaces the old, so make it deliberately.
func TestPrefixHasherGolden(t *testing.T) {
	var h Hasher
	h.Init(64, 0)
	h.Reset("meta-llama/Llama-3.1-8B-Instruct", "")
	h.WriteString(strings.Repeat("abcdefghij", 20))
	// Changed deliberately when blocks were hashed independently of the
	// chain (raw_i = Finalize(raw_{i-1} ^ blockHash(block_i))).
	want := []uint64{0xdc577bf67a6c91c5, 0xf37c182b94a3daf2, 0x667c11a383d46dad}
	got := h.Chain()
	for i := range want {
		if i >= len(got) || got[i] != want[i] {
			t.Fatalf("Chain() = %#x, want %#x", got, want)
		}
	}
}

// TestPrefixHasherBlocks: the chain is blockHash combined with fmix over
// the blocks and keyed with the seed, for the default block size (hashed by
// a straight-line copy of blockHash) and sizes through the generic path,
// including ones that are not multiples of 8 or 32.
func TestPrefixHasherBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	text := make([]byte, 9000)
	for j := range text {
		text[j] = byte(rng.Uint32())
	}
	for _, bc := range []int{64, 48, 8, 13, 100, 4096} {
		var h Hasher
		h.Init(bc, 0)
		h.Reset("m", "a")
		h.Write(text)
		prev := Finalize(uint64(bc) * mixK0)
		for i, got := range h.Chain() {
			prev = Finalize(prev ^ blockHash(text[i*bc:(i+1)*bc]))
			if want := Finalize(prev ^ h.Seed()); got != want {
				t.Fatalf("Chain()[%d] with %d-byte blocks = %#x, want %#x", i, bc, got, want)
			}
		}
		if len(h.Chain()) != len(text)/bc {
			t.Fatalf("len(Chain()) = %d, want %d", len(h.Chain()), len(text)/bc)
		}
	}
}

// FuzzPrefixHasher: for any text, block size, chain bound and two cut
// points, writing the text in three pieces (bytes and string) gives the
// chain and token count of one write, never more than the bound's entries,
// and never panics.
func FuzzPrefixHasher(f *testing.F) {
	f.Add([]byte("You are a helpful assistant.\nAnswer briefly."), uint16(8), uint16(0), uint16(5), uint16(17))
	f.Add(bytes.Repeat([]byte("abcdefgh"), 40), uint16(64), uint16(3), uint16(63), uint16(64))
	f.Add([]byte{0xff, 0, '"', '\\', 0x80}, uint16(13), uint16(1), uint16(0), uint16(4))
	f.Fuzz(func(t *testing.T, text []byte, blockChars, maxBlocks, cut1, cut2 uint16) {
		bc, mb := int(blockChars), int(maxBlocks)
		var whole, parts Hasher
		whole.Init(bc, mb)
		parts.Init(bc, mb)
		whole.Reset("m", "a")
		whole.Write(text)
		a := min(int(cut1), len(text))
		b := min(max(int(cut2), a), len(text))
		parts.ResetDeferred()
		parts.Write(text[:a])
		parts.WriteString(string(text[a:b]))
		parts.Write(text[b:])
		parts.SetSeed("m", "a")
		if !equalChains(whole.Chain(), parts.Chain()) || whole.Tokens() != parts.Tokens() {
			t.Fatalf("chain of %d bytes in blocks of %d cut at %d, %d: %d entries, %d tokens; one write %d, %d",
				len(text), whole.BlockChars(), a, b, len(parts.Chain()), parts.Tokens(), len(whole.Chain()), whole.Tokens())
		}
		limit := mb
		if limit <= 0 {
			limit = DefaultMaxBlocks
		}
		if want := min(len(text)/whole.BlockChars(), limit); len(whole.Chain()) != want {
			t.Fatalf("chain of %d bytes in blocks of %d (bound %d) = %d entries, want %d", len(text), whole.BlockChars(), limit, len(whole.Chain()), want)
		}
	})
}
