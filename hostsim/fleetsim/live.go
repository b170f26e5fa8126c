package fleetsim

import (
	"container/heap"
	"context"
	"errors"
	"sync"
	"time"
)

// LiveReplica runs one simulated engine in wall time: the same Replica the
// fleet simulator steps in virtual time (continuous batching, chunked
// prefill, the prefix-reusing KV cache, LoRA slots), driven by a goroutine
// that ends each engine step when its modelled duration, times TimeScale,
// has passed. A real server puts it behind HTTP endpoints: Submit a request,
// read its tokens as they are generated, render the engine's /metrics.
// Every method is safe for concurrent use; Close stops the goroutine.
//
//	l := fleetsim.NewLiveReplica(fleetsim.LiveOptions{TimeScale: 0.1})
//	defer l.Close()
//	s, _ := l.Submit(fleetsim.LiveRequest{Prompt: "hello", MaxTokens: 8})
//	for n, done := 0, false; !done; {
//		n, done, _ = s.Wait(ctx, n) // n tokens generated so far
//	}
//
// Times stay exact in modelled time: an event the goroutine handles late is
// still applied at its own virtual time, so TTFT reports what the fleet
// simulator would for the same arrivals (TestLiveMatchesRun).
type LiveReplica struct {
	mu    sync.Mutex
	s     *sim
	r     *Replica
	scale float64
	start time.Time
	obs   liveObserver
	wake  chan struct{}
	quit  chan struct{}
	done  chan struct{}
	ids   int
}

// LiveOptions configure a LiveReplica.
type LiveOptions struct {
	// Replica is the engine; zero fields take ReplicaConfig's defaults.
	Replica ReplicaConfig
	// TimeScale is wall seconds per modelled second (0.1: ten times
	// faster than the modelled GPU); 0 means 1. Values below MinTimeScale
	// are raised to it.
	TimeScale float64
}

// MinTimeScale bounds TimeScale below: virtual time is a time.Duration,
// which at this scale lasts 2.5 hours of wall time before it overflows.
const MinTimeScale = 1e-6

// LiveRequest is one request to a LiveReplica.
type LiveRequest struct {
	// Model is the base model (the replica's when empty); Adapter the LoRA
	// adapter, "" for none.
	Model, Adapter string
	// Prompt is the prompt text: CharsPerToken bytes make a token and each
	// full block of BlockTokens tokens is identified by its text, chained,
	// so prompts sharing a text prefix share cached blocks.
	Prompt string
	// MaxTokens is how many tokens the engine generates (at least 1).
	MaxTokens int
}

// LiveState is a LiveReplica's engine state at one moment.
type LiveState struct {
	Waiting, Running int
	// KVUsage is the share of KV blocks requests reference, in [0,1];
	// KVUsedTokens the same in tokens.
	KVUsage          float64
	KVUsedTokens     int
	KVCapacityTokens int
	// ResidentAdapters are the adapters in GPU slots.
	ResidentAdapters []string
}

// NewLiveReplica starts a replica; its virtual time 0 is now.
func NewLiveReplica(o LiveOptions) *LiveReplica {
	scale := o.TimeScale
	if scale <= 0 {
		scale = 1
	}
	scale = max(scale, MinTimeScale)
	l := &LiveReplica{scale: scale, start: time.Now(), wake: make(chan struct{}, 1),
		quit: make(chan struct{}), done: make(chan struct{})}
	cfg := Config{Replicas: []ReplicaConfig{o.Replica}, StreamEvery: 1}.withDefaults()
	l.obs.streams = map[*Request]*LiveStream{}
	l.s = &sim{cfg: cfg, w: &Workload{Name: "live"}, p: &l.obs}
	l.s.f = &Fleet{cfg: cfg, s: l.s}
	l.r = newReplica(0, o.Replica, l.s)
	l.s.f.replicas = []*Replica{l.r}
	l.s.f.scrapes = make([]Scrape, 1)
	go l.run()
	return l
}

// Close stops the replica's goroutine; streams still open stop advancing.
func (l *LiveReplica) Close() {
	select {
	case <-l.quit:
	default:
		close(l.quit)
	}
	<-l.done
}

// Config returns the engine's configuration with defaults filled in.
func (l *LiveReplica) Config() ReplicaConfig { return l.r.Config() }

// errLiveClosed is Submit's error after Close.
var errLiveClosed = errors.New("fleetsim: live replica closed")

// Submit queues a request on the engine now.
func (l *LiveReplica) Submit(q LiveRequest) (*LiveStream, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.submitLocked(q)
}

func (l *LiveReplica) submitLocked(q LiveRequest) (*LiveStream, error) {
	select {
	case <-l.quit:
		return nil, errLiveClosed
	default:
	}
	now := l.advanceLocked()
	if q.Model == "" {
		q.Model = l.r.cfg.Model
	}
	req := liveRequest(l.ids, now, q)
	l.ids++
	st := &reqState{req: req, replica: 0}
	s := &LiveStream{l: l, st: st, arrived: now, notify: make(chan struct{}, 1)}
	l.obs.streams[req] = s
	if err := l.r.accept(now, st); err != nil {
		delete(l.obs.streams, req)
		return nil, err
	}
	l.kick()
	return s, nil
}

// liveRequest builds the engine's request for q, arriving at now: its KV
// block chain comes from the prompt text. The segment it carries only sizes
// the blocks the answer leaves cached (Replica.finish), whose hashes no
// later prompt text reproduces: they take space and age out.
func liveRequest(id int, now time.Duration, q LiveRequest) *Request {
	n := max((len(q.Prompt)+CharsPerToken-1)/CharsPerToken, 1)
	out := max(q.MaxTokens, 1)
	r := &Request{ID: id, Arrival: now, Model: q.Model, Adapter: q.Adapter, PromptTokens: n,
		MaxTokens: out, Stream: true, Session: -1, output: out}
	r.key = hashString(q.Model + "\x00" + q.Adapter)
	r.chain = promptChain(r.key, q.Prompt)
	r.segs = []Segment{{Seed: mix64(r.key ^ hashString(q.Prompt)), Tokens: n}}
	return r
}

// promptChain hashes the full blocks of text (BlockTokens × CharsPerToken
// bytes each) as a chain seeded with key: block i's hash covers blocks
// 0..i, as vLLM's prefix-caching block hashes do.
func promptChain(key uint64, text string) []uint64 {
	const blockChars = BlockTokens * CharsPerToken
	out := make([]uint64, 0, len(text)/blockChars)
	h := key
	for i := 0; i+blockChars <= len(text); i += blockChars {
		h = mix64(h*0xbf58476d1ce4e5b9 ^ hashString(text[i:i+blockChars]))
		out = append(out, h)
	}
	return out
}

// State returns the engine's state now.
func (l *LiveReplica) State() LiveState {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.advanceLocked()
	r := l.r
	return LiveState{Waiting: r.Waiting(), Running: r.Running(), KVUsage: r.KVUsage(),
		KVUsedTokens: r.kv.inUse() * BlockTokens, KVCapacityTokens: r.KVCapacityTokens(),
		ResidentAdapters: r.ResidentAdapters()}
}

// MetricsText appends the engine's /metrics page (its configured engine's
// format) as of now.
func (l *LiveReplica) MetricsText(dst []byte) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.advanceLocked()
	return l.r.MetricsText(dst, "")
}

// virtualNow is the modelled time since the start.
func (l *LiveReplica) virtualNow() time.Duration {
	return time.Duration(float64(time.Since(l.start)) / l.scale)
}

// advanceLocked applies every engine event due by now, each at its own
// virtual time, and returns now.
func (l *LiveReplica) advanceLocked() time.Duration {
	now := max(l.virtualNow(), l.s.now)
	for len(l.s.q) > 0 && l.s.q[0].t <= now {
		e := heap.Pop(&l.s.q).(simEvent)
		l.s.now = e.t
		l.s.handle(e)
	}
	l.s.now = now
	return now
}

// kick wakes the goroutine to recompute its timer.
func (l *LiveReplica) kick() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// run ends engine steps on time: it sleeps until the next event is due in
// wall time, or until a submission or a cancellation changes the queue.
func (l *LiveReplica) run() {
	defer close(l.done)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		l.mu.Lock()
		l.advanceLocked()
		wait := time.Duration(-1)
		if len(l.s.q) > 0 {
			at := l.start.Add(time.Duration(float64(l.s.q[0].t) * l.scale))
			wait = max(time.Until(at), 0)
		}
		l.mu.Unlock()
		if wait >= 0 {
			t.Reset(wait)
		} else {
			t.Stop()
		}
		select {
		case <-t.C:
		case <-l.wake:
		case <-l.quit:
			return
		}
	}
}

// LiveStream is one submitted request: its tokens as the engine generates
// them.
type LiveStream struct {
	l      *LiveReplica
	st     *reqState
	notify chan struct{} // a token or the end arrived (capacity 1)

	// Guarded by l.mu.
	arrived, first time.Duration // virtual times of submission and first token
	tokens, cached int
	complete, gone bool
}

// ErrLiveCancelled is Wait's error for a stream that was cancelled.
var ErrLiveCancelled = errors.New("fleetsim: live request cancelled")

// Wait blocks until the stream has more than have tokens, completes, or ctx
// ends, and returns the tokens generated so far and whether it completed.
func (s *LiveStream) Wait(ctx context.Context, have int) (int, bool, error) {
	for {
		s.l.mu.Lock()
		n, complete, gone := s.tokens, s.complete, s.gone
		s.l.mu.Unlock()
		switch {
		case gone:
			return n, false, ErrLiveCancelled
		case n > have || complete:
			return n, complete, nil
		}
		select {
		case <-s.notify:
		case <-ctx.Done():
			return n, false, ctx.Err()
		case <-s.l.quit:
			return n, false, errLiveClosed
		}
	}
}

// Cancel takes the request off the engine (a client that went away): its
// KV blocks and adapter slot are released; blocks it was still computing
// are dropped.
func (s *LiveStream) Cancel() {
	l := s.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if s.complete || s.gone {
		return
	}
	s.gone = true
	delete(l.obs.streams, s.st.req)
	now := l.advanceLocked()
	r, q := l.r, s.st.seq
	if q == nil {
		return
	}
	for _, list := range []*[]*seq{&r.waiting, &r.running} {
		for i, x := range *list {
			if x == q {
				*list = append((*list)[:i], (*list)[i+1:]...)
				r.release(now, q)
				break
			}
		}
	}
	s.st.seq = nil
	if !r.stepping {
		r.startStep(now) // the freed blocks may admit a waiting request
	}
	l.kick()
}

// CachedTokens returns the prompt tokens served from the prefix cache (known
// from the first token on).
func (s *LiveStream) CachedTokens() int {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	return s.cached
}

// TTFT returns the modelled time from submission to the first token (0
// before it).
func (s *LiveStream) TTFT() time.Duration {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	if s.tokens == 0 {
		return 0
	}
	return s.first - s.arrived
}

// PromptTokens returns the request's prompt length in tokens.
func (s *LiveStream) PromptTokens() int { return s.st.req.PromptTokens }

// liveObserver is the engine's Policy: it routes nothing (Submit hands
// requests to the one replica) and turns the engine's events into stream
// progress. It runs under LiveReplica.mu.
type liveObserver struct {
	streams map[*Request]*LiveStream
}

var _ Policy = (*liveObserver)(nil)

func (*liveObserver) Name() string                               { return "live" }
func (*liveObserver) Start(*Fleet) error                         { return nil }
func (*liveObserver) Advance(time.Duration)                      {}
func (*liveObserver) Pick(time.Duration, *Request, int) Decision { return Route(0) }

func (o *liveObserver) Observe(ev *Event) {
	s := o.streams[ev.Req]
	if s == nil {
		return
	}
	switch ev.Kind {
	case FirstToken:
		s.first, s.cached = ev.At, ev.CachedTokens
		s.tokens = max(s.tokens, 1)
	case Tokens:
		s.tokens += ev.Tokens
	case Completed:
		s.tokens, s.complete = ev.Tokens, true
		delete(o.streams, ev.Req)
	default:
		return
	}
	select {
	case s.notify <- struct{}{}:
	default:
	}
}
