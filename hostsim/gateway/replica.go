package gateway

import (
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

	"github.com/gpuroute/gpuroute/hostsim/fleetsim"
	"github.com/gpuroute/gpuroute/plugin/openai"
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

// Replica defaults. vLLM's KV block is 16 tokens (fleetsim.BlockTokens) and
// a completion without max_tokens gets 16 (OpenAI's legacy completions
// default, which vLLM's completions endpoint keeps).
const (
	blockTokens      = fleetsim.BlockTokens
	defaultMaxTokens = 16
	maxOutputTokens  = 1 << 16 // vLLM refuses max_tokens beyond the context too
	maxBodyBytes     = 8 << 20
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
	// fleetsim.DefaultModel.
	Model string
	// Adapters are the LoRA adapters the replica serves (vLLM's
	// --lora-modules). A request whose model names one pays the adapter's
	// load; any other model name is served by the base model, as the
	// plugin reads names (an adapter only when its "adapters" lists it).
	Adapters []string
	// KVCapacityTokens bounds the KV cache; 0 means Hardware's.
	KVCapacityTokens int
	// MaxLoras is the number of adapters resident on the GPU (vLLM
	// max_loras); 0 means fleetsim.DefaultMaxLoras.
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
	// TTFT is the wall time from the request's arrival to its first
	// token; EngineTTFT the engine's modelled time for it (TTFT divided
	// by TimeScale, give or take scheduling).
	TTFT, EngineTTFT time.Duration
	// Completed is false if the client (or the gateway) went away first.
	Completed bool
}

// Replica is a simulated OpenAI-compatible model server (an http.Handler):
// /v1/chat/completions, /v1/completions, the Anthropic Messages API
// /v1/messages and the OpenAI Responses API /v1/responses (agents.go), each
// streamed as SSE when "stream" is true, with the cached prompt tokens in
// its usage; /metrics in vLLM's format; and the engines' informational
// endpoints (engineapi.go). The engine behind it is the fleet simulator's
// (fleetsim.LiveReplica): continuous batching with chunked prefill, a KV
// cache that reuses a prompt's cached prefix, LoRA slots with host-memory
// and storage loads, every duration from the hardware profile times
// TimeScale. Safe for concurrent use; Close stops its engine.
type Replica struct {
	opts    ReplicaOptions
	engine  *fleetsim.LiveReplica
	seed    maphash.Seed
	created time.Time // when it started: the models' "created"

	mu       sync.Mutex
	requests []ReplicaRequest
}

var _ http.Handler = (*Replica)(nil)

// NewReplica starts a simulated replica with defaults filled in.
func NewReplica(opts ReplicaOptions) *Replica {
	if opts.Hardware.Name == "" {
		opts.Hardware = scoring.DefaultHardware()
	}
	if opts.TimeScale <= 0 {
		opts.TimeScale = 1
	}
	if opts.Model == "" {
		opts.Model = fleetsim.DefaultModel
	}
	if opts.MaxLoras <= 0 {
		opts.MaxLoras = fleetsim.DefaultMaxLoras
	}
	rc := fleetsim.ReplicaConfig{Hardware: opts.Hardware, Model: opts.Model, MaxLoras: opts.MaxLoras}
	if opts.KVCapacityTokens > 0 {
		rc.KVBlocks = max(opts.KVCapacityTokens/blockTokens, 1)
	}
	return &Replica{
		opts:    opts,
		engine:  fleetsim.NewLiveReplica(fleetsim.LiveOptions{Replica: rc, TimeScale: opts.TimeScale}),
		seed:    maphash.MakeSeed(),
		created: time.Now(),
	}
}

// Close stops the replica's engine; requests in flight stop advancing.
func (r *Replica) Close() { r.engine.Close() }

// Model returns the base model the replica serves.
func (r *Replica) Model() string { return r.opts.Model }

// Name returns the replica's name.
func (r *Replica) Name() string { return r.opts.Name }

// Requests returns a copy of what the replica recorded, oldest first
// (a request is recorded when it ends).
func (r *Replica) Requests() []ReplicaRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ReplicaRequest(nil), r.requests...)
}

// ServeHTTP answers the four generation endpoints, /metrics and the engines'
// informational endpoints (engineapi.go).
func (r *Replica) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method == http.MethodGet && r.serveEngineAPI(w, req) {
		return
	}
	switch req.URL.Path {
	case PathMetrics:
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write(r.MetricsText(nil))
	case PathChatCompletions, PathCompletions, PathMessages, PathResponses:
		if req.Method != http.MethodPost {
			openAIError(w, http.StatusMethodNotAllowed, "replica: "+req.URL.Path+" takes POST, got "+req.Method)
			return
		}
		r.serveCompletion(w, req)
	default:
		openAIError(w, http.StatusNotFound, "replica: no route for "+strconv.Quote(req.URL.Path))
	}
}

// MetricsText appends the replica's state as vLLM V1's /metrics page.
func (r *Replica) MetricsText(dst []byte) []byte { return r.engine.MetricsText(dst) }

func (r *Replica) engineState() engineState {
	st := r.engine.State()
	return engineState{waiting: st.Waiting, running: st.Running, kvUsedTokens: st.KVUsedTokens,
		kvCapacityTokens: st.KVCapacityTokens}
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

// request is what the replica reads from a request to any of its four
// generation endpoints.
type request struct {
	model        string
	prompt       string
	maxTokens    int
	stream       bool
	includeUsage bool // chat and completions: stream_options.include_usage
}

// readRequest reads and parses the body of a request to path.
func readRequest(path string, body io.Reader) (request, error) {
	b, err := io.ReadAll(io.LimitReader(body, maxBodyBytes))
	if err != nil {
		return request{}, errors.New("replica: read body: " + err.Error())
	}
	switch path {
	case PathMessages, PathResponses:
		kind := openai.Messages
		if path == PathResponses {
			kind = openai.Responses
		}
		return readAgentRequest(kind, b)
	}
	c, prompt, maxTokens, err := readCompletion(b, path == PathChatCompletions)
	if err != nil {
		return request{}, err
	}
	return request{model: c.Model, prompt: prompt, maxTokens: maxTokens, stream: c.Stream,
		includeUsage: c.StreamOptions != nil && c.StreamOptions.IncludeUsage}, nil
}

// newAnswerWriter returns the writer of path's answer format.
func newAnswerWriter(w http.ResponseWriter, path string, q request, id string, created time.Time) answerWriter {
	switch path {
	case PathMessages:
		return &messagesWriter{sse: sse{w: w}, id: "msg_" + id, model: q.model}
	case PathResponses:
		return &responsesWriter{sse: sse{w: w}, id: "resp_" + id, itemID: "msg_" + id, model: q.model, created: created.Unix()}
	}
	return &responseWriter{sse: sse{w: w}, chat: path == PathChatCompletions, includeUsage: q.includeUsage,
		id: "cmpl-" + id, model: q.model, created: created.Unix()}
}

func (r *Replica) serveCompletion(w http.ResponseWriter, req *http.Request) {
	c, err := readRequest(req.URL.Path, req.Body)
	if err != nil {
		openAIError(w, http.StatusBadRequest, err.Error())
		return
	}
	if c.model == "" {
		c.model = r.opts.Model
	}
	adapter := ""
	if slices.Contains(r.opts.Adapters, c.model) {
		adapter = c.model
	}
	start := time.Now()
	s, err := r.engine.Submit(fleetsim.LiveRequest{Model: r.opts.Model, Adapter: adapter, Prompt: c.prompt, MaxTokens: c.maxTokens})
	if err != nil {
		openAIError(w, http.StatusServiceUnavailable, "replica: "+err.Error())
		return
	}
	rec := ReplicaRequest{Path: req.URL.Path, Destination: req.Header.Values(HeaderDestination),
		Model: c.model, Adapter: adapter, Stream: c.stream, PromptTokens: s.PromptTokens()}
	defer func() { r.record(rec) }()
	ctx := req.Context()
	defer s.Cancel() // a no-op once complete
	n, done, err := s.Wait(ctx, 0)
	if err != nil {
		return
	}
	rec.TTFT, rec.EngineTTFT, rec.CachedTokens = time.Since(start), s.TTFT(), s.CachedTokens()

	id := strconv.FormatUint(maphash.String(r.seed, c.prompt+start.String()), 36)
	w.Header().Set(HeaderReplica, r.opts.Name)
	w.Header().Set(HeaderCachedTokens, strconv.Itoa(rec.CachedTokens))
	out := newAnswerWriter(w, req.URL.Path, c, id, start)
	usage := tokenUsage{Prompt: rec.PromptTokens, Cached: rec.CachedTokens}
	if c.stream {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		if out.start(usage) != nil {
			return
		}
	}
	var text strings.Builder
	for {
		for ; rec.OutputTokens < n; rec.OutputTokens++ {
			tok := TokenText(rec.OutputTokens)
			text.WriteString(tok)
			if c.stream && out.token(tok, rec.OutputTokens == 0) != nil {
				return
			}
		}
		if done {
			break
		}
		if n, done, err = s.Wait(ctx, n); err != nil {
			return
		}
	}
	usage.Output = rec.OutputTokens
	if c.stream {
		err = out.end(text.String(), usage)
	} else {
		err = out.whole(text.String(), usage)
	}
	rec.Completed = err == nil
}

// readCompletion parses a chat or completions request body: the request,
// its prompt flattened as the plugin reads it, and the output bound.
func readCompletion(b []byte, chat bool) (*completionRequest, string, int, error) {
	var c completionRequest
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, "", 0, errors.New("replica: body is not JSON: " + err.Error())
	}
	prompt, err := c.promptText(chat)
	if err != nil {
		return nil, "", 0, err
	}
	maxTokens := defaultMaxTokens
	for _, p := range []*int{c.MaxTokens, c.MaxCompletionTokens} {
		if p != nil {
			if maxTokens, err = outputBound(int64(*p)); err != nil {
				return nil, "", 0, err
			}
		}
	}
	return &c, prompt, maxTokens, nil
}

// outputBound checks a request's output bound: vLLM refuses one beyond the
// context, and the replica one beyond maxOutputTokens.
func outputBound(n int64) (int, error) {
	if n < 1 || n > maxOutputTokens {
		return 0, errors.New("replica: max_tokens must be in [1, " + strconv.Itoa(maxOutputTokens) + "], got " + strconv.FormatInt(n, 10))
	}
	return int(n), nil
}

// TokenText is the text of the i-th generated token: numbered, so a client
// can check that a stream arrived complete and in order.
func TokenText(i int) string { return "t" + strconv.Itoa(i) + " " }

func (r *Replica) record(rec ReplicaRequest) {
	r.mu.Lock()
	r.requests = append(r.requests, rec)
	r.mu.Unlock()
}
