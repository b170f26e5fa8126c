package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gpuroute/gpuroute/hostsim"
)

// proxied is one request on its way through the plugin.
type proxied struct {
	g   *Gateway
	s   *hostsim.Stream
	w   http.ResponseWriter
	req *http.Request
	ctx context.Context
	// requested is when the request was fully read: Envoy's
	// x-envoy-upstream-service-time counts from there.
	requested time.Time
}

// errReset reports that the plugin closed the stream (no local reply).
var errReset = errors.New("gateway: stream reset by the plugin")

func (p *proxied) serve() {
	g, s, req := p.g, p.s, p.req
	hdrs := [][2]string{{":method", req.Method}, {":path", req.URL.RequestURI()}, {":authority", req.Host}, {":scheme", "http"}}
	for k, vs := range req.Header {
		lk := strings.ToLower(k)
		if hopByHop[lk] {
			continue
		}
		for _, v := range vs {
			hdrs = append(hdrs, [2]string{lk, v})
		}
	}
	if req.Header.Get("x-request-id") == "" {
		hdrs = append(hdrs, [2]string{"x-request-id", requestID()}) // Envoy generates one
	}
	hasBody := req.Body != nil && req.Body != http.NoBody && req.ContentLength != 0
	if _, err := s.RequestHeaders(hdrs, !hasBody); err != nil {
		g.localError(p.w, http.StatusInternalServerError, "gateway: request headers: "+err.Error())
		return
	}
	if p.finishedEarly() {
		return
	}
	if hasBody {
		if !p.requestBody() {
			return
		}
	}
	// A plugin may hold the request (PAUSE) until it calls continue; wait
	// for it like Envoy would, or for the client to give up.
	if !p.waitFor(func() bool { return !s.RequestPaused() }) {
		return
	}
	p.requested = time.Now()
	dest, ok := s.RequestHeader(HeaderDestination)
	if !ok || dest == "" {
		// ORIGINAL_DST with use_http_header and no header: no host.
		p.envoyReply(noHealthyUpstream, "")
		return
	}
	resp, addr, failed := p.upstream(dest)
	switch {
	case p.resetByPlugin():
		panic(http.ErrAbortHandler)
	case p.ctx.Err() != nil:
		return // client gone
	case resp == nil:
		p.envoyReply(failed, addr)
		return
	}
	defer resp.Body.Close()
	p.s.SetProperty(propertyCodeDetails, []byte(detailsViaUpstream))
	p.s.SetProperty(propertyUpstreamAddress, []byte(addr))
	resp.Header.Set(headerUpstreamServiceTime, strconv.FormatInt(time.Since(p.requested).Milliseconds(), 10))
	if err := p.respond(resp.StatusCode, resp.Header, resp.Body, resp.ContentLength, resp.Trailer); err != nil {
		if errors.Is(err, errReset) || p.resetByPlugin() {
			g.log.Print("gateway: ", errReset, " while streaming from ", addr)
		} else if p.ctx.Err() == nil {
			g.log.Print("gateway: response from ", addr, ": ", err)
		}
		// Headers are out: all a proxy can do is reset the downstream stream.
		panic(http.ErrAbortHandler)
	}
}

// envoyReply answers a response Envoy would generate itself, through the
// plugin's response callbacks as Envoy's local replies go through the
// encoder filters, and logs it as Envoy's access log would show it
// (status, response flags, code details).
func (p *proxied) envoyReply(e envoyReply, addr string) {
	p.s.SetProperty(propertyCodeDetails, []byte(e.details))
	if addr != "" {
		p.s.SetProperty(propertyUpstreamAddress, []byte(addr))
	}
	p.g.log.Printf("gateway: %q %d %s %s upstream %q", p.req.Method+" "+p.req.URL.Path, e.status, e.flags, e.details, addr)
	if err := p.respond(e.status, e.headers(), strings.NewReader(e.body), int64(len(e.body)), nil); err != nil {
		panic(http.ErrAbortHandler)
	}
}

// finishedEarly answers a local reply or a reset, if the plugin made one.
func (p *proxied) finishedEarly() bool {
	if lr := p.s.LocalReply(); lr != nil {
		h := p.w.Header()
		for _, kv := range lr.Headers {
			if !strings.HasPrefix(kv[0], ":") {
				h.Add(kv[0], kv[1])
			}
		}
		if len(lr.Body) > 0 && h.Get("content-type") == "" {
			h.Set("Content-Type", "text/plain")
		}
		h.Set("Content-Length", strconv.Itoa(len(lr.Body)))
		p.w.WriteHeader(lr.Status)
		_, _ = p.w.Write(lr.Body)
		return true
	}
	if p.s.Ended() {
		panic(http.ErrAbortHandler)
	}
	return false
}

// requestBody feeds the body to the plugin as it arrives; hostsim
// accumulates it while the plugin pauses (StopIterationAndBuffer).
func (p *proxied) requestBody() bool {
	body := io.LimitReader(p.req.Body, p.g.opts.MaxRequestBytes+1)
	buf := make([]byte, 32<<10)
	var total int64
	for {
		n, err := body.Read(buf)
		total += int64(n)
		if total > p.g.opts.MaxRequestBytes {
			p.g.localError(p.w, http.StatusRequestEntityTooLarge, "gateway: request body over "+strconv.FormatInt(p.g.opts.MaxRequestBytes, 10)+" bytes")
			return false
		}
		eos := errors.Is(err, io.EOF)
		if err != nil && !eos {
			return false // client gone
		}
		if n > 0 || eos {
			if _, err := p.s.RequestBody(buf[:n], eos); err != nil {
				p.g.localError(p.w, http.StatusInternalServerError, "gateway: request body: "+err.Error())
				return false
			}
			if p.finishedEarly() {
				return false
			}
		}
		if eos {
			return true
		}
	}
}

// waitFor polls cond each clock step until it holds (true) or the request
// ends (false).
func (p *proxied) waitFor(cond func() bool) bool {
	for !cond() {
		if p.finishedEarly() {
			return false
		}
		select {
		case <-p.ctx.Done():
			return false
		case <-time.After(p.g.opts.ClockStep):
			p.g.syncClock()
		}
	}
	return !p.finishedEarly()
}

func (p *proxied) resetByPlugin() bool {
	return p.s.Closed(hostsim.StreamResponse) || p.s.Closed(hostsim.StreamRequest)
}

// upstream sends the request, as the plugin left it, to the first address
// of dest, and retries a connection failure or a reset before the response
// as Envoy's route retry policy does with override_host's list: attempt k
// goes to the k-th address (the last one again once the list is used up,
// as ORIGINAL_DST's single address is), after Envoy's default back-off. It
// returns the response and the address that gave it, or the last failure
// and the address that failed.
func (p *proxied) upstream(dest string) (*http.Response, string, envoyReply) {
	addrs := strings.Split(dest, ",")
	attempts := 1 + p.g.retries()
	body := p.s.RequestBodyForwarded()
	path := p.req.URL.RequestURI()
	if v, ok := p.s.RequestHeader(":path"); ok {
		path = v
	}
	var addr string
	var last upstreamFailure
	for k := 0; k < attempts; k++ {
		if k > 0 {
			select {
			case <-time.After(retryBackoff(k)):
			case <-p.ctx.Done():
				return nil, addr, envoyReply{}
			}
		}
		addr = strings.TrimSpace(addrs[min(k, len(addrs)-1)])
		out, err := http.NewRequestWithContext(p.ctx, p.req.Method, "http://"+addr+path, bytes.NewReader(body))
		if err != nil {
			// Not a host:port: the load balancer has no such host.
			return nil, addr, noHealthyUpstream
		}
		for _, kv := range p.s.RequestHeaderMap() {
			switch {
			case kv[0] == ":authority":
				out.Host = kv[1]
			case strings.HasPrefix(kv[0], ":"), kv[0] == "content-length", hopByHop[kv[0]]:
			default:
				out.Header.Add(kv[0], kv[1])
			}
		}
		out.ContentLength = int64(len(body))
		resp, err := p.g.client.Do(out)
		if err == nil {
			return resp, addr, envoyReply{}
		}
		f, upstreamFault := classifyFailure(err)
		if !upstreamFault || p.ctx.Err() != nil {
			return nil, addr, envoyReply{}
		}
		last = f
		p.g.log.Printf("gateway: upstream %s attempt %d of %d: %s (%v)", addr, k+1, attempts, f.details(), err)
	}
	return nil, addr, failureReply(last, attempts > 1)
}

// respond runs a response (the upstream's, or Envoy's own) through the
// plugin's response callbacks and on to the client, flushing each chunk as
// it arrives.
func (p *proxied) respond(status int, header http.Header, body io.Reader, contentLength int64, trailer http.Header) error {
	s := p.s
	hdrs := [][2]string{{":status", strconv.Itoa(status)}}
	for k, vs := range header {
		lk := strings.ToLower(k)
		if hopByHop[lk] {
			continue
		}
		for _, v := range vs {
			hdrs = append(hdrs, [2]string{lk, v})
		}
	}
	if _, err := s.ResponseHeaders(hdrs, false); err != nil {
		return err
	}
	if s.LocalReply() != nil {
		// A local reply before anything went downstream replaces the response.
		p.finishedEarly()
		return nil
	}
	if s.Ended() {
		return errReset
	}
	flusher, _ := p.w.(http.Flusher)
	headersSent := false
	sendHeaders := func() {
		if headersSent || s.ResponsePaused() {
			return
		}
		headersSent = true
		h := p.w.Header()
		for _, kv := range s.ResponseHeaderMap() {
			switch {
			case kv[0] == ":status":
				if n, err := strconv.Atoi(kv[1]); err == nil {
					status = n
				}
			case strings.HasPrefix(kv[0], ":"), kv[0] == "content-length":
				// The plugin may rewrite the body: let net/http frame it.
			default:
				h.Add(kv[0], kv[1])
			}
		}
		p.w.WriteHeader(status)
		if flusher != nil {
			flusher.Flush()
		}
	}
	sendHeaders()
	var sent int // bytes of the forwarded body already written downstream
	buf := make([]byte, 32<<10)
	var read int64
	for {
		n, err := body.Read(buf)
		read += int64(n)
		eos := errors.Is(err, io.EOF) || (contentLength >= 0 && read >= contentLength && err == nil)
		if err != nil && !eos {
			return err
		}
		p.g.syncClock()
		if n > 0 || eos {
			if _, err := s.ResponseBody(buf[:n], eos); err != nil {
				return err
			}
			if p.resetByPlugin() || s.Ended() {
				return errReset
			}
			sendHeaders()
			if headersSent {
				if fwd := s.ResponseBodyForwardedFrom(sent); len(fwd) > 0 {
					if _, err := p.w.Write(fwd); err != nil {
						return err
					}
					sent += len(fwd)
				}
				if flusher != nil {
					flusher.Flush()
				}
			}
		}
		if eos {
			break
		}
	}
	if len(trailer) > 0 {
		var tr [][2]string
		for k, vs := range trailer {
			for _, v := range vs {
				tr = append(tr, [2]string{strings.ToLower(k), v})
			}
		}
		if _, err := s.ResponseTrailers(tr); err != nil {
			return err
		}
	}
	if !headersSent {
		// Still paused at the end: Envoy would hold it until continue; we
		// release it rather than hang the client.
		p.w.WriteHeader(status)
		_, _ = p.w.Write(s.ResponseBodyForwarded())
	}
	return nil
}
