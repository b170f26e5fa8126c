package fleetsim

import (
	"container/heap"
	"errors"
	"io"
	"strconv"
	"time"
)

// Config describes the fleet and the runner's knobs. Zero fields take
// defaults.
type Config struct {
	// Replicas lists the replicas (UniformReplicas or ParseHardware).
	Replicas []ReplicaConfig
	// ScrapeInterval is how often routers' metric snapshots refresh
	// (default 50 ms, the metrics refresh interval of the Gateway API
	// Inference Extension's endpoint picker and llm-d).
	ScrapeInterval time.Duration
	// StreamEvery is how many output tokens make one Tokens event
	// (default 16).
	StreamEvery int
	// MaxAttempts bounds dispatches per request (default 5); beyond it the
	// request fails.
	MaxAttempts int
	// LoadSampleEvery is the period of the per-replica load series in the
	// result (default 1 s).
	LoadSampleEvery time.Duration
	// Horizon stops the run at this virtual time (0: run until every
	// request is done). Unfinished requests count as failed.
	Horizon time.Duration
	// Seed is reported in results; fleets themselves are deterministic.
	Seed int64
}

func (c Config) withDefaults() Config {
	if c.ScrapeInterval <= 0 {
		c.ScrapeInterval = 50 * time.Millisecond
	}
	if c.StreamEvery <= 0 {
		c.StreamEvery = 16
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 5
	}
	if c.LoadSampleEvery <= 0 {
		c.LoadSampleEvery = time.Second
	}
	return c
}

// Scrape is a router's view of one replica as of the last scrape: the
// figures a vLLM /metrics page carries.
type Scrape struct {
	At               time.Duration
	Healthy          bool
	Waiting, Running int
	KVUsage          float64 // [0,1]
	KVCapacityTokens int
	RunningAdapters  []string
	WaitingAdapters  []string
	MaxLoras         int
}

// Fleet is what a policy sees: the replicas, the clock, and scrape
// snapshots. Policies other than the oracle should only use Scrape, Open and
// the replicas' static facts (address, hardware, capacity, metrics text).
type Fleet struct {
	replicas []*Replica
	scrapes  []Scrape
	cfg      Config
	s        *sim
}

// Len returns the number of replicas.
func (f *Fleet) Len() int { return len(f.replicas) }

// Replica returns replica i (exact state: for the oracle, the wasm host's
// metrics endpoints and tests).
func (f *Fleet) Replica(i int) *Replica { return f.replicas[i] }

// Scrape returns replica i's metrics as of the last scrape.
func (f *Fleet) Scrape(i int) *Scrape { return &f.scrapes[i] }

// Open reports whether replica i is configured to take new work: the control
// plane tells routers about drains right away (a configuration update).
func (f *Fleet) Open(i int) bool { return !f.replicas[i].draining && !f.replicas[i].removed }

// Now returns the virtual time.
func (f *Fleet) Now() time.Duration { return f.s.now }

// Adapters returns the workload's LoRA adapters with their base models, as
// an operator lists them in a router's configuration up front (a router
// reconfigured for each new adapter would restart its state each time).
func (f *Fleet) Adapters() map[string]string {
	out := map[string]string{}
	for _, r := range f.s.w.Requests {
		if r.Adapter != "" {
			out[r.Adapter] = r.Model
		}
	}
	return out
}

// ScrapeInterval returns the routers' metrics refresh period.
func (f *Fleet) ScrapeInterval() time.Duration { return f.cfg.ScrapeInterval }

// Release hands over a request the policy held (its Pick returned Hold):
// d routes it to a replica or answers it with a status. It takes effect at
// the current virtual time, after the call into the policy returns, as a
// proxy resumes a paused stream once the callback that resumed it is done.
// Releasing a request that is not held (never held, released or answered
// already) marks it lost: it would reach two replicas or get two answers.
func (f *Fleet) Release(req *Request, d Decision) { f.s.release(req, d) }

// Event kinds of the simulation queue.
const (
	evStep uint8 = iota
	evDrain
	evDeadline
	evCrash
	evRestart
	evRedispatch
	evRelease
	evWake
)

type simEvent struct {
	t     time.Duration
	seq   uint64
	kind  uint8
	rep   int32
	epoch int32
	st    *reqState
	dec   Decision // evRelease: what the policy decided for a held request
}

type eventHeap []simEvent

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].t != h[j].t {
		return h[i].t < h[j].t
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(simEvent)) }
func (h *eventHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// reqState is the runner's per-run state of one request.
// retryBackoff is the base delay before re-dispatching a refused request.
const retryBackoff = 25 * time.Millisecond

type reqState struct {
	req          *Request
	seq          *seq
	replica      int
	attempt      int
	held         bool // the policy holds it (Hold) and has not released it
	answered     bool // the policy answered it with a status (429, 503)
	twice        bool // the policy released it while it was not held
	heldTime     time.Duration
	heldSince    time.Duration
	admitted     bool
	cachedTokens int
	// reusable is the most prompt tokens any replica had cached when the
	// request arrived: the reuse the best router could have had.
	reusable int
	firstAt  time.Duration
	doneAt   time.Duration
	hasFirst bool
	done     bool
	failed   bool
	streamed int // tokens reported to the policy
	migrated int
}

type drainRec struct {
	replica       int
	start, finish time.Duration
	deadline      time.Duration
	finished      bool
}

type sim struct {
	cfg      Config
	w        *Workload
	p        Policy
	f        *Fleet
	now      time.Duration
	q        eventHeap
	seqNo    uint64
	states   []reqState
	ev       Event
	events   uint64
	nextScr  time.Duration
	nextLoad time.Duration
	load     [][]float64

	newAfterClose int
	wrongModel    int
	migrated      int
	failedReqs    int
	drains        []drainRec
	rollingIdx    int
	pending       int
	// held counts the requests the policy holds; wakeAt is the pending
	// evWake (0: none), lastWork the last time anything but a wake ran.
	held     int
	wakeAt   time.Duration
	lastWork time.Duration
}

// heldIdleLimit ends a run whose policy holds requests while nothing else
// happens for this long: it would never release them (they count as lost).
const heldIdleLimit = 10 * time.Minute

func (s *sim) push(t time.Duration, kind uint8, rep int, epoch int32) {
	s.seqNo++
	heap.Push(&s.q, simEvent{t: t, seq: s.seqNo, kind: kind, rep: int32(rep), epoch: epoch})
}

// Run simulates workload w on a fresh fleet built from cfg, routing with p,
// and returns the per-request outcomes and summary. It is deterministic: the
// same cfg, w and policy give the same result.
func Run(cfg Config, w *Workload, p Policy) (*Result, error) {
	cfg = cfg.withDefaults()
	if len(cfg.Replicas) == 0 {
		return nil, errors.New("fleetsim: config has no replicas")
	}
	w.Prepare()
	s := &sim{cfg: cfg, w: w, p: p}
	s.f = &Fleet{cfg: cfg, s: s}
	for i, rc := range cfg.Replicas {
		s.f.replicas = append(s.f.replicas, newReplica(i, rc, s))
	}
	s.f.scrapes = make([]Scrape, len(cfg.Replicas))
	s.load = make([][]float64, len(cfg.Replicas))
	s.snapshot(0)
	s.states = make([]reqState, len(w.Requests))
	for i, r := range w.Requests {
		s.states[i] = reqState{req: r, replica: -1}
	}
	if err := p.Start(s.f); err != nil {
		return nil, errors.New("fleetsim: policy " + quote(p.Name()) + " failed to start: " + err.Error())
	}
	if c, ok := p.(io.Closer); ok {
		defer c.Close()
	}
	for _, a := range w.Actions {
		if a.Replica < 0 || a.Replica >= len(cfg.Replicas) {
			return nil, errors.New("fleetsim: workload action on replica " + strconv.Itoa(a.Replica) +
				" but the fleet has " + strconv.Itoa(len(cfg.Replicas)))
		}
		switch a.Kind {
		case ActionDrain:
			s.seqNo++
			heap.Push(&s.q, simEvent{t: a.At, seq: s.seqNo, kind: evDrain, rep: int32(a.Replica), epoch: int32(a.Deadline / time.Millisecond)})
		case ActionCrash:
			s.push(a.At, evCrash, a.Replica, 0)
		case ActionRestart:
			s.push(a.At, evRestart, a.Replica, 0)
		}
	}
	if w.Rolling != nil {
		s.seqNo++
		heap.Push(&s.q, simEvent{t: w.Rolling.Start, seq: s.seqNo, kind: evDrain, rep: 0,
			epoch: int32(w.Rolling.Deadline / time.Millisecond)})
	}
	s.pending = len(w.Requests)
	start := time.Now()
	next := 0
	for s.pending > 0 {
		var t time.Duration
		arrival := next < len(w.Requests) && (len(s.q) == 0 || w.Requests[next].Arrival <= s.q[0].t)
		if arrival {
			t = w.Requests[next].Arrival
		} else if len(s.q) > 0 {
			t = s.q[0].t
		} else {
			break
		}
		if cfg.Horizon > 0 && t > cfg.Horizon {
			break
		}
		if !arrival && s.q[0].kind == evWake && t-s.lastWork > heldIdleLimit {
			break // the policy holds requests and nothing else will happen
		}
		if t >= s.nextScr {
			s.snapshot(t)
		}
		s.now = t
		p.Advance(t)
		s.events++
		if arrival {
			s.lastWork = t
			st := &s.states[next]
			next++
			st.reusable = s.reusable(st.req)
			s.dispatch(st)
			continue
		}
		e := heap.Pop(&s.q).(simEvent)
		if e.kind != evWake {
			s.lastWork = t
		}
		s.handle(e)
	}
	return s.result(time.Since(start)), nil
}

// reusable returns the most tokens of req's prompt a replica has cached now.
func (s *sim) reusable(req *Request) int {
	best := 0
	for _, r := range s.f.replicas {
		best = max(best, r.CachedPrefixTokens(req))
	}
	return best
}

// snapshot refreshes the routers' scrapes as of time t. The state is
// piecewise constant between events, so the state before the first event at
// or after a scrape boundary is the state at that boundary.
func (s *sim) snapshot(t time.Duration) {
	iv := s.cfg.ScrapeInterval
	at := t / iv * iv
	for i, r := range s.f.replicas {
		sc := &s.f.scrapes[i]
		sc.At = at
		sc.Healthy = r.up
		sc.Waiting, sc.Running = len(r.waiting), len(r.running)
		sc.KVUsage = r.KVUsage()
		sc.KVCapacityTokens = r.KVCapacityTokens()
		sc.MaxLoras = r.cfg.MaxLoras
		sc.RunningAdapters = sc.RunningAdapters[:0]
		for _, sl := range r.slots {
			if sl.active > 0 {
				sc.RunningAdapters = append(sc.RunningAdapters, sl.name)
			}
		}
		sc.WaitingAdapters = sc.WaitingAdapters[:0]
		for _, q := range r.waiting {
			if q.req.Adapter != "" && !q.adapter {
				sc.WaitingAdapters = appendUnique(sc.WaitingAdapters, q.req.Adapter)
			}
		}
	}
	s.nextScr = at + iv
	for t >= s.nextLoad {
		for i, r := range s.f.replicas {
			s.load[i] = append(s.load[i], float64(len(r.waiting)+len(r.running)))
		}
		s.nextLoad += s.cfg.LoadSampleEvery
	}
}

func appendUnique(l []string, x string) []string {
	for _, y := range l {
		if y == x {
			return l
		}
	}
	return append(l, x)
}

func (s *sim) emit(kind EventKind, st *reqState, rep int) {
	s.ev = Event{Kind: kind, At: s.now, Req: st.req, Replica: rep, Attempt: st.attempt}
}

// dispatch asks the policy for a replica and hands the request over,
// retrying on refusals; a request the policy holds waits for its Release.
func (s *sim) dispatch(st *reqState) {
	if st.attempt >= s.cfg.MaxAttempts {
		s.fail(st)
		return
	}
	d := s.p.Pick(s.now, st.req, st.attempt)
	if d.Held {
		st.held, st.heldSince = true, s.now
		s.held++
		s.wake()
		return
	}
	s.handOver(st, d)
}

// release queues the hand-over of a held request (Fleet.Release).
func (s *sim) release(req *Request, d Decision) {
	if req == nil || req.ID < 0 || req.ID >= len(s.states) || s.states[req.ID].req != req {
		return // not a request of this run
	}
	st := &s.states[req.ID]
	if !st.held || d.Held {
		st.twice = true
		return
	}
	st.held = false
	st.heldTime += s.now - st.heldSince
	s.held--
	s.seqNo++
	heap.Push(&s.q, simEvent{t: s.now, seq: s.seqNo, kind: evRelease, st: st, dec: d})
}

// wake keeps virtual time moving while the policy holds requests, one
// scrape interval at a time, so a policy that releases on its own clock
// (the plugin's tick) gets the chance when nothing else happens.
func (s *sim) wake() {
	if s.held == 0 || s.wakeAt > s.now {
		return
	}
	s.wakeAt = s.now + s.cfg.ScrapeInterval
	s.push(s.wakeAt, evWake, 0, 0)
}

// handOver carries out d for st: a rejection answers the request, a route
// hands it to the replica (a refusal is retried after a back-off).
func (s *sim) handOver(st *reqState, d Decision) {
	if d.Status != 0 || d.Replica < 0 || d.Replica >= len(s.f.replicas) {
		st.answered = d.Status != 0
		s.fail(st)
		return
	}
	r := s.f.replicas[d.Replica]
	if !r.Serves(st.req.Model) {
		// The engine answers 404 model_not_found: final.
		s.wrongModel++
		st.answered = true
		s.fail(st)
		return
	}
	if err := r.accept(s.now, st); err != nil {
		if r.draining {
			s.newAfterClose++
		}
		s.emit(Cancelled, st, d.Replica)
		s.ev.Reason = Refused
		s.p.Observe(&s.ev)
		st.attempt++
		if st.attempt >= s.cfg.MaxAttempts {
			s.fail(st)
			return
		}
		// Retry after Envoy's default retry back-off base (25 ms,
		// route.RetryPolicy.retry_back_off.base_interval), growing
		// with the attempt.
		s.seqNo++
		heap.Push(&s.q, simEvent{t: s.now + time.Duration(st.attempt)*retryBackoff, seq: s.seqNo, kind: evRedispatch, st: st})
		return
	}
	st.replica = d.Replica
	s.emit(Dispatched, st, d.Replica)
	s.p.Observe(&s.ev)
}

func (s *sim) fail(st *reqState) {
	if !st.failed && !st.done {
		st.failed = true
		s.failedReqs++
		s.pending--
	}
}

// onToken is called by a replica for every generated token of s.
func (s *sim) onToken(now time.Duration, q *seq, r *Replica) {
	st := q.st
	if q.gen == 1 {
		// First token of this attempt; TTFT counts the first attempt's
		// (a re-dispatched stream was already answered).
		if !st.hasFirst {
			st.hasFirst = true
			st.firstAt = now
		}
		s.emit(FirstToken, st, r.Index)
		s.ev.CachedTokens = q.cached
		s.p.Observe(&s.ev)
		st.streamed = 1
		return
	}
	if q.gen-st.streamed >= s.cfg.StreamEvery {
		s.emit(Tokens, st, r.Index)
		s.ev.Tokens = q.gen - st.streamed
		st.streamed = q.gen
		s.p.Observe(&s.ev)
	}
}

func (s *sim) onComplete(now time.Duration, q *seq, r *Replica) {
	st := q.st
	st.done = true
	st.doneAt = now
	st.seq = nil
	s.pending--
	s.emit(Completed, st, r.Index)
	s.ev.Tokens = q.gen
	s.p.Observe(&s.ev)
}

func (s *sim) handle(e simEvent) {
	switch e.kind {
	case evStep:
		r := s.f.replicas[e.rep]
		if e.epoch != r.epoch || !r.up {
			return
		}
		r.endStep(s.now)
	case evDrain:
		r := s.f.replicas[e.rep]
		if !r.up || r.draining {
			return
		}
		r.draining = true
		r.drainStart = s.now
		r.drainDead = s.now + time.Duration(e.epoch)*time.Millisecond
		s.drains = append(s.drains, drainRec{replica: r.Index, start: s.now, deadline: time.Duration(e.epoch) * time.Millisecond})
		s.push(r.drainDead, evDeadline, r.Index, r.epoch)
		s.checkDrained(s.now, r)
	case evDeadline:
		r := s.f.replicas[e.rep]
		if e.epoch != r.epoch || !r.draining {
			return
		}
		s.finishDrain(r)
		s.requeue(r.stop(), r.Index, Migrated)
		r.removed = true
		s.afterStop(r)
	case evCrash:
		r := s.f.replicas[e.rep]
		if !r.up {
			return
		}
		s.requeue(r.stop(), r.Index, Failed)
	case evRestart:
		r := s.f.replicas[e.rep]
		if !r.up {
			r.restart()
		}
		r.removed = false
		if s.w.Rolling != nil && e.epoch == 1 {
			s.rollingIdx++
			if s.rollingIdx < len(s.f.replicas) && (s.w.Rolling.Count == 0 || s.rollingIdx < s.w.Rolling.Count) {
				s.seqNo++
				heap.Push(&s.q, simEvent{t: s.now + s.w.Rolling.Gap, seq: s.seqNo, kind: evDrain,
					rep: int32(s.rollingIdx), epoch: int32(s.w.Rolling.Deadline / time.Millisecond)})
			}
		}
	case evRedispatch:
		s.dispatch(e.st)
	case evRelease:
		s.handOver(e.st, e.dec)
	case evWake:
		s.wake()
	}
}

// checkDrained stops a draining replica once it is empty.
func (s *sim) checkDrained(now time.Duration, r *Replica) {
	if !r.draining || !r.idle() {
		return
	}
	s.finishDrain(r)
	r.stop()
	r.removed = true
	s.afterStop(r)
}

func (s *sim) finishDrain(r *Replica) {
	for i := len(s.drains) - 1; i >= 0; i-- {
		if d := &s.drains[i]; d.replica == r.Index && !d.finished {
			d.finished = true
			d.finish = s.now
			return
		}
	}
}

// afterStop schedules a rolling deploy's restart of a drained replica.
func (s *sim) afterStop(r *Replica) {
	if s.w.Rolling != nil {
		s.push(s.now+s.w.Rolling.RestartDelay, evRestart, r.Index, 1)
	}
}

// requeue reports the requests a stopped replica held and re-dispatches them
// through the policy (paying prefill again elsewhere).
func (s *sim) requeue(seqs []*seq, rep int, reason CancelReason) {
	for _, q := range seqs {
		st := q.st
		st.seq = nil
		if reason == Migrated {
			s.migrated++
			st.migrated++
		}
		s.emit(Cancelled, st, rep)
		s.ev.Reason = reason
		s.p.Observe(&s.ev)
		st.attempt++
		st.admitted = false
		st.streamed = 0
		s.seqNo++
		heap.Push(&s.q, simEvent{t: s.now, seq: s.seqNo, kind: evRedispatch, rep: int32(rep), st: st})
	}
}
