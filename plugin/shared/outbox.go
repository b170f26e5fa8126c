package shared

// Outbox buffers this worker's dispatches (replica, prefix chain or the
// chain's checkpoints, prefix.Index.AppendCheckpoints) between ticks:
// the request path Pushes each decision locally, and the tick merges the
// outbox into the shared prefix.Index (read, record each entry,
// write back with CAS). Hashes are copied into one backing array allocated
// by NewOutbox, so Push never allocates. When full, Push overwrites the oldest
// entry: losing an old hint only costs a prefix-cache guess, never
// correctness. It is a Journal's ring without the numbering.
// The zero Outbox has no capacity and drops every push. Not safe for
// concurrent use (one per VM).
type Outbox struct {
	ring Journal // its numbering is unused: an outbox is emptied whole
}

// NewOutbox returns an outbox of capacity entries, each keeping the first
// maxBlocks blocks of its chain. Non-positive arguments give a zero-capacity
// outbox. Because block i's hash covers blocks 0..i (prefix.Hasher),
// a truncated chain is still a valid, shorter chain.
func NewOutbox(capacity, maxBlocks int) *Outbox {
	return &Outbox{ring: *NewJournal(capacity, maxBlocks)}
}

// Cap returns the entry capacity.
func (o *Outbox) Cap() int { return o.ring.Cap() }

// Len returns the number of entries waiting to be drained.
func (o *Outbox) Len() int { return o.ring.Len() }

// Push records a dispatch of chain to replica, copying at most maxBlocks
// blocks. An empty chain (nothing cacheable) or a replica outside
// [0, 65535] is ignored.
func (o *Outbox) Push(replica int, chain []uint64) {
	if len(chain) == 0 || replica < 0 || replica > 0xFFFF {
		return
	}
	o.ring.Append(replica, chain) // overwrites the oldest when full (none without capacity)
}

// Each calls fn for every entry, oldest first, and keeps them: a CAS merge
// that loses the race applies the same entries again on its retry.
func (o *Outbox) Each(fn func(replica int, chain []uint64)) {
	for k := range o.ring.Len() {
		fn(o.ring.entry(k))
	}
}

// Reset empties the outbox.
func (o *Outbox) Reset() { o.ring.Reset(0, 0) }
