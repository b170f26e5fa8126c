package shared

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gpuroute/gpuroute/scoring"
)

func TestBoardSum(t *testing.T) {
	const me, cfg, now, maxAge = 1, 42, 1_000_000, 1000
	// Each record's prefill window has run 0.4 ms at now: Sum adds that as
	// done work and its end as when the queue clears, not the window itself
	// (it is one worker's).
	one := scoring.Work{QueuedN: 1, QueuedTokens: 10, DecodeN: 1, DecodeTokens: 5,
		RunFromNanos: now - 400_000, RunUntilNanos: now + 1}
	mk := func(worker uint64, written int64, c uint64, n int) []byte {
		w := &WorkRecord{Worker: worker, WrittenNanos: written, ConfigID: c, ArrivalPerSec: 1.5, Work: make([]scoring.Work, n)}
		for i := range w.Work {
			w.Work[i] = one
		}
		return enc(t, w)
	}
	for _, tc := range []struct {
		name   string
		values map[uint64][]byte
		want   int // records counted
	}{
		{name: "none", want: 0},
		{name: "two fresh peers", values: map[uint64][]byte{2: mk(2, now, cfg, 3), 3: mk(3, now-maxAge, cfg, 3)}, want: 2},
		{name: "me skipped", values: map[uint64][]byte{me: mk(me, now, cfg, 3), 2: mk(2, now, cfg, 3)}, want: 1},
		{name: "expired", values: map[uint64][]byte{2: mk(2, now-maxAge-1, cfg, 3)}, want: 0},
		{name: "from the future", values: map[uint64][]byte{2: mk(2, now+maxAge+1, cfg, 3)}, want: 0},
		{name: "other config", values: map[uint64][]byte{2: mk(2, now, cfg+1, 3), 3: mk(3, now, cfg, 3)}, want: 1},
		{name: "wrong length", values: map[uint64][]byte{2: mk(2, now, cfg, 4)}, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := Board{ConfigID: cfg}
			for id, v := range tc.values {
				if err := b.Update(id, 1, v); err != nil {
					t.Fatalf("Update(%d) = %v", id, err)
				}
			}
			out := make([]scoring.Work, 3)
			got, rate := b.Sum(me, now, maxAge, out)
			if got != tc.want {
				t.Fatalf("Sum(%s) = %d records, want %d", tc.name, got, tc.want)
			}
			if wantRate := 1.5 * float64(tc.want); rate != wantRate {
				t.Fatalf("Sum(%s) rate = %v, want the counted records' %v", tc.name, rate, wantRate)
			}
			for i := range out {
				w := scoring.Work{DoneSec: float64(tc.want) * 400e-6}
				if tc.want > 0 {
					w.ClearNanos = now + 1 // the windows' end: every queued request is in one
				}
				for k := 0; k < tc.want; k++ {
					w.QueuedN, w.QueuedTokens = w.QueuedN+1, w.QueuedTokens+10
					w.DecodeN, w.DecodeTokens = w.DecodeN+1, w.DecodeTokens+5
				}
				if out[i] != w {
					t.Fatalf("Sum(%s) out[%d] = %+v, want %+v", tc.name, i, out[i], w)
				}
			}
		})
	}
}

func TestBoardUpdate(t *testing.T) {
	b := Board{ConfigID: 5}
	r2 := enc(t, testRecord(2, 10, 5, 2))
	if err := b.Update(2, 7, r2); err != nil {
		t.Fatal(err)
	}
	// Same CAS: not decoded again, so even garbage passes.
	if err := b.Update(2, 7, []byte("junk")); err != nil {
		t.Fatalf("Update(same cas, junk) = %v, want nil (skipped)", err)
	}
	// New CAS with garbage: error, old record kept (it expires on its own).
	if err := b.Update(2, 8, []byte("junk")); err == nil || !recEqual(b.Record(2), testRecord(2, 10, 5, 2)) {
		t.Fatalf("Update(junk) = %v, record %+v; want error, previous record kept", err, b.Record(2))
	}
	// A record under the wrong key, or garbage from a new peer, is refused
	// without leaving a record behind.
	if err := b.Update(3, 1, r2); !errors.Is(err, ErrInvalid) || b.Record(3) != nil || b.Len() != 1 {
		t.Fatalf("Update(3, worker 2's record) = %v, Len %d; want ErrInvalid, Len 1", err, b.Len())
	}
	if err := b.Update(4, 1, nil); err == nil || b.Len() != 1 {
		t.Fatalf("Update(4, nil) = %v, Len %d; want error, Len 1", err, b.Len())
	}
	_ = b.Update(3, 1, enc(t, testRecord(3, 10, 5, 2)))
	_ = b.Update(4, 1, enc(t, testRecord(4, 10, 5, 2)))
	b.Retain([]uint64{4, 9})
	if b.Len() != 1 || b.Record(4) == nil {
		t.Fatalf("Retain([4 9]): Len %d, has 4 = %v; want 1, true", b.Len(), b.Record(4) != nil)
	}
	b.Retain(nil)
	if b.Len() != 0 {
		t.Fatalf("Retain(nil): Len %d, want 0", b.Len())
	}
	// Steady state: known peers, same size, new CAS each tick: no allocation.
	for id := uint64(2); id < 6; id++ {
		_ = b.Update(id, 1, enc(t, testRecord(id, 10, 5, 64)))
	}
	vals := make([][]byte, 6)
	for id := uint64(2); id < 6; id++ {
		vals[id] = enc(t, testRecord(id, 11, 5, 64))
	}
	out := make([]scoring.Work, 64)
	cas := uint32(1)
	if n := testing.AllocsPerRun(100, func() {
		cas++
		for id := uint64(2); id < 6; id++ {
			_ = b.Update(id, cas, vals[id])
		}
		b.Sum(1, 11, 100, out)
	}); n != 0 {
		t.Fatalf("Board Update+Sum allocs = %v, want 0", n)
	}
}

// TestBoardAppliesPatches: a reader that holds a worker's previous publish
// takes a PutEntry publish by decoding one entry, ends with exactly what a
// whole decode gives, and falls back to a whole decode whenever it missed a
// publish or the record is not a patch of what it holds.
func TestBoardAppliesPatches(t *testing.T) {
	w := testRecord(3, 10, 7, 8)
	w.NextPublish()
	buf, err := w.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	var b Board
	b.ConfigID = 7
	if err := b.Update(3, 1, buf); err != nil {
		t.Fatal(err)
	}
	publish := func(i int, queued int64, written int64) {
		t.Helper()
		w.WrittenNanos, w.ArrivalPerSec = written, float64(written)/8 // the rate moves with every publish
		w.Work[i].QueuedN = queued
		if !w.PutEntry(buf, i) {
			t.Fatalf("PutEntry(%d) = false", i)
		}
	}
	check := func(step string, wantPatch bool) {
		t.Helper()
		var whole WorkRecord
		if err := whole.Decode(buf); err != nil {
			t.Fatal(err)
		}
		got := b.Record(3)
		if !recEqual(got, &whole) || got.Seq != whole.Seq || !slices.Equal(got.Patches, whole.Patches) {
			t.Fatalf("%s: board holds %+v, want the whole decode %+v", step, got, &whole)
		}
		if isPatch := len(whole.Patches) > 0; isPatch != wantPatch {
			t.Fatalf("%s: publish has patches %v, want patches %v", step, whole.Patches, wantPatch)
		}
	}
	cas := uint32(1)
	update := func() {
		t.Helper()
		cas++
		if err := b.Update(3, cas, buf); err != nil {
			t.Fatal(err)
		}
	}
	publish(5, 40, 20)
	update()
	check("one patch", true)
	publish(2, 41, 30)
	update()
	check("next patch", true)
	publish(1, 42, 40)
	publish(6, 43, 50) // the reader takes two publishes at once
	update()
	check("two publishes", true)
	for i := range MaxPatches + 1 { // more than the list holds: a whole decode
		publish(i%8, 50+int64(i), 60+int64(i))
	}
	update()
	check("more publishes than patches listed", true)
	w.Work[0].DecodeN = 99
	w.NextPublish()
	if buf, err = w.AppendBinary(buf[:0]); err != nil {
		t.Fatal(err)
	}
	update()
	check("whole publish", false)
	// A corrupt patch (negative figure) is refused and the board keeps
	// what it had.
	before := *b.Record(3)
	before.Work = append([]scoring.Work(nil), before.Work...)
	publish(4, 44, 60)
	putLE64(buf[workHeaderLen+4*workEntryLen:], ^uint64(0))
	cas++
	if err := b.Update(3, cas, buf); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Update(corrupt patch) error = %v, want ErrInvalid", err)
	}
	if got := b.Record(3); !recEqual(got, &before) {
		t.Errorf("after a refused patch the board holds %+v, want %+v", got, &before)
	}
}

// TestBoardPatchAllocs: taking a patch allocates nothing.
func TestBoardPatchAllocs(t *testing.T) {
	w := testRecord(2, 1, 1, 64)
	w.NextPublish()
	buf, _ := w.AppendBinary(nil)
	var b Board
	b.ConfigID = 1
	cas := uint32(1)
	_ = b.Update(2, cas, buf)
	allocs := testing.AllocsPerRun(100, func() {
		w.WrittenNanos++
		w.PutEntry(buf, int(w.WrittenNanos%64))
		cas++
		if err := b.Update(2, cas, buf); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Board.Update of a patch: %v allocs, want 0", allocs)
	}
}

// TestBoardGatherMatchesSum: a reader that keeps its copy of the peers'
// work by Gather's changed entries holds, after every step, exactly what
// summing every record anew gives, while writers patch and republish,
// windows open and close, records expire and come back, a peer leaves the
// registry and one switches configuration.
func TestBoardGatherMatchesSum(t *testing.T) {
	const (
		n      = 70 // entries span two bitset words
		me     = 9
		cfg    = 4
		maxAge = 1000
	)
	rng := rand.New(rand.NewPCG(1, 2))
	writers := []*WorkRecord{testRecord(3, 0, cfg, n), testRecord(5, 0, cfg, n), testRecord(7, 0, cfg, n)}
	bufs := make([][]byte, len(writers))
	cas := make([]uint32, len(writers))
	now := int64(10_000)
	randomWork := func() scoring.Work {
		w := scoring.Work{QueuedN: rng.Int64N(3), QueuedTokens: rng.Int64N(5000), DecodeN: rng.Int64N(4),
			DecodeTokens: rng.Int64N(900)}
		if rng.IntN(2) == 0 { // a prefill window around now
			w.RunFromNanos = now - rng.Int64N(300)
			w.RunUntilNanos = now + rng.Int64N(300)
			w.PendingN = rng.Int64N(2)
		}
		return w
	}
	for k, w := range writers {
		w.WrittenNanos = now
		w.NextPublish()
		bufs[k], _ = w.AppendBinary(nil)
	}
	var b Board
	b.ConfigID = cfg
	registry := []uint64{3, 5, 7, me}
	mine := make([]scoring.Work, n)
	want := make([]scoring.Work, n)
	var partial, whole int
	for step := range 3000 {
		now += rng.Int64N(120)
		k := rng.IntN(len(writers))
		w := writers[k]
		switch op := rng.IntN(20); {
		case op < 14: // patch one to three entries
			w.WrittenNanos, w.ArrivalPerSec = now, rng.Float64()*3
			for range 1 + rng.IntN(3) {
				i := rng.IntN(n)
				w.Work[i] = randomWork()
				if !w.PutEntry(bufs[k], i) {
					t.Fatalf("step %d: PutEntry(%d) = false", step, i)
				}
			}
		case op < 17: // a whole publish
			w.WrittenNanos, w.ArrivalPerSec = now, rng.Float64()*3
			w.ConfigID = cfg
			if rng.IntN(8) == 0 {
				w.ConfigID = cfg + 1
			}
			w.NextPublish()
			bufs[k], _ = w.AppendBinary(bufs[k][:0])
		case op == 17: // the writer goes quiet long enough to expire
			now += maxAge / 2
		case op == 18: // it leaves the registry, or comes back
			if slices.Contains(registry, w.Worker) {
				registry = slices.DeleteFunc(slices.Clone(registry), func(id uint64) bool { return id == w.Worker })
			} else {
				registry = append(registry, w.Worker)
			}
			b.Retain(registry)
		}
		for j, w := range writers {
			if slices.Contains(registry, w.Worker) && rng.IntN(4) != 0 { // a reader sometimes misses publishes
				cas[j]++
				if err := b.Update(w.Worker, cas[j], bufs[j]); err != nil {
					t.Fatalf("step %d: Update(%d) = %v", step, w.Worker, err)
				}
			}
		}
		sum, changed, all, rate := b.Gather(me, now, maxAge, n)
		if all {
			copy(mine, sum)
			whole++
		} else {
			for _, i := range changed {
				mine[i] = sum[i]
			}
			partial++
		}
		clear(want)
		if _, wantRate := b.Sum(me, now, maxAge, want); rate != wantRate {
			t.Fatalf("step %d: Gather rate %v, Sum's %v", step, rate, wantRate)
		}
		for i := range want {
			if mine[i] != want[i] {
				t.Fatalf("step %d (all=%v, changed %v): entry %d gathered %+v, want %+v", step, all, changed, i, mine[i], want[i])
			}
		}
	}
	if partial < 1000 || whole < 100 {
		t.Errorf("Gather summed part of the entries %d times and all %d times: the steps did not exercise both", partial, whole)
	}
}

// TestBoardGatherPartial: after one patch, Gather sums the patched entry
// and the entries with a window, not the rest.
func TestBoardGatherPartial(t *testing.T) {
	w := testRecord(3, 100, 1, 64)
	for i := range w.Work {
		w.Work[i].RunFromNanos, w.Work[i].RunUntilNanos = 0, 0
	}
	w.Work[40].RunFromNanos, w.Work[40].RunUntilNanos = 50, 500
	w.NextPublish()
	buf, _ := w.AppendBinary(nil)
	var b Board
	b.ConfigID = 1
	_ = b.Update(3, 1, buf)
	if _, _, all, _ := b.Gather(9, 100, 1000, 64); !all {
		t.Fatal("first Gather: all = false, want true")
	}
	w.Work[7].QueuedN++
	w.WrittenNanos = 120
	w.PutEntry(buf, 7)
	_ = b.Update(3, 2, buf)
	_, changed, all, _ := b.Gather(9, 130, 1000, 64)
	if all || !slices.Equal(changed, []int{7, 40}) {
		t.Errorf("Gather after patching entry 7 = changed %v, all %v; want [7 40], false", changed, all)
	}
	allocs := testing.AllocsPerRun(100, func() {
		w.WrittenNanos++
		w.PutEntry(buf, int(w.WrittenNanos%64))
		_ = b.Update(3, uint32(w.WrittenNanos), buf)
		b.Gather(9, w.WrittenNanos, 1000, 64)
	})
	if allocs != 0 {
		t.Errorf("Board.Update+Gather of a patch: %v allocs, want 0", allocs)
	}
}
