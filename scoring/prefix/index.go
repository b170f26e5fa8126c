package prefix

import (
	"encoding"
	"errors"
	"math/bits"
	"strconv"

	"github.com/gpuroute/gpuroute/scoring/le"
)

// Index remembers which replica holds which prefix blocks, from the
// router's own history: after dispatching a request, Record its chain for
// the chosen replica; before the next decision, Lookup gives each replica's
// longest cached chain in tokens (k in the ETTFT rule).
//
// Chains make it small: block i's hash covers blocks 0..i, so holding
// block i implies holding the blocks before it. The index therefore stores
// only checkpoints (every Stride-th block and each recorded chain's last
// block) as 32-bit truncated hashes, and finds the longest held checkpoint
// per replica by binary search. An entry is 10 bytes encoded; the default
// 4096 entries encode in about 40 KB, small enough for proxy-wasm shared
// data, which copies the value on every read.
//
// Bounds: each replica holds at most its KV capacity in checkpoints (set
// with SetCapacityTokens), and the whole table at most its entry budget;
// beyond either, the least recently recorded entries go. A replica at its
// capacity loses its least recently recorded entry per new one, as its
// engine evicts block by block (evictReplica, O(1)); the table loses a
// quarter of its entries at once (amortized O(1) per insert).
//
// Not safe for concurrent use. The zero value is not ready; use
// NewIndex or UnmarshalBinary.
type Index struct {
	cfg     IndexConfig
	mask    uint32
	slots   []indexEntry
	scratch []indexEntry // rebuild buffer, same size as slots
	used    int          // live entries
	dead    int          // tombstones
	clock   uint32
	count   []int32 // live entries per replica
	capN    []int32 // checkpoint budget per replica (0: table budget only)
	// newest and oldest are, per replica, the slots at the two ends of its
	// recency list: its live entries linked from the most to the least
	// recently recorded (indexEntry.older, .newer; -1 at the ends). A
	// replica's eviction takes its oldest entry instead of searching the
	// table, which is sized for the fleet, and a refresh moves an entry to
	// the front, so the list stays in stamp order (TestIndexListsInvariant).
	newest, oldest []int32
	// ends is rebuild's copy of oldest.
	ends []int32
	// filter has, for every live entry (h, rep), bit (rep-1)%64 set in
	// word h&fmask: a superset, as removals leave their bits (Clear and
	// rebuild recompute it), so Lookup skips the table where the bit is
	// clear and answers the same. A probe for (h, rep) goes to a slot of
	// its own (slotOf mixes rep in): a lookup that asks each of the
	// fleet's replicas about a prefix few of them hold touches random
	// cache lines all over the table, which miss once several VMs' tables
	// share a core's caches; the filter, an eighth of the table's slots in
	// words, answers most of those probes (BenchmarkIndexLookup512x64).
	filter []uint64
	fmask  uint32
}

// IndexConfig sizes a Index.
type IndexConfig struct {
	// BlockChars is the characters per block, as in Hasher (default
	// DefaultBlockChars). It converts blocks to tokens.
	BlockChars int
	// Stride records every Stride-th block as a checkpoint (default 4: a
	// lookup resolves to 4 blocks, ~64 tokens, below one KV page of most
	// prompts' variability, at a quarter of the entries).
	Stride int
	// MaxEntries bounds the live entries (default 4096, at most 65536; the
	// table is a power of two at most 3/4 full).
	MaxEntries int
	// MaxReplicas bounds replica indexes (default 256, at most 65534).
	MaxReplicas int
}

type indexEntry struct {
	hash  uint32
	stamp uint32
	// newer and older are the neighbouring slots in the replica's recency
	// list while live (-1: none).
	newer, older int32
	rep          uint16 // replica + 1; 0 empty; tombRep tombstone
}

const (
	tombRep = 0xFFFF
	// indexVersion is the first byte of the binary encoding.
	indexVersion = 1
	// indexHeaderLen: version u8, stride u8, tableLog2 u8, pad u8,
	// blockChars u16, maxReplicas u16, maxEntries u32, clock u32, caps
	// follow (u32 per replica), then count u32 and the entries.
	indexHeaderLen = 16
	indexEntryLen  = 10
)

var (
	_ encoding.BinaryAppender    = (*Index)(nil)
	_ encoding.BinaryUnmarshaler = (*Index)(nil)
	_ encoding.BinaryMarshaler   = (*Index)(nil)
)

func (c *IndexConfig) normalize() {
	if c.BlockChars <= 0 {
		c.BlockChars = DefaultBlockChars
	}
	c.BlockChars = min(c.BlockChars, MaxBlockChars)
	if c.Stride <= 0 {
		c.Stride = 4
	}
	c.Stride = min(c.Stride, 255)
	if c.MaxEntries <= 0 {
		c.MaxEntries = 4096
	}
	c.MaxEntries = min(max(c.MaxEntries, 16), 1<<16)
	if c.MaxReplicas <= 0 {
		c.MaxReplicas = 256
	}
	c.MaxReplicas = min(c.MaxReplicas, tombRep-1)
}

// NewIndex returns an empty index sized by cfg (zero fields take
// their defaults).
func NewIndex(cfg IndexConfig) *Index {
	x := &Index{}
	x.init(cfg)
	return x
}

func (x *Index) init(cfg IndexConfig) {
	cfg.normalize()
	// Table size: power of two with load ≤ 3/4 at MaxEntries.
	size := 1 << bits.Len(uint(cfg.MaxEntries*4/3))
	if x.cfg == cfg && len(x.slots) == size {
		x.Clear()
		return
	}
	x.cfg = cfg
	x.mask = uint32(size - 1)
	x.slots = make([]indexEntry, size)
	x.scratch = make([]indexEntry, size)
	x.filter = make([]uint64, max(size/8, 64))
	x.fmask = uint32(len(x.filter) - 1)
	x.count = make([]int32, cfg.MaxReplicas)
	x.capN = make([]int32, cfg.MaxReplicas)
	x.newest = make([]int32, cfg.MaxReplicas)
	x.oldest = make([]int32, cfg.MaxReplicas)
	x.ends = make([]int32, cfg.MaxReplicas)
	x.clearLists()
	x.used, x.dead, x.clock = 0, 0, 0
}

// Config returns the index's normalized configuration.
func (x *Index) Config() IndexConfig { return x.cfg }

// Len returns the number of live checkpoint entries.
func (x *Index) Len() int { return x.used }

// Clear forgets every entry (keeps capacities).
func (x *Index) Clear() {
	clear(x.slots)
	clear(x.filter)
	clear(x.count)
	x.clearLists()
	x.used, x.dead, x.clock = 0, 0, 0
}

// Forget drops every entry of replica (it restarted, or left the fleet).
func (x *Index) Forget(replica int) {
	if replica < 0 || replica >= len(x.count) {
		return
	}
	for i := x.newest[replica]; i >= 0; i = x.slots[i].older {
		x.slots[i].rep = tombRep
		x.used--
		x.dead++
	}
	x.newest[replica], x.oldest[replica] = -1, -1
	x.count[replica] = 0
}

func (x *Index) clearLists() {
	for r := range x.newest {
		x.newest[r], x.oldest[r] = -1, -1
	}
}

// link puts the live entry at slot i at the front of its replica's
// recency list.
func (x *Index) link(i int32) {
	e := &x.slots[i]
	r := e.rep - 1
	e.newer, e.older = -1, x.newest[r]
	if e.older >= 0 {
		x.slots[e.older].newer = i
	} else {
		x.oldest[r] = i
	}
	x.newest[r] = i
}

// unlink takes the live entry at slot i out of its replica's recency list.
func (x *Index) unlink(i int32) {
	e := &x.slots[i]
	r := e.rep - 1
	if e.newer >= 0 {
		x.slots[e.newer].older = e.older
	} else {
		x.newest[r] = e.older
	}
	if e.older >= 0 {
		x.slots[e.older].newer = e.newer
	} else {
		x.oldest[r] = e.newer
	}
}

// drop removes the live entry at slot i (a tombstone takes its place).
func (x *Index) drop(i int32) {
	x.unlink(i)
	e := &x.slots[i]
	x.count[e.rep-1]--
	e.rep = tombRep
	x.used--
	x.dead++
}

// SetCapacityTokens bounds replica's entries by its KV cache size: a
// replica cannot hold more prefix than kvTokens. 0 removes the bound.
func (x *Index) SetCapacityTokens(replica, kvTokens int) {
	if replica < 0 || replica >= len(x.capN) {
		return
	}
	blockTokens := max(x.cfg.BlockChars/CharsPerToken, 1)
	x.capN[replica] = int32(min(max(kvTokens, 0)/blockTokens/x.cfg.Stride, 1<<30))
}

func (x *Index) slotOf(h uint32, rep uint16) uint32 {
	return (h ^ uint32(rep)*0x9e3779b1) & x.mask
}

// find returns the slot holding (h, rep), or -1.
func (x *Index) find(h uint32, rep uint16) int {
	i := x.slotOf(h, rep)
	for probes := uint32(0); probes <= x.mask; probes++ {
		e := &x.slots[i]
		if e.rep == 0 {
			return -1
		}
		// One test, not && (docs/performance.md "Go on wasm").
		if uint32(e.rep^rep)|(e.hash^h) == 0 {
			return int(i)
		}
		i = (i + 1) & x.mask
	}
	return -1
}

// Record notes that replica now holds chain (every block of it): the
// router just dispatched the request there. Re-recording refreshes recency.
func (x *Index) Record(replica int, chain []uint64) {
	if replica < 0 || replica >= len(x.count) || len(chain) == 0 {
		return
	}
	x.clock++
	// The checkpoints, positions s-1, 2s-1, ... and the last, in order,
	// stepped to rather than tested per block: a remainder per block is a
	// division, slow on wasm.
	s, n := x.cfg.Stride, len(chain)
	for pos := s - 1; pos < n; pos += s {
		x.put(replica, chain[pos])
	}
	if n%s != 0 {
		x.put(replica, chain[n-1])
	}
}

// AppendCheckpoints appends to dst the hashes of chain that Record stores
// (every Stride-th block and the last): all another index needs to record
// the same chain with RecordCheckpoints, in about 1/Stride of the space.
func (x *Index) AppendCheckpoints(dst, chain []uint64) []uint64 {
	s, n := x.cfg.Stride, len(chain)
	for pos := s - 1; pos < n; pos += s {
		dst = append(dst, chain[pos])
	}
	if n > 0 && n%s != 0 {
		dst = append(dst, chain[n-1])
	}
	return dst
}

// RecordCheckpoints is Record for a chain reduced by AppendCheckpoints of
// an index with the same Stride.
func (x *Index) RecordCheckpoints(replica int, checkpoints []uint64) {
	if replica < 0 || replica >= len(x.count) || len(checkpoints) == 0 {
		return
	}
	x.clock++
	for _, h := range checkpoints {
		x.put(replica, h)
	}
}

// put inserts or refreshes one checkpoint of replica at the current clock,
// and returns the stamp it had and whether it was held.
func (x *Index) put(replica int, chainHash uint64) (before uint32, held bool) {
	rep := uint16(replica + 1)
	h := uint32(chainHash >> 32)
	if i := x.find(h, rep); i >= 0 {
		before = x.slots[i].stamp
		x.slots[i].stamp = x.clock
		if x.newest[replica] != int32(i) {
			x.unlink(int32(i))
			x.link(int32(i))
		}
		return before, true
	}
	x.place(indexEntry{hash: h, stamp: x.clock, rep: rep})
	return 0, false
}

// place inserts a new entry, evicting first when its replica or the table
// is at its budget, and rebuilding when tombstones fill the table.
func (x *Index) place(e indexEntry) {
	replica := int(e.rep - 1)
	if c := x.capN[replica]; c > 0 && x.count[replica] >= c {
		x.evict(replica)
		if x.count[replica] >= c {
			// Over a lowered capacity: one more, so the excess drains
			// an entry per insert.
			x.evict(replica)
		}
	}
	if x.used >= x.cfg.MaxEntries {
		x.evict(-1)
	}
	if x.used+x.dead >= int(x.mask+1)*7/8 {
		x.rebuild()
	}
	x.insert(e)
}

func (x *Index) insert(e indexEntry) {
	i := x.slotOf(e.hash, e.rep)
	for x.slots[i].rep != 0 && x.slots[i].rep != tombRep {
		i = (i + 1) & x.mask
	}
	if x.slots[i].rep == tombRep {
		x.dead--
	}
	r := e.rep - 1
	x.slots[i] = e
	x.link(int32(i))
	x.filter[e.hash&x.fmask] |= 1 << (r & 63)
	x.used++
	x.count[r]++
}

// evict makes room for one entry of replica (evictReplica), or removes
// about the oldest quarter of all entries when replica < 0: a 64-bucket
// histogram of ages finds the cut in three passes over the table, so
// eviction is amortized O(1) per insert. Ages are clock − stamp, so clock
// wrap-around is harmless.
func (x *Index) evict(replica int) {
	if replica >= 0 {
		x.evictReplica(replica)
		return
	}
	live := func(e *indexEntry) bool { return e.rep != 0 && e.rep != tombRep }
	var oldest, newest uint32
	n := 0
	for i := range x.slots {
		if e := &x.slots[i]; live(e) {
			age := x.clock - e.stamp
			if n == 0 {
				oldest, newest = age, age
			}
			oldest, newest = max(oldest, age), min(newest, age)
			n++
		}
	}
	if n == 0 {
		return
	}
	cut, shift := ageCut(x.slots, live, x.clock, n/4, newest, oldest)
	for i := range x.slots {
		if e := &x.slots[i]; live(e) && (x.clock-e.stamp-newest)>>shift >= cut {
			x.drop(int32(i))
		}
	}
}

// evictReplica removes replica's least recently recorded entry.
func (x *Index) evictReplica(replica int) {
	if i := x.oldest[replica]; i >= 0 {
		x.drop(i)
	}
}

// ageCut returns evict's bucket cut and shift to remove target of the live
// entries of slots with ages in [newest, oldest]: a 64-bucket histogram of
// ages (power-of-two buckets: a shift, not a division, per entry).
func ageCut(slots []indexEntry, live func(*indexEntry) bool, clock uint32, target int, newest, oldest uint32) (uint32, uint) {
	const buckets = 64
	shift := uint(max(bits.Len32(oldest-newest)-6, 0))
	var hist [buckets]int
	for i := range slots {
		if e := &slots[i]; live(e) {
			hist[(clock-e.stamp-newest)>>shift]++
		}
	}
	return uint32(cutBucket(&hist, target)), shift
}

// cutBucket returns the first bucket to remove: whole buckets go from the
// oldest until target entries (at least one) are gone.
func cutBucket(hist *[64]int, target int) int {
	target, cut, sum := max(target, 1), len(hist)-1, 0
	for ; cut > 0; cut-- {
		sum += hist[cut]
		if sum >= target {
			break
		}
	}
	return cut
}

// rebuild reinserts live entries to drop tombstones, each replica's from
// its oldest, so that its recency list keeps its order.
func (x *Index) rebuild() {
	copy(x.scratch, x.slots)
	copy(x.ends, x.oldest)
	clear(x.slots)
	clear(x.filter)
	clear(x.count)
	x.clearLists()
	x.used, x.dead = 0, 0
	for _, j := range x.ends {
		for ; j >= 0; j = x.scratch[j].newer {
			x.insert(x.scratch[j])
		}
	}
}

// Lookup writes to out[i] the tokens of chain believed cached on replica i
// (the longest held prefix, in blocks × BlockChars / CharsPerToken), for
// every i < len(out). It does not change the index (recency moves only on
// Record) and allocates nothing.
func (x *Index) Lookup(chain []uint64, out []int) {
	clear(out)
	n := len(chain)
	if n == 0 || x.used == 0 {
		return
	}
	s := x.cfg.Stride
	blockTokens := x.cfg.BlockChars / CharsPerToken
	nck := n / s // checkpoints at positions s-1, 2s-1, ...
	filter, fmask := x.filter, x.fmask
	// A replica holds part of the chain only if it holds the first
	// checkpoint or, before it, the last block of a shorter chain: the
	// filter words of the first s blocks, OR-ed, have the bits of every
	// replica that may, and only those are searched (bit b stands for
	// replicas b, b+64, ...), not every replica in turn.
	var held uint64
	for _, h := range chain[:min(s, n)] {
		held |= filter[uint32(h>>32)&fmask]
	}
	for ; held != 0; held &= held - 1 {
		for r := bits.TrailingZeros64(held); r < len(out) && r < len(x.count); r += 64 {
			if x.count[r] == 0 {
				continue
			}
			rep := uint16(r + 1)
			bit := uint64(1) << (r & 63) // r's bit in filter (see the field)
			// Binary search the largest checkpoint held (chains are
			// prefix-closed: holding checkpoint j implies the earlier
			// ones), testing the first checkpoint first: a prefix lives
			// on a few replicas of a fleet, and on each of the others
			// this ends the search in one probe instead of
			// log2(checkpoints), for one more on a holder. Each probe
			// tests the filter first, with its slice and r's bit in
			// locals (BenchmarkIndexLookup512x64).
			lo, hi := 0, nck // answer in [lo, hi] checkpoints held
			for mid := 1; lo < hi; mid = (lo + hi + 1) / 2 {
				if h := uint32(chain[mid*s-1] >> 32); filter[h&fmask]&bit != 0 && x.find(h, rep) >= 0 {
					lo = mid
				} else {
					hi = mid - 1
				}
			}
			blocks := lo * s
			// A recorded chain's last block is a checkpoint too: look for
			// one between this checkpoint and the next.
			for pos := min(blocks+s-1, n) - 1; pos >= blocks; pos-- {
				if h := uint32(chain[pos] >> 32); filter[h&fmask]&bit != 0 && x.find(h, rep) >= 0 {
					blocks = pos + 1
					break
				}
			}
			out[r] = blocks * blockTokens
		}
	}
}

// MarshalBinary returns the index's compact encoding (see AppendBinary).
func (x *Index) MarshalBinary() ([]byte, error) {
	return x.AppendBinary(make([]byte, 0, x.EncodedLen()))
}

// EncodedLen returns the length of the binary encoding.
func (x *Index) EncodedLen() int {
	return indexHeaderLen + 4*len(x.capN) + 4 + indexEntryLen*x.used
}

// MaxEncodedLen returns the length of the binary encoding of the index
// holding its whole entry budget.
func (x *Index) MaxEncodedLen() int {
	return indexHeaderLen + 4*len(x.capN) + 4 + indexEntryLen*x.cfg.MaxEntries
}

// AppendBinary appends the versioned little-endian encoding: a 16-byte
// header (version, stride, table size, block size, replica and entry
// bounds, clock), the per-replica budgets, then the live entries (32-bit
// hash, replica, recency stamp), replica by replica from each one's least
// recently recorded. Table layout is not encoded: decoding reinserts in
// that order, which rebuilds the recency lists.
func (x *Index) AppendBinary(b []byte) ([]byte, error) {
	b = append(b, indexVersion, byte(x.cfg.Stride), byte(bits.Len32(x.mask)), 0)
	b = le.AppendUint16(b, uint16(x.cfg.BlockChars))
	b = le.AppendUint16(b, uint16(x.cfg.MaxReplicas))
	b = le.AppendUint32(b, uint32(x.cfg.MaxEntries))
	b = le.AppendUint32(b, x.clock)
	for _, c := range x.capN {
		b = le.AppendUint32(b, uint32(c))
	}
	b = le.AppendUint32(b, uint32(x.used))
	for _, i := range x.oldest {
		for ; i >= 0; i = x.slots[i].newer {
			e := &x.slots[i]
			b = le.AppendUint32(b, e.hash)
			b = le.AppendUint16(b, e.rep-1)
			b = le.AppendUint32(b, e.stamp)
		}
	}
	return b, nil
}

// UnmarshalBinary replaces the index with the one encoded in b, reusing
// memory when the configuration matches. On error the index is left empty.
func (x *Index) UnmarshalBinary(b []byte) error {
	if err := x.decode(b); err != nil {
		if x.slots == nil {
			x.init(IndexConfig{})
		}
		x.Clear()
		return err
	}
	return nil
}

func (x *Index) decode(b []byte) error {
	if len(b) < indexHeaderLen {
		return errors.New("scoring: prefix index encoding too short: " + strconv.Itoa(len(b)) + " bytes")
	}
	if b[0] != indexVersion {
		return errors.New("scoring: prefix index version must be " + strconv.Itoa(indexVersion) + ", got " + strconv.Itoa(int(b[0])))
	}
	cfg := IndexConfig{
		Stride:      int(b[1]),
		BlockChars:  int(le.Uint16(b, 4)),
		MaxReplicas: int(le.Uint16(b, 6)),
		MaxEntries:  int(le.Uint32(b, 8)),
	}
	norm := cfg
	norm.normalize()
	if norm != cfg {
		return errors.New("scoring: prefix index header out of range: stride " + strconv.Itoa(cfg.Stride) +
			", block_chars " + strconv.Itoa(cfg.BlockChars) + ", max_replicas " + strconv.Itoa(cfg.MaxReplicas) +
			", max_entries " + strconv.Itoa(cfg.MaxEntries))
	}
	clock := le.Uint32(b, 12)
	b = b[indexHeaderLen:]
	if len(b) < 4*cfg.MaxReplicas+4 {
		return errors.New("scoring: prefix index truncated in replica budgets: " + strconv.Itoa(len(b)) + " bytes left")
	}
	x.init(cfg)
	for i := range x.capN {
		x.capN[i] = int32(min(le.Uint32(b, 4*i), 1<<30))
	}
	b = b[4*cfg.MaxReplicas:]
	n := le.Uint32(b, 0)
	b = b[4:]
	if uint64(n) > uint64(cfg.MaxEntries) || uint64(len(b)) != uint64(n)*indexEntryLen {
		return errors.New("scoring: prefix index entry count " + strconv.FormatUint(uint64(n), 10) +
			" does not match " + strconv.Itoa(len(b)) + " bytes (max " + strconv.Itoa(cfg.MaxEntries) + ")")
	}
	x.clock = clock
	for ; len(b) >= indexEntryLen; b = b[indexEntryLen:] {
		e := indexEntry{
			hash:  le.Uint32(b, 0),
			stamp: le.Uint32(b, 6),
		}
		r := le.Uint16(b, 4)
		if int(r) >= cfg.MaxReplicas {
			return errors.New("scoring: prefix index entry replica " + strconv.Itoa(int(r)) + " >= max_replicas " + strconv.Itoa(cfg.MaxReplicas))
		}
		e.rep = r + 1
		if x.find(e.hash, e.rep) >= 0 {
			return errors.New("scoring: prefix index duplicate entry for replica " + strconv.Itoa(int(r)))
		}
		x.insert(e)
	}
	return nil
}
