package router

import (
	"bytes"
	"strconv"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/gpuroute/gpuroute/plugin/proxy"
	"github.com/gpuroute/gpuroute/scoring"
)

// What a request leaves with: the destination header Envoy routes by, or a
// local reply when no replica can take it.

// jsonHeaders are the headers of every local reply; shared, never modified.
var jsonHeaders = [][2]string{{"content-type", "application/json"}}

// overloadedBody is the 429 body, in the shape OpenAI's API uses for errors.
var overloadedBody = []byte(`{"error":{"message":"every eligible replica is over the configured queue bound (max_wait_ms); retry later","type":"rate_limit_exceeded","code":429}}`)

// modelNotFoundBody is the 404 body for a model no replica serves, with
// the type and code OpenAI's API answers an unknown model with (the model
// is not echoed: no request data is).
var modelNotFoundBody = []byte(`{"error":{"message":"no replica serves the requested model","type":"invalid_request_error","param":"model","code":"model_not_found"}}`)

// header writes the decision's destination into the request, or answers
// locally: 404 when no replica serves the request's model
// (TestModelNotServed), 503 when no replica is eligible
// (TestNoEligibleReplica), 429 when the best one's expected wait is over
// max_wait_ms (TestOverload429). ok says the request goes upstream.
func (r *root) header(d *scoring.Decision) (action types.Action, ok bool) {
	if d.Index < 0 && d.NoModel == len(r.view.replicas) {
		return r.reject(404, detailsModelNotFound, modelNotFoundBody, r.stats.modelNotFound), false
	}
	if d.Index < 0 {
		return r.reject(503, detailsUnavailable, r.unavailableBody(d), r.stats.unavailable), false
	}
	if lim := r.cfg.MaxWaitSec; lim > 0 && d.Top[0].WaitSec > lim {
		return r.reject(429, detailsOverloaded, overloadedBody, r.stats.overloaded), false
	}
	if err := r.writeDestination(d); err != nil {
		r.log.error("cannot set " + HeaderDestination + ": " + err.Error())
		return r.reject(503, detailsUnavailable, r.unavailableBody(d), r.stats.unavailable), false
	}
	return types.ActionContinue, true
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
	b := append(r.replies[:0], `{"error":{"message":"no eligible replica among `...)
	b = strconv.AppendInt(b, int64(len(r.view.replicas)), 10)
	b = append(b, `: `...)
	b = strconv.AppendInt(b, int64(d.NoModel), 10)
	b = append(b, ` serving other models, `...)
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
