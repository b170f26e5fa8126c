package fleetsim

import (
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/gpuroute/gpuroute/scoring"
)

// Engine names of the simulated model servers (the metrics text they render).
const (
	EngineVLLM   = "vllm"
	EngineSGLang = "sglang"
	EngineTGI    = "tgi"
)

// DefaultModel is the base model name replicas serve (the scoring profiles
// model an 8B dense model), and Model70B the one the two-models workload's
// large replicas serve.
const (
	DefaultModel = "meta-llama/Llama-3.1-8B-Instruct"
	Model70B     = "meta-llama/Llama-3.1-70B-Instruct"
)

// shapeModels maps a scoring model shape to the model name a replica of
// that shape serves (ParseHardware); another shape serves its own name.
var shapeModels = map[string]string{scoring.ModelLlama3x8B: DefaultModel, scoring.ModelLlama3x70B: Model70B}

// Replica defaults. They follow vLLM's engine arguments: max_num_seqs 256
// (vLLM's long-standing default), max_num_batched_tokens 8192 (vLLM V1's
// default for online serving with chunked prefill), max_loras 4 and
// max_cpu_loras 8 (vLLM defaults are 1 and max_loras; raised so the lora
// workload has slots to contend for).
const (
	DefaultMaxBatch    = 256
	DefaultTokenBudget = 8192
	DefaultMaxLoras    = 4
	DefaultMaxCPULoras = 8
)

// ReplicaConfig describes one replica. Zero fields take the defaults above
// (KVBlocks: Hardware.KVCapacityTokens / BlockTokens).
type ReplicaConfig struct {
	Hardware scoring.Hardware
	Engine   string // EngineVLLM (default), EngineSGLang, EngineTGI
	// Model is the one base model the replica serves (default
	// DefaultModel): a request for another gets the engine's 404.
	Model string
	// Shape names the model's scoring.ModelShape and TensorParallel the
	// GPUs the replica spans, which with the GPU class make Hardware
	// (ParseHardware); "" and 0: the reference model on one GPU.
	Shape          string
	TensorParallel int

	MaxBatch    int // max concurrent sequences (vLLM max_num_seqs)
	TokenBudget int // tokens per step (vLLM max_num_batched_tokens)
	KVBlocks    int // KV cache size in blocks
	MaxLoras    int // adapters on the GPU at once; -1 for none
	MaxCPULoras int // adapters kept in host memory
}

func (c *ReplicaConfig) withDefaults() ReplicaConfig {
	d := *c
	if d.Hardware.Name == "" {
		d.Hardware = scoring.DefaultHardware()
	}
	if d.Engine == "" {
		d.Engine = EngineVLLM
	}
	if d.Model == "" {
		d.Model = DefaultModel
	}
	if d.MaxBatch <= 0 {
		d.MaxBatch = DefaultMaxBatch
	}
	if d.TokenBudget <= 0 {
		d.TokenBudget = DefaultTokenBudget
	}
	if d.KVBlocks <= 0 {
		d.KVBlocks = max(d.Hardware.KVCapacityTokens/BlockTokens, 1)
	}
	if d.MaxLoras == 0 {
		d.MaxLoras = DefaultMaxLoras
	}
	if d.MaxCPULoras <= 0 {
		d.MaxCPULoras = max(DefaultMaxCPULoras, d.MaxLoras)
	}
	return d
}

// seq is one request on a replica.
type seq struct {
	st      *reqState
	req     *Request
	target  int // tokens to prefill: the prompt (plus generated tokens after a preemption)
	done    int // tokens prefilled, cached ones included
	cached  int // prompt tokens served from the prefix cache at admission
	gen     int // output tokens generated
	chunk   int // this step: >0 prefill tokens, -1 one decode token, 0 idle
	pinned  []int32
	private int
	kvFail  uint64 // kvCache.gen+1 at the last failed admission
	adapter bool   // holds an adapter slot reference
	decode  bool   // prefill finished
}

// Replica is one simulated model server. Its exported methods are the
// router-visible surface (address, metrics text) plus exact state for the
// oracle and tests; only the runner mutates it.
type Replica struct {
	// Index is the replica's position in the fleet; Addr its "10.0.0.N:8000"
	// endpoint; Cluster the Envoy cluster name serving its metrics.
	Index   int
	Addr    string
	Cluster string

	cfg ReplicaConfig
	sim *sim

	up         bool
	draining   bool
	removed    bool // taken out of service by a deploy (routers know)
	drainStart time.Duration
	drainDead  time.Duration
	epoch      int32 // bumped on crash/stop: stale step events are ignored
	stepping   bool
	// stepStart and stepEnd bound the step in flight while stepping.
	stepStart, stepEnd time.Duration
	waiting            []*seq
	running            []*seq
	kv                 *kvCache
	slots              []loraSlot
	host               []string // host-memory adapter cache, least recent first
	lastActivity       time.Duration

	// Cumulative counters (metrics text and the report).
	promptTokens, genTokens   int64
	prefixQueries, prefixHits int64
	preemptions, adapterLoads int64
	hostLoads, storageLoads   int64
	completed                 int64
}

type loraSlot struct {
	name     string
	active   int
	lastUsed time.Duration
}

func newReplica(i int, cfg ReplicaConfig, s *sim) *Replica {
	c := cfg.withDefaults()
	r := &Replica{Index: i, cfg: c, sim: s, up: true,
		Addr:    "10.0.0." + strconv.Itoa(i+1) + ":8000",
		Cluster: "replica-" + strconv.Itoa(i) + "-metrics",
		kv:      newKVCache(c.KVBlocks)}
	return r
}

// Config returns the replica's configuration with defaults filled in.
func (r *Replica) Config() ReplicaConfig { return r.cfg }

// Serves reports whether the replica serves base model model.
func (r *Replica) Serves(model string) bool { return model == r.cfg.Model }

// Hardware returns the replica's cost profile.
func (r *Replica) Hardware() *scoring.Hardware { return &r.cfg.Hardware }

// Up reports whether the replica is running (not crashed or stopped).
func (r *Replica) Up() bool { return r.up }

// Open reports whether the replica accepts new requests (up and not draining).
func (r *Replica) Open() bool { return r.up && !r.draining }

// Draining reports whether the replica is closed to new work, finishing what
// it has.
func (r *Replica) Draining() bool { return r.up && r.draining }

// Waiting and Running return the queue and batch sizes.
func (r *Replica) Waiting() int { return len(r.waiting) }

// Running returns the number of sequences in the running batch.
func (r *Replica) Running() int { return len(r.running) }

// KVUsage returns the fraction of KV blocks referenced by requests, in [0,1]
// (vLLM kv_cache_usage_perc: cached unreferenced blocks count as free).
func (r *Replica) KVUsage() float64 { return float64(r.kv.inUse()) / float64(r.kv.total) }

// KVCapacityTokens returns the KV cache size in tokens.
func (r *Replica) KVCapacityTokens() int { return r.kv.total * BlockTokens }

// KVEvictions returns how many cached blocks were evicted to make room.
func (r *Replica) KVEvictions() int64 { return r.kv.evictions }

// CachedPrefixTokens returns the tokens of req's prompt the replica would
// serve from its prefix cache now (exact; at most PromptTokens − 1 because
// the last token is always recomputed).
func (r *Replica) CachedPrefixTokens(req *Request) int {
	if !r.up || req.PromptTokens == 0 {
		return 0
	}
	k := r.kv.cachedBlocks(req.Chain()) * BlockTokens
	return min(k, req.PromptTokens-1)
}

// stepElapsed returns the share of the step in flight that has run at now
// (0 when none is): the prefill chunks in it are that far done.
func (r *Replica) stepElapsed(now time.Duration) float64 {
	if !r.stepping || r.stepEnd <= r.stepStart {
		return 0
	}
	return min(max(float64(now-r.stepStart)/float64(r.stepEnd-r.stepStart), 0), 1)
}

// AdapterTier returns where adapter lives on the replica now, and whether a
// slot could take it (false: every slot holds an adapter with requests).
func (r *Replica) AdapterTier(adapter string) (scoring.AdapterTier, bool) {
	if adapter == "" {
		return scoring.TierGPU, true
	}
	for i := range r.slots {
		if r.slots[i].name == adapter {
			return scoring.TierGPU, true
		}
	}
	ok := r.cfg.MaxLoras > 0 && len(r.slots) < r.cfg.MaxLoras
	for i := range r.slots {
		ok = ok || r.slots[i].active == 0
	}
	for _, h := range r.host {
		if h == adapter {
			return scoring.TierHost, ok
		}
	}
	return scoring.TierStorage, ok
}

// AdapterLoadSec returns the seconds a load of adapter from tier takes.
func (r *Replica) AdapterLoadSec(t scoring.AdapterTier) float64 {
	switch t {
	case scoring.TierHost:
		return r.cfg.Hardware.AdapterLoadHostSec
	case scoring.TierStorage:
		return r.cfg.Hardware.AdapterLoadStorageSec
	}
	return 0
}

// ResidentAdapters returns the adapters in GPU slots (tests and the report).
func (r *Replica) ResidentAdapters() []string {
	out := make([]string, len(r.slots))
	for i := range r.slots {
		out[i] = r.slots[i].name
	}
	return out
}

// FreeKVTokens returns the KV tokens an admission could use now (free plus
// evictable cached blocks).
func (r *Replica) FreeKVTokens() int { return r.kv.available() * BlockTokens }

// EmptyKVTokens returns the KV cache space, in tokens, that holds nothing:
// free without evicting a cached prefix.
func (r *Replica) EmptyKVTokens() int { return (r.kv.total - r.kv.used()) * BlockTokens }

// errClosed is returned by accept for a replica that takes no new work.
var errClosed = errors.New("fleetsim: replica closed to new requests")

// accept queues a dispatched request, or refuses it (crashed or draining:
// the router sees a 503 and retries elsewhere).
func (r *Replica) accept(now time.Duration, st *reqState) error {
	if !r.up || r.draining {
		return errClosed
	}
	s := &seq{st: st, req: st.req, target: st.req.PromptTokens}
	st.seq = s
	r.waiting = append(r.waiting, s)
	r.lastActivity = now
	if !r.stepping {
		r.startStep(now)
	}
	return nil
}

// startStep plans the next engine step after vLLM V1's scheduler: running
// requests first (one decode token each, or their next prefill chunk), then
// new admissions from the waiting queue in FIFO order while the token budget
// and batch allow; a request whose adapter cannot get a slot is skipped (it
// keeps waiting), a request that does not fit in KV blocks the queue.
func (r *Replica) startStep(now time.Duration) {
	if !r.up || r.stepping {
		return
	}
	h := &r.cfg.Hardware
	budget := r.cfg.TokenBudget
	decodes := 0
	prefillTok := 0
	quad := 0.0
	loadSec := 0.0

	// Decodes: each needs room for one more token; out of blocks, preempt
	// the most recently admitted request (vLLM's recompute preemption).
	for i := 0; i < len(r.running); i++ {
		s := r.running[i]
		s.chunk = 0
		if !s.decode {
			continue
		}
		preempted := false
		for len(s.pinned)+s.private < blocksFor(s.target+s.gen+1) {
			if r.kv.ensureFree(1) {
				r.kv.private++
				s.private++
				continue
			}
			v := r.running[len(r.running)-1]
			r.preempt(v)
			if v == s {
				preempted = true
				break
			}
		}
		if preempted {
			break
		}
		s.chunk = -1
		decodes++
		budget--
	}
	// Chunked prefills in progress.
	for _, s := range r.running {
		if s.decode || budget <= 0 {
			continue
		}
		c := min(s.target-s.done, budget)
		s.chunk = c
		budget -= c
		prefillTok += c
		quad += float64(s.done+c)*float64(s.done+c) - float64(s.done)*float64(s.done)
	}
	// Admissions.
	for i := 0; i < len(r.waiting) && budget > 0 && len(r.running) < r.cfg.MaxBatch; {
		s := r.waiting[i]
		if s.req.Adapter != "" && !s.adapter {
			sec, ok := r.acquireAdapter(s.req.Adapter, now)
			if !ok {
				i++
				continue
			}
			s.adapter = true
			loadSec += sec
		}
		if !r.admitKV(s) {
			break
		}
		r.waiting = append(r.waiting[:i], r.waiting[i+1:]...)
		r.running = append(r.running, s)
		c := min(s.target-s.done, budget)
		s.chunk = c
		budget -= c
		prefillTok += c
		quad += float64(s.done+c)*float64(s.done+c) - float64(s.done)*float64(s.done)
	}
	if decodes == 0 && prefillTok == 0 {
		return
	}
	// Step cost: one forward pass. A decode step's fixed part (weights read
	// once, launches) already covers a prefill's fixed overhead in a mixed
	// step, so the prefill's fixed cost is paid only by prefill-only steps;
	// chunk tokens add their linear and attention costs (a chunk at context
	// offset o of length c attends to o+c tokens: (o+c)² − o² pairs).
	sec := loadSec
	if decodes > 0 {
		sec += h.DecodeStepSeconds(decodes)
	} else {
		sec += h.PrefillFixedSec
	}
	sec += float64(prefillTok)*h.PrefillSecPerToken + quad*h.PrefillSecPerToken2
	dur := max(time.Duration(sec*1e9), 1)
	r.stepping = true
	r.stepStart, r.stepEnd = now, now+dur
	r.sim.push(now+dur, evStep, r.Index, r.epoch)
}

// endStep applies the planned step's results at its end.
func (r *Replica) endStep(now time.Duration) {
	r.stepping = false
	r.lastActivity = now
	kept := r.running[:0]
	for _, s := range r.running {
		switch {
		case s.chunk > 0:
			s.done += s.chunk
			r.promptTokens += int64(s.chunk)
			if s.done >= s.target {
				s.decode = true
				for _, b := range s.pinned {
					r.kv.blocks[b].ready = true
				}
				// The last prefill pass yields the next token (the first
				// one, or the next after a preemption's recompute).
				s.gen++
				r.genTokens++
				r.sim.onToken(now, s, r)
			}
		case s.chunk < 0:
			s.gen++
			r.genTokens++
			r.sim.onToken(now, s, r)
		}
		s.chunk = 0
		if s.gen >= s.req.output {
			r.finish(now, s)
			continue
		}
		kept = append(kept, s)
	}
	for i := len(kept); i < len(r.running); i++ {
		r.running[i] = nil
	}
	r.running = kept
	r.startStep(now)
	r.sim.checkDrained(now, r)
}

// admitKV reserves KV blocks for s's prompt (plus one token), reusing cached
// prefix blocks; false if the cache cannot make room now.
func (r *Replica) admitKV(s *seq) bool {
	if s.kvFail == r.kv.gen+1 {
		return false // nothing released since the last try
	}
	chain := s.req.Chain()
	k := min(r.kv.cachedBlocks(chain), (s.target-1)/BlockTokens)
	// Pin every chain block already present (ready or being computed by
	// another request) so eviction cannot take them; count the new ones.
	s.pinned = s.pinned[:0]
	newHashed := 0
	for _, hsh := range chain {
		if i, ok := r.kv.idx[hsh]; ok {
			r.kv.pin(i)
			s.pinned = append(s.pinned, i)
		} else {
			newHashed++
		}
	}
	priv := blocksFor(s.target+1) - len(chain)
	if r.kv.available() < newHashed+priv || !r.kv.ensureFree(newHashed+priv) {
		for _, i := range s.pinned {
			r.kv.unpin(i)
		}
		s.pinned = s.pinned[:0]
		s.kvFail = r.kv.gen + 1
		return false
	}
	for _, hsh := range chain {
		if _, ok := r.kv.idx[hsh]; !ok {
			s.pinned = append(s.pinned, r.kv.insert(hsh, false))
		}
	}
	r.kv.private += priv
	s.private = priv
	s.cached = k * BlockTokens
	s.done = s.cached
	r.prefixQueries += int64(s.target)
	r.prefixHits += int64(s.cached)
	if !s.st.admitted {
		s.st.admitted = true
		s.st.cachedTokens = s.cached
	}
	return true
}

// release frees s's KV blocks and adapter reference. Blocks go back last
// first, as vLLM V1 frees them (single_type_kv_cache_manager.py, free: "in
// reverse order so that the tail blocks are evicted first"): a chain's
// head, which other prompts share, outlives its tail and an answer.
func (r *Replica) release(now time.Duration, s *seq) {
	for k := len(s.pinned) - 1; k >= 0; k-- {
		r.kv.unpin(s.pinned[k])
	}
	s.pinned = s.pinned[:0]
	r.kv.private -= s.private
	if s.private > 0 {
		r.kv.gen++
	}
	s.private = 0
	if s.adapter {
		r.releaseAdapter(s.req.Adapter, now)
		s.adapter = false
	}
}

// finish completes s. Its generated text stays cached as hashed blocks, as
// vLLM caches every full block of a request, generated tokens included: a
// multi-turn request's next turn quotes it and hits; any other request's
// answer is text of its own (a seed from its ID) that only takes KV space
// and ages out through the LRU like everything else released.
func (r *Replica) finish(now time.Duration, s *seq) {
	if s.private > 0 {
		segs := append(append([]Segment(nil), s.req.segs...), Segment{Seed: s.req.answerSeed(), Tokens: s.gen})
		ext := appendChain(nil, s.req.key, segs, s.req.PromptTokens+s.gen)
		for _, hsh := range ext[len(s.req.chain):] {
			if s.private == 0 {
				break
			}
			if _, ok := r.kv.idx[hsh]; ok {
				continue
			}
			s.private--
			r.kv.private--
			i := r.kv.insert(hsh, true)
			s.pinned = append(s.pinned, i)
		}
	}
	r.release(now, s)
	r.completed++
	r.sim.onComplete(now, s, r)
}

// preempt sends a running request back to the head of the queue, freeing
// its blocks; it recomputes its prompt and generated tokens when readmitted.
func (r *Replica) preempt(s *seq) {
	for i, x := range r.running {
		if x == s {
			r.running = append(r.running[:i], r.running[i+1:]...)
			break
		}
	}
	r.release(r.sim.now, s)
	s.target = s.req.PromptTokens + s.gen
	s.done, s.chunk, s.decode = 0, 0, false
	r.waiting = append([]*seq{s}, r.waiting...)
	r.preemptions++
}

// acquireAdapter takes a GPU slot reference for name, loading it (from host
// memory if cached there, else from storage) into a free slot or in place of
// the least recently used idle adapter. The load runs inside the step that
// first uses the adapter (vLLM activates LoRAs synchronously before the
// forward pass), so it delays the whole batch.
func (r *Replica) acquireAdapter(name string, now time.Duration) (float64, bool) {
	for i := range r.slots {
		if r.slots[i].name == name {
			r.slots[i].active++
			r.slots[i].lastUsed = now
			r.touchHost(name)
			return 0, true
		}
	}
	if r.cfg.MaxLoras <= 0 {
		return 0, false
	}
	slot := -1
	if len(r.slots) < r.cfg.MaxLoras {
		r.slots = append(r.slots, loraSlot{})
		slot = len(r.slots) - 1
	} else {
		for i := range r.slots {
			if r.slots[i].active == 0 && (slot < 0 || r.slots[i].lastUsed < r.slots[slot].lastUsed) {
				slot = i
			}
		}
		if slot < 0 {
			return 0, false
		}
	}
	tier := scoring.TierStorage
	if slices.Contains(r.host, name) {
		tier = scoring.TierHost
	}
	r.slots[slot] = loraSlot{name: name, active: 1, lastUsed: now}
	r.touchHost(name)
	r.adapterLoads++
	if tier == scoring.TierHost {
		r.hostLoads++
	} else {
		r.storageLoads++
	}
	return r.AdapterLoadSec(tier), true
}

func (r *Replica) releaseAdapter(name string, now time.Duration) {
	for i := range r.slots {
		if r.slots[i].name == name {
			r.slots[i].active--
			r.slots[i].lastUsed = now
			r.touchHost(name)
			return
		}
	}
}

// touchHost makes name the most recently used adapter of the host cache,
// adding it if absent and evicting the least recently used beyond
// MaxCPULoras. vLLM's worker LoRA manager touches its host (CPU) LRU
// cache every time a batch uses an adapter, not only when it loads one
// (vllm/lora/worker_manager.py, LRUCacheWorkerLoRAManager.add_adapter:
// an adapter already registered is looked up, which refreshes it), so an
// adapter in steady use stays cached. Refreshed on loads only, the most
// popular adapters, which stay on the GPU, aged out of host memory and
// reloaded from storage (lora seed 5: tenants 1 and 2, 108 and 99
// requests). Evicting from the host cache also frees an idle GPU slot
// holding the adapter: vLLM's registered adapters include the active
// ones, and removing one deactivates it.
func (r *Replica) touchHost(name string) {
	if i := slices.Index(r.host, name); i >= 0 {
		r.host = append(r.host[:i], r.host[i+1:]...)
	}
	r.host = append(r.host, name)
	for len(r.host) > max(r.cfg.MaxCPULoras, 0) {
		victim := r.host[0]
		r.host = r.host[1:]
		for i := range r.slots {
			if r.slots[i].name == victim && r.slots[i].active == 0 {
				r.slots = slices.Delete(r.slots, i, i+1)
				break
			}
		}
	}
}

// stop ends every request on the replica (crash or drain deadline) and
// returns them; the replica is down until restart.
func (r *Replica) stop() []*seq {
	out := make([]*seq, 0, len(r.running)+len(r.waiting))
	out = append(out, r.running...)
	out = append(out, r.waiting...)
	r.running, r.waiting = nil, nil
	r.up, r.stepping, r.draining = false, false, false
	r.epoch++
	r.kv.reset()
	r.slots = r.slots[:0]
	r.host = r.host[:0]
	return out
}

// restart brings a stopped replica back with empty caches (a new process).
func (r *Replica) restart() {
	r.up, r.draining, r.stepping = true, false, false
	r.epoch++
}

func (r *Replica) idle() bool { return len(r.running) == 0 && len(r.waiting) == 0 }
