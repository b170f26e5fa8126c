package scoring

import (
	"reflect"
	"testing"
)

// TestLedgerAdopt: a ledger adopted under a new numbering has old's
// requests on the renumbered replicas, with the same handles, prefill
// groups, adapter memory and learned lengths; a forgotten replica's
// requests are gone and their handles stale.
func TestLedgerAdopt(t *testing.T) {
	p := DefaultParams()
	now := 10 * sec
	old := NewLedger(p, 3, 16)
	req := func(adapter string) *Request {
		return &Request{PromptTokens: 400, MaxTokens: 100, Model: "m", Adapter: adapter}
	}
	learned := old.Dispatch(0, req(""), 400, now, 0)
	old.Done(learned, 37)
	on0 := old.Dispatch(0, req("sql"), 400, now, now)
	on1 := old.Dispatch(1, req(""), 300, now+sec, 0)
	on2 := old.Dispatch(2, req(""), 200, now+2*sec, now+2*sec)
	old.Progress(on2, 5)
	want := map[int]Work{2: old.WorkOn(0, &Hardware{}, 0), 0: old.WorkOn(2, &Hardware{}, 0)}
	expect := old.ExpectedOutput(req(""))

	l := NewLedger(p, 4, 16)
	l.Adopt(old, []int{2, -1, 0})
	if got := l.InFlight(); got != 2 {
		t.Fatalf("InFlight() after Adopt = %d, want 2 (replica 1 forgotten)", got)
	}
	for j, w := range want {
		if got := l.WorkOn(j, &Hardware{}, 0); got != w {
			t.Errorf("WorkOn(%d) after Adopt = %+v, want %+v (old's replica)", j, got, w)
		}
	}
	if got := l.InFlightOn(1) + l.InFlightOn(3); got != 0 {
		t.Errorf("requests on new replicas 1 and 3 = %d, want 0", got)
	}
	if got := l.ExpectedOutput(req("")); got != expect {
		t.Errorf("ExpectedOutput after Adopt = %d, want %d (the learned length)", got, expect)
	}
	pls := l.AppendAdapterPlacements(nil, now)
	if len(pls) != 1 || pls[0].Replica != 2 {
		t.Errorf("adapter placements after Adopt = %+v, want sql on replica 2", pls)
	}
	// The handles: old's work on a kept replica moves on l.
	l.Progress(on0, 3)
	if w := l.WorkOn(2, &Hardware{}, 0); w.DecodeN != 1 || w.QueuedN != 0 {
		t.Errorf("WorkOn(2) after Progress(old handle) = %+v, want one request decoding", w)
	}
	l.Cancel(on1) // forgotten: stale
	l.Done(on2, 20)
	if got := l.InFlight(); got != 1 {
		t.Errorf("InFlight() after Cancel(forgotten) and Done(kept) = %d, want 1", got)
	}
	f := l.Dispatch(3, req(""), 100, now+3*sec, 0)
	if f == 0 || f == on0 || l.InFlightOn(3) != 1 {
		t.Errorf("Dispatch after Adopt = %v (on0 %v), InFlightOn(3) %d; want a new handle and one request", f, on0, l.InFlightOn(3))
	}
	checkLive(t, l, "after Adopt")
}

// TestLedgerAdoptIdentity: adopting under the identity numbering changes
// nothing a decision reads.
func TestLedgerAdoptIdentity(t *testing.T) {
	old := sampleLedger()
	l := NewLedger(DefaultParams(), 8, 32)
	works := func(l *Ledger) []Work {
		var out []Work
		for i := range 8 {
			out = append(out, l.WorkOn(i, &Hardware{PrefillSecPerToken: 1e-4}, int64(i)*1e9))
		}
		return out
	}
	want := works(old)
	l.Adopt(old, []int{0, 1, 2, 3, 4, 5, 6, 7})
	if got := works(l); !reflect.DeepEqual(got, want) {
		t.Errorf("WorkOn after Adopt(identity) = %+v, want %+v", got, want)
	}
	if l.InFlight() != old.InFlight() || l.Rate(20*sec) != old.Rate(20*sec) {
		t.Errorf("Adopt(identity): InFlight %d, Rate %v; want %d, %v", l.InFlight(), l.Rate(20*sec), old.InFlight(), old.Rate(20*sec))
	}
}
