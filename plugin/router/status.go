package router

import (
	"strconv"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/gpuroute/gpuroute/plugin/proxy"
)

// serveStatus answers the opt-in status endpoint locally with the fleet as
// this worker sees it (TestStatusEndpoint). It echoes nothing from the
// request.
func (r *root) serveStatus() types.Action {
	now := proxy.NowNanos()
	if r.health.sync() {
		r.health.presentAll(now)
	}
	replicas := r.view.sync()
	b := append(r.replies[:0], `{"root":`...)
	b = strconv.AppendUint(b, uint64(r.id), 10)
	b = append(b, `,"worker":`...)
	b = strconv.AppendUint(b, r.members.worker, 10)
	b = append(b, `,"leader":`...)
	b = strconv.AppendBool(b, r.scrape.leader)
	b = append(b, `,"scraping":`...)
	b = strconv.AppendQuote(b, holder(now))
	b = append(b, `,"snapshot_generation":`...)
	b = strconv.AppendUint(b, r.scrape.snap.Generation, 10)
	b = append(b, `,"in_flight":`...)
	b = strconv.AppendInt(b, int64(r.ledger.InFlight()), 10)
	b = r.peers.appendStatus(b, now, r.scrape.leader)
	b = append(b, `,"replicas":[`...)
	for i := range replicas {
		rep := &replicas[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = strconv.AppendQuote(b, r.cfg.Replicas[i].Name)
		b = append(b, `,"address":`...)
		b = strconv.AppendQuote(b, rep.Addr)
		b = append(b, `,"state":`...)
		b = strconv.AppendQuote(b, rep.DrainAt(now).String())
		if rep.DrainDeadlineNanos != 0 {
			b = append(b, `,"drain_deadline_in_ms":`...)
			b = strconv.AppendInt(b, (rep.DrainDeadlineNanos-now)/int64(time.Millisecond), 10)
		}
		w := r.work.workOn(i)
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
		// The metrics' own age, not the evidence age the decision uses
		// (health.present).
		b = append(b, `,"scrape_age_ms":`...)
		b = appendAgeMillis(b, now, r.scrape.snap.Replicas[i].ScrapedNanos)
		b = append(b, `,"stale":`...)
		b = strconv.AppendBool(b, rep.ScrapedNanos == 0 || now-rep.ScrapedNanos > int64(r.params.StaleAfter))
		b = append(b, `,"scrape_failures":`...)
		b = strconv.AppendUint(b, uint64(r.scrape.snap.Replicas[i].Failures), 10)
		e := &r.health.entries[i]
		b = append(b, `,"passive_failures":`...)
		b = strconv.AppendUint(b, uint64(e.Failures), 10)
		b = append(b, `,"passive_ejections":`...)
		b = strconv.AppendUint(b, uint64(e.Ejections), 10)
		b = append(b, `,"ejected_for_ms":`...)
		if r.health.ejected(i, now) {
			b = strconv.AppendInt(b, (e.UntilNanos-now)/int64(time.Millisecond), 10)
		} else {
			b = append(b, `null`...)
		}
		b = append(b, `,"prefill_ms_per_1k_tokens":`...)
		b = strconv.AppendFloat(b, rep.Hardware.PrefillSeconds(1000)*1000, 'f', 1, 64)
		b = append(b, '}')
	}
	b = append(b, "]}\n"...)
	r.replies = b
	if err := proxy.SendLocalResponse(200, detailsStatus, b, jsonHeaders, proxy.NoGrpcStatus); err != nil {
		r.log.error("cannot answer the status endpoint: " + err.Error())
	}
	return types.ActionPause
}

// appendAgeMillis appends the age at now of what happened at atNanos, in
// whole milliseconds and never negative (after the wall clock steps back a
// time can be in the future), or null when it never happened (0).
func appendAgeMillis(b []byte, now, atNanos int64) []byte {
	if atNanos == 0 {
		return append(b, `null`...)
	}
	return strconv.AppendInt(b, max(now-atNanos, 0)/int64(time.Millisecond), 10)
}
