package fleetsim

// kvCache is a paged KV cache of BlockTokens-token blocks with prefix reuse,
// after vLLM's automatic prefix caching: full prompt blocks are identified by
// their chained hash and shared between requests; blocks nobody references
// stay cached and are evicted least recently released first when space is
// needed (vLLM's free-block queue). Blocks holding a partial prompt block or
// generated tokens are private (counted, not hashed).
type kvCache struct {
	total   int // blocks
	private int // private blocks in use
	idx     map[uint64]int32
	blocks  []kvBlock
	free    []int32
	// LRU list of unreferenced hashed blocks: head is the oldest.
	head, tail int32
	lruLen     int
	evictions  int64
	// gen counts releases: an admission that failed for lack of blocks is
	// not retried until something was released.
	gen uint64
}

type kvBlock struct {
	hash       uint64
	ref        int32
	prev, next int32
	ready      bool // computed (prefill done), so a prefix hit
}

func newKVCache(blocks int) *kvCache {
	return &kvCache{total: blocks, idx: make(map[uint64]int32), head: -1, tail: -1}
}

func (c *kvCache) reset() {
	*c = kvCache{total: c.total, idx: make(map[uint64]int32), head: -1, tail: -1, blocks: c.blocks[:0]}
}

// used is the number of blocks holding data (referenced or cached).
func (c *kvCache) used() int { return c.private + len(c.idx) }

// inUse is the number of referenced blocks: what vLLM's kv_cache_usage_perc
// counts (cached unreferenced blocks are free to reuse).
func (c *kvCache) inUse() int { return c.used() - c.lruLen }

// available is how many blocks an allocation could get, evicting if needed.
func (c *kvCache) available() int { return c.total - c.used() + c.lruLen }

func (c *kvCache) lruRemove(i int32) {
	b := &c.blocks[i]
	if b.prev >= 0 {
		c.blocks[b.prev].next = b.next
	} else {
		c.head = b.next
	}
	if b.next >= 0 {
		c.blocks[b.next].prev = b.prev
	} else {
		c.tail = b.prev
	}
	b.prev, b.next = -1, -1
	c.lruLen--
}

func (c *kvCache) lruPush(i int32) {
	b := &c.blocks[i]
	b.prev, b.next = c.tail, -1
	if c.tail >= 0 {
		c.blocks[c.tail].next = i
	} else {
		c.head = i
	}
	c.tail = i
	c.lruLen++
}

func (c *kvCache) pin(i int32) {
	if c.blocks[i].ref == 0 {
		c.lruRemove(i)
	}
	c.blocks[i].ref++
}

func (c *kvCache) unpin(i int32) {
	b := &c.blocks[i]
	b.ref--
	if b.ref == 0 {
		c.gen++
		if !b.ready {
			// Never computed (its request was cancelled mid-prefill):
			// nothing to reuse, drop it.
			c.drop(i)
			return
		}
		c.lruPush(i)
	}
}

func (c *kvCache) drop(i int32) {
	delete(c.idx, c.blocks[i].hash)
	c.free = append(c.free, i)
}

// ensureFree evicts cached blocks until n blocks are free; false if it cannot.
func (c *kvCache) ensureFree(n int) bool {
	for c.total-c.used() < n {
		if c.head < 0 {
			return false
		}
		i := c.head
		c.lruRemove(i)
		c.drop(i)
		c.evictions++
	}
	return true
}

// insert adds a hashed block with one reference; the caller ensured space.
func (c *kvCache) insert(h uint64, ready bool) int32 {
	var i int32
	if n := len(c.free); n > 0 {
		i = c.free[n-1]
		c.free = c.free[:n-1]
	} else {
		c.blocks = append(c.blocks, kvBlock{})
		i = int32(len(c.blocks) - 1)
	}
	c.blocks[i] = kvBlock{hash: h, ref: 1, prev: -1, next: -1, ready: ready}
	c.idx[h] = i
	return i
}

// cachedBlocks returns how many leading blocks of chain are cached and
// computed.
func (c *kvCache) cachedBlocks(chain []uint64) int {
	for k, h := range chain {
		i, ok := c.idx[h]
		if !ok || !c.blocks[i].ready {
			return k
		}
	}
	return len(chain)
}

func blocksFor(tokens int) int { return (tokens + BlockTokens - 1) / BlockTokens }
