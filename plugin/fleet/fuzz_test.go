package fleet

import (
	"bytes"
	"testing"
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
