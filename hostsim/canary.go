package hostsim

import (
	"context"
	"crypto/sha256"
	"errors"
	"strconv"
)

// The configuration canary (proxy-wasm-cpp-host src/wasm.cc, createWasm and
// WasmHandleBase::canary): before any worker gets a plugin configuration it
// has not seen, cpp-host clones the base VM, runs _initialize,
// proxy_on_context_create and proxy_on_vm_start of a root, and
// proxy_on_configure, then kills the clone without proxy_on_done or
// proxy_on_delete. A configuration the canary refuses (or traps on) is
// refused before any worker sees it; the verdict is cached per
// configuration for as long as the base VM lives. What the canary did to
// process-wide state stays: its shared data writes and queue items, its
// stats, the http_calls it made (their answers find no VM). Its ticks never
// fire. TestCanary* (canary_test.go) hold these rules.

// canaryKey identifies a configuration to the canary cache: the base VM
// (cpp-host makeVmKey: vm_id, VM configuration, code) and the plugin (root
// id and configuration).
type canaryKey struct {
	code                           [sha256.Size]byte
	vmID, vmConfig, rootID, config string
}

// canary runs the configuration canary for vm's base VM unless it judged
// this configuration before; it returns why the configuration is refused.
func (h *Host) canary(vm *VM, rootID string, cfg []byte) error {
	if h.opts.NoCanary {
		return nil
	}
	key := canaryKey{code: vm.mod.sum, vmID: vm.id, vmConfig: string(vm.vmConfig), rootID: rootID, config: string(cfg)}
	h.mu.Lock()
	err, seen := h.canaryVerdicts[key]
	h.mu.Unlock()
	if seen {
		return err
	}
	err = h.runCanary(vm.mod, vm.id, vm.vmConfig, rootID, cfg)
	if err != nil {
		err = errors.New("hostsim: configure root " + strconv.Quote(rootID) + " of vm " + strconv.Quote(vm.id) +
			": the canary VM refused it (" + err.Error() + "); the previous configuration keeps serving")
	}
	h.mu.Lock()
	h.canaryVerdicts[key] = err
	h.canaries++
	h.mu.Unlock()
	return err
}

// runCanary starts a throwaway VM of mod and configures one root in it.
func (h *Host) runCanary(mod *Module, vmID string, vmConfig []byte, rootID string, cfg []byte) error {
	c, err := h.newInstance(context.Background(), mod, vmID, vmConfig)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.unlock()
	defer c.closeLocked()
	c.nextID++
	r := &Root{vm: c, id: c.nextID, name: rootID, props: map[string][]byte{}}
	c.roots[r.id] = r
	var ok bool
	err = c.withContext(r, nil, func() error {
		if _, err := c.invoke(fnOnContextCreate, 0, 2, uint64(r.id), 0, 0, 0, 0); err != nil {
			return err
		}
		started, err := c.callBool(fnOnVMStart, true, uint64(r.id), uint64(len(c.vmConfig)))
		if err != nil {
			return err
		}
		if !started {
			return errors.New("proxy_on_vm_start returned false")
		}
		ok, err = c.configureCall(r, cfg)
		return err
	})
	switch {
	case err != nil:
		return err
	case !ok:
		return errors.New("proxy_on_configure returned false")
	}
	return nil
}

// configureCall runs proxy_on_configure of r with cfg as the plugin
// configuration buffer. Callers hold vm.mu and have r as the context.
func (vm *VM) configureCall(r *Root, cfg []byte) (bool, error) {
	vm.pluginConfig, vm.havePlugin = cfg, true
	ok, err := vm.callBool(fnOnConfigure, true, uint64(r.id), uint64(len(cfg)))
	vm.pluginConfig, vm.havePlugin = nil, false
	return ok, err
}

// Canaries returns how many configuration canaries the Host ran.
func (h *Host) Canaries() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.canaries
}

// forgetCanaries drops the verdicts of a base VM whose last VM closed, as
// the cache dies with cpp-host's base VM. Callers hold h.mu.
func (h *Host) forgetCanariesLocked(vmID string) {
	for k := range h.canaryVerdicts {
		if k.vmID == vmID {
			delete(h.canaryVerdicts, k)
		}
	}
}

// V8Restrictions selects the allow-lists of host calls that Envoy's V8
// engine enforces while the module runs _initialize and
// proxy_on_memory_allocate (cpp-host src/wasm.cc startVm,
// include/proxy-wasm/wasm.h allocMemory; src/v8/v8.cc traps any other host
// call made then). WAMR and WasmEdge enforce none.
type V8Restrictions int

const (
	// NoRestrictions lets every host call through (WAMR, WasmEdge, and
	// hostsim's default).
	NoRestrictions V8Restrictions = iota
	// V8Before533 is V8 in cpp-host releases from PR #427 to PR #533
	// (Envoy 1.33 on): neither list has poll_oneoff or sched_yield, and the
	// allocator's has only proxy_log, fd_write and clock_time_get.
	V8Before533
	// V8After533 is V8 from cpp-host PR #533 on, which adds poll_oneoff and
	// sched_yield to both lists (the PR's review: the Go runtime may sleep
	// or yield inside either).
	V8After533
)

// The allow-lists, as "module.name".
var (
	v8InitializeBefore533 = []string{
		EnvModuleName + ".proxy_log",
		WASIModuleName + ".fd_write",
		WASIModuleName + ".args_sizes_get", WASIModuleName + ".args_get",
		WASIModuleName + ".environ_sizes_get", WASIModuleName + ".environ_get",
		WASIModuleName + ".fd_prestat_get", WASIModuleName + ".fd_prestat_dir_name",
		WASIModuleName + ".clock_time_get",
		WASIModuleName + ".random_get",
		// PR #427, for the Go runtime's initialization (package syscall
		// sets stdio non-blocking).
		WASIModuleName + ".fd_fdstat_get", WASIModuleName + ".fd_fdstat_set_flags",
	}
	v8AllocateBefore533 = []string{
		EnvModuleName + ".proxy_log",
		WASIModuleName + ".fd_write",
		WASIModuleName + ".clock_time_get",
	}
	v8Added533        = []string{WASIModuleName + ".poll_oneoff", WASIModuleName + ".sched_yield"}
	v8InitializeAfter = append(append([]string(nil), v8InitializeBefore533...), v8Added533...)
	v8AllocateAfter   = append(append([]string(nil), v8AllocateBefore533...), v8Added533...)
)

// allowed returns the allow-lists in force during _initialize and during
// proxy_on_memory_allocate; nil lets every host call through.
func (r V8Restrictions) allowed() (initialize, allocate []string) {
	switch r {
	case V8Before533:
		return v8InitializeBefore533, v8AllocateBefore533
	case V8After533:
		return v8InitializeAfter, v8AllocateAfter
	}
	return nil, nil
}

// restrictedCall is the panic value (a trap) of a host call V8's allow-list
// forbids.
type restrictedCall string

func (c restrictedCall) Error() string {
	return "restricted_callback: " + string(c) + " is not allowed here under V8"
}
