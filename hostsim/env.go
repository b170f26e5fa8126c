package hostsim

import (
	"context"
	"slices"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// Host functions of module "env" (spec abi-versions/v0.2.1), registered as
// api.GoModuleFunc, which passes the stack as is, rather than through
// wazero's reflection, which is slower per call (docs/performance.md
// "Request path"). Each runs inside a guest callback with the VM lock held
// and returns a proxy_status_t in stack[0].

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
		// Only a root whose proxy_on_done answered false is waiting for
		// it (cpp-host WasmBase::done); its proxy_on_delete runs once this
		// guest call returns.
		r := vm.curRoot
		if r == nil || vm.curStream != nil || !r.retired || r.doneOK {
			return StatusNotFound
		}
		r.doneOK = true
		vm.deferCall(deferredCall{op: opDeleteRoot, r: r})
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

func instantiateHostModules(ctx context.Context, rt wazero.Runtime) error {
	b := rt.NewHostModuleBuilder(EnvModuleName)
	for _, f := range envFuncs {
		params := make([]api.ValueType, f.params)
		for i := range params {
			params[i] = i32
			if i == f.i64At {
				params[i] = i64
			}
		}
		fn, full := f.fn, EnvModuleName+"."+f.name
		b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, s []uint64) {
			vm := vmOf(ctx, mod)
			vm.checkAllowed(full)
			vm.hostCall(func() { s[0] = uint64(fn(vm, s)) })
		}), params, []api.ValueType{i32}).Export(f.name)
	}
	if _, err := b.Instantiate(ctx); err != nil {
		return err
	}
	return instantiateWASI(ctx, rt)
}

// Memory helpers. Guest pointers are i32 offsets; out-values are little-endian.

// checkAllowed traps a host call outside the allow-list in force, as V8's
// restricted callback does.
func (vm *VM) checkAllowed(name string) {
	if vm.restricted != nil && !slices.Contains(vm.restricted, name) {
		panic(restrictedCall(name))
	}
}

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
	_, vm.restricted = vm.host.opts.V8.allowed()
	err := vm.fn[fnMalloc].CallWithStack(vm.callCtx, st)
	vm.restricted = nil
	if err != nil {
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
