package router

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/gpuroute/gpuroute/plugin/openai"
	"github.com/gpuroute/gpuroute/plugin/proxy"
	"github.com/gpuroute/gpuroute/scoring"
	"github.com/gpuroute/gpuroute/scoring/flow"
)

// stream is one HTTP request's context, recycled through root.free.
type stream struct {
	types.DefaultHttpContext
	root *root
	id   uint32

	// Routing: kind of OpenAI request (if any), the replica chosen and the
	// ledger's handle for the request.
	inference bool
	kind      openai.Kind
	decided   bool
	replica   int // ledger index: a configured replica, or a retiree after a handover
	liveAt    int // index in vm.live, -1 when not live
	flight    scoring.Flight

	// What the response teaches: TTFT for calibration, tokens for the
	// remaining-output estimate.
	dispatchedNanos int64
	expectedWaitSec float64
	calibrate       bool
	uncached        int
	firstByte       bool
	responseDone    bool
	streaming       bool
	// counter is the stream object's own, kept across reuse (reset
	// resets it) rather than a field: zeroing its line buffer with the
	// rest of the stream would cost every request's context creation.
	counter *openai.StreamCounter
	explain []byte
	// reply gathers a whole (not streamed) response's chunks: Envoy's
	// buffer holds only the latest once each is passed on, and the body is
	// read at its end (gatherReply); replyCut marks one past maxReplyBytes.
	reply    []byte
	replyCut bool
	// Passive health: the replica that answered 2xx (-1: none yet) and
	// whether a drain deadline ended the stream.
	answeredBy int
	forced     bool

	// Flow control (flow.go): the band the client asked for (-1: none it
	// may choose) and its tenant key, from the request headers; while the
	// request is held, its band, queue handle and slot, when it was held,
	// and its features with their own copy of the prefix chain; inline
	// marks a held request released by its own callback.
	askedBand int
	tenant    uint64
	held      bool
	inline    bool
	band      int
	slot      uint32
	handle    flow.Handle
	heldNanos int64
	heldReq   scoring.Request
	heldChain []uint64

	// fb is what the response's usage and answer teach the prefix index
	// (feedback.go); session the request's session affinity (session.go).
	fb      streamFeedback
	session streamSession
}

func (s *stream) reset(r *root, id uint32) {
	counter, explain, chain, fb := s.counter, s.explain[:0], s.heldChain[:0], s.fb.recycle()
	if counter == nil {
		counter = new(openai.StreamCounter)
	}
	counter.Reset()
	// reply is not kept: a body in several chunks is a long answer, and
	// rare; a thousand free streams keeping one would hold megabytes.
	*s = stream{root: r, id: id, replica: -1, liveAt: -1, counter: counter, explain: explain, answeredBy: -1,
		askedBand: -1, heldChain: chain, fb: fb, session: streamSession{replica: -1}}
}

// OnHttpRequestHeaders removes any client-sent destination first, before
// anything else can fail (a panic answers Continue, and the request must
// not leave with the client's choice of upstream; TestDestinationStrippedFirst).
// An OpenAI request with a body waits for it (the decision needs the
// prompt); anything else is routed now on load alone.
func (s *stream) OnHttpRequestHeaders(numHeaders int, endOfStream bool) types.Action {
	r := s.root
	stripDestination(numHeaders)
	path, err := proxy.GetHeaderMapValue(proxy.MapTypeHttpRequestHeaders, ":path")
	if err != nil {
		path = nil
	}
	if r.cfg.StatusPath != "" && isPath(path, r.cfg.StatusPath) {
		return r.serveStatus()
	}
	if r.peers.isPeerPath(path) {
		return r.peers.serve(path)
	}
	if kind, ok := openai.KindFromPath(path); ok && !endOfStream {
		s.inference, s.kind = true, kind
		r.flow.classify(s)
		r.sessions.begin(s, r.cfg.SessionHeader)
		return types.ActionPause
	}
	return s.route(nil, false)
}

// OnHttpRequestBody buffers the body up to max_body_bytes, then routes on
// what was read: past the limit, the prompt's beginning (which is what the
// prefix cache is about) is all the decision needs (TestOversizedBodyChunked).
func (s *stream) OnHttpRequestBody(bodySize int, endOfStream bool) types.Action {
	if s.decided || !s.inference {
		return types.ActionContinue
	}
	limit := s.root.cfg.MaxBodyBytes
	if !endOfStream && bodySize < limit {
		return types.ActionPause
	}
	n := min(bodySize, limit)
	body, err := proxy.GetBufferBytes(proxy.BufferTypeHttpRequestBody, 0, uint32(n))
	if err != nil {
		body = nil
	}
	return s.route(body, !endOfStream || bodySize > limit)
}

// OnHttpRequestTrailers routes a request whose body ended with trailers, and
// strips a destination smuggled into them (TestDestinationInRequestTrailers).
func (s *stream) OnHttpRequestTrailers(int) types.Action {
	removeAll(proxy.MapTypeHttpRequestTrailers, HeaderDestination, 64)
	if s.decided {
		return types.ActionContinue
	}
	n := s.root.cfg.MaxBodyBytes
	body, err := proxy.GetBufferBytes(proxy.BufferTypeHttpRequestBody, 0, uint32(n))
	if err != nil {
		body = nil
	}
	return s.route(body, false)
}

// route decides where the request goes and sends it there, in order:
// parse the body (nil: none), derive the request's features, build Pick's
// input (the view), Pick, then write the destination header (or answer
// locally) and account for the dispatch.
func (s *stream) route(body []byte, truncated bool) types.Action {
	r := s.root
	s.decided = true
	now := proxy.NowNanos()
	parsed := r.features.parse(s.kind, body, truncated)
	req := r.features.of(parsed, body != nil || s.inference)
	if parsed {
		p := &r.features.parsed
		r.sessions.resolve(s, req, p.HasPreviousResponse, p.PreviousResponseID)
	}
	r.feedback.begin(s, &r.features.hasher, req.Chain)
	replicas, cached := r.view.forRequest(s, req, now)
	d := &r.decision
	r.flow.prepare()
	scoring.Pick(&r.params, req, replicas, cached, r.ledger, now, d)
	if action, held := r.flow.admit(s, d, req, now); held {
		return action
	}
	if action, ok := r.header(d, now); !ok {
		return action
	}
	s.dispatch(d, req, now)
	return types.ActionContinue
}

// dispatch accounts for a request sent where d says: the ledger's flight,
// the work published to the other workers, the prefix and adapter
// placements, the stats and the explanation.
func (s *stream) dispatch(d *scoring.Decision, req *scoring.Request, now int64) {
	r := s.root
	best := &d.Top[0]
	rep := &r.view.replicas[d.Index]
	s.replica = d.Index
	s.streaming = req.Stream
	s.dispatchedNanos = now
	s.expectedWaitSec = best.WaitSec
	s.calibrate = calibrates(rep, best)
	s.uncached = max(req.PromptTokens-best.CachedTokens, 1)
	s.flight = r.ledger.Dispatch(d.Index, req, s.uncached, now, best.StartNanos)
	if s.flight != 0 {
		r.stats.tally(r.stats.inFlight, 1)
		r.stats.tally(r.stats.replica(d.Index).inFlight, 1)
		r.work.publishOn(d.Index, now)
		r.flow.sent(s)
	}
	r.sessions.dispatched(s, d.Index, req.PromptTokens)
	if len(req.Chain) > 0 {
		stamps, held := r.feedback.dispatching(s, d.Index, req.Chain, best.CachedTokens, req.PromptTokens)
		r.prefixes.dispatched(d.Index, req.Chain, stamps, held)
	}
	if req.Adapter != "" {
		r.prefixes.placed(d.Index, r.view.adapterKey[:])
	}
	r.stats.decided(d, req, &rep.Hardware, r.params.AdapterToleranceSec)
	if r.cfg.DecisionHeader {
		s.explain = d.AppendExplain(s.explain[:0], r.view.replicas)
	}
}

// OnHttpResponseHeaders adds the opt-in explanation header and, for a
// routed request, reads what the response says of the replica's health.
func (s *stream) OnHttpResponseHeaders(_ int, endOfStream bool) types.Action {
	if s.replica >= 0 {
		s.observeResponse(endOfStream)
	}
	if s.root.cfg.DecisionHeader && len(s.explain) > 0 {
		_ = proxy.ReplaceHeaderMapValue(proxy.MapTypeHttpResponseHeaders, HeaderDecision, string(s.explain))
	}
	return types.ActionContinue
}

// OnHttpResponseBody learns from the answer: the first body bytes mark the
// first token (firstToken); a streamed chunk's tokens decay the request's
// remaining-output estimate, a whole response's usage gives its output
// length; at the end, the usage's cached tokens correct the prefix index
// and the answer is recorded after the prompt (feedback.go).
func (s *stream) OnHttpResponseBody(bodySize int, endOfStream bool) types.Action {
	if s.flight == 0 {
		return types.ActionContinue
	}
	if !s.firstByte && bodySize > 0 {
		s.firstToken(proxy.NowNanos())
	}
	var last []byte // a whole response's chunk that ends it
	if bodySize > 0 {
		chunk, err := proxy.GetBufferBytes(proxy.BufferTypeHttpResponseBody, 0, uint32(bodySize))
		if err == nil {
			switch {
			case s.streaming:
				before := s.counter.Tokens()
				_, _ = s.counter.Write(chunk)
				if d := s.counter.Tokens() - before; d > 0 {
					s.root.ledger.Progress(s.flight, int(d))
				}
			case endOfStream:
				last = chunk
			default:
				s.gatherReply(chunk, false)
			}
		}
	}
	if endOfStream {
		s.responseEnded(last)
	}
	return types.ActionContinue
}

// OnHttpResponseTrailers ends a response whose end came with trailers, as
// a last body chunk would (TestResponseEndsWithTrailers): without it the
// response would count as cut off.
func (s *stream) OnHttpResponseTrailers(int) types.Action {
	if s.flight != 0 && !s.responseDone {
		s.responseEnded(nil)
	}
	return types.ActionContinue
}

// responseEnded learns from a response that ended whole: a whole body's
// usage and answer (gatherReply, last its final chunk, if any), then the
// feedback and the session.
func (s *stream) responseEnded(last []byte) {
	if !s.streaming {
		s.gatherReply(last, true)
	}
	s.responseDone = true
	if s.answeredBy >= 0 {
		s.root.feedback.responded(s, s.answeredBy)
		s.root.sessions.responded(s, s.answeredBy)
	}
}

// gatherReply keeps a whole response's chunk and reads the body at its end
// (feedback.reply): its usage, and the answer to record. A body in one
// chunk is read where it is; past maxReplyBytes nothing is read
// (TestWholeResponseInChunks).
func (s *stream) gatherReply(chunk []byte, end bool) {
	body := chunk
	if !end || len(s.reply) > 0 {
		if len(s.reply)+len(chunk) > maxReplyBytes {
			s.reply, s.replyCut = s.reply[:0], true
		}
		if !s.replyCut {
			s.reply = append(s.reply, chunk...)
		}
		body = s.reply
	}
	if end && !s.replyCut && len(body) > 0 {
		s.root.feedback.reply(s, body)
	}
}

// firstToken notes the request's first token at now: its TTFT calibrates
// the replica's prefill cost (when calibrates said it may), and the
// ledger's prefill of it ends.
func (s *stream) firstToken(now int64) {
	r := s.root
	s.firstByte = true
	i := s.replica
	if s.calibrate {
		r.calib.observe(i, s.uncached, float64(now-s.dispatchedNanos)/1e9, s.expectedWaitSec)
	}
	r.ledger.FirstTokenAt(s.flight, now)
	r.feedback.firstToken(s, i)
	r.work.publishOn(i, now)
	r.flow.freed(now, s)
}

// OnHttpStreamDone releases the request's accounting exactly once: a
// finished response teaches its output length, anything else (reset,
// client gone, drain deadline) is cancelled without learning
// (TestStreamAccounting).
func (s *stream) OnHttpStreamDone() {
	r := s.root
	if r == nil {
		return
	}
	r.flow.gone(s)
	s.release()
	s.root = nil
	if len(r.free) < maxFreeStreams {
		r.free = append(r.free, s)
	}
}

func (s *stream) release() {
	r := s.root
	if s.flight != 0 {
		now := proxy.NowNanos()
		if s.responseDone {
			tokens := -1
			if s.counter.HasUsage || s.streaming {
				tokens = int(s.counter.Tokens())
			}
			r.ledger.Done(s.flight, tokens)
		} else {
			if s.answeredBy >= 0 && !s.forced {
				r.health.interrupted(s.answeredBy, now)
			}
			r.ledger.Cancel(s.flight)
		}
		r.stats.tally(r.stats.inFlight, -1)
		r.stats.tally(r.stats.replica(s.replica).inFlight, -1)
		r.flow.finished(s)
		s.flight = 0
		r.work.publishOn(s.replica, now)
		r.flow.freed(now, s)
	}
	if live := &r.vm.live; s.liveAt >= 0 && s.liveAt < len(*live) {
		last := len(*live) - 1
		(*live)[s.liveAt] = (*live)[last]
		(*live)[s.liveAt].liveAt = s.liveAt
		*live = (*live)[:last]
		s.liveAt = -1
	}
}

// forceEnd resets a stream whose replica's drain deadline passed. Envoy
// then runs the stream's done callbacks, which find nothing left to release.
func (s *stream) forceEnd() {
	r := s.root
	s.forced = true
	s.release()
	if err := proxy.SetEffectiveContext(s.id); err != nil {
		return
	}
	if err := proxy.CloseStream(proxy.StreamTypeHttpResponse); err != nil {
		r.log.warn("cannot reset a stream past its drain deadline: " + err.Error())
	}
}
