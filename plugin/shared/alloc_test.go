package shared

import (
	"testing"

	"github.com/gpuroute/gpuroute/scoring"
)

// Steady state: the leader re-encodes into a reused buffer and readers decode
// into a reused Snapshot every time the CAS changes; neither may allocate.

func TestSnapshotAllocs(t *testing.T) {
	s := testSnapshot(64, 4)
	buf := make([]byte, 0, s.EncodedLen())
	var err error
	if n := testing.AllocsPerRun(100, func() { buf, err = s.AppendBinary(buf[:0]) }); n != 0 || err != nil {
		t.Fatalf("AppendBinary(64x4) allocs = %v, err %v; want 0, nil", n, err)
	}
	var out Snapshot
	if err := out.Decode(buf); err != nil {
		t.Fatal(err)
	}
	// A changed figure (new generation, new queue) still decodes without
	// allocating: only changed adapter names would cost a string.
	s.Generation++
	s.Replicas[5].Waiting = 99
	buf2, _ := s.AppendBinary(nil)
	if n := testing.AllocsPerRun(100, func() {
		if err := out.Decode(buf2); err != nil {
			t.Fatal(err)
		}
		if err := out.Decode(buf); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("Decode(64x4) allocs = %v, want 0", n)
	}
}

func TestLeaseAllocs(t *testing.T) {
	buf := make([]byte, 0, 64)
	var l Lease
	if n := testing.AllocsPerRun(100, func() {
		next, _, _ := LeaseStep(l, true, 1, 5, 10)
		buf, _ = next.AppendBinary(buf[:0])
		_ = l.Decode(buf)
	}); n != 0 {
		t.Fatalf("lease step/encode/decode allocs = %v, want 0", n)
	}
}

func BenchmarkSnapshotEncode64(b *testing.B) {
	s := testSnapshot(64, 4)
	buf := make([]byte, 0, s.EncodedLen())
	b.ReportAllocs()
	b.SetBytes(int64(s.EncodedLen()))
	for b.Loop() {
		buf, _ = s.AppendBinary(buf[:0])
	}
}

func BenchmarkSnapshotDecode64(b *testing.B) {
	s := testSnapshot(64, 4)
	buf, _ := s.AppendBinary(nil)
	var out Snapshot
	_ = out.Decode(buf)
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if err := out.Decode(buf); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWorkRecordDecode64(b *testing.B) {
	buf, _ := testRecord(2, 1, 1, 64).AppendBinary(nil)
	var w WorkRecord
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		_ = w.Decode(buf)
	}
}

func BenchmarkOutboxPushDrain(b *testing.B) {
	o := NewOutbox(256, 64)
	chain := make([]uint64, 32)
	fn := func(int, []uint64) {}
	b.ReportAllocs()
	for b.Loop() {
		o.Push(3, chain)
		if o.Len() == o.Cap() {
			o.Each(fn)
			o.Reset()
		}
	}
}

// BenchmarkBoardUpdatePatch64 is a peer's per-request republish as the
// reader takes it (compare BenchmarkWorkRecordDecode64, the whole decode).
func BenchmarkBoardUpdatePatch64(b *testing.B) {
	w := testRecord(2, 1, 1, 64)
	w.NextPublish()
	buf, _ := w.AppendBinary(nil)
	var board Board
	board.ConfigID = 1
	cas := uint32(1)
	_ = board.Update(2, cas, buf)
	b.ReportAllocs()
	for b.Loop() {
		w.WrittenNanos++
		w.PutEntry(buf, int(w.WrittenNanos%64))
		cas++
		_ = board.Update(2, cas, buf)
	}
}

// BenchmarkBoardGather and BenchmarkBoardSum: a worker's per-request view
// of the other workers' work (an Envoy of 8 workers, 256 replicas) after
// one of them republished one entry: Gather sums again what moved, Sum
// the whole board. One entry in 16 has a prefill window (the 64-replica
// request-path benchmark sums ~4 entries a request), which Gather sums
// again every time.
func BenchmarkBoardGather(b *testing.B) { benchBoardView(b, true) }

func BenchmarkBoardSum(b *testing.B) { benchBoardView(b, false) }

func benchBoardView(b *testing.B, gather bool) {
	const workers, replicas = 8, 256
	var board Board
	board.ConfigID = 1
	recs := make([]*WorkRecord, workers)
	bufs := make([][]byte, workers)
	for k := range recs {
		recs[k] = testRecord(uint64(k+1), 1, 1, replicas)
		for i := range recs[k].Work {
			if i%16 != 0 {
				recs[k].Work[i].RunFromNanos, recs[k].Work[i].RunUntilNanos = 0, 0
			}
		}
		recs[k].NextPublish()
		bufs[k], _ = recs[k].AppendBinary(nil)
		_ = board.Update(uint64(k+1), 1, bufs[k])
	}
	out := make([]scoring.Work, replicas)
	now, cas := int64(1), uint32(1)
	b.ReportAllocs()
	for b.Loop() {
		now++
		k := int(now) % (workers - 1)
		recs[k].WrittenNanos = now
		recs[k].PutEntry(bufs[k], int(now)%replicas)
		cas++
		_ = board.Update(uint64(k+1), cas, bufs[k])
		if gather {
			board.Gather(workers, now, 1<<40, replicas)
		} else {
			clear(out)
			board.Sum(workers, now, 1<<40, out)
		}
	}
}
