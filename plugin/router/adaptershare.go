package router

import (
	"github.com/gpuroute/gpuroute/plugin/config"
	"github.com/gpuroute/gpuroute/plugin/proxy"
	"github.com/gpuroute/gpuroute/plugin/shared"
	"github.com/gpuroute/gpuroute/scoring"
)

// adapterShare shares LoRA placements between the worker VMs of one Envoy:
// each publishes where it sent which adapter (a shared.AdapterRecord under
// its own key) and merges the others' into its ledger, so every worker
// prices adapter loads and host-cache evictions by all the placements of
// this Envoy (TestWorkersShareAdapterPlacements). It owns the records it
// writes and reads; the ledger (and through it Pick) reads the merged
// placements. Once a tick: placements last minutes.
type adapterShare struct {
	ledger   *scoring.Ledger
	members  *membership
	on       bool // the configuration names adapters
	replicas int  // the configured replicas: the ledger's retirees follow

	mine, theirs shared.AdapterRecord
	key          []byte
	buf          []byte
}

func (a *adapterShare) setup(cfg *config.Config, configID uint64, ledger *scoring.Ledger, m *membership) {
	a.ledger, a.members, a.on, a.replicas = ledger, m, len(cfg.Adapters) > 0, len(cfg.Replicas)
	a.mine.ConfigID = configID
}

// exchange publishes this worker's placements and merges the others'.
func (a *adapterShare) exchange(now int64) {
	me := a.members.worker
	if me == 0 || !a.on {
		return
	}
	a.mine.Worker = me
	// A retiree's index names another replica, or none, in the others'
	// numbering: only the configured replicas' placements are shared.
	a.mine.Placements = a.ledger.AppendAdapterPlacements(a.mine.Placements[:0], now)
	kept := a.mine.Placements[:0]
	for _, pl := range a.mine.Placements {
		if pl.Replica < a.replicas {
			kept = append(kept, pl)
		}
	}
	a.mine.Placements = kept
	if buf, err := a.mine.AppendBinary(a.buf[:0]); err == nil {
		a.buf = buf
		a.key = shared.AppendAdapterKey(a.key[:0], me)
		_ = proxy.SetSharedData(string(a.key), buf, 0) // our own key
	}
	for _, w := range a.members.registry.Workers {
		if w == me {
			continue
		}
		a.key = shared.AppendAdapterKey(a.key[:0], w)
		v, _, err := proxy.GetSharedData(string(a.key))
		if err != nil || a.theirs.Decode(v) != nil || a.theirs.ConfigID != a.mine.ConfigID {
			continue
		}
		for _, pl := range a.theirs.Placements {
			a.ledger.MergeAdapterPlacement(pl)
		}
	}
}
