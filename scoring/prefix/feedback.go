package prefix

// What the engines report corrects the index (the router's feedback): a
// response's cached-token count says how much of the prompt the replica
// really held. These methods let a caller read what the index believed of
// a chain before recording it again, drop what an eviction shows gone, and
// record the blocks an answer added to a chain.

// Clock returns the index's record clock: each Record or RecordCheckpoints
// advances it by one, and the entries it records carry its value as their
// stamp (RecordCheckpointsBefore reports them).
func (x *Index) Clock() uint32 { return x.clock }

// TokensPerEntry is the prompt an aligned checkpoint stands for: Stride
// blocks in tokens. A replica's entries times it is what the index believes
// the replica caches (an upper bound: last-block checkpoints count whole).
func (x *Index) TokensPerEntry() int {
	return x.cfg.Stride * max(x.cfg.BlockChars/CharsPerToken, 1)
}

// Resident returns how many live entries replica has.
func (x *Index) Resident(replica int) int {
	if replica < 0 || replica >= len(x.count) {
		return 0
	}
	return int(x.count[replica])
}

// RecordCheckpointsBefore is RecordCheckpoints that also sets stamps[j]
// and held[j], for each of the first len(stamps) checkpoints, to the clock
// at which replica's entry was last recorded before, and whether it held
// one (0, false if not): the feedback compares an engine's report with the
// index as the dispatch found it, and one probe per checkpoint serves both
// the record and that (TestRecordCheckpointsBefore). held is as long as
// stamps.
func (x *Index) RecordCheckpointsBefore(replica int, checkpoints []uint64, stamps []uint32, held []bool) {
	clear(stamps)
	clear(held)
	if replica < 0 || replica >= len(x.count) || len(checkpoints) == 0 {
		return
	}
	x.clock++
	n := min(len(stamps), len(held))
	for j, h := range checkpoints {
		at, ok := x.put(replica, h)
		if j < n {
			stamps[j], held[j] = at, ok
		}
	}
}

// DropOlder removes replica's entries last recorded before stamp (in clock
// order, so wrap-around is harmless) and returns how many it kept: an
// engine that evicts least recently used blocks first and has evicted a
// block recorded at stamp holds none of those (TestDropOlder).
func (x *Index) DropOlder(replica int, stamp uint32) int {
	if replica < 0 || replica >= len(x.count) {
		return 0
	}
	// The recency list is in stamp order: the older entries are its tail.
	for i := x.oldest[replica]; i >= 0 && int32(x.slots[i].stamp-stamp) < 0; i = x.oldest[replica] {
		x.drop(i)
	}
	return int(x.count[replica])
}

// AppendCheckpointsAt is AppendCheckpoints for the part of a chain that
// begins at position first: blocks are the chain's entries first,
// first+1, ...; the checkpoints are those of the whole chain among them
// (positions ≡ Stride−1) and the last. Recorded with RecordCheckpoints
// after the chain's beginning, they extend it as Record of the whole chain
// would (TestAppendCheckpointsAt).
func (x *Index) AppendCheckpointsAt(dst []uint64, first int, blocks []uint64) []uint64 {
	s, n := x.cfg.Stride, len(blocks)
	if n == 0 || first < 0 {
		return dst
	}
	for j := (s - 1 - first%s) % s; j < n; j += s {
		dst = append(dst, blocks[j])
	}
	if (first+n)%s != 0 {
		dst = append(dst, blocks[n-1])
	}
	return dst
}
