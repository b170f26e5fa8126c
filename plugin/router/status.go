package router

import (
	"slices"
	"strconv"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/gpuroute/gpuroute/plugin/config"
	"github.com/gpuroute/gpuroute/plugin/proxy"
	"github.com/gpuroute/gpuroute/plugin/version"
	"github.com/gpuroute/gpuroute/scoring"
)

// serveStatus answers the opt-in status endpoint locally (TestStatusEndpoint)
// with the fleet as this Envoy sees it: the in-flight work and the
// decisions of every worker VM (their work records, Envoy's stats), in the
// configuration's words (active, draining, drained), then the replicas a
// configuration change removed that still drain this worker's streams. It
// echoes nothing from the request. The path belongs on an internal listener,
// not the public one (it shows the fleet's addresses and load).
func (r *root) serveStatus() types.Action {
	now := proxy.NowNanos()
	if r.health.sync() {
		r.health.presentAll(now)
	}
	replicas := r.view.sync()
	r.work.gatewayWork(now, r.statusWork)
	b := append(r.replies[:0], `{"version":`...)
	b = strconv.AppendQuote(b, version.Release)
	b = append(b, `,"root":`...)
	b = strconv.AppendUint(b, uint64(r.id), 10)
	b = append(b, `,"worker":`...)
	b = strconv.AppendUint(b, r.members.worker, 10)
	b = append(b, `,"workers":`...)
	b = strconv.AppendInt(b, int64(max(len(r.members.registry.Workers), 1)), 10)
	b = append(b, `,"leader":`...)
	b = strconv.AppendBool(b, r.scrape.leader)
	b = append(b, `,"scraping":`...)
	b = strconv.AppendQuote(b, holder(now))
	b = append(b, `,"snapshot_generation":`...)
	b = strconv.AppendUint(b, r.scrape.snap.Generation, 10)
	var inFlight int64
	for i := range r.statusWork {
		inFlight += r.statusWork[i].QueuedN + r.statusWork[i].DecodeN
	}
	b = append(b, `,"in_flight":`...)
	b = strconv.AppendInt(b, inFlight, 10)
	b = r.flow.appendStatus(b)
	b = append(b, `,"decisions":{`...)
	for k := range r.stats.byReason {
		if k > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, r.stats.reasonKeys[k])
		b = append(b, ':')
		v, _ := r.stats.value(r.stats.byReason[k])
		b = strconv.AppendInt(b, v, 10)
	}
	b = append(b, '}')
	b = r.peers.appendStatus(b, now, r.scrape.leader)
	b = append(b, `,"replicas":[`...)
	for i := range replicas {
		if i > 0 {
			b = append(b, ',')
		}
		b = r.appendReplicaStatus(b, i, now)
	}
	n := len(replicas)
	for k := range r.retirees {
		t := &r.retirees[k]
		if t.gone {
			continue
		}
		if n+k > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = strconv.AppendQuote(b, t.name)
		b = append(b, `,"address":`...)
		b = strconv.AppendQuote(b, t.addr)
		b = append(b, `,"state":`...)
		state := config.StateNameDraining
		if now >= t.deadlineNanos {
			state = config.StateNameDrained
		}
		b = strconv.AppendQuote(b, state)
		b = append(b, `,"removed":true,"drain_deadline_in_ms":`...)
		b = strconv.AppendInt(b, (t.deadlineNanos-now)/int64(time.Millisecond), 10)
		b = append(b, `,"in_flight":`...)
		b = strconv.AppendInt(b, int64(r.ledger.InFlightOn(n+k)), 10)
		b = append(b, '}')
	}
	b = append(b, "]}\n"...)
	r.replies = b
	if err := proxy.SendLocalResponse(200, detailsStatus, b, jsonHeaders, proxy.NoGrpcStatus); err != nil {
		r.log.error("cannot answer the status endpoint: " + err.Error())
	}
	return types.ActionPause
}

// appendReplicaStatus appends configured replica i's status object.
func (r *root) appendReplicaStatus(b []byte, i int, now int64) []byte {
	rep := &r.view.replicas[i]
	b = append(b, `{"name":`...)
	b = strconv.AppendQuote(b, r.cfg.Replicas[i].Name)
	b = append(b, `,"address":`...)
	b = strconv.AppendQuote(b, rep.Addr)
	b = append(b, `,"state":`...)
	b = strconv.AppendQuote(b, stateName(rep.DrainAt(now)))
	if rep.DrainDeadlineNanos != 0 {
		b = append(b, `,"drain_deadline_in_ms":`...)
		b = strconv.AppendInt(b, (rep.DrainDeadlineNanos-now)/int64(time.Millisecond), 10)
	}
	w := &r.statusWork[i]
	b = append(b, `,"healthy":`...)
	b = strconv.AppendBool(b, rep.Healthy)
	b = append(b, `,"in_flight":`...)
	b = strconv.AppendInt(b, w.QueuedN+w.DecodeN, 10)
	b = append(b, `,"queued_tokens":`...)
	b = strconv.AppendInt(b, w.QueuedTokens, 10)
	b = append(b, `,"decode_tokens":`...)
	b = strconv.AppendInt(b, w.DecodeTokens, 10)
	if r.peers.remoteNanos != 0 {
		p := &r.peers.remoteWork[i]
		b = append(b, `,"peer_in_flight":`...)
		b = strconv.AppendInt(b, p.QueuedN+p.DecodeN, 10)
	}
	b = append(b, `,"waiting":`...)
	b = strconv.AppendInt(b, int64(rep.WaitingRequests), 10)
	b = append(b, `,"running":`...)
	b = strconv.AppendInt(b, int64(rep.RunningRequests), 10)
	b = append(b, `,"kv_usage":`...)
	b = strconv.AppendFloat(b, rep.KVUsage, 'f', 3, 64)
	// The share of the prompt tokens routed here that the index believed
	// cached here, over every worker (Envoy's stats).
	b = append(b, `,"cached_prefix_share":`...)
	rs := r.stats.replica(i)
	hits, ok1 := r.stats.value(rs.prefixHitTokens)
	prompts, ok2 := r.stats.value(rs.promptTokens)
	if ok1 && ok2 && prompts > 0 {
		b = strconv.AppendFloat(b, float64(hits)/float64(prompts), 'f', 3, 64)
	} else {
		b = append(b, `null`...)
	}
	b = append(b, `,"adapters":[`...)
	b = r.appendAdapters(b, i, now)
	b = append(b, ']')
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
	return append(b, '}')
}

// appendAdapters appends, as JSON strings, the adapters the decision
// believes resident on replica i: those its metrics list as running, then
// those the routers sent there within adapter_memory_ms.
func (r *root) appendAdapters(b []byte, i int, now int64) []byte {
	first := true
	name := func(b []byte, s string) []byte {
		if !first {
			b = append(b, ',')
		}
		first = false
		return strconv.AppendQuote(b, s)
	}
	listed := r.view.replicas[i].Adapters
	for _, a := range listed {
		if a.Tier == scoring.TierGPU {
			b = name(b, a.Name)
		}
	}
	r.placements = r.ledger.AppendAdapterPlacements(r.placements[:0], now)
	for _, pl := range r.placements {
		if pl.Replica != i || pl.UntilNanos <= now {
			continue
		}
		a, ok := r.features.adapterNamed(pl.Adapter)
		if ok && !slices.ContainsFunc(listed, func(l scoring.Adapter) bool { return l.Name == a && l.Tier == scoring.TierGPU }) {
			b = name(b, a)
		}
	}
	return b
}

// stateName is a drain state in the configuration's words.
func stateName(d scoring.DrainState) string {
	switch d {
	case scoring.Draining:
		return config.StateNameDraining
	case scoring.Drained:
		return config.StateNameDrained
	}
	return config.StateNameActive
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
