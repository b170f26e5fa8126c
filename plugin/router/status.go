package router

import (
	"bytes"
	"strconv"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/gpuroute/gpuroute/plugin/config"
	"github.com/gpuroute/gpuroute/plugin/proxy"
	"github.com/gpuroute/gpuroute/plugin/shared"
	"github.com/gpuroute/gpuroute/scoring"
)

// jsonHeaders are the headers of every local reply; shared, never modified.
var jsonHeaders = [][2]string{{"content-type", "application/json"}}

// overloadedBody is the 429 body, in the shape OpenAI's API uses for errors.
var overloadedBody = []byte(`{"error":{"message":"every eligible replica is over the configured queue bound (max_wait_ms); retry later","type":"rate_limit_exceeded","code":429}}`)

// reject answers the request locally and counts it.
func (r *root) reject(status uint32, details string, body []byte, k stat) types.Action {
	r.stats.add(k, 1)
	if err := proxy.SendLocalResponse(status, details, body, jsonHeaders, proxy.NoGrpcStatus); err != nil {
		r.log.error("cannot send the local " + strconv.Itoa(int(status)) + ": " + err.Error())
	}
	return types.ActionPause
}

// unavailableBody explains a 503: why each replica was excluded, in counts
// (no request data is echoed).
func (r *root) unavailableBody(d *scoring.Decision) []byte {
	b := append(r.scratch[:0], `{"error":{"message":"no eligible replica among `...)
	b = strconv.AppendInt(b, int64(len(r.replicas)), 10)
	b = append(b, `: `...)
	b = strconv.AppendInt(b, int64(d.Unhealthy), 10)
	b = append(b, ` unhealthy, `...)
	b = strconv.AppendInt(b, int64(d.Draining), 10)
	b = append(b, ` draining or drained, `...)
	b = strconv.AppendInt(b, int64(d.NoAdapterSlot), 10)
	b = append(b, ` without a slot for the adapter","type":"service_unavailable","code":503}}`...)
	r.scratch = b
	return b
}

// scrapingBy says which kind of VM holds the scrape lease: "scraper" (a
// config.RoleScraper service), "worker", or "nobody" (none valid now), so
// an operator sees that a worker not leading is expected.
func (r *root) scrapingBy(now int64) string {
	var l shared.Lease
	v, _, err := proxy.GetSharedData(shared.KeyLease)
	switch {
	case err != nil || l.Decode(v) != nil || l.Holder == 0 || l.ExpiresNanos <= now:
		return "nobody"
	case l.Holder&shared.ScraperBit != 0:
		return config.RoleScraper
	}
	return config.RoleWorker
}

// isStatusPath reports whether the request path (query ignored) is the
// configured status path.
func isStatusPath(path []byte, want string) bool {
	if i := bytes.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	return string(path) == want
}

// serveStatus answers the opt-in status endpoint locally with the fleet as
// this worker sees it. It echoes nothing from the request.
func (r *root) serveStatus() types.Action {
	now := proxy.NowNanos()
	if r.syncSuspects() {
		r.presentAll(now)
	}
	b := append(r.scratch[:0], `{"root":`...)
	b = strconv.AppendUint(b, uint64(r.id), 10)
	b = append(b, `,"worker":`...)
	b = strconv.AppendUint(b, r.worker, 10)
	b = append(b, `,"leader":`...)
	b = strconv.AppendBool(b, r.leader)
	b = append(b, `,"scraping":`...)
	b = strconv.AppendQuote(b, r.scrapingBy(now))
	b = append(b, `,"snapshot_generation":`...)
	b = strconv.AppendUint(b, r.snap.Generation, 10)
	b = append(b, `,"in_flight":`...)
	b = strconv.AppendInt(b, int64(r.ledger.InFlight()), 10)
	b = r.appendPeerStatus(b, now)
	b = append(b, `,"replicas":[`...)
	for i := range r.replicas {
		rep := &r.replicas[i]
		c := &r.cfg.Replicas[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = strconv.AppendQuote(b, c.Name)
		b = append(b, `,"address":`...)
		b = strconv.AppendQuote(b, rep.Addr)
		b = append(b, `,"state":`...)
		b = strconv.AppendQuote(b, rep.DrainAt(now).String())
		if rep.DrainDeadlineNanos != 0 {
			b = append(b, `,"drain_deadline_in_ms":`...)
			b = strconv.AppendInt(b, (rep.DrainDeadlineNanos-now)/int64(time.Millisecond), 10)
		}
		w := r.ledger.WorkOn(i, &rep.Hardware, rep.ScrapedNanos)
		w.Add(&rep.PeerWork)
		b = append(b, `,"healthy":`...)
		b = strconv.AppendBool(b, rep.Healthy)
		b = append(b, `,"in_flight":`...)
		b = strconv.AppendInt(b, w.QueuedN+w.DecodeN, 10)
		b = append(b, `,"queued_tokens":`...)
		b = strconv.AppendInt(b, w.QueuedTokens, 10)
		b = append(b, `,"decode_tokens":`...)
		b = strconv.AppendInt(b, w.DecodeTokens, 10)
		b = append(b, `,"waiting":`...)
		b = strconv.AppendInt(b, int64(rep.WaitingRequests), 10)
		b = append(b, `,"running":`...)
		b = strconv.AppendInt(b, int64(rep.RunningRequests), 10)
		b = append(b, `,"kv_usage":`...)
		b = strconv.AppendFloat(b, rep.KVUsage, 'f', 3, 64)
		// The metrics' own age (not the evidence age the decision uses,
		// passive.go), never negative: after the wall clock steps back a
		// scrape can be stamped in the future.
		scraped := r.snap.Replicas[i].ScrapedNanos
		b = append(b, `,"scrape_age_ms":`...)
		if scraped == 0 {
			b = append(b, `null`...)
		} else {
			b = strconv.AppendInt(b, max(now-scraped, 0)/int64(time.Millisecond), 10)
		}
		b = append(b, `,"stale":`...)
		b = strconv.AppendBool(b, rep.ScrapedNanos == 0 || now-rep.ScrapedNanos > int64(r.params.StaleAfter))
		b = append(b, `,"scrape_failures":`...)
		b = strconv.AppendUint(b, uint64(r.snap.Replicas[i].Failures), 10)
		if i < len(r.passive.entries) {
			e := &r.passive.entries[i]
			b = append(b, `,"passive_failures":`...)
			b = strconv.AppendUint(b, uint64(e.Failures), 10)
			b = append(b, `,"passive_ejections":`...)
			b = strconv.AppendUint(b, uint64(e.Ejections), 10)
			b = append(b, `,"ejected_for_ms":`...)
			if r.passive.ejected(i, now) {
				b = strconv.AppendInt(b, (e.UntilNanos-now)/int64(time.Millisecond), 10)
			} else {
				b = append(b, `null`...)
			}
		}
		b = append(b, `,"prefill_ms_per_1k_tokens":`...)
		b = strconv.AppendFloat(b, rep.Hardware.PrefillSeconds(1000)*1000, 'f', 1, 64)
		b = append(b, '}')
	}
	b = append(b, "]}\n"...)
	r.scratch = b
	if err := proxy.SendLocalResponse(200, detailsStatus, b, jsonHeaders, proxy.NoGrpcStatus); err != nil {
		r.log.error("cannot answer the status endpoint: " + err.Error())
	}
	return types.ActionPause
}

// le64 reads a little-endian unsigned integer of len(b) ≤ 8 bytes; putLE
// writes one. Hand-rolled: encoding/binary links reflect into the module.
func le64(b []byte) uint64 {
	var v uint64
	for i := len(b) - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

func putLE(b []byte, v uint64) {
	for i := range b {
		b[i] = byte(v)
		v >>= 8
	}
}
