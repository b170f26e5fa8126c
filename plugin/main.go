// Command plugin is gpuroute's proxy-wasm module. Build it as a WASI reactor:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o build/gpuroute.wasm ./plugin
//
// Only wiring lives here: the host never runs main in a c-shared module, so the
// VM context is registered from init. Routing is in plugin/router, the ABI in
// plugin/proxy.
package main

import (
	"github.com/gpuroute/gpuroute/plugin/proxy"
	"github.com/gpuroute/gpuroute/plugin/router"
)

func init() { proxy.SetVMContext(router.New()) }

func main() {}
