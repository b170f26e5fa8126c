package router

import (
	"sort"
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// driver runs the router in one host. Each behaviour test is written once
// against it and runs once per leg: "go" (driver_go_test.go, the SDK's
// proxytest driving the contexts natively) and "wasm" (build/gpuroute.wasm in
// hostsim). A leg registers itself in legs from an init function.
type driver interface {
	// configure creates a new root context with cfg as its plugin configuration
	// and starts it (proxy_on_context_create + proxy_on_configure), reporting
	// the result. After a refused configure the previously started root keeps
	// serving requests and ticks, as in Envoy.
	configure(cfg string) bool
	// request runs one HTTP stream under the serving root: request headers
	// (end_of_stream when body is empty), the body in one chunk if any, then
	// on_log/on_delete. It returns the request headers as the host would
	// forward them, the last action, and the local reply if one was sent.
	request(hdrs [][2]string, body string) (got [][2]string, action types.Action, local *localReply)
	// tick fires the serving root's proxy_on_tick once.
	tick()
	// tickPeriodMillis is the tick period the serving root set.
	tickPeriodMillis() uint32
	// sharedData reads key from the VM's shared data.
	sharedData(key string) (value []byte, cas uint32, ok bool)
	// counter reads a counter metric by name.
	counter(name string) (uint64, bool)
	// errorLogs returns every line logged at error level or above so far.
	errorLogs() []string
}

// localReply is what proxy_send_local_response sent.
type localReply struct {
	status  uint32
	headers [][2]string
	body    string
}

// legs maps a leg name to its constructor; the constructor registers cleanup
// with t.
var legs = map[string]func(t *testing.T) driver{}

// eachLeg runs f as a subtest per leg, named after the leg ("…/go", "…/wasm").
func eachLeg(t *testing.T, f func(t *testing.T, d driver)) {
	t.Helper()
	names := make([]string, 0, len(legs))
	for n := range legs {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) == 0 {
		t.Fatal("no driver legs registered")
	}
	for _, n := range names {
		t.Run(n, func(t *testing.T) { f(t, legs[n](t)) })
	}
}
