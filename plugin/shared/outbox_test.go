package shared

import (
	"testing"
)

type drained struct {
	replica int
	chain   []uint64
}

func drainAll(o *Outbox) []drained {
	var got []drained
	o.Each(func(r int, c []uint64) { got = append(got, drained{r, append([]uint64(nil), c...)}) })
	o.Reset()
	return got
}

func TestOutbox(t *testing.T) {
	o := NewOutbox(3, 2)
	o.Push(0, []uint64{1, 2, 3}) // truncated to 2 blocks
	o.Push(1, nil)               // ignored
	o.Push(-1, []uint64{9})      // ignored
	o.Push(1, []uint64{4})
	if o.Len() != 2 || o.Cap() != 3 {
		t.Fatalf("Len, Cap = %d, %d; want 2, 3", o.Len(), o.Cap())
	}
	got := drainAll(o)
	want := []drained{{0, []uint64{1, 2}}, {1, []uint64{4}}}
	checkDrained(t, "first drain", got, want)
	if o.Len() != 0 || len(drainAll(o)) != 0 {
		t.Fatalf("after Reset: Len = %d, want 0", o.Len())
	}
	// Wrap-around: 5 pushes into 3 slots keep the newest 3, oldest first.
	for i := 0; i < 5; i++ {
		o.Push(i, []uint64{uint64(10 + i), uint64(20 + i)})
	}
	if o.Len() != 3 {
		t.Fatalf("after 5 pushes into 3: Len %d, want 3", o.Len())
	}
	checkDrained(t, "wrapped drain", drainAll(o), []drained{{2, []uint64{12, 22}}, {3, []uint64{13, 23}}, {4, []uint64{14, 24}}})
	// Partial fill after a wrap keeps order too.
	o.Push(7, []uint64{70})
	o.Push(8, []uint64{80})
	checkDrained(t, "after wrap", drainAll(o), []drained{{7, []uint64{70}}, {8, []uint64{80}}})

	var zero Outbox
	zero.Push(1, []uint64{1})
	if zero.Len() != 0 || len(drainAll(&zero)) != 0 {
		t.Fatalf("zero Outbox: Len %d, want 0", zero.Len())
	}
	if NewOutbox(0, 5).Cap() != 0 || NewOutbox(5, 0).Cap() != 0 {
		t.Fatal("NewOutbox with a non-positive argument should have no capacity")
	}
}

func checkDrained(t *testing.T, what string, got, want []drained) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
	for i := range want {
		if got[i].replica != want[i].replica || len(got[i].chain) != len(want[i].chain) {
			t.Fatalf("%s = %v, want %v", what, got, want)
		}
		for j := range want[i].chain {
			if got[i].chain[j] != want[i].chain[j] {
				t.Fatalf("%s = %v, want %v", what, got, want)
			}
		}
	}
}

func TestOutboxAllocs(t *testing.T) {
	o := NewOutbox(256, 64)
	chain := make([]uint64, 100)
	sum := 0
	fn := func(r int, c []uint64) { sum += r + len(c) }
	if n := testing.AllocsPerRun(100, func() {
		for i := 0; i < 300; i++ { // wraps
			o.Push(i%64, chain[:i%100])
		}
		o.Each(fn)
		o.Reset()
	}); n != 0 {
		t.Fatalf("Outbox Push/Each/Reset allocs = %v, want 0", n)
	}
}
