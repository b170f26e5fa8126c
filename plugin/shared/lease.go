package shared

// Lease is the scraping leader's claim in shared data (KeyLease): only the
// worker VM holding an unexpired lease scrapes replica metrics and publishes
// the snapshot (docs/design.md "Shared state").
type Lease struct {
	Holder       uint64 // worker id of the leader; 0 = nobody
	ExpiresNanos int64  // the claim lapses at this time unless renewed
}

// Lease encoding, version 1: "GRLS" version=1 u8, holder u64, expires i64.
const leaseLen = headerLen + 8 + 8

// AppendBinary appends l's versioned encoding to b (21 bytes).
func (l Lease) AppendBinary(b []byte) ([]byte, error) {
	b = appendHeader(b, magicLease)
	b = appendU64(b, l.Holder)
	return appendU64(b, uint64(l.ExpiresNanos)), nil
}

// Decode replaces l with the lease encoded in b; on error l is unchanged.
func (l *Lease) Decode(b []byte) error {
	r := reader{b: b}
	if err := r.header(magicLease, "lease"); err != nil {
		return err
	}
	h, e := r.u64(), int64(r.u64())
	if r.short {
		return r.shortErr("lease")
	}
	if err := r.end("lease"); err != nil {
		return err
	}
	l.Holder, l.ExpiresNanos = h, e
	return nil
}

// LeaseStep decides one tick of the leader-lease protocol for worker me
// (nonzero) at nowNanos with lease length ttlNanos (> 0). cur is the decoded
// lease and found whether the key existed; a value that does not decode should
// be passed as found=true with the zero Lease, which is free to take over.
//
// It returns the lease to write (when write is true) and whether me is leader
// this tick; when write is true, leadership holds only if the write succeeds.
// Caller protocol, per tick (docs/abi.md "Envoy behaviour": a set with cas≠0 on an existing key
// must match; a set on a MISSING key ignores the cas and always succeeds):
//
//	v, cas, found := get(KeyLease)            // found=false on NOT_FOUND
//	cur := Lease{}; _ = cur.Decode(v)          // garbage decodes as free
//	next, write, leader := LeaseStep(cur, found, me, now, ttl)
//	if write {
//	    if !found { cas = 0 }                 // creation: cas is ignored anyway
//	    if set(KeyLease, next, cas) != OK { leader = false } // CAS_MISMATCH: someone else won
//	    if leader && !found {                  // creation is not atomic:
//	        v2, _, ok := get(KeyLease)         // re-read to confirm
//	        var l Lease
//	        leader = ok && l.Decode(v2) == nil && l.Holder == me
//	    }
//	}
//
// Cases: missing → claim; held by me → keep, renewing when less than half
// the TTL remains (or more than the whole TTL, after the clock went back);
// held by another and expired (or free) → take over with the read CAS; held
// by another and valid → follow. Renewal and takeover use the CAS from the
// read, so among workers racing on an existing key exactly one wins. Two
// workers can both "create" a missing key: both sets succeed and the last one
// wins. The re-read removes most of that race, but a worker that re-reads
// before the other writes still believes it leads for that one tick; on its
// next tick it reads the other's valid lease and follows. So at most one extra
// leader exists, for at most one tick, and only right after creation (the key
// lives as long as the vm_id's shared data, so that is at start-up).
//
// Clock jumps: a lease claiming to expire more than 2×ttl ahead cannot have
// been written with this clock (a holder sets now+ttl), so others treat it as
// expired rather than wait out a backwards jump; the factor 2 tolerates
// workers briefly running configurations with different TTLs. The holder
// rewrites a lease that is more than ttl ahead. A forward jump just expires
// the lease early, and the next tick elects again.
// A scraper (me with ScraperBit set) also takes a valid lease from a
// worker: a scrape on a worker's thread holds that worker's requests, on
// the main thread nobody's (config.RoleScraper). Between scrapers, and
// for workers, a valid lease is followed as it is.
func LeaseStep(cur Lease, found bool, me uint64, nowNanos, ttlNanos int64) (next Lease, write bool, leader bool) {
	if ttlNanos <= 0 {
		ttlNanos = 1
	}
	claim := Lease{Holder: me, ExpiresNanos: addSat(nowNanos, ttlNanos)}
	if !found {
		return claim, true, true
	}
	remaining := subSat(cur.ExpiresNanos, nowNanos)
	if cur.Holder == me && me != 0 {
		if remaining < ttlNanos/2 || remaining > ttlNanos {
			return claim, true, true
		}
		return cur, false, true
	}
	preempt := me&ScraperBit != 0 && cur.Holder&ScraperBit == 0
	if cur.Holder == 0 || remaining <= 0 || remaining > 2*min(ttlNanos, 1<<61) || preempt {
		return claim, true, true
	}
	return cur, false, false
}

// ScraperBit marks the id of a scraper (config.RoleScraper) in a Lease's
// Holder: worker ids count up from 1 and never reach it.
const ScraperBit = 1 << 63

// addSat and subSat are int64 + and - saturating at the bounds, so a bogus
// expiry from a corrupt value cannot wrap into a valid-looking one.
func addSat(a, b int64) int64 {
	c := a + b
	if (c > a) != (b > 0) {
		if b > 0 {
			return 1<<63 - 1
		}
		return -1 << 63
	}
	return c
}

func subSat(a, b int64) int64 {
	if b == -1<<63 {
		return addSat(addSat(a, 1<<63-1), 1)
	}
	return addSat(a, -b)
}
