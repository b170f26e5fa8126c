package router

import (
	"math/bits"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/gpuroute/gpuroute/plugin/openai"
	"github.com/gpuroute/gpuroute/plugin/proxy"
	"github.com/gpuroute/gpuroute/scoring"
	"github.com/gpuroute/gpuroute/scoring/prefix"
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
	replica   int
	addr      string // the chosen replica's address (drains match on it)
	liveAt    int    // index in vm.live, -1 when not live
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
	// resets it) rather than a field: zeroing its 8 KB line buffer with
	// the rest of the stream cost every request's context creation.
	counter *openai.StreamCounter
	explain []byte
	// Passive health (passive.go): the replica that answered 2xx (-1:
	// none yet) and whether a drain deadline ended the stream.
	answeredBy int
	forced     bool
}

func (s *stream) reset(r *root, id uint32) {
	counter, explain := s.counter, s.explain[:0]
	if counter == nil {
		counter = new(openai.StreamCounter)
	}
	counter.Reset()
	*s = stream{root: r, id: id, replica: -1, liveAt: -1, counter: counter, explain: explain, answeredBy: -1}
}

// OnHttpRequestHeaders removes any client-sent destination first, before
// anything else can fail (a panic answers Continue, and the request must
// not leave with the client's choice of upstream). An OpenAI request with
// a body waits for it (the decision needs the prompt); anything else is
// routed now on load alone.
func (s *stream) OnHttpRequestHeaders(numHeaders int, endOfStream bool) types.Action {
	r := s.root
	stripDestination(numHeaders)
	path, err := proxy.GetHeaderMapValue(proxy.MapTypeHttpRequestHeaders, ":path")
	if err != nil {
		path = nil
	}
	if r.cfg.StatusPath != "" && isStatusPath(path, r.cfg.StatusPath) {
		return r.serveStatus()
	}
	if r.isPeerPath(path) {
		return r.servePeer(path)
	}
	if kind, ok := openai.KindFromPath(path); ok && !endOfStream {
		s.inference, s.kind = true, kind
		return types.ActionPause
	}
	return s.route(nil, false)
}

// OnHttpRequestBody buffers the body up to max_body_bytes, then routes on
// what was read: past the limit, the prompt's beginning (which is what the
// prefix cache is about) is all the decision needs.
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
// strips a destination smuggled into them.
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

// route decides and writes the destination, or answers locally.
func (s *stream) route(body []byte, truncated bool) types.Action {
	r := s.root
	s.decided = true
	now := proxy.NowNanos()
	req := r.features(s, body, truncated)
	for i := range r.cached {
		r.cached[i] = 0
	}
	if len(req.Chain) > 0 {
		r.index.Lookup(req.Chain, r.cached)
	}
	req.AdapterRecent = nil
	if req.Adapter != "" {
		// The shared prefix index also records where each adapter was
		// sent (under a key of its own), so every worker knows what the
		// others sent, not only its own ledger.
		r.adapterKey[0] = adapterKey(req.Model, req.Adapter)
		r.index.Lookup(r.adapterKey[:], r.adapterHeld)
		for i, k := range r.adapterHeld {
			r.adapterRecent[i] = k > 0
		}
		req.AdapterRecent = r.adapterRecent
	}
	r.gatherPeerWork(now)
	d := &r.decision
	scoring.Pick(&r.params, req, r.replicas, r.cached, r.ledger, now, d)
	if d.Index < 0 {
		return r.reject(503, detailsUnavailable, r.unavailableBody(d), r.stats.unavailable)
	}
	best := d.Top[0]
	if lim := r.cfg.MaxWaitSec; lim > 0 && best.WaitSec > lim {
		return r.reject(429, detailsOverloaded, overloadedBody, r.stats.overloaded)
	}
	if err := r.writeDestination(d); err != nil {
		r.log.error("cannot set " + HeaderDestination + ": " + err.Error())
		return r.reject(503, detailsUnavailable, r.unavailableBody(d), r.stats.unavailable)
	}
	s.replica = d.Index
	s.dispatchedNanos = now
	s.expectedWaitSec = best.WaitSec
	s.calibrate = calibrates(&r.replicas[d.Index], &best)
	s.uncached = max(req.PromptTokens-best.CachedTokens, 1)
	s.flight = r.ledger.Dispatch(d.Index, req, s.uncached, now, best.StartNanos)
	if s.flight != 0 {
		r.stats.tally(r.stats.inFlight, 1)
		r.publishWorkOn(d.Index, now)
	}
	if len(req.Chain) > 0 {
		r.index.Record(d.Index, req.Chain)
		r.checkpoints = r.index.AppendCheckpoints(r.checkpoints[:0], req.Chain)
		r.outbox.Push(d.Index, r.checkpoints)
	}
	if req.Adapter != "" {
		r.index.RecordCheckpoints(d.Index, r.adapterKey[:])
		r.outbox.Push(d.Index, r.adapterKey[:])
	}
	s.addr = r.replicas[d.Index].Addr
	s.liveAt = len(r.vm.live)
	r.vm.live = append(r.vm.live, s)
	r.stats.decided(d, req, &r.replicas[d.Index].Hardware, r.params.AdapterToleranceSec)
	if r.cfg.DecisionHeader {
		s.explain = d.AppendExplain(s.explain[:0], r.replicas)
	}
	return types.ActionContinue
}

// features fills the root's request features from the body (nil: none).
// A body that is not JSON or names no model is routed on load alone (no
// affinity) and counted; it never causes a 5xx.
func (r *root) features(s *stream, body []byte, truncated bool) *scoring.Request {
	req := &r.featuresScratch
	*req = scoring.Request{Chain: req.Chain[:0]}
	if body == nil {
		req.PromptTokens = r.params.DefaultPromptTokens
		if s.inference {
			r.stats.add(r.stats.bodyUnparsed, 1)
		}
		return req
	}
	// One pass: the prompt is hashed unseeded as it is validated, and the
	// chain keyed with the model and adapter once the body named them
	// (clients send "model" anywhere, the OpenAI Python SDK after
	// "messages").
	r.hasher.ResetDeferred()
	replays := r.textMemo.Replays()
	err := r.parser.ParseText(s.kind, body, truncated, &r.textMemo, &r.request)
	if n := r.textMemo.Replays() - replays; n > 0 {
		r.stats.tally(r.stats.memoReplays, int64(n))
	}
	if err != nil && len(r.request.Model) == 0 {
		r.stats.add(r.stats.bodyUnparsed, 1)
		req.PromptTokens = r.params.DefaultPromptTokens
		return req
	}
	model, adapter := r.resolveModel(r.request.Model)
	req.Model, req.Adapter = model, adapter
	r.hasher.SetSeed(model, adapter)
	if r.request.PromptBad {
		r.stats.add(r.stats.bodyUnparsed, 1)
	}
	req.Chain = r.hasher.Chain()
	req.PromptTokens = max(r.hasher.Tokens(), r.request.PromptTokensExact, 1)
	if r.request.HasMaxTokens {
		req.MaxTokens = int(min(r.request.MaxTokens, 1<<31) * max(r.request.N, 1))
	}
	req.Stream = r.request.Stream
	s.streaming = r.request.Stream
	return req
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
// first token (TTFT feeds the replica's calibration); each streamed chunk's
// tokens decay the request's remaining-output estimate.
func (s *stream) OnHttpResponseBody(bodySize int, endOfStream bool) types.Action {
	r := s.root
	if s.flight == 0 {
		return types.ActionContinue
	}
	if !s.firstByte && bodySize > 0 {
		s.firstByte = true
		now := proxy.NowNanos()
		ttft := float64(now-s.dispatchedNanos) / 1e9
		i := s.replica
		if s.calibrate {
			r.calibrators[i].Observe(&r.priors[i], s.uncached, ttft, s.expectedWaitSec)
			r.replicas[i].Hardware = r.calibrators[i].Apply(&r.priors[i])
		}
		r.ledger.FirstTokenAt(s.flight, now)
		r.publishWorkOn(i, now)
	}
	if bodySize > 0 {
		chunk, err := proxy.GetBufferBytes(proxy.BufferTypeHttpResponseBody, 0, uint32(bodySize))
		if err == nil {
			if s.streaming {
				before := s.counter.Tokens()
				_, _ = s.counter.Write(chunk)
				if d := s.counter.Tokens() - before; d > 0 {
					r.ledger.Progress(s.flight, int(d))
				}
			} else if endOfStream {
				if u, ok := openai.ParseUsage(chunk); ok {
					s.counter.UsageCompletionTokens, s.counter.HasUsage = u.CompletionTokens, true
				}
			}
		}
	}
	if endOfStream {
		s.responseDone = true
	}
	return types.ActionContinue
}

// OnHttpStreamDone releases the request's accounting exactly once: a
// finished response teaches its output length, anything else (reset,
// client gone, drain deadline) is cancelled without learning.
func (s *stream) OnHttpStreamDone() {
	r := s.root
	if r == nil {
		return
	}
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
				r.passiveInterrupted(s.answeredBy, now)
			}
			r.ledger.Cancel(s.flight)
		}
		r.stats.tally(r.stats.inFlight, -1)
		s.flight = 0
		r.publishWorkOn(s.replica, now)
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

// stripDestination removes every client-sent HeaderDestination. Envoy's
// replace removes all instances, but hosts differ (the SDK's proxytest
// removes only the first), so we remove until the lookup says NOT_FOUND.
// Header names reach the plugin lowercased (Envoy's codecs), so any case
// the client used is covered.
func stripDestination(numHeaders int) {
	removeAll(proxy.MapTypeHttpRequestHeaders, HeaderDestination, numHeaders)
}

func removeAll(m proxy.MapType, name string, bound int) {
	for i := 0; i <= bound; i++ {
		if _, err := proxy.GetHeaderMapValue(m, name); err != nil {
			return
		}
		if proxy.RemoveHeaderMapValue(m, name) != nil {
			return
		}
	}
}

// writeDestination replaces the destination header with the chosen
// replica, followed by the next best ones when fallbacks are configured
// (Envoy's override_host policy walks the list on retries).
func (r *root) writeDestination(d *scoring.Decision) error {
	if r.cfg.Fallbacks == 0 || d.NumTop == 1 {
		return proxy.ReplaceHeaderMapValue(proxy.MapTypeHttpRequestHeaders, HeaderDestination, r.replicas[d.Index].Addr)
	}
	b := r.destScratch[:0]
	for i := 0; i < d.NumTop && i <= r.cfg.Fallbacks; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, r.replicas[d.Top[i].Index].Addr...)
	}
	r.destScratch = b
	return proxy.ReplaceHeaderMapValue(proxy.MapTypeHttpRequestHeaders, HeaderDestination, string(b))
}

// calibrates reports whether the TTFT of a request sent to rep with the
// chosen candidate's costs c may calibrate rep's prefill cost: only when
// nothing was queued ahead (none reported, a wait small next to the
// prefill), since the router cannot see other gateways' queued requests
// and TTFT minus an underestimated wait would teach it that a busy replica
// is slow; and only when the request's adapter need not be loaded, since
// the load (15 ms to seconds, its tier a guess) is in the TTFT. Learned as
// prefill, loads made a replica that had loaded adapters from storage look
// 10× slower than the others (lora seed 5: 2.9 s of expected prefill
// against 0.25 s), and requests left the replicas where their adapter was
// resident. And only when the router found none of the prompt cached
// there: an engine may hold more of a prompt than this router saw sent
// (vLLM caches the blocks it generates, which a conversation's next turn
// quotes), so a warm request's uncached count is an overestimate and its
// prefill looks fast. Learned, that made identical H100s 2.7× faster or 2×
// slower than their profile in each worker's calibration (multi-turn, 8
// workers: a 6,944-token cold prefill priced at 0.44 s, "faster
// hardware", taking 1.18 s), and the rule sent cold work to the replica
// that looked fast.
func calibrates(rep *scoring.Replica, c *scoring.Candidate) bool {
	return rep.WaitingRequests == 0 && c.AdapterSec == 0 && c.CachedTokens == 0 &&
		c.WaitSec < calibrationMaxWaitShare*c.PrefillSec
}

// calibrationMaxWaitShare bounds the expected wait, as a share of the
// expected prefill, of a request whose TTFT calibrates its replica.
const calibrationMaxWaitShare = 0.1

// adapterKey is the prefix-index key that records where an adapter was
// sent: a one-block "chain" that prompt chains (which mix text blocks into
// the model and adapter seed) do not produce. Combined from the names'
// hashes so that building it allocates nothing.
func adapterKey(model, adapter string) uint64 {
	const salt = 0x6c6f72612d6b6579 // "lora-key"
	return prefix.HashString(adapter) ^ bits.RotateLeft64(prefix.HashString(model), 29) ^ salt
}

// maxInterned bounds the model names a root remembers as strings.
const maxInterned = 256

// resolveModel maps the request's "model" to the base model and adapter,
// as strings the decision can keep, without allocating for a name seen
// before (a map index with string(b) does not allocate). The last name
// resolved is compared first, a word at a time: most requests name the
// model the one before did, and under wazero the two map lookups hashed
// the name and compared it byte by byte.
func (r *root) resolveModel(model []byte) (base, adapter string) {
	last := &r.lastModel
	if last.ok && prefix.SameBytes(model, last.name) {
		return last.base, last.adapter
	}
	base, adapter = r.lookupModel(model)
	last.name = append(last.name[:0], model...)
	last.base, last.adapter, last.ok = base, adapter, true
	return base, adapter
}

func (r *root) lookupModel(model []byte) (base, adapter string) {
	if a, ok := r.cfg.LookupAdapter(model); ok {
		return a.Base, a.Name
	}
	if s, ok := r.models[string(model)]; ok {
		return s, ""
	}
	s := string(model)
	if len(r.models) < maxInterned {
		r.models[s] = s
	}
	return s, ""
}
