package router

import (
	"strconv"
	"time"

	"github.com/gpuroute/gpuroute/plugin/config"
	"github.com/gpuroute/gpuroute/plugin/proxy"
	"github.com/gpuroute/gpuroute/plugin/shared"
)

// health judges each replica for the decision: whether it is eligible
// (Replica.Healthy) and how old the evidence of its state is
// (Replica.ScrapedNanos, which scoring's staleness reads). It owns the
// passive state, what routed requests' responses said about each replica,
// shared with the other worker VMs (shared.KeySuspects), and the verdicts
// it draws from it and from the snapshot's scrape failures and times. The
// view copies the verdicts into the table; the work exchanges read a
// replica's evidence time when they price its outstanding work; the status
// endpoint shows both.
//
// Active failures: unhealthy_after_failures failed scrapes in a row rule a
// replica out; a single failure only ages its figures. That learns of a
// dead replica only after several scrape periods, while the dead replica,
// its ledger just emptied by the resets, looks idle: with fallbacks 0
// (ORIGINAL_DST) a client's re-send goes back to it. Envoy's own outlier
// detection does not help there: it is per cluster host, and an
// ORIGINAL_DST host chosen by header is created per connection, so it is
// never ejected. Hence the passive signal.
//
// Passive signal. A replica Envoy could not reach shows up in the filter
// as a 502, 503 or 504 response that Envoy generated itself (a local
// reply: "upstream connect error or disconnect/reset before headers", "no
// healthy upstream", an upstream timeout). Envoy's router adds
// x-envoy-upstream-service-time to every response that came from an
// upstream (unless the route sets suppress_envoy_headers) and never to a
// local reply; `server: envoy` is no signal, since Envoy overwrites the
// server header of upstream responses too by default. When the host
// exposes the response.code_details property, it decides instead:
// "via_upstream" is the replica's own answer (a vLLM 503 under load is not
// a dead replica), anything else is Envoy's. Without the timing header and
// the property (suppress_envoy_headers: true) every 5xx counts, which is
// the conservative reading (TestPassiveSignal).
//
// A stream cut after its replica answered 2xx but before the response
// ended is an interruption: the replica may have crashed, or the client
// left. It counts no failure but makes the replica uncertain until newer
// evidence arrives (a good scrape or a 2xx response). A stream that ends
// with no response at all counts nothing: Envoy turns an upstream reset
// before any response byte into a 503 local reply (code details
// upstream_reset_before_response_started), counted above, so a stream with
// no response is the client going away.
//
// The rule. passive_failures consecutive failures eject the replica for
// passive_backoff_ms; after an ejection, the first failure before a success
// ejects it again for twice as long, up to 30 s. A 2xx response clears
// everything. Every VM reads the shared state when a stream starts, so a
// client's re-send through another worker already avoids the replica
// (TestPassiveEjection).
type health struct {
	cfg        *config.Config
	configID   uint64
	staleAfter int64
	// snap is the fleet snapshot (scraping's): each replica's scrape
	// failures and the time of its last good scrape.
	snap  *shared.Snapshot
	stats *stats
	log   logPrefix

	// The passive state: the shared entries as last read (with their CAS;
	// 0 means unknown) and this worker's latest 2xx per replica (local);
	// read is decoding scratch, so that a value of another replica list
	// leaves entries as they are.
	cas      uint32
	entries  []shared.Suspect
	read     []shared.Suspect
	lastGood []int64
	buf      []byte

	// verdicts are what the decision sees; gen counts their changes.
	verdicts []verdict
	gen      uint64
}

// verdict is health's judgement of one replica.
type verdict struct {
	healthy bool
	// evidenceNanos is the time of the latest evidence of the replica's
	// state (0: none, or none trusted); see present.
	evidenceNanos int64
}

// Header and property names of the passive signal.
const (
	headerUpstreamTime = "x-envoy-upstream-service-time"
	detailsViaUpstream = "via_upstream"
)

var (
	propertyCodeDetails     = []string{"response", "code_details"}
	propertyUpstreamAddress = []string{"upstream", "address"}
)

// maxBackoffNanos bounds an ejection.
const maxBackoffNanos = 30 * int64(time.Second)

func (h *health) setup(cfg *config.Config, configID uint64, snap *shared.Snapshot, log logPrefix, st *stats) {
	n := len(cfg.Replicas)
	h.cfg, h.configID, h.staleAfter = cfg, configID, int64(cfg.Params.StaleAfter)
	h.snap, h.log, h.stats = snap, log, st
	h.entries = make([]shared.Suspect, n)
	h.read = make([]shared.Suspect, n)
	h.lastGood = make([]int64, n)
	h.verdicts = make([]verdict, n)
	for i := range h.verdicts {
		h.verdicts[i].healthy = true
	}
}

// passiveOn reports whether passive health checking is configured.
func (h *health) passiveOn() bool { return h.cfg.PassiveFailures > 0 }

// evidence returns replica i's evidence time (verdict.evidenceNanos).
func (h *health) evidence(i int) int64 { return h.verdicts[i].evidenceNanos }

// sync reads the shared passive state when another worker changed it, and
// reports whether it did: the caller then judges every replica again
// (presentAll), so a decision never uses state older than the last failure
// any worker saw. With nothing changed it costs one host call returning a
// few bytes, and no clock read.
func (h *health) sync() (changed bool) {
	if !h.passiveOn() {
		return false
	}
	v, cas, err := proxy.GetSharedData(shared.KeySuspects)
	if err != nil {
		if err == proxy.ErrNotFound && h.cas != 0 {
			h.cas = 0
			clear(h.entries)
			return true
		}
		return false
	}
	if cas == h.cas {
		return false
	}
	h.cas = cas
	h.decode(v)
	return true
}

// decode takes the entries encoded in v, unless v is unreadable or of
// another replica list (a worker on another configuration, during a
// reload): the entries then stay as they were, and the next update writes
// them under this list.
func (h *health) decode(v []byte) {
	if shared.DecodeSuspects(v, h.configID, h.read) {
		copy(h.entries, h.read)
	}
}

// adopt takes over the passive state of the replicas that keep their name
// and address (engine maps from's replicas to h's; reconfig.go).
func (h *health) adopt(from *health, engine []int) {
	for i, j := range engine {
		if j >= 0 {
			h.entries[j], h.lastGood[j] = from.entries[i], from.lastGood[i]
		}
	}
}

// update applies f to replica i's shared entry with a compare-and-swap
// loop; f reports whether it changed anything (no write otherwise). It
// returns f's last answer.
func (h *health) update(i int, now int64, f func(e *shared.Suspect) bool) bool {
	for range 4 {
		v, cas, err := proxy.GetSharedData(shared.KeySuspects)
		switch {
		case err == proxy.ErrNotFound:
			cas = 0
			clear(h.entries)
		case err != nil:
			return false
		default:
			h.decode(v)
		}
		if !f(&h.entries[i]) {
			h.cas = cas
			h.present(i, now)
			return false
		}
		h.buf = shared.AppendSuspects(h.buf[:0], h.configID, h.entries)
		err = proxy.SetSharedData(shared.KeySuspects, h.buf, cas)
		if err == proxy.ErrCASMismatch {
			continue
		}
		// Remember "unknown": the next sync re-reads, which also picks up
		// a worker that wrote in between.
		h.cas = 0
		h.present(i, now)
		return err == nil
	}
	return false
}

// ejected reports whether replica i is ejected at now. An end further
// away than the longest backoff was set before the wall clock stepped
// back: it is over, or the replica would stay out for the size of the step
// (TestWallClockStepBack).
func (h *health) ejected(i int, now int64) bool {
	if i >= len(h.entries) {
		return false
	}
	until := h.entries[i].UntilNanos
	return until > now && until-now <= maxBackoffNanos
}

// backoff is the length of the k-th ejection (k ≥ 1) since the last success.
func (h *health) backoff(k uint8) int64 {
	d := int64(h.cfg.PassiveBackoffMillis) * int64(time.Millisecond)
	for ; k > 1 && d < maxBackoffNanos; k-- {
		d *= 2
	}
	return min(d, maxBackoffNanos)
}

// failure counts a request Envoy could not deliver to replica i.
func (h *health) failure(i int, now int64) {
	if !h.passiveOn() || i < 0 || i >= len(h.entries) {
		return
	}
	threshold := uint16(min(h.cfg.PassiveFailures, 1<<16-1))
	var ejectedFor int64
	h.update(i, now, func(e *shared.Suspect) bool {
		ejectedFor = 0
		if h.ejected(i, now) {
			return false // requests routed before the ejection, failing now
		}
		if e.Failures < 1<<16-1 {
			e.Failures++
		}
		e.BadNanos = now
		// After an ejection, one failure before any success is enough.
		if e.Failures >= threshold || e.Ejections > 0 {
			if e.Ejections < 255 {
				e.Ejections++
			}
			ejectedFor = h.backoff(e.Ejections)
			e.UntilNanos = now + ejectedFor
			e.Failures = 0
		}
		return true
	})
	if ejectedFor > 0 {
		h.stats.add(h.stats.passiveEjections, 1)
		h.stats.add(h.stats.replica(i).ejections, 1)
		h.log.warn("replica " + h.cfg.Replicas[i].Name + " ejected for " +
			strconv.FormatInt(ejectedFor/int64(time.Millisecond), 10) + " ms: Envoy could not deliver " +
			strconv.Itoa(h.cfg.PassiveFailures) + " requests in a row (passive_failures)")
	}
}

// interrupted marks replica i uncertain: a stream it had answered 2xx
// ended before its response did.
func (h *health) interrupted(i int, now int64) {
	if !h.passiveOn() || i < 0 || i >= len(h.entries) {
		return
	}
	h.update(i, now, func(e *shared.Suspect) bool {
		if e.BadNanos == now {
			return false
		}
		e.BadNanos = now
		return true
	})
}

// success records a 2xx response from replica i: fresh evidence (see
// present) and the end of any passive suspicion.
func (h *health) success(i int, now int64) {
	if i < 0 || i >= len(h.lastGood) {
		return
	}
	h.lastGood[i] = now
	if !h.passiveOn() || h.entries[i] == (shared.Suspect{}) {
		return
	}
	h.update(i, now, func(e *shared.Suspect) bool {
		if *e == (shared.Suspect{}) {
			return false
		}
		*e = shared.Suspect{}
		return true
	})
}

// presentAll judges every replica again.
func (h *health) presentAll(now int64) {
	for i := range h.verdicts {
		h.present(i, now)
	}
}

// present judges replica i from the last snapshot and the passive
// evidence: healthy (scrapes within their failure bound and not ejected),
// and the evidence time scoring judges staleness by.
//
// Staleness is the absence of recent evidence, not of recent metrics: a
// replica whose metrics endpoint went silent but which answered one of
// this worker's requests 2xx within stale_after_ms is alive and serving,
// and the router's ledger counts exactly what it sent there, so it is not
// given the stale penalty, which is more than a lightly loaded fleet's
// whole queue and would act as an exclusion (TestStaleButAnswering). Its
// figures are then presented as taken at that response: requests this
// router dispatched before it count as included in the replica's last
// reported load, which errs towards the ledger's exact accounting. The
// verdict only changes when present runs (ticks, shared-state changes),
// never per request, so the ledger resynchronises at most once per tick,
// as after a scrape.
//
// A replica with a failure or interruption newer than its latest good
// scrape and success is uncertain: presented as never scraped, hence
// stale, until new evidence arrives.
//
// Times from before a backward wall-clock step are in the future: a
// snapshot more than stale_after_ms ahead of now is no evidence either.
func (h *health) present(i int, now int64) {
	if i >= len(h.snap.Replicas) {
		return
	}
	s := &h.snap.Replicas[i]
	v := &h.verdicts[i]
	h.gen++
	v.healthy = s.Failures < uint32(h.cfg.UnhealthyAfterFailures) && !h.ejected(i, now)
	staleAfter := h.staleAfter
	scraped := s.ScrapedNanos
	fresh := scraped != 0 && now-scraped <= staleAfter && scraped-now <= staleAfter
	presented := scraped
	if !fresh {
		if g := h.lastGood[i]; g != 0 && now-g <= staleAfter && g-now <= staleAfter {
			presented = g
		} else if scraped-now > staleAfter {
			presented = 0
		}
	}
	// A mark from the future was made before the wall clock stepped back;
	// newer evidence cannot outdate it, so it is no longer trusted.
	if bad := h.entries[i].BadNanos; bad != 0 && bad <= now && bad >= scraped && bad >= h.lastGood[i] {
		presented = 0
	}
	v.evidenceNanos = presented
}

// observeResponse reads a routed request's response status: 2xx is a
// success of the replica that answered, a 502/503/504 Envoy generated is a
// failure of the replica the request was sent to.
func (s *stream) observeResponse(endOfStream bool) {
	r := s.root
	v, err := proxy.GetHeaderMapValue(proxy.MapTypeHttpResponseHeaders, ":status")
	if err != nil || len(v) != 3 {
		return
	}
	now := proxy.NowNanos()
	switch status := int(v[0]-'0')*100 + int(v[1]-'0')*10 + int(v[2]-'0'); {
	case status >= 200 && status <= 299:
		i := s.replica
		if r.cfg.Fallbacks > 0 {
			// Envoy's override_host may have moved the request to a
			// fallback: credit the replica that answered, if the host
			// says which, and nobody otherwise.
			i = r.upstreamReplica()
			if i < 0 {
				return
			}
		}
		if !endOfStream {
			s.answeredBy = i // a response that ends here cannot be cut
		}
		r.health.success(i, now)
	case status == 502 || status == 503 || status == 504:
		if r.health.passiveOn() && envoyGenerated() {
			r.health.failure(s.replica, now)
		}
	}
}

// envoyGenerated reports whether the response being filtered is Envoy's
// local reply rather than the upstream's (see health).
func envoyGenerated() bool {
	if d, err := proxy.GetProperty(propertyCodeDetails); err == nil && len(d) > 0 {
		return string(d) != detailsViaUpstream
	}
	_, err := proxy.GetHeaderMapValue(proxy.MapTypeHttpResponseHeaders, headerUpstreamTime)
	return err != nil
}

// upstreamReplica returns the index of the replica Envoy sent the request
// to (the upstream.address property), or -1.
func (r *root) upstreamReplica() int {
	v, err := proxy.GetProperty(propertyUpstreamAddress)
	if err != nil {
		return -1
	}
	return replicaAt(r.view.replicas, v)
}
