package shared

import (
	"math/bits"
	"slices"
	"strconv"

	"github.com/gpuroute/gpuroute/scoring"
	"github.com/gpuroute/gpuroute/scoring/le"
)

// Board holds the latest decoded WorkRecord of each peer worker. Per tick, for
// every id in the Registry other than its own, a worker reads the peer's
// WorkKey and calls Update; then Retain(registry ids) drops departed peers,
// and Sum adds the live peers' work for scoring. The zero Board is empty,
// with ConfigID 0; set ConfigID to the worker's ConfigIDOf. Not safe for
// concurrent use (one per VM).
type Board struct {
	// ConfigID filters records: Sum counts only records with this ConfigID.
	ConfigID uint64
	peers    []peer

	// Gather's state: the sums it returned, which entries moved since
	// (patched: dirty; everything: stale), which sums depend on the clock
	// (timed, a bit per entry), and what it counted, to notice when the
	// set of counted records changes.
	sum           []scoring.Work
	changed       []int
	dirty         []uint16
	stale         bool
	timed, marked []uint64
	counted       []uint64         // worker ids, in peer order
	wasCounted    []uint64         // the previous Gather's
	live          [][]scoring.Work // the counted records' Work, for this Gather
	gatheredFor   [2]uint64        // me and ConfigID of the last Gather
}

type peer struct {
	cas uint32
	rec WorkRecord
}

// Len returns how many peer records the board holds (live or expired).
func (b *Board) Len() int { return len(b.peers) }

func (b *Board) find(worker uint64) int {
	for i := range b.peers {
		if b.peers[i].rec.Worker == worker {
			return i
		}
	}
	return -1
}

// Update stores the value read from worker's key with cas. A cas already seen
// for that worker skips decoding. A value that does not decode, or names
// another worker, returns an error and leaves the previous record (which
// expires on its own). The board holds at most MaxWorkers peers; beyond that
// Update fails. Steady state (known peers, same replica count) does not
// allocate.
func (b *Board) Update(worker uint64, cas uint32, value []byte) error {
	i := b.find(worker)
	if i >= 0 && cas != 0 && b.peers[i].cas == cas {
		return nil
	}
	added := i < 0
	if added {
		if len(b.peers) >= MaxWorkers {
			return fail(ErrInvalid, "board peer count", int64(len(b.peers)), "reached "+strconv.Itoa(MaxWorkers))
		}
		if len(b.peers) < cap(b.peers) {
			b.peers = b.peers[:len(b.peers)+1] // reuse a dropped peer's Work slice
		} else {
			b.peers = append(b.peers, peer{})
		}
		i = len(b.peers) - 1
		p := &b.peers[i]
		p.cas, p.rec.Worker, p.rec.WrittenNanos, p.rec.ConfigID, p.rec.Work = 0, worker, 0, 0, p.rec.Work[:0]
	}
	p := &b.peers[i]
	// Check the writer before decoding: Decode overwrites p.rec in place.
	var err error
	if len(value) >= headerLen+8 && string(value[:4]) == magicWork {
		if id := le.Uint64(value, headerLen); id != worker {
			err = &codecError{msg: "shared: work record worker " + strconv.FormatUint(id, 16) + ": read under the key of worker " + strconv.FormatUint(worker, 16), kind: ErrInvalid}
		}
	}
	if err == nil && !added && p.rec.applyPatches(value, b.markDirty) {
		p.cas = cas
		return nil
	}
	if err == nil {
		err = p.rec.Decode(value) // leaves p.rec unchanged on error
		b.stale = true
	}
	if err != nil {
		if added {
			b.drop(i)
		}
		return err
	}
	p.cas = cas
	return nil
}

// drop removes peer i by swapping the last peer into its place, keeping the
// removed record's Work slice beyond len for reuse.
func (b *Board) drop(i int) {
	last := len(b.peers) - 1
	b.peers[i], b.peers[last] = b.peers[last], b.peers[i]
	b.peers = b.peers[:last]
}

// Retain drops every record whose worker is not in workers (the registry).
func (b *Board) Retain(workers []uint64) {
	for i := 0; i < len(b.peers); {
		if !containsID(workers, b.peers[i].rec.Worker) {
			b.drop(i)
			continue
		}
		i++
	}
}

// Sum adds to out (index-aligned with the replica list; zero it first for a
// plain sum) the work of every peer record other than me's that has the
// board's ConfigID, as many entries as out, and a WrittenNanos within
// maxAgeNanos of nowNanos either way: a dead worker's last record must expire,
// not count forever, and one stamped far in the future (a clock jump) is not
// trusted either. The workers of one Envoy share its clock, so each peer's
// prefill window is evaluated at nowNanos into DoneSec (scoring.Work.AddAt).
// It returns how many records it added and the sum of their ArrivalPerSec.
func (b *Board) Sum(me uint64, nowNanos, maxAgeNanos int64, out []scoring.Work) (added int, perSec float64) {
	for i := range b.peers {
		rec := &b.peers[i].rec
		if !b.counts(rec, me, nowNanos, maxAgeNanos, len(out)) {
			continue
		}
		for j := range out {
			out[j].AddAt(&rec.Work[j], nowNanos)
		}
		added++
		perSec += rec.ArrivalPerSec
	}
	return added, perSec
}

// Gather returns what Sum would add into n zeroed entries, kept by the
// board, which of them changed since the previous Gather (all: every one;
// the slices alias the board until the next Gather), and the sum of the
// counted records' ArrivalPerSec. Only the entries
// a patch rewrote and those whose sum depends on the clock (a peer's
// prefill window: Work.AddAt) are summed again, unless the records counted
// changed (one decoded whole, added, dropped, expired or come back) or me,
// ConfigID or n did: then all are. A worker deciding on every request
// thereby sums the few replicas the other workers' last requests touched,
// not the fleet. Steady state does not allocate.
func (b *Board) Gather(me uint64, nowNanos, maxAgeNanos int64, n int) (sum []scoring.Work, changed []int, all bool, perSec float64) {
	b.counted, b.wasCounted = b.wasCounted[:0], b.counted
	b.live = b.live[:0]
	for i := range b.peers {
		if rec := &b.peers[i].rec; b.counts(rec, me, nowNanos, maxAgeNanos, n) {
			b.counted = append(b.counted, rec.Worker)
			b.live = append(b.live, rec.Work)
			perSec += rec.ArrivalPerSec
		}
	}
	words := (n + 63) / 64
	if len(b.sum) != n || b.gatheredFor != [2]uint64{me, b.ConfigID} || !slices.Equal(b.counted, b.wasCounted) {
		b.stale = true
		b.gatheredFor = [2]uint64{me, b.ConfigID}
		b.sum = slices.Grow(b.sum[:0], n)[:n]
		b.timed = slices.Grow(b.timed[:0], words)[:words]
		b.marked = slices.Grow(b.marked[:0], words)[:words]
	}
	b.changed = b.changed[:0]
	if b.stale || len(b.dirty) > n {
		b.stale, b.dirty = false, b.dirty[:0]
		for j := range n {
			b.sumEntry(j, nowNanos)
		}
		return b.sum, nil, true, perSec
	}
	clear(b.marked)
	for _, j := range b.dirty {
		if int(j) < n {
			b.marked[j/64] |= 1 << (j % 64)
		}
	}
	b.dirty = b.dirty[:0]
	for w := range words {
		for m := b.marked[w] | b.timed[w]; m != 0; m &= m - 1 {
			j := w*64 + bits.TrailingZeros64(m)
			b.sumEntry(j, nowNanos)
			b.changed = append(b.changed, j)
		}
	}
	return b.sum, b.changed, false, perSec
}

// counts reports whether Sum and Gather count rec.
func (b *Board) counts(rec *WorkRecord, me uint64, nowNanos, maxAgeNanos int64, n int) bool {
	if rec.Worker == me || rec.ConfigID != b.ConfigID || len(rec.Work) != n {
		return false
	}
	d := subSat(nowNanos, rec.WrittenNanos)
	return d <= maxAgeNanos && d >= -maxAgeNanos
}

// sumEntry sets Gather's sum of entry j over the counted records, in
// Sum's order (so the float sums are the same), and whether it is timed.
func (b *Board) sumEntry(j int, nowNanos int64) {
	w := &b.sum[j]
	*w = scoring.Work{}
	timed := false
	for _, work := range b.live {
		o := &work[j]
		w.AddAt(o, nowNanos)
		timed = timed || o.RunFromNanos > 0
	}
	bit := uint64(1) << (j % 64)
	if timed {
		b.timed[j/64] |= bit
	} else {
		b.timed[j/64] &^= bit
	}
}

// markDirty notes that a patch rewrote entry j of a peer's record.
func (b *Board) markDirty(j int) {
	if len(b.dirty) < MaxReplicas {
		b.dirty = append(b.dirty, uint16(j))
	} else {
		b.stale = true
	}
}

// Record returns the stored record of worker, or nil. It aliases the board
// until the next Update or Retain.
func (b *Board) Record(worker uint64) *WorkRecord {
	if i := b.find(worker); i >= 0 {
		return &b.peers[i].rec
	}
	return nil
}
