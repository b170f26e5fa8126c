package prefix

import (
	"slices"
	"strings"
	"testing"
)

// hashWhole hashes text in one Hasher, seeded with model, and returns its
// chain and character count.
func hashWhole(blockChars, maxBlocks int, model, text string) ([]uint64, int64) {
	var h Hasher
	h.Init(blockChars, maxBlocks)
	h.Reset(model, "")
	h.Write([]byte(text))
	return slices.Clone(h.Chain()), h.Chars()
}

// TestContinuationExtendsChain: a text hashed up to a split, saved, and
// continued in other Hashers (piece by piece, a Save and a Resume around
// each piece) gives the chain of the whole text hashed at once, block for
// block, whatever the split and the block size, and stops at the chain bound.
func TestContinuationExtendsChain(t *testing.T) {
	text := strings.Repeat("The answer quotes the question. ", 40) // 1,280 bytes
	tests := []struct {
		name       string
		blockChars int
		maxBlocks  int
		split      int   // where the first Hasher stops
		pieces     []int // lengths of the continued pieces
		deferred   bool  // the first Hasher is seeded after its text
	}{
		{name: "at a block boundary", blockChars: 64, split: 128, pieces: []int{1152}},
		{name: "inside a block", blockChars: 64, split: 100, pieces: []int{1180}},
		{name: "token by token", blockChars: 64, split: 70, pieces: slices.Repeat([]int{5}, 242)},
		{name: "seed after the prompt", blockChars: 64, split: 300, pieces: []int{1, 63, 64, 852}, deferred: true},
		{name: "no full block saved", blockChars: 64, split: 10, pieces: []int{1270}},
		{name: "small blocks", blockChars: 8, split: 13, pieces: []int{7, 9, 1251}},
		{name: "chain bound", blockChars: 64, maxBlocks: 12, split: 500, pieces: []int{780}},
		{name: "bound reached before", blockChars: 64, maxBlocks: 4, split: 500, pieces: []int{780}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, wantChars := hashWhole(tt.blockChars, tt.maxBlocks, "m", text)
			var first Hasher
			first.Init(tt.blockChars, tt.maxBlocks)
			if tt.deferred {
				first.ResetDeferred()
				first.Write([]byte(text[:tt.split]))
				first.SetSeed("m", "")
			} else {
				first.Reset("m", "")
				first.Write([]byte(text[:tt.split]))
			}
			got := slices.Clone(first.Chain())
			var c Continuation
			first.Save(&c)
			at := tt.split
			for i, n := range tt.pieces {
				var next Hasher // a fresh Hasher each piece: nothing carries over but c
				next.Init(tt.blockChars, tt.maxBlocks)
				from := c.Blocks()
				if !next.Resume(&c) {
					t.Fatalf("piece %d: Resume = false", i)
				}
				next.Write([]byte(text[at : at+n]))
				at += n
				got = append(got, next.Chain()[from:]...)
				next.Save(&c)
				if i == len(tt.pieces)-1 && next.Chars() != wantChars {
					t.Errorf("Chars after the last piece = %d, want %d", next.Chars(), wantChars)
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("continued chain = %d blocks, whole = %d blocks (equal prefix %d)",
					len(got), len(want), commonPrefix(got, want))
			}
			if c.Blocks() != len(want) {
				t.Errorf("Blocks() after the last piece = %d, want %d", c.Blocks(), len(want))
			}
		})
	}
}

func commonPrefix(a, b []uint64) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// TestResumeDeclines: an empty continuation, or one saved with another
// block size or a longer chain bound, leaves the Hasher as it was.
func TestResumeDeclines(t *testing.T) {
	var saved Hasher
	saved.Init(64, 0)
	saved.Reset("m", "")
	saved.Write([]byte(strings.Repeat("x", 1000)))
	var c Continuation
	saved.Save(&c)
	tests := []struct {
		name       string
		c          *Continuation
		blockChars int
		maxBlocks  int
	}{
		{name: "empty", c: &Continuation{}, blockChars: 64},
		{name: "another block size", c: &c, blockChars: 32},
		{name: "a shorter chain bound", c: &c, blockChars: 64, maxBlocks: 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Hasher
			h.Init(tt.blockChars, tt.maxBlocks)
			h.Reset("other", "")
			h.Write([]byte("abc"))
			seed, chars := h.Seed(), h.Chars()
			if h.Resume(tt.c) {
				t.Fatalf("Resume(%s) = true, want false", tt.name)
			}
			if h.Seed() != seed || h.Chars() != chars || len(h.Chain()) != 0 {
				t.Errorf("Resume(%s) changed the Hasher", tt.name)
			}
		})
	}
}

func TestContinuationAllocs(t *testing.T) {
	var h Hasher
	h.Init(64, 0)
	var c Continuation
	text := []byte(strings.Repeat("token ", 100))
	h.Reset("m", "")
	h.Write(text[:70])
	h.Save(&c) // the first Save sizes c's partial block
	allocs := testing.AllocsPerRun(100, func() {
		h.Resume(&c)
		h.Write(text[:5])
		h.Save(&c)
	})
	if allocs != 0 {
		t.Errorf("Resume+Write+Save allocs = %v, want 0", allocs)
	}
}

// FuzzContinuation: a text cut anywhere, continued in pieces of any
// lengths, gives the chain of the whole text.
func FuzzContinuation(f *testing.F) {
	f.Add([]byte(strings.Repeat("abcdefgh", 40)), uint16(77), uint8(9), uint8(16))
	f.Add([]byte("short"), uint16(2), uint8(1), uint8(8))
	f.Fuzz(func(t *testing.T, text []byte, split uint16, piece, blockChars uint8) {
		bc := 8 + int(blockChars%57)
		at := int(split) % (len(text) + 1)
		step := int(piece)%97 + 1
		want, _ := hashWhole(bc, 0, "m", string(text))
		var h Hasher
		h.Init(bc, 0)
		h.Reset("m", "")
		h.Write(text[:at])
		got := slices.Clone(h.Chain())
		var c Continuation
		h.Save(&c)
		for at < len(text) {
			n := min(step, len(text)-at)
			from := c.Blocks()
			h.Resume(&c)
			h.Write(text[at : at+n])
			got = append(got, h.Chain()[from:]...)
			h.Save(&c)
			at += n
		}
		if !slices.Equal(got, want) {
			t.Fatalf("continued chain of %d bytes (block %d, split %d, pieces %d) differs from the whole text's",
				len(text), bc, int(split)%(len(text)+1), step)
		}
	})
}
