package shared

import (
	"bytes"
	"slices"
	"testing"

	"github.com/gpuroute/gpuroute/scoring"
)

// Fuzz targets: decoding any input either fails (leaving the receiver as it
// was) or yields a value whose encoding is exactly the input (the encodings
// are canonical), and decoding that again gives the same value.

func FuzzSnapshotDecode(f *testing.F) {
	for _, s := range []*Snapshot{testSnapshot(0, 0), testSnapshot(1, 0), testSnapshot(3, 2)} {
		b, _ := s.AppendBinary(nil)
		f.Add(b)
	}
	f.Add([]byte("GRFS\x01"))
	f.Add([]byte("GRFS\x02garbage"))
	f.Fuzz(func(t *testing.T, in []byte) {
		s := testSnapshot(2, 3) // non-empty receiver: reuse paths run
		before := testSnapshot(2, 3)
		if err := s.Decode(in); err != nil {
			if !snapEqual(s, before) {
				t.Fatalf("Decode(%q) = %v and changed the receiver", in, err)
			}
			return
		}
		out, err := s.AppendBinary(nil)
		if err != nil || !bytes.Equal(out, in) {
			t.Fatalf("AppendBinary(Decode(%q)) = %q, %v; want the input", in, out, err)
		}
		var again Snapshot
		if err := again.Decode(out); err != nil || !snapEqual(&again, s) {
			t.Fatalf("Decode(AppendBinary(x)) = %v, not x", err)
		}
	})
}

func FuzzLeaseDecode(f *testing.F) {
	b, _ := Lease{Holder: 1, ExpiresNanos: 2}.AppendBinary(nil)
	f.Add(b)
	f.Add([]byte("GRLS"))
	f.Fuzz(func(t *testing.T, in []byte) {
		l := Lease{Holder: 5, ExpiresNanos: 6}
		if err := l.Decode(in); err != nil {
			if l != (Lease{5, 6}) {
				t.Fatalf("Decode(%q) = %v and changed the lease to %+v", in, err, l)
			}
			return
		}
		out, _ := l.AppendBinary(nil)
		if !bytes.Equal(out, in) {
			t.Fatalf("AppendBinary(Decode(%q)) = %q", in, out)
		}
		// LeaseStep on any decoded lease never claims for another holder.
		next, write, _ := LeaseStep(l, true, 7, l.ExpiresNanos, 1000)
		if write && next.Holder != 7 {
			t.Fatalf("LeaseStep(%+v) writes holder %d, want 7", l, next.Holder)
		}
	})
}

func FuzzWorkRecordDecode(f *testing.F) {
	for _, n := range []int{0, 1, 4} {
		b, _ := testRecord(2, 3, 4, n).AppendBinary(nil)
		f.Add(b)
	}
	f.Add([]byte("GRWK\x01"))
	f.Fuzz(func(t *testing.T, in []byte) {
		w := testRecord(1, 1, 1, 2)
		if err := w.Decode(in); err != nil {
			if !recEqual(w, testRecord(1, 1, 1, 2)) {
				t.Fatalf("Decode(%q) = %v and changed the record", in, err)
			}
			return
		}
		out, err := w.AppendBinary(nil)
		if err != nil || !bytes.Equal(out, in) {
			t.Fatalf("AppendBinary(Decode(%q)) = %q, %v", in, out, err)
		}
		// The board accepts it under its own worker's key.
		b := Board{ConfigID: w.ConfigID}
		if err := b.Update(w.Worker, 1, in); err != nil || !recEqual(b.Record(w.Worker), w) {
			t.Fatalf("Board.Update(valid record) = %v", err)
		}
	})
}

// FuzzBoardPatch checks Board.Update's patch path (applyPatches). A board
// that held a worker's publish takes whatever value comes next under the
// key without panicking and keeps only valid figures. And when the value is
// a real later publish of that worker (the fuzz input scripts its PutEntry
// rewrites: entry and new figure per byte pair, any number of them), the
// board ends with exactly what a whole decode of it gives, whether it took
// the patches or, having missed too many, decoded it whole.
func FuzzBoardPatch(f *testing.F) {
	f.Add([]byte{5, 1})
	f.Add([]byte{5, 1, 2, 9, 5, 3})
	f.Add(bytes.Repeat([]byte{7, 2}, 12))
	f.Add([]byte("GRWK\x03garbage"))
	f.Fuzz(func(t *testing.T, in []byte) {
		w := testRecord(3, 10, 7, 8)
		w.NextPublish()
		buf, _ := w.AppendBinary(nil)
		var b Board
		b.ConfigID = 7
		if err := b.Update(3, 1, buf); err != nil {
			t.Fatal(err)
		}
		// Any value: no panic, and whatever is held stays valid.
		if b.Update(3, 2, in) == nil {
			for i := range b.Record(3).Work {
				if err := checkWork(&b.Record(3).Work[i]); err != nil {
					t.Fatalf("Update(%q) holds an invalid entry: %v", in, err)
				}
			}
		}
		// A real later publish, of entries without prefill windows but
		// one (a windowed entry is summed again by every Gather, so only
		// the others show whether patched entries are).
		for i := range w.Work[1:] {
			w.Work[1+i].RunFromNanos, w.Work[1+i].RunUntilNanos = 0, 0
		}
		w.NextPublish()
		buf, _ = w.AppendBinary(buf[:0])
		b = Board{ConfigID: 7}
		if err := b.Update(3, 1, buf); err != nil {
			t.Fatal(err)
		}
		first, _, _, _ := b.Gather(9, 20, 1<<40, len(w.Work))
		mine := slices.Clone(first)
		for k := 0; k+1 < len(in) && k < 40; k += 2 {
			i := int(in[k]) % len(w.Work)
			w.Work[i].QueuedN = int64(in[k+1])
			w.WrittenNanos++
			if !w.PutEntry(buf, i) {
				t.Fatalf("PutEntry(%d) = false", i)
			}
		}
		if err := b.Update(3, 3, buf); err != nil {
			t.Fatalf("Update(a later publish) = %v", err)
		}
		var whole WorkRecord
		if err := whole.Decode(buf); err != nil {
			t.Fatal(err)
		}
		if got := b.Record(3); !recEqual(got, &whole) || got.Seq != whole.Seq {
			t.Fatalf("after publishes %v the board holds %+v, want the whole decode %+v", in, got, &whole)
		}
		// Gather's changed entries bring a copy of its sums to Sum's.
		sum, changed, all, _ := b.Gather(9, 20, 1<<40, len(w.Work))
		if all {
			copy(mine, sum)
		}
		for _, i := range changed {
			mine[i] = sum[i]
		}
		want := make([]scoring.Work, len(w.Work))
		b.Sum(9, 20, 1<<40, want)
		if !slices.Equal(mine, want) {
			t.Fatalf("after publishes %v Gather kept %+v, want Sum's %+v", in, mine, want)
		}
	})
}

func FuzzRegistryDecode(f *testing.F) {
	var g Registry
	for _, id := range []uint64{3, 1, 2} {
		g.Add(id)
	}
	b, _ := g.AppendBinary(nil)
	f.Add(b)
	f.Add([]byte("GRWR\x01\x00\x00"))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := Registry{Workers: []uint64{9}}
		if err := r.Decode(in); err != nil {
			if len(r.Workers) != 1 || r.Workers[0] != 9 {
				t.Fatalf("Decode(%q) = %v and changed the registry to %v", in, err, r.Workers)
			}
			return
		}
		out, err := r.AppendBinary(nil)
		if err != nil || !bytes.Equal(out, in) {
			t.Fatalf("AppendBinary(Decode(%q)) = %q, %v", in, out, err)
		}
		// Add then Remove of a new id restores the same encoding.
		id := uint64(len(in)) + 1
		if !r.Contains(id) && r.Add(id) {
			r.Remove(id)
			if out2, _ := r.AppendBinary(nil); !bytes.Equal(out2, in) {
				t.Fatalf("Add+Remove(%d) changed %q to %q", id, in, out2)
			}
		}
	})
}

func FuzzJournalDecode(f *testing.F) {
	for _, n := range []int{0, 3, 9} {
		f.Add(encJournal(f, testJournal(4, 4, n)))
	}
	f.Add([]byte("GRJL\x02"))
	big := NewJournal(64, 64) // one per fuzz worker, reused: holds most inputs whole
	f.Fuzz(func(t *testing.T, in []byte) {
		small := testJournal(3, 2, 5) // truncates entries and chains
		before := encJournal(t, small)
		errBig, errSmall := big.Decode(in), small.Decode(in)
		if (errBig == nil) != (errSmall == nil) {
			t.Fatalf("Decode(%q) = %v into capacity 64, %v into capacity 3", in, errBig, errSmall)
		}
		if errSmall != nil {
			if after := encJournal(t, small); !bytes.Equal(after, before) {
				t.Fatalf("Decode(%q) = %v and changed the journal", in, errSmall)
			}
			return
		}
		// Canonical: re-encoding gives the input unless the input did not
		// fit the receiver (then it is kept as its newest, truncated part).
		out := encJournal(t, big)
		if !bytes.Equal(out, in) {
			full := big.Len() == big.Cap()
			big.Each(0, func(_ uint64, _ int, c []uint64) { full = full || len(c) == big.MaxBlocks() })
			if !full {
				t.Fatalf("AppendBinary(Decode(%q)) = %q, want the input", in, out)
			}
		}
		again := NewJournal(64, 64)
		if err := again.Decode(out); err != nil || !bytes.Equal(encJournal(t, again), out) {
			t.Fatalf("Decode(AppendBinary(x)) = %v, not x", err)
		}
		// The small receiver holds the newest 3 of the same entries, chains
		// cut to 2 blocks, and the same numbering.
		if small.Epoch != big.Epoch || small.ConfigID != big.ConfigID || small.Next() != big.Next() {
			t.Fatalf("Decode(%q) into capacity 3: Epoch, ConfigID, Next = %d, %d, %d; capacity 64 gave %d, %d, %d",
				in, small.Epoch, small.ConfigID, small.Next(), big.Epoch, big.ConfigID, big.Next())
		}
		var want []jEntry
		big.Each(big.Next()-uint64(min(big.Len(), 3)), func(seq uint64, r int, c []uint64) {
			want = append(want, jEntry{seq, r, append([]uint64(nil), c[:min(len(c), 2)]...)})
		})
		checkEntries(t, "entries decoded into capacity 3", journalEntries(small, 0), want)
	})
}

func FuzzPeerExportDecode(f *testing.F) {
	j := testJournal(8, 4, 10)
	for _, n := range []int{0, 1, 5} {
		b, _ := AppendPeerExport(nil, j, j.Epoch, 0, 4, testAddrs(n), testWork(n), 0.5, 3)
		f.Add(b)
	}
	f.Add([]byte("GRPX\x02"))
	seed, _ := AppendPeerExport(nil, j, j.Epoch, 0, 10, testAddrs(5), testWork(5), 2.5, 1)
	f.Fuzz(func(t *testing.T, in []byte) {
		var p PeerExport
		if err := p.Decode(seed); err != nil { // non-empty receiver: reuse paths run
			t.Fatal(err)
		}
		if err := p.Decode(in); err != nil {
			if after, _ := p.AppendBinary(nil); !bytes.Equal(after, seed) {
				t.Fatalf("Decode(%q) = %v and changed the export", in, err)
			}
			return
		}
		if len(p.Work) != p.NumReplicas() {
			t.Fatalf("Decode(%q): %d Work for %d addresses", in, len(p.Work), p.NumReplicas())
		}
		p.Each(func(r int, c []uint64) {
			if r < 0 || r >= p.NumReplicas() || len(c) == 0 {
				t.Fatalf("Decode(%q): entry replica %d of %d, %d blocks", in, r, p.NumReplicas(), len(c))
			}
		})
		out, err := p.AppendBinary(nil)
		if err != nil || !bytes.Equal(out, in) {
			t.Fatalf("AppendBinary(Decode(%q)) = %q, %v; want the input", in, out, err)
		}
		var again PeerExport
		if err := again.Decode(out); err != nil || again.Len() != p.Len() || again.Next != p.Next {
			t.Fatalf("Decode(AppendBinary(x)) = %v, not x", err)
		}
	})
}
