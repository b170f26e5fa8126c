// Package proxy binds the proxy-wasm ABI v0.2.1 for the standard Go toolchain
// (GOOS=wasip1 GOARCH=wasm, -buildmode=c-shared) and dispatches the host's
// callbacks to the contexts of the proxy-wasm-go-sdk programming model
// (github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types).
//
//	func init() { proxy.SetVMContext(router.New()) }
//	func main() {}
//
//	// inside an HttpContext callback:
//	v, err := proxy.GetHeaderMapValue(proxy.MapTypeHttpRequestHeaders, ":path")
//	err = proxy.ReplaceHeaderMapValue(proxy.MapTypeHttpRequestHeaders, "x-gateway-destination-endpoint", "10.0.0.1:8000")
//
// Why a binding of our own: the Go module proxy serves the SDK only at v0.24.0,
// whose host calls exist for TinyGo only (`//go:build tinygo`). This package is
// written from the spec (github.com/proxy-wasm/spec, abi-versions/v0.2.1; what
// we rely on is in docs/abi.md "proxy-wasm ABI v0.2.1"); if an SDK release for
// the standard toolchain appears, it is the one package to delete.
//
// Two builds, one API. Under wasip1 the functions call the host through
// `//go:wasmimport env proxy_*` and the callbacks arrive through `//go:wasmexport`.
// On every other GOOS the same functions forward to the SDK's proxywasm package,
// so plugin contexts run unchanged under the SDK's proxytest emulator.
//
// Memory contract (wasip1): byte slices returned by the getters (GetBufferBytes,
// GetHeaderMapPairs, GetHeaderMapValue, GetSharedData, DequeueSharedQueue,
// GetProperty, CallForeignFunction) point into a scratch arena that is reset when
// the next top-level callback starts. They are valid until the current callback
// returns; copy what you keep. The *String and [][2]string convenience getters
// allocate and have no such limit. Steady-state reads allocate nothing.
//
// Panics: every export recovers. A panic is logged through proxy_log with the
// callback name, counted in the counter PanicsMetricName, and the callback returns
// its safe default (Continue for stream callbacks, see each export). A panic must
// never trap the VM: a trap takes the worker thread's traffic with it.
package proxy
