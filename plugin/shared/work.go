package shared

import (
	"math"
	"math/bits"
	"slices"
	"strconv"

	"github.com/gpuroute/gpuroute/scoring"
	"github.com/gpuroute/gpuroute/scoring/le"
)

// Shared-data keys (one vm_id scope; ABI.md §3.2).
const (
	// KeySnapshot holds the leader's encoded Snapshot.
	KeySnapshot = "gpuroute/fleet"
	// KeyLease holds the encoded leader Lease.
	KeyLease = "gpuroute/lease"
	// KeyRegistry holds the encoded Registry of worker ids.
	KeyRegistry = "gpuroute/workers"
	// WorkKeyPrefix starts each worker's WorkRecord key, followed by the
	// worker id as 16 lowercase hex digits (AppendWorkKey).
	WorkKeyPrefix = "gpuroute/work/"
	// WorkKeyLen is the length of every work key.
	WorkKeyLen = len(WorkKeyPrefix) + 16
)

// AppendWorkKey appends worker's work-record key, WorkKeyPrefix followed by
// its id in 16 lowercase hex digits, to dst without allocating (given
// capacity). The ABI host call takes a string, so callers usually build it
// once per peer with WorkKey and keep it.
func AppendWorkKey(dst []byte, worker uint64) []byte {
	return appendWorkerKey(dst, WorkKeyPrefix, worker)
}

// appendWorkerKey appends prefix and worker's id in 16 lowercase hex digits.
func appendWorkerKey(dst []byte, prefix string, worker uint64) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, prefix...)
	for s := 60; s >= 0; s -= 4 {
		dst = append(dst, hex[worker>>uint(s)&15])
	}
	return dst
}

// WorkKey returns worker's work-record key as a string; it allocates once, so
// cache the result per worker id.
func WorkKey(worker uint64) string {
	var buf [WorkKeyLen]byte
	return string(AppendWorkKey(buf[:0], worker))
}

// WorkRecord is one worker VM's in-flight work per replica, published under
// its own WorkKey each tick so the other workers can add it to their own
// (scoring.Replica.PeerWork). Work is index-aligned with the replica list
// that ConfigID names.
type WorkRecord struct {
	Worker       uint64 // the writer's worker id
	WrittenNanos int64  // writer's clock at publish; old records expire
	ConfigID     uint64 // ConfigIDOf the writer's replica list
	// ArrivalPerSec is the writer's dispatch rate to the fleet at
	// WrittenNanos (scoring.Ledger.Rate; for the peer gateways' sum
	// published by the leader, theirs): one figure per writer, since only
	// the fleet's total prices a decision, and one that changes on every
	// publish without touching an entry.
	ArrivalPerSec float64
	Work          []scoring.Work
	// Seq counts the writer's publishes (NextPublish and PutEntry each
	// add one). Patches lists the entries the publishes since the last
	// whole encoding rewrote, oldest first, the last MaxPatches of them:
	// a reader holding publish Seq−k with k ≤ len(Patches) decodes those
	// k entries instead of all (Board.Update). Workers read each other's
	// records on every decision and publish up to three times per request
	// (dispatch, first token, end), so one patch would rarely be enough.
	Seq     uint32
	Patches []uint16

	spare []scoring.Work // Decode's second buffer
}

// WorkRecord encoding: "GRWK" version u8, worker u64, written i64,
// configID u64, ArrivalPerSec as float64 bits (finite, >= 0), seq u32,
// patch count u8 and MaxPatches patched entries u16 (< count; unused slots
// 0), count u16, then per replica nine i64 in scoring.Work field order
// (QueuedN, QueuedTokens, DecodeN, DecodeTokens, UnseenN, UnseenTokens,
// RunFromNanos, RunUntilNanos, PendingN), each >= 0. DoneSec and
// ClearNanos are not carried: readers derive them from the window.
const (
	workRateOff   = headerLen + 8 + 8 + 8
	workSeqOff    = workRateOff + 8
	workHeaderLen = workSeqOff + 4 + 1 + 2*MaxPatches + 2
	workEntryLen  = 9 * 8
)

// EncodedLen returns the length of w's encoding.
func (w *WorkRecord) EncodedLen() int { return workHeaderLen + workEntryLen*len(w.Work) }

// MaxPatches bounds WorkRecord.Patches.
const MaxPatches = 8

// NextPublish marks w's next whole encoding as a new publish (Seq+1, no
// patches); call it before AppendBinary when publishing.
func (w *WorkRecord) NextPublish() {
	w.Seq++
	w.Patches = w.Patches[:0]
}

// AppendBinary appends w's versioned encoding to b; it fails, returning b,
// when Work is longer than MaxReplicas, Patches is longer than MaxPatches or
// names no entry, or Work holds a negative figure.
func (w *WorkRecord) AppendBinary(b []byte) ([]byte, error) {
	if len(w.Work) > MaxReplicas {
		return b, fail(ErrInvalid, "work replica count", int64(len(w.Work)), "exceeds "+strconv.Itoa(MaxReplicas))
	}
	for i := range w.Work {
		if err := checkWork(&w.Work[i]); err != nil {
			return b, err
		}
	}
	if err := checkRate(w.ArrivalPerSec); err != nil {
		return b, err
	}
	if len(w.Patches) > MaxPatches {
		return b, fail(ErrInvalid, "work patch count", int64(len(w.Patches)), "exceeds "+strconv.Itoa(MaxPatches))
	}
	for _, e := range w.Patches {
		if int(e) >= len(w.Work) {
			return b, fail(ErrInvalid, "work patched entry", int64(e), "must be below the replica count "+strconv.Itoa(len(w.Work)))
		}
	}
	b = appendHeader(b, magicWork)
	b = appendU64(b, w.Worker)
	b = appendU64(b, uint64(w.WrittenNanos))
	b = appendU64(b, w.ConfigID)
	b = appendU64(b, math.Float64bits(w.ArrivalPerSec))
	b = appendU32(b, w.Seq)
	b = append(b, byte(len(w.Patches)))
	for k := range MaxPatches {
		e := uint16(0)
		if k < len(w.Patches) {
			e = w.Patches[k]
		}
		b = appendU16(b, e)
	}
	b = appendU16(b, uint16(len(w.Work)))
	for i := range w.Work {
		b = appendWork(b, &w.Work[i])
	}
	return b, nil
}

// appendWork appends x's workEntryLen-byte encoding, shared by WorkRecord and
// PeerExport so both carry scoring.Work identically.
func appendWork(b []byte, x *scoring.Work) []byte {
	b = appendU64(b, uint64(x.QueuedN))
	b = appendU64(b, uint64(x.QueuedTokens))
	b = appendU64(b, uint64(x.DecodeN))
	b = appendU64(b, uint64(x.DecodeTokens))
	b = appendU64(b, uint64(x.UnseenN))
	b = appendU64(b, uint64(x.UnseenTokens))
	b = appendU64(b, uint64(x.RunFromNanos))
	b = appendU64(b, uint64(x.RunUntilNanos))
	return appendU64(b, uint64(x.PendingN))
}

// readWork decodes into x the entry appendWork wrote at the start of e (at
// least workEntryLen bytes) and validates it with checkWork. Writing through
// x rather than returning a Work spares a 56-byte copy per entry on the
// request path.
func readWork(x *scoring.Work, e []byte) error {
	e = e[:workEntryLen:workEntryLen]
	x.QueuedN, x.QueuedTokens = int64(le.Uint64(e, 0)), int64(le.Uint64(e, 8))
	x.DecodeN, x.DecodeTokens = int64(le.Uint64(e, 16)), int64(le.Uint64(e, 24))
	x.UnseenN, x.UnseenTokens = int64(le.Uint64(e, 32)), int64(le.Uint64(e, 40))
	x.RunFromNanos, x.RunUntilNanos = int64(le.Uint64(e, 48)), int64(le.Uint64(e, 56))
	x.PendingN = int64(le.Uint64(e, 64))
	x.DoneSec, x.ClearNanos = 0, 0
	return checkWork(x)
}

// PutEntry rewrites, in buf (an encoding of w made by AppendBinary), entry
// i, WrittenNanos and ArrivalPerSec with w's current values as w's next publish
// (Seq+1, i appended to Patches), so a worker that changed one replica's work
// republishes without re-encoding the rest and its readers decode only
// that entry. It reports false, leaving buf and w alone, when buf does not
// have w's shape or the entry is invalid; the
// caller then encodes anew.
func (w *WorkRecord) PutEntry(buf []byte, i int) bool {
	if len(buf) != w.EncodedLen() || i < 0 || i >= len(w.Work) || string(buf[:4]) != magicWork {
		return false
	}
	x := &w.Work[i]
	if checkWork(x) != nil || checkRate(w.ArrivalPerSec) != nil {
		return false
	}
	w.Seq++
	if len(w.Patches) == MaxPatches {
		w.Patches = append(w.Patches[:0], w.Patches[1:]...)
	}
	w.Patches = append(w.Patches, uint16(i))
	putLE64(buf[headerLen+8:], uint64(w.WrittenNanos))
	putLE64(buf[workRateOff:], math.Float64bits(w.ArrivalPerSec))
	putLE32(buf[workSeqOff:], w.Seq)
	h := buf[workSeqOff+4:]
	h[0] = byte(len(w.Patches))
	for k, e := range w.Patches {
		h[1+2*k], h[2+2*k] = byte(e), byte(e>>8)
	}
	putWork(buf[workHeaderLen+i*workEntryLen:][:workEntryLen:workEntryLen], x)
	return true
}

// putWork writes x's workEntryLen-byte encoding (appendWork's) into e.
func putWork(e []byte, x *scoring.Work) {
	e = e[:workEntryLen:workEntryLen]
	putLE64(e[0:8], uint64(x.QueuedN))
	putLE64(e[8:16], uint64(x.QueuedTokens))
	putLE64(e[16:24], uint64(x.DecodeN))
	putLE64(e[24:32], uint64(x.DecodeTokens))
	putLE64(e[32:40], uint64(x.UnseenN))
	putLE64(e[40:48], uint64(x.UnseenTokens))
	putLE64(e[48:56], uint64(x.RunFromNanos))
	putLE64(e[56:64], uint64(x.RunUntilNanos))
	putLE64(e[64:72], uint64(x.PendingN))
}

func putLE64(b []byte, v uint64) {
	_ = b[7]
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	b[4], b[5], b[6], b[7] = byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56)
}

func checkWork(x *scoring.Work) error {
	// One test for the nine counts (their OR is negative exactly when one
	// is): readers check every entry they take, on every request.
	if x.QueuedN|x.QueuedTokens|x.DecodeN|x.DecodeTokens|x.UnseenN|x.UnseenTokens|x.RunFromNanos|x.RunUntilNanos|x.PendingN < 0 {
		for _, v := range [...]int64{x.QueuedN, x.QueuedTokens, x.DecodeN, x.DecodeTokens, x.UnseenN, x.UnseenTokens, x.RunFromNanos, x.RunUntilNanos, x.PendingN} {
			if v < 0 {
				return fail(ErrInvalid, "work figure", v, "must be >= 0")
			}
		}
	}
	return nil
}

// checkRate validates an arrival rate: finite and >= 0.
func checkRate(r float64) error {
	if !(r >= 0 && r <= math.MaxFloat64) {
		return fail(ErrInvalid, "arrival rate", int64(math.Float64bits(r)), "must be finite and >= 0 (float64 bits)")
	}
	return nil
}

// Decode replaces w with the record encoded in b, reusing w.Work's capacity.
// It validates all of b first, so on error w is unchanged.
func (w *WorkRecord) Decode(b []byte) error {
	r := reader{b: b}
	if err := r.header(magicWork, "work"); err != nil {
		return err
	}
	worker, written, cfg := r.u64(), int64(r.u64()), r.u64()
	rate := math.Float64frombits(r.u64())
	seq := r.u32()
	patches := r.take(1 + 2*MaxPatches)
	n := int(r.u16())
	if r.short {
		return r.shortErr("work header")
	}
	if n > MaxReplicas {
		return fail(ErrInvalid, "work replica count", int64(n), "exceeds "+strconv.Itoa(MaxReplicas))
	}
	if err := checkRate(rate); err != nil {
		return err
	}
	if err := checkPatches(patches, n); err != nil {
		return err
	}
	if r.left() != n*workEntryLen {
		if r.left() < n*workEntryLen {
			return fail(ErrShort, "work replica count", int64(n), "needs more bytes than the value has")
		}
		return fail(ErrInvalid, "work trailing bytes", int64(r.left()-n*workEntryLen), "must be 0")
	}
	// One pass over the entries into spare storage, swapped in only when
	// all are valid, so the receiver is unchanged on error. Workers read
	// each other's records on every decision (the router's per-request
	// exchange), so this is on the request path: plain loads from the
	// entry slice, no reader calls per field.
	body := b[len(b)-n*workEntryLen:]
	spare := w.spare[:0]
	if cap(spare) < n {
		spare = make([]scoring.Work, 0, n)
	}
	spare = spare[:n]
	for i := range spare {
		if err := readWork(&spare[i], body[i*workEntryLen:]); err != nil {
			w.spare = spare[:0]
			return err
		}
	}
	w.Worker, w.WrittenNanos, w.ConfigID, w.ArrivalPerSec = worker, written, cfg, rate
	w.Seq = seq
	w.Patches = readPatches(w.Patches[:0], patches)
	w.Work, w.spare = spare, w.Work
	return nil
}

// checkPatches validates the patch list of a record of n entries: a count
// up to MaxPatches, listed entries below n, unused slots zero (canonical).
func checkPatches(p []byte, n int) error {
	k := int(p[0])
	if k > MaxPatches {
		return fail(ErrInvalid, "work patch count", int64(k), "exceeds "+strconv.Itoa(MaxPatches))
	}
	for j := range MaxPatches {
		e := int(p[1+2*j]) | int(p[2+2*j])<<8
		if j < k && e >= n {
			return fail(ErrInvalid, "work patched entry", int64(e), "must be below the replica count "+strconv.Itoa(n))
		}
		if j >= k && e != 0 {
			return fail(ErrInvalid, "work unused patch slot", int64(e), "must be 0")
		}
	}
	return nil
}

func readPatches(dst []uint16, p []byte) []uint16 {
	for j := range int(p[0]) {
		dst = append(dst, uint16(p[1+2*j])|uint16(p[2+2*j])<<8)
	}
	return dst
}

// applyPatches updates w from b when b is a later publish of the same
// writer that differs from w only by PutEntry rewrites it lists (same
// worker, configuration and shape; the publishes since w's Seq all among
// b's patches): it reads those entries, WrittenNanos and ArrivalPerSec
// only. It reports false, leaving w alone, when b is anything else or a
// field it would read is invalid (the caller then decodes b whole). It
// calls rewrote with each entry it rewrites.
func (w *WorkRecord) applyPatches(b []byte, rewrote func(entry int)) bool {
	n := len(w.Work)
	if len(b) != workHeaderLen+n*workEntryLen || string(b[:4]) != magicWork || b[4] != Version {
		return false
	}
	// The header's fields at their fixed offsets (the length is checked):
	// a reader takes a patch of every other worker on every request.
	h := b[:workHeaderLen:workHeaderLen]
	worker, written, cfg := le.Uint64(h, headerLen), int64(le.Uint64(h, headerLen+8)), le.Uint64(h, headerLen+16)
	rate := math.Float64frombits(le.Uint64(h, workRateOff))
	seq := uint32(h[workSeqOff]) | uint32(h[workSeqOff+1])<<8 | uint32(h[workSeqOff+2])<<16 | uint32(h[workSeqOff+3])<<24
	patches := h[workSeqOff+4 : workSeqOff+5+2*MaxPatches]
	count := int(h[workHeaderLen-2]) | int(h[workHeaderLen-1])<<8
	missed := seq - w.Seq // publishes since the one w holds
	if missed == 0 || missed > uint32(patches[0]) || count != n || worker != w.Worker || cfg != w.ConfigID ||
		checkRate(rate) != nil || checkPatches(patches, n) != nil {
		return false
	}
	k := int(patches[0])
	var x [MaxPatches]scoring.Work
	for j := k - int(missed); j < k; j++ {
		i := int(patches[1+2*j]) | int(patches[2+2*j])<<8
		if readWork(&x[j], b[workHeaderLen+i*workEntryLen:]) != nil {
			return false
		}
	}
	for j := k - int(missed); j < k; j++ {
		i := int(patches[1+2*j]) | int(patches[2+2*j])<<8
		w.Work[i] = x[j]
		rewrote(i)
	}
	w.WrittenNanos, w.ArrivalPerSec, w.Seq = written, rate, seq
	w.Patches = readPatches(w.Patches[:0], patches)
	return true
}

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

// Remove drops worker's record.
func (b *Board) Remove(worker uint64) {
	if i := b.find(worker); i >= 0 {
		b.drop(i)
	}
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
// until the next Update, Remove or Retain.
func (b *Board) Record(worker uint64) *WorkRecord {
	if i := b.find(worker); i >= 0 {
		return &b.peers[i].rec
	}
	return nil
}

// MaxWorkers bounds the Registry and the Board: Envoy runs one worker thread
// per core (--concurrency), far below it.
const MaxWorkers = 256

// Registry is the list of live worker ids in shared data (KeyRegistry), so
// readers know which WorkKeys to read. Ids are kept sorted ascending and
// unique, which makes the encoding canonical.
//
// Protocol: each tick a worker reads the registry; if its id is missing it
// Adds itself and writes with the CAS it read (0 when the key was missing;
// creation races like the lease's, and the loser simply finds itself missing
// on the next read and adds itself again). The leader removes ids whose work
// record has not been rewritten for a long bound (a dead VM never removes
// itself), writing with the CAS it read; on CAS_MISMATCH it retries next tick.
type Registry struct {
	Workers []uint64
}

// Registry encoding, version 1: "GRWR" version=1 u8, count u16, then the ids
// as u64, strictly ascending.
const registryHeaderLen = headerLen + 2

// Contains reports whether id is registered.
func (g *Registry) Contains(id uint64) bool { return containsID(g.Workers, id) }

func containsID(ids []uint64, id uint64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// Add inserts id in order. It returns false, changing nothing, when id is
// already present, is 0 (reserved: "nobody"), or the registry holds
// MaxWorkers ids.
func (g *Registry) Add(id uint64) bool {
	if id == 0 || len(g.Workers) >= MaxWorkers {
		return false
	}
	i := 0
	for i < len(g.Workers) && g.Workers[i] < id {
		i++
	}
	if i < len(g.Workers) && g.Workers[i] == id {
		return false
	}
	g.Workers = append(g.Workers, 0)
	copy(g.Workers[i+1:], g.Workers[i:])
	g.Workers[i] = id
	return true
}

// Remove deletes id and reports whether it was present.
func (g *Registry) Remove(id uint64) bool {
	for i, x := range g.Workers {
		if x == id {
			g.Workers = append(g.Workers[:i], g.Workers[i+1:]...)
			return true
		}
	}
	return false
}

// AppendBinary appends g's versioned encoding to b; it fails, returning b,
// when the ids are not strictly ascending, include 0, or exceed MaxWorkers.
func (g *Registry) AppendBinary(b []byte) ([]byte, error) {
	if err := checkIDs(g.Workers); err != nil {
		return b, err
	}
	b = appendHeader(b, magicRegistry)
	b = appendU16(b, uint16(len(g.Workers)))
	for _, id := range g.Workers {
		b = appendU64(b, id)
	}
	return b, nil
}

func checkIDs(ids []uint64) error {
	if len(ids) > MaxWorkers {
		return fail(ErrInvalid, "registry worker count", int64(len(ids)), "exceeds "+strconv.Itoa(MaxWorkers))
	}
	prev := uint64(0)
	for i, id := range ids {
		if id <= prev {
			return &codecError{msg: "shared: registry worker " + strconv.FormatUint(id, 16) + " at " + strconv.Itoa(i) + ": ids must be nonzero and strictly ascending", kind: ErrInvalid}
		}
		prev = id
	}
	return nil
}

// Decode replaces g with the registry encoded in b, reusing g.Workers'
// capacity; on error g is unchanged.
func (g *Registry) Decode(b []byte) error {
	r := reader{b: b}
	if err := r.header(magicRegistry, "registry"); err != nil {
		return err
	}
	n := int(r.u16())
	if r.short {
		return r.shortErr("registry header")
	}
	if n > MaxWorkers {
		return fail(ErrInvalid, "registry worker count", int64(n), "exceeds "+strconv.Itoa(MaxWorkers))
	}
	if r.left() != 8*n {
		if r.left() < 8*n {
			return fail(ErrShort, "registry worker count", int64(n), "needs more bytes than the value has")
		}
		return fail(ErrInvalid, "registry trailing bytes", int64(r.left()-8*n), "must be 0")
	}
	body := r
	prev := uint64(0)
	for i := 0; i < n; i++ {
		id := r.u64()
		if id <= prev {
			return &codecError{msg: "shared: registry worker " + strconv.FormatUint(id, 16) + " at " + strconv.Itoa(i) + ": ids must be nonzero and strictly ascending", kind: ErrInvalid}
		}
		prev = id
	}
	if n <= cap(g.Workers) {
		g.Workers = g.Workers[:n]
	} else {
		g.Workers = make([]uint64, n)
	}
	for i := range g.Workers {
		g.Workers[i] = body.u64()
	}
	return nil
}
