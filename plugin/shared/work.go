package shared

import (
	"math"
	"strconv"

	"github.com/gpuroute/gpuroute/scoring"
	"github.com/gpuroute/gpuroute/scoring/le"
)

// Shared-data keys (one vm_id scope; docs/abi.md "Envoy behaviour").
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
	// KeyRemoteWork holds the scrape leader's sum of the peer gateways'
	// in-flight work (a WorkRecord) for the other workers of its gateway.
	KeyRemoteWork = "gpuroute/remote-work"
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
