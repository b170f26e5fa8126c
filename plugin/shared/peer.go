package shared

import (
	"math"
	"strconv"

	"github.com/gpuroute/gpuroute/scoring"
	"github.com/gpuroute/gpuroute/scoring/le"
)

// MaxPeerAddrLen bounds a replica address in a PeerExport: the encoding
// counts its bytes in a u8.
const MaxPeerAddrLen = 0xFF

// PeerExport is one gateway's answer to another gateway's peer request
// (fetched by the asker's leader with proxy_http_call): the exporter's
// configured replica addresses, its workers' in-flight work per replica
// (index-aligned with the addresses), and the entries of its Journal after
// the asker's cursor. Entries name replicas by index into the exporter's
// address list; the asker maps addresses to its own replicas. Decode reuses
// the receiver's storage, so a leader keeps one PeerExport per peer gateway
// and steady-state polling allocates nothing. Not safe for concurrent use.
type PeerExport struct {
	// Epoch is the exporter's Journal.Epoch; send it back as the next ask's
	// epoch so a recreated journal is noticed.
	Epoch uint64
	// Next is the cursor for the asker's next request: the sequence number
	// after the last entry included (or walked past).
	Next uint64
	// WrittenNanos is the exporter's clock when answering.
	WrittenNanos int64
	// ArrivalPerSec is the exporter's dispatch rate to the fleet (its
	// workers' and its own, WorkRecord.ArrivalPerSec) at WrittenNanos.
	ArrivalPerSec float64
	// Work is the exporter's workers' in-flight work, index-aligned with
	// the addresses (Addr).
	Work []scoring.Work

	addrs    []byte   // the addresses, concatenated
	addrEnds []uint32 // address i is addrs[addrEnds[i-1]:addrEnds[i]]
	reps     []uint16 // entry k's replica index
	ends     []uint32 // entry k's chain is blocks[ends[k-1]:ends[k]]
	blocks   []uint64
}

// PeerExport encoding: "GRPX" version u8, epoch u64, next u64, written i64,
// ArrivalPerSec as float64 bits (finite, >= 0), nrep u16 (<= MaxReplicas),
// then per replica address length u8, address bytes and its scoring.Work
// exactly as a WorkRecord entry (nine i64 >= 0), then count u32 and per
// entry replica u16 (< nrep), nblocks u16 (>= 1) and nblocks block hashes
// u64.
const (
	magicPeer      = "GRPX"
	peerHeaderLen  = headerLen + 8 + 8 + 8 + 8 + 2
	peerReplicaMin = 1 + workEntryLen // empty address
)

// AppendPeerExport appends to b the encoded answer to a peer request whose
// cursor is (askEpoch, since): the entries of j with sequence number >=
// since when askEpoch == j.Epoch, else from j.First() (the asker restarts).
// A since beyond j.Next() with a matching epoch also restarts from First
// (the journal was recreated under the same epoch), and a since before
// First starts at First (the entries between were dropped). At most
// maxEntries entries are included (none when maxEntries <= 0); the encoded
// Next points after the last entry walked, so the asker's next request gets
// the rest exactly once. Entries naming a replica outside addrs (written
// under another configuration) are walked past and left out.
//
// addrs and work are the exporter's replica addresses and in-flight work,
// perSec its dispatch rate: len(addrs) must equal len(work) and be at most
// MaxReplicas, each address at most MaxPeerAddrLen bytes, each Work valid
// as in a WorkRecord and perSec finite and >= 0; otherwise it fails,
// returning b. A nil j exports no entries.
func AppendPeerExport(b []byte, j *Journal, askEpoch, since uint64, maxEntries int,
	addrs []string, work []scoring.Work, perSec float64, nowNanos int64) ([]byte, error) {
	if err := checkPeerReplicas(addrs, work); err != nil {
		return b, err
	}
	if err := checkRate(perSec); err != nil {
		return b, err
	}
	var empty Journal
	if j == nil {
		j = &empty
	}
	start := since
	if askEpoch != j.Epoch || since > j.Next() || since < j.First() {
		start = j.First()
	}
	b = appendHeader(b, magicPeer)
	b = appendU64(b, j.Epoch)
	nextAt := len(b)
	b = appendU64(b, 0) // Next, patched below
	b = appendU64(b, uint64(nowNanos))
	b = appendU64(b, math.Float64bits(perSec))
	b = appendU16(b, uint16(len(addrs)))
	for i := range addrs {
		b = appendPeerReplica(b, addrs[i], &work[i])
	}
	countAt := len(b)
	b = appendU32(b, 0) // count, patched below
	next, count := start, 0
	for k := int(start - j.First()); k < j.n && count < maxEntries; k++ {
		next++
		r, c := j.entry(k)
		if r >= len(addrs) {
			continue
		}
		b = appendChain(b, r, c)
		count++
	}
	putLE64(b[nextAt:], next)
	putLE32(b[countAt:], uint32(count))
	return b, nil
}

func putLE32(b []byte, v uint32) {
	_ = b[3]
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

// checkPeerReplicas validates an exporter's replica list before anything is
// written.
func checkPeerReplicas(addrs []string, work []scoring.Work) error {
	if len(addrs) != len(work) {
		return fail(ErrInvalid, "peer export address count", int64(len(addrs)), "must equal the work count "+strconv.Itoa(len(work)))
	}
	if len(addrs) > MaxReplicas {
		return fail(ErrInvalid, "peer export replica count", int64(len(addrs)), "exceeds "+strconv.Itoa(MaxReplicas))
	}
	for i := range addrs {
		if len(addrs[i]) > MaxPeerAddrLen {
			return fail(ErrInvalid, "peer export address length", int64(len(addrs[i])), "exceeds "+strconv.Itoa(MaxPeerAddrLen)+" at replica "+strconv.Itoa(i))
		}
		if err := checkWork(&work[i]); err != nil {
			return err
		}
	}
	return nil
}

// appendPeerReplica appends one replica: address length u8, address, work.
func appendPeerReplica[S string | []byte](b []byte, addr S, x *scoring.Work) []byte {
	b = append(b, byte(len(addr)))
	b = append(b, addr...)
	return appendWork(b, x)
}

// NumReplicas returns the number of exporter replicas (addresses and Work
// entries).
func (p *PeerExport) NumReplicas() int { return len(p.addrEnds) }

// Addr returns the address of exporter replica i, nil when i is out of
// range. It aliases p's storage until the next Decode: compare it with
// string(p.Addr(i)) == s, which does not allocate.
func (p *PeerExport) Addr(i int) []byte {
	if i < 0 || i >= len(p.addrEnds) {
		return nil
	}
	lo := uint32(0)
	if i > 0 {
		lo = p.addrEnds[i-1]
	}
	hi := p.addrEnds[i]
	return p.addrs[lo:hi:hi]
}

// Len returns the number of journal entries.
func (p *PeerExport) Len() int { return len(p.reps) }

// Each calls fn for every journal entry, oldest first. replica indexes the
// exporter's address list (< NumReplicas()); chain aliases p's storage until
// the next Decode.
func (p *PeerExport) Each(fn func(replica int, chain []uint64)) {
	lo := uint32(0)
	for k, hi := range p.ends {
		fn(int(p.reps[k]), p.blocks[lo:hi:hi])
		lo = hi
	}
}

// AppendBinary appends p's encoding to b, as AppendPeerExport wrote it (a
// relay, and the canonical round trip the tests check). It fails, returning
// b, when Work no longer matches the addresses or holds an invalid figure.
func (p *PeerExport) AppendBinary(b []byte) ([]byte, error) {
	n := p.NumReplicas()
	if len(p.Work) != n {
		return b, fail(ErrInvalid, "peer export work count", int64(len(p.Work)), "must equal the address count "+strconv.Itoa(n))
	}
	for i := range p.Work {
		if err := checkWork(&p.Work[i]); err != nil {
			return b, err
		}
	}
	if err := checkRate(p.ArrivalPerSec); err != nil {
		return b, err
	}
	b = appendHeader(b, magicPeer)
	b = appendU64(b, p.Epoch)
	b = appendU64(b, p.Next)
	b = appendU64(b, uint64(p.WrittenNanos))
	b = appendU64(b, math.Float64bits(p.ArrivalPerSec))
	b = appendU16(b, uint16(n))
	for i := range n {
		b = appendPeerReplica(b, p.Addr(i), &p.Work[i])
	}
	b = appendU32(b, uint32(len(p.reps)))
	p.Each(func(r int, c []uint64) { b = appendChain(b, r, c) })
	return b, nil
}

// Decode replaces p with the answer encoded in b, reusing p's storage: once
// p has held an answer at least as large, it does not allocate. It validates
// all of b first, so on error p is unchanged.
func (p *PeerExport) Decode(b []byte) error {
	r := reader{b: b}
	if err := r.header(magicPeer, "peer export"); err != nil {
		return err
	}
	epoch, next, written := r.u64(), r.u64(), int64(r.u64())
	rate, nrep := math.Float64frombits(r.u64()), int(r.u16())
	if r.short {
		return r.shortErr("peer export header")
	}
	if err := checkRate(rate); err != nil {
		return err
	}
	// Bound the counts by the bytes left before walking anything.
	if nrep > r.left()/peerReplicaMin {
		return fail(ErrShort, "peer export replica count", int64(nrep), "needs more bytes than the value has")
	}
	if nrep > MaxReplicas {
		return fail(ErrInvalid, "peer export replica count", int64(nrep), "exceeds "+strconv.Itoa(MaxReplicas))
	}
	body := r
	var x scoring.Work
	addrLen := 0
	for range nrep {
		a := r.take(int(r.u8()))
		e := r.take(workEntryLen)
		if r.short {
			return r.shortErr("peer export replica")
		}
		if err := readWork(&x, e); err != nil {
			return err
		}
		addrLen += len(a)
	}
	count := uint64(r.u32())
	if r.short {
		return r.shortErr("peer export entry count")
	}
	if count > uint64(r.left())/journalEntryMin {
		return fail(ErrShort, "peer export entry count", int64(count), "needs more bytes than the value has")
	}
	nblocks := 0
	for range count {
		rep, blocks, err := readChainHead(&r, "peer export")
		if err != nil {
			return err
		}
		if rep >= nrep {
			return fail(ErrInvalid, "peer export entry replica", int64(rep), "must be below the replica count "+strconv.Itoa(nrep))
		}
		nblocks += len(blocks) / 8
	}
	if err := r.end("peer export"); err != nil {
		return err
	}

	// All valid: fill p, growing storage only past its largest answer yet.
	p.Epoch, p.Next, p.WrittenNanos, p.ArrivalPerSec = epoch, next, written, rate
	p.Work = resize(p.Work, nrep)
	p.addrs = resize(p.addrs, addrLen)
	p.addrEnds = resize(p.addrEnds, nrep)
	end := 0
	for i := range nrep {
		a := body.take(int(body.u8()))
		end += copy(p.addrs[end:], a)
		p.addrEnds[i] = uint32(end)
		_ = readWork(&p.Work[i], body.take(workEntryLen)) // validated above
	}
	body.u32()
	p.reps = resize(p.reps, int(count))
	p.ends = resize(p.ends, int(count))
	p.blocks = resize(p.blocks, nblocks)
	end = 0
	for k := range p.reps {
		rep, blocks, _ := readChainHead(&body, "peer export") // validated above
		for x := 0; x < len(blocks); x += 8 {
			p.blocks[end] = le.Uint64(blocks, x)
			end++
		}
		p.reps[k], p.ends[k] = uint16(rep), uint32(end)
	}
	return nil
}

// resize returns s with length n, reusing its array when large enough.
func resize[T any](s []T, n int) []T {
	if n <= cap(s) {
		return s[:n]
	}
	return make([]T, n)
}
