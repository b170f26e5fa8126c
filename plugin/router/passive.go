package router

import (
	"strconv"
	"time"

	"github.com/gpuroute/gpuroute/plugin/proxy"
)

// Passive health checking: what routed requests' responses say about their
// replica, between (or instead of) metrics scrapes.
//
// Why: the scrape failure bound learns that a replica is gone only after
// unhealthy_after_failures failed scrapes (about 650 ms at a 100 ms tick
// and a 200 ms scrape timeout), and meanwhile the dead replica, its ledger
// just emptied by the resets, looks idle: with fallbacks 0 (ORIGINAL_DST)
// the client's re-send went back to it and 57 of 2000 requests were lost
// in the replica-crash fault scenario. Envoy's own outlier detection does
// not help here: it is per cluster host, and an ORIGINAL_DST host chosen
// by header is created per connection, so it is never ejected.
//
// The signal. A replica Envoy could not reach shows up in the filter as a
// 502, 503 or 504 response that Envoy generated itself (a "local reply":
// "upstream connect error or disconnect/reset before headers", "no
// healthy upstream", an upstream timeout). Envoy's router adds
// x-envoy-upstream-service-time to every response that came from an
// upstream (unless the route sets suppress_envoy_headers) and never to a
// local reply; `server: envoy` is no signal, since Envoy overwrites the
// server header of upstream responses too by default. When the host
// exposes the response.code_details property, it decides instead:
// "via_upstream" is the replica's own answer (a vLLM 503 under load is
// not a dead replica), anything else is Envoy's. Without the timing
// header and without the property (suppress_envoy_headers: true) every
// 5xx counts, which is the conservative reading.
//
// A stream cut after its replica answered 2xx but before the response
// ended is an interruption: the replica may have crashed, or the client
// left. It counts no failure but marks the replica uncertain (its figures
// count as stale, scoring's stale penalty) until newer evidence arrives: a
// good scrape or a 2xx response. A stream that ends with no response at
// all counts nothing: Envoy turns an upstream reset before any response
// byte into a 503 local reply (response code details
// upstream_reset_before_response_started), which is counted above, so a
// stream with no response is the client going away.
//
// The rule. passive_failures consecutive failures eject the replica for
// passive_backoff_ms; after an ejection, the first failure before a
// success ejects it again for twice as long, up to 30 s. A 2xx response
// clears everything. The state is shared with the other worker VMs under
// keySuspect (compare-and-swap updates; every VM reads it when a stream
// starts, so a client's re-send through another worker already avoids the
// replica), and only replicas with something to say are stored, so the
// value is a few bytes in steady state.

// keySuspect is the shared-data key of the passive health state.
const keySuspect = "gpuroute/suspect"

// suspectVersion is the first byte of the encoding; a value with another
// version is ignored (and replaced by the next write).
const suspectVersion = 1

// suspectEntryBytes is one encoded entry: index u32, failures u16,
// ejections u8, bad time i64, ejected-until time i64.
const suspectEntryBytes = 4 + 2 + 1 + 8 + 8

// suspectHeaderBytes is version u8, configuration id u64, count u32.
const suspectHeaderBytes = 1 + 8 + 4

// Header and property names of the signal.
const (
	headerUpstreamTime = "x-envoy-upstream-service-time"
	detailsViaUpstream = "via_upstream"
)

var (
	propertyCodeDetails     = []string{"response", "code_details"}
	propertyUpstreamAddress = []string{"upstream", "address"}
)

// suspect is one replica's passive health state; the zero value is a
// replica with nothing against it.
type suspect struct {
	// Failures counts consecutive failed requests since the last success
	// or ejection.
	Failures uint16
	// Ejections counts ejections since the last success (the backoff
	// doubles with each).
	Ejections uint8
	// BadNanos is the time of the latest failure or interruption: newer
	// than every good scrape and success, it makes the replica uncertain.
	BadNanos int64
	// UntilNanos is when the current ejection ends (0: none).
	UntilNanos int64
}

// passive is one root's view of the shared state, index-aligned with the
// replicas; lastGood (this worker's latest 2xx per replica) is local.
type passive struct {
	cas      uint32
	entries  []suspect
	lastGood []int64
	buf      []byte
}

func (p *passive) size(n int) {
	if len(p.entries) != n {
		p.entries = make([]suspect, n)
		p.lastGood = make([]int64, n)
	}
}

// appendSuspects encodes the non-zero entries.
func appendSuspects(b []byte, configID uint64, entries []suspect) []byte {
	b = append(b, suspectVersion)
	b = appendLE(b, configID, 8)
	at := len(b)
	b = appendLE(b, 0, 4)
	n := 0
	for i := range entries {
		e := &entries[i]
		if *e == (suspect{}) {
			continue
		}
		b = appendLE(b, uint64(i), 4)
		b = appendLE(b, uint64(e.Failures), 2)
		b = append(b, e.Ejections)
		b = appendLE(b, uint64(e.BadNanos), 8)
		b = appendLE(b, uint64(e.UntilNanos), 8)
		n++
	}
	putLE(b[at:at+4], uint64(n))
	return b
}

// decodeSuspects fills entries (zeroed first) from v. A value of another
// version or configuration, or malformed, leaves them all zero and
// reports false; entries naming an index out of range are skipped.
func decodeSuspects(v []byte, configID uint64, entries []suspect) bool {
	clear(entries)
	if len(v) < suspectHeaderBytes || v[0] != suspectVersion || le64(v[1:9]) != configID {
		return false
	}
	n := le64(v[9:13])
	body := v[suspectHeaderBytes:]
	if uint64(len(body)) != n*suspectEntryBytes {
		return false
	}
	for ; len(body) >= suspectEntryBytes; body = body[suspectEntryBytes:] {
		i := le64(body[0:4])
		if i >= uint64(len(entries)) {
			continue
		}
		entries[i] = suspect{
			Failures:   uint16(le64(body[4:6])),
			Ejections:  body[6],
			BadNanos:   int64(le64(body[7:15])),
			UntilNanos: int64(le64(body[15:23])),
		}
	}
	return true
}

func appendLE(b []byte, v uint64, n int) []byte {
	for range n {
		b = append(b, byte(v))
		v >>= 8
	}
	return b
}

// passiveOn reports whether passive health checking is configured.
func (r *root) passiveOn() bool { return r.cfg.PassiveFailures > 0 }

// syncSuspects reads the shared passive state when another worker changed
// it, and reports whether it did: the caller then refreshes the replicas'
// views (presentAll). It runs when a stream starts, so a decision never
// uses state older than the last failure any worker saw; with nothing
// changed it costs one host call returning a few bytes, and no clock read.
func (r *root) syncSuspects() (changed bool) {
	if !r.passiveOn() {
		return false
	}
	p := &r.passive
	p.size(len(r.replicas))
	v, cas, err := proxy.GetSharedData(keySuspect)
	if err != nil {
		if err == proxy.ErrNotFound && p.cas != 0 {
			p.cas = 0
			clear(p.entries)
			return true
		}
		return false
	}
	if cas == p.cas {
		return false
	}
	p.cas = cas
	decodeSuspects(v, r.configID, p.entries)
	return true
}

// updateSuspect applies f to replica i's shared entry with a
// compare-and-swap loop; f reports whether it changed anything (no write
// otherwise). It returns f's last answer.
func (r *root) updateSuspect(i int, now int64, f func(e *suspect) bool) bool {
	p := &r.passive
	p.size(len(r.replicas))
	for range 4 {
		v, cas, err := proxy.GetSharedData(keySuspect)
		switch {
		case err == proxy.ErrNotFound:
			cas = 0
			clear(p.entries)
		case err != nil:
			return false
		default:
			decodeSuspects(v, r.configID, p.entries)
		}
		if !f(&p.entries[i]) {
			p.cas = cas
			r.present(i, now)
			return false
		}
		p.buf = appendSuspects(p.buf[:0], r.configID, p.entries)
		err = proxy.SetSharedData(keySuspect, p.buf, cas)
		if err == proxy.ErrCASMismatch {
			continue
		}
		// Remember "unknown": the next sync re-reads, which also picks up
		// a worker that wrote in between.
		p.cas = 0
		r.present(i, now)
		return err == nil
	}
	return false
}

// ejected reports whether replica i is ejected at now. An end further
// away than the longest backoff was set before the wall clock stepped
// back: it is over, or the replica would stay out for the size of the step.
func (p *passive) ejected(i int, now int64) bool {
	if i >= len(p.entries) {
		return false
	}
	until := p.entries[i].UntilNanos
	return until > now && until-now <= maxBackoffNanos
}

const maxBackoffNanos = 30 * int64(time.Second)

// backoff is the length of the k-th ejection (k ≥ 1) since the last success.
func (r *root) backoff(k uint8) int64 {
	d := int64(r.cfg.PassiveBackoffMillis) * int64(time.Millisecond)
	for ; k > 1 && d < maxBackoffNanos; k-- {
		d *= 2
	}
	return min(d, maxBackoffNanos)
}

// passiveFailure counts a request Envoy could not deliver to replica i.
func (r *root) passiveFailure(i int, now int64) {
	if !r.passiveOn() || i < 0 || i >= len(r.replicas) {
		return
	}
	threshold := uint16(min(r.cfg.PassiveFailures, 1<<16-1))
	var ejectedFor int64
	r.updateSuspect(i, now, func(e *suspect) bool {
		ejectedFor = 0
		if r.passive.ejected(i, now) {
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
			ejectedFor = r.backoff(e.Ejections)
			e.UntilNanos = now + ejectedFor
			e.Failures = 0
		}
		return true
	})
	if ejectedFor > 0 {
		r.stats.add(r.stats.passiveEjections, 1)
		r.log.warn("replica " + r.cfg.Replicas[i].Name + " ejected for " +
			strconv.FormatInt(ejectedFor/int64(time.Millisecond), 10) + " ms: Envoy could not deliver " +
			strconv.Itoa(r.cfg.PassiveFailures) + " requests in a row (passive_failures)")
	}
}

// passiveInterrupted marks replica i uncertain: a stream it had answered
// 2xx ended before its response did.
func (r *root) passiveInterrupted(i int, now int64) {
	if !r.passiveOn() || i < 0 || i >= len(r.replicas) {
		return
	}
	r.updateSuspect(i, now, func(e *suspect) bool {
		if e.BadNanos == now {
			return false
		}
		e.BadNanos = now
		return true
	})
}

// passiveSuccess records a 2xx response from replica i: fresh evidence
// (see present) and the end of any passive suspicion.
func (r *root) passiveSuccess(i int, now int64) {
	p := &r.passive
	p.size(len(r.replicas))
	if i < 0 || i >= len(p.lastGood) {
		return
	}
	p.lastGood[i] = now
	if !r.passiveOn() || p.entries[i] == (suspect{}) {
		return
	}
	r.updateSuspect(i, now, func(e *suspect) bool {
		if *e == (suspect{}) {
			return false
		}
		*e = suspect{}
		return true
	})
}

// presentAll refreshes every replica's view for the decision.
func (r *root) presentAll(now int64) {
	for i := range r.replicas {
		r.present(i, now)
	}
}

// present computes what the decision sees of replica i from the last
// snapshot and the passive evidence: Healthy (scrapes within their failure
// bound and not ejected) and ScrapedNanos, the age scoring judges
// staleness by.
//
// Staleness is the absence of recent evidence, not of recent metrics: a
// replica whose metrics endpoint went silent but which answered one of
// this worker's requests 2xx within stale_after_ms is alive and serving,
// and the router's ledger counts exactly what it sent there, so it is not
// given the stale penalty (that penalty, 250 ms by default, is more than a
// lightly loaded fleet's whole queue, so it acted as an exclusion: the
// stale-metrics fault scenario sent it nothing). Its figures are then
// presented as taken at that response: requests this router dispatched
// before it count as included in the replica's last reported load, which
// errs towards the ledger's exact accounting. The value only changes when
// present runs (ticks, shared-state changes), never per request, so the
// ledger resynchronises at most once per tick, as after a scrape.
//
// A replica with a failure or interruption newer than its latest good
// scrape and success is uncertain: presented as never scraped, hence
// stale, until new evidence arrives.
//
// Times from before a backward wall-clock step are in the future: a
// snapshot more than stale_after_ms ahead of now is no evidence either.
func (r *root) present(i int, now int64) {
	if i >= len(r.snap.Replicas) {
		return
	}
	p := &r.passive
	p.size(len(r.replicas))
	s := &r.snap.Replicas[i]
	rep := &r.replicas[i]
	rep.Healthy = s.Failures < uint32(r.cfg.UnhealthyAfterFailures) && !p.ejected(i, now)
	staleAfter := int64(r.params.StaleAfter)
	scraped := s.ScrapedNanos
	fresh := scraped != 0 && now-scraped <= staleAfter && scraped-now <= staleAfter
	presented := scraped
	if !fresh {
		if g := p.lastGood[i]; g != 0 && now-g <= staleAfter && g-now <= staleAfter {
			presented = g
		} else if scraped-now > staleAfter {
			presented = 0
		}
	}
	// A mark from the future was made before the wall clock stepped back;
	// newer evidence cannot outdate it, so it is no longer trusted.
	if bad := p.entries[i].BadNanos; bad != 0 && bad <= now && bad >= scraped && bad >= p.lastGood[i] {
		presented = 0
	}
	rep.ScrapedNanos = presented
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
		r.passiveSuccess(i, now)
	case status == 502 || status == 503 || status == 504:
		if r.passiveOn() && envoyGenerated() {
			r.passiveFailure(s.replica, now)
		}
	}
}

// envoyGenerated reports whether the response being filtered is Envoy's
// local reply rather than the upstream's (see the top of this file).
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
	for i := range r.replicas {
		if string(v) == r.replicas[i].Addr {
			return i
		}
	}
	return -1
}
