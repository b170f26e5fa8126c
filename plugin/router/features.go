package router

import (
	"math/bits"

	"github.com/gpuroute/gpuroute/plugin/config"
	"github.com/gpuroute/gpuroute/plugin/openai"
	"github.com/gpuroute/gpuroute/scoring"
	"github.com/gpuroute/gpuroute/scoring/prefix"
)

// features turns a request body into what the decision prices
// (scoring.Request): the base model and adapter, the prompt's prefix chain
// and length, the output bound. It owns the body parser, the prompt hasher
// and its memo, and the interned model names; the stream's route reads it
// (parse, then of) and nothing else does.
type features struct {
	cfg   *config.Config
	stats *stats
	// defaultPromptTokens prices a request whose prompt is unknown.
	defaultPromptTokens int

	hasher prefix.Hasher
	// memo is the parser's writer: the hasher with a memo of the long
	// strings it hashed, so that a system prompt or a turn met again is
	// compared and its blocks replayed, not decoded and hashed again
	// (TestPromptMemo).
	memo   prefix.Memo
	parser openai.Parser
	parsed openai.Request
	req    scoring.Request

	models map[string]string // interned base model names
	// adapters names the configured adapters by prefix.HashString of
	// their name, the key of the ledger's adapter memory.
	adapters map[uint64]string
	// last is the last "model" value resolved (resolveModel).
	last struct {
		name          []byte
		base, adapter string
		served        []bool
		ok            bool
	}
}

// maxInterned bounds the model names a root remembers as strings.
const maxInterned = 256

func (f *features) setup(cfg *config.Config, st *stats) {
	f.cfg, f.stats = cfg, st
	f.defaultPromptTokens = cfg.Params.DefaultPromptTokens
	f.hasher.Init(cfg.BlockChars, maxChainBytes/cfg.BlockChars)
	f.memo.Init(&f.hasher, 0, 0, 0)
	f.models = make(map[string]string)
	f.adapters = make(map[uint64]string, len(cfg.Adapters))
	for name := range cfg.Adapters {
		f.adapters[prefix.HashString(name)] = name
	}
	f.last.name = make([]byte, 0, openai.MaxModelBytes)
}

// parse reads body (nil: none) into f.parsed in one pass: the prompt is
// hashed unseeded as it is validated, and the chain keyed with the model
// and adapter once the body named them (clients send "model" anywhere, the
// OpenAI Python SDK after "messages"). It reports whether the body named a
// model: one that is not JSON or names none is routed on load alone.
func (f *features) parse(kind openai.Kind, body []byte, truncated bool) bool {
	if body == nil {
		return false
	}
	f.hasher.ResetDeferred()
	replays := f.memo.Replays()
	err := f.parser.ParseText(kind, body, truncated, &f.memo, &f.parsed)
	if n := f.memo.Replays() - replays; n > 0 {
		f.stats.tally(f.stats.memoReplays, int64(n))
	}
	return err == nil || len(f.parsed.Model) > 0
}

// of returns the request's features: the parsed body's when parse
// reported a model, else load alone (the default prompt length, no chain).
// A body that could not be read is counted (unparsed; TestBodyNotJSON); it
// never causes a 5xx. The result is f's, valid until the next request.
func (f *features) of(parsed, unparsed bool) *scoring.Request {
	req := &f.req
	*req = scoring.Request{Chain: req.Chain[:0]}
	if !parsed {
		if unparsed {
			f.stats.add(f.stats.bodyUnparsed, 1)
		}
		req.PromptTokens = f.defaultPromptTokens
		return req
	}
	p := &f.parsed
	model, adapter, served := f.resolveModel(p.Model)
	req.Model, req.Adapter, req.ServedBy = model, adapter, served
	f.hasher.SetSeed(model, adapter)
	if p.PromptBad {
		f.stats.add(f.stats.bodyUnparsed, 1)
	}
	req.Chain = f.hasher.Chain()
	req.PromptTokens = max(f.hasher.Tokens(), p.PromptTokensExact, 1)
	if p.HasMaxTokens {
		req.MaxTokens = int(min(p.MaxTokens, 1<<31) * max(p.N, 1))
	}
	req.Stream = p.Stream
	return req
}

// resolveModel maps the request's "model" to the base model and adapter,
// as strings the decision can keep, and the replicas that serve the base
// model (config.ServedBy: nil when all do), without allocating for a name
// seen before (a map index with string(b) does not allocate). The last
// name resolved is compared first, a word at a time: most requests name
// the model the one before did (TestResolveModel).
func (f *features) resolveModel(model []byte) (base, adapter string, served []bool) {
	last := &f.last
	if last.ok && prefix.SameBytes(model, last.name) {
		return last.base, last.adapter, last.served
	}
	base, adapter = f.lookupModel(model)
	served = f.cfg.ServedBy(base)
	last.name = append(last.name[:0], model...)
	last.base, last.adapter, last.served, last.ok = base, adapter, served, true
	return base, adapter, served
}

func (f *features) lookupModel(model []byte) (base, adapter string) {
	if a, ok := f.cfg.LookupAdapter(model); ok {
		return a.Base, a.Name
	}
	if s, ok := f.models[string(model)]; ok {
		return s, ""
	}
	s := string(model)
	if len(f.models) < maxInterned {
		f.models[s] = s
	}
	return s, ""
}

// adapterKey is the prefix-index key that records where an adapter was
// sent: a one-block "chain" that prompt chains (which mix text blocks into
// the model and adapter seed) do not produce. Combined from the names'
// hashes so that building it allocates nothing.
func adapterKey(model, adapter string) uint64 {
	const salt = 0x6c6f72612d6b6579 // "lora-key"
	return prefix.HashString(adapter) ^ bits.RotateLeft64(prefix.HashString(model), 29) ^ salt
}

// adapterNamed returns the configured adapter whose name hashes to h (the
// ledger's adapter memory keeps hashes).
func (f *features) adapterNamed(h uint64) (string, bool) {
	name, ok := f.adapters[h]
	return name, ok
}
