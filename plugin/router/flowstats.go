package router

import (
	"github.com/gpuroute/gpuroute/plugin/config"
	"github.com/gpuroute/gpuroute/plugin/proxy"
)

// Flow control's Envoy stats, per band: gpuroute_flow_<band>_<what>, the
// band's name with every character outside [a-z0-9_] written as '_'.
const (
	statFlowPrefix      = "gpuroute_flow_"
	statFlowHeld        = "_held_total"       // requests held
	statFlowHolding     = "_holding"          // gauge: held now
	statFlowAdmitted    = "_admitted_total"   // sent after being held
	statFlowShed        = "_shed_total"       // sheddable requests answered 429 instead of held
	statFlowTimedOut    = "_timed_out_total"  // held past max_queue_ms, answered 429
	statFlowQueueFull   = "_queue_full_total" // refused with a 429: the band or the worker's queue was full
	statFlowCancelled   = "_cancelled_total"  // the client left while held
	statFlowRefusedBand = "gpuroute_flow_priority_refused_total"
)

// flowStat is a flow control stat's metric id (noMetric: not defined).
type flowStat uint32

type bandStats struct {
	held, holding, admitted, shed, timedOut, full, cancelled flowStat
}

// flowStats holds flow control's stats. Unlike the routed requests'
// counts, these reach Envoy at once: they count rare events and the
// gauge an operator watches while requests wait.
type flowStats struct {
	bands       []bandStats
	refusedBand flowStat
}

func (s *flowStats) define(cfg *config.FlowControl, log *logPrefix) {
	def := func(t proxy.MetricType, name string) flowStat {
		id, err := proxy.DefineMetric(t, name)
		if err != nil {
			log.warn("cannot define stat " + name + ": " + err.Error())
			return flowStat(noMetric)
		}
		return flowStat(id)
	}
	c, g := proxy.MetricTypeCounter, proxy.MetricTypeGauge
	for i := range cfg.Bands {
		p := statFlowPrefix + statName(cfg.Bands[i].Name)
		s.bands[i] = bandStats{
			held: def(c, p+statFlowHeld), holding: def(g, p+statFlowHolding), admitted: def(c, p+statFlowAdmitted),
			shed: def(c, p+statFlowShed), timedOut: def(c, p+statFlowTimedOut), full: def(c, p+statFlowQueueFull),
			cancelled: def(c, p+statFlowCancelled),
		}
	}
	s.refusedBand = def(c, statFlowRefusedBand)
}

func (s *flowStats) count(k flowStat, delta int64) {
	if uint32(k) != noMetric {
		_ = proxy.IncrementMetric(uint32(k), delta)
	}
}
