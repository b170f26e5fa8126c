package flow

import (
	"math"
	"testing"
)

// TestShareBound: a lone tenant, and one at or below its share, keep the
// band's hold wait; a tenant with most of the requests in flight gets it
// scaled by the square of its share; finished requests stop counting.
func TestShareBound(t *testing.T) {
	s := NewShares(4)
	if got := s.Bound(7, 3); got != 3 {
		t.Fatalf("Bound with nothing in flight = %v, want 3", got)
	}
	for range 9 {
		s.Add(7, 1)
	}
	if got := s.Bound(7, 3); got != 3 {
		t.Errorf("Bound(lone tenant with 9 in flight) = %v, want 3", got)
	}
	s.Add(8, 1)
	// 11 in flight with this one over 2 tenants: a fair share of 5.5.
	if got, want := s.Bound(7, 3), 3*(5.5/10)*(5.5/10); math.Abs(got-want) > 1e-12 {
		t.Errorf("Bound(tenant with 9 of 10) = %v, want %v", got, want)
	}
	if got := s.Bound(8, 3); got != 3 {
		t.Errorf("Bound(tenant with 1 of 10) = %v, want 3", got)
	}
	// A third tenant's first request: fair share 11/3, its own 1.
	if got := s.Bound(9, 3); got != 3 {
		t.Errorf("Bound(new tenant) = %v, want 3", got)
	}
	for range 9 {
		s.Add(7, -1)
	}
	s.Add(7, -1) // more ends than starts count nothing
	if s.total != 1 || s.active != 1 {
		t.Fatalf("after tenant 7's requests ended: total %d, active %d; want 1, 1", s.total, s.active)
	}
	if got := s.Bound(8, 3); got != 3 {
		t.Errorf("Bound(tenant 8 alone) = %v, want 3", got)
	}
}

// TestSharesFull: tenants past the table's size are not counted, and keep
// the band's hold wait.
func TestSharesFull(t *testing.T) {
	s := NewShares(2)
	s.Add(1, 1)
	s.Add(2, 1)
	s.Add(3, 5)
	if s.total != 2 || s.active != 2 {
		t.Fatalf("total %d, active %d after a third tenant in a table of 2; want 2, 2", s.total, s.active)
	}
	if got := s.Bound(3, 3); got != 3 {
		t.Errorf("Bound(untracked tenant) = %v, want 3", got)
	}
}

func TestSharesAllocs(t *testing.T) {
	s := NewShares(8)
	if n := testing.AllocsPerRun(100, func() { s.Add(3, 1); _ = s.Bound(3, 1); s.Add(3, -1) }); n != 0 {
		t.Fatalf("Add and Bound allocate %v times per run, want 0", n)
	}
}

// TestNilShares: a router without tenants keeps no Shares; a nil one counts
// nothing and keeps every hold wait.
func TestNilShares(t *testing.T) {
	var s *Shares
	s.Add(1, 1)
	if got := s.Bound(1, 3); got != 3 {
		t.Fatalf("nil Bound(1, 3) = %v, want 3", got)
	}
}
