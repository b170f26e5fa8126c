package hostsim

// The wasm HTTP filter as Envoy runs it: how the guest's answers to the
// stream callbacks and its proxy_continue_stream, proxy_close_stream and
// proxy_send_local_response calls move a stream. Sources: envoy
// source/extensions/common/wasm/context.cc (decodeHeaders, decodeData,
// continueStream, sendLocalResponse), source/common/http/filter_manager.cc
// (iteration states, commonContinue, sendLocalReply) and proxy-wasm-cpp-host
// src/context.cc (DeferAfterCallActions, convertVmCallResultTo*Status).
// TestHeld* (held_test.go) hold these rules.

// filterState is the filter manager's iteration state for this filter in
// one direction.
type filterState uint8

const (
	// iterating: frames pass the filter.
	iterating filterState = iota
	// stoppedOne is StopIteration: the filter holds what it has; later
	// body chunks and trailers still reach the guest.
	stoppedOne
	// stoppedAll is StopAllIteration*: later frames wait in the host,
	// unseen by the guest, until it continues the stream.
	stoppedAll
)

// direction is the request (decoder) or response (encoder) side of a
// stream at this filter.
type direction struct {
	fn                int // export index of the headers callback; body and trailers follow it
	headers, trailers headerMap
	// headersOpen and trailersOpen: the guest may use the map. Envoy's
	// filter keeps a map from the callback that delivered it until that
	// callback answered CONTINUE or the guest called proxy_continue_stream
	// (context.cc decodeHeaders, continueStream); outside that window the
	// guest gets BAD_ARGUMENT.
	headersOpen, trailersOpen bool
	// bodyHidden: proxy_continue_stream dropped the guest's view of a body
	// chunk it was not buffering (request_body_buffer_ = nullptr).
	bodyHidden  bool
	body        bodyState
	state       filterState
	headersSent bool // the headers went past the filter
	eos         bool // the embedder delivered the end of stream
	// trailersHeld: the guest answered PAUSE to the trailers; they go on
	// with the next continue.
	trailersHeld bool
	// While stoppedAll: what arrived since, for the guest once it continues.
	waiting         []byte
	waitingData     bool
	waitingTrailers bool
}

// headersStatus maps a headers callback's answer to the filter manager's
// state like cpp-host convertVmCallResultToFilterHeadersStatus and Envoy's
// convertFilterHeadersStatus: 1 (PAUSE) is StopIteration or, by default in
// Envoy, StopAllIterationAndWatermark (Options.HeadersPause); 2
// (ContinueAndEndStream) continues; 3, 4 and anything larger stop all.
func headersStatus(a Action, pause HeadersPause) filterState {
	switch {
	case a == ActionContinue || a == 2:
		return iterating
	case a == ActionPause && pause == HeadersStopIteration:
		return stoppedOne
	}
	return stoppedAll
}

// callback runs the guest callback fn+offset (headers, body, trailers) of d
// and reports its answer; trapped or ended (a local reply or a reset the
// guest made inside it, which Envoy carries out before it looks at the
// answer) means the caller has nothing left to apply.
func (s *Stream) callback(d *direction, offset int, n int, size uint64, eos bool) (a Action, done bool, err error) {
	r, err := s.vm.invoke(d.fn+offset, 0, n, uint64(s.id), size, b2u(eos), 0, 0)
	return Action(uint32(r)), err != nil || s.destroyed, err
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

func (s *Stream) onHeaders(d *direction, h [][2]string, eos bool) (Action, error) {
	d.headers = headerMap{present: true, kv: lowerHeaders(h)}
	d.headersOpen, d.eos = true, eos
	a, done, err := s.callback(d, 0, 3, uint64(len(h)), eos)
	if done {
		return a, err
	}
	d.state = headersStatus(a, s.vm.host.opts.HeadersPause)
	if d.state == iterating {
		d.headersOpen, d.headersSent = false, true
	}
	return a, nil
}

func (s *Stream) onBody(d *direction, chunk []byte, eos bool) (Action, error) {
	d.eos = eos
	if d.state == stoppedAll {
		d.waiting = append(d.waiting, chunk...)
		d.waitingData = true
		return ActionPause, nil
	}
	return s.deliverBody(d, chunk, eos)
}

// deliverBody runs the body callback on chunk. While the guest buffers
// (PAUSE), the buffer it sees grows by each chunk; CONTINUE sends it on, and
// releases the headers if the filter held them. Answers above PAUSE
// (StopIterationAndWatermark, StopIterationNoBuffer) are taken as PAUSE.
func (s *Stream) deliverBody(d *direction, chunk []byte, eos bool) (Action, error) {
	b := &d.body
	if b.buf == nil {
		b.buf = s.vm.takeBody()
	}
	if b.buffering {
		b.buf = append(b.buf, chunk...)
	} else {
		b.buf = append(b.buf[:0], chunk...)
	}
	d.bodyHidden = false
	a, done, err := s.callback(d, 1, 3, uint64(len(b.buf)), eos)
	if done {
		return a, err
	}
	if a == ActionContinue {
		d.state, d.headersSent = iterating, true
		s.forward(d)
	} else {
		b.buffering, d.state = true, stoppedOne
	}
	return a, nil
}

func (s *Stream) onTrailers(d *direction, t [][2]string) (Action, error) {
	d.trailers = headerMap{present: true, kv: lowerHeaders(t)}
	d.trailersOpen, d.eos = true, true
	if d.state == stoppedAll {
		d.waitingTrailers = true
		return ActionPause, nil
	}
	return s.deliverTrailers(d)
}

func (s *Stream) deliverTrailers(d *direction) (Action, error) {
	a, done, err := s.callback(d, 2, 2, uint64(len(d.trailers.kv)), false)
	if done {
		return a, err
	}
	if a == ActionContinue {
		d.trailersOpen, d.trailersHeld = false, false
		if d.state != iterating {
			d.state, d.headersSent = iterating, true
			s.forward(d)
		}
	} else {
		d.trailersHeld = true
		if d.state == iterating {
			d.state = stoppedOne
		}
	}
	return a, nil
}

// forward sends the body the filter buffered past it.
func (s *Stream) forward(d *direction) {
	b := &d.body
	if len(b.buf) > 0 {
		if b.forwarded == nil {
			b.forwarded = s.vm.takeBody()
		}
		b.forwarded = append(b.forwarded, b.buf...)
	}
	b.buf = b.buf[:0]
	b.buffering = false
}

// bodyView is the body buffer the guest's buffer calls see; one that
// proxy_continue_stream hid reads as empty, and writes to it go nowhere.
func (d *direction) bodyView() *[]byte {
	if d.bodyHidden {
		return new([]byte)
	}
	return &d.body.buf
}

// complete reports whether the whole of d went past the filter.
func (d *direction) complete() bool {
	return d.eos && d.state == iterating && !d.trailersHeld && !d.waitingData && !d.waitingTrailers
}

// resume is Envoy's continueDecoding/continueEncoding (commonContinue) for
// a held direction: the headers go on, then the buffered body and trailers.
// After StopAllIteration the guest's own body and trailers callbacks first
// get what waited in the host (the headers are already gone by then), and
// may hold the stream again.
func (s *Stream) resume(d *direction) error {
	switch d.state {
	case iterating:
		return nil // nothing held: Envoy asserts this does not happen
	case stoppedOne:
		d.state, d.headersSent = iterating, true
		if d.body.buffering {
			s.forward(d)
		}
		d.trailersHeld = false
	case stoppedAll:
		d.state, d.headersSent = iterating, true
		if d.waitingData {
			chunk := d.waiting
			d.waiting, d.waitingData = nil, false
			if _, err := s.deliverBody(d, chunk, d.eos && !d.waitingTrailers); err != nil || s.destroyed {
				return err
			}
		}
		if d.waitingTrailers {
			d.waitingTrailers = false
			if _, err := s.deliverTrailers(d); err != nil || s.destroyed {
				return err
			}
		}
	}
	if d == &s.req {
		s.vm.notify(s.onRequestResumed)
		return nil
	}
	s.vm.notify(s.onResponseResumed)
	if s.replied && d.complete() {
		return s.destroy() // a local reply the guest had held is out
	}
	return nil
}

// continueStream is the host side of proxy_continue_stream(t) on s: Envoy
// drops the guest's view of the request headers, trailers and unbuffered
// body at once (for t = RESPONSE too), and continues the stream once the
// guest call returns.
func (vm *VM) continueStream(s *Stream, t StreamType) {
	s.req.headersOpen, s.req.trailersOpen = false, false
	s.req.bodyHidden = !s.req.body.buffering
	vm.deferCall(deferredCall{op: opContinue, s: s, t: t})
}

// sendLocalReply carries out the guest's first proxy_send_local_response on
// s (envoy FilterManager::sendLocalReply): before any response reached the
// filter, the reply goes through the filter chain, this filter's response
// callbacks included; before the response headers went downstream, it
// replaces them without the filters; later, Envoy can only reset the
// stream. The stream then ends.
func (s *Stream) sendLocalReply(lr *LocalReply) error {
	if s.destroyed || s.local != nil {
		return nil
	}
	d := &s.resp
	if d.headersSent {
		return s.reset(StreamResponse)
	}
	s.local, s.replied = lr, true
	switch {
	case !d.headers.present:
		hdrs := localReplyHeaders(lr)
		eos := len(lr.Body) == 0
		if _, err := s.onHeaders(d, hdrs, eos); err != nil || s.destroyed {
			return err
		}
		if !eos {
			if _, err := s.onBody(d, lr.Body, true); err != nil || s.destroyed {
				return err
			}
		}
		s.vm.notifyLocalReply(s.onLocalReply, lr)
		if !d.complete() {
			return nil // the guest holds its own reply: resume ends the stream
		}
	default:
		d.headers = headerMap{present: true, kv: localReplyHeaders(lr)}
		d.body.buf = d.body.buf[:0]
		d.body.forwarded = append(d.body.forwarded[:0], lr.Body...)
		d.state, d.headersSent = iterating, true
		s.vm.notifyLocalReply(s.onLocalReply, lr)
	}
	return s.destroy()
}

// localReplyHeaders are the response headers Envoy builds for a local reply
// (envoy source/common/http/utility.cc prepareLocalReply): :status, the
// guest's headers, and for a body its length and, unless the guest set one,
// content-type text/plain.
func localReplyHeaders(lr *LocalReply) [][2]string {
	h := headerMap{present: true, kv: make([][2]string, 0, len(lr.Headers)+3)}
	h.add(headerStatus, itoa(int64(lr.Status)))
	h.kv = append(h.kv, lr.Headers...)
	if len(lr.Body) == 0 {
		h.remove(headerContentLength)
		h.remove(headerContentType)
		return h.kv
	}
	h.replace(headerContentLength, itoa(int64(len(lr.Body))))
	if _, ok := h.get(headerContentType); !ok {
		h.add(headerContentType, contentTypeText)
	}
	return h.kv
}

// reset is the host side of proxy_close_stream(t) once the guest call
// returned: Envoy resets the stream and destroys it.
func (s *Stream) reset(t StreamType) error {
	if s.destroyed {
		return nil
	}
	s.closed[t] = true
	s.vm.notify(s.onReset)
	return s.destroy()
}

// destroy ends the stream in the guest: proxy_on_log, proxy_on_done,
// proxy_on_delete (envoy ConnectionManagerImpl::doDeferredStreamDestroy logs,
// then destroys the filters), and gives its buffers back.
func (s *Stream) destroy() error {
	if s.destroyed {
		return nil
	}
	s.destroyed = true
	vm := s.vm
	err := vm.withContext(s.root, s, func() error {
		id := uint64(s.id)
		s.inLog = true
		_, err := vm.invoke(fnOnLog, 0, 1, id, 0, 0, 0, 0)
		s.inLog = false
		if err != nil {
			return err
		}
		if _, err := vm.invoke(fnOnDone, 1, 1, id, 0, 0, 0, 0); err != nil {
			return err
		}
		_, err = vm.invoke(fnOnDelete, 0, 1, id, 0, 0, 0, 0)
		return err
	})
	delete(vm.streams, s.id)
	s.root.streams--
	for _, d := range []*direction{&s.req, &s.resp} {
		vm.putBody(d.body.buf)
		vm.putBody(d.body.forwarded)
		d.body, d.waiting = bodyState{}, nil
	}
	if err != nil {
		return err
	}
	return vm.maybeDeleteRootLocked(s.root)
}

// Deferred calls: cpp-host runs what continue_stream, close_stream,
// send_local_response and proxy_done ask for after the guest call that
// asked returns
// (WasmBase::addAfterVmCallAction, run by DeferAfterCallActions), in order,
// before Envoy looks at that callback's answer.

type deferredOp uint8

const (
	opContinue deferredOp = iota
	opClose
	opLocalReply
	opDeleteRoot // proxy_done
)

type deferredCall struct {
	op deferredOp
	s  *Stream // opContinue, opClose, opLocalReply
	t  StreamType
	lr *LocalReply
	r  *Root // opDeleteRoot
}

func (vm *VM) deferCall(c deferredCall) { vm.deferred = append(vm.deferred, c) }

// runDeferred runs the deferred calls in order; the guest callbacks they
// make may defer more, which run in the same pass, as in cpp-host's
// doAfterVmCallActions.
func (vm *VM) runDeferred() error {
	for vm.deferredHead < len(vm.deferred) {
		c := vm.deferred[vm.deferredHead]
		vm.deferred[vm.deferredHead] = deferredCall{}
		vm.deferredHead++
		root := c.r
		if c.s != nil {
			root = c.s.root
		}
		if err := vm.withContext(root, c.s, c.run); err != nil {
			vm.deferred, vm.deferredHead = vm.deferred[:0], 0
			return err
		}
	}
	vm.deferred, vm.deferredHead = vm.deferred[:0], 0
	return nil
}

func (c *deferredCall) run() error {
	switch c.op {
	case opContinue:
		if c.s.destroyed {
			return nil
		}
		if c.t == StreamRequest {
			return c.s.resume(&c.s.req)
		}
		return c.s.resume(&c.s.resp)
	case opClose:
		return c.s.reset(c.t)
	case opDeleteRoot:
		return c.r.vm.maybeDeleteRootLocked(c.r)
	}
	return c.s.sendLocalReply(c.lr)
}

// Notices: the embedder's hooks, queued while the VM is locked and run by
// unlock.

type notice struct {
	fn func()
	lr func(*LocalReply)
	r  *LocalReply
}

func (vm *VM) notify(f func()) {
	if f != nil {
		vm.notices = append(vm.notices, notice{fn: f})
	}
}

func (vm *VM) notifyLocalReply(f func(*LocalReply), lr *LocalReply) {
	if f != nil {
		c := *lr
		vm.notices = append(vm.notices, notice{lr: f, r: &c})
	}
}

// unlock releases vm.mu, then runs the hooks the guest's calls triggered,
// in order, so that they may call back into the host.
func (vm *VM) unlock() {
	if len(vm.notices) == 0 {
		vm.mu.Unlock()
		return
	}
	n := vm.notices
	vm.notices = nil
	vm.mu.Unlock()
	for _, e := range n {
		if e.fn != nil {
			e.fn()
		} else {
			e.lr(e.r)
		}
	}
}
