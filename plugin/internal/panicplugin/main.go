// Command panicplugin is a test module: a proxy-wasm plugin on gpuroute's
// own binding (plugin/proxy) whose contexts panic in the one callback its
// configuration names, so plugin/proxy's tests can prove in hostsim that
// the recover at the ABI boundary keeps every panic from trapping the VM.
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o panic.wasm ./plugin/internal/panicplugin
//
// The callback is named by the VM configuration for vm_start (no plugin
// configuration exists yet) and by the plugin configuration otherwise:
// configure, context_create, tick, http_call_response, request_headers,
// request_body, request_trailers, response_headers, response_body,
// response_trailers, log, done. Like gpuroute's router, every stream first
// removes a client-sent x-gateway-destination-endpoint, before anything
// can panic.
package main

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/gpuroute/gpuroute/plugin/proxy"
)

// Names the configuration uses, one per guest callback.
const (
	cbVMStart          = "vm_start"
	cbConfigure        = "configure"
	cbContextCreate    = "context_create"
	cbTick             = "tick"
	cbHttpCallResponse = "http_call_response"
	cbRequestHeaders   = "request_headers"
	cbRequestBody      = "request_body"
	cbRequestTrailers  = "request_trailers"
	cbResponseHeaders  = "response_headers"
	cbResponseBody     = "response_body"
	cbResponseTrailers = "response_trailers"
	cbLog              = "log"
	cbDone             = "done"

	// callCluster is the cluster http_call_response mode calls.
	callCluster = "panic-upstream"
	// headerDestination is the header gpuroute's router strips first.
	headerDestination = "x-gateway-destination-endpoint"
)

func init() { proxy.SetVMContext(&vm{}) }

func main() {}

type vm struct{ types.DefaultVMContext }

// OnVMStart panics when the VM configuration says vm_start.
func (*vm) OnVMStart(int) types.OnVMStartStatus {
	if c, _ := proxy.GetVMConfiguration(); string(c) == cbVMStart {
		panic("panicplugin: injected panic in " + cbVMStart)
	}
	return types.OnVMStartStatusOK
}

func (*vm) NewPluginContext(uint32) types.PluginContext { return &root{} }

type root struct {
	types.DefaultPluginContext
	mode string
}

// sink keeps the runtime panics below from being optimised away.
var sink []int

func (r *root) OnPluginStart(int) types.OnPluginStartStatus {
	c, _ := proxy.GetPluginConfiguration()
	r.mode = string(c)
	switch r.mode {
	case cbConfigure:
		panic("panicplugin: injected panic in " + cbConfigure)
	case cbTick:
		_ = proxy.SetTickPeriodMillis(100)
	case cbHttpCallResponse:
		hdrs := [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "x"}}
		_, err := proxy.DispatchHttpCall(callCluster, hdrs, nil, nil, 1000, func(int, int, int) {
			panic("panicplugin: injected panic in " + cbHttpCallResponse)
		})
		if err != nil {
			return types.OnPluginStartStatusFailed
		}
	}
	return types.OnPluginStartStatusOK
}

func (r *root) OnTick() {
	if r.mode == cbTick {
		panic("panicplugin: injected panic in " + cbTick)
	}
}

func (r *root) OnPluginDone() bool {
	if r.mode == cbDone {
		panic("panicplugin: injected panic in " + cbDone)
	}
	return true
}

func (r *root) NewHttpContext(uint32) types.HttpContext {
	if r.mode == cbContextCreate {
		panic("panicplugin: injected panic in " + cbContextCreate)
	}
	return &stream{mode: r.mode}
}

type stream struct {
	types.DefaultHttpContext
	mode string
}

// OnHttpRequestHeaders strips the destination header first, as the router
// does, then panics if asked.
func (s *stream) OnHttpRequestHeaders(int, bool) types.Action {
	_ = proxy.RemoveHeaderMapValue(proxy.MapTypeHttpRequestHeaders, headerDestination)
	if s.mode == cbRequestHeaders {
		panic("panicplugin: injected panic in " + cbRequestHeaders)
	}
	return types.ActionContinue
}

// OnHttpRequestBody panics with a runtime error (index out of range), not
// a panic value of the plugin's own.
func (s *stream) OnHttpRequestBody(n int, _ bool) types.Action {
	if s.mode == cbRequestBody {
		sink = sink[:0]
		sink = append(sink, sink[n+len(sink)])
	}
	return types.ActionContinue
}

func (s *stream) OnHttpRequestTrailers(int) types.Action {
	if s.mode == cbRequestTrailers {
		panic("panicplugin: injected panic in " + cbRequestTrailers)
	}
	return types.ActionContinue
}

func (s *stream) OnHttpResponseHeaders(int, bool) types.Action {
	if s.mode == cbResponseHeaders {
		panic("panicplugin: injected panic in " + cbResponseHeaders)
	}
	return types.ActionContinue
}

// OnHttpResponseBody panics with a runtime error (assignment to a nil map).
func (s *stream) OnHttpResponseBody(n int, _ bool) types.Action {
	if s.mode == cbResponseBody {
		var m map[int]int
		m[n] = 1 //lint:ignore SA5000 the panic under test
	}
	return types.ActionContinue
}

func (s *stream) OnHttpResponseTrailers(int) types.Action {
	if s.mode == cbResponseTrailers {
		panic("panicplugin: injected panic in " + cbResponseTrailers)
	}
	return types.ActionContinue
}

func (s *stream) OnHttpStreamDone() {
	if s.mode == cbLog {
		panic("panicplugin: injected panic in " + cbLog)
	}
}
