package router

import (
	"strconv"

	"github.com/gpuroute/gpuroute/plugin/config"
	"github.com/gpuroute/gpuroute/plugin/proxy"
)

// Flow control's Envoy stats, per band: gpuroute_flow_<band>_<what>, the
// band's name as statName writes it.
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

// value reads k over every worker VM (Envoy's stats are the process's).
func (s *flowStats) value(k flowStat) int64 {
	if uint32(k) == noMetric {
		return 0
	}
	v, err := proxy.GetMetric(uint32(k))
	if err != nil {
		return 0
	}
	return int64(v)
}

// appendStatus appends the status endpoint's flow control fields: "held",
// the requests every worker holds now, and per band its counts, none when
// flow control is off (TestFlowStatus).
func (f *flowControl) appendStatus(b []byte) []byte {
	if f.queue == nil {
		return append(b, `,"held":0`...)
	}
	s, cfg := &f.stats, f.cfg
	var held int64
	for i := range s.bands {
		held += max(s.value(s.bands[i].holding), 0)
	}
	b = append(b, `,"held":`...)
	b = strconv.AppendInt(b, held, 10)
	b = append(b, `,"flow":[`...)
	for i := range s.bands {
		if i > 0 {
			b = append(b, ',')
		}
		k := &s.bands[i]
		b = append(b, `{"band":`...)
		b = strconv.AppendQuote(b, cfg.Bands[i].Name)
		for _, f := range [...]struct {
			name string
			stat flowStat
		}{{"holding", k.holding}, {"held", k.held}, {"admitted", k.admitted}, {"shed", k.shed},
			{"timed_out", k.timedOut}, {"queue_full", k.full}, {"cancelled", k.cancelled}} {
			b = append(b, `,"`...)
			b = append(b, f.name...)
			b = append(b, `":`...)
			b = strconv.AppendInt(b, max(s.value(f.stat), 0), 10)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

func (s *flowStats) count(k flowStat, delta int64) {
	if uint32(k) != noMetric {
		_ = proxy.IncrementMetric(uint32(k), delta)
	}
}
