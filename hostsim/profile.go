package hostsim

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
)

// GuestProbe counts the calls of chosen guest functions and times them: a
// poor man's profiler for wasm, which has none, and the way benchmarks count
// the guest runtime's heap allocations (runtime.mallocgc) and GC cycles
// (runtime.gcStart) without importing wazero themselves (hostsim is the
// only package that does). Install it with Options.Probe.
//
// It rides on wazero's experimental function listeners, which wrap every
// call of an instrumented function: each probed call also pays for the
// listener (of the order of a microsecond), which the times include, so a
// probed module's timings are not the uninstrumented cost. A GuestProbe is safe for concurrent use; one probe
// may serve several Hosts.
type GuestProbe struct {
	match []string

	mu    sync.Mutex
	funcs map[string]*probeFunc
	// callersOf, when non-empty, is the function whose callers are
	// recorded, callerDepth frames deep (RecordCallers).
	callersOf   string
	callerDepth int
	callers     map[string]uint64
}

// GuestFuncStats is what a GuestProbe measured of one guest function since
// it was created or last reset.
type GuestFuncStats struct {
	// Name is the function's name in the module's name section, such as
	// "runtime.mallocgc" or "github.com_gpuroute_gpuroute_scoring.Pick".
	Name string
	// Calls counts every call, nested ones included.
	Calls uint64
	// OuterCalls counts the calls made while no other call of the same
	// function was running on the same VM: the calls Time covers.
	OuterCalls uint64
	// Time is the inclusive wall time of the outer calls (a recursive
	// call's time is inside its outer call's, so it is not counted twice).
	Time time.Duration
	// Max is the longest outer call: a function whose mean is small and
	// Max large is where a latency tail comes from.
	Max time.Duration
}

// probeFunc is one instrumented function's counters and, per VM, the
// call in progress.
type probeFunc struct {
	GuestFuncStats
	open []probeOpen
}

// probeOpen is the nesting depth of a function on one module instance
// and when its outer call began. Several VMs of a Host may run the same
// function at once; each has its own depth.
type probeOpen struct {
	mod   api.Module
	depth int
	since time.Time
}

// NewGuestProbe returns a probe of the guest functions whose names
// contain any of match (empty strings match nothing). Names are those of
// the module's name section: Go's wasm linker writes the package path with
// '/' as '_' (as seen in build/gpuroute.wasm), e.g. "runtime.gcStart",
// "github.com_gpuroute_gpuroute_scoring.Pick"; a substring such as
// "scoring.Pick" is enough.
func NewGuestProbe(match []string) *GuestProbe {
	return &GuestProbe{match: slices.Clone(match), funcs: map[string]*probeFunc{}}
}

// Func returns the stats of the function named exactly name; a function
// that was never called, or is not probed, has zero counts.
func (p *GuestProbe) Func(name string) GuestFuncStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	if f := p.funcs[name]; f != nil {
		return f.GuestFuncStats
	}
	return GuestFuncStats{Name: name}
}

// Stats returns the stats of every probed function called at least once
// since the last Reset, most time first (then by name).
func (p *GuestProbe) Stats() []GuestFuncStats {
	p.mu.Lock()
	out := make([]GuestFuncStats, 0, len(p.funcs))
	for _, f := range p.funcs {
		if f.Calls > 0 {
			out = append(out, f.GuestFuncStats)
		}
	}
	p.mu.Unlock()
	slices.SortFunc(out, func(x, y GuestFuncStats) int {
		if x.Time != y.Time {
			if x.Time > y.Time {
				return -1
			}
			return 1
		}
		return strings.Compare(x.Name, y.Name)
	})
	return out
}

// Reset zeroes every count and time, and the recorded callers. A call in
// progress still adds its time when it returns.
func (p *GuestProbe) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.funcs {
		f.Calls, f.OuterCalls, f.Time, f.Max = 0, 0, 0, 0
	}
	if p.callers != nil {
		clear(p.callers)
	}
}

// RecordCallers starts counting, for each call of the probed function
// named exactly name, its callers up to depth frames (name first, then its
// caller, and so on, joined by " < "); Callers returns the counts. Walking
// the stack makes each such call slower still. An empty name or depth ≤ 0
// stops recording.
func (p *GuestProbe) RecordCallers(name string, depth int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if name == "" || depth <= 0 {
		p.callersOf, p.callerDepth = "", 0
		return
	}
	p.callersOf, p.callerDepth = name, depth
	if p.callers == nil {
		p.callers = map[string]uint64{}
	}
}

// Callers returns a copy of the call paths RecordCallers counted.
func (p *GuestProbe) Callers() map[string]uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]uint64, len(p.callers))
	for k, v := range p.callers {
		out[k] = v
	}
	return out
}

// matches reports whether the probe instruments the function named name.
func (p *GuestProbe) matches(name string) bool {
	for _, m := range p.match {
		if m != "" && strings.Contains(name, m) {
			return true
		}
	}
	return false
}

// withListeners returns ctx carrying p as wazero's listener factory. The
// listeners are bound when the module is compiled, so Host.Compile passes
// this context to CompileModule.
func (p *GuestProbe) withListeners(ctx context.Context) context.Context {
	return experimental.WithFunctionListenerFactory(ctx, p)
}

// NewFunctionListener implements experimental.FunctionListenerFactory:
// wazero asks once per function of each compiled module.
func (p *GuestProbe) NewFunctionListener(def api.FunctionDefinition) experimental.FunctionListener {
	name := def.Name()
	if !p.matches(name) {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.funcs[name]
	if f == nil {
		f = &probeFunc{GuestFuncStats: GuestFuncStats{Name: name}}
		p.funcs[name] = f
	}
	return probeListener{p: p, f: f}
}

// probeListener is the listener of one probed function.
type probeListener struct {
	p *GuestProbe
	f *probeFunc
}

// Before counts the call and, for an outer call, starts its clock.
func (l probeListener) Before(_ context.Context, mod api.Module, _ api.FunctionDefinition, _ []uint64, st experimental.StackIterator) {
	p, f := l.p, l.f
	p.mu.Lock()
	f.Calls++
	o := f.openFor(mod)
	o.depth++
	if o.depth == 1 {
		o.since = time.Now()
	}
	var depth int
	if p.callersOf == f.Name {
		depth = p.callerDepth
	}
	p.mu.Unlock()
	if depth == 0 {
		return
	}
	// Walk the stack outside the lock; the walk only reads this call's frames.
	path := make([]string, 0, depth)
	for len(path) < depth && st.Next() {
		path = append(path, st.Function().Definition().Name())
	}
	key := strings.Join(path, " < ")
	p.mu.Lock()
	if p.callers != nil {
		p.callers[key]++
	}
	p.mu.Unlock()
}

// After stops an outer call's clock and adds its time.
func (l probeListener) After(_ context.Context, mod api.Module, _ api.FunctionDefinition, _ []uint64) {
	l.end(mod)
}

// Abort ends a call that trapped as After ends one that returned.
func (l probeListener) Abort(_ context.Context, mod api.Module, _ api.FunctionDefinition, _ error) {
	l.end(mod)
}

func (l probeListener) end(mod api.Module) {
	now := time.Now()
	p, f := l.p, l.f
	p.mu.Lock()
	defer p.mu.Unlock()
	o := f.openFor(mod)
	if o.depth == 0 {
		return // cannot happen: wazero pairs every Before with After or Abort
	}
	o.depth--
	if o.depth == 0 {
		d := now.Sub(o.since)
		f.OuterCalls++
		f.Time += d
		f.Max = max(f.Max, d)
	}
}

// openFor returns the in-progress record of mod, adding one if needed; a
// VM's instance stays the same for its life, and a Host has few VMs, so a
// linear scan is enough. Callers hold the probe's lock.
func (f *probeFunc) openFor(mod api.Module) *probeOpen {
	for i := range f.open {
		if f.open[i].mod == mod {
			return &f.open[i]
		}
	}
	// Drop records of closed instances so a long-lived probe does not
	// accumulate one per VM ever created.
	f.open = slices.DeleteFunc(f.open, func(o probeOpen) bool { return o.depth == 0 && o.mod != nil && o.mod.IsClosed() })
	f.open = append(f.open, probeOpen{mod: mod})
	return &f.open[len(f.open)-1]
}
