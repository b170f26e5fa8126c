package hostsim

import (
	"container/heap"
	"context"
	"crypto/sha256"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
)

// PollMode selects how WASI poll_oneoff answers; the Go runtime calls it
// when it waits on a timer or the netpoller (docs/abi.md "Envoy behaviour").
type PollMode int

const (
	// PollENOSYS answers ENOSYS like proxy-wasm-cpp-host PR #427, i.e.
	// Envoy 1.33–1.37; the Go runtime turns that into a fatal error, so
	// the default makes such guests trap here as they would in Envoy.
	PollENOSYS PollMode = iota
	// PollZeroEvents answers success with 0 events like cpp-host PR #533.
	// A guest waiting on a clock then busy-spins; since hostsim's clock is
	// virtual, each such poll advances it by the requested timeout, standing
	// in for the real time the spin burns. PollCalls counts them.
	PollZeroEvents
)

// HeadersPause selects what a PAUSE from proxy_on_request_headers or
// proxy_on_response_headers does. Envoy's default differs from what
// gpuroute needs: a router that reads the request body before it picks the
// upstream must hold the headers while it reads the body, which Envoy
// allows only with the wasm PluginConfig's allow_on_headers_stop_iteration
// (Envoy 1.35 and later, proxy-wasm-cpp-host PR #434).
type HeadersPause int

const (
	// HeadersStopIteration is Envoy with allow_on_headers_stop_iteration:
	// true, the configuration gpuroute requires. PAUSE is StopIteration:
	// the headers wait, and the body and trailers still reach the guest,
	// which may edit the headers until it lets them go.
	HeadersStopIteration HeadersPause = iota
	// HeadersStopAll is Envoy's default: PAUSE is
	// StopAllIterationAndWatermark (cpp-host
	// convertVmCallResultToFilterHeadersStatus). The body and trailers wait
	// in the host, unseen by the guest, until it calls proxy_continue_stream;
	// then the headers go on as they are and only then does the guest's
	// body callback get what waited.
	HeadersStopAll
)

// Options configures a Host. The zero value is a usable Envoy-like host:
// virtual clock at DefaultStart, poll_oneoff=ENOSYS, headers PAUSE as
// StopIteration, Envoy's configuration canary, no V8 allow-lists, every log
// level kept.
type Options struct {
	// Start is the virtual wall-clock time at creation; zero means DefaultStart.
	Start time.Time
	// Poll selects the poll_oneoff behaviour; the zero value is PollENOSYS.
	Poll PollMode
	// HeadersPause selects what PAUSE from a headers callback does; the
	// zero value is HeadersStopIteration.
	HeadersPause HeadersPause
	// NoCanary skips the configuration canary Envoy runs before a new
	// plugin configuration reaches any worker (canary.go): a throwaway VM
	// that initializes, starts and configures one root and is destroyed.
	// Envoy always runs it; skip it only to test a guest's workers alone.
	NoCanary bool
	// V8 selects the allow-lists of host calls during _initialize and
	// proxy_on_memory_allocate that Envoy's V8 engine enforces; the zero
	// value enforces none.
	V8 V8Restrictions
	// LogLevel is what proxy_get_log_level reports; messages below it are
	// dropped, as Envoy does. The zero value (LogTrace) keeps all.
	LogLevel LogLevel
	// LogSink, if set, also receives every kept log entry, synchronously from
	// inside the guest's call: it must not call back into the same VM.
	LogSink func(LogEntry)
	// MaxLogs bounds the entries Logs returns (oldest dropped); 0 means 10000.
	MaxLogs int
	// Seed seeds WASI random_get so runs are reproducible.
	Seed uint64
	// Properties are host-wide properties, keyed by path with NUL-separated
	// segments (e.g. "node\x00id"); streams and roots see them unless they
	// set their own.
	Properties map[string][]byte
	// CompilationCache gives the Host a wazero runtime of its own with
	// this compilation cache. Without it (and without Probe) every Host of
	// the process shares one runtime and compiles given bytes once
	// (processRuntime), so tests that create many hosts neither compile
	// nor decode and validate a module again.
	CompilationCache wazero.CompilationCache
	// Probe, if set, instruments every module the Host compiles: calls of
	// the guest functions it matches are counted and timed (GuestProbe).
	// Such a Host compiles without any shared compilation cache, because
	// wazero keys a cached module by its bytes and which functions are
	// instrumented, and a cache hit would keep the listeners of the compile
	// that filled it (another probe's, or none).
	Probe *GuestProbe
	// TimeGuest makes each VM time the module's own execution: the time
	// inside its exports, less the host functions they call (this host's
	// ABI implementation, which Envoy replaces with its own) but with the
	// proxy_on_memory_allocate calls those make into the guest (VM.GuestTime).
	// It costs two monotonic clock reads per export and per host function call
	// (guestclock.go says how their own cost is kept out of the guest's).
	TimeGuest bool
}

// DefaultStart is the virtual wall-clock origin when Options.Start is zero.
var DefaultStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// monotonicBase keeps WASI's monotonic clock away from 0, as a real boot-time
// clock is, so guests cannot mistake "unset" for "now".
const monotonicBase = time.Hour

// processRuntime is the wazero runtime the Hosts without a Probe or a
// CompilationCache of their own share, with the host modules instantiated
// once: the host functions find their VM through the call's context
// (vmOf), not through the runtime. compiled holds the last
// maxSharedModules modules it compiled, by the bytes' digest, order the
// digests oldest first: a gateway that swaps its module many times keeps a
// bounded number of them.
var processRuntime struct {
	once     sync.Once
	rt       wazero.Runtime
	mu       sync.Mutex
	compiled map[[sha256.Size]byte]wazero.CompiledModule
	order    [][sha256.Size]byte
}

// maxSharedModules bounds the modules the shared runtime keeps compiled.
const maxSharedModules = 16

func sharedRuntime() wazero.Runtime {
	p := &processRuntime
	p.once.Do(func() {
		p.rt = newRuntime(wazero.NewRuntimeConfigCompiler())
		p.compiled = map[[sha256.Size]byte]wazero.CompiledModule{}
	})
	return p.rt
}

// newRuntime returns a runtime with the host modules instantiated.
func newRuntime(cfg wazero.RuntimeConfig) wazero.Runtime {
	rt := wazero.NewRuntimeWithConfig(context.Background(), cfg)
	if err := instantiateHostModules(context.Background(), rt); err != nil {
		// Only a bug in hostsim's own function signatures can get here.
		panic("hostsim: instantiate host modules: " + err.Error())
	}
	return rt
}

// LogEntry is one guest log line (proxy_log or fd_write to stdout/stderr).
type LogEntry struct {
	Time    time.Duration // virtual time since the Host started
	VMID    string
	Context uint32 // effective context id at the time of the call, 0 if none
	Level   LogLevel
	Message string
}

// String formats the entry like "[info] vm=a ctx=2 msg".
func (e LogEntry) String() string {
	return "[" + e.Level.String() + "] vm=" + e.VMID + " ctx=" + strconv.FormatUint(uint64(e.Context), 10) + " " + e.Message
}

// Host is one simulated Envoy process: a virtual clock, the shared-data
// store and shared queues (process-wide, keyed by vm_id), the stats store,
// the upstream clusters proxy_http_call can reach and every VM running in
// it. Host methods are safe for concurrent use; each VM runs one guest
// call at a time.
type Host struct {
	opts Options
	rt   wazero.Runtime
	// ownRuntime: rt is this Host's (Probe or CompilationCache), closed
	// with it; else it is processRuntime's.
	ownRuntime bool

	mu        sync.Mutex
	now       time.Duration
	events    eventHeap
	eventSeq  uint64
	rng       *rand.ChaCha8
	logs      []LogEntry
	vms       map[*VM]struct{}
	vmCount   map[string]int // live VMs per vm_id: shared data dies with the last
	shared    map[string]map[string]*sharedEntry
	casSeq    uint32
	queues    []*queue // index = queue id - 1
	qByName   map[queueKey]*queue
	metrics   map[string]*metric
	clusters  map[string]Cluster
	pollCalls uint64
	// wallStep is StepWallClock's accumulated offset of the wall clock.
	wallStep time.Duration
	// The configuration canary's verdicts (nil: accepted) and runs.
	canaryVerdicts map[canaryKey]error
	canaries       int
}

// NewHost creates a Host. Close it to release the wazero runtime.
func NewHost(opts Options) *Host {
	if opts.Start.IsZero() {
		opts.Start = DefaultStart
	}
	if opts.MaxLogs <= 0 {
		opts.MaxLogs = 10000
	}
	cfg := wazero.NewRuntimeConfigCompiler()
	var rt wazero.Runtime
	own := true
	switch {
	case opts.Probe != nil:
		rt = newRuntime(cfg) // no cache: see Options.Probe
	case opts.CompilationCache != nil:
		rt = newRuntime(cfg.WithCompilationCache(opts.CompilationCache))
	default:
		rt, own = sharedRuntime(), false
	}
	var seed [32]byte
	for i := 0; i < 8; i++ {
		seed[i] = byte(opts.Seed >> (8 * i))
	}
	h := &Host{
		opts:       opts,
		rt:         rt,
		ownRuntime: own,
		rng:        rand.NewChaCha8(seed),
		vms:        map[*VM]struct{}{},
		vmCount:    map[string]int{},
		shared:     map[string]map[string]*sharedEntry{},
		qByName:    map[queueKey]*queue{},
		metrics:    map[string]*metric{},
		clusters:   map[string]Cluster{},

		canaryVerdicts: map[canaryKey]error{},
	}
	return h
}

// Close closes every VM, and the wazero runtime when it is the Host's own.
func (h *Host) Close() error {
	h.mu.Lock()
	vms := make([]*VM, 0, len(h.vms))
	for vm := range h.vms {
		vms = append(vms, vm)
	}
	h.mu.Unlock()
	for _, vm := range vms {
		_ = vm.Close()
	}
	if !h.ownRuntime {
		return nil
	}
	return h.rt.Close(context.Background())
}

// Now returns the virtual time elapsed since the Host started.
func (h *Host) Now() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.now
}

// WallTime returns the virtual wall-clock time: Options.Start + Now, plus
// every StepWallClock offset.
func (h *Host) WallTime() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.opts.Start.Add(h.now + h.wallStep)
}

// StepWallClock steps the wall clock the guests read (WASI clock_time_get
// REALTIME and proxy_get_current_time_nanoseconds) by d, which may be
// negative: what an NTP step or an operator's date command does to a real
// Envoy host. Virtual time, the monotonic clock, ticks and call timeouts
// are unaffected, as Envoy's timers run on the monotonic clock.
func (h *Host) StepWallClock(d time.Duration) {
	h.mu.Lock()
	h.wallStep += d
	h.mu.Unlock()
}

// PollCalls counts poll_oneoff calls the guests made (busy-spin indicator).
func (h *Host) PollCalls() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pollCalls
}

// Advance moves the virtual clock forward by d, firing, in time order, every
// tick due on every root context of every VM and delivering every due
// proxy_http_call response or timeout and queue notification. Events at the
// same instant fire in the order they were scheduled. It returns the first
// guest error (the VM is then failed and its events dropped) but keeps going
// for the other VMs.
func (h *Host) Advance(d time.Duration) error {
	if d < 0 {
		return errors.New("hostsim: advance by negative duration " + d.String())
	}
	h.mu.Lock()
	target := h.now + d
	h.mu.Unlock()
	err := h.runUntil(target)
	h.mu.Lock()
	if h.now < target {
		h.now = target
	}
	h.mu.Unlock()
	return err
}

// runDue delivers events due now (queue notifications, zero-latency call
// responses); every public stream and VM call ends with it, like Envoy's
// event loop running posted work after the current callback.
func (h *Host) runDue() error {
	h.mu.Lock()
	now := h.now
	h.mu.Unlock()
	return h.runUntil(now)
}

func (h *Host) runUntil(target time.Duration) error {
	var first error
	for {
		h.mu.Lock()
		if len(h.events) == 0 || h.events[0].at > target {
			h.mu.Unlock()
			return first
		}
		ev := heap.Pop(&h.events).(*event)
		if ev.at > h.now {
			h.now = ev.at
		}
		h.mu.Unlock()
		if err := ev.fire(); err != nil && first == nil {
			first = err
		}
	}
}

// schedule queues fn at virtual time at. Callers hold h.mu.
func (h *Host) scheduleLocked(at time.Duration, fire func() error) {
	h.eventSeq++
	heap.Push(&h.events, &event{at: at, seq: h.eventSeq, fire: fire})
}

type event struct {
	at   time.Duration
	seq  uint64
	fire func() error
}

type eventHeap []*event

func (e eventHeap) Len() int { return len(e) }
func (e eventHeap) Less(i, j int) bool {
	if e[i].at != e[j].at {
		return e[i].at < e[j].at
	}
	return e[i].seq < e[j].seq
}
func (e eventHeap) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *eventHeap) Push(x any)   { *e = append(*e, x.(*event)) }
func (e *eventHeap) Pop() any {
	old := *e
	x := old[len(old)-1]
	old[len(old)-1] = nil
	*e = old[:len(old)-1]
	return x
}

// log records an entry if its level is kept.
func (h *Host) log(e LogEntry) {
	if e.Level < h.opts.LogLevel {
		return
	}
	h.mu.Lock()
	e.Time = h.now
	if len(h.logs) >= h.opts.MaxLogs {
		n := copy(h.logs, h.logs[len(h.logs)-h.opts.MaxLogs+1:])
		h.logs = h.logs[:n]
	}
	h.logs = append(h.logs, e)
	sink := h.opts.LogSink
	h.mu.Unlock()
	if sink != nil {
		sink(e)
	}
}

// Logs returns a copy of the kept log entries, oldest first.
func (h *Host) Logs() []LogEntry {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]LogEntry(nil), h.logs...)
}

// ClearLogs drops the kept log entries.
func (h *Host) ClearLogs() {
	h.mu.Lock()
	h.logs = h.logs[:0]
	h.mu.Unlock()
}

// Shared data (proxy-wasm-cpp-host src/shared_data.cc).

type sharedEntry struct {
	value []byte
	cas   uint32
}

// nextCASLocked draws from the one process-wide counter, skipping 0 on wrap
// (cpp-host SharedData::nextCas).
func (h *Host) nextCASLocked() uint32 {
	h.casSeq++
	if h.casSeq == 0 {
		h.casSeq++
	}
	return h.casSeq
}

// getShared appends the value stored under key for vmID to dst, under the
// lock: setShared reuses an entry's buffer, so no reader may keep it.
func (h *Host) getShared(vmID, key string, dst []byte) ([]byte, uint32, Status) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.shared[vmID][key]
	if !ok {
		return dst, 0, StatusNotFound
	}
	return append(dst, e.value...), e.cas, StatusOK
}

func (h *Host) setShared(vmID, key string, value []byte, cas uint32) Status {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.shared[vmID]
	if m == nil {
		m = map[string]*sharedEntry{}
		h.shared[vmID] = m
	}
	e, ok := m[key]
	if !ok {
		// A missing key ignores cas: "create if absent" is not atomic in Envoy.
		m[key] = &sharedEntry{value: append([]byte(nil), value...), cas: h.nextCASLocked()}
		return StatusOK
	}
	if cas != 0 && cas != e.cas {
		return StatusCASMismatch
	}
	// In place: Envoy's shared data replaces the value under its lock, and
	// an update must not allocate in the host, whose collector would run
	// inside the callbacks the benchmarks time (TestSharedDataCAS holds
	// that readers keep their copies).
	e.value = append(e.value[:0], value...)
	e.cas = h.nextCASLocked()
	return StatusOK
}

// SharedData returns a copy of the value and its CAS stored under key for
// vmID, and whether it exists.
func (h *Host) SharedData(vmID, key string) ([]byte, uint32, bool) {
	v, cas, st := h.getShared(vmID, key, nil)
	return v, cas, st == StatusOK
}

// SetSharedData stores a value as a guest's proxy_set_shared_data would and
// returns the spec status (StatusCASMismatch on a stale cas).
func (h *Host) SetSharedData(vmID, key string, value []byte, cas uint32) Status {
	return h.setShared(vmID, key, value, cas)
}

// Shared queues (cpp-host src/shared_queue.cc).

type queueKey struct{ vmID, name string }

type queue struct {
	id    uint32
	key   queueKey
	owner *VM
	root  uint32 // root context that registered it: gets proxy_on_queue_ready
	items [][]byte
}

// Cluster answers proxy_http_call requests sent to one Envoy cluster name.
// Handle runs synchronously when the guest makes the call, with the Host's
// virtual time; the reply is delivered after Reply.Latency of virtual time.
type Cluster interface {
	Handle(req *CallRequest) CallReply
}

// ClusterFunc adapts a function to Cluster.
type ClusterFunc func(req *CallRequest) CallReply

// Handle calls f.
func (f ClusterFunc) Handle(req *CallRequest) CallReply { return f(req) }

// CallRequest is one proxy_http_call as the cluster sees it.
type CallRequest struct {
	Cluster   string
	Method    string
	Path      string
	Authority string
	Headers   [][2]string // all headers, pseudo-headers included, in order
	Body      []byte
	Trailers  [][2]string
	Timeout   time.Duration // 0 means none
	Now       time.Duration // virtual time of the call
	VMID      string
}

// CallReply is a cluster's answer. NoAnswer makes the call time out (or
// hang forever without a timeout); so does a Latency beyond the timeout.
type CallReply struct {
	Status   int // :status; 200 if 0
	Headers  [][2]string
	Body     []byte
	Trailers [][2]string
	Latency  time.Duration
	NoAnswer bool
}

// AddCluster registers (or replaces) the cluster proxy_http_call reaches by name.
func (h *Host) AddCluster(name string, c Cluster) {
	h.mu.Lock()
	h.clusters[name] = c
	h.mu.Unlock()
}

// RemoveCluster unregisters a cluster; later calls to it get BAD_ARGUMENT.
func (h *Host) RemoveCluster(name string) {
	h.mu.Lock()
	delete(h.clusters, name)
	h.mu.Unlock()
}

// Metrics: Envoy stats are process-wide and looked up by name, so defining a
// name twice (from any VM or root) reaches the same stat.

type metric struct {
	name    string
	typ     MetricType
	value   int64 // counter (non-negative) and gauge
	samples []uint64
}

// Metric is a snapshot of one stat.
type Metric struct {
	Name    string
	Type    MetricType
	Value   int64    // counter or gauge value
	Samples []uint64 // histogram records, in order
}

// Metric returns the stat defined under name.
func (h *Host) Metric(name string) (Metric, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m, ok := h.metrics[name]
	if !ok {
		return Metric{}, false
	}
	return Metric{Name: m.name, Type: m.typ, Value: m.value, Samples: append([]uint64(nil), m.samples...)}, true
}

// MetricNames lists every defined stat name.
func (h *Host) MetricNames() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.metrics))
	for n := range h.metrics {
		out = append(out, n)
	}
	return out
}
