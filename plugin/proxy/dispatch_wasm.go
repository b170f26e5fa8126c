//go:build wasip1

package proxy

import "github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

// The proxy_action_t values the exports return (docs/abi.md "proxy-wasm ABI v0.2.1"; only 0/1 are used).
const (
	actionContinue uint32 = 0
	actionPause    uint32 = 1
)

// panicText renders a recovered value without fmt.
func panicText(r any) string {
	switch v := r.(type) {
	case string:
		return v
	case error:
		return v.Error()
	}
	return "non-error panic value"
}

// Context bookkeeping for the exports. Semantics follow the SDK's lifecycle
// (proxywasm/internal/abi_callback_*.go, read for behaviour, not copied):
// parent 0 creates a root (PluginContext); otherwise an HttpContext under that
// root; proxy_on_log ends the stream (OnHttpStreamDone); proxy_on_done on a root
// asks OnPluginDone; proxy_on_delete forgets the context.

// vmContext is set by SetVMContext from the plugin's init.
var vmContext types.VMContext

type rootState struct {
	plugin types.PluginContext
}

type streamState struct {
	http types.HttpContext
	root uint32
}

// calloutKey identifies an http call by owning root and host call id.
type calloutKey struct{ root, id uint32 }

type callout struct {
	fn     func(numHeaders, bodySize, numTrailers int)
	caller uint32 // context that dispatched it (root or stream)
}

var (
	roots    = map[uint32]*rootState{}
	streams  idTable[streamState]
	callouts = map[calloutKey]callout{}

	// active is the context whose callback is running (0 outside callbacks);
	// depth counts nested callbacks (a host may call back into the guest from
	// inside a host call, e.g. a local reply running the response path).
	active uint32
	depth  int32

	panicMetricID    uint32
	panicMetricReady bool
)

// enter starts a callback for context ctx. The outermost callback resets the
// scratch arena, which ends the lifetime of slices handed out by the previous one.
func enter(ctx uint32) (prev uint32) {
	if depth == 0 {
		scratch.reset()
	}
	depth++
	prev = active
	active = ctx
	return prev
}

func leave(prev uint32) {
	depth--
	active = prev
}

// rootOf returns the root context owning ctx, or 0.
func rootOf(ctx uint32) uint32 {
	if _, ok := roots[ctx]; ok {
		return ctx
	}
	if s, ok := streams.get(ctx); ok {
		return s.root
	}
	return 0
}

func registerCallout(id uint32, fn func(numHeaders, bodySize, numTrailers int)) {
	if fn == nil {
		return
	}
	callouts[calloutKey{rootOf(active), id}] = callout{fn: fn, caller: active}
}

// recovered is the last line of defence: log, count, and let the export return
// its safe default. It must not panic itself.
func recovered(export string, r any) {
	defer func() { _ = recover() }()
	_ = Log(LogLevelCritical, "proxy: panic in "+export+": "+panicText(r))
	if !panicMetricReady {
		id, err := DefineMetric(MetricTypeCounter, PanicsMetricName)
		if err != nil {
			return
		}
		panicMetricID, panicMetricReady = id, true
	}
	_ = IncrementMetric(panicMetricID, 1)
}
