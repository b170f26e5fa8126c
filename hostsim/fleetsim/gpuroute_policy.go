package fleetsim

import (
	"context"
	"errors"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuroute/gpuroute/hostsim"
)

// GPURouteName is the registry name of gpuroute's own policy.
const GPURouteName = "gpuroute"

// Wire names the gpuroute policy speaks to the plugin (docs/abi.md "Envoy
// behaviour"; the header is GIE's endpoint-picker protocol, which the
// plugin writes).
const (
	gpurouteVMID          = "gpuroute"
	gpurouteRootID        = "gpuroute"
	headerDestination     = "x-gateway-destination-endpoint"
	headerPriority        = "x-gpuroute-priority"
	headerTenant          = "x-gpuroute-tenant"
	headerDecision        = "x-gpuroute-decision"
	pathCompletions       = "/v1/completions"
	gatewayAuthority      = "gateway.local"
	sseTokenHead          = `data: {"choices":[{"index":0,"text":"`
	sseTokenTail          = "\"}]}\n\n"
	sseDone               = "data: [DONE]\n\n"
	metricsLatency        = time.Millisecond
	keyDecisionHeaderJSON = `"decision_header":true`
	// flowControlJSON is the flow control a deployer of this fleet
	// configures: the workloads' clients name their band in the priority
	// header (critical or sheddable, else standard) and their tenant in
	// the tenant header.
	flowControlJSON = `"flow_control":{"tenant_header":"` + headerTenant + `","bands":[` +
		`{"name":"` + ClassCritical + `","from_header":true},{"name":"standard"},` +
		`{"name":"` + ClassSheddable + `","sheddable":true,"from_header":true,"hold_wait_ms":250}]}`
	// The peer exchange between gateways: every gateway answers peerPath
	// and asks the others through a cluster per peer.
	peerPath          = "/gpuroute/peer"
	peerToken         = "hostsim-peer-token-0123456789"
	peerClusterPrefix = "gpuroute-peer-"
)

// GPURouteStart is the virtual wall-clock time of virtual time 0 in every
// gateway the policy runs, so drain deadlines (absolute Unix milliseconds in
// the plugin configuration) are Start + virtual time.
var GPURouteStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// GPURouteOptions configure the gpuroute policy beyond PolicyOptions.
type GPURouteOptions struct {
	PolicyOptions
	// DecisionHeader turns on the plugin's x-gpuroute-decision response
	// header ("decision_header": true) and hands each one to OnDecision.
	DecisionHeader bool
	// OnDecision, if set with DecisionHeader, receives the plugin's
	// explanation of each routed request when its first token arrives.
	OnDecision func(at time.Duration, req *Request, replica int, explain string)
	// OnReject, if set, receives each local reply the plugin sent instead
	// of routing (status 503 or 429, and its body, which says why).
	OnReject func(at time.Duration, req *Request, status int, body string)
}

// GPURoute routes by running the built plugin module (build/gpuroute.wasm)
// in hostsim, the artifact that ships: Gateways hosts (one Envoy each, with
// its own shared data and metrics clusters) of Workers VMs each, on the
// fleet's virtual clock. Each request lands on a gateway worker at random,
// as client connections spread over Envoy's workers (the same worker the
// round-robin baseline's request gets); each is an OpenAI
// /v1/completions stream whose response the policy replays from the
// request's life events, so the plugin learns TTFT and output lengths at the
// virtual times they happen: each token event carries the token's text,
// the engine's generated text that a next turn quotes, and the last event
// the usage with the prompt tokens the engine had cached, as vLLM reports
// them (prompt_tokens_details.cached_tokens). Replica metrics are served from the simulated
// replicas' engine metrics text on the plugin's own scrapes. Drains reach
// the plugin as configuration updates, like a control plane pushes them.
//
// A GPURoute is used by one run at a time. A guest trap or a refused
// reconfiguration in the middle of a run panics: the measurement is void.
type GPURoute struct {
	o        GPURouteOptions
	wasm     []byte
	f        *Fleet
	hosts    []*hostsim.Host
	vms      []*hostsim.VM
	roots    []*hostsim.Root
	addrs    map[string]int
	states   []replicaState
	adapters map[string]string // adapter -> base model, as configured
	tickMs   int64
	conns    *connections
	flights  []gpFlight
	body     []byte
	tokens   []byte
	cfg      []byte // the last gateway configuration built
	peerNext []int  // per gateway: the worker that answers the next peer call

	picks    int64
	pickWall time.Duration
}

// replicaState is what the plugin's configuration says about one replica.
type replicaState struct {
	state    string
	deadline time.Duration // virtual time; 0: none known
}

// gpFlight is one request's stream in the plugin.
type gpFlight struct {
	s        *hostsim.Stream
	replica  int
	streamed int
	cached   int // prompt tokens the engine served from its prefix cache
	headers  bool
}

var _ Policy = (*GPURoute)(nil)

// NewGPURoute builds the gpuroute policy from o.WasmPath (default
// build/gpuroute.wasm), o.Workers VMs per gateway (default 1) and
// o.Gateways gateways (default 1). It has Factory's signature:
// Register(GPURouteName, NewGPURoute).
func NewGPURoute(o PolicyOptions) (Policy, error) {
	return NewGPURouteWith(GPURouteOptions{PolicyOptions: o})
}

// NewGPURouteWith is NewGPURoute with the extra options.
func NewGPURouteWith(o GPURouteOptions) (*GPURoute, error) {
	if o.WasmPath == "" {
		o.WasmPath = "build/gpuroute.wasm"
	}
	o.Workers = max(o.Workers, 1)
	o.Gateways = max(o.Gateways, 1)
	wasm, err := readModule(o.WasmPath)
	if err != nil {
		return nil, err
	}
	return &GPURoute{o: o, wasm: wasm}, nil
}

// moduleCache keeps each module file's bytes once per process; hostsim's
// process-wide compilation cache then makes every Host.Compile after the
// first cheap.
var moduleCache sync.Map // path -> []byte

func readModule(path string) ([]byte, error) {
	if b, ok := moduleCache.Load(path); ok {
		return b.([]byte), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, errors.New("fleetsim: gpuroute policy needs the plugin module: " + err.Error() + " (run `make wasm` or pass --wasm)")
	}
	moduleCache.Store(path, b)
	return b, nil
}

// Name returns "gpuroute".
func (p *GPURoute) Name() string { return GPURouteName }

// Start builds the gateways and configures every VM for f.
func (p *GPURoute) Start(f *Fleet) error {
	p.closeHosts()
	p.f = f
	n := f.Len()
	p.addrs = make(map[string]int, n)
	p.states = make([]replicaState, n)
	p.adapters = map[string]string{}
	for i := range n {
		p.addrs[f.Replica(i).Addr] = i
		p.states[i] = p.wantState(i)
	}
	if a, ok := any(f).(interface{ Adapters() map[string]string }); ok {
		for k, v := range a.Adapters() {
			p.adapters[k] = v
		}
	}
	p.tickMs = max(int64(f.ScrapeInterval()/time.Millisecond), 1)
	p.conns = newConnections(p.o.Gateways*p.o.Workers, p.o.Seed)
	p.flights = p.flights[:0]
	p.picks, p.pickWall = 0, 0
	ctx := context.Background()
	p.peerNext = make([]int, p.o.Gateways)
	for g := range p.o.Gateways {
		p.buildConfig(g)
		h := hostsim.NewHost(hostsim.Options{Start: GPURouteStart, Seed: uint64(p.o.Seed)*31 + uint64(g), LogLevel: hostsim.LogWarn, MaxLogs: 200})
		p.hosts = append(p.hosts, h)
		for i := range n {
			i := i
			r := f.Replica(i)
			engine := r.Config().Engine
			h.AddCluster(r.Cluster, hostsim.ClusterFunc(func(*hostsim.CallRequest) hostsim.CallReply {
				// A stopped process refuses connections: Envoy answers
				// the call with a 503 of its own.
				if !r.Up() {
					return hostsim.CallReply{Status: 503, Latency: metricsLatency}
				}
				return hostsim.CallReply{Status: 200, Body: r.MetricsText(nil, engine), Latency: metricsLatency}
			}))
		}
		if !p.o.IsolatedGateways {
			for peer := range p.o.Gateways {
				if peer != g {
					h.AddCluster(peerClusterPrefix+strconv.Itoa(peer), hostsim.ClusterFunc(func(req *hostsim.CallRequest) hostsim.CallReply {
						return p.peerCall(peer, req)
					}))
				}
			}
		}
		mod, err := h.Compile(ctx, p.wasm)
		if err != nil {
			return errors.New("fleetsim: gpuroute: " + err.Error())
		}
		for w := range p.o.Workers {
			vm, err := h.NewVM(ctx, mod, gpurouteVMID, nil)
			if err != nil {
				return errors.New("fleetsim: gpuroute: gateway " + strconv.Itoa(g) + " worker " + strconv.Itoa(w) + ": " + err.Error())
			}
			root, err := vm.Configure(gpurouteRootID, p.cfg)
			if err != nil {
				return errors.New("fleetsim: gpuroute: configuration refused: " + err.Error() + hostLogs(h) + "\nconfiguration: " + string(p.cfg))
			}
			p.vms = append(p.vms, vm)
			p.roots = append(p.roots, root)
		}
	}
	return nil
}

// Close releases the gateways.
func (p *GPURoute) Close() error {
	p.closeHosts()
	return nil
}

func (p *GPURoute) closeHosts() {
	for _, h := range p.hosts {
		_ = h.Close()
	}
	p.hosts, p.vms, p.roots = p.hosts[:0], p.vms[:0], p.roots[:0]
}

// hostLogs returns the host's warning and error log lines for an error
// message (the plugin logs why it refused a configuration).
func hostLogs(h *hostsim.Host) string {
	var b strings.Builder
	for _, e := range h.Logs() {
		b.WriteString("\n  ")
		b.WriteString(e.String())
	}
	return b.String()
}

// wantState derives replica i's configured state from the fleet: closed
// and still running is a drain, closed and stopped is drained.
func (p *GPURoute) wantState(i int) replicaState {
	if p.f.Open(i) {
		return replicaState{state: "active"}
	}
	r := p.f.Replica(i)
	if r.Draining() {
		st := replicaState{state: "draining"}
		// The fleet does not export the deadline yet; use it when it does.
		if d, ok := any(r).(interface{ DrainDeadline() time.Duration }); ok {
			st.deadline = d.DrainDeadline()
		}
		return st
	}
	return replicaState{state: "drained"}
}

// peerCall answers gateway peer's exchange endpoint through one of its
// workers (round robin, as Envoy spreads connections), the way another
// Envoy's listener would.
func (p *GPURoute) peerCall(peer int, req *hostsim.CallRequest) hostsim.CallReply {
	k := peer*p.o.Workers + p.peerNext[peer]
	p.peerNext[peer] = (p.peerNext[peer] + 1) % p.o.Workers
	if k >= len(p.roots) {
		// Not started yet: its listener refuses, Envoy answers 503.
		return hostsim.CallReply{Status: 503, Latency: metricsLatency}
	}
	s, err := p.roots[k].NewStream()
	if err != nil {
		p.fail("peer stream", err)
	}
	if _, err := s.RequestHeaders(req.Headers, true); err != nil {
		p.fail("peer request headers", err)
	}
	lr := s.LocalReply()
	if err := s.Done(); err != nil {
		p.fail("peer stream done", err)
	}
	if lr == nil {
		return hostsim.CallReply{Status: 404, Latency: metricsLatency}
	}
	return hostsim.CallReply{Status: lr.Status, Body: append([]byte(nil), lr.Body...), Latency: metricsLatency}
}

// buildConfig renders gateway g's plugin configuration for the current
// states and adapters into p.cfg.
func (p *GPURoute) buildConfig(g int) {
	b := append(p.cfg[:0], `{"tick_ms":`...)
	b = strconv.AppendInt(b, p.tickMs, 10)
	b = append(b, `,"replicas":[`...)
	for i := range p.f.Len() {
		r := p.f.Replica(i)
		c := r.Config()
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":"r`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `","address":`...)
		b = strconv.AppendQuote(b, r.Addr)
		b = append(b, `,"metrics_cluster":`...)
		b = strconv.AppendQuote(b, r.Cluster)
		b = append(b, `,"hardware":`...)
		b = strconv.AppendQuote(b, c.Hardware.Name)
		if c.Shape != "" {
			b = append(b, `,"model_profile":`...)
			b = strconv.AppendQuote(b, c.Shape)
		}
		if c.TensorParallel > 1 {
			b = append(b, `,"tensor_parallel":`...)
			b = strconv.AppendInt(b, int64(c.TensorParallel), 10)
		}
		b = append(b, `,"models":[`...)
		b = strconv.AppendQuote(b, c.Model)
		b = append(b, ']')
		b = append(b, `,"engine":`...)
		b = strconv.AppendQuote(b, c.Engine)
		b = append(b, `,"kv_capacity_tokens":`...)
		b = strconv.AppendInt(b, int64(r.KVCapacityTokens()), 10)
		b = append(b, `,"adapter_slots":`...)
		b = strconv.AppendInt(b, int64(max(c.MaxLoras, 0)), 10)
		b = append(b, `,"adapter_host_slots":`...)
		b = strconv.AppendInt(b, int64(max(c.MaxCPULoras, 0)), 10)
		st := p.states[i]
		b = append(b, `,"state":`...)
		b = strconv.AppendQuote(b, st.state)
		if st.state == "draining" && st.deadline > 0 {
			b = append(b, `,"drain_deadline_ms":`...)
			b = strconv.AppendInt(b, GPURouteStart.Add(st.deadline).UnixMilli(), 10)
		}
		b = append(b, '}')
	}
	b = append(b, ']')
	if len(p.adapters) > 0 {
		names := make([]string, 0, len(p.adapters))
		for k := range p.adapters {
			names = append(names, k)
		}
		sort.Strings(names)
		b = append(b, `,"adapters":{`...)
		for k, name := range names {
			if k > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendQuote(b, name)
			b = append(b, ':')
			b = strconv.AppendQuote(b, p.adapters[name])
		}
		b = append(b, '}')
	}
	if p.o.DecisionHeader {
		b = append(b, ',')
		b = append(b, keyDecisionHeaderJSON...)
	}
	b = append(b, ',')
	b = append(b, flowControlJSON...)
	if p.o.Gateways > 1 && !p.o.IsolatedGateways {
		b = append(b, `,"peer_path":"`+peerPath+`","peer_token":"`+peerToken+`","peers":[`...)
		for peer, n := 0, 0; peer < p.o.Gateways; peer++ {
			if peer == g {
				continue
			}
			if n++; n > 1 {
				b = append(b, ',')
			}
			b = append(b, `{"name":"gateway-`...)
			b = strconv.AppendInt(b, int64(peer), 10)
			b = append(b, `","cluster":"`+peerClusterPrefix...)
			b = strconv.AppendInt(b, int64(peer), 10)
			b = append(b, `"}`...)
		}
		b = append(b, ']')
	}
	p.cfg = append(b, '}')
}

// reconfigure pushes the current configuration to every VM, as a control
// plane's update reaches every worker of every Envoy.
func (p *GPURoute) reconfigure() {
	for k, vm := range p.vms {
		if k%p.o.Workers == 0 {
			p.buildConfig(k / p.o.Workers)
		}
		root, err := vm.Configure(gpurouteRootID, p.cfg)
		if err != nil {
			panic("fleetsim: gpuroute: reconfiguration refused: " + err.Error() + hostLogs(p.hosts[k/p.o.Workers]) +
				"\nconfiguration: " + string(p.cfg))
		}
		p.roots[k] = root
	}
}

// syncStates reconfigures the plugin when a replica's state changed.
func (p *GPURoute) syncStates() {
	changed := false
	for i := range p.states {
		if st := p.wantState(i); st != p.states[i] {
			p.states[i] = st
			changed = true
		}
	}
	if changed {
		p.reconfigure()
	}
}

// Advance brings every gateway's clock to now, after telling the plugin
// about drains that happened since the last call (at the time they did).
func (p *GPURoute) Advance(now time.Duration) {
	p.syncStates()
	for g, h := range p.hosts {
		if d := now - h.Now(); d > 0 {
			if err := h.Advance(d); err != nil {
				panic("fleetsim: gpuroute: gateway " + strconv.Itoa(g) + " at " + now.String() + ": " + err.Error())
			}
		}
	}
}

func (p *GPURoute) flight(id int) *gpFlight {
	for id >= len(p.flights) {
		p.flights = append(p.flights, gpFlight{replica: -1})
	}
	return &p.flights[id]
}

// Pick sends req through a gateway worker and reads the plugin's choice.
func (p *GPURoute) Pick(now time.Duration, req *Request, attempt int) Decision {
	t0 := time.Now()
	defer func() { p.pickWall += time.Since(t0); p.picks++ }()
	p.syncStates()
	if req.Adapter != "" {
		if _, ok := p.adapters[req.Adapter]; !ok {
			// The adapter set is the operator's knowledge; the fleet
			// API does not carry it, so the policy configures an adapter
			// when its first request arrives.
			p.adapters[req.Adapter] = req.Model
			p.reconfigure()
		}
	}
	fl := p.flight(req.ID)
	if fl.s != nil {
		p.end(fl)
	}
	s, err := p.roots[p.conns.worker(req.ID)].NewStream()
	if err != nil {
		p.fail("new stream", err)
	}
	hdrs := [][2]string{{":method", "POST"}, {":path", pathCompletions}, {":authority", gatewayAuthority},
		{"content-type", "application/json"}}
	if req.Priority != "" {
		hdrs = append(hdrs, [2]string{headerPriority, req.Priority})
	}
	if req.Tenant != "" {
		hdrs = append(hdrs, [2]string{headerTenant, req.Tenant})
	}
	if _, err := s.RequestHeaders(hdrs, false); err != nil {
		p.fail("request headers", err)
	}
	if lr := s.LocalReply(); lr != nil {
		return p.reject(now, req, s, lr)
	}
	p.body = req.AppendCompletionBody(p.body[:0])
	if _, err := s.RequestBody(p.body, true); err != nil {
		p.fail("request body", err)
	}
	if lr := s.LocalReply(); lr != nil {
		return p.reject(now, req, s, lr)
	}
	if s.RequestPaused() {
		// The plugin holds the request for capacity: it resumes the stream
		// with a destination, or answers it, from a later callback of its
		// VM (a response, a tick, a wake from another worker), and the
		// request reaches the fleet then.
		s.OnRequestResumed(func() {
			i := p.destination(s, "resumed request")
			*p.flight(req.ID) = gpFlight{s: s, replica: i}
			p.f.Release(req, Route(i))
		})
		s.OnLocalReply(func(lr *hostsim.LocalReply) {
			if p.o.OnReject != nil {
				p.o.OnReject(p.f.Now(), req, lr.Status, string(lr.Body))
			}
			p.f.Release(req, Reject(lr.Status))
		})
		*fl = gpFlight{s: s, replica: -1}
		return Hold()
	}
	i := p.destination(s, "request body")
	*fl = gpFlight{s: s, replica: i}
	return Route(i)
}

// destination returns the replica the plugin wrote into s's destination
// header (the first of a fallback list).
func (p *GPURoute) destination(s *hostsim.Stream, phase string) int {
	dest, ok := s.RequestHeader(headerDestination)
	if !ok {
		p.fail(phase, errors.New("the plugin neither set "+headerDestination+" nor replied locally"))
	}
	if c := strings.IndexByte(dest, ','); c >= 0 {
		dest = dest[:c] // fallbacks follow the chosen replica
	}
	i, ok := p.addrs[dest]
	if !ok {
		p.fail(phase, errors.New(headerDestination+" = "+strconv.Quote(dest)+" names no replica"))
	}
	return i
}

// reject ends a stream the plugin answered locally.
func (p *GPURoute) reject(now time.Duration, req *Request, s *hostsim.Stream, lr *hostsim.LocalReply) Decision {
	if p.o.OnReject != nil {
		p.o.OnReject(now, req, lr.Status, string(lr.Body))
	}
	if err := s.Done(); err != nil {
		p.fail("stream done", err)
	}
	return Reject(lr.Status)
}

func (p *GPURoute) fail(phase string, err error) {
	panic("fleetsim: gpuroute: " + phase + ": " + err.Error())
}

// end closes a flight's stream without a complete response: the plugin
// counts it as reset.
func (p *GPURoute) end(fl *gpFlight) {
	if err := fl.s.Done(); err != nil {
		p.fail("stream done", err)
	}
	fl.s = nil
}

// tokenChunk returns the SSE token events of req's answer tokens [from,
// to) as one chunk, a token's text in each.
func (p *GPURoute) tokenChunk(req *Request, from, to int) []byte {
	b := p.tokens[:0]
	for t := from; t < to; t++ {
		b = append(b, sseTokenHead...)
		b = req.AppendAnswer(b, t, t+1)
		b = append(b, sseTokenTail...)
	}
	p.tokens = b
	return b
}

// appendUsage appends the response's usage object as vLLM writes it with
// --enable-prompt-tokens-details.
func appendUsage(b []byte, req *Request, completion, cached int) []byte {
	b = append(b, `"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(req.PromptTokens), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(completion), 10)
	b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
	b = strconv.AppendInt(b, int64(cached), 10)
	return append(b, `}}`...)
}

// Observe replays the request's response to the plugin at the event's
// virtual time.
func (p *GPURoute) Observe(ev *Event) {
	if ev.Req.ID >= len(p.flights) {
		return
	}
	fl := &p.flights[ev.Req.ID]
	if fl.s == nil {
		return
	}
	s := fl.s
	switch ev.Kind {
	case FirstToken:
		fl.cached = ev.CachedTokens
		if !ev.Req.Stream {
			return
		}
		p.respHeaders(fl, ev)
		fl.streamed = 1
		p.body1(s, p.tokenChunk(ev.Req, 0, 1), false)
	case Tokens:
		if !ev.Req.Stream || !fl.headers {
			return
		}
		p.body1(s, p.tokenChunk(ev.Req, fl.streamed, fl.streamed+ev.Tokens), false)
		fl.streamed += ev.Tokens
	case Completed:
		p.respHeaders(fl, ev)
		if ev.Req.Stream {
			if ev.Tokens > fl.streamed {
				p.body1(s, p.tokenChunk(ev.Req, fl.streamed, ev.Tokens), false)
			}
			b := append(p.body[:0], `data: {"choices":[],`...)
			b = appendUsage(b, ev.Req, ev.Tokens, fl.cached)
			p.body = append(b, "}\n\n"+sseDone...)
			p.body1(s, p.body, true)
		} else {
			b := append(p.body[:0], `{"object":"text_completion","choices":[{"index":0,"text":"`...)
			b = ev.Req.AppendAnswer(b, 0, ev.Tokens)
			b = append(b, `","finish_reason":"length"}],`...)
			b = appendUsage(b, ev.Req, ev.Tokens, fl.cached)
			p.body = append(b, '}')
			p.body1(s, p.body, true)
		}
		p.end(fl)
	case Cancelled:
		p.end(fl)
	}
}

func (p *GPURoute) respHeaders(fl *gpFlight, ev *Event) {
	if fl.headers {
		return
	}
	fl.headers = true
	if _, err := fl.s.ResponseHeaders([][2]string{{":status", "200"}, {"content-type", "text/event-stream"}}, false); err != nil {
		p.fail("response headers", err)
	}
	if p.o.DecisionHeader && p.o.OnDecision != nil {
		if v, ok := fl.s.ResponseHeader(headerDecision); ok {
			p.o.OnDecision(ev.At, ev.Req, fl.replica, v)
		}
	}
}

func (p *GPURoute) body1(s *hostsim.Stream, chunk []byte, eos bool) {
	if _, err := s.ResponseBody(chunk, eos); err != nil {
		p.fail("response body", err)
	}
}

// PickCost returns the number of Pick calls and the mean wall time one took
// (the plugin's request path through wazero, request body included).
func (p *GPURoute) PickCost() (int64, time.Duration) {
	if p.picks == 0 {
		return 0, 0
	}
	return p.picks, p.pickWall / time.Duration(p.picks)
}
