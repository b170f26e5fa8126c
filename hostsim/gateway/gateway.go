package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuroute/gpuroute/hostsim"
)

// Defaults of Options.
const (
	DefaultWorkers   = 2
	DefaultID        = "gpuroute"
	DefaultClockStep = 5 * time.Millisecond
	// DefaultMaxRequestBytes bounds a request body the gateway reads
	// (Envoy's per-stream buffer limit is of this order for a buffering filter).
	DefaultMaxRequestBytes = 16 << 20
)

// Options configures a Gateway.
type Options struct {
	// WASM is the plugin module (build/gpuroute.wasm).
	WASM []byte
	// Workers is the number of worker VMs (Envoy's --concurrency); requests
	// are dealt to them round robin. 0 means DefaultWorkers.
	Workers int
	// VMID and RootID are the plugin's vm_id and root_id; "" means "gpuroute".
	VMID, RootID string
	// PluginConfig is the first plugin configuration (JSON).
	PluginConfig []byte
	// Clusters maps proxy_http_call cluster names to base URLs. A
	// replica's metrics_cluster that is not listed is served by the
	// replica's own address ("http://" + address), where vLLM serves
	// /metrics.
	Clusters map[string]string
	// ClockStep is how often the virtual clock is brought up to wall time
	// (ticks and http_call responses fire then); 0 means DefaultClockStep.
	ClockStep time.Duration
	// Logger receives the gateway's and the plugin's log lines; nil discards.
	Logger *log.Logger
	// PluginLogLevel drops plugin log lines below it (and is what the
	// plugin's proxy_get_log_level reads); the zero value keeps all.
	PluginLogLevel hostsim.LogLevel
	// Transport carries upstream requests and metric calls; nil means a
	// transport without proxies or compression (SSE passes through as sent).
	Transport http.RoundTripper
	// MaxRequestBytes bounds request bodies (413 past it); 0 means
	// DefaultMaxRequestBytes.
	MaxRequestBytes int64
	// Retries is the route's retry_policy.num_retries for a connection
	// failure or a reset before the response (Envoy's retry_on
	// connect-failure,reset): attempt k goes to the k-th address of the
	// plugin's list. 0 means as many as the serving configuration's
	// "fallbacks", the pairing examples/envoy/override-host.yaml uses (so
	// none with one address, as ORIGINAL_DST routes without a retry
	// policy); negative means none.
	Retries int
	// FleetPath is where the gateway serves the fleet page (and its data
	// at FleetPath + "/stats.json"); "" means DefaultFleetPath, "-" none.
	FleetPath string
}

// Gateway hosts the plugin like Envoy's HTTP filter chain and forwards each
// request to the replica the plugin picked (ORIGINAL_DST on
// HeaderDestination). It is an http.Handler; ServeHTTP is safe for
// concurrent use. The zero value is not usable: call New.
type Gateway struct {
	opts    Options
	log     *log.Logger
	host    *hostsim.Host
	vmsMu   sync.RWMutex // guards vms: a module reload swaps them
	vms     []*hostsim.VM
	modGen  atomic.Uint64
	start   time.Time // wall time the virtual clock's 0 stands for
	client  *http.Client
	next    atomic.Uint64
	gen     atomic.Uint64
	cancel  context.CancelFunc
	stopped chan struct{}

	clockMu sync.Mutex // serializes Advance: the clock only moves forward from one caller

	cfgMu     sync.Mutex        // serializes reconfigurations
	clusters  map[string]string // metrics cluster name → base URL
	lastCfg   []byte            // the configuration serving
	lastTried []byte            // the configuration last tried (ReloadFile)
	lastWASM  []byte
	fallbacks atomic.Int64 // the serving configuration's "fallbacks"

	liveMu sync.Mutex
	live   map[*hostsim.Stream]liveStream
	users  map[*hostsim.VM]int // requests holding each VM, from pick to done
}

var _ http.Handler = (*Gateway)(nil)

// New compiles the module, starts the worker VMs with the first plugin
// configuration and starts the clock. Close it to stop.
func New(ctx context.Context, opts Options) (*Gateway, error) {
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.VMID == "" {
		opts.VMID = DefaultID
	}
	if opts.RootID == "" {
		opts.RootID = DefaultID
	}
	if opts.ClockStep <= 0 {
		opts.ClockStep = DefaultClockStep
	}
	switch opts.FleetPath {
	case "":
		opts.FleetPath = DefaultFleetPath
	case "-":
		opts.FleetPath = ""
	}
	if opts.MaxRequestBytes <= 0 {
		opts.MaxRequestBytes = DefaultMaxRequestBytes
	}
	logger := opts.Logger
	if logger == nil {
		logger = log.New(io.Discard, "", 0)
	}
	tr := opts.Transport
	if tr == nil {
		tr = &http.Transport{
			Proxy:               nil, // loopback replicas: never through an environment proxy
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			DisableCompression:  true,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     90 * time.Second,
		}
	}
	start := time.Now()
	g := &Gateway{
		opts:     opts,
		log:      logger,
		start:    start,
		client:   &http.Client{Transport: tr},
		clusters: map[string]string{},
		live:     map[*hostsim.Stream]liveStream{},
		users:    map[*hostsim.VM]int{},
		stopped:  make(chan struct{}),
	}
	g.host = hostsim.NewHost(hostsim.Options{
		// The guest reads wall time through WASI: drain deadlines are Unix ms.
		Start:    start,
		LogLevel: opts.PluginLogLevel,
		LogSink:  func(e hostsim.LogEntry) { logger.Print("plugin: ", e.String()) },
	})
	g.registerClusters(opts.PluginConfig)
	g.fallbacks.Store(int64(readConfig(opts.PluginConfig).Fallbacks))
	vms, err := g.startVMs(ctx, opts.WASM, opts.PluginConfig)
	if err != nil {
		g.host.Close()
		return nil, errors.New("gateway: " + err.Error())
	}
	g.vms = vms
	g.lastCfg = append([]byte(nil), opts.PluginConfig...)
	g.lastWASM = opts.WASM
	g.gen.Store(1)
	g.modGen.Store(1)
	cctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	go g.runClock(cctx)
	return g, nil
}

// startVMs compiles wasm and starts the worker VMs with cfg; on failure it
// closes the ones it started.
func (g *Gateway) startVMs(ctx context.Context, wasm, cfg []byte) ([]*hostsim.VM, error) {
	mod, err := g.host.Compile(ctx, wasm)
	if err != nil {
		return nil, err
	}
	var vms []*hostsim.VM
	fail := func(i int, err error) ([]*hostsim.VM, error) {
		for _, vm := range vms {
			_ = vm.Close()
		}
		return nil, errors.New("worker " + strconv.Itoa(i) + ": " + err.Error())
	}
	for i := 0; i < g.opts.Workers; i++ {
		vm, err := g.host.NewVM(ctx, mod, g.opts.VMID, nil)
		if err != nil {
			return fail(i, err)
		}
		vms = append(vms, vm)
		if _, err := vm.Configure(g.opts.RootID, cfg); err != nil {
			return fail(i, err)
		}
	}
	return vms, nil
}

// ReloadModule swaps in a new plugin module, as Envoy does when ECDS or an
// Istio WasmPlugin delivers one: new worker VMs (same vm_id, so shared data
// survives while any VM of it lives) with the serving configuration take
// new requests; the old VMs finish their streams and are then closed. If
// the module fails to compile, start or configure, the old one keeps serving.
func (g *Gateway) ReloadModule(ctx context.Context, wasm []byte) error {
	g.cfgMu.Lock()
	defer g.cfgMu.Unlock()
	vms, err := g.startVMs(ctx, wasm, g.lastCfg)
	if err != nil {
		return errors.New("gateway: reload module: " + err.Error() + "; the previous module keeps serving")
	}
	g.vmsMu.Lock()
	old := g.vms
	g.vms = vms
	g.vmsMu.Unlock()
	g.lastWASM = wasm
	g.modGen.Add(1)
	g.log.Printf("gateway: plugin module %d started (%d bytes, %d workers)", g.modGen.Load(), len(wasm), len(vms))
	go g.retire(old)
	return nil
}

// retire closes VMs once no stream runs on them any more.
func (g *Gateway) retire(vms []*hostsim.VM) {
	for g.streamsOn(vms) > 0 {
		time.Sleep(g.opts.ClockStep)
	}
	for _, vm := range vms {
		if err := vm.Close(); err != nil {
			g.log.Print("gateway: close retired worker: ", err)
		}
	}
}

func (g *Gateway) streamsOn(vms []*hostsim.VM) int {
	g.liveMu.Lock()
	defer g.liveMu.Unlock()
	n := 0
	for _, vm := range vms {
		n += g.users[vm]
	}
	return n
}

// retries is the number of retries an upstream failure gets (Options.Retries).
func (g *Gateway) retries() int {
	switch {
	case g.opts.Retries < 0:
		return 0
	case g.opts.Retries > 0:
		return g.opts.Retries
	}
	return int(g.fallbacks.Load())
}

// ModuleGeneration counts the modules started so far (1 after New).
func (g *Gateway) ModuleGeneration() uint64 { return g.modGen.Load() }

// Host returns the hostsim host (stats, shared data, logs).
func (g *Gateway) Host() *hostsim.Host { return g.host }

// Generation counts the plugin configurations accepted so far (1 after New).
func (g *Gateway) Generation() uint64 { return g.gen.Load() }

// Close stops the clock and closes the VMs. In-flight requests fail.
func (g *Gateway) Close() error {
	g.cancel()
	<-g.stopped
	g.clockMu.Lock()
	defer g.clockMu.Unlock()
	return g.host.Close()
}

// runClock keeps the virtual clock on wall time. hostsim fires ticks and
// delivers http_call responses from inside Advance, taking each VM's lock
// for the call, so the clock never runs a VM concurrently with a request.
func (g *Gateway) runClock(ctx context.Context) {
	defer close(g.stopped)
	t := time.NewTicker(g.opts.ClockStep)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			g.clockMu.Lock()
			g.advanceLocked()
			g.clockMu.Unlock()
		}
	}
}

// syncClock brings the clock up to wall time unless another goroutine is
// doing it right now (then it is at most one step behind).
func (g *Gateway) syncClock() {
	if g.clockMu.TryLock() {
		g.advanceLocked()
		g.clockMu.Unlock()
	}
}

func (g *Gateway) advanceLocked() {
	if d := time.Since(g.start) - g.host.Now(); d > 0 {
		if err := g.host.Advance(d); err != nil {
			g.log.Print("gateway: clock: ", err)
		}
	}
	g.cancelClosed()
}

// cancelClosed cancels the upstream side of streams the plugin reset
// (proxy_close_stream from a tick, e.g. at a drain deadline).
func (g *Gateway) cancelClosed() {
	g.liveMu.Lock()
	defer g.liveMu.Unlock()
	for s, l := range g.live {
		if s.Closed(hostsim.StreamResponse) || s.Closed(hostsim.StreamRequest) {
			l.cancel()
		}
	}
}

// pickVM deals requests to the live worker VMs round robin and counts the
// request as a user of the VM until release. Holding vmsMu while counting
// means a module reload, which swaps under the write lock, sees every user
// of the VMs it retires.
func (g *Gateway) pickVM() (*hostsim.VM, error) {
	g.vmsMu.RLock()
	defer g.vmsMu.RUnlock()
	vms := g.vms
	n := len(vms)
	for range n {
		vm := vms[int(g.next.Add(1)-1)%n]
		if vm.Err() == nil {
			g.liveMu.Lock()
			g.users[vm]++
			g.liveMu.Unlock()
			return vm, nil
		}
	}
	return nil, errors.New("gateway: every worker VM failed; first: " + vms[0].Err().Error())
}

func (g *Gateway) releaseVM(vm *hostsim.VM) {
	g.liveMu.Lock()
	if g.users[vm]--; g.users[vm] <= 0 {
		delete(g.users, vm)
	}
	g.liveMu.Unlock()
}

// hopByHop are the connection-specific headers a proxy does not forward
// (RFC 9110 §7.6.1; Envoy strips the same set).
var hopByHop = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-connection": true, "transfer-encoding": true,
	"upgrade": true, "te": true, "trailer": true, "proxy-authenticate": true, "proxy-authorization": true,
}

func requestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ServeHTTP runs one request through the plugin and the chosen replica.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if g.serveFleet(w, req) {
		return
	}
	g.syncClock()
	vm, err := g.pickVM()
	if err != nil {
		g.localError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	defer g.releaseVM(vm)
	root := vm.Root(g.opts.RootID)
	if root == nil {
		g.localError(w, http.StatusServiceUnavailable, "gateway: worker "+vm.ID()+" has no root "+strconv.Quote(g.opts.RootID))
		return
	}
	s, err := root.NewStream()
	if err != nil {
		g.localError(w, http.StatusInternalServerError, "gateway: "+err.Error())
		return
	}
	ctx, cancel := context.WithCancel(req.Context())
	defer cancel()
	g.liveMu.Lock()
	g.live[s] = liveStream{cancel: cancel}
	g.liveMu.Unlock()
	defer func() {
		g.liveMu.Lock()
		delete(g.live, s)
		g.liveMu.Unlock()
		if err := s.Done(); err != nil {
			g.log.Print("gateway: stream done: ", err)
		}
	}()
	p := &proxied{g: g, s: s, w: w, req: req, ctx: ctx}
	p.serve()
}

// liveStream is a stream in flight: the cancel of its upstream request
// (a plugin reset ends it).
type liveStream struct {
	cancel context.CancelFunc
}

// localError answers an error of the gateway itself (not the plugin's) in
// OpenAI's error shape.
func (g *Gateway) localError(w http.ResponseWriter, status int, msg string) {
	g.log.Print(msg)
	openAIError(w, status, msg)
}
