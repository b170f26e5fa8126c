package router

import (
	"bytes"
	"math"
	"strconv"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/gpuroute/gpuroute/plugin/proxy"
	"github.com/gpuroute/gpuroute/scoring"
)

// What a request leaves with: the destination header Envoy routes by, or a
// local reply when no replica can take it.

// jsonHeaders are the headers of the local replies that carry no
// Retry-After; shared, never modified.
var jsonHeaders = [][2]string{{"content-type", "application/json"}}

// headerRetryAfter tells a client refused with 429 or 503 when to try
// again, in seconds (RFC 9110 §10.2.3), clamped to [minRetryAfterSec,
// maxRetryAfterSec]: below a second a client would only add load, and past a
// minute the estimate means nothing.
const (
	headerRetryAfter = "retry-after"
	minRetryAfterSec = 1
	maxRetryAfterSec = 60
)

// overloadedBody is the 429 body, in the shape OpenAI's API uses for errors.
var overloadedBody = []byte(`{"error":{"message":"every eligible replica is over the configured queue bound (max_wait_ms); retry later","type":"rate_limit_exceeded","code":429}}`)

// modelNotFoundBody is the 404 body for a model no replica serves, with
// the type and code OpenAI's API answers an unknown model with (the model
// is not echoed: no request data is).
var modelNotFoundBody = []byte(`{"error":{"message":"no replica serves the requested model","type":"invalid_request_error","param":"model","code":"model_not_found"}}`)

// The bodies of flow control's 429s: nothing of the request, its tenant or
// the queue's other requests is echoed (TestFlowRepliesRevealNothing).
var (
	shedBody         = []byte(`{"error":{"message":"the fleet is saturated and this request's priority band is sheddable; retry later","type":"rate_limit_exceeded","code":429}}`)
	queueFullBody    = []byte(`{"error":{"message":"too many requests are waiting for capacity in this request's priority band; retry later","type":"rate_limit_exceeded","code":429}}`)
	queueTimeoutBody = []byte(`{"error":{"message":"the request waited for capacity longer than its priority band allows (max_queue_ms); retry later","type":"rate_limit_exceeded","code":429}}`)
)

// header writes the decision's destination into the request, or answers
// locally: 404 when no replica serves the request's model
// (TestModelNotServed), 503 when no replica is eligible
// (TestNoEligibleReplica), 429 when the best one's expected wait is over
// max_wait_ms (TestOverload429). ok says the request goes upstream.
func (r *root) header(d *scoring.Decision, now int64) (action types.Action, ok bool) {
	if d.Index < 0 && d.NoModel == len(r.view.replicas) {
		// Retrying cannot help: no Retry-After.
		return r.reject(404, detailsModelNotFound, modelNotFoundBody, r.stats.modelNotFound, 0), false
	}
	if d.Index < 0 {
		return r.reject(503, detailsUnavailable, r.unavailableBody(d), r.stats.unavailable, r.unavailableRetrySec(now)), false
	}
	if lim := r.cfg.MaxWaitSec; lim > 0 && d.Top[0].WaitSec > lim {
		// The best queue drains in about the time it holds, less the
		// wait the bound allows (TestOverload429).
		return r.reject(429, detailsOverloaded, overloadedBody, r.stats.overloaded, retrySec(d.Top[0].WaitSec-lim)), false
	}
	if err := r.writeDestination(d); err != nil {
		r.log.error("cannot set " + HeaderDestination + ": " + err.Error())
		return r.reject(503, detailsUnavailable, r.unavailableBody(d), r.stats.unavailable, r.unavailableRetrySec(now)), false
	}
	return types.ActionContinue, true
}

// unavailableRetrySec estimates, when no replica is eligible, how long
// until one may be: the soonest end of a passive ejection; a tick for a
// serving replica out for failed scrapes (the next scrape may bring it
// back) or without a slot for the adapter; the bound when every replica
// is draining or drained (TestNoEligibleReplica).
func (r *root) unavailableRetrySec(now int64) int64 {
	wait := float64(maxRetryAfterSec)
	tick := float64(r.cfg.TickMillis) / 1000
	for i := range r.view.replicas {
		if r.view.replicas[i].DrainAt(now) != scoring.Serving {
			continue
		}
		w := tick
		if r.health.ejected(i, now) {
			w = float64(r.health.entries[i].UntilNanos-now) / 1e9
		}
		wait = min(wait, w)
	}
	return retrySec(wait)
}

// retrySec rounds a wait up to whole seconds within the Retry-After bounds.
func retrySec(waitSec float64) int64 {
	if !(waitSec < maxRetryAfterSec) {
		return maxRetryAfterSec
	}
	return max(int64(math.Ceil(waitSec)), minRetryAfterSec)
}

// writeDestination replaces the destination header with the chosen
// replica, followed by the next best ones when fallbacks are configured
// (Envoy's override_host policy walks the list on retries).
func (r *root) writeDestination(d *scoring.Decision) error {
	replicas := r.view.replicas
	if r.cfg.Fallbacks == 0 || d.NumTop == 1 {
		return proxy.ReplaceHeaderMapValue(proxy.MapTypeHttpRequestHeaders, HeaderDestination, replicas[d.Index].Addr)
	}
	b := r.replies[:0]
	for i := 0; i < d.NumTop && i <= r.cfg.Fallbacks; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, replicas[d.Top[i].Index].Addr...)
	}
	r.replies = b
	return proxy.ReplaceHeaderMapValue(proxy.MapTypeHttpRequestHeaders, HeaderDestination, string(b))
}

// stripDestination removes every client-sent HeaderDestination. Envoy's
// replace removes all instances, but hosts differ (the SDK's proxytest
// removes only the first), so we remove until the lookup says NOT_FOUND.
// Header names reach the plugin lowercased (Envoy's codecs), so any case
// the client used is covered (TestClientDestinationReplaced).
func stripDestination(numHeaders int) {
	removeAll(proxy.MapTypeHttpRequestHeaders, HeaderDestination, numHeaders)
}

func removeAll(m proxy.MapType, name string, bound int) {
	for i := 0; i <= bound; i++ {
		if _, err := proxy.GetHeaderMapValue(m, name); err != nil {
			return
		}
		if proxy.RemoveHeaderMapValue(m, name) != nil {
			return
		}
	}
}

// reject answers the request locally, telling the client to retry after
// retryAfterSec (no Retry-After when it is 0), and counts it.
func (r *root) reject(status uint32, details string, body []byte, k stat, retryAfterSec int64) types.Action {
	r.stats.add(k, 1)
	headers := r.replyHeaders[:1]
	if retryAfterSec > 0 {
		// Itoa of a number below 100 allocates nothing.
		r.replyHeaders[1][1] = strconv.Itoa(int(retryAfterSec))
		headers = r.replyHeaders[:]
	}
	if err := proxy.SendLocalResponse(status, details, body, headers, proxy.NoGrpcStatus); err != nil {
		r.log.error("cannot send the local " + strconv.Itoa(int(status)) + ": " + err.Error())
	}
	return types.ActionPause
}

// unavailableBody explains a 503: why each replica was excluded, in counts
// (no request data is echoed).
func (r *root) unavailableBody(d *scoring.Decision) []byte {
	b := append(r.replies[:0], `{"error":{"message":"no eligible replica among `...)
	b = strconv.AppendInt(b, int64(len(r.view.replicas)), 10)
	b = append(b, `: `...)
	if d.NoModel > 0 { // only fleets that list models have such replicas
		b = strconv.AppendInt(b, int64(d.NoModel), 10)
		b = append(b, ` serving other models, `...)
	}
	b = strconv.AppendInt(b, int64(d.Unhealthy), 10)
	b = append(b, ` unhealthy, `...)
	b = strconv.AppendInt(b, int64(d.Draining), 10)
	b = append(b, ` draining or drained, `...)
	b = strconv.AppendInt(b, int64(d.NoAdapterSlot), 10)
	b = append(b, ` without a slot for the adapter","type":"service_unavailable","code":503}}`...)
	r.replies = b
	return b
}

// isPath reports whether the request path (query ignored) is want
// (TestStatusEndpointExactPath).
func isPath(path []byte, want string) bool {
	if i := bytes.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	return string(path) == want
}
