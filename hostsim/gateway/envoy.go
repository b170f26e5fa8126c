package gateway

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpuroute/gpuroute/hostsim"
)

// How Envoy answers when it cannot deliver a request, which the gateway
// reproduces so the plugin sees what it would see in Envoy. Envoy's router
// turns an upstream failure before any response byte into a local reply
// that runs through the encoder filters (the wasm filter's response
// callbacks included): status 503, a text/plain body "upstream connect
// error or disconnect/reset before headers. [retried and the latest ]reset
// reason: R[, transport failure reason: T]", and response code details
// "upstream_reset_before_response_started{r[|t]}" with spaces replaced by
// underscores; the response flags are UF for a connection failure, UC for a
// connection terminated before the response, URX added when the retries ran
// out (Envoy source/common/router/router.cc, Filter::onUpstreamReset and
// streamResetReasonToResponseFlag; source/common/http/utility.cc,
// resetReasonToString). An upstream response instead carries
// x-envoy-upstream-service-time and code details "via_upstream". The plugin
// tells the two apart by those (plugin/router/health.go); the gateway sets
// the response.code_details and upstream.address properties it reads.
const (
	headerUpstreamServiceTime = "x-envoy-upstream-service-time"
	detailsViaUpstream        = "via_upstream"
	detailsNoHealthyUpstream  = "no_healthy_upstream"
	bodyNoHealthyUpstream     = "no healthy upstream"
	flagNoHealthyUpstream     = "UH"
	flagRetriesExhausted      = "URX"
)

var (
	propertyCodeDetails     = hostsim.PropertyPath("response", "code_details")
	propertyUpstreamAddress = hostsim.PropertyPath("upstream", "address")
)

// upstreamFailure is one way a request can fail before its response
// started, as Envoy's router names it.
type upstreamFailure struct {
	reason    string // Http::Utility::resetReasonToString
	transport string // transport failure reason, "" for none
	flag      string // response flag
}

// Failures the gateway can observe through net/http. Refused and
// unreachable connections are Envoy's RemoteConnectionFailure with the
// socket error as the transport failure reason; a dial timeout is
// ConnectionTimeout; a connection closed or reset before response headers
// is ConnectionTermination.
var (
	failureRefused     = upstreamFailure{reason: "remote connection failure", transport: "delayed connect error: Connection refused", flag: "UF"}
	failureUnreachable = upstreamFailure{reason: "remote connection failure", transport: "delayed connect error: No route to host", flag: "UF"}
	failureTimeout     = upstreamFailure{reason: "connection timeout", flag: "UF"}
	failureTerminated  = upstreamFailure{reason: "connection termination", flag: "UC"}
)

// classifyFailure maps a transport error of an upstream request to Envoy's
// reset reason; ok is false for errors that are not the upstream's (the
// client went away).
func classifyFailure(err error) (upstreamFailure, bool) {
	var op *net.OpError
	switch {
	case errors.Is(err, context.Canceled):
		return upstreamFailure{}, false
	case errors.Is(err, syscall.ECONNREFUSED):
		return failureRefused, true
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return failureUnreachable, true
	case errors.As(err, &op) && op.Op == "dial":
		if op.Timeout() {
			return failureTimeout, true
		}
		return failureRefused, true
	}
	return failureTerminated, true
}

// body is the local reply's body; retried says whether the request was
// retried before this failure.
func (f upstreamFailure) body(retried bool) string {
	b := "upstream connect error or disconnect/reset before headers. "
	if retried {
		b += "retried and the latest "
	}
	b += "reset reason: " + f.reason
	if f.transport != "" {
		b += ", transport failure reason: " + f.transport
	}
	return b
}

// details is the local reply's response code details.
func (f upstreamFailure) details() string {
	d := f.reason
	if f.transport != "" {
		d += "|" + f.transport
	}
	return "upstream_reset_before_response_started{" + strings.ReplaceAll(d, " ", "_") + "}"
}

// flags is the response flags of the failure: URX first when retries ran
// out (Envoy prints flags in its own fixed order, URX before UF).
func (f upstreamFailure) flags(retried bool) string {
	if retried {
		return flagRetriesExhausted + "," + f.flag
	}
	return f.flag
}

// envoyReply is a response Envoy generated itself.
type envoyReply struct {
	status  int
	body    string
	details string
	flags   string
}

func failureReply(f upstreamFailure, retried bool) envoyReply {
	return envoyReply{status: http.StatusServiceUnavailable, body: f.body(retried), details: f.details(), flags: f.flags(retried)}
}

// noHealthyUpstream is Envoy's reply when the load balancer has no host:
// an ORIGINAL_DST cluster whose request carries no destination header.
var noHealthyUpstream = envoyReply{status: http.StatusServiceUnavailable, body: bodyNoHealthyUpstream,
	details: detailsNoHealthyUpstream, flags: flagNoHealthyUpstream}

// headers are the local reply's headers as Envoy's sendLocalReply sets them.
func (e envoyReply) headers() http.Header {
	return http.Header{"Content-Type": {"text/plain"}, "Content-Length": {strconv.Itoa(len(e.body))}}
}

// Envoy's default retry back-off: fully jittered, the k-th retry waits a
// random time in [0, (2^k − 1) × 25 ms], at most 250 ms (the route's
// retry_back_off defaults: base_interval 25 ms, max_interval 10 × base;
// Envoy docs, x-envoy-max-retries).
const (
	retryBaseInterval = 25 * time.Millisecond
	retryMaxInterval  = 10 * retryBaseInterval
)

func retryBackoff(k int) time.Duration {
	ceiling := min(retryBaseInterval*time.Duration(1<<min(k, 10)-1), retryMaxInterval)
	return time.Duration(rand.Int64N(int64(ceiling) + 1))
}

// envoyCluster is a proxy_http_call cluster that answers a failed
// connection as Envoy's async client does: the router's local reply (503
// and the "upstream connect error" body), which the plugin sees as a
// response, not a timeout. A call slower than its timeout still gets no
// answer (hostsim.HTTPCluster).
type envoyCluster struct {
	base string
	rt   http.RoundTripper
}

var _ hostsim.Cluster = (*envoyCluster)(nil)

func (c *envoyCluster) Handle(req *hostsim.CallRequest) hostsim.CallReply {
	var failure error
	start := time.Now()
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := c.rt.RoundTrip(r)
		failure = err
		return resp, err
	})}
	reply := (&hostsim.HTTPCluster{BaseURL: c.base, Client: client}).Handle(req)
	if !reply.NoAnswer || failure == nil {
		return reply
	}
	f, ok := classifyFailure(failure)
	timedOut := req.Timeout > 0 && time.Since(start) >= req.Timeout
	if !ok || f == failureTimeout || timedOut {
		return reply
	}
	e := failureReply(f, false)
	var hdrs [][2]string
	for k, vs := range e.headers() {
		hdrs = append(hdrs, [2]string{strings.ToLower(k), vs[0]})
	}
	return hostsim.CallReply{Status: e.status, Headers: hdrs, Body: []byte(e.body)}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
