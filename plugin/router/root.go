package router

import (
	"strconv"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/gpuroute/gpuroute/plugin/config"
	"github.com/gpuroute/gpuroute/plugin/metrics"
	"github.com/gpuroute/gpuroute/plugin/openai"
	"github.com/gpuroute/gpuroute/plugin/proxy"
	"github.com/gpuroute/gpuroute/plugin/shared"
	"github.com/gpuroute/gpuroute/scoring"
	"github.com/gpuroute/gpuroute/scoring/prefix"
)

// Capacity bounds of one root's per-request state, allocated once at
// configuration so the request path never grows them.
const (
	maxInFlight   = 1 << 14 // concurrent requests one worker accounts for
	maxChainBytes = 1 << 20 // prompt characters hashed into the chain
	outboxEntries = 256     // dispatches between two prefix-index merges
	// shareSeenSlots sizes the set that drops the placements a merge
	// appended already (shared.Seen): it holds 2,048, the checkpoints of
	// 62 dispatches of distinct 32 KB prompts or of many more that share
	// prefixes; past that the rest of the outbox is appended whole.
	shareSeenSlots = 4096
	maxFreeStreams = 1024
	// indexStride checkpoints every 16th block: k resolves to 256 tokens
	// at 64-char blocks (~40 ms of H100 prefill), and one checkpoint stands
	// for 256 tokens of KV, so the shared index covers a whole fleet's KV in
	// tens of thousands of entries.
	indexStride = 16
	// outboxHashes is the checkpoints shared per dispatch: prompts up to
	// 4096 blocks (256k characters); a longer one shares its beginning.
	outboxHashes = 4096/indexStride + 1
	// Bounds of the shared index's entry budget (10 bytes each, copied on
	// every read of shared data: at most 640 KB).
	minIndexEntries = 4096
	maxIndexEntries = 1 << 16
)

// root is one root (plugin) context: a configuration and everything the
// worker VM knows under it. Not safe for concurrent use; the host calls one
// callback at a time per VM.
type root struct {
	types.DefaultPluginContext
	id  uint32
	vm  *vm
	cfg *config.Config

	// replicas is the decision's view, index-aligned with cfg.Replicas;
	// priors holds each replica's configured hardware, calibrators refine it.
	replicas    []scoring.Replica
	priors      []scoring.Hardware
	calibrators []scoring.Calibrator
	params      scoring.Params
	ledger      *scoring.Ledger
	index       *prefix.Index
	hasher      prefix.Hasher
	// textMemo is the parser's writer: the hasher with a memo of the long
	// strings it hashed (openai.Memo), so that a system prompt or a turn
	// met again is compared and its blocks replayed, not decoded and
	// hashed again (BenchmarkParseTextRouter/memo).
	textMemo prefix.Memo
	parser   openai.Parser
	request  openai.Request
	decision scoring.Decision
	cached   []int
	scratch  []byte
	models   map[string]string // interned base model names
	// lastModel is the last "model" value resolved (resolveModel).
	lastModel struct {
		name          []byte
		base, adapter string
		ok            bool
	}
	// featuresScratch and destScratch are reused per request.
	featuresScratch scoring.Request
	destScratch     []byte

	// Shared state (shared.go).
	configID  uint64
	worker    uint64
	workerKey string
	leader    bool
	snap      shared.Snapshot
	snapCAS   uint32
	outbox    *shared.Outbox
	// shareGen and shareEnd say how much of the shared prefix index
	// (shared.PrefixShare) the local index holds: the base of generation
	// shareGen and its tail up to byte shareEnd; an idle worker skips a
	// value it already found unreadable (shareBadCAS) instead of logging
	// it every tick. shareAppend appends an outbox entry to scratch,
	// without the placements shareSeen holds (one merge's), through
	// shareFresh; shareScratch receives a tail entry's checkpoints.
	shareGen     uint64
	shareEnd     int
	shareBadCAS  uint32 // CAS of the last value found unreadable (0: none)
	shareAppend  func(replica int, checkpoints []uint64)
	shareSeen    *shared.Seen
	shareFresh   []uint64
	shareScratch []uint64
	board        shared.Board
	workKeys     []string // the work-record keys of the workers in workKeysOf
	workKeysOf   []uint64
	// What Replica.PeerWork holds was gathered (gatherPeerWork) with the
	// board or not, and with the peer gateways' sum of remoteGathered (a
	// remoteGen): when either moves, every replica's is set again.
	peerWorkSet    bool
	localGathered  bool
	remoteGathered uint64
	record         shared.WorkRecord
	workBuf        []byte // record's encoding, patched in place per request
	workMoved      []int  // refreshWork's scratch
	registry       shared.Registry
	// adapters and peerAdapters carry LoRA placements between workers.
	adapters, peerAdapters shared.AdapterRecord
	registered             bool
	keyScratch             []byte
	// checkpoints is scratch for a dispatch's chain reduced to the hashes
	// the index stores (what the outbox shares).
	checkpoints []uint64
	// adapterKey, adapterHeld and adapterRecent are scratch for looking up
	// where the request's adapter was sent (the index records adapters).
	adapterKey    [1]uint64
	adapterHeld   []int
	adapterRecent []bool

	// Scraping (scrape.go): one parser per replica (engines differ), the
	// calls in flight, and the leader's copy of the snapshot it publishes.
	// scrapeRoundOf[i] is the tick whose call to replica i is outstanding
	// (0: none); scraping counts the current tick's outstanding calls.
	parsers       []*metrics.Parser
	scrapeDone    []func(numHeaders, bodySize, numTrailers int) // per replica
	sample        metrics.Sample
	scraping      int
	scrapeRound   uint32
	scrapeRoundOf []uint32
	scrapeDirty   bool

	// Gateway peer exchange (peers.go): the journal of this gateway's
	// placements, placements imported from peers awaiting the next merge,
	// the leader's links to the peers and the peers' summed work.
	journal       *shared.Journal
	journalAppend func(replica int, chain []uint64)
	importBox     *shared.Outbox
	importEntry   func(replica int, chain []uint64)
	peerToken     []byte
	peerAddrs     []string
	peerMap       []int
	exportWork    []scoring.Work
	peers         []peerLink
	peerDone      []func(numHeaders, bodySize, numTrailers int)
	peerExport    shared.PeerExport
	remote        shared.WorkRecord
	remoteWork    []scoring.Work
	remoteRate    float64 // the peer gateways' dispatch rate, with remoteWork
	remoteNanos   int64
	remoteGen     uint64 // counts the changes of remoteWork
	remoteCAS     uint32

	// Passive health (passive.go): routed requests' outcomes per replica,
	// shared between the worker VMs.
	passive passive

	// free recycles stream contexts so a new stream allocates nothing in
	// steady state (live streams are on the vm).
	free []*stream

	stats stats
	log   logPrefix
}

// OnPluginStart parses the configuration and sets the root up. A bad
// configuration is logged with the parse error and refused: Envoy keeps the
// previous root serving (DESIGN.md §3).
func (r *root) OnPluginStart(int) types.OnPluginStartStatus {
	r.log = newLogPrefix(r.id)
	data, err := proxy.GetPluginConfiguration()
	if err == proxy.ErrNotFound {
		data, err = nil, nil // some hosts hand no buffer for an empty configuration
	}
	if err != nil {
		r.log.error("cannot read the plugin configuration: " + err.Error())
		return types.OnPluginStartStatusFailed
	}
	cfg, err := config.Parse(data)
	if err != nil {
		r.log.error("configuration refused, the previous one keeps serving: " + err.Error())
		return types.OnPluginStartStatusFailed
	}
	if err := r.setup(cfg); err != nil {
		r.log.error("configuration refused, the previous one keeps serving: " + err.Error())
		return types.OnPluginStartStatusFailed
	}
	if err := proxy.SetTickPeriodMillis(cfg.TickMillis); err != nil {
		r.log.error("cannot set the tick period: " + err.Error())
		return types.OnPluginStartStatusFailed
	}
	r.stats.define(&r.log)
	r.log.info("configured " + strconv.Itoa(len(cfg.Replicas)) + " replicas, tick " +
		strconv.FormatUint(uint64(cfg.TickMillis), 10) + " ms")
	r.tick(proxy.NowNanos())
	return types.OnPluginStartStatusOK
}

// setup builds the root's state for cfg. Everything the request path uses
// is allocated here.
func (r *root) setup(cfg *config.Config) error {
	n := len(cfg.Replicas)
	r.cfg = cfg
	r.params = cfg.Params
	r.replicas = make([]scoring.Replica, n)
	r.priors = make([]scoring.Hardware, n)
	r.calibrators = make([]scoring.Calibrator, n)
	r.parsers = make([]*metrics.Parser, n)
	r.scrapeDone = r.scrapeCallbacks(n)
	r.cached = make([]int, n)
	names := make([]string, n)
	for i := range cfg.Replicas {
		names[i] = cfg.Replicas[i].Name + "\x00" + cfg.Replicas[i].AddressText
	}
	r.configID = shared.ConfigIDOf(names)
	type parserKey struct {
		engine metrics.Engine
		names  metrics.Names
	}
	parsers := make(map[parserKey]*metrics.Parser)
	for i := range cfg.Replicas {
		c := &cfg.Replicas[i]
		hw := c.Profile
		if c.KVCapacityTokens > 0 {
			hw.KVCapacityTokens = c.KVCapacityTokens
		}
		r.priors[i] = hw
		r.replicas[i] = scoring.Replica{
			Addr:             c.AddressText,
			AddrHash:         prefix.HashString(c.AddressText),
			Engine:           c.Engine.String(),
			Hardware:         hw,
			AdapterSlots:     c.AdapterSlots,
			AdapterHostSlots: c.AdapterHostSlots,
			Healthy:          true,
		}
		if c.MetricsCluster != "" {
			// One parser per engine and metric names, not per replica: a
			// parser keeps nothing from one page to the next, and one each
			// held a kilobyte of tables per replica (64 KiB for 64) for the
			// leader's scrape to walk.
			key := parserKey{c.Engine, c.MetricNames}
			p := parsers[key]
			if p == nil {
				var err error
				if p, err = metrics.NewParser(c.Engine, c.MetricNames); err != nil {
					return err
				}
				parsers[key] = p
			}
			r.parsers[i] = p
		}
	}
	r.applyDrains()
	r.ledger = scoring.NewLedger(r.params, n, maxInFlight)
	r.index = prefix.NewIndex(prefix.IndexConfig{BlockChars: cfg.BlockChars, MaxReplicas: n,
		Stride: indexStride, MaxEntries: indexEntries(cfg.BlockChars, r.priors)})
	for i := range r.priors {
		r.index.SetCapacityTokens(i, r.priors[i].KVCapacityTokens)
	}
	r.hasher.Init(cfg.BlockChars, maxChainBytes/cfg.BlockChars)
	r.textMemo.Init(&r.hasher, 0, 0, 0)
	r.outbox = shared.NewOutbox(outboxEntries, outboxHashes)
	r.checkpoints = make([]uint64, 0, outboxHashes)
	r.shareScratch = make([]uint64, outboxHashes)
	r.shareSeen = shared.NewSeen(shareSeenSlots)
	r.shareFresh = make([]uint64, 0, outboxHashes)
	r.shareAppend = func(replica int, checkpoints []uint64) {
		r.shareFresh = r.shareSeen.AppendNew(r.shareFresh[:0], replica, checkpoints)
		r.scratch = shared.AppendPrefixShareEntry(r.scratch, replica, r.shareFresh)
	}
	r.adapterHeld = make([]int, n)
	r.adapterRecent = make([]bool, n)
	r.snap.ConfigID = r.configID
	r.snap.SetLen(n)
	r.board.ConfigID = r.configID
	r.record.ConfigID = r.configID
	r.record.Work = make([]scoring.Work, n)
	r.workMoved = make([]int, 0, n)
	r.scratch = make([]byte, 0, 4096)
	r.models = make(map[string]string)
	r.lastModel.name = make([]byte, 0, openai.MaxModelBytes)
	r.setupPeers()
	return nil
}

// applyDrains copies the configured admission states into the decision's
// view (a configuration update is how a drain starts).
func (r *root) applyDrains() {
	for i := range r.cfg.Replicas {
		c := &r.cfg.Replicas[i]
		rep := &r.replicas[i]
		switch c.State {
		case config.StateDraining:
			rep.Drain = scoring.Draining
			rep.DrainDeadlineNanos = c.DrainDeadlineUnixMillis * int64(time.Millisecond)
		case config.StateDrained:
			rep.Drain = scoring.Drained
		default:
			rep.Drain = scoring.Serving
		}
	}
}

// OnPluginDone stops this root's tick, passes its tallied stats on and
// leaves the shared worker list; Envoy deletes the root after a
// reconfiguration once its streams drained.
func (r *root) OnPluginDone() bool {
	_ = proxy.SetTickPeriodMillis(0)
	r.stats.stop()
	if r.cfg != nil {
		r.leave()
	}
	return true
}

// OnTick runs the root's periodic work (shared.go).
func (r *root) OnTick() {
	if r.cfg == nil {
		return
	}
	r.tick(proxy.NowNanos())
}

// NewHttpContext hands out a recycled stream context.
func (r *root) NewHttpContext(contextID uint32) types.HttpContext {
	if r.cfg == nil {
		return nil
	}
	var s *stream
	if n := len(r.free); n > 0 {
		s, r.free = r.free[n-1], r.free[:n-1]
	} else {
		s = &stream{}
	}
	s.reset(r, contextID)
	// Before the stream's decision: another worker may have just ejected a
	// replica (a client's re-send comes through any worker).
	if r.syncSuspects() {
		r.presentAll(proxy.NowNanos())
	}
	return s
}

// recordPrefix records a shared dispatch's checkpoints in the prefix index.
func (r *root) recordPrefix(replica int, checkpoints []uint64) {
	r.index.RecordCheckpoints(replica, checkpoints)
}

// indexEntries sizes the prefix index to the fleet: one checkpoint per
// indexStride blocks of every replica's KV cache, with a quarter of slack.
func indexEntries(blockChars int, profiles []scoring.Hardware) int {
	tokensPerEntry := max(indexStride*blockChars/prefix.CharsPerToken, 1)
	total := 0
	for i := range profiles {
		total += profiles[i].KVCapacityTokens / tokensPerEntry
	}
	return min(max(total*5/4, minIndexEntries), maxIndexEntries)
}

// logPrefix prefixes log lines with the root id, precomputed once.
type logPrefix string

func newLogPrefix(id uint32) logPrefix {
	return logPrefix("gpuroute: root " + strconv.FormatUint(uint64(id), 10) + ": ")
}

func (p logPrefix) info(msg string)  { proxy.LogInfo(string(p) + msg) }
func (p logPrefix) warn(msg string)  { proxy.LogWarn(string(p) + msg) }
func (p logPrefix) error(msg string) { proxy.LogError(string(p) + msg) }

// replicaIndex returns the index of the replica at addr, or -1.
func (r *root) replicaIndex(addr string) int {
	for i := range r.replicas {
		if r.replicas[i].Addr == addr {
			return i
		}
	}
	return -1
}
