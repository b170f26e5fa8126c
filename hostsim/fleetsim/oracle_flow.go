package fleetsim

import (
	"time"

	"github.com/gpuroute/gpuroute/plugin/config"
	"github.com/gpuroute/gpuroute/scoring/flow"
)

// oracleFlow is the oracle's flow control: the plugin's (plugin/router's
// flow.go) on exact state, with the flow control the gpuroute policy
// configures the plugin with (flowControlJSON, parsed by the plugin's own
// parser): a request whose best replica cannot start it within its band's
// hold wait is held, in band and tenant order, and decided again whenever
// a request's prefill ends or one completes; a sheddable band's request is
// answered 429 instead of held, and so is one held past its band's
// max_queue_ms.
type oracleFlow struct {
	cfg   config.FlowControl
	queue *flow.Queue
	reqs  []*Request // by queue item ID
	free  []uint32
	last  time.Duration
	busy  bool
	// shares counts the requests in flight per tenant, as the plugin's
	// flow control does (a tenant above its fair share waits for a
	// shorter queue).
	shares *flow.Shares
}

// oracleRecheck is how often an idle moment re-decides for the held
// requests, as the plugin's tick does (the simulator's scrape period).
const oracleRecheck = 50 * time.Millisecond

func (o *oracleFlow) start() {
	cfg, err := config.Parse([]byte(`{"replicas":[{"name":"r","address":"10.0.0.1:8000"}],` + flowControlJSON + `}`))
	if err != nil {
		panic("fleetsim: the gpuroute policy's flow control is refused: " + err.Error())
	}
	o.cfg = cfg.Flow
	o.queue = flow.New(o.cfg.QueueConfig())
	o.reqs = make([]*Request, o.cfg.MaxHeld)
	o.free = o.free[:0]
	for i := o.cfg.MaxHeld - 1; i >= 0; i-- {
		o.free = append(o.free, uint32(i))
	}
	o.last = 0
	o.shares = nil
	if o.cfg.TenantHeader != "" {
		o.shares = flow.NewShares(flow.DefaultShareTenants)
	}
}

// tenantKey is req's fairness key (0: none).
func tenantKey(req *Request) uint64 {
	if req.Tenant == "" {
		return 0
	}
	return hashString(req.Tenant) | 1
}

// bound is the plugin's flowControl.bound on req.
func (o *oracleFlow) bound(band int, req *Request) float64 {
	return o.shares.Bound(tenantKey(req), o.cfg.Bands[band].HoldWaitSec)
}

// bandOf is the band req's client asks for where the configuration lets
// it, else the default.
func (o *oracleFlow) bandOf(req *Request) int {
	if b := o.cfg.BandNamed([]byte(req.Priority)); b >= 0 && o.cfg.Bands[b].FromHeader {
		return b
	}
	return o.cfg.DefaultBand
}

// Pick decides on exact state, or holds the request (Hold), or sheds it.
func (p *oracle) Pick(now time.Duration, req *Request, _ int) Decision {
	o := &p.held
	band := o.bandOf(req)
	p.decide(now, req, &p.sreq)
	if p.d.Index < 0 {
		return Reject(503)
	}
	ahead := false
	for b := 0; b < band; b++ { // the plugin's heldAbove
		ahead = ahead || o.queue.BandLen(b) > 0
	}
	if p.d.Top[0].QueueSec <= o.bound(band, req) && !ahead {
		o.shares.Add(tenantKey(req), 1)
		p.commit(now, &p.sreq)
		return Route(p.d.Index)
	}
	if o.cfg.Bands[band].Sheddable || len(o.free) == 0 {
		return Reject(429)
	}
	id := o.free[len(o.free)-1]
	if _, err := o.queue.Push(flow.Item{ID: id, Band: band, Tenant: tenantKey(req),
		Cost: float64(req.PromptTokens + req.output)}, int64(now)); err != nil {
		return Reject(429)
	}
	o.free = o.free[:len(o.free)-1]
	o.reqs[id] = req
	p.ledger.SetHeld(o.queue.Len())
	return Hold()
}

// Advance re-decides for the held requests every oracleRecheck.
func (p *oracle) Advance(now time.Duration) {
	if now-p.held.last >= oracleRecheck {
		p.held.last = now
		p.release(now)
	}
}

// Observe re-decides for the held requests where capacity frees: a
// prefill's end, a completion; a request's end (or a cancellation, which
// the runner may dispatch again) stops counting for its tenant.
func (p *oracle) Observe(ev *Event) {
	if ev.Kind == Completed || ev.Kind == Cancelled {
		p.held.shares.Add(tenantKey(ev.Req), -1)
	}
	if ev.Kind == FirstToken || ev.Kind == Completed {
		p.release(ev.At)
	}
}

// release answers the held requests past their deadline and sends those
// whose best replica can start them now, in service order.
func (p *oracle) release(now time.Duration) {
	o := &p.held
	if o.queue.Len() == 0 || o.busy {
		return
	}
	o.busy = true
	o.queue.Expire(int64(now), func(it flow.Item) {
		p.f.Release(o.reqs[it.ID], Reject(429))
		o.drop(it.ID)
	})
	o.queue.Scan(8, func(it flow.Item) bool {
		req := o.reqs[it.ID]
		p.ledger.SetHeld(o.queue.Len() - 1)
		p.decide(now, req, &p.sreq)
		if p.d.Index >= 0 && p.d.Top[0].QueueSec > o.bound(it.Band, req) {
			return false
		}
		d := Reject(503)
		if p.d.Index >= 0 {
			o.shares.Add(tenantKey(req), 1)
			p.commit(now, &p.sreq)
			d = Route(p.d.Index)
		}
		p.f.Release(req, d)
		o.drop(it.ID)
		return true
	})
	p.ledger.SetHeld(o.queue.Len())
	o.busy = false
}

func (o *oracleFlow) drop(id uint32) {
	o.reqs[id] = nil
	o.free = append(o.free, id)
}
