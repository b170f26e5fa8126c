package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"hash/maphash"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuroute/gpuroute/scoring"
)

// Wire names the simulated replica serves or reads.
const (
	// PathChatCompletions and PathCompletions are the OpenAI endpoints
	// (vLLM's OpenAI-compatible server serves both).
	PathChatCompletions = "/v1/chat/completions"
	PathCompletions     = "/v1/completions"
	// PathMetrics is where vLLM serves its Prometheus metrics.
	PathMetrics = "/metrics"
	// HeaderDestination is the Gateway API Inference Extension header the
	// plugin writes and an ORIGINAL_DST cluster reads.
	HeaderDestination = "x-gateway-destination-endpoint"
	// HeaderReplica names the simulated replica that answered (a test aid,
	// no real server sends it).
	HeaderReplica = "x-gpuroute-sim-replica"
	// HeaderCachedTokens is how many prompt tokens the simulated replica
	// served from its prefix cache.
	HeaderCachedTokens = "x-gpuroute-sim-cached-tokens"
)

// vLLM V1 metric names (vllm-project/vllm docs/design/metrics.md), as the
// plugin's metrics package reads them.
const (
	metricRunning       = "vllm:num_requests_running"
	metricWaiting       = "vllm:num_requests_waiting"
	metricKVUsage       = "vllm:kv_cache_usage_perc"
	metricCacheConfig   = "vllm:cache_config_info"
	metricLoRAInfo      = "vllm:lora_requests_info"
	metricPrefixQueries = "vllm:prefix_cache_queries_total"
	metricPrefixHits    = "vllm:prefix_cache_hits_total"
	metricPromptTokens  = "vllm:prompt_tokens_total"
	metricGenTokens     = "vllm:generation_tokens_total"
)

// Replica model constants. vLLM's KV block is 16 tokens and the plugin's
// prefix blocks are 64 characters (about 4 characters per token,
// DESIGN.md §2); the replica counts its cache in the same units.
const (
	charsPerToken    = 4
	blockTokens      = 16
	blockChars       = blockTokens * charsPerToken
	defaultMaxTokens = 16
	maxOutputTokens  = 1 << 16 // vLLM refuses max_tokens beyond the context too
	defaultMaxLoras  = 4
	defaultHostLoras = 8
)

// ReplicaOptions configures a simulated replica. The zero value is an H100
// serving scoring's default 8B model in real time.
type ReplicaOptions struct {
	// Name identifies the replica in HeaderReplica and in Requests.
	Name string
	// Hardware is the cost profile (prefill, decode step, adapter loads,
	// KV capacity); zero means scoring.DefaultHardware().
	Hardware scoring.Hardware
	// TimeScale multiplies every modelled duration, so tests run a fleet
	// faster than real GPUs (0.05: twenty times faster); 0 means 1.
	TimeScale float64
	// Model is the base model, listed first by /v1/models. Empty means
	// "meta-llama/Llama-3.1-8B-Instruct".
	Model string
	// Adapters are the LoRA adapters the replica serves (vLLM's
	// --lora-modules). A request whose model names one pays the adapter's
	// load; any other model name is served by the base model, as the
	// plugin reads names (an adapter only when its "adapters" lists it).
	Adapters []string
	// KVCapacityTokens bounds the prefix cache; 0 means Hardware's.
	KVCapacityTokens int
	// MaxLoras is the number of adapters resident on the GPU (vLLM
	// max_loras); 0 means 4.
	MaxLoras int
}

// ReplicaRequest is what a simulated replica recorded about one request.
type ReplicaRequest struct {
	Path string
	// Destination holds every HeaderDestination value the request
	// arrived with: exactly one, the replica's own address, when the
	// gateway routed it.
	Destination  []string
	Model        string
	Adapter      string // the LoRA adapter served, "" for the base model
	Stream       bool
	PromptTokens int
	CachedTokens int
	OutputTokens int
	TTFT         time.Duration
	// Completed is false if the client (or the gateway) went away first.
	Completed bool
}

// Replica is a simulated OpenAI-compatible model server (an http.Handler):
// /v1/chat/completions and /v1/completions (SSE when "stream" is true),
// /metrics in vLLM's format. Time to first token follows the fleet
// simulator's model (hostsim/fleetsim): prefills run one at a time, a cached
// prompt prefix is not prefilled again, an adapter not resident costs a
// host-memory or storage load; tokens then stream one decode step apart,
// the step growing with the running batch. Safe for concurrent use.
type Replica struct {
	opts    ReplicaOptions
	hw      scoring.Hardware
	scale   float64
	prefill chan struct{} // one prefill at a time, FIFO among waiters
	seed    maphash.Seed
	created time.Time // when it started: the models' "created"

	mu            sync.Mutex
	waiting       int
	running       int
	kvUsedTokens  int
	cache         *lru // prompt block chain hashes
	gpuLoras      *lru // adapter name hashes resident on the GPU
	hostLoras     *lru // adapters kept in host memory
	adapterNames  map[uint64]string
	runningByLoRA map[string]int
	prefixQueries int64
	prefixHits    int64
	promptTokens  int64
	genTokens     int64
	requests      []ReplicaRequest
}

var _ http.Handler = (*Replica)(nil)

// NewReplica returns a simulated replica with defaults filled in.
func NewReplica(opts ReplicaOptions) *Replica {
	if opts.Hardware.Name == "" {
		opts.Hardware = scoring.DefaultHardware()
	}
	if opts.TimeScale <= 0 {
		opts.TimeScale = 1
	}
	if opts.Model == "" {
		opts.Model = "meta-llama/Llama-3.1-8B-Instruct"
	}
	if opts.KVCapacityTokens <= 0 {
		opts.KVCapacityTokens = max(opts.Hardware.KVCapacityTokens, blockTokens)
	}
	if opts.MaxLoras == 0 {
		opts.MaxLoras = defaultMaxLoras
	}
	return &Replica{
		opts:          opts,
		hw:            opts.Hardware,
		scale:         opts.TimeScale,
		prefill:       make(chan struct{}, 1),
		seed:          maphash.MakeSeed(),
		created:       time.Now(),
		cache:         newLRU(opts.KVCapacityTokens / blockTokens),
		gpuLoras:      newLRU(max(opts.MaxLoras, 0)),
		hostLoras:     newLRU(defaultHostLoras),
		adapterNames:  map[uint64]string{},
		runningByLoRA: map[string]int{},
	}
}

// Name returns the replica's name.
func (r *Replica) Name() string { return r.opts.Name }

// Requests returns a copy of what the replica recorded, oldest first
// (a request is recorded when it ends).
func (r *Replica) Requests() []ReplicaRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ReplicaRequest(nil), r.requests...)
}

// ServeHTTP answers the OpenAI endpoints, /metrics and the engines'
// informational endpoints (engineapi.go).
func (r *Replica) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method == http.MethodGet && r.serveEngineAPI(w, req) {
		return
	}
	switch req.URL.Path {
	case PathMetrics:
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write(r.MetricsText(nil))
	case PathChatCompletions, PathCompletions:
		if req.Method != http.MethodPost {
			openAIError(w, http.StatusMethodNotAllowed, "replica: "+req.URL.Path+" takes POST, got "+req.Method)
			return
		}
		r.serveCompletion(w, req)
	default:
		openAIError(w, http.StatusNotFound, "replica: no route for "+strconv.Quote(req.URL.Path))
	}
}

// completionRequest is the part of an OpenAI request the replica reads.
type completionRequest struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	Stream              bool            `json:"stream"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// promptText flattens the prompt the way the plugin reads it: the
// completion prompt, or each chat message's role and content parts in order.
func (c *completionRequest) promptText(chat bool) (string, error) {
	var b strings.Builder
	if !chat {
		var s string
		if err := json.Unmarshal(c.Prompt, &s); err == nil {
			return s, nil
		}
		var ss []string
		if err := json.Unmarshal(c.Prompt, &ss); err != nil {
			return "", errors.New("replica: prompt must be a string or a list of strings, got " + strconv.Quote(string(c.Prompt)))
		}
		return strings.Join(ss, ""), nil
	}
	if len(c.Messages) == 0 {
		return "", errors.New("replica: messages must not be empty")
	}
	for _, m := range c.Messages {
		b.WriteString(m.Role)
		b.WriteString(": ")
		var s string
		if err := json.Unmarshal(m.Content, &s); err == nil {
			b.WriteString(s)
		} else {
			var parts []struct {
				Text string `json:"text"`
			}
			if err := json.Unmarshal(m.Content, &parts); err != nil {
				return "", errors.New("replica: message content must be a string or a list of parts, got " + strconv.Quote(string(m.Content)))
			}
			for _, p := range parts {
				b.WriteString(p.Text)
			}
		}
		b.WriteString("\n")
	}
	return b.String(), nil
}

func (r *Replica) serveCompletion(w http.ResponseWriter, req *http.Request) {
	chat := req.URL.Path == PathChatCompletions
	body, err := io.ReadAll(io.LimitReader(req.Body, 8<<20))
	if err != nil {
		openAIError(w, http.StatusBadRequest, "replica: read body: "+err.Error())
		return
	}
	var c completionRequest
	if err := json.Unmarshal(body, &c); err != nil {
		openAIError(w, http.StatusBadRequest, "replica: body is not JSON: "+err.Error())
		return
	}
	prompt, err := c.promptText(chat)
	if err != nil {
		openAIError(w, http.StatusBadRequest, err.Error())
		return
	}
	maxTokens := defaultMaxTokens
	for _, p := range []*int{c.MaxTokens, c.MaxCompletionTokens} {
		if p != nil {
			if *p < 1 || *p > maxOutputTokens {
				openAIError(w, http.StatusBadRequest, "replica: max_tokens must be in [1, "+strconv.Itoa(maxOutputTokens)+"], got "+strconv.Itoa(*p))
				return
			}
			maxTokens = *p
		}
	}
	if c.Model == "" {
		c.Model = r.opts.Model
	}
	adapter := ""
	if slices.Contains(r.opts.Adapters, c.Model) {
		adapter = c.Model
	}
	rec := ReplicaRequest{Path: req.URL.Path, Destination: req.Header.Values(HeaderDestination),
		Model: c.Model, Adapter: adapter, Stream: c.Stream, PromptTokens: max((len(prompt)+charsPerToken-1)/charsPerToken, 1)}
	start := time.Now()
	defer func() { r.record(rec) }()

	chain := r.chain(c.Model, prompt)
	ctx := req.Context()
	cached, ok := r.runPrefill(ctx, rec.PromptTokens, chain, adapter)
	if !ok {
		return
	}
	defer r.finish(rec.PromptTokens, adapter)
	rec.CachedTokens = cached
	rec.TTFT = time.Since(start)

	id := "cmpl-" + strconv.FormatUint(maphash.String(r.seed, prompt+start.String()), 36)
	w.Header().Set(HeaderReplica, r.opts.Name)
	w.Header().Set(HeaderCachedTokens, strconv.Itoa(cached))
	out := responseWriter{w: w, chat: chat, id: id, model: c.Model, created: start.Unix()}
	if c.Stream {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
	}
	var text strings.Builder
	for i := 0; i < maxTokens; i++ {
		if i > 0 && !r.sleep(ctx, r.decodeStep()) {
			return
		}
		tok := TokenText(i)
		r.mu.Lock()
		r.genTokens++
		r.mu.Unlock()
		rec.OutputTokens++
		if c.Stream {
			if out.chunk(tok, i == 0, "") != nil {
				return
			}
		} else {
			text.WriteString(tok)
		}
	}
	usage := usageJSON(rec.PromptTokens, maxTokens, cached)
	if c.Stream {
		if out.chunk("", false, "length") != nil {
			return
		}
		if c.StreamOptions != nil && c.StreamOptions.IncludeUsage {
			if out.usage(usage) != nil {
				return
			}
		}
		if out.done() != nil {
			return
		}
	} else if out.whole(text.String(), "length", usage) != nil {
		return
	}
	rec.Completed = true
}

// TokenText is the text of the i-th generated token: numbered, so a client
// can check that a stream arrived complete and in order.
func TokenText(i int) string { return "t" + strconv.Itoa(i) + " " }

// runPrefill waits for the engine, then sleeps the adapter load and the
// prefill of the uncached tokens; it returns the cached tokens, or false if
// ctx ended first.
func (r *Replica) runPrefill(ctx context.Context, promptTokens int, chain []uint64, adapter string) (int, bool) {
	r.mu.Lock()
	r.waiting++
	r.mu.Unlock()
	select {
	case r.prefill <- struct{}{}:
	case <-ctx.Done():
		r.mu.Lock()
		r.waiting--
		r.mu.Unlock()
		return 0, false
	}
	defer func() { <-r.prefill }()
	r.mu.Lock()
	r.waiting--
	r.running++
	r.kvUsedTokens += promptTokens
	if adapter != "" {
		r.runningByLoRA[adapter]++
	}
	hit := 0
	for _, h := range chain {
		if !r.cache.touch(h) {
			break
		}
		hit++
	}
	cached := min(hit*blockTokens, promptTokens-1)
	r.prefixQueries += int64(promptTokens)
	r.prefixHits += int64(cached)
	r.promptTokens += int64(promptTokens)
	load := r.adapterLoadLocked(adapter)
	for _, h := range chain[hit:] {
		r.cache.add(h)
	}
	r.mu.Unlock()
	d := load + r.hw.PrefillSeconds(promptTokens-cached)
	if !r.sleep(ctx, d) {
		r.finish(promptTokens, adapter)
		return 0, false
	}
	return cached, true
}

// adapterLoadLocked makes adapter resident and returns the load seconds:
// 0 if resident, the host-memory load if recently evicted, else storage.
func (r *Replica) adapterLoadLocked(adapter string) float64 {
	if adapter == "" {
		return 0
	}
	h := maphash.String(r.seed, adapter)
	r.adapterNames[h] = adapter
	if r.gpuLoras.touch(h) {
		return 0
	}
	sec := r.hw.AdapterLoadStorageSec
	if r.hostLoras.touch(h) {
		sec = r.hw.AdapterLoadHostSec
	}
	r.hostLoras.add(h)
	r.gpuLoras.add(h)
	return sec
}

func (r *Replica) finish(promptTokens int, adapter string) {
	r.mu.Lock()
	r.running--
	r.kvUsedTokens -= promptTokens
	if adapter != "" {
		if r.runningByLoRA[adapter]--; r.runningByLoRA[adapter] <= 0 {
			delete(r.runningByLoRA, adapter)
		}
	}
	r.mu.Unlock()
}

func (r *Replica) engineState() engineState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return engineState{waiting: r.waiting, running: r.running, kvUsedTokens: r.kvUsedTokens,
		kvCapacityTokens: r.cache.cap * blockTokens}
}

func (r *Replica) record(rec ReplicaRequest) {
	r.mu.Lock()
	r.requests = append(r.requests, rec)
	r.mu.Unlock()
}

func (r *Replica) decodeStep() float64 {
	r.mu.Lock()
	n := r.running
	r.mu.Unlock()
	return r.hw.DecodeStepSeconds(n)
}

// sleep waits sec modelled seconds (scaled); false if ctx ended first.
func (r *Replica) sleep(ctx context.Context, sec float64) bool {
	d := time.Duration(sec * r.scale * float64(time.Second))
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// chain hashes the prompt's full blocks as a chain seeded with the model,
// so block i stands for blocks 0..i (vLLM's prefix-cache block hash).
func (r *Replica) chain(model, prompt string) []uint64 {
	n := len(prompt) / blockChars
	out := make([]uint64, n)
	h := maphash.String(r.seed, model)
	for i := range out {
		var m maphash.Hash
		m.SetSeed(r.seed)
		var b [8]byte
		for j := range b {
			b[j] = byte(h >> (8 * j))
		}
		_, _ = m.Write(b[:])
		_, _ = m.WriteString(prompt[i*blockChars : (i+1)*blockChars])
		h = m.Sum64()
		out[i] = h
	}
	return out
}

// MetricsText appends the replica's state as vLLM V1's /metrics page.
func (r *Replica) MetricsText(dst []byte) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	labels := `engine="0",model_name="` + r.opts.Model + `"`
	gauge := func(name, help string, v float64) {
		dst = append(dst, "# HELP "+name+" "+help+"\n# TYPE "+name+" gauge\n"+name+"{"+labels+"} "...)
		dst = strconv.AppendFloat(dst, v, 'g', -1, 64)
		dst = append(dst, '\n')
	}
	counter := func(name, help string, v int64) {
		dst = append(dst, "# HELP "+name+" "+help+"\n# TYPE "+name+" counter\n"+name+"{"+labels+"} "...)
		dst = strconv.AppendInt(dst, v, 10)
		dst = append(dst, '\n')
	}
	capTokens := r.cache.cap * blockTokens
	gauge(metricRunning, "Number of requests in model execution batches.", float64(r.running))
	gauge(metricWaiting, "Number of requests waiting to be processed.", float64(r.waiting))
	gauge(metricKVUsage, "KV-cache usage. 1 means 100 percent usage.", min(float64(r.kvUsedTokens)/float64(max(capTokens, 1)), 1))
	counter(metricPrefixQueries, "Prefix cache queries, in terms of number of queried tokens.", r.prefixQueries)
	counter(metricPrefixHits, "Prefix cache hits, in terms of number of cached tokens.", r.prefixHits)
	counter(metricPromptTokens, "Number of prefill tokens processed.", r.promptTokens)
	counter(metricGenTokens, "Number of generation tokens processed.", r.genTokens)
	dst = append(dst, "# HELP "+metricCacheConfig+" Information of the LLMEngine CacheConfig\n# TYPE "+metricCacheConfig+" gauge\n"+
		metricCacheConfig+`{block_size="`+strconv.Itoa(blockTokens)+`",enable_prefix_caching="True",gpu_memory_utilization="0.9",num_gpu_blocks="`+
		strconv.Itoa(r.cache.cap)+`"} 1`+"\n"...)
	if r.opts.MaxLoras > 0 {
		var running []string
		for _, h := range r.gpuLoras.keys() {
			if name := r.adapterNames[h]; r.runningByLoRA[name] > 0 {
				running = append(running, name)
			}
		}
		// The value is the report's Unix time: the newest series is current (vLLM).
		dst = append(dst, "# HELP "+metricLoRAInfo+" Running stats on lora requests.\n# TYPE "+metricLoRAInfo+" gauge\n"+
			metricLoRAInfo+`{max_lora="`+strconv.Itoa(r.opts.MaxLoras)+`",running_lora_adapters="`+strings.Join(running, ",")+
			`",waiting_lora_adapters=""} `...)
		dst = strconv.AppendFloat(dst, float64(time.Now().UnixMilli())/1000, 'f', 3, 64)
		dst = append(dst, '\n')
	}
	return dst
}

// lru is a bounded set of hashes, least recently used evicted first.
type lru struct {
	cap   int
	items map[uint64]uint64 // hash → last use
	clock uint64
}

func newLRU(capacity int) *lru { return &lru{cap: capacity, items: map[uint64]uint64{}} }

func (l *lru) touch(h uint64) bool {
	if _, ok := l.items[h]; ok {
		l.clock++
		l.items[h] = l.clock
		return true
	}
	return false
}

// add inserts h, evicting the least recently used entry when full. The
// linear eviction scan is fine for a simulator: it runs once per new block.
func (l *lru) add(h uint64) {
	if l.cap <= 0 {
		return
	}
	if l.touch(h) {
		return
	}
	if len(l.items) >= l.cap {
		var old uint64
		oldest := ^uint64(0)
		for k, t := range l.items {
			if t < oldest {
				old, oldest = k, t
			}
		}
		delete(l.items, old)
	}
	l.clock++
	l.items[h] = l.clock
}

func (l *lru) keys() []uint64 {
	out := make([]uint64, 0, len(l.items))
	for k := range l.items {
		out = append(out, k)
	}
	return out
}
