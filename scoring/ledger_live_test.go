package scoring

import (
	"math/rand/v2"
	"testing"
)

// checkLive verifies l.work.live against the slots: exactly the used ones, each
// at its recorded position.
func checkLive(t *testing.T, l *Ledger, step string) {
	t.Helper()
	used := 0
	for i := range l.work.flights {
		if l.work.flights[i].used {
			used++
			if at := l.work.flights[i].at; int(at) >= len(l.work.live) || l.work.live[at] != int32(i) {
				t.Fatalf("%s: flight %d records live position %d, live = %v", step, i, at, l.work.live)
			}
		}
	}
	if used != len(l.work.live) || used != l.InFlight() {
		t.Fatalf("%s: %d used slots, %d live, InFlight() = %d; want all equal", step, used, len(l.work.live), l.InFlight())
	}
}

// TestLedgerLiveList: after any sequence of dispatches, completions,
// cancellations, sweeps and streamed tokens, the live list holds exactly the
// requests in flight, and WorkOn's unseen work (computed from it) equals a
// count over every slot.
func TestLedgerLiveList(t *testing.T) {
	hw := DefaultHardware()
	const reps = 8
	rng := rand.New(rand.NewPCG(1, 2))
	l := NewLedger(DefaultParams(), reps, 64)
	var open []Flight
	now := int64(1e12)
	for step := range 3000 {
		now += int64(rng.IntN(1e6))
		switch op := rng.IntN(10); {
		case op < 5:
			req := Request{PromptTokens: 1 + rng.IntN(4000), MaxTokens: rng.IntN(512), Model: "m"}
			if f := l.Dispatch(rng.IntN(reps), &req, req.PromptTokens, now, 0); f != 0 {
				open = append(open, f)
			}
		case op < 8 && len(open) > 0:
			k := rng.IntN(len(open))
			if op == 5 {
				l.Cancel(open[k])
			} else {
				l.Done(open[k], rng.IntN(300))
			}
			open = append(open[:k], open[k+1:]...)
		case op == 8:
			l.Sweep(now - int64(rng.IntN(5e8)))
			open = open[:0] // stale handles are ignored by Done and Cancel
			for i := range l.work.flights {
				if f := &l.work.flights[i]; f.used {
					open = append(open, Flight(uint64(f.gen)<<32|uint64(i)))
				}
			}
		case len(open) > 0:
			l.Progress(open[rng.IntN(len(open))], 1+rng.IntN(8))
		}
		checkLive(t, l, "step "+itoa(step))
		snap := now - int64(rng.IntN(5e8))
		r := rng.IntN(reps)
		var wantN, wantTok int64
		for i := range l.work.flights {
			if f := &l.work.flights[i]; f.used && int(f.replica) == r && f.dispatched > snap {
				wantN++
				wantTok += f.prefill
			}
		}
		if w := l.WorkOn(r, &hw, snap); w.UnseenN != wantN || w.UnseenTokens != wantTok {
			t.Fatalf("step %d: WorkOn(%d, %d).Unseen = %d requests, %d tokens, want %d, %d",
				step, r, snap, w.UnseenN, w.UnseenTokens, wantN, wantTok)
		}
	}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b [20]byte
	n := len(b)
	for ; i > 0; i /= 10 {
		n--
		b[n] = byte('0' + i%10)
	}
	return string(b[n:])
}

// BenchmarkLedgerWorkOnNewSnapshot64: what a tick pays after a scrape,
// WorkOn for 64 replicas whose snapshot changed, on a ledger sized like
// the plugin's (16384 slots) with 32 requests in flight.
func BenchmarkLedgerWorkOnNewSnapshot64(b *testing.B) {
	hw := DefaultHardware()
	l := NewLedger(DefaultParams(), 64, 1<<14)
	for i := range 32 {
		req := Request{PromptTokens: 8000, MaxTokens: 256, Model: "m"}
		l.Dispatch(i%64, &req, 4000, int64(i+1)*1e6, 0)
	}
	b.ReportAllocs()
	snap := int64(0)
	for b.Loop() {
		snap++
		for r := range 64 {
			l.WorkOn(r, &hw, snap)
		}
	}
}
