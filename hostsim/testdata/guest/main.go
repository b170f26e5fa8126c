//go:build wasip1

// Command guest is hostsim's conformance guest: a proxy-wasm v0.2.1 module
// whose callbacks run small scripts of host calls taken from the plugin
// configuration and log each result with proxy_log, so tests can check
// every host call at the wasm boundary. It declares its own imports and
// exports from the spec (no SDK) and avoids fmt/os, which need host calls
// Envoy does not provide.
//
// Configuration: one line per callback, "callback: cmd args; cmd args".
// Callbacks: vm_start (from the VM configuration), configure, create,
// request_headers, request_body, request_trailers, response_headers,
// response_body, response_trailers, tick, http_call_response, queue_ready,
// done, log, delete. A line "quiet" turns off the per-callback trace.
// Arguments are split on spaces; "\s" is a space, "\0" a NUL, "-" empty,
// "$ctx" the current context id, "$held" the first id on the held list
// ("hold" appends the current context, "unhold" drops the first; 0 when
// empty). Each command logs "<callback> <cmd> = <status> <results>".
package main

import (
	"runtime"
	"strconv"
	"strings"
	"time"
	"unsafe"
)

func main() {}

//go:wasmimport env proxy_log
func proxyLog(level uint32, msg unsafe.Pointer, n uint32) uint32

//go:wasmimport env proxy_get_log_level
func proxyGetLogLevel(ret *uint32) uint32

//go:wasmimport env proxy_set_tick_period_milliseconds
func proxySetTick(ms uint32) uint32

//go:wasmimport env proxy_get_current_time_nanoseconds
func proxyNow(ret *uint64) uint32

//go:wasmimport env proxy_get_buffer_bytes
func proxyGetBuffer(t, start, max uint32, rp, rn *uint32) uint32

//go:wasmimport env proxy_set_buffer_bytes
func proxySetBuffer(t, start, size uint32, p unsafe.Pointer, n uint32) uint32

//go:wasmimport env proxy_get_buffer_status
func proxyBufferStatus(t uint32, rn, rflags *uint32) uint32

//go:wasmimport env proxy_get_header_map_pairs
func proxyGetPairs(t uint32, rp, rn *uint32) uint32

//go:wasmimport env proxy_set_header_map_pairs
func proxySetPairs(t uint32, p unsafe.Pointer, n uint32) uint32

//go:wasmimport env proxy_get_header_map_size
func proxyMapSize(t uint32, rn *uint32) uint32

//go:wasmimport env proxy_get_header_map_value
func proxyGetValue(t uint32, k unsafe.Pointer, kn uint32, rp, rn *uint32) uint32

//go:wasmimport env proxy_add_header_map_value
func proxyAdd(t uint32, k unsafe.Pointer, kn uint32, v unsafe.Pointer, vn uint32) uint32

//go:wasmimport env proxy_replace_header_map_value
func proxyReplace(t uint32, k unsafe.Pointer, kn uint32, v unsafe.Pointer, vn uint32) uint32

//go:wasmimport env proxy_remove_header_map_value
func proxyRemove(t uint32, k unsafe.Pointer, kn uint32) uint32

//go:wasmimport env proxy_continue_stream
func proxyContinue(t uint32) uint32

//go:wasmimport env proxy_close_stream
func proxyClose(t uint32) uint32

//go:wasmimport env proxy_get_status
func proxyGetStatus(code *uint32, rp, rn *uint32) uint32

//go:wasmimport env proxy_send_local_response
func proxyLocal(code uint32, d unsafe.Pointer, dn uint32, b unsafe.Pointer, bn uint32, h unsafe.Pointer, hn uint32, grpc int32) uint32

//go:wasmimport env proxy_http_call
func proxyHTTPCall(up unsafe.Pointer, upn uint32, h unsafe.Pointer, hn uint32, b unsafe.Pointer, bn uint32, t unsafe.Pointer, tn uint32, timeout uint32, rid *uint32) uint32

//go:wasmimport env proxy_set_shared_data
func proxySetShared(k unsafe.Pointer, kn uint32, v unsafe.Pointer, vn uint32, cas uint32) uint32

//go:wasmimport env proxy_get_shared_data
func proxyGetShared(k unsafe.Pointer, kn uint32, rp, rn *uint32, rcas *uint32) uint32

//go:wasmimport env proxy_register_shared_queue
func proxyRegQ(n unsafe.Pointer, nn uint32, rid *uint32) uint32

//go:wasmimport env proxy_resolve_shared_queue
func proxyResQ(vm unsafe.Pointer, vmn uint32, n unsafe.Pointer, nn uint32, rid *uint32) uint32

//go:wasmimport env proxy_enqueue_shared_queue
func proxyEnq(id uint32, v unsafe.Pointer, vn uint32) uint32

//go:wasmimport env proxy_dequeue_shared_queue
func proxyDeq(id uint32, rp, rn *uint32) uint32

//go:wasmimport env proxy_define_metric
func proxyDefMetric(t uint32, n unsafe.Pointer, nn uint32, rid *uint32) uint32

//go:wasmimport env proxy_increment_metric
func proxyIncMetric(id uint32, d int64) uint32

//go:wasmimport env proxy_record_metric
func proxyRecMetric(id uint32, v int64) uint32

//go:wasmimport env proxy_get_metric
func proxyGetMetric(id uint32, rv *uint64) uint32

//go:wasmimport env proxy_get_property
func proxyGetProp(p unsafe.Pointer, pn uint32, rp, rn *uint32) uint32

//go:wasmimport env proxy_set_property
func proxySetProp(p unsafe.Pointer, pn uint32, v unsafe.Pointer, vn uint32) uint32

//go:wasmimport env proxy_set_effective_context
func proxyEffective(ctx uint32) uint32

//go:wasmimport env proxy_done
func proxyDone() uint32

//go:wasmimport env proxy_call_foreign_function
func proxyForeign(n unsafe.Pointer, nn uint32, a unsafe.Pointer, an uint32, rp, rn *uint32) uint32

//go:wasmimport wasi_snapshot_preview1 proc_exit
func procExit(code uint32)

//go:wasmimport wasi_snapshot_preview1 clock_time_get
func clockTimeGet(id uint32, precision uint64, ret *uint64) uint32

//go:wasmimport wasi_snapshot_preview1 poll_oneoff
func pollOneoff(in, out unsafe.Pointer, n uint32, nevents *uint32) uint32

// pins keeps host-requested buffers alive until the next callback starts.
var pins [][]byte

//go:wasmexport proxy_abi_version_0_2_1
func abiVersion() {}

// allocCall, if set by "alloccall", is a host call the next
// proxy_on_memory_allocate makes (to test V8's allow-list).
var allocCall string

//go:wasmexport proxy_on_memory_allocate
func onAlloc(size uint32) uint32 {
	switch allocCall {
	case "log":
		logInfo("in allocator")
	case "tick":
		proxySetTick(0)
	}
	allocCall = ""
	b := make([]byte, size+1)
	pins = append(pins, b)
	return uint32(uintptr(unsafe.Pointer(&b[0])))
}

func bytesAt(p, n uint32) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(uintptr(p))), n)
}

func sp(s string) unsafe.Pointer { return unsafe.Pointer(unsafe.StringData(s)) }

func bp(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

type cmd []string

var (
	scripts = map[uint32]map[string][]cmd{} // root id → callback → script
	parent  = map[uint32]uint32{}           // stream id → root id
	quiet   bool
	vmCfg   map[string][]cmd
	garbage [][]byte
	held    []uint32 // streams a script holds, for other callbacks to resume
)

func logInfo(s string) { proxyLog(2, sp(s), uint32(len(s))) }

func parse(cfg string) map[string][]cmd {
	out := map[string][]cmd{}
	for _, line := range strings.Split(cfg, "\n") {
		line = strings.TrimSpace(line)
		if line == "quiet" {
			quiet = true
			continue
		}
		i := strings.Index(line, ":")
		if i < 0 {
			continue
		}
		name := strings.TrimSpace(line[:i])
		for _, c := range strings.Split(line[i+1:], ";") {
			if f := strings.Fields(c); len(f) > 0 {
				out[name] = append(out[name], f)
			}
		}
	}
	return out
}

func readBuffer(t, n uint32) string {
	var p, l uint32
	if st := proxyGetBuffer(t, 0, n, &p, &l); st != 0 {
		return ""
	}
	return string(bytesAt(p, l))
}

// run executes the script for callback cb of root and returns the value
// set by "ret" (or def).
func run(root uint32, ctx uint32, cb string, def uint32, args ...uint32) uint32 {
	pins = pins[:0]
	if !quiet {
		s := "cb " + cb
		for _, a := range args {
			s += " " + strconv.FormatUint(uint64(a), 10)
		}
		logInfo(s)
	}
	ret := def
	for _, c := range scripts[root][cb] {
		out, r, set := exec(ctx, c)
		if set {
			ret = r
			continue
		}
		logInfo(cb + " " + c[0] + " = " + out)
	}
	return ret
}

func arg(ctx uint32, s string) string {
	if s == "-" {
		return ""
	}
	s = strings.ReplaceAll(s, "$ctx", strconv.FormatUint(uint64(ctx), 10))
	if strings.Contains(s, "$held") {
		var first uint32
		if len(held) > 0 {
			first = held[0]
		}
		s = strings.ReplaceAll(s, "$held", strconv.FormatUint(uint64(first), 10))
	}
	s = strings.ReplaceAll(s, `\s`, " ")
	return strings.ReplaceAll(s, `\0`, "\x00")
}

func num(s string) uint32 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return uint32(n)
}

const hexDigits = "0123456789abcdef"

func hexs(b []byte) string {
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, hexDigits[c>>4], hexDigits[c&15])
	}
	return string(out)
}

// pairs builds the spec serialization from "k=v,k=v".
func pairs(s string) []byte {
	var kv [][2]string
	if s != "" {
		for _, p := range strings.Split(s, ",") {
			k, v, _ := strings.Cut(p, "=")
			kv = append(kv, [2]string{k, v})
		}
	}
	var b []byte
	le := func(v int) { b = append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24)) }
	le(len(kv))
	for _, p := range kv {
		le(len(p[0]))
		le(len(p[1]))
	}
	for _, p := range kv {
		b = append(b, p[0]...)
		b = append(b, 0)
		b = append(b, p[1]...)
		b = append(b, 0)
	}
	return b
}

func st(s uint32) string { return strconv.FormatUint(uint64(s), 10) }

func exec(ctx uint32, c cmd) (out string, ret uint32, isRet bool) {
	a := make([]string, len(c))
	for i := range c {
		a[i] = arg(ctx, c[i])
	}
	var p, n uint32
	switch a[0] {
	case "ret":
		return "", num(a[1]), true
	case "hold":
		held = append(held, ctx)
		return st(uint32(len(held))), 0, false
	case "unhold":
		if len(held) > 0 {
			held = held[1:]
		}
		return st(uint32(len(held))), 0, false
	case "log":
		return st(proxyLog(num(a[1]), sp(a[2]), uint32(len(a[2])))), 0, false
	case "loglevel":
		var l uint32
		s := proxyGetLogLevel(&l)
		return st(s) + " " + st(l), 0, false
	case "tick":
		return st(proxySetTick(num(a[1]))), 0, false
	case "now":
		var t uint64
		s := proxyNow(&t)
		return st(s) + " " + strconv.FormatUint(t, 10), 0, false
	case "walltime":
		return strconv.FormatInt(time.Now().UnixNano(), 10), 0, false
	case "getbuf":
		s := proxyGetBuffer(num(a[1]), num(a[2]), num(a[3]), &p, &n)
		return st(s) + " " + string(bytesAt(p, n)), 0, false
	case "setbuf":
		return st(proxySetBuffer(num(a[1]), num(a[2]), num(a[3]), sp(a[4]), uint32(len(a[4])))), 0, false
	case "bufstatus":
		var f uint32
		s := proxyBufferStatus(num(a[1]), &n, &f)
		return st(s) + " " + st(n), 0, false
	case "pairs":
		s := proxyGetPairs(num(a[1]), &p, &n)
		return st(s) + " " + hexs(bytesAt(p, n)), 0, false
	case "setpairs":
		b := pairs(a[2])
		return st(proxySetPairs(num(a[1]), bp(b), uint32(len(b)))), 0, false
	case "rawpairs": // setpairs with raw hex-free garbage for error paths
		return st(proxySetPairs(num(a[1]), sp(a[2]), uint32(len(a[2])))), 0, false
	case "mapsize":
		s := proxyMapSize(num(a[1]), &n)
		return st(s) + " " + st(n), 0, false
	case "get":
		s := proxyGetValue(num(a[1]), sp(a[2]), uint32(len(a[2])), &p, &n)
		return st(s) + " " + string(bytesAt(p, n)), 0, false
	case "add":
		return st(proxyAdd(num(a[1]), sp(a[2]), uint32(len(a[2])), sp(a[3]), uint32(len(a[3])))), 0, false
	case "replace":
		return st(proxyReplace(num(a[1]), sp(a[2]), uint32(len(a[2])), sp(a[3]), uint32(len(a[3])))), 0, false
	case "remove":
		return st(proxyRemove(num(a[1]), sp(a[2]), uint32(len(a[2])))), 0, false
	case "continue":
		return st(proxyContinue(num(a[1]))), 0, false
	case "close":
		return st(proxyClose(num(a[1]))), 0, false
	case "status":
		var code uint32
		s := proxyGetStatus(&code, &p, &n)
		return st(s) + " " + st(code) + " " + string(bytesAt(p, n)), 0, false
	case "local":
		h := pairs(a[4])
		return st(proxyLocal(num(a[1]), sp(a[2]), uint32(len(a[2])), sp(a[3]), uint32(len(a[3])), bp(h), uint32(len(h)), -1)), 0, false
	case "call":
		h := pairs(a[2])
		var tr []byte
		if len(a) > 5 {
			tr = pairs(a[5])
		}
		var id uint32
		s := proxyHTTPCall(sp(a[1]), uint32(len(a[1])), bp(h), uint32(len(h)), sp(a[3]), uint32(len(a[3])), bp(tr), uint32(len(tr)), num(a[4]), &id)
		return st(s) + " " + st(id), 0, false
	case "callresp":
		// Inside http_call_response: headers (map 6), body (buffer 4).
		s1 := proxyGetPairs(6, &p, &n)
		h := hexs(bytesAt(p, n))
		var bs, bl uint32
		s2 := proxyBufferStatus(4, &bl, &bs)
		body := readBuffer(4, bl)
		return st(s1) + " " + h + " " + st(s2) + " " + body, 0, false
	case "setshared":
		return st(proxySetShared(sp(a[1]), uint32(len(a[1])), sp(a[2]), uint32(len(a[2])), num(a[3]))), 0, false
	case "getshared":
		var cas uint32
		s := proxyGetShared(sp(a[1]), uint32(len(a[1])), &p, &n, &cas)
		return st(s) + " " + string(bytesAt(p, n)) + " " + st(cas), 0, false
	case "regq":
		var id uint32
		s := proxyRegQ(sp(a[1]), uint32(len(a[1])), &id)
		return st(s) + " " + st(id), 0, false
	case "resq":
		var id uint32
		s := proxyResQ(sp(a[1]), uint32(len(a[1])), sp(a[2]), uint32(len(a[2])), &id)
		return st(s) + " " + st(id), 0, false
	case "enq":
		return st(proxyEnq(num(a[1]), sp(a[2]), uint32(len(a[2])))), 0, false
	case "deq":
		s := proxyDeq(num(a[1]), &p, &n)
		return st(s) + " " + string(bytesAt(p, n)), 0, false
	case "defmetric":
		var id uint32
		s := proxyDefMetric(num(a[1]), sp(a[2]), uint32(len(a[2])), &id)
		return st(s) + " " + st(id), 0, false
	case "incmetric":
		d, _ := strconv.ParseInt(a[2], 10, 64)
		return st(proxyIncMetric(num(a[1]), d)), 0, false
	case "recmetric":
		d, _ := strconv.ParseInt(a[2], 10, 64)
		return st(proxyRecMetric(num(a[1]), d)), 0, false
	case "getmetric":
		var v uint64
		s := proxyGetMetric(num(a[1]), &v)
		return st(s) + " " + strconv.FormatInt(int64(v), 10), 0, false
	case "getprop":
		s := proxyGetProp(sp(a[1]), uint32(len(a[1])), &p, &n)
		return st(s) + " " + hexs(bytesAt(p, n)), 0, false
	case "setprop":
		return st(proxySetProp(sp(a[1]), uint32(len(a[1])), sp(a[2]), uint32(len(a[2])))), 0, false
	case "effective":
		return st(proxyEffective(num(a[1]))), 0, false
	case "done":
		return st(proxyDone()), 0, false
	case "foreign":
		s := proxyForeign(sp(a[1]), uint32(len(a[1])), sp(a[2]), uint32(len(a[2])), &p, &n)
		return st(s), 0, false
	case "alloc": // alloc COUNT SIZE: garbage for the GC
		cnt, size := num(a[1]), num(a[2])
		for i := uint32(0); i < cnt; i++ {
			b := make([]byte, size)
			b[0] = byte(i)
			garbage = append(garbage, b)
			if len(garbage) > 64 {
				garbage = garbage[:0]
			}
		}
		return "0", 0, false
	case "gc":
		runtime.GC()
		return "0", 0, false
	case "sleep":
		time.Sleep(time.Duration(num(a[1])) * time.Millisecond)
		return "0", 0, false
	case "clock": // clock ID: WASI clock_time_get's errno
		var t uint64
		return st(clockTimeGet(num(a[1]), 0, &t)), 0, false
	case "poll": // poll US: one relative monotonic clock subscription of US µs
		var sub [48]byte
		var ev [32]byte
		sub[8] = 0  // eventtype clock
		sub[16] = 1 // clock id monotonic
		ns := uint64(num(a[1])) * 1000
		for i := 0; i < 8; i++ {
			sub[24+i] = byte(ns >> (8 * i))
		}
		nevents := uint32(99)
		errno := pollOneoff(unsafe.Pointer(&sub[0]), unsafe.Pointer(&ev[0]), 1, &nevents)
		return st(errno) + " " + st(nevents), 0, false
	case "alloccall": // alloccall log|tick: a host call in the next allocation
		allocCall = a[1]
		return "0", 0, false
	case "panic":
		panic("guest panic on command")
	case "exit":
		procExit(num(a[1]))
	case "nilmap":
		var m map[string]int
		m["x"] = 1
	}
	return "unknown command " + a[0], 0, false
}

//go:wasmexport proxy_on_vm_start
func onVMStart(_ uint32, size uint32) uint32 {
	vmCfg = parse(readBuffer(6, size))
	scripts[0] = vmCfg
	return run(0, 0, "vm_start", 1, size)
}

//go:wasmexport proxy_on_configure
func onConfigure(root, size uint32) uint32 {
	scripts[root] = parse(readBuffer(7, size))
	return run(root, root, "configure", 1, root, size)
}

//go:wasmexport proxy_on_context_create
func onCreate(ctx, par uint32) {
	if par != 0 {
		parent[ctx] = par
		run(par, ctx, "create", 0, ctx, par)
		return
	}
	run(ctx, ctx, "root_create", 0, ctx)
}

func rootOf(ctx uint32) uint32 {
	if r, ok := parent[ctx]; ok {
		return r
	}
	return ctx
}

//go:wasmexport proxy_on_tick
func onTick(root uint32) { run(root, root, "tick", 0, root) }

//go:wasmexport proxy_on_http_call_response
func onCallResp(root, token, nh, body, nt uint32) {
	run(root, root, "http_call_response", 0, root, token, nh, body, nt)
}

//go:wasmexport proxy_on_queue_ready
func onQueueReady(root, qid uint32) { run(root, root, "queue_ready", 0, root, qid) }

//go:wasmexport proxy_on_request_headers
func onReqHeaders(ctx, n, eos uint32) uint32 {
	return run(rootOf(ctx), ctx, "request_headers", 0, ctx, n, eos)
}

//go:wasmexport proxy_on_request_body
func onReqBody(ctx, n, eos uint32) uint32 {
	return run(rootOf(ctx), ctx, "request_body", 0, ctx, n, eos)
}

//go:wasmexport proxy_on_request_trailers
func onReqTrailers(ctx, n uint32) uint32 {
	return run(rootOf(ctx), ctx, "request_trailers", 0, ctx, n)
}

//go:wasmexport proxy_on_response_headers
func onRespHeaders(ctx, n, eos uint32) uint32 {
	return run(rootOf(ctx), ctx, "response_headers", 0, ctx, n, eos)
}

//go:wasmexport proxy_on_response_body
func onRespBody(ctx, n, eos uint32) uint32 {
	return run(rootOf(ctx), ctx, "response_body", 0, ctx, n, eos)
}

//go:wasmexport proxy_on_response_trailers
func onRespTrailers(ctx, n uint32) uint32 {
	return run(rootOf(ctx), ctx, "response_trailers", 0, ctx, n)
}

//go:wasmexport proxy_on_done
func onDone(ctx uint32) uint32 { return run(rootOf(ctx), ctx, "done", 1, ctx) }

//go:wasmexport proxy_on_log
func onLog(ctx uint32) { run(rootOf(ctx), ctx, "log", 0, ctx) }

//go:wasmexport proxy_on_delete
func onDelete(ctx uint32) {
	run(rootOf(ctx), ctx, "delete", 0, ctx)
	delete(parent, ctx)
}
