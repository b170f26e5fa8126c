package loadgen

import (
	"errors"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
)

// Proxy policies: the rotation and the least-busy choice a general-purpose
// load balancer offers (Envoy's ROUND_ROBIN and LEAST_REQUEST scanning all
// hosts), as references beside the routers under test.
const (
	ProxyRoundRobin   = "round-robin"
	ProxyLeastRequest = "least-request"
)

// Proxy is a streaming reverse proxy over upstreams with a fixed policy.
type Proxy struct {
	policy   string
	backends []*httputil.ReverseProxy
	mu       sync.Mutex
	next     int
	inflight []int
}

var _ http.Handler = (*Proxy)(nil)

// NewProxy returns a proxy over upstream base URLs with policy.
func NewProxy(policy string, upstreams []string) (*Proxy, error) {
	if policy != ProxyRoundRobin && policy != ProxyLeastRequest {
		return nil, errors.New("loadgen: proxy policy must be " + ProxyRoundRobin + " or " + ProxyLeastRequest + ", got " + strconv.Quote(policy))
	}
	if len(upstreams) == 0 {
		return nil, errors.New("loadgen: proxy needs at least one upstream")
	}
	p := &Proxy{policy: policy, inflight: make([]int, len(upstreams))}
	for _, u := range upstreams {
		target, err := url.Parse(u)
		if err != nil || target.Host == "" {
			return nil, errors.New("loadgen: upstream " + strconv.Quote(u) + " is not a URL")
		}
		rp := httputil.NewSingleHostReverseProxy(target)
		rp.FlushInterval = -1 // stream each SSE event as it comes
		p.backends = append(p.backends, rp)
	}
	return p, nil
}

func (p *Proxy) choose() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := 0
	if p.policy == ProxyRoundRobin {
		i = p.next
		p.next = (p.next + 1) % len(p.backends)
	} else {
		for k := range p.inflight {
			if p.inflight[k] < p.inflight[i] {
				i = k
			}
		}
	}
	p.inflight[i]++
	return i
}

// ServeHTTP forwards the request to the chosen upstream.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	i := p.choose()
	defer func() {
		p.mu.Lock()
		p.inflight[i]--
		p.mu.Unlock()
	}()
	// The upstream answers once it has the whole body, while the transport
	// may not have read the body's end yet: without full duplex the
	// server would discard the rest of the body as the response begins,
	// under the transport's read, and the transport would drop the
	// upstream connection mid-response (TestRunThroughProxies, under load).
	_ = http.NewResponseController(w).EnableFullDuplex()
	p.backends[i].ServeHTTP(w, r)
}
