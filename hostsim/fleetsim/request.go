package fleetsim

import (
	"strconv"
	"time"
)

// CharsPerToken is how many bytes of synthesized prompt text stand for one
// token (OpenAI's rule of thumb for English, also the plugin's estimate:
// docs/design.md "Prefix identity"), so a router that counts characters
// sees the right length.
const CharsPerToken = 4

// BlockTokens is the KV block size of the simulated engines in tokens (vLLM's
// default block_size).
const BlockTokens = 16

// Segment is a run of synthetic prompt text: Tokens tokens whose text is a
// pure function of Seed and the offset in the run. Two prompts whose segment
// lists start with the same segments have the same text prefix, which is how
// workloads express sharing (a group's system prompt, a conversation's past
// turns, a Mooncake hash_id).
type Segment struct {
	Seed   uint64
	Tokens int
}

// Request is one LLM request of a workload. It is immutable while policies
// run (runs may proceed in parallel on one workload); per-run state lives in
// the runner.
type Request struct {
	// ID is the request's index in its workload.
	ID int
	// Arrival is when the client sends it, from the start of the run.
	Arrival time.Duration
	// Model is the base model; Adapter the LoRA adapter ("" for none). The
	// OpenAI "model" field carries Adapter when set, else Model.
	Model, Adapter string
	// PromptTokens is the prompt length in tokens (the sum of the segments).
	PromptTokens int
	// MaxTokens is the request's max_tokens (the client's bound).
	MaxTokens int
	// Stream is the request's "stream" flag.
	Stream bool
	// Session groups the turns of one conversation (or the prompts of one
	// shared-prefix group); -1 if none.
	Session int
	// Class names the request's class in the results (a priority band or
	// a tenant; "" for none). Priority and Tenant are what the client
	// sends in the router's priority and tenant headers ("" for none).
	Class, Priority, Tenant string

	segs    []Segment
	outSeed uint64   // seed of the generated text (multi-turn prompts quote it); 0: a seed from ID
	output  int      // true output length: hidden from policies but the oracle
	chain   []uint64 // KV block hashes of the prompt's full blocks
	key     uint64   // model/adapter seed of the chain
}

// NewRequest builds a request from its prompt segments; output is the true
// number of tokens the server will generate (at least 1, at most maxTokens
// when maxTokens > 0).
func NewRequest(id int, arrival time.Duration, model, adapter string, segs []Segment, maxTokens, output int) *Request {
	n := 0
	for _, s := range segs {
		n += s.Tokens
	}
	output = max(output, 1)
	if maxTokens > 0 {
		output = min(output, maxTokens)
	}
	return &Request{ID: id, Arrival: arrival, Model: model, Adapter: adapter, PromptTokens: n,
		MaxTokens: maxTokens, Stream: true, Session: -1, segs: segs, output: output}
}

// answerSeed is the seed of the text the engine generates for r: the
// segment a multi-turn workload's next turn quotes, or one of r's own.
func (r *Request) answerSeed() uint64 {
	if r.outSeed != 0 {
		return r.outSeed
	}
	return uint64(r.ID+1)*0x9e3779b97f4a7c15 | 1<<63
}

// AppendAnswer appends the text of the answer's tokens [from, to) to dst:
// what the engine generates for r (and caches), which a next turn quoting
// the answer repeats.
func (r *Request) AppendAnswer(dst []byte, from, to int) []byte {
	return appendSegmentText(dst, r.answerSeed(), from, to)
}

// Segments returns the prompt's segments (shared; do not modify).
func (r *Request) Segments() []Segment { return r.segs }

// TargetModel returns the OpenAI "model" field: the adapter if any, else the
// base model.
func (r *Request) TargetModel() string {
	if r.Adapter != "" {
		return r.Adapter
	}
	return r.Model
}

// OutputTokens returns the true output length. Only the oracle policy and the
// replicas may use it: a router cannot know it in advance.
func (r *Request) OutputTokens() int { return r.output }

// PromptChars returns the length of the prompt text in bytes.
func (r *Request) PromptChars() int { return r.PromptTokens * CharsPerToken }

// AppendPrompt appends the prompt text to dst and returns it: real bytes a
// router can hash, CharsPerToken per token, generated on demand (a 2k-token
// prompt is 8 KB) so a workload costs no memory for its text.
func (r *Request) AppendPrompt(dst []byte) []byte {
	for _, s := range r.segs {
		dst = appendSegmentText(dst, s.Seed, 0, s.Tokens)
	}
	return dst
}

// AppendText appends the segment's text to dst: CharsPerToken bytes per
// token, the same bytes wherever the segment appears (a load generator
// sends a shared system prompt as one chat message this way).
func (s Segment) AppendText(dst []byte) []byte { return appendSegmentText(dst, s.Seed, 0, s.Tokens) }

// AppendCompletionBody appends an OpenAI /v1/completions JSON body for the
// request to dst (the prompt alphabet needs no escaping).
func (r *Request) AppendCompletionBody(dst []byte) []byte {
	dst = append(dst, `{"model":`...)
	dst = strconv.AppendQuote(dst, r.TargetModel())
	dst = append(dst, `,"prompt":"`...)
	dst = r.AppendPrompt(dst)
	dst = append(dst, `","max_tokens":`...)
	dst = strconv.AppendInt(dst, int64(r.MaxTokens), 10)
	dst = append(dst, `,"stream":`...)
	dst = strconv.AppendBool(dst, r.Stream)
	return append(dst, '}')
}

// words is the alphabet of synthesized tokens: three letters and a space per
// token, so text is printable, JSON-safe and exactly CharsPerToken per token.
const letters = "abcdefghijklmnopqrstuvwxyz"

// appendSegmentText appends tokens [from, to) of segment seed.
func appendSegmentText(dst []byte, seed uint64, from, to int) []byte {
	for t := from; t < to; t++ {
		x := mix64(seed ^ (uint64(t)+1)*0x9e3779b97f4a7c15)
		dst = append(dst, letters[x%26], letters[(x>>8)%26], letters[(x>>16)%26], ' ')
	}
	return dst
}

// mix64 is the splitmix64 finalizer (Steele, Lea & Flood, OOPSLA 2014): a
// full-avalanche 64-bit mix, stable across processes.
func mix64(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

func hashString(s string) uint64 {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * 0x100000001b3
	}
	return mix64(h)
}

// Chain returns the KV block hashes of the prompt's full BlockTokens blocks,
// chained (block i's hash covers blocks 0..i) and seeded by model and
// adapter, like vLLM's prefix-caching block hashes: equal hash at position i
// means an equal prompt prefix of i+1 blocks for the same model and adapter.
// Computed from the segment structure (not the text), once; call
// Workload.Prepare before sharing requests across goroutines.
func (r *Request) Chain() []uint64 {
	if r.chain == nil {
		r.key = hashString(r.Model + "\x00" + r.Adapter)
		r.chain = appendChain(make([]uint64, 0, r.PromptTokens/BlockTokens), r.key, r.segs, r.PromptTokens)
	}
	return r.chain
}

// appendChain appends the chained hashes of the full blocks among the first
// limit tokens of segs.
func appendChain(dst []uint64, seed uint64, segs []Segment, limit int) []uint64 {
	prev := seed
	h := prev
	fill := 0 // tokens in the current block
	seen := 0
	for _, s := range segs {
		off := 0
		for off < s.Tokens && seen < limit {
			n := min(s.Tokens-off, BlockTokens-fill, limit-seen)
			// A piece is (segment seed, offset, length): equal pieces mean
			// equal text, so the structure hash agrees with a text hash.
			h = mix64(h ^ mix64(s.Seed+uint64(off)*0x9e3779b97f4a7c15+uint64(n)<<48))
			off += n
			fill += n
			seen += n
			if fill == BlockTokens {
				h = mix64(h ^ prev*0xbf58476d1ce4e5b9)
				dst = append(dst, h)
				prev, fill = h, 0
			}
		}
	}
	return dst
}
