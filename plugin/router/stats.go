package router

import (
	"strconv"
	"strings"

	"github.com/gpuroute/gpuroute/plugin/proxy"
	"github.com/gpuroute/gpuroute/plugin/version"
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
	statInfo            = "gpuroute_info"
	statPeerImported    = "gpuroute_peer_placements_imported_total"
	statPeerFailures    = "gpuroute_peer_failures_total"
	statPeerServed      = "gpuroute_peer_requests_served_total"
	statPeerRefused     = "gpuroute_peer_requests_refused_total"
	// The feedback (feedback.go): the cached tokens the prefix index
	// predicted and the engines reported for the same responses, and the
	// corrections, short (an eviction shown) and long (a surplus).
	statCachePredicted   = "gpuroute_cache_predicted_tokens_total"
	statCacheReported    = "gpuroute_cache_reported_tokens_total"
	statCorrectionsShort = "gpuroute_cache_corrections_short_total"
	statCorrectionsLong  = "gpuroute_cache_corrections_long_total"
)

// Per-replica stats: statReplicaPrefix, the replica's name (statName), then
// one of the suffixes. The dots make the name a tag Envoy's stats_tags can
// extract (regex ^wasmcustom\.gpuroute_replica\.((.+?)\.)); without one,
// Prometheus sees gpuroute_replica_<name>_decisions_total.
const (
	statReplicaPrefix          = "gpuroute_replica."
	statReplicaDecisions       = ".decisions_total"
	statReplicaPromptTokens    = ".prompt_tokens_total"
	statReplicaPrefixHitTokens = ".prefix_hit_tokens_total"
	statReplicaInFlight        = ".in_flight"
	statReplicaEjections       = ".passive_ejections_total"
)

// maxReplicaStats bounds the replicas with stats of their own: Envoy keeps
// every stat a plugin defines for the life of the process, and each costs
// memory in every stats sink. The replicas past it have none (a warning
// says so).
const maxReplicaStats = 256

// numReasons is the number of scoring.Reason values with a stat.
const numReasons = int(scoring.ReasonTieBreak) + 1

// noMetric marks a stat the host refused to define: counting it does
// nothing. (0 is a valid id: Envoy numbers the first counter 0.)
const noMetric = ^uint32(0)

// stat is one of a root's Envoy stats: its index in stats.ids and
// stats.pending. noStat counts nothing.
type stat uint16

const noStat = ^stat(0)

// replicaStats are one replica's stats.
type replicaStats struct {
	decisions, promptTokens, prefixHitTokens, inFlight, ejections stat
}

// stats holds the Envoy stats of one root. An event's count reaches Envoy
// at once (add); the counts every routed request makes (decisions and
// their reason, prompt and prefix-hit tokens, memo replays, the in-flight
// gauges, the replica's own) at the root's next tick and when the plugin
// stops (tally): a host call per count would be most of a routed request's
// host calls, and Envoy hands its workers' stats to the sinks only every
// stats_flush_interval (5 s by default) anyway (TestStatsTallyAtTick).
// Envoy keeps one stat per name for the whole process, so every worker VM
// adds to the same one, and value reads what all of them counted.
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
	cachePredicted, cacheReported            stat
	correctionsShort, correctionsLong        stat
	info                                     stat
	byReason                                 [numReasons]stat
	// reasonKeys name byReason's counts in the status endpoint: the
	// reason as in the stat's name.
	reasonKeys [numReasons]string
	// replicas are the configured replicas' stats, then the retirees'.
	replicas []replicaStats

	ids     []uint32 // the host's metric id of each stat, noMetric if refused
	pending []int64  // each stat's tally since the last flush
	direct  bool     // the root's ticks stopped: tallies go to the host at once
}

// define defines the root's stats with the host, with the stats of the
// replicas named (the first maxReplicaStats), passing on first what was
// tallied under an earlier definition; gpuroute_info is set to the
// release (versionNumber).
func (s *stats) define(log *logPrefix, replicas []string) {
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
	s.cachePredicted = def(c, statCachePredicted)
	s.cacheReported = def(c, statCacheReported)
	s.correctionsShort = def(c, statCorrectionsShort)
	s.correctionsLong = def(c, statCorrectionsLong)
	g := proxy.MetricTypeGauge
	s.inFlight = def(g, statInFlight)
	s.closedReplicas = def(g, statClosedReplicas)
	s.info = def(g, statInfo)
	for i := range s.byReason {
		s.reasonKeys[i] = strings.ReplaceAll(scoring.Reason(i).String(), "-", "_")
		s.byReason[i] = def(c, statDecisionPrefix+s.reasonKeys[i]+"_total")
	}
	s.replicas = s.replicas[:0]
	for k, name := range replicas {
		rs := replicaStats{noStat, noStat, noStat, noStat, noStat}
		if k < maxReplicaStats {
			prefix := statReplicaPrefix + statName(name)
			rs = replicaStats{
				decisions:       def(c, prefix+statReplicaDecisions),
				promptTokens:    def(c, prefix+statReplicaPromptTokens),
				prefixHitTokens: def(c, prefix+statReplicaPrefixHitTokens),
				inFlight:        def(g, prefix+statReplicaInFlight),
				ejections:       def(c, prefix+statReplicaEjections),
			}
		}
		s.replicas = append(s.replicas, rs)
	}
	if len(replicas) > maxReplicaStats {
		log.warn("stats of their own for the first " + strconv.Itoa(maxReplicaStats) + " of " +
			strconv.Itoa(len(replicas)) + " replicas only")
	}
	s.set(s.info, versionNumber(version.Release))
}

// statName is a replica name as one segment of a stat name: letters,
// digits, '-' and '_' are kept, anything else (a '.' would split the
// segment) becomes '_' (TestStatName).
func statName(name string) string {
	b := []byte(name)
	for i, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

// versionNumber encodes a release "MAJOR.MINOR.PATCH[-pre]" as
// MAJOR×1,000,000 + MINOR×1,000 + PATCH, the value of gpuroute_info: Envoy's
// stats carry numbers, not labels, and a number can be compared across a
// fleet's proxies; the whole string is in the start log line and the status
// endpoint. A part that is not a number counts 0 (TestVersionNumber).
func versionNumber(release string) uint64 {
	var parts [3]uint64
	k := 0
	for i := 0; i < len(release) && k < len(parts); i++ {
		switch c := release[i]; {
		case c >= '0' && c <= '9':
			parts[k] = min(parts[k]*10+uint64(c-'0'), 999)
		case c == '.':
			k++
		default:
			k = len(parts) // a pre-release or build suffix ends it
		}
	}
	return parts[0]*1_000_000 + parts[1]*1_000 + parts[2]
}

// value returns a stat's value in Envoy, every worker's, with this root's
// tally not yet passed on (false when the stat is not defined).
func (s *stats) value(k stat) (int64, bool) {
	if int(k) >= len(s.ids) || s.ids[k] == noMetric {
		return 0, false
	}
	v, err := proxy.GetMetric(s.ids[k])
	if err != nil {
		return 0, false
	}
	return int64(v) + s.pending[k], true
}

// replica returns replica i's stats (none past maxReplicaStats).
func (s *stats) replica(i int) *replicaStats {
	if i < 0 || i >= len(s.replicas) {
		return &noReplicaStats
	}
	return &s.replicas[i]
}

// noReplicaStats are the stats of a replica without any; never written.
var noReplicaStats = replicaStats{noStat, noStat, noStat, noStat, noStat}

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

// decided counts one routed request, in the fleet's stats and in its
// replica's.
func (s *stats) decided(d *scoring.Decision, req *scoring.Request, hw *scoring.Hardware, toleranceSec float64) {
	s.tally(s.decisions, 1)
	if int(d.Reason) < len(s.byReason) {
		s.tally(s.byReason[d.Reason], 1)
	}
	c := &d.Top[0]
	s.tally(s.promptTokens, int64(req.PromptTokens))
	s.tally(s.prefixHitTokens, int64(c.CachedTokens))
	rs := s.replica(d.Index)
	s.tally(rs.decisions, 1)
	s.tally(rs.promptTokens, int64(req.PromptTokens))
	s.tally(rs.prefixHitTokens, int64(c.CachedTokens))
	if load := c.AdapterSec - toleranceSec; load > 0 {
		if load >= hw.AdapterLoadStorageSec {
			s.add(s.adapterStorage, 1)
		} else {
			s.add(s.adapterHost, 1)
		}
	}
}
