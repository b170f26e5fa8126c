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
	statModelNotFound   = "gpuroute_local_replies_404_total"
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

// stat is one of a root's Envoy stats: its index in stats.ids and
// stats.pending.
type stat uint8

// stats holds the Envoy stats of one root. An event's count reaches Envoy
// at once (add); the counts every routed request makes (decisions and
// their reason, prompt and prefix-hit tokens, memo replays, the in-flight
// gauge) at the root's next tick and when the plugin stops (tally): a host
// call per count would be most of a routed request's host calls, and Envoy
// hands its workers' stats to the sinks only every stats_flush_interval
// (5 s by default) anyway (TestStatsTallyAtTick).
type stats struct {
	decisions, promptTokens, prefixHitTokens stat
	adapterHost, adapterStorage              stat
	scrapes, scrapeFailures, drainResets     stat
	unavailable, overloaded, bodyUnparsed    stat
	modelNotFound                            stat
	memoReplays                              stat
	leaseChanges, sweptFlights               stat
	passiveEjections                         stat
	inFlight, closedReplicas                 stat
	peerImported, peerFailures               stat
	peerServed, peerRefused                  stat
	byReason                                 [numReasons]stat

	ids     []uint32 // the host's metric id of each stat, noMetric if refused
	pending []int64  // each stat's tally since the last flush
	direct  bool     // the root's ticks stopped: tallies go to the host at once
}

// define defines the root's stats with the host, passing on first what was
// tallied under an earlier definition.
func (s *stats) define(log *logPrefix) {
	s.flush()
	s.ids, s.pending = s.ids[:0], s.pending[:0]
	def := func(t proxy.MetricType, name string) stat {
		id, err := proxy.DefineMetric(t, name)
		if err != nil {
			log.warn("cannot define stat " + name + ": " + err.Error())
			id = noMetric
		}
		s.ids = append(s.ids, id)
		s.pending = append(s.pending, 0)
		return stat(len(s.ids) - 1)
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
	s.modelNotFound = def(c, statModelNotFound)
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

// add passes delta on k to the host now (a stat of a root never
// configured: nothing).
func (s *stats) add(k stat, delta int64) {
	if int(k) < len(s.ids) {
		s.pass(k, delta)
	}
}

// tally adds delta to k at the next flush.
func (s *stats) tally(k stat, delta int64) {
	if int(k) >= len(s.pending) {
		return
	}
	if s.direct {
		s.pass(k, delta)
		return
	}
	s.pending[k] += delta
}

// flush passes the tallied counts to the host.
func (s *stats) flush() {
	for k, d := range s.pending {
		if d != 0 {
			s.pending[k] = 0
			s.pass(stat(k), d)
		}
	}
}

// stop flushes, and has every later tally passed at once: the streams of
// a root whose plugin stopped still end (and leave the in-flight gauge)
// after its last tick.
func (s *stats) stop() {
	s.flush()
	s.direct = true
}

func (s *stats) pass(k stat, delta int64) {
	if id := s.ids[k]; id != noMetric {
		_ = proxy.IncrementMetric(id, delta)
	}
}

// set records a gauge's value at once (a rare event's, not a count).
func (s *stats) set(k stat, v uint64) {
	if int(k) < len(s.ids) && s.ids[k] != noMetric {
		_ = proxy.RecordMetric(s.ids[k], v)
	}
}

// decided counts one routed request.
func (s *stats) decided(d *scoring.Decision, req *scoring.Request, hw *scoring.Hardware, toleranceSec float64) {
	s.tally(s.decisions, 1)
	if int(d.Reason) < len(s.byReason) {
		s.tally(s.byReason[d.Reason], 1)
	}
	c := &d.Top[0]
	s.tally(s.promptTokens, int64(req.PromptTokens))
	s.tally(s.prefixHitTokens, int64(c.CachedTokens))
	if load := c.AdapterSec - toleranceSec; load > 0 {
		if load >= hw.AdapterLoadStorageSec {
			s.add(s.adapterStorage, 1)
		} else {
			s.add(s.adapterHost, 1)
		}
	}
}
