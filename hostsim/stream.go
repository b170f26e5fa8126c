package hostsim

import (
	"errors"
	"strconv"
	"strings"
)

// Stream is one HTTP stream driven through the plugin the way Envoy's HTTP
// connection manager drives the wasm filter: headers, body chunks and
// trailers of the request, then of the response, then Done. filter.go
// holds the rules (what the guest's answers and host calls do, when); the
// embedder's calls deliver what the client and the upstream send.
//
// Once the stream has ended (a local reply, a reset by the guest, or Done)
// the request/response calls return ActionPause without calling the guest,
// since Envoy would deliver nothing more; after the embedder's own Done they
// return an error.
type Stream struct {
	root *Root
	vm   *VM
	id   uint32

	req, resp direction

	local     *LocalReply
	replied   bool    // a local reply was sent: the embedder's frames no longer reach the guest
	closed    [4]bool // by StreamType: reset by proxy_close_stream or by a late local reply
	destroyed bool    // proxy_on_log, proxy_on_done and proxy_on_delete ran
	released  bool    // the embedder called Done
	inLog     bool    // proxy_on_log is running: header reads see the access log's maps

	props       map[string][]byte
	routeClears int
	filterState map[string][]byte

	onRequestResumed  func()
	onResponseResumed func()
	onLocalReply      func(*LocalReply)
	onReset           func()
}

type headerMap struct {
	present bool
	kv      [][2]string
}

// bodyState is one direction's body. Its buffers come from the VM's pool
// and go back when the stream ends, so that buffering and forwarding a
// prompt allocates nothing in the host, whose collector would otherwise
// run inside the callbacks the benchmarks time.
type bodyState struct {
	buf       []byte // what proxy_get_buffer_bytes sees
	buffering bool   // the last body callback returned PAUSE: keep accumulating
	forwarded []byte // what went past the filter (upstream or downstream)
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
	vm.unlock()
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
	s.req.fn, s.resp.fn = fnOnRequestHeaders, fnOnResponseHeaders
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

// phase runs one of the embedder's stream calls under the VM lock.
func (s *Stream) phase(f func() (Action, error)) (Action, error) {
	vm := s.vm
	vm.mu.Lock()
	var a Action
	var err error
	switch {
	case s.released:
		err = errors.New("hostsim: stream " + strconv.FormatUint(uint64(s.id), 10) + " is done")
	case s.replied || s.destroyed:
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
	vm.unlock()
	vm.after()
	return a, err
}

// RequestHeaders delivers the request headers (names are lowercased, as
// Envoy's codecs do) and runs proxy_on_request_headers. A PAUSE holds the
// request (RequestPaused) until the guest calls proxy_continue_stream; what
// reaches the guest meanwhile depends on Options.HeadersPause.
func (s *Stream) RequestHeaders(h [][2]string, endOfStream bool) (Action, error) {
	return s.phase(func() (Action, error) { return s.onHeaders(&s.req, h, endOfStream) })
}

// RequestBody delivers a request body chunk and runs proxy_on_request_body.
// While the guest answers PAUSE, chunks accumulate and the buffer it sees
// (and body_size) is everything buffered so far, as in Envoy's
// StopIterationAndBuffer; CONTINUE forwards the buffer.
func (s *Stream) RequestBody(chunk []byte, endOfStream bool) (Action, error) {
	return s.phase(func() (Action, error) { return s.onBody(&s.req, chunk, endOfStream) })
}

// RequestTrailers delivers request trailers and runs proxy_on_request_trailers.
func (s *Stream) RequestTrailers(t [][2]string) (Action, error) {
	return s.phase(func() (Action, error) { return s.onTrailers(&s.req, t) })
}

// ResponseHeaders delivers the upstream response headers (include ":status")
// and runs proxy_on_response_headers.
func (s *Stream) ResponseHeaders(h [][2]string, endOfStream bool) (Action, error) {
	return s.phase(func() (Action, error) { return s.onHeaders(&s.resp, h, endOfStream) })
}

// ResponseBody delivers a response body chunk (see RequestBody).
func (s *Stream) ResponseBody(chunk []byte, endOfStream bool) (Action, error) {
	return s.phase(func() (Action, error) { return s.onBody(&s.resp, chunk, endOfStream) })
}

// ResponseTrailers delivers response trailers.
func (s *Stream) ResponseTrailers(t [][2]string) (Action, error) {
	return s.phase(func() (Action, error) { return s.onTrailers(&s.resp, t) })
}

// Done ends the stream, whether it completed or the client went away:
// proxy_on_log, proxy_on_done, proxy_on_delete, in the order Envoy's
// connection manager produces (access logs, then filter destruction). A
// held request is dropped: nothing more goes upstream. Done on a stream the
// host already ended (a local reply, a reset), or a second Done, runs
// nothing.
func (s *Stream) Done() error {
	vm := s.vm
	vm.mu.Lock()
	err := s.doneLocked()
	vm.unlock()
	vm.after()
	return err
}

func (s *Stream) doneLocked() error {
	if s.released {
		return nil
	}
	if s.destroyed {
		s.released = true
		return nil
	}
	if err := s.vm.usable(); err != nil {
		return err
	}
	s.released = true
	return s.vm.withContext(s.root, s, s.destroy)
}

func (s *Stream) lock() func() {
	s.vm.mu.Lock()
	return s.vm.mu.Unlock
}

// RequestHeaderMap returns a copy of the request headers as the guest left
// them: once the request went upstream (RequestPaused false), what went.
func (s *Stream) RequestHeaderMap() [][2]string {
	defer s.lock()()
	return append([][2]string(nil), s.req.headers.kv...)
}

// ResponseHeaderMap returns a copy of the response headers as the guest
// left them (after a local reply: the local reply's).
func (s *Stream) ResponseHeaderMap() [][2]string {
	defer s.lock()()
	return append([][2]string(nil), s.resp.headers.kv...)
}

// RequestTrailerMap returns a copy of the request trailers.
func (s *Stream) RequestTrailerMap() [][2]string {
	defer s.lock()()
	return append([][2]string(nil), s.req.trailers.kv...)
}

// ResponseTrailerMap returns a copy of the response trailers.
func (s *Stream) ResponseTrailerMap() [][2]string {
	defer s.lock()()
	return append([][2]string(nil), s.resp.trailers.kv...)
}

// RequestHeader returns the first value of a request header (name is
// matched case-insensitively).
func (s *Stream) RequestHeader(name string) (string, bool) {
	defer s.lock()()
	return s.req.headers.get(lowerASCII(name))
}

// ResponseHeader returns the first value of a response header.
func (s *Stream) ResponseHeader(name string) (string, bool) {
	defer s.lock()()
	return s.resp.headers.get(lowerASCII(name))
}

// RequestBodyForwarded returns the request body that went upstream so far
// (empty once the stream ended).
func (s *Stream) RequestBodyForwarded() []byte {
	defer s.lock()()
	return append([]byte(nil), s.req.body.forwarded...)
}

// ResponseBodyForwarded returns the response body that went downstream so
// far (empty once the stream ended).
func (s *Stream) ResponseBodyForwarded() []byte {
	defer s.lock()()
	return append([]byte(nil), s.resp.body.forwarded...)
}

// ResponseBodyForwardedFrom returns the part of ResponseBodyForwarded from
// byte off on (nil when there is none), copying only that part: a proxy
// that writes each streamed chunk downstream as it passes asks for the
// bytes past those it wrote, at a cost of the chunk rather than of the body
// so far (TestResponseBodyForwardedFrom).
func (s *Stream) ResponseBodyForwardedFrom(off int) []byte {
	defer s.lock()()
	fwd := s.resp.body.forwarded
	if off < 0 || off >= len(fwd) {
		return nil
	}
	return append([]byte(nil), fwd[off:]...)
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

// RequestPaused reports whether the filter holds the request: a request
// callback answered PAUSE and no proxy_continue_stream(REQUEST) released it
// since. While it holds, nothing of the request goes upstream.
func (s *Stream) RequestPaused() bool {
	defer s.lock()()
	return s.req.state != iterating
}

// ResponsePaused is RequestPaused for the response.
func (s *Stream) ResponsePaused() bool {
	defer s.lock()()
	return s.resp.state != iterating
}

// Closed reports whether that side was reset: by the guest's
// proxy_close_stream, or (StreamResponse) by a local reply the guest sent
// after the response headers had gone downstream, which Envoy can only
// answer with a reset.
func (s *Stream) Closed(t StreamType) bool {
	defer s.lock()()
	return int(t) < len(s.closed) && s.closed[t]
}

// Ended reports whether a local reply, a reset or Done ended the stream.
func (s *Stream) Ended() bool {
	defer s.lock()()
	return s.replied || s.destroyed
}

// RouteCacheClears counts "clear_route_cache" foreign calls on the stream.
func (s *Stream) RouteCacheClears() int {
	defer s.lock()()
	return s.routeClears
}

// OnRequestResumed sets f to run each time proxy_continue_stream(REQUEST)
// releases the held request, whichever callback of the VM made the call (a
// tick, another stream's callback, proxy_on_queue_ready, an http_call
// response): the request headers as the guest left them and the body held
// so far have then gone upstream (RequestHeaderMap, RequestBodyForwarded).
// f runs once the guest call returned and the VM is unlocked, at the
// virtual time of that callback (Host.Now), on the goroutine that drove it
// (the embedder's call or Host.Advance); it may call back into the host.
// A nil f removes the hook.
func (s *Stream) OnRequestResumed(f func()) {
	defer s.lock()()
	s.onRequestResumed = f
}

// OnResponseResumed is OnRequestResumed for proxy_continue_stream(RESPONSE):
// the response headers and the body held so far have gone downstream.
func (s *Stream) OnResponseResumed(f func()) {
	defer s.lock()()
	s.onResponseResumed = f
}

// OnLocalReply sets f to run when a local reply the guest sent with
// proxy_send_local_response has been sent (see OnRequestResumed for when and
// where f runs). The stream has then ended: Envoy ran the guest's response
// callbacks on the reply and then proxy_on_log, proxy_on_done and
// proxy_on_delete.
func (s *Stream) OnLocalReply(f func(*LocalReply)) {
	defer s.lock()()
	s.onLocalReply = f
}

// OnReset sets f to run when the guest reset the stream with
// proxy_close_stream (see OnRequestResumed for when and where f runs). The
// stream has then ended: proxy_on_log, proxy_on_done and proxy_on_delete ran.
func (s *Stream) OnReset(f func()) {
	defer s.lock()()
	s.onReset = f
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
// property path encoding (spec proxy_get_property).
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
