package hostsim

// Host functions of a stream: its buffers, header maps, stream control
// and properties, as Envoy's wasm filter answers them (envoy
// source/extensions/common/wasm/context.cc).

import (
	"encoding/binary"
	"strconv"
)

// buffer returns the buffer of type t visible in the current callback, or nil.
func (vm *VM) buffer(t BufferType) *[]byte {
	switch t {
	case BufferHTTPRequestBody:
		if s := vm.curStream; s != nil {
			return s.req.bodyView()
		}
	case BufferHTTPResponseBody:
		if s := vm.curStream; s != nil {
			return s.resp.bodyView()
		}
	case BufferHTTPCallResponseBody:
		if vm.callResp != nil {
			return &vm.callResp.body
		}
	case BufferVMConfiguration:
		return &vm.vmConfig
	case BufferPluginConfiguration:
		if vm.havePlugin {
			return &vm.pluginConfig
		}
	}
	return nil
}

func hGetBufferBytes(vm *VM, s []uint64) Status {
	t := BufferType(u32(s, 0))
	if t > maxBufferType {
		return StatusBadArgument
	}
	b := vm.buffer(t)
	if b == nil {
		return StatusNotFound
	}
	start, n := uint64(u32(s, 1)), uint64(u32(s, 2))
	size := uint64(len(*b))
	// cpp-host get_buffer_bytes: clamp to the buffer; nothing to copy is NOT_FOUND.
	if start >= size {
		return StatusNotFound
	}
	if start+n > size {
		n = size - start
	}
	if n == 0 {
		return StatusNotFound
	}
	return vm.copyOut((*b)[start:start+n], u32(s, 3), u32(s, 4))
}

func hSetBufferBytes(vm *VM, s []uint64) Status {
	t := BufferType(u32(s, 0))
	if t > maxBufferType {
		return StatusBadArgument
	}
	if t != BufferHTTPRequestBody && t != BufferHTTPResponseBody {
		if vm.buffer(t) == nil {
			return StatusNotFound
		}
		return StatusBadArgument
	}
	b := vm.buffer(t)
	if b == nil {
		return StatusNotFound
	}
	v, ok := vm.read(u32(s, 3), u32(s, 4))
	if !ok {
		return StatusInvalidMemoryAccess
	}
	start, size := int(u32(s, 1)), int(u32(s, 2))
	// Envoy Buffer::copyFrom: start 0 drains `size` bytes then prepends;
	// start at or past the end appends; anything else is BAD_ARGUMENT.
	switch {
	case start == 0:
		if size > len(*b) {
			size = len(*b)
		}
		nb := make([]byte, 0, len(v)+len(*b)-size)
		nb = append(nb, v...)
		nb = append(nb, (*b)[size:]...)
		*b = nb
	case start >= len(*b):
		*b = append(*b, v...)
	default:
		return StatusBadArgument
	}
	return StatusOK
}

// headerMap returns the map of type t visible now, or nil; HTTP-call
// response maps are read-only, as in Envoy.
func (vm *VM) headerMap(t MapType, write bool) *headerMap {
	var m *headerMap
	if s := vm.curStream; s != nil {
		open := false
		switch t {
		case MapHTTPRequestHeaders:
			m, open = &s.req.headers, s.req.headersOpen
		case MapHTTPRequestTrailers:
			m, open = &s.req.trailers, s.req.trailersOpen
		case MapHTTPResponseHeaders:
			m, open = &s.resp.headers, s.resp.headersOpen
		case MapHTTPResponseTrailers:
			m, open = &s.resp.trailers, s.resp.trailersOpen
		}
		// During proxy_on_log reads see the access log's request headers,
		// response headers and trailers (envoy context.cc getConstMap).
		if s.inLog && !write && t != MapHTTPRequestTrailers {
			open = true
		}
		if !open {
			m = nil
		}
	}
	if r := vm.callResp; r != nil && !write {
		switch t {
		case MapHTTPCallResponseHeaders:
			m = &headerMap{present: true, kv: r.headers}
		case MapHTTPCallResponseTrailers:
			m = &headerMap{present: true, kv: r.trailers}
		}
	}
	if m == nil || !m.present {
		return nil
	}
	return m
}

func (vm *VM) mutateHeader(s []uint64, op func(*headerMap, string, string)) Status {
	m := vm.headerMap(MapType(u32(s, 0)), true)
	if m == nil {
		return StatusBadArgument
	}
	k, ok1 := vm.read(u32(s, 1), u32(s, 2))
	v, ok2 := vm.read(u32(s, 3), u32(s, 4))
	if !ok1 || !ok2 {
		return StatusInvalidMemoryAccess
	}
	op(m, lowerASCII(string(k)), string(v))
	return StatusOK
}

// streamOp is proxy_continue_stream and proxy_close_stream (envoy
// context.cc continueStream, closeStream): DOWNSTREAM and UPSTREAM concern
// network filters (continue UPSTREAM is UNIMPLEMENTED, the rest a no-op),
// and a context that is no stream has nothing to continue or close.
func (vm *VM) streamOp(t StreamType, closeIt bool) Status {
	if t > StreamUpstream {
		return StatusBadArgument
	}
	if t == StreamUpstream && !closeIt {
		return StatusUnimplemented
	}
	s := vm.curStream
	if s == nil || t == StreamDownstream || t == StreamUpstream {
		return StatusOK
	}
	if closeIt {
		vm.deferCall(deferredCall{op: opClose, s: s, t: t})
	} else {
		vm.continueStream(s, t)
	}
	return StatusOK
}

// hSendLocalResponse records the reply and defers it to the end of the
// guest call (filter.go sendLocalReply). Envoy answers OK whatever happens
// to it: a context that is no stream, or a stream already answered, ignores
// it.
func hSendLocalResponse(vm *VM, s []uint64) Status {
	details, ok1 := vm.read(u32(s, 1), u32(s, 2))
	body, ok2 := vm.read(u32(s, 3), u32(s, 4))
	hdrs, ok3 := vm.read(u32(s, 5), u32(s, 6))
	if !ok1 || !ok2 || !ok3 {
		return StatusInvalidMemoryAccess
	}
	kv, err := DecodePairs(hdrs)
	if err != nil {
		return StatusBadArgument
	}
	st := vm.curStream
	if st == nil {
		return StatusOK
	}
	vm.deferCall(deferredCall{op: opLocalReply, s: st, lr: &LocalReply{
		Status:     int(u32(s, 0)),
		Details:    string(details),
		Body:       append([]byte(nil), body...),
		Headers:    lowerHeaders(kv),
		GRPCStatus: int32(u32(s, 7)),
	}})
	return StatusOK
}

// property resolves a NUL-separated property path: values set by the guest
// or the test win, then the computed ones Envoy provides
// (envoy source/extensions/common/wasm/context.cc), then host properties.
func (vm *VM) property(path string) ([]byte, bool) {
	if s := vm.curStream; s != nil {
		if v, ok := s.props[path]; ok {
			return v, true
		}
	}
	if r := vm.curRoot; r != nil {
		if v, ok := r.props[path]; ok {
			return v, true
		}
	}
	switch path {
	case "plugin_root_id", "plugin_name":
		if vm.curRoot != nil {
			return []byte(vm.curRoot.name), true
		}
	case "plugin_vm_id":
		return []byte(vm.id), true
	}
	if s := vm.curStream; s != nil {
		if v, ok := s.computedProperty(path); ok {
			return v, true
		}
	}
	v, ok := vm.host.opts.Properties[path]
	return v, ok
}

func (s *Stream) computedProperty(path string) ([]byte, bool) {
	hdr := func(m *headerMap, k string) ([]byte, bool) {
		v, ok := m.get(k)
		return []byte(v), ok
	}
	switch path {
	case "request\x00path":
		return hdr(&s.req.headers, headerPath)
	case "request\x00url_path":
		v, ok := s.req.headers.get(headerPath)
		for i := 0; i < len(v); i++ {
			if v[i] == '?' {
				v = v[:i]
				break
			}
		}
		return []byte(v), ok
	case "request\x00host":
		return hdr(&s.req.headers, headerAuthority)
	case "request\x00method":
		return hdr(&s.req.headers, headerMethod)
	case "request\x00scheme":
		return hdr(&s.req.headers, ":scheme")
	case "request\x00id":
		return hdr(&s.req.headers, "x-request-id")
	case "request\x00useragent":
		return hdr(&s.req.headers, "user-agent")
	case "request\x00referer":
		return hdr(&s.req.headers, "referer")
	case "request\x00headers":
		if s.req.headers.present {
			return EncodePairs(s.req.headers.kv), true
		}
	case "response\x00headers":
		if s.resp.headers.present {
			return EncodePairs(s.resp.headers.kv), true
		}
	case "response\x00code":
		if v, ok := s.resp.headers.get(headerStatus); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				return binary.LittleEndian.AppendUint64(nil, uint64(n)), true
			}
		}
		if s.local != nil {
			return binary.LittleEndian.AppendUint64(nil, uint64(s.local.Status)), true
		}
	}
	return nil, false
}
