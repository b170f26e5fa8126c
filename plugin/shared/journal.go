package shared

import (
	"math"
	"strconv"

	"github.com/gpuroute/gpuroute/scoring/le"
)

// KeyJournal is the shared-data key of the gateway's Journal.
const KeyJournal = "gpuroute/journal"

// MaxJournalBlocks bounds the blocks kept per journal entry: the encoding
// counts them in a u16.
const MaxJournalBlocks = 0xFFFF

// Journal is the recent prefix placements of every worker of one gateway,
// kept in shared data (KeyJournal) so that another gateway's leader can fetch
// the entries after its cursor (AppendPeerExport) and merge them: without it
// one gateway's placements are invisible to the others and prefix affinity
// collapses across gateways.
//
// Each entry is a replica index into the writer's configured replica list
// (ConfigID) and the placement's checkpoint chain (block hashes, as Outbox
// holds them), numbered with consecutive sequence numbers starting at 1.
// The journal keeps at most capacity entries of at most maxBlocks blocks
// each: longer chains keep their first maxBlocks blocks, still a valid chain
// because block i's hash covers blocks 0..i (prefix.Hasher), and an
// Append beyond capacity drops the oldest entry. Storage is allocated once by
// NewJournal, so Append and Decode never allocate.
//
// The zero Journal has no capacity: Append numbers and drops every entry.
// Not safe for concurrent use.
type Journal struct {
	// Epoch is a nonce chosen by the journal's creator. Cursors are only
	// meaningful within one epoch: a new epoch (the journal was recreated,
	// its numbering restarted) means importers must restart their cursor.
	Epoch uint64
	// ConfigID is ConfigIDOf the replica list the entries' indices refer to.
	ConfigID uint64

	maxBlocks int
	replicas  []uint16
	lens      []uint16
	blocks    []uint64 // entry slot i's chain at blocks[i*maxBlocks:]
	head, n   int      // slot of the oldest entry, entry count
	base      uint64   // First()-1, so the zero Journal starts at seq 1
}

// NewJournal returns an empty journal (First() == Next() == 1) of capacity
// entries, each keeping the first maxBlocks blocks of its chain (at most
// MaxJournalBlocks). A non-positive argument gives a zero-capacity journal.
func NewJournal(capacity, maxBlocks int) *Journal {
	if capacity <= 0 || maxBlocks <= 0 {
		return &Journal{}
	}
	maxBlocks = min(maxBlocks, MaxJournalBlocks)
	return &Journal{
		maxBlocks: maxBlocks,
		replicas:  make([]uint16, capacity),
		lens:      make([]uint16, capacity),
		blocks:    make([]uint64, capacity*maxBlocks),
	}
}

// Reset empties j, restarting the numbering at 1, and sets its Epoch and
// ConfigID. Choose a new epoch whenever the numbering restarts, so importers
// holding a cursor from the old numbering notice.
func (j *Journal) Reset(epoch, configID uint64) {
	j.Epoch, j.ConfigID = epoch, configID
	j.head, j.n, j.base = 0, 0, 0
}

// Cap returns the entry capacity.
func (j *Journal) Cap() int { return len(j.replicas) }

// MaxBlocks returns the blocks kept per entry.
func (j *Journal) MaxBlocks() int { return j.maxBlocks }

// Len returns the number of entries kept.
func (j *Journal) Len() int { return j.n }

// First returns the sequence number of the oldest kept entry, Next() when
// the journal is empty.
func (j *Journal) First() uint64 { return j.base + 1 }

// Next returns the sequence number the next Append assigns.
func (j *Journal) Next() uint64 { return j.base + 1 + uint64(j.n) }

// Append records a placement of chain on replica under sequence number
// Next(), copying at most MaxBlocks() blocks and dropping the oldest entry
// when full. An empty chain (nothing cacheable), a replica outside
// [0, 65535] (the encoding's u16), or a journal whose numbering is exhausted
// (Next() == MaxUint64, reachable only through a decoded value) is ignored.
func (j *Journal) Append(replica int, chain []uint64) {
	if len(chain) == 0 || replica < 0 || replica > 0xFFFF || j.Next() == math.MaxUint64 {
		return
	}
	c := len(j.replicas)
	var i int
	switch {
	case c == 0:
		j.base++ // numbered, then dropped at once
		return
	case j.n == c:
		i = j.head // overwrite the oldest
		j.head = (j.head + 1) % c
		j.base++
	default:
		i = (j.head + j.n) % c
		j.n++
	}
	k := copy(j.blocks[i*j.maxBlocks:(i+1)*j.maxBlocks], chain)
	j.replicas[i], j.lens[i] = uint16(replica), uint16(k)
}

// entry returns the replica and chain of the k-th kept entry (0 = oldest);
// the chain aliases j's storage and has no spare capacity.
func (j *Journal) entry(k int) (int, []uint64) {
	i := (j.head + k) % len(j.replicas)
	base := i * j.maxBlocks
	end := base + int(j.lens[i])
	return int(j.replicas[i]), j.blocks[base:end:end]
}

// Each calls fn for every kept entry with sequence number >= from, oldest
// first; a from before First() starts at First(). The chain passed to fn
// aliases j's storage: use it within the call and do not Append from fn.
func (j *Journal) Each(from uint64, fn func(seq uint64, replica int, chain []uint64)) {
	first := j.First()
	if from < first {
		from = first
	}
	if from >= j.Next() {
		return
	}
	for k := int(from - first); k < j.n; k++ {
		r, c := j.entry(k)
		fn(first+uint64(k), r, c)
	}
}

// Journal encoding: "GRJL" version u8, epoch u64, configID u64, first seq
// u64 (>= 1), count u32 (first+count must not overflow), then per entry,
// oldest first, replica u16, nblocks u16 (>= 1), and nblocks block hashes
// u64. Entry k has sequence number first+k.
const (
	magicJournal     = "GRJL"
	journalHeaderLen = headerLen + 8 + 8 + 8 + 4
	journalEntryMin  = 2 + 2 // replica, nblocks: the bound a count is checked against
)

// EncodedLen returns the length of j's encoding.
func (j *Journal) EncodedLen() int {
	n := journalHeaderLen
	for k := 0; k < j.n; k++ {
		_, c := j.entry(k)
		n += journalEntryMin + 8*len(c)
	}
	return n
}

// AppendBinary appends j's versioned encoding to b. It fails, returning b,
// only for a journal holding more entries than the u32 count can say.
func (j *Journal) AppendBinary(b []byte) ([]byte, error) {
	if uint64(j.n) > math.MaxUint32 {
		return b, fail(ErrInvalid, "journal entry count", int64(j.n), "exceeds the u32 count")
	}
	b = appendHeader(b, magicJournal)
	b = appendU64(b, j.Epoch)
	b = appendU64(b, j.ConfigID)
	b = appendU64(b, j.First())
	b = appendU32(b, uint32(j.n))
	for k := 0; k < j.n; k++ {
		r, c := j.entry(k)
		b = appendChain(b, r, c)
	}
	return b, nil
}

// appendChain appends one entry: replica u16, nblocks u16, blocks u64.
func appendChain(b []byte, replica int, chain []uint64) []byte {
	b = appendU16(b, uint16(replica))
	b = appendU16(b, uint16(len(chain)))
	for _, h := range chain {
		b = appendU64(b, h)
	}
	return b
}

// readChainHead reads an entry's replica and block count and checks that
// the count is nonzero (Append never keeps an empty chain) and that its
// blocks fit in what is left, returning the blocks' bytes.
func readChainHead(r *reader, what string) (replica int, blocks []byte, err error) {
	replica, nb := int(r.u16()), int(r.u16())
	if r.short {
		return 0, nil, r.shortErr(what + " entry")
	}
	if nb == 0 {
		return 0, nil, fail(ErrInvalid, what+" entry block count", 0, "must be >= 1")
	}
	blocks = r.take(8 * nb)
	if blocks == nil {
		return 0, nil, fail(ErrShort, what+" entry block count", int64(nb), "needs more bytes than the value has")
	}
	return replica, blocks, nil
}

// JournalEpoch returns the epoch of the journal encoded in b, reading only
// its header (a gateway compares it with a peer's answer to recognise
// itself), and false when b is not a journal of this version.
func JournalEpoch(b []byte) (uint64, bool) {
	r := reader{b: b}
	if r.header(magicJournal, "journal") != nil {
		return 0, false
	}
	epoch := r.u64()
	return epoch, !r.short
}

// Decode replaces j's content (entries, Epoch, ConfigID, numbering) with the
// journal encoded in b. j keeps its capacity and maxBlocks, so Decode never
// allocates: an encoding with more entries than Cap() keeps the newest Cap()
// (the writer may run a build with another capacity), and chains longer than
// MaxBlocks() keep their first MaxBlocks() blocks. It validates all of b
// first, so on error j is unchanged.
func (j *Journal) Decode(b []byte) error {
	r := reader{b: b}
	if err := r.header(magicJournal, "journal"); err != nil {
		return err
	}
	epoch, cfg, first, count := r.u64(), r.u64(), r.u64(), uint64(r.u32())
	if r.short {
		return r.shortErr("journal header")
	}
	// Bound the count by the bytes left before walking anything.
	if count > uint64(r.left())/journalEntryMin {
		return fail(ErrShort, "journal entry count", int64(count), "needs more bytes than the value has")
	}
	if first == 0 {
		return fail(ErrInvalid, "journal first seq", 0, "must be >= 1")
	}
	if count > math.MaxUint64-first {
		return fail(ErrInvalid, "journal entry count", int64(count), "overflows the sequence numbers after first seq "+strconv.FormatUint(first, 10))
	}
	body := r
	for range count {
		if _, _, err := readChainHead(&r, "journal"); err != nil {
			return err
		}
	}
	if err := r.end("journal"); err != nil {
		return err
	}
	keep := min(count, uint64(len(j.replicas)))
	skip := count - keep
	for range skip {
		_, _, _ = readChainHead(&body, "journal") // validated above
	}
	j.Epoch, j.ConfigID = epoch, cfg
	j.head, j.n, j.base = 0, int(keep), first-1+skip
	for i := range int(keep) {
		rep, blocks, _ := readChainHead(&body, "journal")
		k := min(len(blocks)/8, j.maxBlocks)
		dst := j.blocks[i*j.maxBlocks : i*j.maxBlocks+k]
		for x := range dst {
			dst[x] = le.Uint64(blocks, 8*x)
		}
		j.replicas[i], j.lens[i] = uint16(rep), uint16(k)
	}
	return nil
}
