package hostsim

import (
	"context"
	"crypto/sha256"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// Module is a compiled guest module, reusable for any number of VMs of the
// Host that compiled it.
type Module struct {
	host     *Host
	compiled wazero.CompiledModule
	size     int
	sum      [sha256.Size]byte // of the bytes: the code part of cpp-host's VM key
}

// Compile compiles a proxy-wasm module with wazero's compiler engine. The
// compilation cache is shared by every Host in the process (unless
// Options.CompilationCache says otherwise), so compiling the same bytes again
// is cheap. Missing imports are reported by NewVM, as Envoy reports them at load.
// With Options.Probe set, the module is compiled with the probe's listeners.
func (h *Host) Compile(ctx context.Context, wasm []byte) (*Module, error) {
	if h.opts.Probe != nil {
		ctx = h.opts.Probe.withListeners(ctx)
	}
	sum := sha256.Sum256(wasm)
	cm, err := h.compile(ctx, wasm, sum)
	if err != nil {
		return nil, errors.New("hostsim: compile module: " + err.Error())
	}
	return &Module{host: h, compiled: cm, size: len(wasm), sum: sum}, nil
}

// compile compiles wasm in the Host's runtime; in the shared one, bytes
// compiled before are not decoded, validated or compiled again.
func (h *Host) compile(ctx context.Context, wasm []byte, sum [sha256.Size]byte) (wazero.CompiledModule, error) {
	if h.ownRuntime {
		return h.rt.CompileModule(ctx, wasm)
	}
	p := &processRuntime
	p.mu.Lock()
	defer p.mu.Unlock()
	if cm, ok := p.compiled[sum]; ok {
		return cm, nil
	}
	cm, err := h.rt.CompileModule(ctx, wasm)
	if err != nil {
		return nil, err
	}
	if len(p.order) == maxSharedModules {
		// The oldest goes; its VMs keep running (wazero allows closing a
		// compiled module with instances of it alive).
		_ = p.compiled[p.order[0]].Close(ctx)
		delete(p.compiled, p.order[0])
		p.order = p.order[1:]
	}
	p.compiled[sum] = cm
	p.order = append(p.order, sum)
	return cm, nil
}

// Size returns the module's size in bytes.
func (m *Module) Size() int { return m.size }

// Imports lists the module's imports as "module.name".
func (m *Module) Imports() []string {
	var out []string
	for _, f := range m.compiled.ImportedFunctions() {
		mod, name, _ := f.Import()
		out = append(out, mod+"."+name)
	}
	return out
}

// Exports lists the names of the module's exported functions and memories.
func (m *Module) Exports() []string {
	var out []string
	for name := range m.compiled.ExportedFunctions() {
		out = append(out, name)
	}
	for name := range m.compiled.ExportedMemories() {
		out = append(out, name)
	}
	return out
}

// export indexes into VM.fn.
const (
	fnMalloc = iota
	fnOnVMStart
	fnOnConfigure
	fnOnContextCreate
	fnOnTick
	fnOnHTTPCallResponse
	fnOnQueueReady
	fnOnRequestHeaders
	fnOnRequestBody
	fnOnRequestTrailers
	fnOnResponseHeaders
	fnOnResponseBody
	fnOnResponseTrailers
	fnOnDone
	fnOnLog
	fnOnDelete
	numFns
)

var fnNames = [numFns]string{
	exportMemoryAllocate, exportOnVMStart, exportOnConfigure, exportOnContextCreate,
	exportOnTick, exportOnHTTPCallResponse, exportOnQueueReady,
	exportOnRequestHeaders, exportOnRequestBody, exportOnRequestTrailers,
	exportOnResponseHeaders, exportOnResponseBody, exportOnResponseTrailers,
	exportOnDone, exportOnLog, exportOnDelete,
}

type vmKey struct{}

// ErrVMFailed is wrapped by every error of a VM after a guest trap.
var ErrVMFailed = errors.New("hostsim: vm failed")

// ErrVMClosed is returned by calls on a closed VM.
var ErrVMClosed = errors.New("hostsim: vm closed")

// VM is one instance of a module, like the VM of one Envoy worker thread.
// Its methods, and those of its roots and streams, may be called from any
// goroutine but run one guest call at a time.
type VM struct {
	host     *Host
	mod      *Module
	id       string
	vmConfig []byte
	inst     api.Module
	mem      api.Memory
	callCtx  context.Context
	fn       [numFns]api.Function

	mu      sync.Mutex
	failed  error
	closed  bool
	nextID  uint32
	roots   map[uint32]*Root
	active  map[string]*Root // serving root per root id
	streams map[uint32]*Stream

	// The effective context of the running callback.
	curRoot   *Root
	curStream *Stream
	// Buffers that exist only during one callback.
	pluginConfig []byte
	havePlugin   bool
	callResp     *callResponse

	nextCallID   uint32
	metricIDs    map[uint32]*metric
	nextMetricID uint32
	stack        [8]uint64
	allocStack   [1]uint64
	// With Options.TimeGuest: the guest's execution time so far, and the
	// host functions' time within the running export.
	timeGuest bool
	guestTime time.Duration
	hostTime  time.Duration
	scratch   []byte
	bodies    [][]byte // body buffers of ended streams, for the next ones
	stderr    []byte   // head of what the running callback wrote to stderr
	// What the guest's stream calls asked for, run once its call returns
	// (filter.go), and the embedder's hooks they triggered, run by unlock.
	deferred     []deferredCall
	deferredHead int
	notices      []notice
	// restricted, while set, is the allow-list of host calls (V8's, during
	// _initialize and proxy_on_memory_allocate); any other traps.
	restricted []string
}

type callResponse struct {
	headers  [][2]string
	body     []byte
	trailers [][2]string
	status   int
	failed   bool
}

// NewVM instantiates mod as a worker VM with the given vm_id (the key of its
// shared data and queues) and VM configuration, runs _initialize and then
// proxy_on_vm_start. Instantiation fails, as in Envoy, if the module imports
// anything the host does not provide.
//
// cpp-host calls proxy_on_vm_start once per root context it starts, with
// that root's id, right after the root's proxy_on_context_create; hostsim
// calls it once per VM with the VM context's id 0, before any root, so that
// a module refusing to start fails here (the canary, canary.go, follows
// cpp-host's order).
func (h *Host) NewVM(ctx context.Context, mod *Module, vmID string, vmConfig []byte) (*VM, error) {
	vm, err := h.newInstance(ctx, mod, vmID, vmConfig)
	if err != nil {
		return nil, err
	}
	vm.mu.Lock()
	defer vm.unlock()
	h.mu.Lock()
	h.vms[vm] = struct{}{}
	h.vmCount[vmID]++
	h.mu.Unlock()
	ok, err := vm.callBool(fnOnVMStart, true, 0, uint64(len(vm.vmConfig)))
	if err != nil {
		return nil, err
	}
	if !ok {
		vm.closeLocked()
		return nil, errors.New("hostsim: new vm " + strconv.Quote(vmID) + ": proxy_on_vm_start returned false")
	}
	return vm, nil
}

// newInstance instantiates mod and runs _initialize, under V8's allow-list
// when Options.V8 asks for one. The VM is not yet one of the Host's.
func (h *Host) newInstance(ctx context.Context, mod *Module, vmID string, vmConfig []byte) (*VM, error) {
	if mod == nil || mod.host != h {
		return nil, errors.New("hostsim: new vm " + strconv.Quote(vmID) + ": module was compiled by another host")
	}
	vm := &VM{
		host:      h,
		mod:       mod,
		id:        vmID,
		vmConfig:  append([]byte(nil), vmConfig...),
		roots:     map[uint32]*Root{},
		active:    map[string]*Root{},
		streams:   map[uint32]*Stream{},
		metricIDs: map[uint32]*metric{},
		timeGuest: h.opts.TimeGuest,
	}
	vm.callCtx = context.WithValue(ctx, vmKey{}, vm)
	vm.restricted, _ = h.opts.V8.allowed()
	inst, err := h.rt.InstantiateModule(vm.callCtx, mod.compiled,
		wazero.NewModuleConfig().WithName("").WithStartFunctions(exportInitialize))
	vm.restricted = nil
	if err != nil {
		return nil, errors.New("hostsim: new vm " + strconv.Quote(vmID) + ": instantiate: " + err.Error() + vm.stderrSuffix())
	}
	vm.inst = inst
	vm.mem = inst.Memory()
	if vm.mem == nil {
		_ = inst.Close(ctx)
		return nil, errors.New("hostsim: new vm " + strconv.Quote(vmID) + ": module exports no memory")
	}
	for i, name := range fnNames {
		vm.fn[i] = inst.ExportedFunction(name)
	}
	if vm.fn[fnMalloc] == nil {
		_ = inst.Close(ctx)
		return nil, errors.New("hostsim: new vm " + strconv.Quote(vmID) + ": module does not export " + exportMemoryAllocate)
	}
	return vm, nil
}

// ID returns the VM's vm_id.
func (vm *VM) ID() string { return vm.id }

// Err returns the error that failed the VM, or nil.
func (vm *VM) Err() error {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.failed
}

// MemoryBytes returns the size of the VM's linear memory in bytes (a
// multiple of the 64 KiB wasm page). Go's wasm runtime only ever grows it
// (memory.grow; wasm has no shrink), so an unchanged size over many requests
// means the guest heap stayed within what it already had.
func (vm *VM) MemoryBytes() uint32 {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.mem.Size()
}

// Root returns the root context currently serving rootID, or nil.
func (vm *VM) Root(rootID string) *Root {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.active[rootID]
}

// GuestTime returns how long the module has run in this VM's exports,
// host functions excluded (Options.TimeGuest; 0 without it).
func (vm *VM) GuestTime() time.Duration {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.guestTime
}

// hostCall runs host function fn, adding its time to vm.hostTime when the
// guest is timed.
func (vm *VM) hostCall(fn func()) {
	if !vm.timeGuest {
		fn()
		return
	}
	t0 := nanotime()
	fn()
	vm.hostTime += time.Duration(nanotime() - t0 + clockReadNanos)
}

// usable reports why the VM cannot take a call. Callers hold vm.mu.
func (vm *VM) usable() error {
	if vm.failed != nil {
		return vm.failed
	}
	if vm.closed {
		return ErrVMClosed
	}
	return nil
}

// invoke calls export fn with up to 5 arguments, then runs what the guest's
// stream calls deferred to the end of the call. A missing export returns
// def, as Envoy skips callbacks a module does not export. Callers hold vm.mu.
func (vm *VM) invoke(fn int, def uint64, n int, a0, a1, a2, a3, a4 uint64) (uint64, error) {
	if err := vm.usable(); err != nil {
		return 0, err
	}
	f := vm.fn[fn]
	if f == nil {
		return def, nil
	}
	vm.stderr = vm.stderr[:0]
	st := vm.stack[:]
	st[0], st[1], st[2], st[3], st[4] = a0, a1, a2, a3, a4
	var t0 int64
	if vm.timeGuest {
		t0, vm.hostTime = nanotime(), 0
	}
	err := f.CallWithStack(vm.callCtx, st)
	if vm.timeGuest {
		vm.guestTime += time.Duration(nanotime()-t0) - vm.hostTime
	}
	if err != nil {
		var b strings.Builder
		b.WriteString("hostsim: vm ")
		b.WriteString(strconv.Quote(vm.id))
		b.WriteString(": ")
		b.WriteString(fnNames[fn])
		b.WriteString("(")
		args := [5]uint64{a0, a1, a2, a3, a4}
		for i, a := range args[:n] {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(strconv.FormatUint(a, 10))
		}
		b.WriteString(") trapped: ")
		b.WriteString(firstLine(err.Error()))
		b.WriteString(vm.stderrSuffix())
		vm.failed = &trapError{msg: b.String(), cause: err}
		vm.deferred, vm.deferredHead = vm.deferred[:0], 0
		return 0, vm.failed
	}
	r := st[0] // the deferred calls reuse vm.stack
	return r, vm.runDeferred()
}

func (vm *VM) callBool(fn int, def bool, a0, a1 uint64) (bool, error) {
	d := uint64(0)
	if def {
		d = 1
	}
	r, err := vm.invoke(fn, d, 2, a0, a1, 0, 0, 0)
	return uint32(r) != 0, err
}

// trapError is a guest trap; it matches ErrVMFailed with errors.Is.
type trapError struct {
	msg   string
	cause error
}

func (e *trapError) Error() string   { return e.msg }
func (e *trapError) Unwrap() []error { return []error{ErrVMFailed, e.cause} }
func (vm *VM) stderrSuffix() string {
	if len(vm.stderr) == 0 {
		return ""
	}
	return "; guest stderr: " + strconv.Quote(strings.TrimSpace(string(vm.stderr)))
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// withContext runs f with the effective context set to (r, s) and restores
// the previous one afterwards (proxy_set_effective_context lasts one callback).
func (vm *VM) withContext(r *Root, s *Stream, f func() error) error {
	pr, ps := vm.curRoot, vm.curStream
	vm.curRoot, vm.curStream = r, s
	err := f()
	vm.curRoot, vm.curStream = pr, ps
	return err
}

// after runs posted work (queue notifications, zero-latency call responses)
// once the caller's VM lock is released, like Envoy's event loop.
func (vm *VM) after() {
	if err := vm.host.runDue(); err != nil {
		vm.host.log(LogEntry{VMID: vm.id, Level: LogCritical, Message: "hostsim: posted event: " + err.Error()})
	}
}

// Configure creates a root context for rootID and runs proxy_on_configure
// with pluginConfig, as Envoy does for a new or changed plugin
// configuration in a running VM (cpp-host src/wasm.cc). If a root already serves
// rootID and the new one accepts its configuration, the old root stops
// ticking, gets proxy_on_done and, once its streams finish (and, if on_done
// returned false, after it calls proxy_done), proxy_on_delete. If
// proxy_on_configure returns false the new root is deleted, the old one
// keeps serving, and the error says so.
func (vm *VM) Configure(rootID string, pluginConfig []byte) (*Root, error) {
	if err := vm.host.canary(vm, rootID, pluginConfig); err != nil {
		return nil, err
	}
	vm.mu.Lock()
	r, err := vm.configureLocked(rootID, pluginConfig)
	vm.unlock()
	vm.after()
	return r, err
}

func (vm *VM) configureLocked(rootID string, pluginConfig []byte) (*Root, error) {
	if err := vm.usable(); err != nil {
		return nil, err
	}
	vm.nextID++
	r := &Root{vm: vm, id: vm.nextID, name: rootID, props: map[string][]byte{}}
	vm.roots[r.id] = r
	var ok bool
	err := vm.withContext(r, nil, func() error {
		if _, err := vm.invoke(fnOnContextCreate, 0, 2, uint64(r.id), 0, 0, 0, 0); err != nil {
			return err
		}
		var err error
		ok, err = vm.configureCall(r, pluginConfig)
		return err
	})
	if err != nil {
		return nil, err
	}
	if !ok {
		r.retired = true
		r.tickGen++
		if err := vm.deleteRootLocked(r); err != nil {
			return nil, err
		}
		return nil, errors.New("hostsim: configure root " + strconv.Quote(rootID) + " of vm " + strconv.Quote(vm.id) +
			": proxy_on_configure returned false; the previous configuration keeps serving")
	}
	if old := vm.active[rootID]; old != nil {
		if err := vm.retireRootLocked(old); err != nil {
			return nil, err
		}
	}
	vm.active[rootID] = r
	return r, nil
}

// retireRootLocked stops a root's tick and calls proxy_on_done; it is deleted
// when drained.
func (vm *VM) retireRootLocked(r *Root) error {
	if r.retired {
		return nil
	}
	r.retired = true
	r.tickGen++
	if vm.active[r.name] == r {
		delete(vm.active, r.name)
	}
	var done bool
	err := vm.withContext(r, nil, func() error {
		var err error
		done, err = vm.callBool(fnOnDone, true, uint64(r.id), 0)
		return err
	})
	if err != nil {
		return err
	}
	r.doneOK = done
	return vm.maybeDeleteRootLocked(r)
}

func (vm *VM) maybeDeleteRootLocked(r *Root) error {
	if r.retired && r.doneOK && r.streams == 0 && !r.deleted {
		return vm.deleteRootLocked(r)
	}
	return nil
}

func (vm *VM) deleteRootLocked(r *Root) error {
	r.deleted = true
	delete(vm.roots, r.id)
	return vm.withContext(r, nil, func() error {
		_, err := vm.invoke(fnOnDelete, 0, 1, uint64(r.id), 0, 0, 0, 0)
		return err
	})
}

// Close retires every root (proxy_on_done, proxy_on_delete), abandons open
// streams and closes the instance. When the last VM of a vm_id closes, that
// vm_id's shared data and queues are erased, as in cpp-host
// (registerVmIdHandleCallback → deleteByVmId).
func (vm *VM) Close() error {
	vm.mu.Lock()
	defer vm.unlock()
	if vm.closed {
		return nil
	}
	var first error
	if vm.failed == nil {
		for _, r := range vm.roots {
			r.doneOK = true
			if err := vm.retireRootLocked(r); err != nil && first == nil {
				first = err
			}
			if !r.deleted && vm.failed == nil {
				if err := vm.deleteRootLocked(r); err != nil && first == nil {
					first = err
				}
			}
		}
	}
	vm.closeLocked()
	return first
}

func (vm *VM) closeLocked() {
	if vm.closed {
		return
	}
	vm.closed = true
	_ = vm.inst.Close(context.Background())
	h := vm.host
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.vms[vm]; !ok {
		return
	}
	delete(h.vms, vm)
	h.vmCount[vm.id]--
	if h.vmCount[vm.id] == 0 {
		delete(h.vmCount, vm.id)
		delete(h.shared, vm.id)
		h.forgetCanariesLocked(vm.id)
		for k, q := range h.qByName {
			if k.vmID == vm.id {
				delete(h.qByName, k)
				h.queues[q.id-1] = nil
			}
		}
	}
}

// Root is a root (plugin) context: it owns a configuration, a tick and the
// streams created under it.
type Root struct {
	vm      *VM
	id      uint32
	name    string
	props   map[string][]byte
	streams int
	retired bool
	doneOK  bool
	deleted bool
	tickGen uint64
	period  time.Duration
}

// ID returns the context id.
func (r *Root) ID() uint32 { return r.id }

// Name returns the root id (Envoy's plugin root_id).
func (r *Root) Name() string { return r.name }

// VM returns the VM the root lives in.
func (r *Root) VM() *VM { return r.vm }

// TickPeriod returns the period the guest set (0: no tick).
func (r *Root) TickPeriod() time.Duration {
	r.vm.mu.Lock()
	defer r.vm.mu.Unlock()
	return r.period
}

// Deleted reports whether the root got proxy_on_delete.
func (r *Root) Deleted() bool {
	r.vm.mu.Lock()
	defer r.vm.mu.Unlock()
	return r.deleted
}

// setTickLocked (re)arms the root's tick on the host clock.
func (r *Root) setTickLocked(period time.Duration) {
	r.tickGen++
	r.period = period
	if period <= 0 || r.retired {
		return
	}
	gen := r.tickGen
	h := r.vm.host
	h.mu.Lock()
	h.scheduleLocked(h.now+period, func() error { return r.fireTick(gen) })
	h.mu.Unlock()
}

// Tick runs proxy_on_tick on r now, outside the virtual-clock schedule
// (like proxytest's Tick); the scheduled ticks are unaffected.
func (r *Root) Tick() error {
	vm := r.vm
	vm.mu.Lock()
	err := vm.usable()
	if err == nil && r.deleted {
		err = errors.New("hostsim: tick: root " + strconv.Quote(r.name) + " was deleted")
	}
	if err == nil {
		err = vm.withContext(r, nil, func() error {
			_, err := vm.invoke(fnOnTick, 0, 1, uint64(r.id), 0, 0, 0, 0)
			return err
		})
	}
	vm.unlock()
	vm.after()
	return err
}

func (r *Root) fireTick(gen uint64) error {
	vm := r.vm
	vm.mu.Lock()
	defer vm.unlock()
	if r.tickGen != gen || r.retired || vm.usable() != nil {
		return nil
	}
	err := vm.withContext(r, nil, func() error {
		_, err := vm.invoke(fnOnTick, 0, 1, uint64(r.id), 0, 0, 0, 0)
		return err
	})
	if err != nil {
		return err
	}
	if r.tickGen == gen && r.period > 0 {
		h := vm.host
		h.mu.Lock()
		h.scheduleLocked(h.now+r.period, func() error { return r.fireTick(gen) })
		h.mu.Unlock()
	}
	return nil
}
