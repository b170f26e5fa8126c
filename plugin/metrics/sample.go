package metrics

// Field is a bit set of Sample fields; Sample.Present has a bit for every field
// the scrape actually carried (a zero value without its bit means "not exposed").
type Field uint32

// Field bits, one per Sample field.
const (
	FieldWaiting Field = 1 << iota
	FieldRunning
	FieldMaxRunning
	FieldKVUsage
	FieldKVUsedTokens
	FieldKVCapacityTokens
	FieldKVBlocks
	FieldKVUsedBlocks
	FieldBlockSizeTokens
	FieldAdapters    // RunningAdapters and WaitingAdapters (the current lora_requests_info series)
	FieldMaxAdapters // MaxAdapters
	FieldPrefixQueries
	FieldPrefixHits
	FieldCacheHitRate
	FieldPromptTokens
	FieldGenerationTokens
	FieldPreemptions
	FieldBatchMaxTokens
	FieldContextTokens
)

// Problem is a bit set of what went wrong while parsing; the Sample still holds
// everything read from the valid lines.
type Problem uint8

// Problem bits.
const (
	// ProblemTruncated: the body did not end with a newline, so its last line
	// may be cut short; that line was ignored. Treat the replica as stale.
	ProblemTruncated Problem = 1 << iota
	// ProblemBadLine: at least one line was not valid exposition text and
	// was skipped (Sample.BadLines counts them).
	ProblemBadLine
	// ProblemNoSamples: no valid sample of a metric the parser reads
	// (empty body, HTML error page, garbage, another engine's page).
	// Nothing in the Sample is usable.
	ProblemNoSamples
	// ProblemAdapterOverflow: an adapter list had more than MaxAdapterList
	// names, or a name longer than AdapterNameCap bytes.
	ProblemAdapterOverflow
)

// AdapterNameCap is how many bytes of an adapter name an Adapter keeps; longer
// names are truncated (Adapter.Truncated).
const AdapterNameCap = 56

// MaxAdapterList bounds each adapter list in a Sample, so a hostile or broken
// server cannot grow the plugin's memory; vLLM's max_lora is typically ≤ 16.
const MaxAdapterList = 64

// Adapter is one LoRA adapter name from lora_requests_info, stored inline so a
// reused slice of them costs no allocation.
type Adapter struct {
	n   uint8 // bytes stored in b
	cut bool  // name was longer than AdapterNameCap
	b   [AdapterNameCap]byte
}

// Name returns the stored (possibly truncated) name bytes; they alias a and
// stay valid until a is overwritten by the next Parse.
func (a *Adapter) Name() []byte { return a.b[:a.n] }

// Truncated reports whether the name was longer than AdapterNameCap.
func (a *Adapter) Truncated() bool { return a.cut }

// String returns the stored name (allocates; for logs and tests).
func (a Adapter) String() string { return string(a.b[:a.n]) }

// Sample is one replica's state from one scrape. Counts are whole requests or
// tokens; cumulative counters stay float64 as exposed (they exceed 2^31 and are
// compared as rates). Every field is meaningful only when its Field bit is in
// Present. The zero Sample is empty; reuse one per replica so the adapter
// slices keep their capacity.
type Sample struct {
	Present  Field
	Problems Problem
	// BadLines counts skipped invalid lines; FirstBadLine is the 1-based line
	// number of the first (0 if none). Parse's error quotes it.
	BadLines     int32
	FirstBadLine int32

	Waiting    int64 // requests queued (vLLM num_requests_waiting, TGI queue_size, …)
	Running    int64 // requests in the running batch
	MaxRunning int64 // the server's running-request limit, where exposed

	KVUsage          float64 // fraction of KV cache in use, clamped to [0,1]
	KVUsedTokens     int64   // KV tokens in use (SGLang num_used_tokens)
	KVCapacityTokens int64   // KV size in tokens: blocks × block size, or a direct gauge
	KVBlocks         int64   // KV size in blocks
	KVUsedBlocks     int64   // KV blocks in use
	BlockSizeTokens  int64   // tokens per KV block (vLLM block_size, SGLang page_size, TRT-LLM tokens_per)

	// RunningAdapters and WaitingAdapters are the adapter lists of the newest
	// lora_requests_info series (largest value). vLLM lists only adapters with
	// running or waiting requests, not every loaded one.
	RunningAdapters []Adapter
	WaitingAdapters []Adapter
	MaxAdapters     int64 // max_lora: adapter slots on the GPU

	// PrefixQueries and PrefixHits are cumulative prefix-cache counters: tokens
	// for vLLM, blocks for trtllm-serve; only their ratio (of deltas between
	// scrapes) compares across engines.
	PrefixQueries float64
	PrefixHits    float64
	CacheHitRate  float64 // server-computed hit ratio in [0,1] (SGLang, TRT-LLM)

	PromptTokensTotal     float64 // counter
	GenerationTokensTotal float64 // counter
	PreemptionsTotal      float64 // counter

	BatchMaxTokens int64 // TGI: token budget of the current batch
	ContextTokens  int64 // prefill tokens scheduled in the current iteration (TRT-LLM)
}

// Has reports whether every bit of f is in s.Present.
func (s *Sample) Has(f Field) bool { return s.Present&f == f }

// reset empties s for a new parse, keeping the adapter slices' capacity.
func (s *Sample) reset() {
	ra, wa := s.RunningAdapters[:0], s.WaitingAdapters[:0]
	*s = Sample{RunningAdapters: ra, WaitingAdapters: wa}
}
