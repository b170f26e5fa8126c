package fleetsim

import (
	"math"
	"math/rand/v2"
	"time"
)

// Agentic parameters: agenticSessions coding-agent sessions start over
// agenticStartSpan; each runs agenticMinTurns to agenticMinTurns +
// agenticSpanTurns turns, each turn's prompt the whole session so far (a
// system prompt and tool definitions shared with other sessions, the task,
// then every answer and the tool output or user reply after it), until the
// context passes agenticMaxContext. The sessions' contexts together
// outgrow the fleet's KV caches, so the engines evict.
const (
	agenticSystems     = 4
	agenticSysTokens   = 3000
	agenticToolSets    = 3
	agenticToolTokens  = 2500
	agenticSessions    = 80
	agenticStartSpan   = 150 * time.Second
	agenticMinTurns    = 10
	agenticSpanTurns   = 31
	agenticMaxContext  = 48_000
	agenticMaxTokens   = 1024
	agenticToolMedian  = 400 // tokens of a tool's output, log-normal
	agenticToolMax     = 6000
	agenticUserShare   = 5 // one turn in this many is the user's reply, not a tool's output
	agenticDecodeSec   = 0.02
	agenticHardware    = "h100:4"
	agenticSourceWords = "synthetic agent sessions: 4 system prompts (3,000 tokens) × 3 tool sets (2,500), 80 sessions of 10–40 turns, tool outputs log-normal around 400 tokens, answers 40–340 tokens, contexts up to 48,000 tokens"
)

// agentic is the agents' workload: long sessions whose context grows turn
// by turn with the agent's answers (tool calls, short replies) and what the
// tools return, where affinity decides the prefill: a turn that goes where
// its session is cached prefills its new tokens only, elsewhere the whole
// context. A turn arrives after the previous answer streamed (its length at
// agenticDecodeSec a token) and the tool ran (one to four seconds).
// RateScale scales the number of sessions, TimeScale the spans.
func agentic(o WorkloadOptions) *Workload {
	if o.RateScale <= 0 {
		o.RateScale = 1
	}
	if o.TimeScale <= 0 {
		o.TimeScale = 1
	}
	rng := rand.New(rand.NewPCG(uint64(o.Seed), 6))
	sys := make([]Segment, agenticSystems)
	for i := range sys {
		sys[i] = seg(rng, agenticSysTokens)
	}
	tools := make([]Segment, agenticToolSets)
	for i := range tools {
		tools[i] = seg(rng, agenticToolTokens)
	}
	w := &Workload{Name: "agentic", Hardware: agenticHardware, Source: agenticSourceWords,
		WarmUp: time.Duration(float64(20*time.Second) * o.TimeScale)}
	sessions := max(int(math.Round(agenticSessions*o.RateScale)), 1)
	for s := range sessions {
		at := time.Duration(rng.Float64() * float64(agenticStartSpan) * o.TimeScale)
		ctx := []Segment{sys[s%agenticSystems], tools[(s/agenticSystems)%agenticToolSets], seg(rng, 100+rng.IntN(301))}
		tokens := ctx[0].Tokens + ctx[1].Tokens + ctx[2].Tokens
		for range agenticMinTurns + rng.IntN(agenticSpanTurns) {
			if o.Duration > 0 && at > o.Duration {
				break
			}
			out := 40 + rng.IntN(301)
			r := NewRequest(0, at, DefaultModel, "", append([]Segment(nil), ctx...), agenticMaxTokens, out)
			r.Session = s
			r.outSeed = rng.Uint64() | 1
			w.Requests = append(w.Requests, r)
			next := seg(rng, 20+rng.IntN(181))
			if rng.IntN(agenticUserShare) != 0 {
				next.Tokens = min(max(int(agenticToolMedian*math.Exp(rng.NormFloat64())), 50), agenticToolMax)
			}
			ctx = append(ctx, Segment{Seed: r.outSeed, Tokens: r.output}, next)
			tokens += r.output + next.Tokens
			if tokens > agenticMaxContext {
				break
			}
			think := time.Duration((float64(r.output)*agenticDecodeSec + 1 + 3*rng.Float64()) * float64(time.Second))
			at += think
		}
	}
	if o.Limit > 0 && len(w.Requests) > o.Limit {
		w.finish()
		w.Requests = w.Requests[:o.Limit]
	}
	return w
}
