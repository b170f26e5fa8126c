package router

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/gpuroute/gpuroute/plugin/config"
	"github.com/gpuroute/gpuroute/plugin/proxy"
	"github.com/gpuroute/gpuroute/scoring"
	"github.com/gpuroute/gpuroute/scoring/flow"
	"github.com/gpuroute/gpuroute/scoring/prefix"
)

// flowControl holds a request back while even its best replica cannot start
// it soon (its expected wait W over hold_wait_ms), and sends it when
// capacity frees, to the replica that is best then (late binding;
// docs/design.md "Flow control"). It owns the worker's queue of held
// requests (strict priority between bands, fair shares between tenants:
// scoring/flow), the held streams, and what the other workers said they
// hold (wake.go). The stream's route asks it after Pick (admit); the
// callbacks that free capacity (a first token, a stream's end), the tick
// and proxy_on_queue_ready ask it to release.
type flowControl struct {
	r     *root
	cfg   *config.FlowControl
	queue *flow.Queue
	// slots holds the held streams by their queue item's ID; free lists
	// the unused IDs.
	slots []*stream
	free  []uint32
	// releasing guards against a release that a release set off (a local
	// reply's callbacks).
	releasing bool
	// released counts the requests sent after being held, at the rate
	// Retry-After estimates the queue's drain from.
	released scoring.Rate
	peers    heldPeers
	stats    flowStats
	// shares counts this worker's requests in flight per tenant: a
	// tenant above its fair share is held at a shorter queue (bound).
	// Nil without a tenant_header: every request is the one tenant.
	shares *flow.Shares
}

// maxReleaseScan bounds the held requests one release offers to Pick:
// each costs a decision.
const maxReleaseScan = 8

// maxHeldChainBlocks bounds the prefix blocks a held request keeps for its
// late decision (256K characters at 64-character blocks).
const maxHeldChainBlocks = 4096

func (f *flowControl) setup(r *root, cfg *config.FlowControl) {
	f.r, f.cfg = r, cfg
	if !cfg.Enabled {
		return
	}
	f.queue = flow.New(cfg.QueueConfig())
	f.slots = make([]*stream, cfg.MaxHeld)
	f.free = make([]uint32, 0, cfg.MaxHeld)
	for i := cfg.MaxHeld - 1; i >= 0; i-- {
		f.free = append(f.free, uint32(i))
	}
	f.stats.bands = make([]bandStats, len(cfg.Bands))
	f.peers.r, f.peers.top = r, -1
	if cfg.TenantHeader != "" {
		f.shares = flow.NewShares(flow.DefaultShareTenants)
	}
}

// bound is the queue, in seconds, past which a request of s's tenant in
// band waits: the band's hold_wait_ms, shorter for a tenant with more than
// its fair share of this worker's requests in flight (flow.Shares.Bound:
// the engines' queues are first come, first served, so a tenant sending
// ten times another's rate must not keep them full; TestFlowFairShare).
func (f *flowControl) bound(s *stream, band int) float64 {
	return f.shares.Bound(s.tenant, f.cfg.Bands[band].HoldWaitSec)
}

// sent counts s's request in flight for its tenant (stream.dispatch);
// finished uncounts it when the stream ends.
func (f *flowControl) sent(s *stream) { f.shares.Add(s.tenant, 1) }

func (f *flowControl) finished(s *stream) { f.shares.Add(s.tenant, -1) }

// start defines the stats and learns the vm_id the wake queues are named
// under, once the host accepted the configuration (OnPluginStart).
func (f *flowControl) start() {
	if f.queue == nil {
		return
	}
	f.stats.define(f.cfg, &f.r.log)
	f.peers.start()
}

// held returns the number of requests this worker holds.
func (f *flowControl) held() int {
	if f.queue == nil {
		return 0
	}
	return f.queue.Len()
}

// classify sets the stream's band and tenant from its request headers
// (called in OnHttpRequestHeaders for an inference request): the band a
// client asks for counts only when the configuration lets clients choose
// it (config.Band.FromHeader); the model's band is applied later, when
// the body names the model (bandOf).
func (f *flowControl) classify(s *stream) {
	s.askedBand, s.tenant = -1, 0
	if f.queue == nil {
		return
	}
	if len(f.cfg.Bands) > 1 {
		if v, err := proxy.GetHeaderMapValue(proxy.MapTypeHttpRequestHeaders, f.cfg.PriorityHeader); err == nil {
			if b := f.cfg.BandNamed(v); b >= 0 && f.cfg.Bands[b].FromHeader {
				s.askedBand = b
			} else {
				f.stats.count(f.stats.refusedBand, 1)
			}
		}
	}
	if f.cfg.TenantHeader != "" {
		if v, err := proxy.GetHeaderMapValue(proxy.MapTypeHttpRequestHeaders, f.cfg.TenantHeader); err == nil && len(v) > 0 {
			s.tenant = tenantKey(v)
		}
	}
}

// tenantKey is the fairness key of a tenant header value: its stable
// hash, never 0 (0 stands for no tenant).
func tenantKey(v []byte) uint64 {
	h := prefix.HashString(string(v))
	return h | 1
}

// bandOf returns req's band: the one its client asked for (when allowed),
// else its model's or adapter's (model_bands), else the default.
func (f *flowControl) bandOf(s *stream, req *scoring.Request) int {
	if s.askedBand >= 0 {
		return s.askedBand
	}
	if len(f.cfg.ModelBands) > 0 {
		name := req.Model
		if req.Adapter != "" {
			name = req.Adapter
		}
		if b, ok := f.cfg.ModelBands[name]; ok {
			return b
		}
	}
	return f.cfg.DefaultBand
}

// prepare tells the ledger how many requests the fleet's routers hold, so
// that Pick counts them among those a placement delays.
func (f *flowControl) prepare() {
	if f.queue != nil {
		f.r.ledger.SetHeld(f.queue.Len() + f.peers.held)
	}
}

// admit decides, after Pick, whether the request goes now (handled false)
// or is held or shed (handled true, with the callback's answer). A request
// waits when even its best replica's W is over hold_wait_ms, or when a
// request of a higher band is already held (it joins the line rather than
// take the capacity that request waits for); a sheddable band's request
// gets a 429 instead (TestFlowHoldsWhenSaturated, TestFlowSheds). One that
// can start soon is not held behind its own band's held requests: each of
// those waits for the replica its rule prefers (a warm one, with a long
// queue) while this one goes where there is room, so holding it would
// idle that room and delay it by the others' wait (TestFlowNoHeadOfLine).
func (f *flowControl) admit(s *stream, d *scoring.Decision, req *scoring.Request, now int64) (types.Action, bool) {
	if f.queue == nil || d.Index < 0 {
		return 0, false
	}
	if lim := f.r.cfg.MaxWaitSec; lim > 0 && d.Top[0].WaitSec > lim {
		return 0, false // max_wait_ms answers it with a 429 (root.header): the operator's bound comes first
	}
	band := f.bandOf(s, req)
	saturated := d.Top[0].QueueSec > f.bound(s, band)
	if !saturated && !f.heldAbove(band) {
		return 0, false
	}
	if f.cfg.Bands[band].Sheddable {
		f.stats.count(f.stats.bands[band].shed, 1)
		return f.r.reject(429, detailsShed, shedBody, f.r.stats.overloaded, f.retryAfter(band)), true
	}
	if len(f.free) == 0 {
		f.stats.count(f.stats.bands[band].full, 1)
		return f.r.reject(429, detailsQueueFull, queueFullBody, f.r.stats.overloaded, f.retryAfter(band)), true
	}
	slot := f.free[len(f.free)-1]
	it := flow.Item{ID: slot, Band: band, Tenant: s.tenant,
		Cost: float64(req.PromptTokens) + float64(f.r.ledger.ExpectedOutput(req))}
	h, err := f.queue.Push(it, now)
	if err != nil {
		f.stats.count(f.stats.bands[band].full, 1)
		return f.r.reject(429, detailsQueueFull, queueFullBody, f.r.stats.overloaded, f.retryAfter(band)), true
	}
	f.free = f.free[:len(f.free)-1]
	f.slots[slot] = s
	s.hold(req, band, h, slot, now)
	f.stats.count(f.stats.bands[band].held, 1)
	f.stats.count(f.stats.bands[band].holding, 1)
	f.peers.announce(f)
	if !saturated {
		// Held only to keep its place in line: the fleet may have room,
		// so the line moves now, this request with it.
		f.release(now, s)
		if !s.held {
			if s.inline {
				s.inline = false
				return types.ActionContinue, true
			}
			return types.ActionPause, true // answered locally
		}
	}
	return types.ActionPause, true
}

// heldAbove reports whether a request of a band higher than band is held
// here or, as the other workers last said, there.
func (f *flowControl) heldAbove(band int) bool {
	for b := 0; b < band; b++ {
		if f.queue.BandLen(b) > 0 {
			return true
		}
	}
	return f.peers.top >= 0 && f.peers.top < band
}

// release offers the held requests, in their order, to the replicas as
// they stand now: each one whose best replica can start it within
// hold_wait_ms is sent there; requests past their band's max_queue_ms get
// a 429. current is the stream whose callback runs it (nil from the
// tick or a wake): its own request goes on by the callback's answer, not
// by proxy_continue_stream, which Envoy would undo with that answer.
func (f *flowControl) release(now int64, current *stream) (released int) {
	if f.queue == nil || f.queue.Len() == 0 || f.releasing {
		return 0
	}
	f.releasing = true
	f.queue.Expire(now, func(it flow.Item) { f.timedOut(it, now) })
	if f.peers.top < 0 || f.peers.top >= f.topBand() {
		// Strict priority across workers: while another worker holds a
		// request of a higher band, this one's wait (the capacity that
		// frees here wakes that worker).
		released = f.queue.Scan(maxReleaseScan, func(it flow.Item) bool { return f.try(it, now, current) })
	}
	f.releasing = false
	if current != nil {
		_ = proxy.SetEffectiveContext(current.id)
	}
	f.peers.announce(f)
	return released
}

// topBand returns the highest band this worker holds a request of, or
// len(bands) when it holds none.
func (f *flowControl) topBand() int {
	for b := range f.cfg.Bands {
		if f.queue.BandLen(b) > 0 {
			return b
		}
	}
	return len(f.cfg.Bands)
}

// try decides for held request it now: sent (true), still held (false), or
// answered locally because no replica can serve it (true).
func (f *flowControl) try(it flow.Item, now int64, current *stream) bool {
	s := f.slots[it.ID]
	r := f.r
	if err := proxy.SetEffectiveContext(s.id); err != nil {
		f.drop(s, f.stats.bands[it.Band].cancelled)
		return true
	}
	req := &s.heldReq
	replicas, cached := r.view.forRequest(s, req, now)
	r.ledger.SetHeld(f.queue.Len() - 1 + f.peers.held)
	d := &r.decision
	scoring.Pick(&r.params, req, replicas, cached, r.ledger, now, d)
	if d.Index >= 0 && d.Top[0].QueueSec > f.bound(s, it.Band) {
		return false
	}
	f.unhold(s, it.Band)
	if _, ok := r.header(d, now); !ok {
		return true // answered locally (503: no replica can serve it)
	}
	f.stats.count(f.stats.bands[it.Band].admitted, 1)
	f.released.Add(now, releaseRateWindow)
	s.dispatch(d, req, now)
	if s == current {
		s.inline = true
		return true
	}
	if err := proxy.ContinueStream(proxy.StreamTypeHttpRequest); err != nil {
		r.log.warn("cannot resume a held request: " + err.Error())
	}
	return true
}

// releaseRateWindow is the time constant of the release rate Retry-After
// estimates from, in seconds.
const releaseRateWindow = 10

// timedOut answers a request held past its band's max_queue_ms.
func (f *flowControl) timedOut(it flow.Item, now int64) {
	s := f.slots[it.ID]
	f.unhold(s, it.Band)
	f.stats.count(f.stats.bands[it.Band].timedOut, 1)
	if proxy.SetEffectiveContext(s.id) == nil {
		f.r.reject(429, detailsQueueTimeout, queueTimeoutBody, f.r.stats.overloaded, f.retryAfter(it.Band))
	}
}

// gone takes a held stream whose client left out of the queue (Envoy ends
// the stream: on_log, on_done, on_delete; nothing went upstream;
// TestFlowClientLeavesWhileHeld).
func (f *flowControl) gone(s *stream) {
	if s.held {
		f.drop(s, f.stats.bands[s.band].cancelled)
		f.peers.announce(f)
	}
}

// drop takes s out of the queue, counting k.
func (f *flowControl) drop(s *stream, k flowStat) {
	f.queue.Remove(s.handle)
	f.unhold(s, s.band)
	f.stats.count(k, 1)
}

// freed runs where capacity may have freed (a first token, a stream's
// end): the held requests here are offered it first; when none of them
// takes it, the worker holding the most urgent request elsewhere is woken.
func (f *flowControl) freed(now int64, current *stream) {
	if f.queue == nil {
		return
	}
	released := 0
	if f.queue.Len() > 0 {
		released = f.release(now, current)
	}
	if f.peers.held > 0 && released == 0 {
		f.peers.wake()
	}
}

// tick keeps the workers' notices current and moves the line: requests
// past their deadline are answered, the others offered the fleet as the
// tick's snapshot shows it.
func (f *flowControl) tick(now int64) {
	if f.queue == nil {
		return
	}
	f.peers.join(f.r.members.registry.Workers)
	f.peers.drain()
	f.release(now, nil)
	f.peers.announce(f)
}

// queueReady handles this worker's wake queue: notices from the other
// workers, and wakes, which move the line here.
func (f *flowControl) queueReady(queueID uint32) {
	if f.queue == nil || queueID != f.peers.own {
		return
	}
	if f.peers.drain() {
		f.release(proxy.NowNanos(), nil)
	}
}

// unhold frees s's slot: it is no longer held.
func (f *flowControl) unhold(s *stream, band int) {
	if !s.held {
		return
	}
	s.held = false
	f.slots[s.slot] = nil
	f.free = append(f.free, s.slot)
	f.stats.count(f.stats.bands[band].holding, -1)
}

// retryAfter estimates, in whole seconds (retrySec's bounds), when a
// request of band could be admitted: the held requests ahead of it over the
// recent release rate (TestRetryAfter).
func (f *flowControl) retryAfter(band int) int64 {
	ahead := 0
	for b := 0; b <= band && b < len(f.cfg.Bands); b++ {
		ahead += f.queue.BandLen(b)
	}
	rate := f.released.At(proxy.NowNanos(), releaseRateWindow)
	sec := 1.0
	if rate > 0 {
		sec = float64(ahead+1) / rate
	}
	return retrySec(sec)
}

// hold keeps what the late decision needs: the request's features with a
// copy of its prefix chain (the parser's is reused by the next request);
// its model's mask is the configuration's, valid while it lasts.
func (s *stream) hold(req *scoring.Request, band int, h flow.Handle, slot uint32, now int64) {
	s.held, s.band, s.handle, s.slot, s.heldNanos = true, band, h, slot, now
	chain := req.Chain[:min(len(req.Chain), maxHeldChainBlocks)]
	s.heldChain = append(s.heldChain[:0], chain...)
	s.heldReq = *req
	s.heldReq.Chain = s.heldChain
	s.heldReq.AdapterRecent = nil
}

// adopt takes over the requests the previous root of this VM holds (a
// configuration change makes Envoy create a new root in the same VM; the
// old one stops ticking): each joins this root's line in its band of the
// same name (else the default), in the order it had, keeping the time it
// was held, or, with flow control off here, is sent now
// (TestFlowHeldAcrossReconfigure).
func (f *flowControl) adopt(old *flowControl, now int64) {
	if old != nil && old.shares != nil && f.shares != nil {
		f.shares = old.shares // the streams it counted end under this root
	}
	if old == nil || old.queue == nil || old.queue.Len() == 0 {
		return
	}
	old.releasing = true // its queue empties here; nothing releases twice
	old.queue.Scan(old.queue.Len(), func(it flow.Item) bool {
		s := old.slots[it.ID]
		old.unhold(s, it.Band)
		s.root = f.r
		// The old mask numbers the old replicas (TestHeldKeepsModel).
		s.heldReq.ServedBy = f.r.cfg.ServedBy(s.heldReq.Model)
		f.take(s, old.cfg.Bands[it.Band].Name, it, now)
		return true
	})
	old.releasing = false
	f.peers.announce(f)
}

// take holds s, adopted from another root, or sends it when this root
// does not hold requests or has no room.
func (f *flowControl) take(s *stream, bandName string, it flow.Item, now int64) {
	if f.queue != nil && len(f.free) > 0 {
		band := f.cfg.BandNamed([]byte(bandName))
		if band < 0 {
			band = f.cfg.DefaultBand
		}
		slot := f.free[len(f.free)-1]
		it.ID, it.Band = slot, band
		if h, err := f.queue.Push(it, s.heldNanos); err == nil {
			f.free = f.free[:len(f.free)-1]
			f.slots[slot] = s
			s.held, s.band, s.handle, s.slot = true, band, h, slot
			f.stats.count(f.stats.bands[band].holding, 1)
			return
		}
	}
	if proxy.SetEffectiveContext(s.id) != nil {
		return
	}
	r := f.r
	req := &s.heldReq
	replicas, cached := r.view.forRequest(s, req, now)
	scoring.Pick(&r.params, req, replicas, cached, r.ledger, now, &r.decision)
	if _, ok := r.header(&r.decision, now); ok {
		s.dispatch(&r.decision, req, now)
		_ = proxy.ContinueStream(proxy.StreamTypeHttpRequest)
	}
}
