package hostsim

import (
	"context"
	"encoding/binary"
	"strconv"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// hostsim's own wasi_snapshot_preview1, copying what Envoy's proxy-wasm host
// provides (proxy-wasm-cpp-host src/exports.cc) rather than
// wazero's full WASI, so a guest that would fail in Envoy fails here too.

type wasiFunc struct {
	name    string
	params  []api.ValueType
	results int
	fn      func(vm *VM, s []uint64) uint32
}

func i32s(n int) []api.ValueType {
	out := make([]api.ValueType, n)
	for i := range out {
		out[i] = i32
	}
	return out
}

// procExit is the panic value of proc_exit: Envoy treats it as a trap.
type procExit struct{ code uint32 }

func (p procExit) Error() string {
	return "proc_exit(" + strconv.FormatUint(uint64(p.code), 10) + ")"
}

var wasiFuncs = []wasiFunc{
	{"args_get", i32s(2), 1, func(*VM, []uint64) uint32 { return errnoSuccess }},
	{"args_sizes_get", i32s(2), 1, zeroSizes},
	{"environ_get", i32s(2), 1, func(*VM, []uint64) uint32 { return errnoSuccess }},
	{"environ_sizes_get", i32s(2), 1, zeroSizes},
	{"clock_time_get", []api.ValueType{i32, i64, i32}, 1, func(vm *VM, s []uint64) uint32 {
		var ns uint64
		switch u32(s, 0) {
		case 0: // REALTIME
			ns = uint64(vm.host.WallTime().UnixNano())
		case 1: // MONOTONIC
			ns = uint64(monotonicBase + vm.host.Now())
		default:
			return errnoNotsup // cpp-host: any other clock id
		}
		if !vm.mem.WriteUint64Le(u32(s, 2), ns) {
			return errnoFault
		}
		return errnoSuccess
	}},
	{"fd_write", i32s(4), 1, fdWrite},
	{"random_get", i32s(2), 1, func(vm *VM, s []uint64) uint32 {
		buf, ok := vm.read(u32(s, 0), u32(s, 1))
		if !ok {
			return errnoFault
		}
		h := vm.host
		h.mu.Lock()
		var w [8]byte
		for i := 0; i < len(buf); i += 8 {
			binary.LittleEndian.PutUint64(w[:], h.rng.Uint64())
			copy(buf[i:], w[:])
		}
		h.mu.Unlock()
		return errnoSuccess
	}},
	{"proc_exit", i32s(1), 0, func(_ *VM, s []uint64) uint32 { panic(procExit{u32(s, 0)}) }},
	{"sched_yield", nil, 1, func(*VM, []uint64) uint32 { return errnoSuccess }},
	{"poll_oneoff", i32s(4), 1, pollOneoff},
	{"fd_fdstat_get", i32s(2), 1, func(vm *VM, s []uint64) uint32 {
		fd := u32(s, 0)
		if fd != 1 && fd != 2 {
			return errnoBadf
		}
		// cpp-host's fdstat: all zero (filetype UNKNOWN, no flags) but the
		// base rights, FD_WRITE (1<<6).
		var st [24]byte
		binary.LittleEndian.PutUint64(st[8:], 1<<6)
		if !vm.mem.Write(u32(s, 1), st[:]) {
			return errnoFault
		}
		return errnoSuccess
	}},
	{"fd_fdstat_set_flags", i32s(2), 1, func(*VM, []uint64) uint32 { return errnoNosys }},
	{"fd_prestat_get", i32s(2), 1, func(*VM, []uint64) uint32 { return errnoBadf }},
	{"fd_prestat_dir_name", i32s(3), 1, func(*VM, []uint64) uint32 { return errnoNosys }},
	{"fd_close", i32s(1), 1, func(*VM, []uint64) uint32 { return errnoBadf }},
	{"fd_read", i32s(4), 1, func(*VM, []uint64) uint32 { return errnoBadf }},
	{"fd_seek", []api.ValueType{i32, i64, i32, i32}, 1, func(*VM, []uint64) uint32 { return errnoBadf }},
	{"path_open", []api.ValueType{i32, i32, i32, i32, i32, i64, i64, i32, i32}, 1,
		func(*VM, []uint64) uint32 { return errnoBadf }},
}

func zeroSizes(vm *VM, s []uint64) uint32 {
	if !vm.mem.WriteUint32Le(u32(s, 0), 0) || !vm.mem.WriteUint32Le(u32(s, 1), 0) {
		return errnoFault
	}
	return errnoSuccess
}

// WASIImports lists the wasi_snapshot_preview1 functions hostsim provides.
func WASIImports() []string {
	out := make([]string, len(wasiFuncs))
	for i, f := range wasiFuncs {
		out[i] = f.name
	}
	return out
}

func instantiateWASI(ctx context.Context, rt wazero.Runtime) error {
	b := rt.NewHostModuleBuilder(WASIModuleName)
	for _, f := range wasiFuncs {
		fn := f.fn
		var results []api.ValueType
		if f.results == 1 {
			results = []api.ValueType{i32}
		}
		full := WASIModuleName + "." + f.name
		b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, s []uint64) {
			vm := vmOf(ctx, mod)
			vm.checkAllowed(full)
			vm.hostCall(func() {
				r := fn(vm, s)
				if len(s) > 0 {
					s[0] = uint64(r)
				}
			})
		}), f.params, results).Export(f.name)
	}
	_, err := b.Instantiate(ctx)
	return err
}

// stderrHeadMax bounds the stderr kept for a trap message: a Go panic
// prints its message first, then goroutine traces.
const stderrHeadMax = 300

func fdWrite(vm *VM, s []uint64) uint32 {
	fd := u32(s, 0)
	if fd != 1 && fd != 2 {
		return errnoBadf
	}
	iovs, n := u32(s, 1), u32(s, 2)
	var msg []byte
	for i := uint32(0); i < n; i++ {
		ptr, ok1 := vm.mem.ReadUint32Le(iovs + 8*i)
		l, ok2 := vm.mem.ReadUint32Le(iovs + 8*i + 4)
		if !ok1 || !ok2 {
			return errnoFault
		}
		b, ok := vm.read(ptr, l)
		if !ok {
			return errnoFault
		}
		msg = append(msg, b...)
	}
	if !vm.mem.WriteUint32Le(u32(s, 3), uint32(len(msg))) {
		return errnoFault
	}
	lvl := LogInfo
	if fd == 2 {
		lvl = LogError
		if room := stderrHeadMax - len(vm.stderr); room > 0 {
			vm.stderr = append(vm.stderr, msg[:min(room, len(msg))]...)
		}
	}
	if len(msg) > 0 && msg[len(msg)-1] == '\n' {
		msg = msg[:len(msg)-1]
	}
	vm.host.log(LogEntry{VMID: vm.id, Context: vm.curID(), Level: lvl, Message: string(msg)})
	return errnoSuccess
}

// WASI subscription layout (witx "subscription"): 48 bytes; tag at 8; for a
// clock: timeout u64 at 24, flags u16 at 40 (bit 0: absolute).
const (
	subscriptionSize = 48
	eventClock       = 0
)

func pollOneoff(vm *VM, s []uint64) uint32 {
	h := vm.host
	h.mu.Lock()
	h.pollCalls++
	h.mu.Unlock()
	if h.opts.Poll == PollENOSYS {
		return errnoNosys
	}
	in, n := u32(s, 0), u32(s, 2)
	// Emulate the busy spin of PR #533 on a virtual clock: the spin burns
	// wall time until the earliest clock subscription expires, so move time.
	var wait time.Duration = -1
	for i := uint32(0); i < n; i++ {
		sub, ok := vm.read(in+i*subscriptionSize, subscriptionSize)
		if !ok {
			return errnoFault
		}
		if sub[8] != eventClock {
			continue
		}
		timeout := time.Duration(binary.LittleEndian.Uint64(sub[24:]))
		if binary.LittleEndian.Uint16(sub[40:])&1 != 0 {
			timeout -= monotonicBase + h.Now()
		}
		if timeout < 0 {
			timeout = 0
		}
		if wait < 0 || timeout < wait {
			wait = timeout
		}
	}
	if wait > 0 {
		h.mu.Lock()
		h.now += wait
		h.mu.Unlock()
	}
	if !vm.mem.WriteUint32Le(u32(s, 3), 0) {
		return errnoFault
	}
	return errnoSuccess
}
