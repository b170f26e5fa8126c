package openai

import "github.com/gpuroute/gpuroute/plugin/jsonx"

// Usage is the token accounting of a response, as the engine reports it:
//
//	chat, completions (vLLM, SGLang, TGI):  prompt_tokens, completion_tokens,
//	    prompt_tokens_details.cached_tokens (vLLM with
//	    --enable-prompt-tokens-details; SGLang with --enable-cache-report,
//	    which leaves the details out when nothing was cached)
//	responses:  input_tokens (cached ones included), output_tokens,
//	    input_tokens_details.cached_tokens
//	messages:   input_tokens (Anthropic's rule, vLLM's since its #40912:
//	    without the cache's), output_tokens, cache_read_input_tokens,
//	    cache_creation_input_tokens (absent when the cache is not reported)
//
// so that PromptTokens = prompt_tokens, or input_tokens +
// cache_read_input_tokens + cache_creation_input_tokens, and CachedTokens =
// the details' cached_tokens, or cache_read_input_tokens.
type Usage struct {
	PromptTokens     int64 // the prompt's tokens, cached ones included
	CompletionTokens int64
	CachedTokens     int64 // of the prompt's tokens, those the engine had cached
	HasCached        bool  // CachedTokens was reported; false means absent, not 0
}

// Usage object members (the endpoints' names, see Usage).
const (
	FieldPromptTok     = "prompt_tokens"
	FieldCompleteTok   = "completion_tokens"
	FieldInputTok      = "input_tokens"
	FieldOutputTok     = "output_tokens"
	FieldCacheRead     = "cache_read_input_tokens"
	FieldCacheCreation = "cache_creation_input_tokens"
	FieldPromptDetails = "prompt_tokens_details"
	FieldInputDetails  = "input_tokens_details"
	FieldCachedTok     = "cached_tokens"
)

// usageFields gathers a usage object's members, each a non-negative
// integer or absent (has bit), for Usage to combine.
type usageFields struct {
	prompt, completion, input, output, cacheRead, cacheCreation, cached int64
	has                                                                 uint8
}

// usageFields.has bits.
const (
	hasPrompt uint8 = 1 << iota
	hasCompletion
	hasInput
	hasOutput
	hasCacheRead
	hasCacheCreation
	hasCached
)

// set records member key of a usage object; other members are ignored.
func (f *usageFields) set(key []byte, n int64) {
	switch string(key) {
	case FieldPromptTok:
		f.prompt, f.has = n, f.has|hasPrompt
	case FieldCompleteTok:
		f.completion, f.has = n, f.has|hasCompletion
	case FieldInputTok:
		f.input, f.has = n, f.has|hasInput
	case FieldOutputTok:
		f.output, f.has = n, f.has|hasOutput
	case FieldCacheRead:
		f.cacheRead, f.has = n, f.has|hasCacheRead
	case FieldCacheCreation:
		f.cacheCreation, f.has = n, f.has|hasCacheCreation
	}
}

// setDetail records member key of a usage object's *_tokens_details.
func (f *usageFields) setDetail(key []byte, n int64) {
	if string(key) == FieldCachedTok {
		f.cached, f.has = n, f.has|hasCached
	}
}

// details reports a usage member whose object value holds cached_tokens.
func details(key []byte) bool {
	return string(key) == FieldPromptDetails || string(key) == FieldInputDetails
}

// usage combines the members (see Usage): completion reports a completion
// count, prompt a prompt count.
func (f *usageFields) usage() (u Usage, completion, prompt bool) {
	switch {
	case f.has&hasCompletion != 0:
		u.CompletionTokens, completion = f.completion, true
	case f.has&hasOutput != 0:
		u.CompletionTokens, completion = f.output, true
	}
	switch {
	case f.has&hasPrompt != 0:
		u.PromptTokens, prompt = f.prompt, true
	case f.has&hasInput != 0:
		u.PromptTokens, prompt = satAdd(satAdd(f.input, f.cacheRead), f.cacheCreation), true
	}
	switch {
	case f.has&hasCached != 0:
		u.CachedTokens, u.HasCached = f.cached, true
	case f.has&hasCacheRead != 0:
		u.CachedTokens, u.HasCached = f.cacheRead, true
	}
	return u, completion, prompt
}

// satAdd adds two non-negative counts, saturating: a hostile reply must
// not wrap a count negative.
func satAdd(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return 1<<63 - 1
}

// tokenCount parses a usage member's raw JSON number: a non-negative
// integer, else ok false (the member is ignored). Only a number's JSON
// parses, so the fast path passes any value's bytes.
func tokenCount(raw []byte) (int64, bool) {
	n, ok := jsonx.ParseInt(raw)
	return n, ok && n >= 0
}

// usageCount is tokenCount for a value the Reader read.
func usageCount(v jsonx.Value) (int64, bool) {
	if v.Kind != jsonx.Number {
		return 0, false
	}
	return tokenCount(v.Raw)
}

// usageObject reads the usage object due next in r into f. A member that
// is not a non-negative integer (or a details object) is ignored; a syntax
// error inside voids the object (ok false).
func usageObject(r *jsonx.Reader, f *usageFields) (ok bool) {
	*f = usageFields{}
	r.Object()
	for r.Member() {
		if key := r.Key(); details(key) && r.Kind() == jsonx.Object {
			r.Object()
			for r.Member() {
				if n, ok := usageCount(r.Value()); ok {
					f.setDetail(r.Key(), n)
				}
			}
			continue
		}
		if n, ok := usageCount(r.Value()); ok {
			f.set(r.Key(), n)
		}
	}
	if r.Err() != nil {
		*f = usageFields{}
		return false
	}
	return true
}

// ParseUsage reads "usage" from a complete non-streamed response body. ok is
// false when the body has no usage object with a completion count
// ("completion_tokens" or "output_tokens", a non-negative integer); a
// missing or bad prompt count reads as 0.
func ParseUsage(body []byte) (u Usage, ok bool) {
	var r jsonx.Reader
	r.Reset(body)
	if !r.Object() {
		return Usage{}, false
	}
	for r.Member() {
		if string(r.Key()) != FieldUsage {
			continue
		}
		// The first "usage" decides; the rest of the body is not read.
		var f usageFields
		if r.Kind() != jsonx.Object || !usageObject(&r, &f) {
			return Usage{}, false
		}
		u, ok, _ = f.usage()
		if !ok {
			return Usage{}, false
		}
		return u, true
	}
	return Usage{}, false
}
