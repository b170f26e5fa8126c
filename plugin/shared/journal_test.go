package shared

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"testing"
)

type jEntry struct {
	seq     uint64
	replica int
	chain   []uint64
}

// testChain is the chain the tests append as entry seq: its first block
// names the seq, so exported entries (which carry no seq) can be traced.
func testChain(seq uint64, blocks int) []uint64 {
	c := make([]uint64, blocks)
	for i := range c {
		c[i] = seq*100 + uint64(i)
	}
	return c
}

// testJournal appends n entries (seq k on replica k%5, k%4+1 blocks) to a
// fresh journal of the given shape.
func testJournal(capacity, maxBlocks, n int) *Journal {
	j := NewJournal(capacity, maxBlocks)
	j.Reset(42, 77)
	for k := 1; k <= n; k++ {
		j.Append(k%5, testChain(uint64(k), k%4+1))
	}
	return j
}

func journalEntries(j *Journal, from uint64) []jEntry {
	var got []jEntry
	j.Each(from, func(seq uint64, r int, c []uint64) { got = append(got, jEntry{seq, r, slices.Clone(c)}) })
	return got
}

func checkEntries(t *testing.T, what string, got, want []jEntry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
	for i := range want {
		if got[i].seq != want[i].seq || got[i].replica != want[i].replica || !slices.Equal(got[i].chain, want[i].chain) {
			t.Fatalf("%s = %v, want %v", what, got, want)
		}
	}
}

func encJournal(t testing.TB, j *Journal) []byte {
	t.Helper()
	b, err := j.AppendBinary(nil)
	if err != nil {
		t.Fatalf("AppendBinary = %v", err)
	}
	return b
}

func TestJournalAppend(t *testing.T) {
	j := NewJournal(3, 2)
	if j.First() != 1 || j.Next() != 1 || j.Len() != 0 || j.Cap() != 3 || j.MaxBlocks() != 2 {
		t.Fatalf("new journal First, Next, Len, Cap, MaxBlocks = %d, %d, %d, %d, %d; want 1, 1, 0, 3, 2",
			j.First(), j.Next(), j.Len(), j.Cap(), j.MaxBlocks())
	}
	j.Append(0, []uint64{1, 2, 3}) // seq 1, truncated to 2 blocks
	j.Append(1, nil)               // ignored
	j.Append(-1, []uint64{9})      // ignored
	j.Append(65536, []uint64{9})   // ignored: beyond the u16
	j.Append(65535, []uint64{4})   // seq 2
	checkEntries(t, "Each(0)", journalEntries(j, 0), []jEntry{{1, 0, []uint64{1, 2}}, {2, 65535, []uint64{4}}})
	// Overflow: 5 more into 3 slots keep seqs 5..7, oldest first.
	for k := uint64(3); k <= 7; k++ {
		j.Append(int(k), []uint64{k})
	}
	if j.First() != 5 || j.Next() != 8 || j.Len() != 3 {
		t.Fatalf("after 7 appends into 3: First, Next, Len = %d, %d, %d; want 5, 8, 3", j.First(), j.Next(), j.Len())
	}
	want := []jEntry{{5, 5, []uint64{5}}, {6, 6, []uint64{6}}, {7, 7, []uint64{7}}}
	for _, tc := range []struct {
		name string
		from uint64
		want []jEntry
	}{
		{name: "zero", from: 0, want: want},
		{name: "before first", from: 2, want: want},
		{name: "first", from: 5, want: want},
		{name: "middle", from: 6, want: want[1:]},
		{name: "last", from: 7, want: want[2:]},
		{name: "next", from: 8, want: nil},
		{name: "beyond", from: 100, want: nil},
		{name: "max", from: math.MaxUint64, want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) { checkEntries(t, "Each", journalEntries(j, tc.from), tc.want) })
	}
	j.Reset(9, 10)
	if j.First() != 1 || j.Next() != 1 || j.Len() != 0 || j.Epoch != 9 || j.ConfigID != 10 || journalEntries(j, 0) != nil {
		t.Fatalf("after Reset(9, 10): First, Next, Len, Epoch, ConfigID = %d, %d, %d, %d, %d; want 1, 1, 0, 9, 10",
			j.First(), j.Next(), j.Len(), j.Epoch, j.ConfigID)
	}

	// A zero-capacity journal numbers and drops every entry.
	for _, z := range []*Journal{{}, NewJournal(0, 4), NewJournal(4, 0)} {
		z.Append(1, []uint64{1})
		z.Append(2, []uint64{2})
		if z.First() != 3 || z.Next() != 3 || z.Len() != 0 || journalEntries(z, 0) != nil {
			t.Fatalf("zero-capacity journal after 2 appends: First, Next, Len = %d, %d, %d; want 3, 3, 0", z.First(), z.Next(), z.Len())
		}
	}
	if NewJournal(1, 1<<20).MaxBlocks() != MaxJournalBlocks {
		t.Fatalf("NewJournal(1, 1<<20).MaxBlocks() = %d, want %d", NewJournal(1, 1<<20).MaxBlocks(), MaxJournalBlocks)
	}
}

func TestJournalCodec(t *testing.T) {
	for _, tc := range []struct {
		name                string
		capacity, maxBlocks int
		appends             int
	}{
		{name: "empty", capacity: 4, maxBlocks: 4, appends: 0},
		{name: "partial", capacity: 4, maxBlocks: 4, appends: 3},
		{name: "full", capacity: 4, maxBlocks: 4, appends: 4},
		{name: "wrapped", capacity: 4, maxBlocks: 4, appends: 11},
		{name: "truncated chains", capacity: 8, maxBlocks: 2, appends: 20},
		{name: "zero capacity", capacity: 0, maxBlocks: 0, appends: 5},
		{name: "large", capacity: 256, maxBlocks: 64, appends: 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := testJournal(tc.capacity, tc.maxBlocks, tc.appends)
			b := encJournal(t, in)
			if len(b) != in.EncodedLen() {
				t.Fatalf("len(AppendBinary) = %d, EncodedLen = %d", len(b), in.EncodedLen())
			}
			out := NewJournal(max(tc.capacity, 1), max(tc.maxBlocks, 1))
			out.Append(3, []uint64{3}) // decode replaces content
			if err := out.Decode(b); err != nil {
				t.Fatalf("Decode(AppendBinary(%s)) = %v", tc.name, err)
			}
			if out.Epoch != 42 || out.ConfigID != 77 || out.First() != in.First() || out.Next() != in.Next() || out.Len() != in.Len() {
				t.Fatalf("Decode: Epoch, ConfigID, First, Next, Len = %d, %d, %d, %d, %d; want 42, 77, %d, %d, %d",
					out.Epoch, out.ConfigID, out.First(), out.Next(), out.Len(), in.First(), in.Next(), in.Len())
			}
			checkEntries(t, "decoded entries", journalEntries(out, 0), journalEntries(in, 0))
			if again := encJournal(t, out); !bytes.Equal(again, b) {
				t.Fatalf("AppendBinary(Decode(b)) = %x, want %x", again, b)
			}
			// Appending continues the decoded numbering.
			out.Append(1, []uint64{5})
			if out.Next() != in.Next()+1 {
				t.Fatalf("Next after Decode+Append = %d, want %d", out.Next(), in.Next()+1)
			}
		})
	}
}

// TestJournalDecodeLarger: a writer with a larger capacity or longer chains
// (another build) decodes into the reader's shape: the newest entries, chains
// truncated, numbering kept.
func TestJournalDecodeLarger(t *testing.T) {
	in := testJournal(10, 4, 12) // seqs 3..12
	out := NewJournal(3, 2)
	if err := out.Decode(encJournal(t, in)); err != nil {
		t.Fatalf("Decode = %v", err)
	}
	var want []jEntry
	for seq := uint64(10); seq <= 12; seq++ {
		c := testChain(seq, int(seq%4+1))
		want = append(want, jEntry{seq, int(seq % 5), c[:min(len(c), 2)]})
	}
	checkEntries(t, "Decode(10 entries) into capacity 3", journalEntries(out, 0), want)
	if out.First() != 10 || out.Next() != 13 {
		t.Fatalf("First, Next = %d, %d; want 10, 13", out.First(), out.Next())
	}
}

func TestJournalDecodeErrors(t *testing.T) {
	good := encJournal(t, testJournal(4, 4, 3)) // entries of 4, 1, 2 blocks
	set := func(off int, v ...byte) []byte { b := bytes.Clone(good); copy(b[off:], v); return b }
	const firstAt, countAt = headerLen + 16, headerLen + 24
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{name: "empty", in: nil, want: ErrShort},
		{name: "header cut", in: good[:journalHeaderLen-1], want: ErrShort},
		{name: "entry head cut", in: good[:journalHeaderLen+3], want: ErrShort},
		{name: "blocks cut", in: good[:len(good)-1], want: ErrShort},
		{name: "count beyond bytes", in: set(countAt, 0xff, 0xff, 0xff, 0xff), want: ErrShort},
		{name: "count one more", in: set(countAt, 4), want: ErrShort},
		{name: "nblocks beyond bytes", in: set(journalHeaderLen+2, 0xff, 0xff), want: ErrShort},
		{name: "trailing", in: append(bytes.Clone(good), 0), want: ErrInvalid},
		{name: "first zero", in: set(firstAt, 0, 0, 0, 0, 0, 0, 0, 0), want: ErrInvalid},
		{name: "seq overflow", in: set(firstAt, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), want: ErrInvalid},
		{name: "empty chain", in: set(journalHeaderLen+2, 0, 0), want: ErrInvalid},
		{name: "version", in: set(4, Version+1), want: ErrVersion},
		{name: "magic", in: set(0, 'g'), want: ErrMagic},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := testJournal(2, 2, 5)
			before := encJournal(t, j)
			if err := j.Decode(tc.in); !errors.Is(err, tc.want) {
				t.Fatalf("Decode(%s) = %v, want %v", tc.name, err, tc.want)
			}
			if after := encJournal(t, j); !bytes.Equal(after, before) || j.Next() != 6 {
				t.Fatalf("Decode(%s) changed the journal to %x", tc.name, after)
			}
		})
	}
	// The largest numbering that does not overflow decodes, and Append then
	// refuses to wrap the sequence numbers.
	j := NewJournal(4, 4)
	top := set(firstAt, 0xfc, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff) // first 2^64-4, 3 entries
	if err := j.Decode(top); err != nil || j.Next() != math.MaxUint64 {
		t.Fatalf("Decode(first 2^64-4, 3 entries) = %v, Next %d; want nil, MaxUint64", err, j.Next())
	}
	j.Append(1, []uint64{1})
	if j.Next() != math.MaxUint64 || j.Len() != 3 {
		t.Fatalf("Append at Next MaxUint64: Next, Len = %d, %d; want unchanged", j.Next(), j.Len())
	}
}

func TestJournalAllocs(t *testing.T) {
	j := testJournal(256, 64, 300)
	chain := testChain(1, 100)
	buf := make([]byte, 0, 1<<20)
	var err error
	if n := testing.AllocsPerRun(100, func() {
		for i := range 300 { // wraps
			j.Append(i%64, chain[:i%100])
		}
	}); n != 0 {
		t.Fatalf("Journal.Append allocs = %v, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { buf, err = j.AppendBinary(buf[:0]) }); n != 0 || err != nil {
		t.Fatalf("Journal.AppendBinary allocs = %v, err %v; want 0, nil", n, err)
	}
	out, small := NewJournal(256, 64), NewJournal(16, 4)
	if n := testing.AllocsPerRun(100, func() {
		if err := out.Decode(buf); err != nil {
			t.Fatal(err)
		}
		if err := small.Decode(buf); err != nil { // keeps the newest 16, truncated
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("Journal.Decode allocs = %v, want 0", n)
	}
	sum := 0
	if n := testing.AllocsPerRun(100, func() {
		j.Each(j.First()+10, func(seq uint64, r int, c []uint64) { sum += r + len(c) })
	}); n != 0 {
		t.Fatalf("Journal.Each allocs = %v, want 0", n)
	}
}

func BenchmarkJournalAppend(b *testing.B) {
	j := NewJournal(256, 64)
	chain := testChain(1, 32)
	b.ReportAllocs()
	for b.Loop() {
		j.Append(3, chain)
	}
}

// 256 entries of 32 blocks: a journal of a few seconds of traffic.
func benchJournal() *Journal {
	j := NewJournal(256, 64)
	for k := range 256 {
		j.Append(k%16, testChain(uint64(k), 32))
	}
	return j
}

func BenchmarkJournalEncode256(b *testing.B) {
	j := benchJournal()
	buf := make([]byte, 0, j.EncodedLen())
	b.ReportAllocs()
	b.SetBytes(int64(j.EncodedLen()))
	for b.Loop() {
		buf, _ = j.AppendBinary(buf[:0])
	}
}

func BenchmarkJournalDecode256(b *testing.B) {
	buf := encJournal(b, benchJournal())
	j := NewJournal(256, 64)
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if err := j.Decode(buf); err != nil {
			b.Fatal(err)
		}
	}
}

func TestJournalEpoch(t *testing.T) {
	j := NewJournal(4, 2)
	j.Reset(0xfeed, 7)
	j.Append(1, []uint64{1, 2})
	b, _ := j.AppendBinary(nil)
	tests := []struct {
		name string
		in   []byte
		want uint64
		ok   bool
	}{
		{"journal", b, 0xfeed, true},
		{"header only", b[:journalHeaderLen], 0xfeed, true},
		{"cut in the epoch", b[:headerLen+3], 0, false},
		{"other record", []byte("GRWK\x03" + string(b[headerLen:])), 0, false},
		{"empty", nil, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, ok := JournalEpoch(tt.in); got != tt.want || ok != tt.ok {
				t.Errorf("JournalEpoch(%s) = %#x, %v, want %#x, %v", tt.name, got, ok, tt.want, tt.ok)
			}
		})
	}
}
