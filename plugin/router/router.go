// Package router is gpuroute's proxy-wasm plugin: per request it picks the
// replica with the lowest expected time to first token (scoring.Pick) and
// writes its ip:port into x-gateway-destination-endpoint for Envoy's
// ORIGINAL_DST cluster.
//
//	func init() { proxy.SetVMContext(router.New()) }
//
// A request's route reads parse → features → view → Pick → header
// (stream.go). Each Envoy worker thread runs its own VM with its own root
// context; the roots of one Envoy share state through proxy-wasm shared data
// (docs/design.md "Shared state"): a leader lease so one VM scrapes the
// replicas' metrics (scraping), the fleet snapshot it publishes, each
// worker's in-flight work (workShare), the prefix index (prefixShare), LoRA
// placements (adapterShare) and passive health (health); peering extends
// placements and work to other gateways. Envoy creates a new root context in
// the same VM on a configuration change: all state lives on the root (never
// in package variables), a refused configuration leaves the previous root,
// and its state, serving, and an accepted one's root takes the state over
// by replica name (reconfig.go).
package router

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// Wire names: headers and the local replies' details.
const (
	// HeaderDestination carries the chosen endpoint to Envoy's ORIGINAL_DST
	// cluster (use_http_header) or override_host policy, the Gateway API
	// Inference Extension convention (docs/abi.md "Envoy behaviour"). A
	// client-sent value must never survive: with ORIGINAL_DST it would let
	// anyone reach any address.
	HeaderDestination = "x-gateway-destination-endpoint"
	// HeaderDecision is the opt-in response header explaining the decision.
	HeaderDecision = "x-gpuroute-decision"

	detailsUnavailable   = "gpuroute_no_eligible_replica"
	detailsModelNotFound = "gpuroute_model_not_found"
	detailsOverloaded    = "gpuroute_overloaded"
	detailsStatus        = "gpuroute_status"
	detailsShed          = "gpuroute_shed"
	detailsQueueFull     = "gpuroute_queue_full"
	detailsQueueTimeout  = "gpuroute_queue_timeout"
)

// New returns the VM context to register with proxy.SetVMContext.
func New() types.VMContext { return &vm{} }

// vm is one worker VM. Besides creating roots it keeps what must outlive a
// reconfiguration: the serving root, whose state the next configuration's
// root takes over (reconfig.go), and the open streams, which the new root
// adopts with it.
type vm struct {
	types.DefaultVMContext
	serving *root
	live    []*stream
}

// NewPluginContext creates the state of one root context.
func (v *vm) NewPluginContext(contextID uint32) types.PluginContext {
	return &root{id: contextID, vm: v}
}
