package fleet

// Outbox buffers this worker's dispatches (replica, prefix chain or the
// chain's checkpoints, scoring.PrefixIndex.AppendCheckpoints) between ticks:
// the request path Pushes each decision locally, and the tick merges the
// outbox into the shared scoring.PrefixIndex (read, record each entry,
// write back with CAS). Hashes are copied into one backing array allocated
// by NewOutbox, so Push never allocates. When full, Push overwrites the oldest
// entry (counted by Dropped): losing an old hint only costs a prefix-cache
// guess, never correctness. The zero Outbox has no capacity and drops every
// push. Not safe for concurrent use (one per VM).
type Outbox struct {
	maxBlocks int
	replicas  []int32
	lens      []int32
	blocks    []uint64 // entry i's chain at blocks[i*maxBlocks:]
	head, n   int      // oldest entry, entry count
	dropped   uint64
}

// NewOutbox returns an outbox of capacity entries, each keeping the first
// maxBlocks blocks of its chain. Non-positive arguments give a zero-capacity
// outbox. Because block i's hash covers blocks 0..i (scoring.PrefixHasher),
// a truncated chain is still a valid, shorter chain.
func NewOutbox(capacity, maxBlocks int) *Outbox {
	if capacity <= 0 || maxBlocks <= 0 {
		return &Outbox{}
	}
	return &Outbox{
		maxBlocks: maxBlocks,
		replicas:  make([]int32, capacity),
		lens:      make([]int32, capacity),
		blocks:    make([]uint64, capacity*maxBlocks),
	}
}

// Cap returns the entry capacity.
func (o *Outbox) Cap() int { return len(o.replicas) }

// Len returns the number of entries waiting to be drained.
func (o *Outbox) Len() int { return o.n }

// Dropped returns how many entries were overwritten (or refused by a
// zero-capacity outbox) since creation.
func (o *Outbox) Dropped() uint64 { return o.dropped }

// Push records a dispatch of chain to replica, copying at most maxBlocks
// blocks. An empty chain (nothing cacheable) or a negative replica is ignored.
func (o *Outbox) Push(replica int, chain []uint64) {
	if len(chain) == 0 || replica < 0 || replica > 1<<31-1 {
		return
	}
	c := len(o.replicas)
	if c == 0 {
		o.dropped++
		return
	}
	var i int
	if o.n == c {
		i = o.head // overwrite the oldest
		o.head = (o.head + 1) % c
		o.dropped++
	} else {
		i = (o.head + o.n) % c
		o.n++
	}
	k := copy(o.blocks[i*o.maxBlocks:(i+1)*o.maxBlocks], chain)
	o.replicas[i], o.lens[i] = int32(replica), int32(k)
}

// Drain calls fn for every entry, oldest first, then empties the outbox. The
// chain passed to fn aliases the outbox's storage: use it within the call
// (scoring.PrefixIndex.Record copies what it keeps) and do not Push from fn.
func (o *Outbox) Drain(fn func(replica int, chain []uint64)) {
	o.Each(fn)
	o.Reset()
}

// Each calls fn for every entry, oldest first, and keeps them: a CAS merge
// that loses the race applies the same entries again on its retry.
func (o *Outbox) Each(fn func(replica int, chain []uint64)) {
	c := len(o.replicas)
	for k := 0; k < o.n; k++ {
		i := (o.head + k) % c
		base := i * o.maxBlocks
		fn(int(o.replicas[i]), o.blocks[base:base+int(o.lens[i]):base+int(o.lens[i])])
	}
}

// Reset empties the outbox.
func (o *Outbox) Reset() { o.head, o.n = 0, 0 }
