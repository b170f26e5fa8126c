package faults

import (
	"context"
	"slices"
	"sync/atomic"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
)

// memProbe reads a VM's linear memory size as each stream ends. hostsim
// does not expose a VM's memory, so the probe listens to the export
// proxy_on_log through wazero's function listener, which is bound at
// compile time: compile the module with probe.context(ctx), from bytes no
// other compile shares (listeners become part of the compiled module, and
// wazero's compilation cache is keyed by the module bytes alone).
type memProbe struct {
	last atomic.Uint32 // pages (64 KiB) at the latest proxy_on_log
}

const probedExport = "proxy_on_log"

func (p *memProbe) context(ctx context.Context) context.Context {
	return experimental.WithFunctionListenerFactory(ctx, p)
}

// pages returns the memory size, in 64 KiB pages, at the latest probed call.
func (p *memProbe) pages() uint32 { return p.last.Load() }

// NewFunctionListener implements experimental.FunctionListenerFactory.
func (p *memProbe) NewFunctionListener(def api.FunctionDefinition) experimental.FunctionListener {
	if slices.Contains(def.ExportNames(), probedExport) {
		return p
	}
	return nil
}

// Before implements experimental.FunctionListener.
func (p *memProbe) Before(context.Context, api.Module, api.FunctionDefinition, []uint64, experimental.StackIterator) {
}

// After records the memory size once the call returned.
func (p *memProbe) After(_ context.Context, mod api.Module, _ api.FunctionDefinition, _ []uint64) {
	if m := mod.Memory(); m != nil {
		p.last.Store(m.Size() / 65536)
	}
}

// Abort implements experimental.FunctionListener.
func (p *memProbe) Abort(context.Context, api.Module, api.FunctionDefinition, error) {}
