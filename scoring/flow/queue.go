// Package flow orders the requests a router holds back while no replica can
// start them soon: strict priority between bands, fair shares between
// tenants within a band (start-time fair queueing over each request's
// estimated tokens, FIFO within a tenant), a deadline per request and a
// bound per band. It decides order and admission to the queue only; which
// replica a request goes to, and when capacity is there, is the caller's
// decision (scoring.Pick at the moment of release: late binding).
//
//	q := flow.New(flow.Config{Bands: []flow.Band{{MaxHeld: 100, MaxWaitNanos: 30e9}}, MaxHeld: 1000})
//	if err := q.Push(flow.Item{ID: id, Band: 0, Tenant: t, Cost: tokens}, now); err != nil { /* 429 */ }
//	q.Scan(8, func(it flow.Item) bool { return dispatched(it) }) // in service order
//	q.Expire(now, func(it flow.Item) { /* 429: waited too long */ })
//
// Standard library only, no clock (time is an argument), allocation-free
// after New. Not safe for concurrent use: the plugin keeps one per worker VM.
package flow

import (
	"errors"
	"math"
	"strconv"
)

// Errors Push returns; the caller answers the request with a 429.
var (
	// ErrBandFull: the band holds its MaxHeld requests.
	ErrBandFull = errors.New("flow: band full")
	// ErrQueueFull: the queue holds Config.MaxHeld requests in all.
	ErrQueueFull = errors.New("flow: queue full")
)

// Band is one priority class. Bands are strict: a request of a band is
// released only when no request of a higher band waits.
type Band struct {
	// MaxHeld bounds the requests the band holds at once (0: only
	// Config.MaxHeld bounds it).
	MaxHeld int
	// MaxWaitNanos is the longest a request of the band is held before
	// Expire reports it (0: no deadline).
	MaxWaitNanos int64
}

// Config sizes a Queue.
type Config struct {
	// Bands, highest priority first; at most MaxBands.
	Bands []Band
	// MaxHeld bounds the requests held in all bands (at least 1).
	MaxHeld int
	// MaxTenants bounds the tenants tracked at once per band; requests of
	// further tenants share one overflow tenant (default 256).
	MaxTenants int
}

// MaxBands bounds Config.Bands.
const MaxBands = 16

// maxScan bounds the requests one Scan offers per band (its frontier).
const maxScan = 62

// Item is one held request.
type Item struct {
	// ID identifies the request to the caller (the plugin's stream id).
	ID uint32
	// Band is the index of the request's band in Config.Bands.
	Band int
	// Tenant is the request's fairness key (a hash of the tenant header;
	// 0 for none: all such requests are one tenant).
	Tenant uint64
	// Cost is the request's share of the fleet's work in the unit the
	// shares are fair in (the plugin uses its estimated prompt plus output
	// tokens); values below 1 count as 1.
	Cost float64
	// EnqueuedNanos and DeadlineNanos are set by Push (DeadlineNanos 0: none).
	EnqueuedNanos, DeadlineNanos int64
}

// Validate reports the first setting outside its range, quoting it.
func (c *Config) Validate() error {
	switch {
	case len(c.Bands) == 0 || len(c.Bands) > MaxBands:
		return errors.New("flow: bands must number 1 to " + strconv.Itoa(MaxBands) + ", got " + strconv.Itoa(len(c.Bands)))
	case c.MaxHeld < 1 || c.MaxHeld > 1<<20:
		return errors.New("flow: max_held must be in [1, 1048576], got " + strconv.Itoa(c.MaxHeld))
	case c.MaxTenants < 0 || c.MaxTenants > 1<<16:
		return errors.New("flow: max_tenants must be in [0, 65536], got " + strconv.Itoa(c.MaxTenants))
	}
	for i, b := range c.Bands {
		if b.MaxHeld < 0 || b.MaxWaitNanos < 0 {
			return errors.New("flow: band " + strconv.Itoa(i) + " has a negative bound")
		}
	}
	return nil
}

// Handle names a held item for Remove; the zero Handle names none.
type Handle uint64

// Queue holds requests in bands. See the package doc.
type Queue struct {
	cfg   Config
	items []node
	free  []int32
	bands []band
	n     int
	gen   uint32
	seq   uint64
	// scratch for Scan: the tenants whose heads it visits, in order.
	visit []int32
}

type node struct {
	it     Item
	start  float64 // the request's start tag in its band's virtual time
	seq    uint64  // arrival order, breaks ties between equal tags
	gen    uint32  // 0: free
	tenant int32
	next   int32 // the tenant's FIFO
	prev   int32
	older  int32 // the band's FIFO by arrival (deadlines are in this order)
	newer  int32
}

type tenant struct {
	key        uint64
	finish     float64 // finish tag of its last request
	head, tail int32   // its FIFO of items; -1: empty (the slot is free)
	pos        int32   // index in the band's heap
}

type band struct {
	cfg Band
	n   int
	v   float64 // virtual time: the start tag of the last request released
	// tenants[0] is the overflow tenant; slots maps tenant keys to
	// indexes of tenants (open addressing, -1 empty, -2 deleted).
	tenants  []tenant
	slots    []int32
	freeT    []int32
	heap     []int32 // tenants with items, by their head's (start, seq)
	old, new int32   // the band's FIFO by arrival
}

// New returns an empty queue for cfg (which must Validate).
func New(cfg Config) *Queue {
	if cfg.MaxTenants == 0 {
		cfg.MaxTenants = 256
	}
	q := &Queue{cfg: cfg, items: make([]node, cfg.MaxHeld), free: make([]int32, 0, cfg.MaxHeld)}
	for i := cfg.MaxHeld - 1; i >= 0; i-- {
		q.free = append(q.free, int32(i))
	}
	slots := 1
	for slots < 2*cfg.MaxTenants {
		slots <<= 1
	}
	q.bands = make([]band, len(cfg.Bands))
	for b := range q.bands {
		bd := &q.bands[b]
		bd.cfg = cfg.Bands[b]
		bd.tenants = make([]tenant, cfg.MaxTenants+1)
		bd.slots = make([]int32, slots)
		for i := range bd.slots {
			bd.slots[i] = -1
		}
		bd.freeT = make([]int32, 0, cfg.MaxTenants)
		for t := cfg.MaxTenants; t >= 1; t-- {
			bd.freeT = append(bd.freeT, int32(t))
		}
		for t := range bd.tenants {
			bd.tenants[t].head, bd.tenants[t].tail, bd.tenants[t].pos = -1, -1, -1
		}
		bd.heap = make([]int32, 0, cfg.MaxTenants+1)
		bd.old, bd.new = -1, -1
	}
	q.visit = make([]int32, 0, cfg.MaxTenants+1)
	return q
}

// Len returns the number of held requests.
func (q *Queue) Len() int { return q.n }

// BandLen returns the number of requests band b holds.
func (q *Queue) BandLen(b int) int {
	if b < 0 || b >= len(q.bands) {
		return 0
	}
	return q.bands[b].n
}

// Oldest returns when band b's oldest held request was pushed, and false
// when it holds none.
func (q *Queue) Oldest(b int) (int64, bool) {
	if b < 0 || b >= len(q.bands) || q.bands[b].old < 0 {
		return 0, false
	}
	return q.items[q.bands[b].old].it.EnqueuedNanos, true
}

// Push holds it at nowNanos, behind the requests of its tenant, at its
// fair place among the other tenants of its band. It fails with
// ErrBandFull or ErrQueueFull (the request is not held); an out-of-range
// band is an error too.
func (q *Queue) Push(it Item, nowNanos int64) (Handle, error) {
	if it.Band < 0 || it.Band >= len(q.bands) {
		return 0, errors.New("flow: no band " + strconv.Itoa(it.Band))
	}
	bd := &q.bands[it.Band]
	switch {
	case len(q.free) == 0:
		return 0, ErrQueueFull
	case bd.cfg.MaxHeld > 0 && bd.n >= bd.cfg.MaxHeld:
		return 0, ErrBandFull
	}
	if !(it.Cost >= 1) || math.IsInf(it.Cost, 0) {
		it.Cost = max(min(it.Cost, 1<<40), 1) // NaN and below 1 count as 1
	}
	it.EnqueuedNanos, it.DeadlineNanos = nowNanos, 0
	if bd.cfg.MaxWaitNanos > 0 {
		it.DeadlineNanos = nowNanos + bd.cfg.MaxWaitNanos
	}
	i := q.free[len(q.free)-1]
	q.free = q.free[:len(q.free)-1]
	t := bd.tenantOf(it.Tenant)
	tn := &bd.tenants[t]
	q.gen++
	if q.gen == 0 {
		q.gen = 1
	}
	q.seq++
	start := max(bd.v, tn.finish)
	tn.finish = start + it.Cost
	q.items[i] = node{it: it, start: start, seq: q.seq, gen: q.gen, tenant: t, next: -1, prev: tn.tail, older: bd.new, newer: -1}
	if tn.tail >= 0 {
		q.items[tn.tail].next = i
	} else {
		tn.head = i
		bd.heapPush(q, t)
	}
	tn.tail = i
	if bd.new >= 0 {
		q.items[bd.new].newer = i
	} else {
		bd.old = i
	}
	bd.new = i
	bd.n++
	q.n++
	return Handle(uint64(q.gen)<<32 | uint64(i) + 1), nil
}

// Remove drops the item h names (a client that left, a request answered
// otherwise) and reports whether it was held.
func (q *Queue) Remove(h Handle) bool {
	i, ok := q.lookup(h)
	if !ok {
		return false
	}
	q.unlink(i)
	return true
}

// Item returns the held item h names.
func (q *Queue) Item(h Handle) (Item, bool) {
	i, ok := q.lookup(h)
	if !ok {
		return Item{}, false
	}
	return q.items[i].it, true
}

func (q *Queue) lookup(h Handle) (int32, bool) {
	i := int64(uint32(h)) - 1
	if h == 0 || i < 0 || i >= int64(len(q.items)) || q.items[i].gen != uint32(h>>32) || q.items[i].gen == 0 {
		return 0, false
	}
	return int32(i), true
}

// Scan offers up to limit held requests to take, in service order: the
// highest band with requests first, within it each tenant's oldest request,
// tenants by their fair start tag. take returns true when it releases the
// request (it leaves the queue, unless take removed it already:
// TestScanTakeRemoves) and false to leave it held. A lower band is
// offered only once the higher ones are empty, so a request never overtakes
// one of a higher band. Scan returns how many take released.
func (q *Queue) Scan(limit int, take func(Item) bool) int {
	taken := 0
	for b := range q.bands {
		bd := &q.bands[b]
		if bd.n == 0 {
			continue
		}
		q.visit = bd.smallest(q, q.visit[:0], min(limit, maxScan))
		for _, t := range q.visit {
			i := bd.tenants[t].head
			gen, start := q.items[i].gen, q.items[i].start
			if take(q.items[i].it) {
				bd.v = max(bd.v, start)
				if q.items[i].gen == gen { // take may have removed it itself
					q.unlink(i)
				}
				taken++
			}
		}
		limit -= len(q.visit)
		if bd.n > 0 || limit <= 0 {
			return taken
		}
	}
	return taken
}

// Expire removes the requests whose deadline is at or before nowNanos,
// oldest first, and passes each to fn.
func (q *Queue) Expire(nowNanos int64, fn func(Item)) int {
	n := 0
	for b := range q.bands {
		bd := &q.bands[b]
		for bd.old >= 0 {
			nd := &q.items[bd.old]
			if nd.it.DeadlineNanos == 0 || nd.it.DeadlineNanos > nowNanos {
				break
			}
			it := nd.it
			q.unlink(bd.old)
			n++
			if fn != nil {
				fn(it)
			}
		}
	}
	return n
}

// unlink takes item i out of its tenant's FIFO, its band's FIFO and (when
// its tenant empties) the band's heap, and frees it.
func (q *Queue) unlink(i int32) {
	nd := &q.items[i]
	bd := &q.bands[nd.it.Band]
	t := nd.tenant
	tn := &bd.tenants[t]
	if nd.prev >= 0 {
		q.items[nd.prev].next = nd.next
	} else {
		tn.head = nd.next
	}
	if nd.next >= 0 {
		q.items[nd.next].prev = nd.prev
	} else {
		tn.tail = nd.prev
	}
	if nd.older >= 0 {
		q.items[nd.older].newer = nd.newer
	} else {
		bd.old = nd.newer
	}
	if nd.newer >= 0 {
		q.items[nd.newer].older = nd.older
	} else {
		bd.new = nd.older
	}
	if tn.head < 0 {
		bd.heapRemove(q, t)
		bd.releaseTenant(t)
	} else if nd.prev < 0 {
		bd.heapFix(q, tn.pos) // its head changed
	}
	*nd = node{}
	q.free = append(q.free, i)
	bd.n--
	q.n--
}

// tenantOf returns the index of key's tenant, taking a free slot for a new
// one; with none free, the overflow tenant (index 0) stands for it.
func (bd *band) tenantOf(key uint64) int32 {
	mask := uint64(len(bd.slots) - 1)
	del := -1
	for p, probes := mix(key)&mask, 0; probes < len(bd.slots); p, probes = (p+1)&mask, probes+1 {
		switch s := bd.slots[p]; {
		case s == -1:
			if len(bd.freeT) == 0 {
				return 0
			}
			if del >= 0 {
				p = uint64(del)
			}
			t := bd.freeT[len(bd.freeT)-1]
			bd.freeT = bd.freeT[:len(bd.freeT)-1]
			bd.slots[p] = t
			bd.tenants[t] = tenant{key: key, finish: bd.v, head: -1, tail: -1, pos: -1}
			return t
		case s == -2:
			if del < 0 {
				del = int(p)
			}
		case bd.tenants[s].key == key:
			return s
		}
	}
	return 0
}

// releaseTenant frees tenant t's slot once it holds nothing (the overflow
// tenant keeps its place).
func (bd *band) releaseTenant(t int32) {
	if t == 0 {
		return
	}
	key := bd.tenants[t].key
	mask := uint64(len(bd.slots) - 1)
	for p, probes := mix(key)&mask, 0; probes < len(bd.slots); p, probes = (p+1)&mask, probes+1 {
		if s := bd.slots[p]; s == t {
			bd.slots[p] = -2
			break
		} else if s == -1 {
			break
		}
	}
	bd.tenants[t] = tenant{head: -1, tail: -1, pos: -1}
	bd.freeT = append(bd.freeT, t)
}

// mix spreads a tenant key over the slot table (splitmix64's finalizer).
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// less orders tenants a and b by their heads' start tags, then arrival.
func (bd *band) less(q *Queue, a, b int32) bool {
	x, y := &q.items[bd.tenants[a].head], &q.items[bd.tenants[b].head]
	if x.start != y.start {
		return x.start < y.start
	}
	return x.seq < y.seq
}

func (bd *band) heapPush(q *Queue, t int32) {
	bd.tenants[t].pos = int32(len(bd.heap))
	bd.heap = append(bd.heap, t)
	bd.up(q, len(bd.heap)-1)
}

func (bd *band) heapRemove(q *Queue, t int32) {
	p := int(bd.tenants[t].pos)
	if p < 0 {
		return
	}
	last := len(bd.heap) - 1
	bd.swap(p, last)
	bd.heap = bd.heap[:last]
	bd.tenants[t].pos = -1
	if p < last {
		bd.heapFix(q, int32(p))
	}
}

func (bd *band) heapFix(q *Queue, p int32) {
	if !bd.down(q, int(p)) {
		bd.up(q, int(p))
	}
}

func (bd *band) swap(i, j int) {
	h := bd.heap
	h[i], h[j] = h[j], h[i]
	bd.tenants[h[i]].pos, bd.tenants[h[j]].pos = int32(i), int32(j)
}

func (bd *band) up(q *Queue, j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !bd.less(q, bd.heap[j], bd.heap[i]) {
			break
		}
		bd.swap(i, j)
		j = i
	}
}

func (bd *band) down(q *Queue, i int) bool {
	i0 := i
	n := len(bd.heap)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && bd.less(q, bd.heap[r], bd.heap[l]) {
			j = r
		}
		if !bd.less(q, bd.heap[j], bd.heap[i]) {
			break
		}
		bd.swap(i, j)
		i = j
	}
	return i > i0
}

// smallest appends to dst the first limit tenants in heap order without
// changing the heap: a frontier of candidates, each visit adding the
// visited node's children (O(limit · log limit) comparisons).
func (bd *band) smallest(q *Queue, dst []int32, limit int) []int32 {
	if limit <= 0 || len(bd.heap) == 0 {
		return dst
	}
	// The frontier holds heap positions; it is tiny (limit is small), so
	// a linear minimum is cheaper than a second heap.
	var frontier [64]int32
	f := frontier[:1]
	f[0] = 0
	for len(dst) < limit && len(f) > 0 {
		m := 0
		for k := 1; k < len(f); k++ {
			if bd.less(q, bd.heap[f[k]], bd.heap[f[m]]) {
				m = k
			}
		}
		p := f[m]
		f[m] = f[len(f)-1]
		f = f[:len(f)-1]
		dst = append(dst, bd.heap[p])
		for c := 2*p + 1; c <= 2*p+2 && int(c) < len(bd.heap) && len(f) < cap(f); c++ {
			f = append(f, c)
		}
	}
	return dst
}
