package fleetsim

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/gpuroute/gpuroute/scoring"
	"github.com/gpuroute/gpuroute/scoring/prefix"
)

// local is a router's own accounting of what it sent: per-replica in-flight
// requests, outstanding tokens and active KV blocks, updated from the
// request events. Baselines combine it with scrapes that are up to one
// ScrapeInterval old, as a real router does.
type local struct {
	f        *Fleet
	inflight []int
	tokens   []int64 // prompt tokens until first token + (max_tokens − streamed)
	blocks   []int64 // KV blocks of in-flight requests (prompt + streamed)
	fl       []flight
	rng      *rand.Rand
}

type flight struct {
	replica  int // -1: none
	prompt   int64
	bound    int64 // max_tokens (or a default) minus streamed
	streamed int
	blocks   int64
}

func (l *local) start(f *Fleet, seed int64) {
	l.f = f
	n := f.Len()
	l.inflight = make([]int, n)
	l.tokens = make([]int64, n)
	l.blocks = make([]int64, n)
	l.fl = l.fl[:0]
	l.rng = rand.New(rand.NewPCG(uint64(seed), 0x67707572))
}

func (l *local) rec(id int) *flight {
	for id >= len(l.fl) {
		l.fl = append(l.fl, flight{replica: -1})
	}
	return &l.fl[id]
}

// defaultMaxTokens stands for a request without max_tokens.
const defaultMaxTokens = 1024

func (l *local) observe(ev *Event) {
	r := l.rec(ev.Req.ID)
	switch ev.Kind {
	case Dispatched:
		bound := int64(ev.Req.MaxTokens)
		if bound <= 0 {
			bound = defaultMaxTokens
		}
		*r = flight{replica: ev.Replica, prompt: int64(ev.Req.PromptTokens), bound: bound,
			blocks: int64(blocksFor(ev.Req.PromptTokens))}
		l.inflight[ev.Replica]++
		l.tokens[ev.Replica] += r.prompt + r.bound
		l.blocks[ev.Replica] += r.blocks
	case FirstToken:
		if r.replica == ev.Replica {
			l.tokens[ev.Replica] -= r.prompt + 1
			r.prompt = 0
			r.bound--
			r.streamed = 1
		}
	case Tokens:
		if r.replica == ev.Replica {
			d := min(int64(ev.Tokens), r.bound)
			l.tokens[ev.Replica] -= d
			r.bound -= d
			r.streamed += ev.Tokens
			nb := int64(blocksFor(int(ev.Req.PromptTokens) + r.streamed))
			l.blocks[ev.Replica] += nb - r.blocks
			r.blocks = nb
		}
	case Completed, Cancelled:
		if r.replica == ev.Replica && r.replica >= 0 {
			l.inflight[r.replica]--
			l.tokens[r.replica] -= r.prompt + r.bound
			l.blocks[r.replica] -= r.blocks
			*r = flight{replica: -1}
		}
	}
}

// eligible reports whether a router would send req to replica i:
// configured open, healthy at the last scrape, and serving req's model.
// No baseline knows models; a gateway that serves several keeps each
// model's replicas apart by routing (a pool or route per model), so each
// chooses among those alone, as gpuroute's models key does.
func (l *local) eligible(i int, req *Request) bool {
	return l.f.Open(i) && l.f.Scrape(i).Healthy && l.f.Replica(i).Serves(req.Model)
}

// argmin returns the replica eligible for req with the lowest cost, ties
// broken at random (seeded); -1 if none.
func (l *local) argmin(req *Request, cost func(i int) float64) int {
	best, ties := -1, 0
	bc := math.Inf(1)
	for i := 0; i < l.f.Len(); i++ {
		if !l.eligible(i, req) {
			continue
		}
		c := cost(i)
		switch {
		case best < 0 || c < bc:
			best, bc, ties = i, c, 1
		case c == bc:
			ties++
			if l.rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}

// firstLeast returns the replica eligible for req with the lowest cost,
// the first of equals (a router scanning its worker list in order); -1 if
// none.
func (l *local) firstLeast(req *Request, cost func(i int) float64) int {
	best := -1
	bc := math.Inf(1)
	for i := 0; i < l.f.Len(); i++ {
		if l.eligible(i, req) {
			if c := cost(i); best < 0 || c < bc {
				best, bc = i, c
			}
		}
	}
	return best
}

func pickOr503(i int) Decision {
	if i < 0 {
		return Reject(503)
	}
	return Route(i)
}

// textChain hashes the request's prompt text in blockChars-character blocks
// as a chain seeded by model and adapter (prefix.Hasher: what a router
// without a tokenizer sees).
type textChain struct {
	h   prefix.Hasher
	buf []byte
}

func (t *textChain) chain(req *Request, blockChars int) []uint64 {
	if t.h.BlockChars() != blockChars {
		t.h.Init(blockChars, 1<<16)
	}
	t.h.Reset(req.Model, req.Adapter)
	t.buf = req.AppendPrompt(t.buf[:0])
	t.h.Write(t.buf)
	return t.h.Chain()
}

// ---- round-robin ----

// roundRobin is Envoy's ROUND_ROBIN with equal weights as it runs: every
// worker thread has its own load balancer that does not coordinate with the
// others (envoyproxy.io FAQ "Why doesn't RR load balancing appear to be
// even?"), each starting at a random host (EdfLoadBalancerBase advances its
// scheduler seed_ % hosts picks on refresh). With one worker it is a single
// global rotation.
type roundRobin struct {
	l       local
	workers int
	seed    int64
	conns   *connections
	next    map[string][]int // per model, per worker: the host its rotation picks next
}

func newRoundRobin(o PolicyOptions) *roundRobin {
	return &roundRobin{workers: max(o.Workers, 1) * max(o.Gateways, 1), seed: o.Seed}
}

func (p *roundRobin) Name() string { return "round-robin" }
func (p *roundRobin) Start(f *Fleet) error {
	p.workers = max(p.workers, 1)
	p.l.start(f, p.seed)
	p.conns = newConnections(p.workers, p.seed)
	// Each model's replicas are a pool of their own, with their own
	// rotations (local.eligible).
	p.next = map[string][]int{}
	for i := range f.Len() {
		m := f.Replica(i).Config().Model
		if p.next[m] != nil {
			continue
		}
		next := make([]int, p.workers)
		if p.workers > 1 {
			for w := range next {
				next[w] = p.l.rng.IntN(f.Len())
			}
		}
		p.next[m] = next
	}
	return nil
}
func (p *roundRobin) Advance(time.Duration) {}
func (p *roundRobin) Observe(ev *Event)     {}
func (p *roundRobin) Pick(_ time.Duration, req *Request, _ int) Decision {
	next := p.next[req.Model]
	if next == nil {
		return Reject(503) // no replica serves the model
	}
	w := p.conns.worker(req.ID)
	n := p.l.f.Len()
	for k := 0; k < n; k++ {
		i := (next[w] + k) % n
		if p.l.eligible(i, req) {
			next[w] = i + 1
			return Route(i)
		}
	}
	return Reject(503)
}

// ---- least-request ----

// leastRequest sends to the replica with the fewest of the router's own
// in-flight requests (Envoy's LEAST_REQUEST scanning all hosts; Envoy's
// default samples two, choice_count 2: envoyproxy.io load balancers docs).
type leastRequest struct{ l local }

func (p *leastRequest) Name() string          { return "least-request" }
func (p *leastRequest) Start(f *Fleet) error  { p.l.start(f, 1); return nil }
func (p *leastRequest) Advance(time.Duration) {}
func (p *leastRequest) Observe(ev *Event)     { p.l.observe(ev) }
func (p *leastRequest) Pick(_ time.Duration, req *Request, _ int) Decision {
	return pickOr503(p.l.argmin(req, func(i int) float64 { return float64(p.l.inflight[i]) }))
}

// ---- least-tokens ----

// leastTokens balances outstanding tokens: prompt tokens not yet prefilled
// plus max_tokens minus tokens streamed, from the router's own accounting.
type leastTokens struct{ l local }

func (p *leastTokens) Name() string          { return "least-tokens" }
func (p *leastTokens) Start(f *Fleet) error  { p.l.start(f, 2); return nil }
func (p *leastTokens) Advance(time.Duration) {}
func (p *leastTokens) Observe(ev *Event)     { p.l.observe(ev) }
func (p *leastTokens) Pick(_ time.Duration, req *Request, _ int) Decision {
	return pickOr503(p.l.argmin(req, func(i int) float64 { return float64(p.l.tokens[i]) }))
}

// ---- always-warm ----

// alwaysWarm sends to the replica with the longest prefix match in the
// router's own index (64-character blocks, LRU per replica bounded by its KV
// capacity), ignoring load; without any match it goes round-robin.
type alwaysWarm struct {
	l    local
	idx  []*blockLRU
	tc   textChain
	next int
}

func newAlwaysWarm(o PolicyOptions) *alwaysWarm { return &alwaysWarm{} }

func (p *alwaysWarm) Name() string          { return "always-warm" }
func (p *alwaysWarm) Advance(time.Duration) {}
func (p *alwaysWarm) Observe(ev *Event)     {}
func (p *alwaysWarm) Start(f *Fleet) error {
	p.l.start(f, 3)
	p.idx = make([]*blockLRU, f.Len())
	for i := range p.idx {
		// 64 characters ≈ 16 tokens = one KV block.
		p.idx[i] = newBlockLRU(f.Replica(i).KVCapacityTokens() / 16)
	}
	return nil
}
func (p *alwaysWarm) Pick(_ time.Duration, req *Request, _ int) Decision {
	ch := p.tc.chain(req, 64)
	best, bm := -1, 0
	n := p.l.f.Len()
	for k := 0; k < n; k++ {
		i := (p.next + k) % n
		if !p.l.eligible(i, req) {
			continue
		}
		if m := p.idx[i].match(ch); best < 0 || m > bm {
			best, bm = i, m
		}
	}
	if best < 0 {
		return Reject(503)
	}
	if bm == 0 {
		p.next = best + 1
	}
	p.idx[best].touchAll(ch)
	return Route(best)
}

// ---- dynamo ----

// dynamoRouter is NVIDIA Dynamo's KV router (docs.nvidia.com/dynamo, "KV
// Router": cost = overlap_score_weight × potential prefill blocks + potential
// decode blocks, lowest cost wins at router temperature 0). Prefill blocks
// are the request's blocks not cached on the worker, known from the workers'
// KV events (here: the replica's cache, which the events mirror within
// milliseconds); decode blocks are the router's count of active blocks of
// the requests it sent there plus the new request's. overlap_score_weight is
// 1.0 and the block size the engine's 16 tokens.
type dynamoRouter struct{ l local }

const dynamoOverlapWeight = 1.0

func newDynamo(o PolicyOptions) *dynamoRouter { return &dynamoRouter{} }

func (p *dynamoRouter) Name() string          { return "dynamo" }
func (p *dynamoRouter) Start(f *Fleet) error  { p.l.start(f, 6); return nil }
func (p *dynamoRouter) Advance(time.Duration) {}
func (p *dynamoRouter) Observe(ev *Event)     { p.l.observe(ev) }
func (p *dynamoRouter) Pick(_ time.Duration, req *Request, _ int) Decision {
	n := req.PromptTokens
	return pickOr503(p.l.argmin(req, func(i int) float64 {
		k := p.l.f.Replica(i).CachedPrefixTokens(req)
		prefill := float64(n-k) / BlockTokens
		decode := float64(p.l.blocks[i] + int64(blocksFor(n)))
		return dynamoOverlapWeight*prefill + decode
	}))
}

// ---- oracle ----

// oracle is gpuroute's rule ETTFT = W + A + P(n − k) (docs/design.md,
// "The decision"), run by scoring.Pick itself, on exact, fresh state: every request's true
// remaining prompt and output tokens as the work of the replica (PeerWork,
// so nothing is "foreign" and estimated from means), the replica's actual
// prefix cache, free KV, batch limit and adapter tier, the scoring.Hardware
// costs. It is the bound the real policies are measured against, not a
// feasible router; where it loses, the rule's model of W is wrong, not its
// inputs.
//
// Its ledger holds no work (each flight is cancelled as soon as it is
// recorded: the exact work is in PeerWork) but what the rule prices from
// the router's history: the adapters sent to each replica and their send
// rates (the reloads a send causes, scoring.Pick's LRU model) and the
// dispatch rate (the externality's λ). Without it the oracle would run a
// different rule on LoRA fleets, one that prices a load but not the
// reloads it causes (TestOracleLoRA).
type oracle struct {
	f      *Fleet
	params scoring.Params
	reps   []scoring.Replica
	adapt  [][]scoring.Adapter
	cached []int
	ledger *scoring.Ledger
	d      scoring.Decision
	sreq   scoring.Request
	held   oracleFlow
	// served maps each model a replica serves to the replicas serving it
	// (scoring.Request.ServedBy).
	served map[string][]bool
}

func (p *oracle) Name() string { return "oracle" }

func (p *oracle) Start(f *Fleet) error {
	p.f = f
	p.params = scoring.DefaultParams()
	n := f.Len()
	p.reps = make([]scoring.Replica, n)
	p.adapt = make([][]scoring.Adapter, n)
	p.cached = make([]int, n)
	p.ledger = scoring.NewLedger(p.params, n, 1)
	p.served = map[string][]bool{}
	for i := range n {
		r := f.Replica(i)
		if p.served[r.cfg.Model] == nil {
			p.served[r.cfg.Model] = make([]bool, n)
		}
		p.served[r.cfg.Model][i] = true
		p.reps[i].Addr = r.Addr
		p.reps[i].AddrHash = prefix.HashString(r.Addr)
		p.reps[i].Engine = r.cfg.Engine
	}
	if n > 0 {
		// scoring.Params has one chunk budget for the fleet; the
		// simulated replicas share the default unless configured.
		p.params.PrefillChunkTokens = f.Replica(0).cfg.TokenBudget
	}
	p.held.start()
	return nil
}

// decide runs the rule on req's exact state at now, without dispatching it:
// p.d holds the decision and sreq the request as Pick saw it.
func (p *oracle) decide(now time.Duration, req *Request, sreq *scoring.Request) {
	nowNanos := int64(now) + 1 // 0 would mean "never scraped"
	for i := range p.reps {
		p.fill(i, req, nowNanos)
	}
	// Its own true output as max_tokens: Pick's estimate of how long the
	// request runs (the KV it needs while the batch grows) is then exact,
	// as the batch's remaining outputs are.
	served, ok := p.served[req.Model]
	if !ok {
		served = make([]bool, len(p.reps)) // no replica serves it
	}
	*sreq = scoring.Request{PromptTokens: req.PromptTokens, Chain: req.Chain(), Model: req.Model,
		Adapter: req.Adapter, MaxTokens: req.output, Stream: req.Stream, ServedBy: served}
	scoring.Pick(&p.params, sreq, p.reps, p.cached, p.ledger, nowNanos, &p.d)
	if p.d.Index < 0 && p.d.NoAdapterSlot > 0 {
		// No open replica can take the adapter now: queue it where the
		// rest of the cost is lowest; the replica loads it when a slot frees.
		adapter := sreq.Adapter
		sreq.Adapter = ""
		scoring.Pick(&p.params, sreq, p.reps, p.cached, p.ledger, nowNanos, &p.d)
		sreq.Adapter = adapter
	}
}

// commit records p.d's choice for sreq in the ledger's history (its
// adapter memory and dispatch rate; the work itself is exact state).
func (p *oracle) commit(now time.Duration, sreq *scoring.Request) {
	if i := p.d.Index; i >= 0 {
		p.ledger.Cancel(p.ledger.Dispatch(i, sreq, sreq.PromptTokens-p.cached[i], int64(now)+1, p.d.Top[0].StartNanos))
	}
}

// fill writes replica i's exact state for req into p.reps[i] and
// p.cached[i].
func (p *oracle) fill(i int, req *Request, nowNanos int64) {
	r := p.f.Replica(i)
	s := &p.reps[i]
	s.Healthy = r.Open()
	s.Drain = scoring.Serving
	s.ScrapedNanos = nowNanos
	s.Hardware = r.cfg.Hardware
	p.cached[i] = 0
	if !s.Healthy {
		return
	}
	p.cached[i] = r.CachedPrefixTokens(req)
	var w scoring.Work
	for _, q := range r.waiting {
		k := min(r.kv.cachedBlocks(q.req.Chain())*BlockTokens, q.target-1)
		w.QueuedN++
		w.QueuedTokens += int64(q.target - k)
	}
	elapsed := r.stepElapsed(time.Duration(nowNanos - 1))
	for _, q := range r.running {
		if q.decode {
			w.DecodeN++
			w.DecodeTokens += int64(max(q.req.output-q.gen, 0))
		} else {
			// What is left of its prefill: the part of its chunk in the
			// step in flight that has run is done, though the replica
			// counts it only at the step's end.
			w.QueuedN++
			w.QueuedTokens += int64(float64(q.target-q.done) - float64(max(q.chunk, 0))*elapsed)
		}
	}
	s.PeerWork = w
	s.WaitingRequests, s.RunningRequests = len(r.waiting), len(r.running)
	capTok := r.KVCapacityTokens()
	s.KVCapacityTokens = capTok
	s.KVUsage = 1 - float64(r.FreeKVTokens())/float64(max(capTok, 1))
	s.CacheRoomTokens = r.EmptyKVTokens()
	s.MaxBatchSeqs = r.cfg.MaxBatch
	s.Adapters, s.AdapterSlots, s.AdapterHostSlots = nil, 0, 0
	if req.Adapter != "" {
		s.AdapterSlots, s.AdapterHostSlots = r.cfg.MaxLoras, r.cfg.MaxCPULoras
		s.Adapters = p.exactAdapters(i, r)
	}
}

// exactAdapters lists r's adapters as an engine would if it reported all
// of them: each GPU slot's (Active while it has requests), the idle ones in
// the host cache, and the adapters of waiting requests that have no slot
// (Active, at the tier their load will come from). Pick then prices the
// slot waits and loads from the true caches.
func (p *oracle) exactAdapters(i int, r *Replica) []scoring.Adapter {
	a := p.adapt[i][:0]
	add := func(name string, tier scoring.AdapterTier, active bool) {
		for k := range a {
			if a[k].Name == name {
				a[k].Active = a[k].Active || active
				return
			}
		}
		a = append(a, scoring.Adapter{Name: name, Tier: tier, Active: active, Hash: prefix.HashString(name)})
	}
	for _, sl := range r.slots {
		add(sl.name, scoring.TierGPU, sl.active > 0)
	}
	for _, h := range r.host {
		add(h, scoring.TierHost, false)
	}
	for _, q := range r.waiting {
		if q.req.Adapter != "" && !q.adapter {
			tier, _ := r.AdapterTier(q.req.Adapter)
			add(q.req.Adapter, tier, true)
		}
	}
	p.adapt[i] = a
	return a
}

// blockLRU is a bounded set of block hashes, least recently touched evicted
// first: a router's approximate per-replica prefix index.
type blockLRU struct {
	capacity   int
	idx        map[uint64]int32
	nodes      []lruNode
	free       []int32
	head, tail int32 // head: least recent
}

type lruNode struct {
	h          uint64
	prev, next int32
}

func newBlockLRU(capacity int) *blockLRU {
	return &blockLRU{capacity: max(capacity, 1), idx: make(map[uint64]int32), head: -1, tail: -1}
}

// match returns how many leading hashes of chain are present.
func (l *blockLRU) match(chain []uint64) int {
	for k, h := range chain {
		if _, ok := l.idx[h]; !ok {
			return k
		}
	}
	return len(chain)
}

func (l *blockLRU) unlink(i int32) {
	n := &l.nodes[i]
	if n.prev >= 0 {
		l.nodes[n.prev].next = n.next
	} else {
		l.head = n.next
	}
	if n.next >= 0 {
		l.nodes[n.next].prev = n.prev
	} else {
		l.tail = n.prev
	}
}

func (l *blockLRU) pushBack(i int32) {
	n := &l.nodes[i]
	n.prev, n.next = l.tail, -1
	if l.tail >= 0 {
		l.nodes[l.tail].next = i
	} else {
		l.head = i
	}
	l.tail = i
}

// touchAll inserts or refreshes every hash of chain.
func (l *blockLRU) touchAll(chain []uint64) {
	for _, h := range chain {
		if i, ok := l.idx[h]; ok {
			l.unlink(i)
			l.pushBack(i)
			continue
		}
		if len(l.idx) >= l.capacity {
			old := l.head
			l.unlink(old)
			delete(l.idx, l.nodes[old].h)
			l.free = append(l.free, old)
		}
		var i int32
		if n := len(l.free); n > 0 {
			i = l.free[n-1]
			l.free = l.free[:n-1]
		} else {
			l.nodes = append(l.nodes, lruNode{})
			i = int32(len(l.nodes) - 1)
		}
		l.nodes[i].h = h
		l.idx[h] = i
		l.pushBack(i)
	}
}
