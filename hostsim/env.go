package hostsim

import (
	"context"
	"encoding/binary"
	"strconv"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// Host functions of module "env" (ABI.md §2.4), registered as
// api.GoModuleFunc: reflection-based registration costs ~20% of a small
// request (DESIGN.md §4). Each runs inside a guest callback with the VM
// lock held and returns a proxy_status_t in stack[0].

const i32, i64 = api.ValueTypeI32, api.ValueTypeI64

type hostFunc struct {
	name    string
	params  int // all i32 unless i64At >= 0
	i64At   int
	results int
	fn      func(vm *VM, s []uint64) Status
}

// vmOf finds the calling VM; during _initialize its memory is not yet recorded.
func vmOf(ctx context.Context, mod api.Module) *VM {
	vm := ctx.Value(vmKey{}).(*VM)
	if vm.mem == nil {
		vm.mem = mod.Memory()
	}
	return vm
}

func u32(s []uint64, i int) uint32 { return uint32(s[i]) }

var envFuncs = []hostFunc{
	{"proxy_log", 3, -1, 1, hLog},
	{"proxy_get_log_level", 1, -1, 1, func(vm *VM, s []uint64) Status {
		return vm.putU32(u32(s, 0), uint32(vm.host.opts.LogLevel))
	}},
	{"proxy_set_tick_period_milliseconds", 1, -1, 1, func(vm *VM, s []uint64) Status {
		if vm.curRoot == nil {
			return StatusBadArgument
		}
		vm.curRoot.setTickLocked(time.Duration(u32(s, 0)) * time.Millisecond)
		return StatusOK
	}},
	{"proxy_get_current_time_nanoseconds", 1, -1, 1, func(vm *VM, s []uint64) Status {
		return vm.putU64(u32(s, 0), uint64(vm.host.WallTime().UnixNano()))
	}},
	{"proxy_get_buffer_bytes", 5, -1, 1, hGetBufferBytes},
	{"proxy_set_buffer_bytes", 5, -1, 1, hSetBufferBytes},
	{"proxy_get_buffer_status", 3, -1, 1, func(vm *VM, s []uint64) Status {
		b := vm.buffer(BufferType(u32(s, 0)))
		if b == nil {
			return StatusNotFound
		}
		if st := vm.putU32(u32(s, 1), uint32(len(*b))); st != StatusOK {
			return st
		}
		return vm.putU32(u32(s, 2), 0)
	}},
	{"proxy_get_header_map_pairs", 3, -1, 1, func(vm *VM, s []uint64) Status {
		t := MapType(u32(s, 0))
		if t > maxMapType {
			return StatusBadArgument
		}
		// A map that is not there reads as empty (envoy context.cc
		// headerMapToPairs of nullptr).
		m := vm.headerMap(t, false)
		if m == nil || len(m.kv) == 0 {
			return vm.copyOut(nil, u32(s, 1), u32(s, 2))
		}
		vm.scratch = AppendPairs(vm.scratch[:0], m.kv)
		return vm.copyOut(vm.scratch, u32(s, 1), u32(s, 2))
	}},
	{"proxy_set_header_map_pairs", 3, -1, 1, func(vm *VM, s []uint64) Status {
		m := vm.headerMap(MapType(u32(s, 0)), true)
		if m == nil {
			return StatusBadArgument
		}
		b, ok := vm.read(u32(s, 1), u32(s, 2))
		if !ok {
			return StatusInvalidMemoryAccess
		}
		kv, err := DecodePairs(b)
		if err != nil {
			return StatusBadArgument
		}
		// Envoy removes every existing header, then adds the new ones.
		m.kv = lowerHeaders(kv)
		return StatusOK
	}},
	{"proxy_get_header_map_size", 2, -1, 1, func(vm *VM, s []uint64) Status {
		// Envoy sizes only the maps a stream may write.
		m := vm.headerMap(MapType(u32(s, 0)), true)
		if m == nil {
			return StatusBadArgument
		}
		n := 4
		for _, kv := range m.kv {
			n += 10 + len(kv[0]) + len(kv[1])
		}
		return vm.putU32(u32(s, 1), uint32(n))
	}},
	{"proxy_get_header_map_value", 5, -1, 1, func(vm *VM, s []uint64) Status {
		m := vm.headerMap(MapType(u32(s, 0)), false)
		if m == nil {
			if vm.curStream != nil && vm.curStream.inLog {
				return StatusNotFound // in Envoy's access-log phase a missing map is NOT_FOUND
			}
			return StatusBadArgument
		}
		k, ok := vm.read(u32(s, 1), u32(s, 2))
		if !ok {
			return StatusInvalidMemoryAccess
		}
		v, found := m.get(lowerASCII(string(k)))
		if !found {
			return StatusNotFound
		}
		return vm.copyOutString(v, u32(s, 3), u32(s, 4))
	}},
	{"proxy_add_header_map_value", 5, -1, 1, func(vm *VM, s []uint64) Status {
		return vm.mutateHeader(s, (*headerMap).add)
	}},
	{"proxy_replace_header_map_value", 5, -1, 1, func(vm *VM, s []uint64) Status {
		return vm.mutateHeader(s, (*headerMap).replace)
	}},
	{"proxy_remove_header_map_value", 3, -1, 1, func(vm *VM, s []uint64) Status {
		m := vm.headerMap(MapType(u32(s, 0)), true)
		if m == nil {
			return StatusBadArgument
		}
		k, ok := vm.read(u32(s, 1), u32(s, 2))
		if !ok {
			return StatusInvalidMemoryAccess
		}
		m.remove(lowerASCII(string(k)))
		return StatusOK
	}},
	{"proxy_continue_stream", 1, -1, 1, func(vm *VM, s []uint64) Status {
		return vm.streamOp(StreamType(u32(s, 0)), false)
	}},
	{"proxy_close_stream", 1, -1, 1, func(vm *VM, s []uint64) Status {
		return vm.streamOp(StreamType(u32(s, 0)), true)
	}},
	{"proxy_get_status", 3, -1, 1, func(vm *VM, s []uint64) Status {
		code, msg := uint32(0), ""
		if r := vm.callResp; r != nil {
			code = uint32(r.status)
			if r.failed {
				msg = "timeout or reset"
			}
		}
		if st := vm.putU32(u32(s, 0), code); st != StatusOK {
			return st
		}
		return vm.copyOutString(msg, u32(s, 1), u32(s, 2))
	}},
	{"proxy_send_local_response", 8, -1, 1, hSendLocalResponse},
	{"proxy_http_call", 10, -1, 1, hHTTPCall},
	{"proxy_set_shared_data", 5, -1, 1, func(vm *VM, s []uint64) Status {
		k, ok1 := vm.read(u32(s, 0), u32(s, 1))
		v, ok2 := vm.read(u32(s, 2), u32(s, 3))
		if !ok1 || !ok2 {
			return StatusInvalidMemoryAccess
		}
		return vm.host.setShared(vm.id, string(k), v, u32(s, 4))
	}},
	{"proxy_get_shared_data", 5, -1, 1, func(vm *VM, s []uint64) Status {
		k, ok := vm.read(u32(s, 0), u32(s, 1))
		if !ok {
			return StatusInvalidMemoryAccess
		}
		v, cas, st := vm.host.getShared(vm.id, string(k), vm.scratch[:0])
		if st != StatusOK {
			return st
		}
		vm.scratch = v
		if st := vm.copyOut(v, u32(s, 2), u32(s, 3)); st != StatusOK {
			return st
		}
		return vm.putU32(u32(s, 4), cas)
	}},
	{"proxy_register_shared_queue", 3, -1, 1, hRegisterQueue},
	{"proxy_resolve_shared_queue", 5, -1, 1, func(vm *VM, s []uint64) Status {
		id, ok1 := vm.read(u32(s, 0), u32(s, 1))
		name, ok2 := vm.read(u32(s, 2), u32(s, 3))
		if !ok1 || !ok2 {
			return StatusInvalidMemoryAccess
		}
		h := vm.host
		h.mu.Lock()
		q := h.qByName[queueKey{string(id), string(name)}]
		h.mu.Unlock()
		if q == nil {
			return StatusNotFound
		}
		return vm.putU32(u32(s, 4), q.id)
	}},
	{"proxy_enqueue_shared_queue", 3, -1, 1, hEnqueue},
	{"proxy_dequeue_shared_queue", 3, -1, 1, func(vm *VM, s []uint64) Status {
		h := vm.host
		h.mu.Lock()
		q := h.queueLocked(u32(s, 0))
		if q == nil {
			h.mu.Unlock()
			return StatusNotFound
		}
		if len(q.items) == 0 {
			h.mu.Unlock()
			return StatusEmpty
		}
		v := q.items[0]
		q.items[0] = nil
		q.items = q.items[1:]
		h.mu.Unlock()
		return vm.copyOut(v, u32(s, 1), u32(s, 2))
	}},
	{"proxy_define_metric", 4, -1, 1, hDefineMetric},
	{"proxy_increment_metric", 2, 1, 1, func(vm *VM, s []uint64) Status {
		return vm.updateMetric(u32(s, 0), int64(s[1]), false)
	}},
	{"proxy_record_metric", 2, 1, 1, func(vm *VM, s []uint64) Status {
		return vm.updateMetric(u32(s, 0), int64(s[1]), true)
	}},
	{"proxy_get_metric", 2, -1, 1, func(vm *VM, s []uint64) Status {
		h := vm.host
		h.mu.Lock()
		m := vm.metricIDs[u32(s, 0)]
		var v int64
		typ := MetricHistogram
		if m != nil {
			v, typ = m.value, m.typ
		}
		h.mu.Unlock()
		if m == nil {
			return StatusNotFound
		}
		if typ == MetricHistogram {
			return StatusBadArgument
		}
		return vm.putU64(u32(s, 1), uint64(v))
	}},
	{"proxy_get_property", 4, -1, 1, func(vm *VM, s []uint64) Status {
		p, ok := vm.read(u32(s, 0), u32(s, 1))
		if !ok {
			return StatusInvalidMemoryAccess
		}
		v, found := vm.property(string(p))
		if !found {
			return StatusNotFound
		}
		return vm.copyOut(v, u32(s, 2), u32(s, 3))
	}},
	{"proxy_set_property", 4, -1, 1, func(vm *VM, s []uint64) Status {
		p, ok1 := vm.read(u32(s, 0), u32(s, 1))
		v, ok2 := vm.read(u32(s, 2), u32(s, 3))
		if !ok1 || !ok2 {
			return StatusInvalidMemoryAccess
		}
		var props *map[string][]byte
		switch {
		case vm.curStream != nil:
			props = &vm.curStream.props
		case vm.curRoot != nil:
			props = &vm.curRoot.props
		default:
			return StatusBadArgument
		}
		if *props == nil {
			*props = map[string][]byte{}
		}
		(*props)[string(p)] = append([]byte(nil), v...)
		return StatusOK
	}},
	{"proxy_set_effective_context", 1, -1, 1, func(vm *VM, s []uint64) Status {
		id := u32(s, 0)
		if st := vm.streams[id]; st != nil {
			vm.curRoot, vm.curStream = st.root, st
			return StatusOK
		}
		if r := vm.roots[id]; r != nil {
			vm.curRoot, vm.curStream = r, nil
			return StatusOK
		}
		return StatusBadArgument
	}},
	{"proxy_done", 0, -1, 1, func(vm *VM, s []uint64) Status {
		r := vm.curRoot
		if r == nil || vm.curStream != nil {
			return StatusNotFound
		}
		if r.retired && !r.doneOK {
			r.doneOK = true
			// Deleting the root re-enters the guest: post it, as cpp-host does.
			h := vm.host
			h.mu.Lock()
			h.scheduleLocked(h.now, func() error {
				vm.mu.Lock()
				defer vm.unlock()
				if vm.usable() != nil {
					return nil
				}
				return vm.maybeDeleteRootLocked(r)
			})
			h.mu.Unlock()
		}
		return StatusOK
	}},
	{"proxy_call_foreign_function", 6, -1, 1, func(vm *VM, s []uint64) Status {
		name, ok1 := vm.read(u32(s, 0), u32(s, 1))
		args, ok2 := vm.read(u32(s, 2), u32(s, 3))
		if !ok1 || !ok2 {
			return StatusInvalidMemoryAccess
		}
		// The two functions Envoy registers (source/extensions/common/wasm/foreign.cc).
		switch string(name) {
		case "clear_route_cache":
			if vm.curStream != nil {
				vm.curStream.routeClears++
			}
		case "set_envoy_filter_state":
			if vm.curStream == nil {
				return StatusBadArgument
			}
			if vm.curStream.filterState == nil {
				vm.curStream.filterState = map[string][]byte{}
			}
			vm.curStream.filterState["raw"] = append([]byte(nil), args...)
		default:
			return StatusNotFound
		}
		return vm.copyOut(nil, u32(s, 4), u32(s, 5))
	}},
}

// EnvImports lists the proxy_* functions hostsim's "env" module provides.
func EnvImports() []string {
	out := make([]string, len(envFuncs))
	for i, f := range envFuncs {
		out[i] = f.name
	}
	return out
}

func (h *Host) instantiateHostModules(ctx context.Context) error {
	b := h.rt.NewHostModuleBuilder(EnvModuleName)
	for _, f := range envFuncs {
		params := make([]api.ValueType, f.params)
		for i := range params {
			params[i] = i32
			if i == f.i64At {
				params[i] = i64
			}
		}
		fn := f.fn
		b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, s []uint64) {
			vm := vmOf(ctx, mod)
			vm.hostCall(func() { s[0] = uint64(fn(vm, s)) })
		}), params, []api.ValueType{i32}).Export(f.name)
	}
	if _, err := b.Instantiate(ctx); err != nil {
		return err
	}
	return h.instantiateWASI(ctx)
}

var _ wazero.HostModuleBuilder // the builder type used above

// Memory helpers. Guest pointers are i32 offsets; out-values are little-endian.

func (vm *VM) read(ptr, n uint32) ([]byte, bool) {
	if n == 0 {
		return nil, true
	}
	return vm.mem.Read(ptr, n)
}

func (vm *VM) putU32(ptr, v uint32) Status {
	if !vm.mem.WriteUint32Le(ptr, v) {
		return StatusInvalidMemoryAccess
	}
	return StatusOK
}

func (vm *VM) putU64(ptr uint32, v uint64) Status {
	if !vm.mem.WriteUint64Le(ptr, v) {
		return StatusInvalidMemoryAccess
	}
	return StatusOK
}

// malloc asks the guest for n bytes through proxy_on_memory_allocate, the
// spec's way for a host to hand data to the guest. A trap inside it fails
// the enclosing callback.
func (vm *VM) malloc(n uint32) uint32 {
	st := vm.allocStack[:]
	st[0] = uint64(n)
	var t0 int64
	if vm.timeGuest {
		t0 = nanotime()
	}
	if err := vm.fn[fnMalloc].CallWithStack(vm.callCtx, st); err != nil {
		panic(err)
	}
	if vm.timeGuest {
		// The guest's, inside the host function that asked for it: the
		// export's time counts it once the host function's no longer does
		// (less one clock read, guestclock.go).
		vm.hostTime -= time.Duration(nanotime() - t0 - clockReadNanos)
	}
	return uint32(st[0])
}

// copyOut copies data into a fresh guest buffer and writes its pointer and
// length to the out-pointers; empty data writes 0, 0 (cpp-host copyToPointerSize).
func (vm *VM) copyOut(data []byte, ptrPtr, lenPtr uint32) Status {
	var p uint32
	if len(data) > 0 {
		p = vm.malloc(uint32(len(data)))
		if p == 0 || !vm.mem.Write(p, data) {
			return StatusInvalidMemoryAccess
		}
	}
	if st := vm.putU32(ptrPtr, p); st != StatusOK {
		return st
	}
	return vm.putU32(lenPtr, uint32(len(data)))
}

func (vm *VM) copyOutString(v string, ptrPtr, lenPtr uint32) Status {
	var p uint32
	if len(v) > 0 {
		p = vm.malloc(uint32(len(v)))
		if p == 0 || !vm.mem.WriteString(p, v) {
			return StatusInvalidMemoryAccess
		}
	}
	if st := vm.putU32(ptrPtr, p); st != StatusOK {
		return st
	}
	return vm.putU32(lenPtr, uint32(len(v)))
}

func hLog(vm *VM, s []uint64) Status {
	lvl := LogLevel(u32(s, 0))
	if lvl > LogCritical {
		return StatusBadArgument
	}
	msg, ok := vm.read(u32(s, 1), u32(s, 2))
	if !ok {
		return StatusInvalidMemoryAccess
	}
	vm.host.log(LogEntry{VMID: vm.id, Context: vm.curID(), Level: lvl, Message: string(msg)})
	return StatusOK
}

func (vm *VM) curID() uint32 {
	if vm.curStream != nil {
		return vm.curStream.id
	}
	if vm.curRoot != nil {
		return vm.curRoot.id
	}
	return 0
}

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

func hHTTPCall(vm *VM, s []uint64) Status {
	r := vm.curRoot
	if r == nil {
		return StatusBadArgument
	}
	up, ok1 := vm.read(u32(s, 0), u32(s, 1))
	hb, ok2 := vm.read(u32(s, 2), u32(s, 3))
	body, ok3 := vm.read(u32(s, 4), u32(s, 5))
	tb, ok4 := vm.read(u32(s, 6), u32(s, 7))
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return StatusInvalidMemoryAccess
	}
	hdrs, err1 := DecodePairs(hb)
	trailers, err2 := DecodePairs(tb)
	if err1 != nil || err2 != nil {
		return StatusBadArgument
	}
	h := vm.host
	h.mu.Lock()
	c := h.clusters[string(up)]
	now := h.now
	h.mu.Unlock()
	if c == nil {
		return StatusBadArgument
	}
	req := &CallRequest{
		Cluster:  string(up),
		Headers:  lowerHeaders(hdrs),
		Body:     append([]byte(nil), body...),
		Trailers: lowerHeaders(trailers),
		Timeout:  time.Duration(u32(s, 8)) * time.Millisecond,
		Now:      now,
		VMID:     vm.id,
	}
	hm := headerMap{kv: req.Headers}
	var ok bool
	if req.Method, ok = hm.get(headerMethod); !ok {
		return StatusBadArgument
	}
	if req.Path, ok = hm.get(headerPath); !ok {
		return StatusBadArgument
	}
	if req.Authority, ok = hm.get(headerAuthority); !ok {
		return StatusBadArgument
	}
	vm.nextCallID++
	if vm.nextCallID == 0 {
		vm.nextCallID++
	}
	token := vm.nextCallID
	if st := vm.putU32(u32(s, 9), token); st != StatusOK {
		return st
	}
	reply := c.Handle(req)
	resp := &callResponse{}
	at := now + reply.Latency
	if reply.NoAnswer || (req.Timeout > 0 && reply.Latency > req.Timeout) {
		if req.Timeout == 0 {
			return StatusOK // Envoy would wait forever
		}
		resp.failed = true
		at = now + req.Timeout
	} else {
		resp.status = reply.Status
		if resp.status == 0 {
			resp.status = 200
		}
		resp.headers = append([][2]string{{headerStatus, strconv.Itoa(resp.status)}}, lowerHeaders(reply.Headers)...)
		resp.body = append([]byte(nil), reply.Body...)
		resp.trailers = lowerHeaders(reply.Trailers)
	}
	h.mu.Lock()
	h.scheduleLocked(at, func() error { return vm.deliverCallResponse(r, token, resp) })
	h.mu.Unlock()
	return StatusOK
}

func (vm *VM) deliverCallResponse(r *Root, token uint32, resp *callResponse) error {
	vm.mu.Lock()
	defer vm.unlock()
	// Envoy cancels a root's pending calls when the root goes away.
	if vm.usable() != nil || r.deleted {
		return nil
	}
	return vm.withContext(r, nil, func() error {
		vm.callResp = resp
		defer func() { vm.callResp = nil }()
		_, err := vm.invoke(fnOnHTTPCallResponse, 0, 5, uint64(r.id), uint64(token),
			uint64(len(resp.headers)), uint64(len(resp.body)), uint64(len(resp.trailers)))
		return err
	})
}

func hRegisterQueue(vm *VM, s []uint64) Status {
	r := vm.curRoot
	if r == nil {
		return StatusBadArgument
	}
	name, ok := vm.read(u32(s, 0), u32(s, 1))
	if !ok {
		return StatusInvalidMemoryAccess
	}
	h := vm.host
	h.mu.Lock()
	key := queueKey{vm.id, string(name)}
	q := h.qByName[key]
	if q == nil {
		q = &queue{id: uint32(len(h.queues) + 1), key: key}
		h.queues = append(h.queues, q)
		h.qByName[key] = q
	}
	// The registering root receives proxy_on_queue_ready from now on.
	q.owner, q.root = vm, r.id
	h.mu.Unlock()
	return vm.putU32(u32(s, 2), q.id)
}

func (h *Host) queueLocked(id uint32) *queue {
	if id == 0 || int(id) > len(h.queues) {
		return nil
	}
	return h.queues[id-1]
}

func hEnqueue(vm *VM, s []uint64) Status {
	v, ok := vm.read(u32(s, 1), u32(s, 2))
	if !ok {
		return StatusInvalidMemoryAccess
	}
	h := vm.host
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queueLocked(u32(s, 0))
	if q == nil {
		return StatusNotFound
	}
	q.items = append(q.items, append([]byte(nil), v...))
	owner, rootID, qid := q.owner, q.root, q.id
	// cpp-host posts on_queue_ready to the registering VM's thread.
	h.scheduleLocked(h.now, func() error { return owner.deliverQueueReady(rootID, qid) })
	return StatusOK
}

func (vm *VM) deliverQueueReady(rootID, qid uint32) error {
	vm.mu.Lock()
	defer vm.unlock()
	r := vm.roots[rootID]
	if vm.usable() != nil || r == nil {
		return nil
	}
	return vm.withContext(r, nil, func() error {
		_, err := vm.invoke(fnOnQueueReady, 0, 2, uint64(rootID), uint64(qid), 0, 0, 0)
		return err
	})
}

func hDefineMetric(vm *VM, s []uint64) Status {
	t := MetricType(u32(s, 0))
	if t > MetricHistogram {
		return StatusBadArgument
	}
	name, ok := vm.read(u32(s, 1), u32(s, 2))
	if !ok {
		return StatusInvalidMemoryAccess
	}
	h := vm.host
	h.mu.Lock()
	m := h.metrics[string(name)]
	if m == nil {
		m = &metric{name: string(name), typ: t}
		h.metrics[m.name] = m
	} else if m.typ != t {
		h.mu.Unlock()
		return StatusBadArgument
	}
	// Envoy hands out a fresh id per definition with the type in the low
	// bits; the stat behind it is the same for the same name.
	vm.nextMetricID++
	id := vm.nextMetricID<<2 | uint32(t)
	vm.metricIDs[id] = m
	h.mu.Unlock()
	return vm.putU32(u32(s, 3), id)
}

func (vm *VM) updateMetric(id uint32, v int64, record bool) Status {
	h := vm.host
	h.mu.Lock()
	defer h.mu.Unlock()
	m := vm.metricIDs[id]
	if m == nil {
		return StatusNotFound
	}
	switch m.typ {
	case MetricCounter:
		if v < 0 {
			return StatusBadArgument
		}
		m.value += v
	case MetricGauge:
		if record {
			m.value = v
		} else {
			m.value += v
		}
	case MetricHistogram:
		if !record {
			return StatusBadArgument
		}
		m.samples = append(m.samples, uint64(v))
	}
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
