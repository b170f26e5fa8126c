package scoring

import "github.com/gpuroute/gpuroute/scoring/prefix"

// AdapterTier says where a LoRA adapter lives on a replica, hence what a
// request for it costs there before prefill can start.
type AdapterTier uint8

// Adapter tiers, cheapest first.
const (
	// TierGPU: resident in GPU memory; no load cost.
	TierGPU AdapterTier = iota
	// TierHost: in the host-memory LoRA cache (vLLM --max-cpu-loras); tens of ms.
	TierHost
	// TierStorage: must be read from disk or object storage; seconds.
	TierStorage
)

// String returns the tier's lowercase name.
func (t AdapterTier) String() string {
	switch t {
	case TierGPU:
		return "gpu"
	case TierHost:
		return "host"
	case TierStorage:
		return "storage"
	}
	return "unknown"
}

// Adapter is one LoRA adapter a replica reports (or the router remembers).
type Adapter struct {
	// Name is the adapter name as in the OpenAI "model" field.
	Name string
	// Tier is where the adapter currently lives on the replica.
	Tier AdapterTier
	// Active says the adapter has running or waiting requests, so it cannot
	// be evicted to make room (vLLM lora_requests_info lists exactly these).
	Active bool
	// Hash is prefix.HashString(Name), set once per snapshot so decisions compare
	// it with the ledger's adapter keys without hashing names per request;
	// 0 means not set (then it is computed when needed).
	Hash uint64
}

// key returns a's Hash, computing it when unset.
func (a *Adapter) key() uint64 {
	if a.Hash != 0 {
		return a.Hash
	}
	return prefix.HashString(a.Name)
}

// DrainState is a replica's place in the drain life cycle (docs/design.md
// "Health and drains").
type DrainState uint8

// Drain states.
const (
	// Serving: accepts new work.
	Serving DrainState = iota
	// Draining: closed to new work, in-flight generations continue until
	// the deadline.
	Draining
	// Drained: the deadline passed (or the operator removed it): no work at
	// all; the plugin ends what is left.
	Drained
)

// String returns the drain state's lowercase name.
func (s DrainState) String() string {
	switch s {
	case Serving:
		return "serving"
	case Draining:
		return "draining"
	case Drained:
		return "drained"
	}
	return "unknown"
}

// Replica is the router's snapshot of one model-server replica. Replicas are
// identified by their index in the caller-owned slice passed to [Pick]; the
// [Ledger] and [prefix.Index] use the same index.
//
// The snapshot comes from the replica's metrics (vLLM num_requests_waiting,
// num_requests_running, kv_cache_usage_perc, lora_requests_info,
// cache_config_info; SGLang and TGI equivalents) plus configuration.
type Replica struct {
	// Name is the replica's configured name, which explanations show
	// (AppendExplain; Addr when empty).
	Name string
	// Addr is "ip:port", the value put in x-gateway-destination-endpoint.
	Addr string
	// AddrHash identifies the replica in rendezvous hashing; set it once
	// with prefix.HashString(Addr) (Pick computes it when zero, which costs time).
	AddrHash uint64
	// Engine names the server ("vllm", "sglang", "tgi", "triton", "trtllm-serve");
	// informational.
	Engine string
	// Hardware is the replica's cost profile (possibly calibrated).
	Hardware Hardware

	// WaitingRequests and RunningRequests are the reported queue and batch.
	WaitingRequests int
	RunningRequests int
	// KVUsage is the reported fraction of KV cache in use, in [0,1].
	KVUsage float64
	// KVCapacityTokens is the KV cache size in tokens (num_gpu_blocks ×
	// block_size from cache_config_info); 0 uses Hardware.KVCapacityTokens.
	KVCapacityTokens int
	// MaxBatchSeqs is the most sequences the replica runs at once (vLLM
	// max_num_seqs, SGLang max_running_requests), from configuration: the
	// servers do not report it. 0 means unknown, and W(r) then has no
	// batch-full wait.
	MaxBatchSeqs int
	// CacheRoomTokens is the KV cache space, in tokens, that new context
	// can take without evicting any the router believes held there: the
	// capacity less what the prefix index holds for the replica (the
	// simulator's oracle: the engine's blocks holding nothing). The
	// externality reads the fleet's requests as arriving where contexts
	// are held (externalSec); 0 is a full cache, and a fleet that reports
	// none looks uniformly full, which leaves the rule as without it.
	CacheRoomTokens int

	// Adapters lists adapters known on the replica with their tier.
	Adapters []Adapter
	// AdapterSlots is the number of adapters the GPU holds at once (vLLM
	// max_loras). 0 means the replica serves no adapters; negative means
	// unknown (treated as a free slot).
	AdapterSlots int
	// AdapterHostSlots is the number of adapters the replica keeps in its
	// host-memory LoRA cache (vLLM --max-cpu-loras, which defaults to
	// max_loras); 0 means AdapterSlots.
	AdapterHostSlots int

	// Healthy is false when the replica failed health checks or scrapes in
	// a way that rules it out; an unhealthy replica gets no work.
	Healthy bool
	// Drain is the drain state; DrainDeadlineNanos is when Draining
	// becomes Drained (0: no deadline).
	Drain              DrainState
	DrainDeadlineNanos int64

	// PeerWork is the in-flight work other routers sharing this fleet view
	// (the other worker VMs of one Envoy) report on this replica, each from
	// its own Ledger.WorkOn, summed with Work.AddAt; Pick adds it to the
	// local ledger's. Their dispatch rate reaches Pick separately
	// (Ledger.SetPeerRate).
	PeerWork Work

	// ScrapedNanos is when the metrics were taken, on the caller's clock
	// (the same clock as nowNanos). 0 means never: the state is uncertain.
	ScrapedNanos int64
}

// KVCapacity returns the replica's KV capacity in tokens: the reported
// one, else its profile's.
func (r *Replica) KVCapacity() int {
	if r.KVCapacityTokens > 0 {
		return r.KVCapacityTokens
	}
	return r.Hardware.KVCapacityTokens
}

// occupancy is the share of r's KV cache that holds context, 1 −
// CacheRoomTokens / capacity, in [0, 1]; 1 when the capacity is unknown.
func (r *Replica) occupancy() float64 {
	c := r.KVCapacity()
	if c <= 0 {
		return 1
	}
	return 1 - float64(min(max(r.CacheRoomTokens, 0), c))/float64(c)
}

// DrainAt returns the drain state at nowNanos: a Draining replica whose
// deadline has passed is Drained.
func (r *Replica) DrainAt(nowNanos int64) DrainState {
	if r.Drain == Draining && r.DrainDeadlineNanos != 0 && nowNanos >= r.DrainDeadlineNanos {
		return Drained
	}
	return r.Drain
}

// Request holds the features of one request that the decision uses.
type Request struct {
	// PromptTokens is the estimated prompt length n (characters / 4 when
	// there is no tokenizer; see prefix.Hasher.Tokens).
	PromptTokens int
	// Chain is the prefix block chain (prefix.Hasher.Chain); its first
	// blocks key the rendezvous tie-break. May be empty.
	Chain []uint64
	// Model is the OpenAI "model" field's base model; Adapter the LoRA
	// adapter name or "" for the base model.
	Model   string
	Adapter string
	// MaxTokens is the request's max_tokens (0: not given).
	MaxTokens int
	// Stream is the request's "stream" flag.
	Stream bool
	// ServedBy, when set, marks the replicas (by index) that serve the
	// request's base model; Pick excludes the others, and those past its
	// end (Decision.NoModel counts them). nil: every replica serves it.
	ServedBy []bool
	// AdapterRecent, when set, marks the replicas (by index) that some
	// router sharing this one's state sent the adapter to recently: beyond
	// what the Ledger remembers itself, they count as holding it in host
	// memory (plugin: the shared prefix index records adapters too).
	AdapterRecent []bool
}
