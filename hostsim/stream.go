package hostsim

import (
	"errors"
	"strconv"
	"strings"
)

// Stream is one HTTP stream driven through the plugin like Envoy's filter
// chain drives the wasm filter: headers, body chunks and trailers of the
// request, then of the response, then Done (proxy_on_done, proxy_on_log,
// proxy_on_delete). A local reply or a closed stream ends it: later
// request/response phases return ActionPause without calling the guest,
// since Envoy would not deliver them. (Whether Envoy runs this filter's
// response callbacks on its own local reply is unverified; hostsim does not.)
type Stream struct {
	root *Root
	vm   *VM
	id   uint32

	reqHeaders, reqTrailers, respHeaders, respTrailers headerMap
	reqBody, respBody                                  bodyState

	local       *LocalReply
	reqPaused   bool
	respPaused  bool
	closed      [4]bool // by StreamType
	ended       bool
	done        bool
	props       map[string][]byte
	routeClears int
	filterState map[string][]byte
}

type headerMap struct {
	present bool
	kv      [][2]string
}

// bodyState is one direction's body. Its buffers come from the VM's pool
// and go back at Done (a 32 KB prompt buffered and forwarded was a routed
// request's largest host allocation, and the host's garbage collector then
// ran inside the callbacks the benchmarks time).
type bodyState struct {
	buf       []byte // what proxy_get_buffer_bytes sees
	buffering bool   // last callback returned PAUSE: keep accumulating
	forwarded []byte // what went upstream/downstream
}

// LocalReply is a proxy_send_local_response the guest made.
type LocalReply struct {
	Status     int
	Details    string
	Body       []byte
	Headers    [][2]string
	GRPCStatus int32 // -1: none
}

// NewStream creates an HTTP context under r (proxy_on_context_create with
// parent = r).
func (r *Root) NewStream() (*Stream, error) {
	vm := r.vm
	vm.mu.Lock()
	s, err := r.newStreamLocked()
	vm.mu.Unlock()
	vm.after()
	return s, err
}

func (r *Root) newStreamLocked() (*Stream, error) {
	vm := r.vm
	if err := vm.usable(); err != nil {
		return nil, err
	}
	if r.deleted {
		return nil, errors.New("hostsim: new stream: root " + strconv.Quote(r.name) + " was deleted")
	}
	vm.nextID++
	s := &Stream{root: r, vm: vm, id: vm.nextID}
	vm.streams[s.id] = s
	r.streams++
	err := vm.withContext(r, s, func() error {
		_, err := vm.invoke(fnOnContextCreate, 0, 2, uint64(s.id), uint64(r.id), 0, 0, 0)
		return err
	})
	return s, err
}

// ID returns the stream's context id.
func (s *Stream) ID() uint32 { return s.id }

// Root returns the root context the stream was created under.
func (s *Stream) Root() *Root { return s.root }

func lowerHeaders(h [][2]string) [][2]string {
	// Spare capacity: guests usually add or replace a header or two.
	out := make([][2]string, len(h), len(h)+2)
	for i, kv := range h {
		out[i] = [2]string{lowerASCII(kv[0]), kv[1]}
	}
	return out
}

// lowerASCII lowercases header names as Envoy's codecs and
// Http::LowerCaseString do; it does not allocate for lowercase input.
func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			return strings.ToLower(s)
		}
	}
	return s
}

// phase runs one stream callback under the VM lock.
func (s *Stream) phase(f func() (Action, error)) (Action, error) {
	vm := s.vm
	vm.mu.Lock()
	var a Action
	var err error
	switch {
	case s.done:
		err = errors.New("hostsim: stream " + strconv.FormatUint(uint64(s.id), 10) + " is done")
	case s.ended:
		a = ActionPause
	default:
		err = vm.usable()
		if err == nil {
			err = vm.withContext(s.root, s, func() error {
				var e error
				a, e = f()
				return e
			})
		}
	}
	vm.mu.Unlock()
	vm.after()
	return a, err
}

func (s *Stream) action(fn int, a0, a1, a2 uint64, paused *bool) (Action, error) {
	r, err := s.vm.invoke(fn, 0, 3, a0, a1, a2, 0, 0)
	if err != nil {
		return 0, err
	}
	a := Action(uint32(r))
	*paused = a != ActionContinue
	return a, nil
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// RequestHeaders delivers the request headers (names are lowercased, as
// Envoy's codecs do) and runs proxy_on_request_headers. PAUSE holds the
// request until the guest calls proxy_continue_stream (see RequestPaused).
func (s *Stream) RequestHeaders(h [][2]string, endOfStream bool) (Action, error) {
	return s.phase(func() (Action, error) {
		s.reqHeaders = headerMap{present: true, kv: lowerHeaders(h)}
		return s.action(fnOnRequestHeaders, uint64(s.id), uint64(len(h)), b2u(endOfStream), &s.reqPaused)
	})
}

// RequestBody delivers a request body chunk and runs proxy_on_request_body.
// While the guest answers PAUSE, chunks accumulate and the buffer it sees
// (and body_size) is everything buffered so far, as in Envoy's
// StopIterationAndBuffer; CONTINUE forwards the buffer.
func (s *Stream) RequestBody(chunk []byte, endOfStream bool) (Action, error) {
	return s.phase(func() (Action, error) {
		return s.body(fnOnRequestBody, &s.reqBody, chunk, endOfStream, &s.reqPaused)
	})
}

func (s *Stream) body(fn int, b *bodyState, chunk []byte, eos bool, paused *bool) (Action, error) {
	if b.buf == nil {
		b.buf = s.vm.takeBody()
	}
	if b.buffering {
		b.buf = append(b.buf, chunk...)
	} else {
		b.buf = append(b.buf[:0], chunk...)
	}
	a, err := s.action(fn, uint64(s.id), uint64(len(b.buf)), b2u(eos), paused)
	if err != nil {
		return a, err
	}
	if a == ActionContinue {
		if b.forwarded == nil {
			b.forwarded = s.vm.takeBody()
		}
		b.forwarded = append(b.forwarded, b.buf...)
		b.buffering = false
	} else {
		b.buffering = !eos
	}
	return a, nil
}

// RequestTrailers delivers request trailers and runs proxy_on_request_trailers.
func (s *Stream) RequestTrailers(t [][2]string) (Action, error) {
	return s.phase(func() (Action, error) {
		s.reqTrailers = headerMap{present: true, kv: lowerHeaders(t)}
		return s.action(fnOnRequestTrailers, uint64(s.id), uint64(len(t)), 0, &s.reqPaused)
	})
}

// ResponseHeaders delivers the upstream response headers (include ":status")
// and runs proxy_on_response_headers.
func (s *Stream) ResponseHeaders(h [][2]string, endOfStream bool) (Action, error) {
	return s.phase(func() (Action, error) {
		s.respHeaders = headerMap{present: true, kv: lowerHeaders(h)}
		return s.action(fnOnResponseHeaders, uint64(s.id), uint64(len(h)), b2u(endOfStream), &s.respPaused)
	})
}

// ResponseBody delivers a response body chunk (see RequestBody).
func (s *Stream) ResponseBody(chunk []byte, endOfStream bool) (Action, error) {
	return s.phase(func() (Action, error) {
		return s.body(fnOnResponseBody, &s.respBody, chunk, endOfStream, &s.respPaused)
	})
}

// ResponseTrailers delivers response trailers.
func (s *Stream) ResponseTrailers(t [][2]string) (Action, error) {
	return s.phase(func() (Action, error) {
		s.respTrailers = headerMap{present: true, kv: lowerHeaders(t)}
		return s.action(fnOnResponseTrailers, uint64(s.id), uint64(len(t)), 0, &s.respPaused)
	})
}

// Done ends the stream: proxy_on_done, proxy_on_log, proxy_on_delete (the
// order Envoy's filter destruction and access logging produce). Calling it
// twice is a no-op.
func (s *Stream) Done() error {
	vm := s.vm
	vm.mu.Lock()
	err := s.doneLocked()
	vm.mu.Unlock()
	vm.after()
	return err
}

func (s *Stream) doneLocked() error {
	vm := s.vm
	if s.done {
		return nil
	}
	if err := vm.usable(); err != nil {
		return err
	}
	s.done, s.ended = true, true
	err := vm.withContext(s.root, s, func() error {
		id := uint64(s.id)
		if _, err := vm.invoke(fnOnDone, 1, 1, id, 0, 0, 0, 0); err != nil {
			return err
		}
		if _, err := vm.invoke(fnOnLog, 0, 1, id, 0, 0, 0, 0); err != nil {
			return err
		}
		_, err := vm.invoke(fnOnDelete, 0, 1, id, 0, 0, 0, 0)
		return err
	})
	delete(vm.streams, s.id)
	s.root.streams--
	for _, b := range []*bodyState{&s.reqBody, &s.respBody} {
		vm.putBody(b.buf)
		vm.putBody(b.forwarded)
		*b = bodyState{}
	}
	if err != nil {
		return err
	}
	return vm.maybeDeleteRootLocked(s.root)
}

func (s *Stream) lock() func() {
	s.vm.mu.Lock()
	return s.vm.mu.Unlock
}

// RequestHeaderMap returns a copy of the request headers as the guest left them.
func (s *Stream) RequestHeaderMap() [][2]string {
	defer s.lock()()
	return append([][2]string(nil), s.reqHeaders.kv...)
}

// ResponseHeaderMap returns a copy of the response headers as the guest left them.
func (s *Stream) ResponseHeaderMap() [][2]string {
	defer s.lock()()
	return append([][2]string(nil), s.respHeaders.kv...)
}

// RequestTrailerMap returns a copy of the request trailers.
func (s *Stream) RequestTrailerMap() [][2]string {
	defer s.lock()()
	return append([][2]string(nil), s.reqTrailers.kv...)
}

// ResponseTrailerMap returns a copy of the response trailers.
func (s *Stream) ResponseTrailerMap() [][2]string {
	defer s.lock()()
	return append([][2]string(nil), s.respTrailers.kv...)
}

// RequestHeader returns the first value of a request header (name is
// matched case-insensitively).
func (s *Stream) RequestHeader(name string) (string, bool) {
	defer s.lock()()
	return s.reqHeaders.get(lowerASCII(name))
}

// ResponseHeader returns the first value of a response header.
func (s *Stream) ResponseHeader(name string) (string, bool) {
	defer s.lock()()
	return s.respHeaders.get(lowerASCII(name))
}

// RequestBodyForwarded returns the request body that went upstream so far
// (empty after Done).
func (s *Stream) RequestBodyForwarded() []byte {
	defer s.lock()()
	return append([]byte(nil), s.reqBody.forwarded...)
}

// ResponseBodyForwarded returns the response body that went downstream so
// far (empty after Done).
func (s *Stream) ResponseBodyForwarded() []byte {
	defer s.lock()()
	return append([]byte(nil), s.respBody.forwarded...)
}

// LocalReply returns the local reply the guest sent, or nil.
func (s *Stream) LocalReply() *LocalReply {
	defer s.lock()()
	if s.local == nil {
		return nil
	}
	lr := *s.local
	return &lr
}

// RequestPaused reports whether the request is held: the last request
// callback returned a non-CONTINUE action and no proxy_continue_stream(REQUEST) followed.
func (s *Stream) RequestPaused() bool {
	defer s.lock()()
	return s.reqPaused
}

// ResponsePaused is RequestPaused for the response.
func (s *Stream) ResponsePaused() bool {
	defer s.lock()()
	return s.respPaused
}

// Closed reports whether the guest closed (reset) that side with proxy_close_stream.
func (s *Stream) Closed(t StreamType) bool {
	defer s.lock()()
	return int(t) < len(s.closed) && s.closed[t]
}

// Ended reports whether a local reply or a close ended the stream.
func (s *Stream) Ended() bool {
	defer s.lock()()
	return s.ended
}

// RouteCacheClears counts "clear_route_cache" foreign calls on the stream.
func (s *Stream) RouteCacheClears() int {
	defer s.lock()()
	return s.routeClears
}

// SetProperty sets a property the guest reads with proxy_get_property; path
// segments are NUL-separated (see PropertyPath), e.g. upstream.address.
func (s *Stream) SetProperty(path string, value []byte) {
	defer s.lock()()
	if s.props == nil {
		s.props = map[string][]byte{}
	}
	s.props[path] = append([]byte(nil), value...)
}

// PropertyPath joins property path segments with NUL, the proxy-wasm
// property path encoding (ABI.md §2.4 proxy_get_property).
func PropertyPath(segments ...string) string { return strings.Join(segments, "\x00") }

func (m *headerMap) get(k string) (string, bool) {
	for _, kv := range m.kv {
		if kv[0] == k {
			return kv[1], true
		}
	}
	return "", false
}

func (m *headerMap) add(k, v string) { m.kv = append(m.kv, [2]string{k, v}) }

// replace sets the first k to v and removes the rest, appending if absent
// (Envoy HeaderMap::setCopy).
func (m *headerMap) replace(k, v string) {
	found := false
	out := m.kv[:0]
	for _, kv := range m.kv {
		if kv[0] == k {
			if found {
				continue
			}
			found = true
			kv[1] = v
		}
		out = append(out, kv)
	}
	m.kv = out
	if !found {
		m.kv = append(m.kv, [2]string{k, v})
	}
}

func (m *headerMap) remove(k string) {
	out := m.kv[:0]
	for _, kv := range m.kv {
		if kv[0] != k {
			out = append(out, kv)
		}
	}
	clear(m.kv[len(out):])
	m.kv = out
}

// maxPooledBodies bounds the VM's pool of body buffers: enough for the
// streams a worker has in flight at once in the simulations and benchmarks.
const maxPooledBodies = 256

func (vm *VM) takeBody() []byte {
	n := len(vm.bodies)
	if n == 0 {
		return nil
	}
	b := vm.bodies[n-1]
	vm.bodies = vm.bodies[:n-1]
	return b
}

func (vm *VM) putBody(b []byte) {
	if b != nil && len(vm.bodies) < maxPooledBodies {
		vm.bodies = append(vm.bodies, b[:0])
	}
}
