package router

import (
	"strconv"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/gpuroute/gpuroute/plugin/config"
	"github.com/gpuroute/gpuroute/plugin/internal/gcdrive"
	"github.com/gpuroute/gpuroute/plugin/proxy"
	"github.com/gpuroute/gpuroute/plugin/shared"
	"github.com/gpuroute/gpuroute/plugin/version"
	"github.com/gpuroute/gpuroute/scoring"
	"github.com/gpuroute/gpuroute/scoring/prefix"
)

// Capacity bounds of one root's per-request state, allocated once at
// configuration so the request path never grows them.
const (
	maxInFlight    = 1 << 14 // concurrent requests one worker accounts for
	maxChainBytes  = 1 << 20 // prompt characters hashed into the chain
	maxFreeStreams = 1024
	// maxReplyBytes bounds the whole (not streamed) response a stream
	// gathers to read its usage and answer: 1 MiB, an answer of about
	// 250,000 tokens.
	maxReplyBytes = 1 << 20
	// indexStride checkpoints every 16th block of a chain in the prefix
	// index: the shared index then covers a whole fleet's KV cache in tens
	// of thousands of entries, and k still resolves to a fraction of a
	// prefill's cost.
	indexStride = 16
	// Bounds of the prefix index's entry budget: it is copied on every
	// read of the shared prefix index (prefixShare).
	minIndexEntries = 4096
	maxIndexEntries = 1 << 16
)

// firstTickMillis is the wait for a root's first tick: a worker joins, takes
// the lease and scrapes right after its configuration rather than a whole
// tick_ms later (TestConfigure).
const firstTickMillis = 1

// sweepAfter drops a flight whose response callbacks never came (a lost
// stream must not count as load forever); no generation runs this long.
const sweepAfter = 30 * time.Minute

// gcFinishBytes bounds the garbage a tick allocates to end a collection
// that began since the last one (gcdrive.Finish); a cycle that needs more
// goes on at the next tick. TestTickEndsCollection holds it.
const gcFinishBytes = 8 << 20

// root is one root (plugin) context: a configuration and the parts that act
// on it. Each part owns its state and says, in its file, who reads it; the
// root wires them together and calls them in order from the tick and from
// the stream's callbacks. Not safe for concurrent use: the host calls one
// callback at a time per VM.
type root struct {
	types.DefaultPluginContext
	id       uint32
	vm       *vm
	cfg      *config.Config
	params   scoring.Params
	configID uint64 // shared.ConfigIDOf the replica list: shared state of another list is ignored
	ticked   bool   // the first tick set the period to tick_ms

	// The decision: what a request asks (features), Pick's input (view),
	// the outstanding work and the prefix index it prices by, and Pick's
	// output.
	features features
	view     replicaView
	ledger   *scoring.Ledger
	index    *prefix.Index
	decision scoring.Decision
	feedback feedback // what the engines report corrects the index
	sessions sessions // soft session affinity (session.go)

	calib    calibration  // prefill cost per replica, learned from TTFT
	health   health       // scrape failures and passive ejection → eligibility, evidence age
	scrape   scraping     // the scrape lease, metrics calls, the fleet snapshot
	members  membership   // this worker's id and the worker list
	work     workShare    // in-flight work shared between the workers
	prefixes prefixShare  // the prefix index shared between the workers
	adapters adapterShare // LoRA placements shared between the workers
	peers    peering      // placements and work exchanged with other gateways
	flow     flowControl  // requests held back while the fleet is saturated

	// retirees are the replicas a configuration change removed or gave a
	// new address while this VM's streams were still on them: closed to
	// new work, they drain until their deadline (reconfig.go). Their ledger
	// and stats indices follow the configured replicas'.
	retirees []retiree
	// adopted says a newer root of this VM took this one's state over: it
	// routes, ticks and writes shared state no more.
	adopted bool

	// free recycles stream contexts so a new stream allocates nothing in
	// steady state (live streams are on the vm).
	free []*stream

	stats stats
	log   logPrefix
	// replies is scratch for the local replies' bodies (status, 503),
	// replyHeaders their headers (content type, Retry-After), statusWork
	// the status endpoint's scratch.
	replies      []byte
	replyHeaders [2][2]string
	statusWork   []scoring.Work
	placements   []scoring.AdapterPlacement
}

// OnPluginStart parses the configuration and sets the root up. A bad
// configuration is logged with the parse error and refused: Envoy keeps the
// previous root serving (docs/design.md "Configuration changes";
// TestReconfigure).
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
	now := proxy.NowNanos()
	h := planHandover(r.vm.serving, cfg, now)
	if err := r.setup(cfg, h.retirees); err != nil {
		r.log.error("configuration refused, the previous one keeps serving: " + err.Error())
		return types.OnPluginStartStatusFailed
	}
	if err := proxy.SetTickPeriodMillis(firstTickMillis); err != nil {
		r.log.error("cannot set the tick period: " + err.Error())
		return types.OnPluginStartStatusFailed
	}
	r.stats.define(&r.log, r.replicaNames())
	r.flow.start()
	r.log.info("gpuroute " + version.Release + ": configured " + strconv.Itoa(len(cfg.Replicas)) + " replicas, tick " +
		strconv.FormatUint(uint64(cfg.TickMillis), 10) + " ms" + h.summary())
	// Envoy runs proxy_on_configure first in a throwaway canary VM that it
	// destroys without proxy_on_done: here the root only reads the fleet
	// view, and takes the serving root's state over; joining the worker
	// list, the lease and the scrapes wait for its first tick,
	// firstTickMillis away, which a canary never gets
	// (TestCanaryLeavesNoTrace).
	r.adopt(&h, now)
	r.vm.serving = r
	r.scrape.readSnapshot()
	r.health.sync()
	r.health.presentAll(now)
	return types.OnPluginStartStatusOK
}

// setup builds the root's parts for cfg, with the retirees a handover
// brings (reconfig.go). Everything the request path uses is allocated here.
func (r *root) setup(cfg *config.Config, retirees []retiree) error {
	n := len(cfg.Replicas)
	r.cfg = cfg
	r.params = cfg.Params
	r.retirees = retirees
	names := make([]string, n)
	for i := range cfg.Replicas {
		names[i] = cfg.Replicas[i].Name + "\x00" + cfg.Replicas[i].AddressText
	}
	r.configID = shared.ConfigIDOf(names)
	r.calib.setup(cfg)
	// The retirees' requests count in the ledger, after the configured
	// replicas: Pick sees only those.
	r.ledger = scoring.NewLedger(r.params, n+len(retirees), maxInFlight)
	r.index = prefix.NewIndex(prefix.IndexConfig{BlockChars: cfg.BlockChars, MaxReplicas: n,
		Stride: indexStride, MaxEntries: indexEntries(cfg.BlockChars, r.calib.priors)})
	r.features.setup(cfg, &r.stats)
	r.feedback.setup(r.index, &r.prefixes, &r.stats, n, cfg.BlockChars, cfg.LearnKVCapacity, cfg.RecordAnswers)
	for i := range r.calib.priors {
		r.feedback.capacity(i, r.calib.priors[i].KVCapacityTokens)
	}
	r.sessions.setup()
	if err := r.scrape.setup(cfg, r.configID, r.log, &r.stats, r.snapshotApplied); err != nil {
		return err
	}
	r.health.setup(cfg, r.configID, &r.scrape.snap, r.log, &r.stats)
	r.members.setup(r.id, cfg, r.log)
	r.work.setup(n, r.configID, peerWorkTTL(cfg), r.ledger, &r.members, &r.calib, &r.health)
	r.prefixes.setup(r.index, r.configID, &r.members, r.log)
	r.adapters.setup(cfg, r.configID, r.ledger, &r.members)
	r.peers.setup(cfg, r.configID, peerWorkTTL(cfg), &r.members, &r.work, r.log, &r.stats)
	r.view.setup(cfg, r)
	r.flow.setup(r, &cfg.Flow)
	r.replies = make([]byte, 0, 4096)
	r.statusWork = make([]scoring.Work, n)
	r.replyHeaders = [2][2]string{jsonHeaders[0], {headerRetryAfter, ""}}
	return nil
}

// replicaNames lists the configured replicas' names, then the retirees'.
func (r *root) replicaNames() []string {
	names := make([]string, 0, len(r.cfg.Replicas)+len(r.retirees))
	for i := range r.cfg.Replicas {
		names = append(names, r.cfg.Replicas[i].Name)
	}
	for i := range r.retirees {
		names = append(names, r.retirees[i].name)
	}
	return names
}

// snapshotApplied is called when scraping applied a new fleet snapshot:
// health judges the replicas by its scrape times and failures, and the
// prefix index bounds each replica by the KV capacity it reports.
func (r *root) snapshotApplied(now int64) {
	for i := range r.cfg.Replicas {
		r.health.present(i, now)
		if c := r.scrape.figures[i].kvCapacityTokens; c > 0 {
			r.feedback.capacity(i, c)
		}
	}
}

// OnPluginDone stops this root's tick and passes its tallied stats on; a
// root whose state no newer root took over also gives up the lease and
// leaves the shared worker list. Envoy deletes the root after a
// reconfiguration once its streams drained.
func (r *root) OnPluginDone() bool {
	_ = proxy.SetTickPeriodMillis(0)
	r.stats.stop()
	if r.cfg != nil && !r.adopted {
		r.scrape.giveUpLease(r.members.worker)
		r.members.leave()
	}
	if r.vm.serving == r {
		r.vm.serving = nil
	}
	return true
}

// OnTick runs the root's periodic work; the first tick sets the period to
// tick_ms. A root whose state a newer root took over does nothing.
func (r *root) OnTick() {
	if r.cfg == nil || r.adopted {
		return
	}
	if !r.ticked {
		r.ticked = true
		if err := proxy.SetTickPeriodMillis(r.cfg.TickMillis); err != nil {
			r.log.error("cannot set the tick period: " + err.Error())
		}
	}
	r.tick(proxy.NowNanos())
}

// tick is the root's periodic work, in order: join the worker list, hold or
// contest the scrape lease (the leader scrapes), refresh the fleet snapshot
// and the replicas' health, exchange in-flight work and LoRA placements
// with the other workers, merge the prefix index (and journal it for the
// peer gateways), ask the peers, and end what a drain deadline has closed.
func (r *root) tick(now int64) {
	if !r.members.registered {
		r.members.join(now)
	}
	r.scrape.holdLease(now, r.members.worker)
	if r.scrape.leader {
		r.scrape.scrape(now)
	}
	r.scrape.readSnapshot()
	r.health.sync()
	// Ejections end and evidence ages between snapshots too, so every
	// replica is judged again whether or not the shared state changed.
	r.health.presentAll(now)
	r.peers.readRemoteWork(now, r.scrape.leader)
	if !r.cfg.Scraper {
		// A scraper routes nothing: it has no in-flight work or
		// placements of its own to share.
		r.exchangeWork(now)
		r.adapters.exchange(now)
	}
	if r.prefixes.merge(now, r.peers.imports) {
		r.peers.journalDispatches(now, r.prefixes.outbox)
		r.prefixes.outbox.Reset()
		if r.peers.imports != nil {
			r.peers.imports.Reset()
		}
	}
	if r.scrape.leader && len(r.peers.links) > 0 {
		r.peers.ask()
	}
	r.enforceDrains(now)
	if !r.cfg.Scraper {
		r.flow.tick(now)
	}
	if n := r.ledger.Sweep(now - int64(sweepAfter)); n > 0 {
		r.stats.add(r.stats.sweptFlights, int64(n))
	}
	r.stats.flush()
	// A collection begun since the last tick ends here rather than
	// marking on through the requests (gcdrive).
	gcdrive.Finish(gcFinishBytes)
}

// exchangeWork publishes this worker's in-flight work per replica and adds
// up the other workers' into the view's PeerWork. The tick refreshes the
// record and the worker list; between ticks the request path keeps both
// directions current (workShare.publishOn after each change, the view's
// gather before each decision), so workers deciding in the same burst see
// each other's dispatches (TestWorkersSeeEachOthersDispatches).
func (r *root) exchangeWork(now int64) {
	if r.members.worker == 0 {
		return
	}
	r.ledger.SyncSnapshots(r.view.sync())
	r.work.refresh(now)
	r.work.retain()
	r.view.gatherPeerWork(now)
}

// OnQueueReady reads this worker's wake queue (flow control).
func (r *root) OnQueueReady(queueID uint32) {
	if r.cfg != nil {
		r.flow.queueReady(queueID)
	}
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
	// Every open stream is on the VM's list: a new root adopts them all
	// (reconfig.go), and the tick resets those a drain deadline closed.
	s.liveAt = len(r.vm.live)
	r.vm.live = append(r.vm.live, s)
	// Before the stream's decision: another worker may have just ejected a
	// replica (a client's re-send comes through any worker).
	if r.health.sync() {
		r.health.presentAll(proxy.NowNanos())
	}
	return s
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

// peerWorkTTL is how long a worker's or a peer gateway's published work
// counts: a few lease lifetimes, after which its writer is presumed gone.
func peerWorkTTL(cfg *config.Config) int64 {
	return 3 * int64(cfg.LeaseMillis) * int64(time.Millisecond)
}

// logPrefix prefixes log lines with the root id, precomputed once.
type logPrefix string

func newLogPrefix(id uint32) logPrefix {
	return logPrefix("gpuroute: root " + strconv.FormatUint(uint64(id), 10) + ": ")
}

func (p logPrefix) info(msg string)  { proxy.LogInfo(string(p) + msg) }
func (p logPrefix) warn(msg string)  { proxy.LogWarn(string(p) + msg) }
func (p logPrefix) error(msg string) { proxy.LogError(string(p) + msg) }
