package router

import (
	"strconv"

	"github.com/gpuroute/gpuroute/plugin/proxy"
	"github.com/gpuroute/gpuroute/plugin/shared"
)

// scrape calls the metrics endpoint (proxy_http_call to its Envoy
// cluster) of every replica whose previous call has answered or timed out:
// each replica runs on its own schedule, so one silent endpoint holds back
// only its own scrapes (at most one call per scrape_timeout_ms), never the
// others' (a round that waited for the slowest call scraped healthy
// replicas 1.1 times a second instead of 10 behind one silent endpoint).
// The snapshot is published once this tick's calls have all answered;
// answers to calls of an earlier tick are published with the next one.
func (r *root) scrape(now int64) {
	n := len(r.cfg.Replicas)
	if len(r.scrapeRoundOf) != n {
		r.scrapeRoundOf = make([]uint32, n)
	}
	if r.scrapeDirty {
		// Answers of the last tick's calls still unpublished (one of them
		// is late): publish them before the snapshot is read back.
		r.publish(now)
	}
	r.scrapeRound++
	if r.scrapeRound == 0 {
		r.scrapeRound = 1 // 0 marks an idle replica
	}
	r.scraping = 0
	for i := range r.cfg.Replicas {
		c := &r.cfg.Replicas[i]
		if c.MetricsCluster == "" || r.scrapeRoundOf[i] != 0 {
			continue
		}
		hdrs := [][2]string{{":method", "GET"}, {":path", c.MetricsPath}, {":authority", c.AddressText}, {"accept", "text/plain"}}
		_, err := proxy.DispatchHttpCall(c.MetricsCluster, hdrs, nil, nil, r.cfg.ScrapeTimeoutMillis, r.scrapeDone[i])
		if err != nil {
			r.stats.add(r.stats.scrapeFailures, 1)
			r.snap.Replicas[i].ApplyFailure(shared.ScrapeTimeout, 0, now)
			r.log.warn("cannot scrape " + c.Name + " through cluster " + c.MetricsCluster + ": " + err.Error())
			continue
		}
		r.scrapeRoundOf[i] = r.scrapeRound
		r.scraping++
	}
	if r.scraping == 0 {
		r.publish(now)
	}
}

// scrapeCallbacks returns one response callback per replica, made once at
// configuration: a closure made per call would cost a heap allocation per
// replica per tick (BenchmarkVMHeap counted 64 per tick).
func (r *root) scrapeCallbacks(n int) []func(numHeaders, bodySize, numTrailers int) {
	cbs := make([]func(numHeaders, bodySize, numTrailers int), n)
	for i := range cbs {
		cbs[i] = func(numHeaders, bodySize, _ int) { r.scraped(i, numHeaders, bodySize) }
	}
	return cbs
}

// scraped handles one metrics response. Timeouts, 5xx, truncated or garbage
// bodies age the replica's figures and count a failure; they never blank
// the last good state.
func (r *root) scraped(i, numHeaders, bodySize int) {
	now := proxy.NowNanos()
	current := false
	if i < len(r.scrapeRoundOf) {
		current = r.scrapeRoundOf[i] == r.scrapeRound
		r.scrapeRoundOf[i] = 0
	}
	if current && r.scraping > 0 {
		r.scraping--
	}
	s := &r.snap.Replicas[i]
	switch {
	case numHeaders == 0:
		r.scrapeFailed(i, shared.ScrapeTimeout, 0, now, nil)
	default:
		status := 0
		if v, err := proxy.GetHeaderMapValue(proxy.MapTypeHttpCallResponseHeaders, ":status"); err == nil {
			status, _ = strconv.Atoi(string(v))
		}
		if status < 200 || status > 299 {
			r.scrapeFailed(i, shared.ScrapeHTTPStatus, status, now, nil)
			break
		}
		body, err := proxy.GetBufferBytes(proxy.BufferTypeHttpCallResponseBody, 0, uint32(bodySize))
		if err != nil {
			r.scrapeFailed(i, shared.ScrapeGarbage, status, now, err)
			break
		}
		// Bad lines are skipped and the rest used; a body without samples
		// or cut short counts as a failed scrape and changes no figure
		// (shared.Replica.ApplySample).
		err = r.parsers[i].Parse(body, &r.sample)
		s.ApplySample(&r.sample, now)
		if s.LastError != shared.ScrapeOK {
			r.stats.add(r.stats.scrapeFailures, 1)
			r.warnFailing(i, err)
		} else {
			r.stats.add(r.stats.scrapes, 1)
		}
	}
	// The tick's last answer publishes them all; a late answer (a call of
	// an earlier tick) publishes itself, since the next readSnapshot would
	// replace an unpublished figure with what was published.
	r.scrapeDirty = true
	if !current || r.scraping == 0 {
		r.publish(now)
	}
}

func (r *root) scrapeFailed(i int, kind shared.ScrapeError, status int, now int64, err error) {
	r.snap.Replicas[i].ApplyFailure(kind, uint16(min(max(status, 0), 999)), now)
	r.stats.add(r.stats.scrapeFailures, 1)
	r.warnFailing(i, err)
}

// warnFailing logs once, when a replica's failures reach the bound that
// rules it out.
func (r *root) warnFailing(i int, err error) {
	s := &r.snap.Replicas[i]
	if s.Failures != uint32(r.cfg.UnhealthyAfterFailures) {
		return
	}
	why := s.LastError.String()
	if s.LastError == shared.ScrapeHTTPStatus {
		why += " " + strconv.Itoa(int(s.HTTPStatus))
	}
	if err != nil {
		why += ": " + err.Error()
	}
	r.log.warn("replica " + r.cfg.Replicas[i].Name + " ruled out after " +
		strconv.Itoa(r.cfg.UnhealthyAfterFailures) + " failed scrapes: " + why)
}

// publish writes the leader's snapshot for every worker. Only the lease
// holder writes, so the write is unconditional; at a lease hand-over two
// leaders may alternate for one tick, both with fresh figures.
func (r *root) publish(now int64) {
	r.scrapeDirty = false
	r.snap.Generation++
	r.snap.WrittenNanos = now
	r.snap.ConfigID = r.configID
	buf, err := r.snap.AppendBinary(r.scratch[:0])
	if err != nil {
		r.log.error("cannot encode the fleet snapshot: " + err.Error())
		return
	}
	r.scratch = buf
	if err := proxy.SetSharedData(shared.KeySnapshot, buf, 0); err != nil {
		r.log.warn("cannot publish the fleet snapshot: " + err.Error())
		return
	}
	r.applySnapshot()
}
