package flow

import (
	"math/rand/v2"
	"testing"
)

func newQueue(t *testing.T, cfg Config) *Queue {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return New(cfg)
}

// takeAll releases requests one Scan at a time, one per Scan, and returns
// their IDs in release order.
func takeAll(q *Queue) []uint32 {
	var out []uint32
	for q.Len() > 0 {
		took := false
		q.Scan(1, func(it Item) bool {
			out = append(out, it.ID)
			took = true
			return true
		})
		if !took {
			break
		}
	}
	return out
}

func TestStrictPriority(t *testing.T) {
	q := newQueue(t, Config{Bands: []Band{{}, {}}, MaxHeld: 16})
	for i := range 4 {
		if _, err := q.Push(Item{ID: uint32(10 + i), Band: 1}, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.Push(Item{ID: 1, Band: 0}, 10); err != nil {
		t.Fatal(err)
	}
	// A lower band is not offered while a higher one holds requests.
	var offered []uint32
	q.Scan(8, func(it Item) bool { offered = append(offered, it.ID); return false })
	if len(offered) != 1 || offered[0] != 1 {
		t.Fatalf("Scan offered %v while band 0 holds request 1, want [1]", offered)
	}
	got := takeAll(q)
	want := []uint32{1, 10, 11, 12, 13}
	if len(got) != len(want) {
		t.Fatalf("release order %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("release order %v, want %v", got, want)
		}
	}
}

// TestTenantFairness: a tenant that sends ten times more does not starve
// the other: with both backlogged, releases alternate between them.
func TestTenantFairness(t *testing.T) {
	q := newQueue(t, Config{Bands: []Band{{}}, MaxHeld: 256})
	const heavy, light = 1, 2
	id := uint32(0)
	for i := range 100 {
		id++
		q.Push(Item{ID: id, Band: 0, Tenant: heavy, Cost: 100}, int64(i))
		if i%10 == 9 {
			id++
			q.Push(Item{ID: id | 1<<31, Band: 0, Tenant: light, Cost: 100}, int64(i))
		}
	}
	order := takeAll(q)
	// The light tenant's 10 requests are all released within the first 20.
	lightSeen := 0
	for k, v := range order {
		if v&(1<<31) != 0 {
			lightSeen++
			if k >= 20 {
				t.Fatalf("light request released %dth of %d, want within the first 20: %v", k+1, len(order), order[:25])
			}
		}
	}
	if lightSeen != 10 || len(order) != 110 {
		t.Fatalf("released %d (%d light), want 110 (10 light)", len(order), lightSeen)
	}
}

// TestTokenShares: fairness is in the requests' costs, not their count: a
// tenant whose requests cost a tenth gets ten releases per one of the other.
func TestTokenShares(t *testing.T) {
	q := newQueue(t, Config{Bands: []Band{{}}, MaxHeld: 256})
	for i := range 50 {
		q.Push(Item{ID: uint32(i), Band: 0, Tenant: 1, Cost: 1000}, 0)
		q.Push(Item{ID: uint32(100 + i), Band: 0, Tenant: 2, Cost: 100}, 0)
	}
	order := takeAll(q)
	small := 0
	for _, v := range order[:22] {
		if v >= 100 {
			small++
		}
	}
	if small < 18 || small > 21 {
		t.Fatalf("%d of the first 22 releases cost 100, want about 20 (10:1 shares): %v", small, order[:22])
	}
}

func TestFIFOWithinTenant(t *testing.T) {
	q := newQueue(t, Config{Bands: []Band{{}}, MaxHeld: 64})
	for i := range 20 {
		q.Push(Item{ID: uint32(i), Band: 0, Tenant: 7, Cost: float64(1 + i%5)}, int64(i))
	}
	for i, v := range takeAll(q) {
		if v != uint32(i) {
			t.Fatalf("release %d is request %d, want %d (one tenant is FIFO)", i, v, i)
		}
	}
}

// TestSkipKeepsPlace: a request the caller declines stays first for the
// next Scan, while the next tenant's request is released.
func TestSkipKeepsPlace(t *testing.T) {
	q := newQueue(t, Config{Bands: []Band{{}}, MaxHeld: 8})
	q.Push(Item{ID: 1, Tenant: 1}, 0)
	q.Push(Item{ID: 2, Tenant: 2}, 1)
	var released []uint32
	q.Scan(8, func(it Item) bool {
		if it.ID == 1 {
			return false
		}
		released = append(released, it.ID)
		return true
	})
	if len(released) != 1 || released[0] != 2 || q.Len() != 1 {
		t.Fatalf("released %v, %d held, want [2] and 1 held", released, q.Len())
	}
	q.Push(Item{ID: 3, Tenant: 2}, 2)
	var first uint32
	q.Scan(1, func(it Item) bool { first = it.ID; return false })
	if first != 1 {
		t.Fatalf("first offered %d after a skip, want 1", first)
	}
}

func TestExpire(t *testing.T) {
	q := newQueue(t, Config{Bands: []Band{{MaxWaitNanos: 100}, {MaxWaitNanos: 50}}, MaxHeld: 8})
	q.Push(Item{ID: 1, Band: 0}, 0)
	q.Push(Item{ID: 2, Band: 1}, 0)
	q.Push(Item{ID: 3, Band: 0}, 60)
	var gone []uint32
	n := q.Expire(99, func(it Item) { gone = append(gone, it.ID) })
	if n != 1 || len(gone) != 1 || gone[0] != 2 {
		t.Fatalf("Expire(99) = %d %v, want request 2 (band 1 waits 50)", n, gone)
	}
	q.Expire(100, func(it Item) { gone = append(gone, it.ID) })
	if len(gone) != 2 || gone[1] != 1 || q.Len() != 1 {
		t.Fatalf("Expire(100) took %v with %d left, want 1 then 1 left", gone, q.Len())
	}
	if at, ok := q.Oldest(0); !ok || at != 60 {
		t.Fatalf("Oldest(0) = %d, %v, want 60", at, ok)
	}
}

func TestBounds(t *testing.T) {
	q := newQueue(t, Config{Bands: []Band{{MaxHeld: 2}, {}}, MaxHeld: 3})
	for i := range 2 {
		if _, err := q.Push(Item{ID: uint32(i), Band: 0}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.Push(Item{ID: 9, Band: 0}, 0); err != ErrBandFull {
		t.Fatalf("third push into a band of 2 = %v, want ErrBandFull", err)
	}
	q.Push(Item{ID: 3, Band: 1}, 0)
	if _, err := q.Push(Item{ID: 4, Band: 1}, 0); err != ErrQueueFull {
		t.Fatalf("push into a full queue = %v, want ErrQueueFull", err)
	}
	if _, err := q.Push(Item{ID: 5, Band: 2}, 0); err == nil {
		t.Fatal("push into band 2 of 2 bands succeeded")
	}
}

func TestRemove(t *testing.T) {
	q := newQueue(t, Config{Bands: []Band{{}}, MaxHeld: 8})
	h1, _ := q.Push(Item{ID: 1, Tenant: 1}, 0)
	q.Push(Item{ID: 2, Tenant: 1}, 0)
	if !q.Remove(h1) || q.Remove(h1) {
		t.Fatal("Remove of a held item then of the same handle did not report true, false")
	}
	if got := takeAll(q); len(got) != 1 || got[0] != 2 {
		t.Fatalf("after removing 1, released %v, want [2]", got)
	}
	if q.Remove(0) {
		t.Fatal("Remove(0) = true")
	}
}

// TestTenantOverflow: beyond MaxTenants, new tenants share one, and
// nothing is lost.
func TestTenantOverflow(t *testing.T) {
	q := newQueue(t, Config{Bands: []Band{{}}, MaxHeld: 64, MaxTenants: 4})
	for i := range 40 {
		if _, err := q.Push(Item{ID: uint32(i), Tenant: uint64(i)}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if got := takeAll(q); len(got) != 40 {
		t.Fatalf("released %d of 40", len(got))
	}
	// Tenants freed on emptying are reusable.
	for i := range 4 {
		q.Push(Item{ID: uint32(i), Tenant: uint64(100 + i)}, 0)
	}
	if len(q.bands[0].freeT) != 0 {
		t.Fatalf("%d free tenant slots with 4 tenants of 4 held, want 0", len(q.bands[0].freeT))
	}
}

func TestQueueAllocs(t *testing.T) {
	q := New(Config{Bands: []Band{{MaxWaitNanos: 1e9}, {}}, MaxHeld: 64})
	now := int64(0)
	allocs := testing.AllocsPerRun(100, func() {
		now++
		h, _ := q.Push(Item{ID: 1, Band: int(now % 2), Tenant: uint64(now % 7), Cost: 10}, now)
		q.Scan(4, func(it Item) bool { return it.Tenant%2 == 0 })
		q.Remove(h)
		q.Expire(now, nil)
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per push/scan/remove, want 0", allocs)
	}
}

// FuzzQueue runs random operations and checks that every pushed request
// leaves the queue exactly once (released, expired or removed) and that
// releases never overtake a held request of a higher band.
func FuzzQueue(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{7, 7, 7, 0, 0, 0, 200, 100, 3})
	f.Fuzz(func(t *testing.T, ops []byte) {
		q := New(Config{Bands: []Band{{MaxHeld: 5, MaxWaitNanos: 40}, {MaxWaitNanos: 90}, {}}, MaxHeld: 12, MaxTenants: 3})
		state := map[uint32]int{} // 1 held, 2 gone
		handles := map[uint32]Handle{}
		rng := rand.New(rand.NewPCG(uint64(len(ops)), 1))
		next := uint32(0)
		now := int64(0)
		gone := func(it Item) {
			if state[it.ID] != 1 {
				t.Fatalf("request %d left the queue while in state %d", it.ID, state[it.ID])
			}
			state[it.ID] = 2
		}
		for _, op := range ops {
			now += int64(op % 16)
			switch op % 4 {
			case 0, 1:
				next++
				it := Item{ID: next, Band: int(op/4) % 3, Tenant: uint64(op / 16 % 5), Cost: float64(op % 9)}
				h, err := q.Push(it, now)
				if err == nil {
					state[next], handles[next] = 1, h
				}
			case 2:
				q.Scan(int(op%7), func(it Item) bool {
					for b := 0; b < it.Band; b++ {
						if q.BandLen(b) > 0 {
							t.Fatalf("request of band %d offered while band %d holds %d", it.Band, b, q.BandLen(b))
						}
					}
					if rng.IntN(2) == 0 {
						return false
					}
					gone(it)
					return true
				})
			case 3:
				if op&16 != 0 {
					q.Expire(now, gone)
				} else if next > 0 {
					id := 1 + uint32(rng.IntN(int(next)))
					if q.Remove(handles[id]) {
						gone(Item{ID: id})
					}
				}
			}
		}
		held := 0
		for _, s := range state {
			if s == 1 {
				held++
			}
		}
		if held != q.Len() {
			t.Fatalf("%d requests held by the record, Len() = %d", held, q.Len())
		}
		q.Expire(1<<62, gone)
		for q.Len() > 0 {
			if q.Scan(1, func(it Item) bool { gone(it); return true }) == 0 {
				t.Fatal("Scan releases nothing while requests are held")
			}
		}
	})
}

// TestScanTakeRemoves: take may remove the request it is offered itself
// (the plugin drops a stream that is gone); Scan does not free it twice.
func TestScanTakeRemoves(t *testing.T) {
	q := newQueue(t, Config{Bands: []Band{{}}, MaxHeld: 4})
	var hs []Handle
	for i := range 3 {
		h, err := q.Push(Item{ID: uint32(i), Tenant: uint64(i + 1)}, int64(i)) // a tenant each: one Scan offers all
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	n := q.Scan(8, func(it Item) bool { return q.Remove(hs[it.ID]) })
	if n != 3 || q.Len() != 0 {
		t.Fatalf("Scan with take removing each = %d, Len %d; want 3, 0", n, q.Len())
	}
	for i := range 4 { // every slot free exactly once
		if _, err := q.Push(Item{ID: uint32(i)}, 10); err != nil {
			t.Fatalf("Push %d after the Scan: %v", i, err)
		}
	}
	if _, err := q.Push(Item{ID: 9}, 10); err != ErrQueueFull {
		t.Fatalf("fifth Push into 4 slots = %v, want ErrQueueFull", err)
	}
}
