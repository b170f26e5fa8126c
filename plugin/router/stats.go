package router

import (
	"strings"

	"github.com/gpuroute/gpuroute/plugin/proxy"
	"github.com/gpuroute/gpuroute/scoring"
)

// Envoy stats (proxy_define_metric). Envoy shows them as wasmcustom.<name>
// in /stats and /stats/prometheus. Counters and gauges are process-wide, so
// every worker VM adds to the same stat.
const (
	statDecisions       = "gpuroute_decisions_total"
	statDecisionPrefix  = "gpuroute_decisions_" // + reason + "_total"
	statPromptTokens    = "gpuroute_prompt_tokens_total"
	statPrefixHitTokens = "gpuroute_prefix_hit_tokens_total"
	statAdapterHost     = "gpuroute_adapter_loads_host_total"
	statAdapterStorage  = "gpuroute_adapter_loads_storage_total"
	statScrapes         = "gpuroute_scrapes_total"
	statScrapeFailures  = "gpuroute_scrape_failures_total"
	statDrainResets     = "gpuroute_drain_resets_total"
	statUnavailable     = "gpuroute_local_replies_503_total"
	statOverloaded      = "gpuroute_local_replies_429_total"
	statBodyUnparsed    = "gpuroute_body_unparsed_total"
	statMemoReplays     = "gpuroute_prompt_memo_replays_total"
	statLeaseChanges    = "gpuroute_lease_changes_total"
	statSweptFlights    = "gpuroute_swept_flights_total"
	statPassiveEjects   = "gpuroute_passive_ejections_total"
	statInFlight        = "gpuroute_in_flight"
	statClosedReplicas  = "gpuroute_closed_replicas"
	statPeerImported    = "gpuroute_peer_placements_imported_total"
	statPeerFailures    = "gpuroute_peer_failures_total"
	statPeerServed      = "gpuroute_peer_requests_served_total"
	statPeerRefused     = "gpuroute_peer_requests_refused_total"
)

// numReasons is the number of scoring.Reason values with a stat.
const numReasons = int(scoring.ReasonTieBreak) + 1

// noMetric marks a stat the host refused to define: counting it does
// nothing. (0 is a valid id: Envoy numbers the first counter 0.)
const noMetric = ^uint32(0)

// stats holds the metric ids of one root.
type stats struct {
	decisions, promptTokens, prefixHitTokens uint32
	adapterHost, adapterStorage              uint32
	scrapes, scrapeFailures, drainResets     uint32
	unavailable, overloaded, bodyUnparsed    uint32
	memoReplays                              uint32
	leaseChanges, sweptFlights               uint32
	passiveEjections                         uint32
	inFlight, closedReplicas                 uint32
	peerImported, peerFailures               uint32
	peerServed, peerRefused                  uint32
	byReason                                 [numReasons]uint32
}

func (s *stats) define(log *logPrefix) {
	def := func(t proxy.MetricType, name string) uint32 {
		id, err := proxy.DefineMetric(t, name)
		if err != nil {
			log.warn("cannot define stat " + name + ": " + err.Error())
			return noMetric
		}
		return id
	}
	c := proxy.MetricTypeCounter
	s.decisions = def(c, statDecisions)
	s.promptTokens = def(c, statPromptTokens)
	s.prefixHitTokens = def(c, statPrefixHitTokens)
	s.adapterHost = def(c, statAdapterHost)
	s.adapterStorage = def(c, statAdapterStorage)
	s.scrapes = def(c, statScrapes)
	s.scrapeFailures = def(c, statScrapeFailures)
	s.drainResets = def(c, statDrainResets)
	s.unavailable = def(c, statUnavailable)
	s.overloaded = def(c, statOverloaded)
	s.bodyUnparsed = def(c, statBodyUnparsed)
	s.memoReplays = def(c, statMemoReplays)
	s.leaseChanges = def(c, statLeaseChanges)
	s.sweptFlights = def(c, statSweptFlights)
	s.passiveEjections = def(c, statPassiveEjects)
	s.peerImported = def(c, statPeerImported)
	s.peerFailures = def(c, statPeerFailures)
	s.peerServed = def(c, statPeerServed)
	s.peerRefused = def(c, statPeerRefused)
	s.inFlight = def(proxy.MetricTypeGauge, statInFlight)
	s.closedReplicas = def(proxy.MetricTypeGauge, statClosedReplicas)
	for i := range s.byReason {
		s.byReason[i] = def(c, reasonStat(scoring.Reason(i)))
	}
}

// reasonStat names the counter of decisions made for reason.
func reasonStat(reason scoring.Reason) string {
	return statDecisionPrefix + strings.ReplaceAll(reason.String(), "-", "_") + "_total"
}

func (s *stats) add(id uint32, delta int64) {
	if id != noMetric {
		_ = proxy.IncrementMetric(id, delta)
	}
}

func (s *stats) set(id uint32, v uint64) {
	if id != noMetric {
		_ = proxy.RecordMetric(id, v)
	}
}

// decided counts one routed request.
func (s *stats) decided(d *scoring.Decision, req *scoring.Request, hw *scoring.Hardware, toleranceSec float64) {
	s.add(s.decisions, 1)
	if int(d.Reason) < len(s.byReason) {
		s.add(s.byReason[d.Reason], 1)
	}
	c := &d.Top[0]
	s.add(s.promptTokens, int64(req.PromptTokens))
	s.add(s.prefixHitTokens, int64(c.CachedTokens))
	if load := c.AdapterSec - toleranceSec; load > 0 {
		if load >= hw.AdapterLoadStorageSec {
			s.add(s.adapterStorage, 1)
		} else {
			s.add(s.adapterHost, 1)
		}
	}
}
