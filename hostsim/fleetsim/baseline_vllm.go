package fleetsim

import (
	"math/bits"
	"time"
)

// vllmPrefixAware is vLLM production-stack's router with
// --routing-logic prefixaware (vllm-project/production-stack
// src/vllm_router/routers/routing_logic.py, PrefixAwareRouter, over
// src/vllm_router/prefix/hashtrie.py): the prompt text (a chat's message
// contents joined) cut into 128-character chunks, each hashed, walked down
// a trie whose nodes hold the endpoints that were sent that prefix; the
// walk keeps the endpoints present at every step and stops where none of
// them is; the request goes to one of the endpoints left, at random (all
// of them when nothing matched), and the trie records the prompt under the
// chosen one. Load is ignored and nothing is ever evicted (the router
// assumes engines never evict a prefix).
//
// The trie is held as the chained hashes of the chunks (a node is its
// path), each with the set of replicas; the final partial chunk, which a
// prompt shares only with an identical one, is left out.
// TestVLLMPrefixAwarePick holds the rule.
type vllmPrefixAware struct {
	l     local
	tc    textChain
	words int              // uint64 words per replica set
	nodes map[uint64]int32 // chunk-chain hash -> offset in sets
	sets  []uint64
	sel   []uint64
}

// vllmChunkChars is HashTrie's default chunk_size.
const vllmChunkChars = 128

func newVLLMPrefixAware(PolicyOptions) *vllmPrefixAware { return &vllmPrefixAware{} }

func (p *vllmPrefixAware) Name() string          { return "vllm-prefixaware" }
func (p *vllmPrefixAware) Advance(time.Duration) {}
func (p *vllmPrefixAware) Observe(*Event)        {}
func (p *vllmPrefixAware) Start(f *Fleet) error {
	p.l.start(f, 8)
	p.words = (f.Len() + 63) / 64
	p.nodes = map[uint64]int32{}
	p.sets = p.sets[:0]
	p.sel = make([]uint64, p.words)
	return nil
}

func (p *vllmPrefixAware) Pick(_ time.Duration, req *Request, _ int) Decision {
	ch := p.tc.chain(req, vllmChunkChars)
	if !p.longestMatch(req, ch) {
		return Reject(503)
	}
	best := p.randomMember()
	p.record(ch, best)
	return Route(best)
}

// longestMatch leaves in p.sel the replicas eligible for req that hold the
// longest prefix of chunk chain ch (all eligible ones when none holds its
// first chunk); false if no replica is eligible.
func (p *vllmPrefixAware) longestMatch(req *Request, ch []uint64) bool {
	clear(p.sel)
	any := false
	for i := 0; i < p.l.f.Len(); i++ {
		if p.l.eligible(i, req) {
			p.sel[i/64] |= 1 << (i % 64)
			any = true
		}
	}
	for _, h := range ch {
		off, ok := p.nodes[h]
		if !ok {
			break
		}
		node, inter := p.sets[off:off+int32(p.words)], uint64(0)
		for w := range p.sel {
			inter |= node[w] & p.sel[w]
		}
		if inter == 0 {
			break
		}
		for w := range p.sel {
			p.sel[w] &= node[w]
		}
	}
	return any
}

// record adds replica to every node of chunk chain ch.
func (p *vllmPrefixAware) record(ch []uint64, replica int) {
	for _, h := range ch {
		off, ok := p.nodes[h]
		if !ok {
			off = int32(len(p.sets))
			p.nodes[h] = off
			p.sets = append(p.sets, make([]uint64, p.words)...)
		}
		p.sets[off+int32(replica/64)] |= 1 << (replica % 64)
	}
}

// randomMember returns one replica of p.sel, uniformly (random.choice).
func (p *vllmPrefixAware) randomMember() int {
	n := 0
	for _, w := range p.sel {
		n += bits.OnesCount64(w)
	}
	k := p.l.rng.IntN(n)
	for wi, w := range p.sel {
		for ; w != 0; w &= w - 1 {
			if k == 0 {
				return wi*64 + bits.TrailingZeros64(w)
			}
			k--
		}
	}
	return -1
}
