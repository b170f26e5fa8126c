package shared

import (
	"bytes"
	"errors"
	"testing"
)

func TestLeaseCodec(t *testing.T) {
	in := Lease{Holder: 0xabc, ExpiresNanos: -5}
	b, _ := in.AppendBinary(nil)
	if len(b) != leaseLen {
		t.Fatalf("len(AppendBinary) = %d, want %d", len(b), leaseLen)
	}
	var out Lease
	if err := out.Decode(b); err != nil || out != in {
		t.Fatalf("Decode(AppendBinary(%+v)) = %+v, %v", in, out, err)
	}
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{name: "empty", in: nil, want: ErrShort},
		{name: "cut", in: b[:leaseLen-1], want: ErrShort},
		{name: "trailing", in: append(bytes.Clone(b), 1), want: ErrInvalid},
		{name: "version", in: append([]byte("GRLS\x09"), b[5:]...), want: ErrVersion},
		{name: "snapshot magic", in: append([]byte("GRFS\x01"), b[5:]...), want: ErrMagic},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := Lease{Holder: 1, ExpiresNanos: 2}
			if err := l.Decode(tc.in); !errors.Is(err, tc.want) || l != (Lease{1, 2}) {
				t.Fatalf("Decode(%q) = %v, lease %+v; want %v, lease unchanged", tc.in, err, l, tc.want)
			}
		})
	}
}

func TestLeaseStep(t *testing.T) {
	const me, other, ttl, now = 1, 2, 1000, 10_000
	claim := Lease{Holder: me, ExpiresNanos: now + ttl}
	for _, tc := range []struct {
		name       string
		cur        Lease
		found      bool
		wantNext   Lease
		wantWrite  bool
		wantLeader bool
	}{
		{name: "missing", found: false, wantNext: claim, wantWrite: true, wantLeader: true},
		{name: "mine fresh", cur: Lease{me, now + 900}, found: true, wantNext: Lease{me, now + 900}, wantLeader: true},
		{name: "mine at half", cur: Lease{me, now + 500}, found: true, wantNext: Lease{me, now + 500}, wantLeader: true},
		{name: "mine renew", cur: Lease{me, now + 499}, found: true, wantNext: claim, wantWrite: true, wantLeader: true},
		{name: "mine expired", cur: Lease{me, now - 1}, found: true, wantNext: claim, wantWrite: true, wantLeader: true},
		{name: "other valid", cur: Lease{other, now + 1}, found: true, wantNext: Lease{other, now + 1}},
		{name: "other valid long ttl", cur: Lease{other, now + 2*ttl}, found: true, wantNext: Lease{other, now + 2*ttl}},
		{name: "other expired", cur: Lease{other, now}, found: true, wantNext: claim, wantWrite: true, wantLeader: true},
		{name: "free", cur: Lease{0, now + 500}, found: true, wantNext: claim, wantWrite: true, wantLeader: true},
		{name: "garbage as zero", cur: Lease{}, found: true, wantNext: claim, wantWrite: true, wantLeader: true},
		{name: "clock back, mine", cur: Lease{me, now + ttl + 1}, found: true, wantNext: claim, wantWrite: true, wantLeader: true},
		{name: "clock back, other", cur: Lease{other, now + 2*ttl + 1}, found: true, wantNext: claim, wantWrite: true, wantLeader: true},
		{name: "far future, other", cur: Lease{other, 1<<63 - 1}, found: true, wantNext: claim, wantWrite: true, wantLeader: true},
		{name: "far past, other", cur: Lease{other, -1 << 63}, found: true, wantNext: claim, wantWrite: true, wantLeader: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next, write, leader := LeaseStep(tc.cur, tc.found, me, now, ttl)
			if next != tc.wantNext || write != tc.wantWrite || leader != tc.wantLeader {
				t.Fatalf("LeaseStep(%+v, %v, me, %d, %d) = %+v, %v, %v; want %+v, %v, %v",
					tc.cur, tc.found, now, ttl, next, write, leader, tc.wantNext, tc.wantWrite, tc.wantLeader)
			}
		})
	}
	// Saturation: a huge now or ttl never wraps into the past.
	if next, _, _ := LeaseStep(Lease{}, false, me, 1<<63-10, ttl); next.ExpiresNanos != 1<<63-1 {
		t.Fatalf("LeaseStep near max time: expires %d, want saturated max", next.ExpiresNanos)
	}
}

// TestLeaseStepScraper: a scraper takes a worker's valid lease, follows
// another scraper's, and keeps its own; a worker follows a scraper's.
func TestLeaseStepScraper(t *testing.T) {
	const ttl, now = 1000, 10_000
	const scraper, otherScraper, worker = ScraperBit | 3, ScraperBit | 4, 2
	claim := func(id uint64) Lease { return Lease{Holder: id, ExpiresNanos: now + ttl} }
	for _, tc := range []struct {
		name       string
		me         uint64
		cur        Lease
		wantNext   Lease
		wantWrite  bool
		wantLeader bool
	}{
		{name: "scraper over a worker's valid lease", me: scraper, cur: Lease{worker, now + 900}, wantNext: claim(scraper), wantWrite: true, wantLeader: true},
		{name: "scraper behind another scraper", me: scraper, cur: Lease{otherScraper, now + 900}, wantNext: Lease{otherScraper, now + 900}},
		{name: "scraper keeps its own", me: scraper, cur: Lease{scraper, now + 900}, wantNext: Lease{scraper, now + 900}, wantLeader: true},
		{name: "scraper after another scraper lapsed", me: scraper, cur: Lease{otherScraper, now - 1}, wantNext: claim(scraper), wantWrite: true, wantLeader: true},
		{name: "worker behind a scraper", me: worker, cur: Lease{scraper, now + 1}, wantNext: Lease{scraper, now + 1}},
		{name: "worker after a scraper lapsed", me: worker, cur: Lease{scraper, now}, wantNext: claim(worker), wantWrite: true, wantLeader: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next, write, leader := LeaseStep(tc.cur, true, tc.me, now, ttl)
			if next != tc.wantNext || write != tc.wantWrite || leader != tc.wantLeader {
				t.Fatalf("LeaseStep(%+v, true, %#x, %d, %d) = %+v, %v, %v; want %+v, %v, %v",
					tc.cur, tc.me, now, ttl, next, write, leader, tc.wantNext, tc.wantWrite, tc.wantLeader)
			}
		})
	}
}

// store mimics cpp-host shared data for one key (docs/abi.md "Envoy behaviour"): a global CAS
// counter that skips 0; set with cas≠0 on an existing key must match; set on a
// missing key ignores cas.
type store struct {
	val   []byte
	cas   uint32
	found bool
	ctr   uint32
}

func (s *store) get() ([]byte, uint32, bool) { return s.val, s.cas, s.found }

func (s *store) set(v []byte, cas uint32) bool {
	if s.found && cas != 0 && cas != s.cas {
		return false
	}
	s.ctr++
	s.val, s.cas, s.found = bytes.Clone(v), s.ctr, true
	return true
}

// leaseTick runs the caller protocol from LeaseStep's doc comment, with an
// optional hook between the read and the set, where other workers may run.
func leaseTick(s *store, me uint64, now, ttl int64, between func()) bool {
	v, cas, found := s.get()
	var cur Lease
	_ = cur.Decode(v)
	next, write, leader := LeaseStep(cur, found, me, now, ttl)
	if between != nil {
		between()
	}
	if write {
		if !found {
			cas = 0
		}
		b, _ := next.AppendBinary(nil)
		if !s.set(b, cas) {
			leader = false
		}
		if leader && !found {
			v2, _, ok := s.get()
			var l Lease
			leader = ok && l.Decode(v2) == nil && l.Holder == me
		}
	}
	return leader
}

func TestLeaseProtocol(t *testing.T) {
	const ttl = 1000
	var s store
	// Worst creation race: A and B both read NOT_FOUND; A sets and confirms,
	// then B sets (cas 0 overwrites) and confirms. Both lead for this tick.
	var aLeader bool
	lb := leaseTick(&s, 2, 0, ttl, func() { aLeader = leaseTick(&s, 1, 0, ttl, nil) })
	if !aLeader || !lb {
		t.Fatalf("creation race: leaders A=%v B=%v, want both for one tick", aLeader, lb)
	}
	// From the next tick on, exactly one leader (B holds the key).
	for now := int64(100); now < 10*ttl; now += 100 {
		a := leaseTick(&s, 1, now, ttl, nil)
		b := leaseTick(&s, 2, now, ttl, nil)
		if a || !b {
			t.Fatalf("tick at %d: leaders A=%v B=%v, want B only", now, a, b)
		}
	}
	// B dies after its last renewal; A takes over only once the lease expires.
	var l Lease
	v, _, _ := s.get()
	_ = l.Decode(v)
	for now := int64(10 * ttl); now <= l.ExpiresNanos+100; now += 100 {
		a := leaseTick(&s, 1, now, ttl, nil)
		if a != (now >= l.ExpiresNanos) {
			t.Fatalf("A leader at %d = %v, want %v (B's lease expires at %d)", now, a, now >= l.ExpiresNanos, l.ExpiresNanos)
		}
	}
	// Takeover race on an existing key: two readers with the same CAS, one wins.
	var s3 store
	old, _ := Lease{9, 0}.AppendBinary(nil)
	s3.set(old, 0)
	x := leaseTick(&s3, 1, 10, ttl, func() { _ = leaseTick(&s3, 2, 10, ttl, nil) })
	if x {
		t.Fatal("takeover race: the worker whose CAS went stale still leads")
	}
	v, _, _ = s3.get()
	_ = l.Decode(v)
	if l.Holder != 2 {
		t.Fatalf("takeover race: holder = %d, want 2", l.Holder)
	}
}
