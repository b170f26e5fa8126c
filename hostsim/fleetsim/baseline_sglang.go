package fleetsim

import (
	"math"
	"time"
)

// sglangRouter is SGLang's router (PyPI sglang-router 0.3.2, the release
// SGLang's launcher installs) with its default policy, cache_aware
// (sgl-project/sglang sgl-model-gateway/src/policies/cache_aware.rs, with
// the defaults of py_src/sglang_router/router_args.py in that wheel):
//
//   - load is the router's own count of requests it sent a worker that have
//     not completed;
//   - when max − min load > balance_abs_threshold (64) and max >
//     balance_rel_threshold (1.5) × min, the request goes to the least
//     loaded worker (the first of them: Rust's min_by_key);
//   - otherwise the worker whose approximate radix tree of past prompt text
//     matches the longest prefix takes it if the match covers more than
//     cache_threshold (0.3) of the prompt's characters, and the least
//     loaded worker if not (since sglang PR #14650; before it, the worker
//     with the smallest tree);
//   - the chosen worker's tree gets the prompt either way.
//
// The tree is approximated by 64-character block hashes per worker in an
// LRU bounded by max_tree_size (2^26 characters); equal matches on several
// trees go to one of them at random (the tree keeps several tenants per
// node and returns one). TestSGLangPick holds the rule.
type sglangRouter struct {
	l   local
	idx []*blockLRU
	tc  textChain
}

// SGLang router 0.3.2 defaults (router_args.py).
const (
	sglCacheThreshold = 0.3
	sglBalanceAbs     = 64
	sglBalanceRel     = 1.5
	sglBlockChars     = 64
	sglMaxTreeChars   = 1 << 26
)

func newSGLang(PolicyOptions) *sglangRouter { return &sglangRouter{} }

func (p *sglangRouter) Name() string          { return "sglang" }
func (p *sglangRouter) Advance(time.Duration) {}
func (p *sglangRouter) Observe(ev *Event)     { p.l.observe(ev) }
func (p *sglangRouter) Start(f *Fleet) error {
	p.l.start(f, 5)
	p.idx = make([]*blockLRU, f.Len())
	for i := range p.idx {
		p.idx[i] = newBlockLRU(sglMaxTreeChars / sglBlockChars)
	}
	return nil
}

func (p *sglangRouter) Pick(_ time.Duration, req *Request, _ int) Decision {
	ch := p.tc.chain(req, sglBlockChars)
	best := p.pick(req, ch)
	if best >= 0 {
		p.idx[best].touchAll(ch)
	}
	return pickOr503(best)
}

// pick returns the worker cache_aware chooses for req (chain ch), -1 if
// none is eligible.
func (p *sglangRouter) pick(req *Request, ch []uint64) int {
	least := p.l.firstLeast(req, func(i int) float64 { return float64(p.l.inflight[i]) })
	if least < 0 {
		return -1
	}
	minL, maxL := math.MaxInt, 0
	for i := 0; i < p.l.f.Len(); i++ {
		if p.l.eligible(i, req) {
			minL, maxL = min(minL, p.l.inflight[i]), max(maxL, p.l.inflight[i])
		}
	}
	if maxL-minL > sglBalanceAbs && float64(maxL) > sglBalanceRel*float64(minL) {
		return least
	}
	bm := 0
	best := p.l.argmin(req, func(i int) float64 {
		m := p.idx[i].match(ch)
		bm = max(bm, m)
		return -float64(m)
	})
	if c := req.PromptChars(); c == 0 || float64(bm*sglBlockChars)/float64(c) <= sglCacheThreshold {
		return least
	}
	return best
}
