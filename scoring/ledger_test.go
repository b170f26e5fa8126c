package scoring

import (
	"testing"

	"github.com/gpuroute/gpuroute/scoring/prefix"
)

func sampleLedger() *Ledger {
	p := DefaultParams()
	l := NewLedger(p, 8, 32)
	for i := 0; i < 12; i++ {
		req := Request{PromptTokens: 100 * i, MaxTokens: 50 + i, Model: "m", Adapter: []string{"", "fr", "de"}[i%3]}
		f := l.Dispatch(i%8, &req, 90*i, int64(i)*1e9, 0)
		switch i % 4 {
		case 0:
			l.Progress(f, i)
		case 1:
			l.Done(f, 40)
		case 2:
			l.FirstToken(f)
		}
	}
	return l
}

func TestLedgerSweep(t *testing.T) {
	l := sampleLedger()
	if n := l.Sweep(5e9); n == 0 {
		t.Fatalf("Sweep(5s) = 0, want the old flights gone")
	}
	l.Sweep(1 << 62)
	if l.InFlight() != 0 {
		t.Fatalf("InFlight() after Sweep(all) = %d, want 0", l.InFlight())
	}
}

// TestAdapterPlacementsMerge: a placement another router made prices the
// adapter like one of this router's own, and merging keeps the later one.
func TestAdapterPlacementsMerge(t *testing.T) {
	p := DefaultParams()
	a, b := NewLedger(p, 2, 8), NewLedger(p, 2, 8)
	req := Request{PromptTokens: 10, Adapter: "sql"}
	a.Cancel(a.Dispatch(1, &req, 10, 5*sec, 0))
	pls := a.AppendAdapterPlacements(nil, 6*sec)
	if len(pls) != 1 || pls[0].Replica != 1 || pls[0].Adapter != prefix.HashString("sql") {
		t.Fatalf("AppendAdapterPlacements = %+v, want one placement of sql on replica 1", pls)
	}
	for _, pl := range pls {
		b.MergeAdapterPlacement(pl)
		b.MergeAdapterPlacement(AdapterPlacement{Adapter: pl.Adapter, Replica: pl.Replica, UntilNanos: pl.UntilNanos - sec})
	}
	var v adapterView
	b.markAdapter(&v, prefix.HashString("sql"), nil, 6*sec)
	if got := v.remembered(1); got != TierGPU {
		t.Errorf("merged placement: replica 1 tier = %v, want gpu", got)
	}
	if got := v.remembered(0); got != TierStorage {
		t.Errorf("replica 0 tier = %v, want storage", got)
	}
	late := 5*sec + int64(p.AdapterMemory) + int64(p.AdapterHostMemory) + sec
	if pls := b.AppendAdapterPlacements(nil, late); len(pls) != 0 {
		t.Errorf("placements past the host memory = %+v, want none (the earlier until was not kept)", pls)
	}
}

// TestWorkAddAt: another router's prefill window counts as done work only
// inside it, for the time since its start, and tells when its queue clears
// only while every queued request of it is in the window's group; counts
// add up, windows do not.
func TestWorkAddAt(t *testing.T) {
	peer := Work{QueuedN: 2, QueuedTokens: 3000, RunFromNanos: 10e9, RunUntilNanos: 11e9}
	behind := peer
	behind.PendingN = 1
	for _, tc := range []struct {
		name      string
		peer      Work
		atNanos   int64
		wantDone  float64
		wantClear int64
	}{
		{name: "before the window", peer: peer, atNanos: 9e9, wantDone: 0, wantClear: 11e9},
		{name: "at its start", peer: peer, atNanos: 10e9, wantDone: 0, wantClear: 11e9},
		{name: "inside", peer: peer, atNanos: 10.25e9, wantDone: 0.25, wantClear: 11e9},
		{name: "at its end: the estimate failed", peer: peer, atNanos: 11e9, wantDone: 0, wantClear: ClearUnknown},
		{name: "requests behind the group", peer: behind, atNanos: 10.25e9, wantDone: 0.25, wantClear: ClearUnknown},
		{name: "no window", peer: Work{QueuedN: 1}, atNanos: 10.25e9, wantDone: 0, wantClear: ClearUnknown},
		{name: "nothing queued", peer: Work{DecodeN: 1}, atNanos: 10.25e9, wantDone: 0, wantClear: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sum := Work{DecodeN: 1, DoneSec: 0.5}
			sum.AddAt(&tc.peer, tc.atNanos)
			want := Work{QueuedN: tc.peer.QueuedN, QueuedTokens: tc.peer.QueuedTokens, DecodeN: 1 + tc.peer.DecodeN,
				DoneSec: 0.5 + tc.wantDone, ClearNanos: tc.wantClear}
			if sum != want {
				t.Fatalf("AddAt(%s) = %+v, want %+v", tc.name, sum, want)
			}
		})
	}
	// The latest clear wins; work added without a window makes it unknown.
	var sum Work
	later := Work{QueuedN: 1, RunFromNanos: 10e9, RunUntilNanos: 12e9}
	sum.AddAt(&peer, 10.5e9)
	sum.AddAt(&later, 10.5e9)
	if sum.ClearNanos != 12e9 {
		t.Fatalf("AddAt(two windows).ClearNanos = %d, want %d", sum.ClearNanos, int64(12e9))
	}
	sum.Add(&Work{QueuedN: 1})
	if sum.ClearNanos != ClearUnknown {
		t.Fatalf("Add(queued work).ClearNanos = %d, want ClearUnknown", sum.ClearNanos)
	}
}

// TestSyncSnapshotsMatchesSync: recounting every replica's unseen work in one
// pass gives what a sync per replica gives, for replicas whose snapshot
// moved (before, between and after the dispatches) and ones whose did not.
func TestSyncSnapshotsMatchesSync(t *testing.T) {
	const sec = int64(1e9)
	build := func() (*Ledger, []Replica) {
		l := NewLedger(DefaultParams(), 6, 64)
		for i := range 40 {
			req := Request{PromptTokens: 100 + 37*i, MaxTokens: 64, Model: "m"}
			f := l.Dispatch(i%5, &req, 90+i, int64(i)*sec, 0)
			if i%7 == 0 {
				l.Done(f, 10) // no longer in flight
			}
		}
		replicas := make([]Replica, 6)
		return l, replicas
	}
	snaps := [][]int64{
		{5 * sec, 12 * sec, 0, 39 * sec, 41 * sec, 20 * sec},
		{1, 1, 1, 1, 1, 1},
		{25 * sec, 25 * sec, 25 * sec, 25 * sec, 25 * sec, 25 * sec},
	}
	for k, snap := range snaps {
		one, reps := build()
		each, _ := build()
		one.SyncSnapshots(reps) // snapshot 0 everywhere: the first sync
		each.SyncSnapshots(reps)
		for i := range reps {
			reps[i].ScrapedNanos = snap[i]
		}
		one.SyncSnapshots(reps)
		for i := range reps {
			each.work.sync(i, snap[i])
		}
		for i := range reps {
			a, b := one.work.reps[i], each.work.reps[i]
			if a.UnseenN != b.UnseenN || a.UnseenTokens != b.UnseenTokens || a.syncedSnap != b.syncedSnap || a.resync {
				t.Errorf("snapshots %d, replica %d: SyncSnapshots gives unseen %d / %d tokens at %d (resync %v), sync %d / %d at %d",
					k, i, a.UnseenN, a.UnseenTokens, a.syncedSnap, a.resync, b.UnseenN, b.UnseenTokens, b.syncedSnap)
			}
		}
		if one.work.reps[0].UnseenN == 0 && snap[0] == 5*sec {
			t.Errorf("snapshots %d: replica 0 has nothing unseen after a snapshot at 5 s, want the later dispatches", k)
		}
		// What build dispatched: a snapshot taken at a dispatch's instant
		// (5 s on replica 0, 12 s on replica 2) has seen it.
		for r := range reps {
			var n, tokens int64
			for i := range 40 {
				if i%5 == r && i%7 != 0 && int64(i)*sec > snap[r] {
					n, tokens = n+1, tokens+int64(90+i)
				}
			}
			if got := one.work.reps[r]; int64(got.UnseenN) != n || int64(got.UnseenTokens) != tokens {
				t.Errorf("snapshots %d, replica %d: unseen %d / %d tokens, want %d / %d", k, r, got.UnseenN, got.UnseenTokens, n, tokens)
			}
		}
	}
}
