package router

import (
	"strconv"
	"time"

	"github.com/gpuroute/gpuroute/plugin/fleet"
	"github.com/gpuroute/gpuroute/plugin/proxy"
)

// scrape calls every replica's metrics endpoint (proxy_http_call to its
// Envoy cluster). A round starts only when the previous one has fully
// answered or timed out, so a slow replica never stacks calls.
func (r *root) scrape(now int64) {
	if r.scraping > 0 {
		return
	}
	for i := range r.cfg.Replicas {
		c := &r.cfg.Replicas[i]
		if c.MetricsCluster == "" {
			continue
		}
		hdrs := [][2]string{{":method", "GET"}, {":path", c.MetricsPath}, {":authority", c.AddressText}, {"accept", "text/plain"}}
		_, err := proxy.DispatchHttpCall(c.MetricsCluster, hdrs, nil, nil, r.cfg.ScrapeTimeoutMillis, r.scrapeDone[i])
		if err != nil {
			r.stats.add(r.stats.scrapeFailures, 1)
			r.snap.Replicas[i].ApplyFailure(fleet.ScrapeTimeout, 0, now)
			r.log.warn("cannot scrape " + c.Name + " through cluster " + c.MetricsCluster + ": " + err.Error())
			continue
		}
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
	now := time.Now().UnixNano()
	if r.scraping > 0 {
		r.scraping--
	}
	s := &r.snap.Replicas[i]
	switch {
	case numHeaders == 0:
		r.scrapeFailed(i, fleet.ScrapeTimeout, 0, now, nil)
	default:
		status := 0
		if v, err := proxy.GetHeaderMapValue(proxy.MapTypeHttpCallResponseHeaders, ":status"); err == nil {
			status, _ = strconv.Atoi(string(v))
		}
		if status < 200 || status > 299 {
			r.scrapeFailed(i, fleet.ScrapeHTTPStatus, status, now, nil)
			break
		}
		body, err := proxy.GetBufferBytes(proxy.BufferTypeHttpCallResponseBody, 0, uint32(bodySize))
		if err != nil {
			r.scrapeFailed(i, fleet.ScrapeGarbage, status, now, err)
			break
		}
		// Bad lines are skipped and the rest used; a body without samples
		// or cut short counts as a failed scrape and changes no figure
		// (fleet.Replica.ApplySample).
		err = r.parsers[i].Parse(body, &r.sample)
		s.ApplySample(&r.sample, now)
		if s.LastError != fleet.ScrapeOK {
			r.stats.add(r.stats.scrapeFailures, 1)
			r.warnFailing(i, err)
		} else {
			r.stats.add(r.stats.scrapes, 1)
		}
	}
	if r.scraping == 0 {
		r.publish(now)
	}
}

func (r *root) scrapeFailed(i int, kind fleet.ScrapeError, status int, now int64, err error) {
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
	if s.LastError == fleet.ScrapeHTTPStatus {
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
	r.snap.Generation++
	r.snap.WrittenNanos = now
	r.snap.ConfigID = r.configID
	buf, err := r.snap.AppendBinary(r.scratch[:0])
	if err != nil {
		r.log.error("cannot encode the fleet snapshot: " + err.Error())
		return
	}
	r.scratch = buf
	if err := proxy.SetSharedData(fleet.KeySnapshot, buf, 0); err != nil {
		r.log.warn("cannot publish the fleet snapshot: " + err.Error())
		return
	}
	r.applySnapshot()
}
