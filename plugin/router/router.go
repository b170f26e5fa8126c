// Package router is gpuroute's first plugin: it reads the replica list from the
// plugin configuration and writes the chosen replica's ip:port into
// x-gateway-destination-endpoint, round robin over active replicas. The
// ETTFT decision (DESIGN.md §1) replaces pick later; the wiring stays.
//
//	func init() { proxy.SetVMContext(router.New()) }
//
// Per root context (DESIGN.md §3): Envoy creates a new root in the same VM on a
// plugin configuration change, so every piece of state lives on the root's
// plugin value, never in package variables; a refused configuration leaves the
// previous root, and its state, serving.
package router

import (
	"strconv"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/gpuroute/gpuroute/plugin/config"
	"github.com/gpuroute/gpuroute/plugin/proxy"
)

// Wire names.
const (
	// HeaderDestination carries the chosen endpoint to Envoy's ORIGINAL_DST
	// cluster (use_http_header), the Gateway API Inference Extension convention
	// (ABI.md §4). A client-sent value must never survive.
	HeaderDestination = "x-gateway-destination-endpoint"
	// MetricDecisionsRouted counts requests given a destination.
	MetricDecisionsRouted = "gpuroute_decisions_routed_total"
	// MetricDecisionsUnavailable counts requests answered 503 for want of an
	// eligible replica.
	MetricDecisionsUnavailable = "gpuroute_decisions_unavailable_total"
	// SharedKeyTick is the shared-data key each root's tick publishes to.
	SharedKeyTick = "gpuroute/tick/v1"
	// LocalReplyDetails is the response-code detail of our local 503s (shown by
	// Envoy's %RESPONSE_CODE_DETAILS%; no spaces).
	LocalReplyDetails = "gpuroute_no_eligible_replica"
)

// TickValueVersion is the first byte of the value under SharedKeyTick:
// version (1 byte), root context id (u32 LE), tick count (u64 LE).
const (
	TickValueVersion = 1
	tickValueLen     = 13
)

// DecodeTick decodes a value published under SharedKeyTick.
func DecodeTick(b []byte) (rootID uint32, ticks uint64, ok bool) {
	if len(b) != tickValueLen || b[0] != TickValueVersion {
		return 0, 0, false
	}
	return uint32(le64(b[1:5])), le64(b[5:13]), true
}

// localReplyHeaders are the headers of the 503; shared and never modified.
var localReplyHeaders = [][2]string{{"content-type", "application/json"}}

// New returns the VM context to register with proxy.SetVMContext.
func New() types.VMContext { return &vm{} }

type vm struct {
	types.DefaultVMContext
}

// NewPluginContext creates the state of one root context.
func (*vm) NewPluginContext(contextID uint32) types.PluginContext {
	return &plugin{id: contextID}
}

// plugin is one root context. Not safe for concurrent use; the host calls one
// callback at a time per VM.
type plugin struct {
	types.DefaultPluginContext
	id  uint32
	cfg *config.Config
	// next is the round-robin cursor into cfg.Replicas.
	next int
	// ticks counts OnTick calls of this root.
	ticks uint64
	// unavailableBody is the 503 body, built once per configuration.
	unavailableBody []byte
	// tickValue is the reused encoding of the published tick.
	tickValue [tickValueLen]byte

	routedMetric, unavailableMetric uint32
	metricsOK                       bool

	// free recycles stream contexts: a new HTTP stream must not allocate in
	// steady state (STYLE.md 22).
	free []*stream
}

// OnPluginStart parses the configuration. A bad one is logged with the parse
// error and refused (false): Envoy then keeps the previous configuration.
func (p *plugin) OnPluginStart(int) types.OnPluginStartStatus {
	data, err := proxy.GetPluginConfiguration()
	if err == proxy.ErrNotFound {
		// An empty configuration has no buffer at all in some hosts (proxytest);
		// let the parser say what is wrong with it.
		data, err = nil, nil
	}
	if err != nil {
		proxy.LogError(p.prefix() + "cannot read the plugin configuration: " + err.Error())
		return types.OnPluginStartStatusFailed
	}
	cfg, err := config.Parse(data)
	if err != nil {
		proxy.LogError(p.prefix() + "configuration refused: " + err.Error())
		return types.OnPluginStartStatusFailed
	}
	if err := proxy.SetTickPeriodMillis(cfg.TickMillis); err != nil {
		proxy.LogError(p.prefix() + "cannot set the tick period: " + err.Error())
		return types.OnPluginStartStatusFailed
	}
	p.cfg = cfg
	p.unavailableBody = unavailableBody(len(cfg.Replicas))
	routed, err1 := proxy.DefineMetric(proxy.MetricTypeCounter, MetricDecisionsRouted)
	unavailable, err2 := proxy.DefineMetric(proxy.MetricTypeCounter, MetricDecisionsUnavailable)
	if err1 != nil || err2 != nil {
		proxy.LogWarn(p.prefix() + "metrics unavailable, decisions are not counted")
	} else {
		p.routedMetric, p.unavailableMetric, p.metricsOK = routed, unavailable, true
	}
	proxy.LogInfo(p.prefix() + "configured " + strconv.Itoa(len(cfg.Replicas)) + " replicas, tick " +
		strconv.FormatUint(uint64(cfg.TickMillis), 10) + " ms")
	return types.OnPluginStartStatusOK
}

// OnPluginDone stops this root's tick; Envoy deletes the root after a
// reconfiguration once it has drained (ABI.md §3.3).
func (p *plugin) OnPluginDone() bool {
	_ = proxy.SetTickPeriodMillis(0)
	return true
}

// OnTick publishes the root's tick count to shared data with compare-and-swap:
// read, write with the read CAS, and on a mismatch (another VM wrote in
// between) re-read and retry once. A missing key is written with CAS 0, which
// Envoy treats as unconditional (ABI.md §3.2).
func (p *plugin) OnTick() {
	p.ticks++
	v := &p.tickValue
	v[0] = TickValueVersion
	putLE(v[1:5], uint64(p.id))
	putLE(v[5:13], p.ticks)
	for attempt := 0; attempt < 2; attempt++ {
		_, cas, err := proxy.GetSharedData(SharedKeyTick)
		if err != nil && err != proxy.ErrNotFound {
			proxy.LogWarn(p.prefix() + "tick: reading shared data: " + err.Error())
			return
		}
		err = proxy.SetSharedData(SharedKeyTick, v[:], cas)
		if err == nil {
			return
		}
		if err != proxy.ErrCASMismatch {
			proxy.LogWarn(p.prefix() + "tick: writing shared data: " + err.Error())
			return
		}
	}
	proxy.LogDebug(p.prefix() + "tick: shared data kept changing, skipped this tick")
}

// NewHttpContext returns a recycled or new stream context.
func (p *plugin) NewHttpContext(contextID uint32) types.HttpContext {
	if n := len(p.free); n > 0 {
		s := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		*s = stream{root: p}
		return s
	}
	return &stream{root: p}
}

// pick returns the next active replica round robin, skipping draining and
// drained ones.
func (p *plugin) pick() (*config.Replica, bool) {
	if p.cfg == nil {
		return nil, false
	}
	reps := p.cfg.Replicas
	n := len(reps)
	for k := 0; k < n; k++ {
		i := (p.next + k) % n
		if reps[i].State == config.StateActive {
			p.next = (i + 1) % n
			return &reps[i], true
		}
	}
	return nil, false
}

func (p *plugin) count(id uint32) {
	if p.metricsOK {
		_ = proxy.IncrementMetric(id, 1)
	}
}

func (p *plugin) prefix() string {
	return "router: root " + strconv.FormatUint(uint64(p.id), 10) + ": "
}

// unavailableBody is the OpenAI-style error body of the 503 (the shape OpenAI's
// API uses for errors: {"error":{"message","type","code"}}).
func unavailableBody(replicas int) []byte {
	return []byte(`{"error":{"message":"no eligible replica: none of the ` + strconv.Itoa(replicas) +
		` configured replicas is active","type":"service_unavailable","code":503}}`)
}

// stream is one HTTP request's context.
type stream struct {
	types.DefaultHttpContext
	root *plugin
}

// OnHttpRequestHeaders writes the destination. A client-sent value is removed
// first, before anything else can fail: a panic answers Continue, and the
// request must not leave with the client's choice of upstream.
func (s *stream) OnHttpRequestHeaders(numHeaders int, _ bool) types.Action {
	p := s.root
	stripDestination(numHeaders)
	r, ok := p.pick()
	if !ok {
		return s.unavailable()
	}
	if err := proxy.ReplaceHeaderMapValue(proxy.MapTypeHttpRequestHeaders, HeaderDestination, r.AddressText); err != nil {
		proxy.LogError(p.prefix() + "cannot set " + HeaderDestination + ": " + err.Error())
		return s.unavailable()
	}
	p.count(p.routedMetric)
	return types.ActionContinue
}

func (s *stream) unavailable() types.Action {
	p := s.root
	body := p.unavailableBody
	if body == nil {
		body = unavailableBody(0)
	}
	p.count(p.unavailableMetric)
	if err := proxy.SendLocalResponse(503, LocalReplyDetails, body, localReplyHeaders, proxy.NoGrpcStatus); err != nil {
		proxy.LogError(p.prefix() + "cannot send the 503: " + err.Error())
	}
	return types.ActionPause
}

// OnHttpStreamDone returns the context to the root's free list: after
// proxy_on_log the host calls nothing but proxy_on_delete for it, which the
// binding handles without touching the context.
func (s *stream) OnHttpStreamDone() {
	p := s.root
	if p == nil {
		return
	}
	s.root = nil
	if len(p.free) < 1024 {
		p.free = append(p.free, s)
	}
}

// stripDestination removes every client-sent HeaderDestination. Envoy's replace
// (HeaderMap::setCopy) removes all instances, but hosts differ (the SDK's
// proxytest replaces and removes only the first), so we remove until the lookup
// says NOT_FOUND; the loop is bounded by the header count. In the common case
// (header absent) this is one host call. Header names reach the plugin
// lowercased (Envoy's codecs; proxytest lowercases too), so "X-Gateway-..." in
// any case is covered.
func stripDestination(numHeaders int) {
	for i := 0; i <= numHeaders; i++ {
		if _, err := proxy.GetHeaderMapValue(proxy.MapTypeHttpRequestHeaders, HeaderDestination); err != nil {
			return
		}
		if proxy.RemoveHeaderMapValue(proxy.MapTypeHttpRequestHeaders, HeaderDestination) != nil {
			return
		}
	}
}

// le64 reads a little-endian unsigned integer of len(b) ≤ 8 bytes; putLE
// writes one. Hand-rolled: encoding/binary links reflect into the module.
func le64(b []byte) uint64 {
	var v uint64
	for i := len(b) - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

func putLE(b []byte, v uint64) {
	for i := range b {
		b[i] = byte(v)
		v >>= 8
	}
}
