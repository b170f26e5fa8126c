package fleetsim

import (
	"errors"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"time"
)

// Workload is a generated or replayed request stream plus the fleet events
// (drains, crashes) it prescribes.
type Workload struct {
	Name     string
	Requests []*Request // sorted by Arrival; Request.ID is the index
	Actions  []Action
	Rolling  *RollingDrain
	// Hardware is the fleet spec the workload is meant for when the caller
	// gives none ("h100:4", "h100:2,a100:2,l4:2").
	Hardware string
	// Source cites where the workload's parameters come from.
	Source string
	// WarmUp is the time from the first arrival before which arrivals are
	// warm-up: the results' Steady figures cover the requests that arrive
	// later (0: the first fifth of the arrivals' span; see SteadyFrom).
	WarmUp time.Duration
}

// ActionKind is a scheduled fleet event.
type ActionKind uint8

// Scheduled fleet events.
const (
	ActionDrain ActionKind = iota + 1
	ActionCrash
	ActionRestart
)

// Action is a scheduled fleet event: at At, drain Replica with Deadline, or
// crash or restart it.
type Action struct {
	At       time.Duration
	Kind     ActionKind
	Replica  int
	Deadline time.Duration
}

// RollingDrain is a rolling deploy: from Start, replicas are drained one at
// a time (closed to new work, hard stop at Deadline), restarted after
// RestartDelay with empty caches, and the next one drains Gap later. Count
// limits how many replicas roll (0: all).
type RollingDrain struct {
	Start, Deadline, RestartDelay, Gap time.Duration
	Count                              int
}

// Prepare computes every request's KV block chain so runs may share the
// workload across goroutines. Run calls it.
func (w *Workload) Prepare() {
	for _, r := range w.Requests {
		r.Chain()
	}
}

// finish sorts requests by arrival and numbers them.
func (w *Workload) finish() *Workload {
	sort.SliceStable(w.Requests, func(i, j int) bool { return w.Requests[i].Arrival < w.Requests[j].Arrival })
	for i, r := range w.Requests {
		r.ID = i
	}
	return w
}

// WorkloadOptions tune the generators. Zero fields take each workload's
// defaults.
type WorkloadOptions struct {
	Seed int64
	// RateScale multiplies the arrival rates; TimeScale the stage durations.
	RateScale, TimeScale float64
	// Duration truncates arrivals after this time.
	Duration time.Duration
	// Limit caps the number of requests.
	Limit int
}

// Stage is a Poisson load stage: Rate requests per second for Duration.
type Stage struct {
	Rate     float64
	Duration time.Duration
}

// WorkloadNames lists the generators.
var WorkloadNames = []string{"shared-prefix", "multi-turn", "lora", "bimodal", "hetero", "drain", "few-prefixes", "priority", "fairness", "agentic", "two-models"}

// Generate builds the named workload.
func Generate(name string, o WorkloadOptions) (*Workload, error) {
	var w *Workload
	switch name {
	case "shared-prefix":
		w = sharedPrefix(o)
	case "multi-turn":
		w = multiTurn(o)
	case "lora":
		w = loraWorkload(o)
	case "bimodal":
		w = bimodal(o)
	case "hetero":
		w = sharedPrefix(o)
		w.Name, w.Hardware = "hetero", "h100:2,a100:2,l4:2"
		w.Source += "; mixed H100/A100/L4 fleet"
	case "drain":
		w = drainWorkload(o)
	case "few-prefixes":
		w = fewPrefixes(o)
	case "priority":
		w = priorityWorkload(o)
	case "fairness":
		w = fairnessWorkload(o)
	case "agentic":
		w = agentic(o)
	case "two-models":
		w = twoModels(o)
	default:
		return nil, errors.New("fleetsim: unknown workload " + quote(name) + " (have " + strings.Join(WorkloadNames, ", ") + ")")
	}
	return w.finish(), nil
}

// arrivals returns Poisson arrival times over stages (scaled), truncated.
func arrivals(rng *rand.Rand, stages []Stage, o WorkloadOptions) []time.Duration {
	rs, ts := o.RateScale, o.TimeScale
	if rs <= 0 {
		rs = 1
	}
	if ts <= 0 {
		ts = 1
	}
	var out []time.Duration
	t0 := 0.0
	for _, s := range stages {
		end := t0 + s.Duration.Seconds()*ts
		rate := s.Rate * rs
		t := t0
		for rate > 0 {
			t += rng.ExpFloat64() / rate
			if t >= end {
				break
			}
			at := time.Duration(t * 1e9)
			if o.Duration > 0 && at > o.Duration {
				return out
			}
			if o.Limit > 0 && len(out) >= o.Limit {
				return out
			}
			out = append(out, at)
		}
		t0 = end
	}
	return out
}

func seg(rng *rand.Rand, tokens int) Segment { return Segment{Seed: rng.Uint64() | 1, Tokens: tokens} }

func normalInt(rng *rand.Rand, mean, sd float64, lo, hi int) int {
	v := int(math.Round(mean + sd*rng.NormFloat64()))
	return min(max(v, lo), hi)
}

// giePrefixStages is the load ladder of the Gateway API Inference Extension
// prefix-cache-aware benchmarks (benchmarking/prefix-cache-aware/
// short-questions__many-system-prompts-values.yaml, commit 1748e829): a
// 15 QPS × 50 s warm-up, then 10→60 QPS.
var giePrefixStages = []Stage{
	{15, 50 * time.Second}, {10, 20 * time.Second}, {15, 20 * time.Second}, {20, 38 * time.Second},
	{25, 30 * time.Second}, {30, 25 * time.Second}, {35, 21 * time.Second}, {40, 38 * time.Second},
	{45, 36 * time.Second}, {50, 30 * time.Second}, {55, 27 * time.Second}, {60, 25 * time.Second},
}

// sharedPrefix is the GIE "short questions, many system prompts" preset
// (same file): 150 groups × 5 prompts, a 6,000-token system prompt per group,
// 1,200-token questions, 1,000 output tokens (ignore_eos). That preset drives
// 8 vLLM pods of Qwen3-32B on 2 H100s each; our replicas are single-GPU 8B
// profiles, so the defaults scale the ladder to RateScale 0.1 and TimeScale
// 0.25 (peak 6 QPS, 90 s) for a 4-replica fleet; raise them for bigger fleets.
func sharedPrefix(o WorkloadOptions) *Workload {
	if o.RateScale == 0 {
		o.RateScale = 0.15
	}
	if o.TimeScale == 0 {
		o.TimeScale = 0.5
	}
	const groups, perGroup, sysLen, qLen, outLen = 150, 5, 6000, 1200, 1000
	rng := rand.New(rand.NewPCG(uint64(o.Seed), 1))
	sys := make([]Segment, groups)
	qs := make([]Segment, groups*perGroup)
	for g := range sys {
		sys[g] = seg(rng, sysLen)
	}
	for i := range qs {
		qs[i] = seg(rng, qLen)
	}
	w := &Workload{Name: "shared-prefix", Hardware: "h100:4",
		Source: "gateway-api-inference-extension benchmarking/prefix-cache-aware/short-questions__many-system-prompts-values.yaml @1748e829 (groups 150 × 5, system 6000, question 1200, output 1000)"}
	// The preset's first stage is its warm-up.
	w.WarmUp = time.Duration(float64(giePrefixStages[0].Duration) * o.TimeScale)
	for _, at := range arrivals(rng, giePrefixStages, o) {
		p := rng.IntN(groups * perGroup)
		g := p / perGroup
		r := NewRequest(0, at, DefaultModel, "", []Segment{sys[g], qs[p]}, outLen, outLen)
		r.Session = g
		w.Requests = append(w.Requests, r)
	}
	return w
}

// multiTurn is the GIE "short questions, few system prompts, multi-chat"
// preset (short-questions__few-system-prompts__multi-chat-values.yaml):
// 6 system prompts of 1,000 tokens, conversations whose turns append a
// question (mean 30 tokens, sd 9) and the previous answer (output mean
// 1,000, sd 300), so prompts grow turn by turn. Conversations reset at 16k
// tokens. Defaults: 60 conversations, 1 request/s for 120 s (the preset
// ladders 1→10 QPS over 6,000 conversations).
func multiTurn(o WorkloadOptions) *Workload {
	if o.RateScale == 0 {
		o.RateScale = 1
	}
	if o.TimeScale == 0 {
		o.TimeScale = 1
	}
	const systems, convs, sysLen, maxPrompt = 6, 60, 1000, 16000
	rng := rand.New(rand.NewPCG(uint64(o.Seed), 2))
	sys := make([]Segment, systems)
	for i := range sys {
		sys[i] = seg(rng, sysLen)
	}
	hist := make([][]Segment, convs)
	for c := range hist {
		hist[c] = []Segment{sys[c%systems]}
	}
	w := &Workload{Name: "multi-turn", Hardware: "h100:4",
		Source: "gateway-api-inference-extension benchmarking/prefix-cache-aware/short-questions__few-system-prompts__multi-chat-values.yaml @1748e829"}
	for _, at := range arrivals(rng, []Stage{{4, 120 * time.Second}}, o) {
		c := rng.IntN(convs)
		q := seg(rng, normalInt(rng, 30, 9, 1, 10000))
		segs := append(append([]Segment(nil), hist[c]...), q)
		out := normalInt(rng, 1000, 300, 1, 10000)
		r := NewRequest(0, at, DefaultModel, "", segs, 2048, out)
		r.Session = c
		r.outSeed = rng.Uint64() | 1
		w.Requests = append(w.Requests, r)
		hist[c] = append(segs, Segment{Seed: r.outSeed, Tokens: r.output})
		if r.PromptTokens+r.output > maxPrompt {
			hist[c] = []Segment{sys[c%systems]}
		}
	}
	return w
}

// loraWorkload is many tenants on LoRA adapters: 32 adapters chosen by a
// Zipf law (s = 1.1), more than the fleet's GPU slots (4 per replica) and
// host slots (8), each tenant with its own 400-token system prompt; inputs
// up to 2,048 and outputs up to 128 tokens as in GIE's multi-LoRA preset
// (benchmarking/multilora-values.yaml, whose 15-adapter split 12/6/2 % this
// generalizes to a long tail). Default 8 requests/s for 120 s.
func loraWorkload(o WorkloadOptions) *Workload {
	if o.RateScale == 0 {
		o.RateScale = 1
	}
	if o.TimeScale == 0 {
		o.TimeScale = 1
	}
	const adapters = 32
	rng := rand.New(rand.NewPCG(uint64(o.Seed), 3))
	z := zipfCDF(adapters, 1.1)
	sys := make([]Segment, adapters)
	names := make([]string, adapters)
	for i := range sys {
		sys[i] = seg(rng, 400)
		names[i] = "tenant-" + itoa(i)
	}
	w := &Workload{Name: "lora", Hardware: "h100:4",
		Source: "gateway-api-inference-extension benchmarking/multilora-values.yaml @1748e829 (input ≤ 2048, output ≤ 128); Zipf(1.1) over 32 adapters"}
	for _, at := range arrivals(rng, []Stage{{8, 120 * time.Second}}, o) {
		a := sort.SearchFloat64s(z, rng.Float64())
		in := 100 + rng.IntN(1549)
		out := 16 + rng.IntN(113)
		r := NewRequest(0, at, DefaultModel, names[a], []Segment{sys[a], seg(rng, in)}, 128, out)
		r.Session = a
		w.Requests = append(w.Requests, r)
	}
	return w
}

func zipfCDF(n int, s float64) []float64 {
	c := make([]float64, n)
	t := 0.0
	for i := range c {
		t += 1 / math.Pow(float64(i+1), s)
		c[i] = t
	}
	for i := range c {
		c[i] /= t
	}
	return c
}

// bimodal mixes 20-token and 20,000-token outputs (90/10) behind the same
// max_tokens (20,000), on 1,000-token unique prompts: request counts say
// nothing about the work a replica holds, and the long ones fill KV caches.
// Default 12 requests/s for 90 s.
func bimodal(o WorkloadOptions) *Workload {
	if o.RateScale == 0 {
		o.RateScale = 1
	}
	if o.TimeScale == 0 {
		o.TimeScale = 1
	}
	rng := rand.New(rand.NewPCG(uint64(o.Seed), 4))
	w := &Workload{Name: "bimodal", Hardware: "h100:4", Source: "synthetic: 90% 20-token, 10% 20,000-token outputs"}
	for _, at := range arrivals(rng, []Stage{{12, 90 * time.Second}}, o) {
		out := 20
		if rng.Float64() < 0.1 {
			out = 20000
		}
		r := NewRequest(0, at, DefaultModel, "", []Segment{seg(rng, 1000)}, 20000, out)
		w.Requests = append(w.Requests, r)
	}
	return w
}

// drainWorkload is a rolling deploy under chat load: the multi-turn
// workload at 3 requests/s for 150 s on 4 replicas, replicas drained one by
// one from t = 20 s with a 20 s deadline, restarted 5 s after they stop,
// the next drain 5 s later.
func drainWorkload(o WorkloadOptions) *Workload {
	if o.RateScale == 0 {
		o.RateScale = 0.75
	}
	if o.TimeScale == 0 {
		o.TimeScale = 1.25
	}
	w := multiTurn(o)
	w.Name = "drain"
	w.Source += "; rolling drain, 20 s deadline"
	w.Rolling = &RollingDrain{Start: 20 * time.Second, Deadline: 20 * time.Second, RestartDelay: 5 * time.Second, Gap: 5 * time.Second}
	return w
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b [20]byte
	n := len(b)
	for i > 0 {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
	}
	return string(b[n:])
}
