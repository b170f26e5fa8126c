package hostsim

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"time"
)

// HTTPCluster is a Cluster backed by a real HTTP server (e.g. an
// httptest.Server on loopback): each proxy_http_call becomes a real request
// to BaseURL + :path, made synchronously while the guest's call is in
// progress. The reply is delivered after Latency of virtual time (default 0:
// on the next Advance or at the end of the current call).
type HTTPCluster struct {
	BaseURL string        // e.g. "http://127.0.0.1:8080"
	Client  *http.Client  // nil means http.DefaultClient
	Latency time.Duration // virtual delivery delay
}

var _ Cluster = (*HTTPCluster)(nil)

// Handle performs the request; a transport error or a response slower than
// the call's timeout (in real time) becomes a timeout.
func (c *HTTPCluster) Handle(req *CallRequest) CallReply {
	client := c.Client
	if client == nil {
		client = http.DefaultClient
	}
	hreq, err := http.NewRequest(req.Method, strings.TrimRight(c.BaseURL, "/")+req.Path, bytes.NewReader(req.Body))
	if err != nil {
		return CallReply{NoAnswer: true}
	}
	hreq.Host = req.Authority
	for _, kv := range req.Headers {
		if !strings.HasPrefix(kv[0], ":") {
			hreq.Header.Add(kv[0], kv[1])
		}
	}
	if req.Timeout > 0 {
		cl := *client
		cl.Timeout = req.Timeout
		client = &cl
	}
	resp, err := client.Do(hreq)
	if err != nil {
		return CallReply{NoAnswer: true}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return CallReply{NoAnswer: true}
	}
	var hdrs [][2]string
	for k, vs := range resp.Header {
		for _, v := range vs {
			hdrs = append(hdrs, [2]string{strings.ToLower(k), v})
		}
	}
	return CallReply{Status: resp.StatusCode, Headers: hdrs, Body: body, Latency: c.Latency}
}
