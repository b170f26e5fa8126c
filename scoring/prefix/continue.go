package prefix

// Continuation is a Hasher's chain saved at the end of a text, so that a
// text that follows it, hashed later by the same or another Hasher, extends
// the same chain block for block: a streamed answer after its prompt, which
// the next turn of the conversation quotes. It holds what the next block
// depends on (the unseeded chain value, the seed, the partial block) and
// the counts, not the chain's entries. The zero value is empty: Resume
// declines it. Not safe for concurrent use; saving again reuses its storage,
// so steady-state use allocates nothing.
type Continuation struct {
	blockChars int
	seed       uint64
	seeded     bool
	prev       uint64 // unseeded hash of the last full block
	chars      int64
	blocks     int
	tail       []byte // the partial block
}

// Save records in c the state of h's chain at the end of the text written so
// far. Save after SetSeed: a continuation of an unseeded chain stays unseeded.
func (h *Hasher) Save(c *Continuation) {
	if h.blockChars == 0 {
		h.Init(0, 0) // the zero value: default sizes
	}
	c.blockChars, c.seed, c.seeded, c.prev = h.blockChars, h.seed, h.seeded, h.prev
	c.chars, c.blocks = h.chars, len(h.chain)
	c.tail = append(c.tail[:0], h.buf[:h.fill]...)
}

// Resume sets h to continue the chain c holds: what is written next is
// hashed as if it followed the saved text in the same Hasher, up to h's
// chain bound (h must be initialised with the sizes of the Hasher that
// saved c). The chain then has c.Blocks() entries before the continued
// text's, which are not the saved chain's (Resume leaves them as they were,
// so that it costs a block, not a chain): read the continued text's blocks
// as Chain()[c.Blocks():]. Chars counts the saved text too. Resume reports
// false, changing nothing, when c is empty or was saved by a Hasher of
// another block size or a longer chain bound. TestContinuationExtendsChain
// holds the equality.
func (h *Hasher) Resume(c *Continuation) bool {
	if h.blockChars == 0 {
		h.Init(0, 0)
	}
	if c.blockChars != h.blockChars || c.blocks > cap(h.chain) {
		return false
	}
	h.seed, h.seeded, h.prev, h.chars = c.seed, c.seeded, c.prev, c.chars
	h.fill = copy(h.buf[:], c.tail)
	h.chain = h.chain[:c.blocks]
	return true
}

// Blocks returns the length of the saved chain: the position of the first
// block a resumed text completes.
func (c *Continuation) Blocks() int { return c.blocks }
