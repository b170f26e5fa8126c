package fleetsim

import (
	"math"
	"time"
)

// llmdSticky is llm-d's current default scheduling profile, "sticky until
// saturated" (llm-d/llm-d guides/optimized-baseline/router/
// optimized-baseline.values.yaml, with the plugins as llm-d/llm-d-router
// documents them: pkg/epp/framework/plugins/scheduling/filter/
// prefixcacheaffinity, scorer/tokenload, requestcontrol/dataproducer/
// inflightload and approximateprefix):
//
//   - approx-prefix-cache-producer: a per-pod index of the prompt blocks
//     the router sent there (16-token blocks, here 64 characters, the
//     tokenizer-free estimate; LRU capacity the pod's KV blocks, as autoTune
//     reads them from cache_config_info); a pod's match is its cached share
//     of the request's full blocks;
//   - inflight-load-producer: per pod, the uncached prompt tokens of the
//     requests sent there that have not streamed their first token;
//   - prefix-cache-affinity-filter: keep only the pods whose match is at
//     least affinityThreshold (0.80), unless none is, or unless the best
//     sticky pod's estimated TTFT (its in-flight tokens over
//     peakPrefillThroughput, 15,928 tokens/s) exceeds the best other pod's
//     by more than maxTTFTPenaltyMs (18 s; the guide's
//     maxTokensInFlightPenalty of 286,720 tokens is the same gate in tokens);
//   - token-load-scorer: the lowest in-flight tokens plus this request's
//     uncached tokens on the pod wins (score 1 − min(1, tokens /
//     4,194,304)), max-score picker, random among equal scores.
//
// explorationProbability is 0 by default and left out. TestLLMDStickyPick,
// TestLLMDStickyPartialMatch and TestLLMDStickyInFlight hold the rule.
type llmdSticky struct {
	l       local
	idx     []*blockLRU
	tc      textChain
	tokens  []int64 // per pod: uncached prompt tokens in flight
	charged []llmdCharge
	match   []int
	sticky  []bool
}

// llmdCharge is one request's contribution to a pod's in-flight tokens.
type llmdCharge struct {
	replica int // -1: none
	tokens  int64
	counted bool // added to tokens[replica]: the pod accepted it
}

// llm-d optimized-baseline defaults (the plugins' READMEs).
const (
	llmdAffinityThreshold    = 0.80
	llmdPeakPrefillTokPerSec = 15928
	llmdMaxTTFTPenaltySec    = 18
	llmdQueueThresholdTokens = 4194304
	llmdMaxPrefixBlocks      = 131072 / BlockTokens // maxPrefixTokensToMatch
)

func newLLMDSticky(PolicyOptions) *llmdSticky { return &llmdSticky{} }

func (p *llmdSticky) Name() string          { return "llm-d" }
func (p *llmdSticky) Advance(time.Duration) {}
func (p *llmdSticky) Start(f *Fleet) error {
	p.l.start(f, 7)
	n := f.Len()
	p.idx = make([]*blockLRU, n)
	for i := range p.idx {
		p.idx[i] = newBlockLRU(f.Replica(i).KVCapacityTokens() / BlockTokens)
	}
	p.tokens = make([]int64, n)
	p.match = make([]int, n)
	p.sticky = make([]bool, n)
	p.charged = p.charged[:0]
	return nil
}

func (p *llmdSticky) charge(id int) *llmdCharge {
	for id >= len(p.charged) {
		p.charged = append(p.charged, llmdCharge{replica: -1})
	}
	return &p.charged[id]
}

// Observe releases a request's tokens at its first token (streaming) or
// when it ends, as inflight-load-producer does.
func (p *llmdSticky) Observe(ev *Event) {
	c := p.charge(ev.Req.ID)
	switch ev.Kind {
	case Dispatched:
		if c.replica == ev.Replica && !c.counted {
			p.tokens[c.replica] += c.tokens
			c.counted = true
		}
	case FirstToken, Completed, Cancelled:
		if c.replica == ev.Replica && (ev.Req.Stream || ev.Kind != FirstToken) {
			if c.counted {
				p.tokens[c.replica] -= c.tokens
			}
			*c = llmdCharge{replica: -1}
		}
	}
}

func (p *llmdSticky) Pick(_ time.Duration, req *Request, _ int) Decision {
	ch := p.tc.chain(req, llmdBlockChars)
	if len(ch) > llmdMaxPrefixBlocks {
		ch = ch[:llmdMaxPrefixBlocks]
	}
	bestSticky, bestOther := math.Inf(1), math.Inf(1)
	for i := 0; i < p.l.f.Len(); i++ {
		if !p.l.eligible(i, req) {
			continue
		}
		p.match[i] = p.idx[i].match(ch)
		p.sticky[i] = len(ch) > 0 && float64(p.match[i]) >= llmdAffinityThreshold*float64(len(ch))
		ttft := float64(p.tokens[i]) / llmdPeakPrefillTokPerSec
		if p.sticky[i] {
			bestSticky = min(bestSticky, ttft)
		} else {
			bestOther = min(bestOther, ttft)
		}
	}
	onlySticky := !math.IsInf(bestSticky, 1) && (math.IsInf(bestOther, 1) || bestSticky-bestOther <= llmdMaxTTFTPenaltySec)
	uncached := func(i int) int64 {
		return int64(max(req.PromptTokens-p.match[i]*llmdBlockChars/CharsPerToken, 0))
	}
	best := p.l.argmin(req, func(i int) float64 {
		if onlySticky && !p.sticky[i] {
			return math.Inf(1)
		}
		return float64(min(p.tokens[i]+uncached(i), llmdQueueThresholdTokens))
	})
	if best < 0 {
		return Reject(503)
	}
	*p.charge(req.ID) = llmdCharge{replica: best, tokens: uncached(best)}
	p.idx[best].touchAll(ch)
	return Route(best)
}

// llmd322 is the Gateway API Inference Extension's default scheduling
// profile that llm-d shipped before "sticky until saturated" and that
// deployments on its inference-scheduling guide still run: weighted
// scorers summed, the highest total wins (max-score picker, random among
// ties). Scorers as defined in gateway-api-inference-extension
// pkg/epp/scheduling/framework/plugins: prefix-cache scorer = matched
// blocks ÷ request blocks from an approximate per-pod index of
// 64-character block hashes kept in an LRU of 31,250 blocks per pod
// (LRUCapacityPerServer), fed with each request's blocks on the chosen
// pod; queue scorer = min-max normalized waiting queue (shortest 1, longest
// 0, all equal 1); KV-cache utilization scorer = 1 − kv_cache_usage_perc.
// Weights prefix 3, queue 2, KV 2 (llm-d inference-scheduling guide).
// Metrics come from the last scrape (refresh every 50 ms).
type llmd322 struct {
	l   local
	idx []*blockLRU
	tc  textChain
}

// GIE default profile constants.
const (
	llmdPrefixWeight    = 3
	llmdQueueWeight     = 2
	llmdKVWeight        = 2
	llmdBlockChars      = 64
	llmdLRUBlocksPerPod = 31250
)

func newLLMD322(PolicyOptions) *llmd322 { return &llmd322{} }

func (p *llmd322) Name() string          { return "llm-d-322" }
func (p *llmd322) Advance(time.Duration) {}
func (p *llmd322) Observe(ev *Event)     {}
func (p *llmd322) Start(f *Fleet) error {
	p.l.start(f, 4)
	p.idx = make([]*blockLRU, f.Len())
	for i := range p.idx {
		p.idx[i] = newBlockLRU(llmdLRUBlocksPerPod)
	}
	return nil
}
func (p *llmd322) Pick(_ time.Duration, req *Request, _ int) Decision {
	ch := p.tc.chain(req, llmdBlockChars)
	minQ, maxQ := math.MaxInt, math.MinInt
	for i := 0; i < p.l.f.Len(); i++ {
		if p.l.eligible(i, req) {
			q := p.l.f.Scrape(i).Waiting
			minQ, maxQ = min(minQ, q), max(maxQ, q)
		}
	}
	best := p.l.argmin(req, func(i int) float64 {
		s := p.l.f.Scrape(i)
		prefix := 0.0
		if len(ch) > 0 {
			prefix = float64(p.idx[i].match(ch)) / float64(len(ch))
		}
		queue := 1.0
		if maxQ != minQ {
			queue = float64(maxQ-s.Waiting) / float64(maxQ-minQ)
		}
		kv := 1 - s.KVUsage
		return -(llmdPrefixWeight*prefix + llmdQueueWeight*queue + llmdKVWeight*kv)
	})
	if best >= 0 {
		p.idx[best].touchAll(ch)
	}
	return pickOr503(best)
}
