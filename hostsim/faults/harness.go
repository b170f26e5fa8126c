package faults

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gpuroute/gpuroute/hostsim"
)

// Wire names the harness shares with the plugin (plugin/router's constants;
// hostsim must not import plugin code, so they are repeated here).
const (
	vmID              = "gpuroute"
	rootName          = "gpuroute"
	headerDestination = "x-gateway-destination-endpoint"
	keyPrefixIndex    = "gpuroute/prefix-share/6"
	statScrapes       = "gpuroute_scrapes_total"
	statScrapeFails   = "gpuroute_scrape_failures_total"
	statLeaseChanges  = "gpuroute_lease_changes_total"
	statDrainResets   = "gpuroute_drain_resets_total"
	statPrefixHits    = "gpuroute_prefix_hit_tokens_total"
	statPromptTokens  = "gpuroute_prompt_tokens_total"
	statPanics        = "gpuroute_panics_total"
	statPassiveEjects = "gpuroute_passive_ejections_total"
	statPeerFailures  = "gpuroute_peer_failures_total"
)

// start is the virtual wall clock's origin: drain deadlines in
// configurations are absolute Unix milliseconds.
var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// replica is a fake model server: a metrics endpoint (vLLM text format)
// behind its Envoy cluster and an upstream that accepts or refuses streams.
type replica struct {
	name, addr, cluster string
	down                bool // crashed: connections refused, metrics unanswered
	waiting, running    int
	// fault, when set, answers the scrape instead of the healthy body;
	// n counts this replica's scrapes from 1.
	fault   func(n int) (hostsim.CallReply, bool)
	scrapes int
	served  int
	// scrapeAt records the virtual time of every scrape (gap measurements).
	scrapeAt []time.Duration
}

func (r *replica) handle(req *hostsim.CallRequest) hostsim.CallReply {
	r.scrapes++
	r.scrapeAt = append(r.scrapeAt, req.Now)
	if r.down {
		return hostsim.CallReply{NoAnswer: true}
	}
	if r.fault != nil {
		if rep, ok := r.fault(r.scrapes); ok {
			return rep
		}
	}
	return hostsim.CallReply{Body: []byte(r.metricsBody()), Latency: 5 * time.Millisecond}
}

func (r *replica) metricsBody() string {
	return "# TYPE vllm:num_requests_waiting gauge\n" +
		"vllm:num_requests_waiting{model_name=\"llama-3-8b\"} " + strconv.Itoa(r.waiting) + "\n" +
		"vllm:num_requests_running{model_name=\"llama-3-8b\"} " + strconv.Itoa(r.running) + "\n" +
		"vllm:kv_cache_usage_perc{model_name=\"llama-3-8b\"} 0.250\n" +
		"vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"25000\"} 1\n"
}

// flight is a stream whose response is still streaming.
type flight struct {
	s       *hostsim.Stream
	rep     *replica
	w       int
	content string
}

// env is one scenario's Envoy: a Host, its worker VMs of the module, the
// fake replicas and the client's tallies.
type env struct {
	opts   Options
	res    *Result
	h      *hostsim.Host
	mod    *hostsim.Module
	vms    []*hostsim.VM
	reps   []*replica
	byAddr map[string]*replica
	open   []*flight
	extra  string
}

// newEnv starts workers VMs configured with replicas fake replicas and the
// extra configuration keys (a JSON fragment starting with a comma).
func newEnv(o Options, res *Result, workers, replicas int, extra string) (*env, error) {
	h := hostsim.NewHost(hostsim.Options{Start: start, LogLevel: hostsim.LogWarn, Seed: 1})
	mod, err := h.Compile(context.Background(), o.Wasm)
	if err != nil {
		h.Close()
		return nil, err
	}
	e := &env{opts: o, res: res, h: h, mod: mod, byAddr: map[string]*replica{}, extra: extra}
	for i := range replicas {
		r := &replica{
			name:    "r" + strconv.Itoa(i),
			addr:    "10.0.0." + strconv.Itoa(i+1) + ":8000",
			cluster: "r" + strconv.Itoa(i) + "-metrics",
		}
		e.reps = append(e.reps, r)
		e.byAddr[r.addr] = r
		h.AddCluster(r.cluster, hostsim.ClusterFunc(r.handle))
	}
	if err := e.addVMs(mod, workers); err != nil {
		h.Close()
		return nil, err
	}
	return e, nil
}

// addVMs starts n more worker VMs of mod and configures them.
func (e *env) addVMs(mod *hostsim.Module, n int) error {
	cfg := e.config(e.extra, nil)
	for range n {
		vm, err := e.h.NewVM(context.Background(), mod, vmID, nil)
		if err != nil {
			return err
		}
		if _, err := vm.Configure(rootName, []byte(cfg)); err != nil {
			return err
		}
		e.vms = append(e.vms, vm)
	}
	return nil
}

func (e *env) close() {
	e.res.ErrorLogs += e.errorLogs()
	e.h.Close()
}

func (e *env) errorLogs() int {
	n := 0
	for _, l := range e.h.Logs() {
		if l.Level >= hostsim.LogError {
			n++
		}
	}
	return n
}

// config renders the plugin configuration; states maps a replica index to
// extra keys of its entry (e.g. `"state":"draining"`).
func (e *env) config(extra string, states map[int]string) string {
	var b strings.Builder
	b.WriteString(`{`)
	if !strings.Contains(extra, `"tick_ms"`) {
		b.WriteString(`"tick_ms":100,`)
	}
	b.WriteString(`"replicas":[`)
	for i, r := range e.reps {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"name":"` + r.name + `","address":"` + r.addr + `","metrics_cluster":"` + r.cluster + `"`)
		if s, ok := states[i]; ok {
			b.WriteString("," + s)
		}
		b.WriteByte('}')
	}
	b.WriteString("]" + extra + "}")
	return b.String()
}

// reconfigure sends cfg to every live VM; it returns how many refused it.
func (e *env) reconfigure(cfg string) (refused int) {
	for _, vm := range e.vms {
		if _, err := vm.Configure(rootName, []byte(cfg)); err != nil {
			if errors.Is(err, hostsim.ErrVMFailed) {
				e.fail(err)
			}
			refused++
		}
	}
	return refused
}

// fail records the first error; a trap also marks the result.
func (e *env) fail(err error) {
	if err == nil {
		return
	}
	if errors.Is(err, hostsim.ErrVMFailed) {
		e.res.Trapped = true
	}
	if e.res.Err == nil {
		e.res.Err = err
	}
}

func (e *env) failed() bool { return e.res.Err != nil }

func (e *env) advance(d time.Duration) {
	e.fail(e.h.Advance(d))
}

func (e *env) metric(name string) int64 {
	m, _ := e.h.Metric(name)
	return m.Value
}

// tenants are shared system prompts: requests of one tenant share a long
// prefix, which is what prefix affinity is about.
var tenants = func() []string {
	out := make([]string, 8)
	for i := range out {
		out[i] = strings.Repeat("tenant "+strconv.Itoa(i)+" system prompt, ", 24)
	}
	return out
}()

// content is request i's prompt.
func content(i int) string { return tenants[i%len(tenants)] + "question " + strconv.Itoa(i) }

var requestHeaders = [][2]string{
	{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "gateway"},
	{"content-type", "application/json"},
}

func chatBody(content string) []byte {
	return []byte(`{"model":"llama-3-8b","stream":true,"max_tokens":64,"messages":[{"role":"user","content":"` + content + `"}]}`)
}

// Response headers as Envoy forwards them: an upstream's answer carries
// x-envoy-upstream-service-time (Envoy's router adds it), Envoy's own
// local reply does not; both get server: envoy.
var (
	upstreamOK = [][2]string{{":status", "200"}, {"content-type", "text/event-stream"},
		{"x-envoy-upstream-service-time", "4"}, {"server", "envoy"}}
	envoyConnectFailure = [][2]string{{":status", "503"}, {"content-type", "text/plain"},
		{"server", "envoy"}}
)

var (
	sseChunk = []byte(`data: {"choices":[{"delta":{"content":"tok"}}]}` + "\n\n")
	sseDone  = []byte("data: [DONE]\n\n")
)

// dispatch runs one attempt's request phase through worker w's plugin and
// Envoy's choice of upstream. It returns the stream, the replica that
// accepted it (nil: every listed destination refused) or the plugin's
// local reply.
func (e *env) dispatch(w int, content string) (*hostsim.Stream, *replica, *hostsim.LocalReply, error) {
	root := e.vms[w].Root(rootName)
	if root == nil {
		return nil, nil, nil, errors.New("faults: worker " + strconv.Itoa(w) + " has no serving root")
	}
	s, err := root.NewStream()
	if err != nil {
		return nil, nil, nil, err
	}
	if _, err := s.RequestHeaders(requestHeaders, false); err != nil {
		return s, nil, nil, err
	}
	if lr := s.LocalReply(); lr != nil {
		return s, nil, lr, nil
	}
	if _, err := s.RequestBody(chatBody(content), true); err != nil {
		return s, nil, nil, err
	}
	if lr := s.LocalReply(); lr != nil {
		return s, nil, lr, nil
	}
	dst, ok := s.RequestHeader(headerDestination)
	if !ok {
		return s, nil, nil, errors.New("faults: request routed without " + headerDestination)
	}
	for i, addr := range strings.Split(dst, ",") {
		rep := e.byAddr[addr]
		if rep == nil {
			return s, nil, nil, errors.New("faults: destination " + strconv.Quote(addr) + " is no replica")
		}
		if !rep.down {
			if i > 0 {
				e.res.Failover++
			}
			return s, rep, nil, nil
		}
	}
	// Envoy answers the refused connection with its own 503 (a local
	// reply, response code details upstream_reset_before_response_started
	// {connection_failure}), through the filter's response callbacks: no
	// x-envoy-upstream-service-time, which only upstream responses carry.
	_, err = s.ResponseHeaders(envoyConnectFailure, false)
	if err == nil {
		_, err = s.ResponseBody([]byte("upstream connect error or disconnect/reset before headers. reset reason: connection failure"), true)
	}
	return s, nil, nil, err
}

// finish streams the rest of a response and ends the stream.
func (e *env) finish(s *hostsim.Stream, rep *replica, headersSent bool) error {
	if !headersSent {
		if _, err := s.ResponseHeaders(upstreamOK, false); err != nil {
			return err
		}
		if _, err := s.ResponseBody(sseChunk, false); err != nil {
			return err
		}
	}
	if _, err := s.ResponseBody(sseDone, true); err != nil {
		return err
	}
	rep.served++
	return s.Done()
}

// attempt runs one attempt to the end; it reports whether the request was
// answered (completed or answered locally).
func (e *env) attempt(w int, content string) bool {
	s, rep, lr, err := e.dispatch(w, content)
	if err != nil {
		e.fail(err)
		if s != nil {
			_ = s.Done()
		}
		return false
	}
	if lr != nil {
		e.res.local(lr.Status)
		e.fail(s.Done())
		return true
	}
	if rep == nil {
		e.fail(s.Done())
		return false
	}
	if err := e.finish(s, rep, false); err != nil {
		e.fail(err)
		return false
	}
	e.res.Completed++
	return true
}

// request is one client request: an attempt, and one re-send through the
// next worker if it failed.
func (e *env) request(w int, content string) {
	e.res.Sent++
	if e.attempt(w, content) {
		return
	}
	e.resend(w, content)
}

// resend is the client's one retry of a failed or reset request.
func (e *env) resend(w int, content string) {
	if e.failed() {
		e.res.Lost++
		return
	}
	e.res.Retried++
	if !e.attempt((w+1)%len(e.vms), content) {
		e.res.Lost++
	}
}

// load sends n requests round-robin over the workers, 100 per virtual
// second per worker (one every 10 ms per VM).
func (e *env) load(n, from int) {
	for i := range n {
		if e.failed() {
			return
		}
		if i%len(e.vms) == 0 {
			e.advance(10 * time.Millisecond)
		}
		e.request(i%len(e.vms), content(from+i))
	}
}

// openFlights starts n requests whose responses keep streaming.
func (e *env) openFlights(n, from int) {
	for i := range n {
		w := i % len(e.vms)
		c := content(from + i)
		e.res.Sent++
		s, rep, lr, err := e.dispatch(w, c)
		switch {
		case err != nil:
			e.fail(err)
			return
		case lr != nil:
			e.res.local(lr.Status)
			e.fail(s.Done())
		case rep == nil:
			e.fail(s.Done())
			e.resend(w, c)
		default:
			if _, err := s.ResponseHeaders(upstreamOK, false); err != nil {
				e.fail(err)
				return
			}
			if _, err := s.ResponseBody(sseChunk, false); err != nil {
				e.fail(err)
				return
			}
			e.open = append(e.open, &flight{s: s, rep: rep, w: w, content: c})
		}
	}
}

// reap re-sends the open streams a drain deadline ended (the plugin reset
// them); the rest keep streaming.
func (e *env) reap() {
	keep := e.open[:0]
	for _, f := range e.open {
		if f.s.Ended() {
			e.res.DrainEnded++
			e.fail(f.s.Done())
			e.resend(f.w, f.content)
			continue
		}
		keep = append(keep, f)
	}
	e.open = keep
}

// crash takes a replica down: its streams are reset (the client re-sends
// them), its connections refused and its metrics unanswered.
func (e *env) crash(r *replica) int {
	r.down = true
	n := 0
	keep := e.open[:0]
	for _, f := range e.open {
		if f.rep != r {
			keep = append(keep, f)
			continue
		}
		n++
		e.fail(f.s.Done())
		e.resend(f.w, f.content)
	}
	e.open = keep
	return n
}

// finishAll completes every open stream (after reaping drain resets).
func (e *env) finishAll() {
	e.reap()
	for _, f := range e.open {
		if e.failed() {
			e.res.Lost++
			continue
		}
		if err := e.finish(f.s, f.rep, true); err != nil {
			e.fail(err)
			e.res.Lost++
			continue
		}
		e.res.Completed++
	}
	e.open = e.open[:0]
}

// shares renders each replica's share of the streams it served.
func (e *env) shares() string {
	var b strings.Builder
	b.WriteString("served")
	for _, r := range e.reps {
		fmt.Fprintf(&b, " %s=%d", r.name, r.served)
	}
	return b.String()
}

// resetServed zeroes the per-replica served counts (phase measurements).
func (e *env) resetServed() {
	for _, r := range e.reps {
		r.served = 0
	}
}
