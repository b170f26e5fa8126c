package prefix

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuroute/gpuroute/scoring/le"
)

// TestBlockHashSpec: blockHash deals the block's little-endian words to
// four lanes in turn (word j to lane j%4), the block zero-padded to a
// multiple of 32 bytes, and joins the lanes.
func TestBlockHashSpec(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	spec := func(b []byte) uint64 {
		padded := make([]byte, (len(b)+31)/32*32)
		copy(padded, b)
		lanes := [4]uint64{laneK0, laneK1, laneK2, laneK3}
		for j := 0; j < len(padded)/8; j++ {
			lanes[j%4] = mixWord(lanes[j%4], le.Uint64(padded, j*8))
		}
		return joinLanes(lanes[0], lanes[1], lanes[2], lanes[3])
	}
	tests := []struct {
		name string
		size int
	}{
		{name: "minimum", size: 8},
		{name: "one byte past a word", size: 9},
		{name: "odd", size: 13},
		{name: "one stripe", size: 32},
		{name: "stripe and a bit", size: 33},
		{name: "default", size: 64},
		{name: "not a word multiple", size: 100},
		{name: "maximum", size: MaxBlockChars},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := make([]byte, tt.size)
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			if got, want := blockHash(b), spec(b); got != want {
				t.Fatalf("blockHash(%d bytes) = %#x, want %#x", tt.size, got, want)
			}
		})
	}
}

// TestPrefixHasherOrder: block i's entry covers blocks 0..i in order. A
// changed or moved block changes its own entry and every later one, and
// leaves earlier entries alone; swapping two blocks changes the chain from
// the first of them on. Run for the straight-line 64-byte path and the
// generic one.
func TestPrefixHasherOrder(t *testing.T) {
	for _, bc := range []int{64, 16, 13} {
		block := func(c byte) string { return strings.Repeat(string(c), bc-1) + "." }
		a, b, c, d, e := block('a'), block('b'), block('c'), block('d'), block('e')
		tests := []struct {
			name   string
			x, y   string
			common int // leading equal entries; all later entries differ
		}{
			{name: "equal texts", x: a + b + c + d, y: a + b + c + d, common: 4},
			{name: "last block differs", x: a + b + c + d, y: a + b + c + e, common: 3},
			{name: "second block differs", x: a + b + c + d, y: a + e + c + d, common: 1},
			{name: "first two blocks swapped", x: a + b + c + d, y: b + a + c + d, common: 0},
			{name: "middle blocks swapped", x: a + b + c + d, y: a + c + b + d, common: 1},
			{name: "repeated block moved", x: a + a + b + b, y: a + b + a + b, common: 1},
			{name: "prefix of the other", x: a + b + c, y: a + b + c + d, common: 3},
		}
		for _, tt := range tests {
			t.Run(tt.name+"/"+strconv.Itoa(bc), func(t *testing.T) {
				var hx, hy Hasher
				hx.Init(bc, 0)
				hy.Init(bc, 0)
				hx.Reset("m", "")
				hy.Reset("m", "")
				hx.WriteString(tt.x)
				hy.WriteString(tt.y)
				cx, cy := hx.Chain(), hy.Chain()
				for i := range min(len(cx), len(cy)) {
					if same := cx[i] == cy[i]; same != (i < tt.common) {
						t.Fatalf("%d-byte blocks: Chain()[%d] equal = %v, want %v (common %d)", bc, i, same, !same, tt.common)
					}
				}
			})
		}
	}
}

// TestPrefixHasherNearDuplicates: prompts that differ in one or two bytes
// of one block (templated prompts with a changed digit) all get distinct
// entries, both for the changed block and for a fixed block after it. A
// structured weakness in the lanes or the combine (a byte whose change
// reaches only a few bits) would show up as collisions here.
func TestPrefixHasherNearDuplicates(t *testing.T) {
	for _, bc := range []int{64, 48} {
		base := []byte(strings.Repeat("User 12345 asked about order #0042. ", 4)[:bc])
		tail := []byte(strings.Repeat("z", bc))
		var h Hasher
		h.Init(bc, 0)
		firsts := make(map[uint64]bool, bc*256)
		seconds := make(map[uint64]bool, bc*256)
		b := append([]byte(nil), base...)
		for pos := range bc {
			for v := range 256 {
				if byte(v) == base[pos] && pos > 0 {
					continue // the unchanged block once, at pos 0
				}
				b[pos] = byte(v)
				h.Reset("m", "")
				h.Write(b)
				h.Write(tail)
				c := h.Chain()
				if firsts[c[0]] || seconds[c[1]] {
					t.Fatalf("%d-byte blocks: byte %d set to %#x repeats an earlier entry", bc, pos, v)
				}
				firsts[c[0]], seconds[c[1]] = true, true
			}
			b[pos] = base[pos]
		}
		// Two bytes, one bit each, in every pair of positions.
		for p := range bc {
			for q := p + 1; q < bc; q++ {
				for _, bit := range []byte{0x01, 0x40} {
					b[p] ^= bit
					b[q] ^= bit
					h.Reset("m", "")
					h.Write(b)
					h.Write(tail)
					c := h.Chain()
					if firsts[c[0]] || seconds[c[1]] {
						t.Fatalf("%d-byte blocks: bit %#x flipped at bytes %d and %d repeats an earlier entry", bc, bit, p, q)
					}
					firsts[c[0]], seconds[c[1]] = true, true
					b[p] ^= bit
					b[q] ^= bit
				}
			}
		}
	}
}

// TestPrefixHasherStreamingSizes: split writes give the chain of one write
// for block sizes through the generic path.
func TestPrefixHasherStreamingSizes(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	text := make([]byte, 9000)
	for i := range text {
		text[i] = byte(' ' + rng.IntN(90))
	}
	for _, bc := range []int{8, 13, 100, 4096} {
		var whole, parts Hasher
		whole.Init(bc, 0)
		parts.Init(bc, 0)
		whole.Reset("m", "")
		whole.Write(text)
		parts.ResetDeferred()
		for rest := text; len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(300))
			parts.Write(rest[:n])
			rest = rest[n:]
		}
		parts.SetSeed("m", "")
		if !equalChains(whole.Chain(), parts.Chain()) || len(whole.Chain()) != len(text)/bc {
			t.Fatalf("%d-byte blocks: split writes give %d entries, one write %d, want equal chains of %d", bc, len(parts.Chain()), len(whole.Chain()), len(text)/bc)
		}
	}
}
