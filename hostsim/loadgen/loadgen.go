// Package loadgen drives any OpenAI-compatible endpoint with a fleet
// simulator workload (hostsim/fleetsim: a generated workload or a trace)
// as real streamed HTTP requests, open loop and seeded, and measures what
// the client sees: time to first token and to the last, per request, with
// the figures past the workload's warm-up apart, the share of prompt tokens
// the replicas served from their prefix caches, and which replica answered
// each request.
//
//	w, _ := fleetsim.Generate("few-prefixes", fleetsim.WorkloadOptions{Seed: 1})
//	rep, _ := loadgen.Run(ctx, w, loadgen.Options{URL: "http://127.0.0.1:8080", Label: "gpuroute"})
//	loadgen.WriteTable(os.Stdout, []*loadgen.Report{rep}, "")
//
// Chat requests carry a prompt's first segment (a workload's shared system
// prompt) as the system message and the rest as the user message; the text
// is the simulator's, so requests that share a prefix in the simulator share
// it on the wire.
package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuroute/gpuroute/hostsim/fleetsim"
)

// Wire names the generator sends or reads.
const (
	APIChat        = "chat"
	APICompletions = "completions"
	pathChat       = "/v1/chat/completions"
	pathCompletion = "/v1/completions"
	// HeaderReplica and HeaderCachedTokens are what the simulated replicas
	// (hostsim/gateway) add to their answers; HeaderDecision is gpuroute's
	// opt-in explanation ("chosen=ip:port reason=...").
	HeaderReplica      = "x-gpuroute-sim-replica"
	HeaderCachedTokens = "x-gpuroute-sim-cached-tokens"
	HeaderDecision     = "x-gpuroute-decision"
	metricQueries      = "vllm:prefix_cache_queries_total"
	metricHits         = "vllm:prefix_cache_hits_total"
)

// Options configure a run. Zero fields take the defaults given.
type Options struct {
	// URL is the endpoint's base ("http://127.0.0.1:8080").
	URL string
	// Label names the run in tables (default: URL).
	Label string
	// API is APIChat (default) or APICompletions.
	API string
	// Model, if set, replaces every request's "model" field.
	Model string
	// TimeScale is wall seconds per modelled second (default 1): arrivals
	// are sent TimeScale apart and latencies reported divided by it, for
	// replicas that run their model TimeScale times faster
	// (gpuroute-replica --time-scale).
	TimeScale float64
	// Duration stops sending once this much wall time has passed (0: no
	// bound); MaxRequests after that many requests (0: all).
	Duration    time.Duration
	MaxRequests int
	// Timeout bounds one request (default 10 minutes).
	Timeout time.Duration
	// WorkloadMaxTokens sends the workload's max_tokens and the request's
	// true output length as min_tokens (vLLM's sampling parameter; the
	// answer ends there), so a router sees only the client's bound.
	// Without it max_tokens is the true output length with ignore_eos, as
	// trace replays and GIE's benchmarks pin it.
	WorkloadMaxTokens bool
	// MetricsURLs are the replicas' /metrics pages: their prefix-cache
	// counters before and after the run give Report.MetricsHitRate.
	MetricsURLs []string
	// Client sends the requests (default: a client without a total
	// timeout and enough idle connections for the run's concurrency).
	Client *http.Client
}

// Outcome is one request as the client saw it. Latencies are in modelled
// time (wall time divided by Options.TimeScale).
type Outcome struct {
	ID           int
	Arrival      time.Duration
	Status       int
	Err          string
	TTFT, E2E    time.Duration
	Replica      string
	PromptTokens int
	CachedTokens int // -1: the answer did not say
	Chunks       int
}

// Figures summarize a set of outcomes; JSON names follow the simulator's
// results (fleetsim.Summary).
type Figures struct {
	Requests    int     `json:"requests"`
	Completed   int     `json:"completed"`
	Failed      int     `json:"failed"`
	TTFTMeanSec float64 `json:"ttft_mean_s"`
	TTFTP50Sec  float64 `json:"ttft_p50_s"`
	TTFTP90Sec  float64 `json:"ttft_p90_s"`
	TTFTP99Sec  float64 `json:"ttft_p99_s"`
	E2EP50Sec   float64 `json:"e2e_p50_s"`
	E2EP99Sec   float64 `json:"e2e_p99_s"`
	// WarmShare is the completed requests' cached prompt tokens over their
	// prompt tokens, from the answers (usage.prompt_tokens_details.
	// cached_tokens or the simulated replicas' header); -1 when no answer
	// said.
	WarmShare float64 `json:"warm_share"`
}

// Report is one run's figures.
type Report struct {
	Label    string  `json:"label"`
	URL      string  `json:"url"`
	Workload string  `json:"workload"`
	Seed     int64   `json:"seed"`
	Scale    float64 `json:"time_scale"`
	Figures
	// Steady covers the requests that arrived after the workload's
	// warm-up (fleetsim.Workload.SteadyFrom), the simulator's cut.
	Steady Figures `json:"steady"`
	// MetricsHitRate is the replicas' prefix-cache hits over queries
	// during the run, from their metrics (-1: none read).
	MetricsHitRate float64 `json:"metrics_hit_rate"`
	// Placement counts completed requests per answering replica (the
	// simulated replicas' header, else gpuroute's decision header, else
	// "unknown").
	Placement map[string]int `json:"placement"`
	WallSec   float64        `json:"wall_s"`
	// SteadyFromSec is the arrival time (modelled) where Steady starts.
	SteadyFromSec float64   `json:"steady_from_s"`
	Outcomes      []Outcome `json:"-"`
}

// Run sends w's requests to o.URL on w's schedule and returns what came
// back. seed is reported (the workload is already generated from it).
func Run(ctx context.Context, w *fleetsim.Workload, seed int64, o Options) (*Report, error) {
	if o.URL == "" {
		return nil, errors.New("loadgen: no URL")
	}
	o.URL = strings.TrimRight(o.URL, "/")
	if o.Label == "" {
		o.Label = o.URL
	}
	if o.API == "" {
		o.API = APIChat
	}
	if o.API != APIChat && o.API != APICompletions {
		return nil, errors.New("loadgen: api must be " + APIChat + " or " + APICompletions + ", got " + strconv.Quote(o.API))
	}
	if o.TimeScale <= 0 {
		o.TimeScale = 1
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.Client == nil {
		o.Client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, MaxConnsPerHost: 0}}
	}
	reqs := w.Requests
	if o.MaxRequests > 0 && len(reqs) > o.MaxRequests {
		reqs = reqs[:o.MaxRequests]
	}
	before, haveMetrics := scrapeAll(ctx, o.Client, o.MetricsURLs)
	out := make([]Outcome, len(reqs))
	start := time.Now()
	var wg sync.WaitGroup
	sent := 0
	for i, r := range reqs {
		at := time.Duration(float64(r.Arrival) * o.TimeScale)
		if o.Duration > 0 && at > o.Duration {
			break
		}
		if d := time.Until(start.Add(at)); d > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(d):
			}
		}
		sent++
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = send(ctx, r, &o)
		}()
	}
	wg.Wait()
	out = out[:sent]
	rep := &Report{Label: o.Label, URL: o.URL, Workload: w.Name, Seed: seed, Scale: o.TimeScale,
		MetricsHitRate: -1, Placement: map[string]int{}, WallSec: time.Since(start).Seconds(), Outcomes: out}
	after, _ := scrapeAll(ctx, o.Client, o.MetricsURLs)
	if haveMetrics && after[0] > before[0] {
		rep.MetricsHitRate = (after[1] - before[1]) / (after[0] - before[0])
	}
	rep.SteadyFromSec = w.SteadyFrom().Seconds()
	for _, x := range out {
		if x.Err == "" {
			rep.Placement[x.Replica]++
		}
	}
	rep.Figures = summarize(out)
	rep.Steady = summarize(rep.steadyOutcomes())
	return rep, nil
}

// send runs one request and times it.
func send(ctx context.Context, r *fleetsim.Request, o *Options) Outcome {
	oc := Outcome{ID: r.ID, Arrival: r.Arrival, PromptTokens: r.PromptTokens, CachedTokens: -1}
	body, path := requestBody(r, o)
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, o.URL+path, bytes.NewReader(body))
	if err != nil {
		oc.Err = err.Error()
		return oc
	}
	hreq.Header.Set("Content-Type", "application/json")
	t0 := time.Now()
	resp, err := o.Client.Do(hreq)
	if err != nil {
		oc.Err = err.Error()
		return oc
	}
	defer resp.Body.Close()
	oc.Status = resp.StatusCode
	oc.Replica = replicaOf(resp.Header)
	if v := resp.Header.Get(HeaderCachedTokens); v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			oc.CachedTokens = n
		}
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		oc.Err = "status " + strconv.Itoa(resp.StatusCode) + ": " + strings.TrimSpace(string(msg))
		return oc
	}
	scale := func(d time.Duration) time.Duration { return time.Duration(float64(d) / o.TimeScale) }
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	done := false
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			data, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data:"))
			data = bytes.TrimSpace(data)
			switch {
			case !ok || len(data) == 0:
			case bytes.Equal(data, []byte("[DONE]")):
				done = true
			default:
				if oc.Chunks == 0 && bytes.Contains(data, []byte(`"choices":[{`)) {
					oc.TTFT = scale(time.Since(t0))
				}
				if bytes.Contains(data, []byte(`"choices":[{`)) {
					oc.Chunks++
				}
				if bytes.Contains(data, []byte(`"cached_tokens"`)) {
					oc.CachedTokens = cachedFromUsage(data, oc.CachedTokens)
				}
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil || done {
			if err != nil && err != io.EOF {
				oc.Err = err.Error()
				return oc
			}
			break
		}
	}
	if !done || oc.Chunks == 0 {
		oc.Err = "stream ended without [DONE] or without a token"
		return oc
	}
	oc.E2E = scale(time.Since(t0))
	return oc
}

// requestBody renders r as a streamed chat or completion request.
func requestBody(r *fleetsim.Request, o *Options) ([]byte, string) {
	model := r.TargetModel()
	if o.Model != "" {
		model = o.Model
	}
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	type body struct {
		Model         string          `json:"model"`
		Messages      []message       `json:"messages,omitempty"`
		Prompt        string          `json:"prompt,omitempty"`
		Stream        bool            `json:"stream"`
		StreamOptions map[string]bool `json:"stream_options"`
		MaxTokens     int             `json:"max_tokens"`
		MinTokens     int             `json:"min_tokens,omitempty"`
		IgnoreEOS     bool            `json:"ignore_eos,omitempty"`
	}
	b := body{Model: model, Stream: true, StreamOptions: map[string]bool{"include_usage": true}}
	if o.WorkloadMaxTokens && r.MaxTokens > 0 {
		b.MaxTokens, b.MinTokens = r.MaxTokens, r.OutputTokens()
	} else {
		b.MaxTokens, b.IgnoreEOS = r.OutputTokens(), true
	}
	segs := r.Segments()
	path := pathChat
	switch {
	case o.API == APICompletions:
		b.Prompt, path = string(r.AppendPrompt(nil)), pathCompletion
	case len(segs) > 1:
		b.Messages = []message{{"system", string(segs[0].AppendText(nil))}, {"user", string(appendSegments(nil, segs[1:]))}}
	default:
		b.Messages = []message{{"user", string(appendSegments(nil, segs))}}
	}
	out, _ := json.Marshal(b) // plain strings and ints: cannot fail
	return out, path
}

func appendSegments(dst []byte, segs []fleetsim.Segment) []byte {
	for _, s := range segs {
		dst = s.AppendText(dst)
	}
	return dst
}

// replicaOf names the replica that answered from the response headers.
func replicaOf(h http.Header) string {
	if v := h.Get(HeaderReplica); v != "" {
		return v
	}
	if v := h.Get(HeaderDecision); strings.HasPrefix(v, "chosen=") {
		v = v[len("chosen="):]
		if i := strings.IndexByte(v, ' '); i >= 0 {
			v = v[:i]
		}
		return v
	}
	return "unknown"
}

// cachedFromUsage reads usage.prompt_tokens_details.cached_tokens from a
// chunk, keeping old when absent.
func cachedFromUsage(data []byte, old int) int {
	var c struct {
		Usage *struct {
			Details *struct {
				Cached *int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if json.Unmarshal(data, &c) != nil || c.Usage == nil || c.Usage.Details == nil || c.Usage.Details.Cached == nil {
		return old
	}
	return *c.Usage.Details.Cached
}

// summarize derives Figures from outcomes.
func summarize(out []Outcome) Figures {
	f := Figures{Requests: len(out), WarmShare: -1}
	var ttft, e2e []float64
	var prompt, cached int64
	for _, x := range out {
		if x.Err != "" {
			f.Failed++
			continue
		}
		f.Completed++
		ttft = append(ttft, x.TTFT.Seconds())
		e2e = append(e2e, x.E2E.Seconds())
		if x.CachedTokens >= 0 {
			prompt += int64(x.PromptTokens)
			cached += int64(x.CachedTokens)
		}
	}
	sort.Float64s(ttft)
	sort.Float64s(e2e)
	for _, v := range ttft {
		f.TTFTMeanSec += v / float64(len(ttft))
	}
	f.TTFTP50Sec, f.TTFTP90Sec, f.TTFTP99Sec = quantile(ttft, 0.5), quantile(ttft, 0.9), quantile(ttft, 0.99)
	f.E2EP50Sec, f.E2EP99Sec = quantile(e2e, 0.5), quantile(e2e, 0.99)
	if prompt > 0 {
		f.WarmShare = float64(cached) / float64(prompt)
	}
	return f
}

// quantile returns the q-quantile of sorted x (nearest rank), 0 if empty:
// the simulator's definition.
func quantile(x []float64, q float64) float64 {
	if len(x) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(x)))) - 1
	return x[min(max(i, 0), len(x)-1)]
}

// steadyOutcomes returns the outcomes past the warm-up.
func (r *Report) steadyOutcomes() []Outcome {
	var out []Outcome
	for _, x := range r.Outcomes {
		if x.Arrival.Seconds() >= r.SteadyFromSec {
			out = append(out, x)
		}
	}
	return out
}

// Pool merges runs of one target (seeds or repeats) into one report, as
// if their requests had been one run: latencies pooled, placements summed,
// the metrics hit rate averaged.
func Pool(runs []*Report) *Report {
	if len(runs) == 1 {
		return runs[0]
	}
	out := &Report{Label: runs[0].Label, URL: runs[0].URL, Workload: runs[0].Workload, Seed: runs[0].Seed,
		Scale: runs[0].Scale, MetricsHitRate: -1, Placement: map[string]int{}, SteadyFromSec: -1}
	var steady []Outcome
	hit := 0.0
	for _, r := range runs {
		out.Outcomes = append(out.Outcomes, r.Outcomes...)
		steady = append(steady, r.steadyOutcomes()...)
		for k, v := range r.Placement {
			out.Placement[k] += v
		}
		out.WallSec += r.WallSec
		hit += r.MetricsHitRate
	}
	out.Figures = summarize(out.Outcomes)
	out.Steady = summarize(steady)
	if runs[0].MetricsHitRate >= 0 {
		out.MetricsHitRate = hit / float64(len(runs))
	}
	return out
}
