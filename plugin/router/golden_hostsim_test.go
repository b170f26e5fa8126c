package router

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuroute/gpuroute/hostsim"
)

// Golden decision traces: a recorded sequence of events (configurations,
// metrics pages, requests, responses, virtual time) replayed through
// build/gpuroute.wasm in hostsim, and the decisions it must produce: every
// destination header, local reply, decision explanation, drain reset,
// warning, the final status endpoints and stats. A change to what the
// plugin decides fails TestGoldenDecisions; one made on purpose refreshes
// the golden file in the same commit, with the reason:
//
//	GPUROUTE_WASM=$PWD/build/gpuroute.wasm go test -run TestGoldenDecisions ./plugin/router -update
//
// The trace itself is written by goldenTrace (-update-trace); it changes
// only when the scenario does.

var (
	updateGolden = flag.Bool("update", false, "rewrite the golden decision files in testdata/golden")
	updateTrace  = flag.Bool("update-trace", false, "rewrite the golden trace from goldenTrace")
)

const (
	goldenTracePath    = "../../testdata/golden/decisions.trace.jsonl"
	goldenDecisionPath = "../../testdata/golden/decisions.golden"
)

// goldenEvent is one line of a trace.
type goldenEvent struct {
	// Op is what happens: "config" (every worker is configured with
	// Config), "page" (replica Replica's metrics cluster answers Page with
	// Status from now on, or nothing when Silent), "down" (Envoy cannot
	// reach replica Replica while Down: responses of streams routed there
	// are Envoy's local 503), "advance" (Millis of virtual time pass:
	// ticks, scrapes), "request" (stream ID starts on worker Worker with
	// Path, an injected client destination when Inject, and Body, empty
	// for a request without one), "response" (stream ID's response:
	// Status, Stream for SSE Chunks else JSON Chunks; End says whether the
	// last chunk ends it), "done" (stream ID ends) and "status" (worker
	// Worker's status endpoint).
	Op      string   `json:"op"`
	Worker  int      `json:"worker,omitempty"`
	ID      int      `json:"id,omitempty"`
	Replica int      `json:"replica,omitempty"`
	Config  string   `json:"config,omitempty"`
	Page    string   `json:"page,omitempty"`
	Status  int      `json:"status,omitempty"`
	Silent  bool     `json:"silent,omitempty"`
	Down    bool     `json:"down,omitempty"`
	Millis  int      `json:"ms,omitempty"`
	Path    string   `json:"path,omitempty"`
	Inject  bool     `json:"inject,omitempty"`
	Body    string   `json:"body,omitempty"`
	Stream  bool     `json:"stream,omitempty"`
	Chunks  []string `json:"chunks,omitempty"`
	End     bool     `json:"end,omitempty"`
}

// The golden fleet: one Envoy of goldenWorkers worker VMs in front of
// goldenReplicas replicas.
const (
	goldenWorkers  = 2
	goldenReplicas = 4
	goldenRequests = 360
	goldenStepMs   = 7 // virtual time between two requests
	goldenWindow   = 8 // a request's response comes this many requests later
)

var goldenHardware = [goldenReplicas]string{"h100", "h100", "a100", "l40s"}

// goldenConfig renders the scenario's configuration; states maps a replica
// to its state fragment.
func goldenConfig(states map[int]string) string {
	var b strings.Builder
	b.WriteString(`{"tick_ms":100,"block_chars":16,"scrape_timeout_ms":200,"decision_header":true,` +
		`"status_path":"/status","fallbacks":1,"max_wait_ms":3000,"passive_failures":2,"passive_backoff_ms":300,` +
		`"flow_control":{"enabled":false},` + // the replay routes at once; flow control has tests of its own
		`"adapters":{"sql-lora":"llama-3-8b","chat-lora":"llama-3-8b"},"replicas":[`)
	for i := range goldenReplicas {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"name":"r` + strconv.Itoa(i) + `","address":"10.0.0.` + strconv.Itoa(i+1) +
			`:8000","metrics_cluster":"r` + strconv.Itoa(i) + `-metrics","hardware":"` + goldenHardware[i] +
			`","adapter_slots":2`)
		if s, ok := states[i]; ok {
			b.WriteString("," + s)
		}
		b.WriteByte('}')
	}
	b.WriteString("]}")
	return b.String()
}

// goldenPage renders a vLLM metrics page.
func goldenPage(waiting, running int, kv float64, adapters string) string {
	return "# TYPE vllm:num_requests_waiting gauge\n" +
		"vllm:num_requests_waiting{model_name=\"llama-3-8b\"} " + strconv.Itoa(waiting) + "\n" +
		"vllm:num_requests_running{model_name=\"llama-3-8b\"} " + strconv.Itoa(running) + "\n" +
		"vllm:kv_cache_usage_perc{model_name=\"llama-3-8b\"} " + strconv.FormatFloat(kv, 'f', 3, 64) + "\n" +
		"vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"4000\"} 1\n" +
		"vllm:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"" + adapters +
		"\",waiting_lora_adapters=\"\"} 1.767e+09\n"
}

// goldenTrace generates the scenario: chat and completion requests over a
// few shared system prompts, LoRA adapters, bodies that are not JSON,
// streamed and whole responses, cut streams, changing metrics pages, a
// replica whose metrics go silent, one Envoy cannot reach for a while, and
// a drain with a deadline that is later lifted.
func goldenTrace() []goldenEvent {
	rng := rand.New(rand.NewPCG(11, 2026))
	words := strings.Fields("the replica cache prefix token model request queue batch decode prefill " +
		"kernel tensor adapter memory latency throughput schedule policy context window answer tool")
	sentence := func(n int) string {
		var b strings.Builder
		for j := range n {
			if j > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(words[rng.IntN(len(words))])
		}
		return b.String()
	}
	// Four short system prompts and a long one, which the prompt memo
	// replays.
	systems := make([]string, 5)
	for i := range systems {
		systems[i] = "You are assistant " + strconv.Itoa(i) + ". " + sentence(50+20*i)
	}
	systems[4] += " " + sentence(700)
	system := func() string {
		if rng.IntN(10) == 0 {
			return systems[4]
		}
		return systems[rng.IntN(4)]
	}
	var ev []goldenEvent
	ev = append(ev, goldenEvent{Op: "config", Config: goldenConfig(nil)})
	page := func(r int) {
		adapters := []string{"", "sql-lora", "chat-lora", "sql-lora,chat-lora"}[rng.IntN(4)]
		ev = append(ev, goldenEvent{Op: "page", Replica: r,
			Page: goldenPage(rng.IntN(6), rng.IntN(20), float64(rng.IntN(900))/1000, adapters)})
	}
	for r := range goldenReplicas {
		page(r)
	}
	ev = append(ev, goldenEvent{Op: "advance", Millis: 150})
	elapsed := 150
	streams := map[int]bool{} // request id → asked for a stream
	respond := func(id int) {
		stream, ok := streams[id]
		if !ok {
			return
		}
		delete(streams, id)
		switch k := rng.IntN(20); {
		case k == 0: // the client went away before any response
		case k == 1:
			ev = append(ev, goldenEvent{Op: "response", ID: id, Status: 503, End: true})
		case k == 2: // cut after the headers and a first chunk
			ev = append(ev, goldenEvent{Op: "response", ID: id, Status: 200, Stream: stream,
				Chunks: []string{`data: {"choices":[{"delta":{"content":"a"}}]}` + "\n\n"}})
		case stream:
			var chunks []string
			for range 1 + rng.IntN(6) {
				chunks = append(chunks, `data: {"choices":[{"index":0,"delta":{"content":" `+words[rng.IntN(len(words))]+`"}}]}`+"\n\n")
			}
			chunks = append(chunks, "data: [DONE]\n\n")
			ev = append(ev, goldenEvent{Op: "response", ID: id, Status: 200, Stream: true, Chunks: chunks, End: true})
		default:
			ev = append(ev, goldenEvent{Op: "response", ID: id, Status: 200, End: true,
				Chunks: []string{`{"choices":[{"message":{"content":"ok"}}],"usage":{"prompt_tokens":90,"completion_tokens":` +
					strconv.Itoa(5+rng.IntN(200)) + `}}`}})
		}
		ev = append(ev, goldenEvent{Op: "done", ID: id})
	}
	// Most responses come goldenWindow requests later; a long generation's
	// after goldenLongWindow, so that some are in flight at the drain
	// deadline.
	const goldenLongWindow = 100
	respondAt := map[int][]int{}
	overloaded := goldenPage(400, 256, 0.99, "")
	deadline := 0
	for id := 1; id <= goldenRequests; id++ {
		switch id {
		case 100:
			ev = append(ev, goldenEvent{Op: "page", Replica: 2, Silent: true})
		case 140:
			page(2)
		case 150:
			deadline = elapsed + 500
			ev = append(ev, goldenEvent{Op: "config", Config: goldenConfig(map[int]string{3: `"state":"draining","drain_deadline_ms":` +
				strconv.FormatInt(start.UnixMilli()+int64(deadline), 10)})})
		case 200:
			ev = append(ev, goldenEvent{Op: "down", Replica: 1, Down: true})
		case 230:
			ev = append(ev, goldenEvent{Op: "down", Replica: 1})
		case 300:
			ev = append(ev, goldenEvent{Op: "config", Config: goldenConfig(nil)})
		case 310: // every replica over max_wait_ms: 429s
			for r := range goldenReplicas {
				ev = append(ev, goldenEvent{Op: "page", Replica: r, Page: overloaded})
			}
		case 325: // every replica closed: 503s
			ev = append(ev, goldenEvent{Op: "config", Config: goldenConfig(map[int]string{
				0: `"state":"drained"`, 1: `"state":"drained"`, 2: `"state":"draining"`, 3: `"state":"drained"`})})
		case 335:
			ev = append(ev, goldenEvent{Op: "config", Config: goldenConfig(nil)})
		}
		if id%40 == 0 {
			for r := range goldenReplicas {
				if (id < 100 || id >= 140 || r != 2) && (id < 310 || id >= 325) {
					page(r)
				}
			}
		}
		if id%60 == 0 {
			ev = append(ev, goldenEvent{Op: "status", Worker: id / 60 % goldenWorkers})
		}
		req := goldenEvent{Op: "request", ID: id, Worker: id % goldenWorkers, Path: "/v1/chat/completions",
			Inject: rng.IntN(25) == 0}
		model := "llama-3-8b"
		switch k := rng.IntN(20); {
		case k < 2:
			model = "sql-lora"
		case k < 3:
			model = "chat-lora"
		case k < 4:
			model = "mistral-7b"
		}
		stream := rng.IntN(3) > 0
		body := map[string]any{"model": model, "stream": stream}
		if rng.IntN(4) == 0 {
			body["max_tokens"] = 16 << rng.IntN(6)
		}
		switch k := rng.IntN(40); {
		case k == 0:
			req.Path, req.Body = "/v1/models", ""
		case k == 1:
			req.Body = `{"model": "llama-3-8b", "messages": [{"role": "user", "content": "cut`
		case k == 2:
			req.Body = "not json at all"
		case k < 8:
			req.Path = "/v1/completions"
			body["prompt"] = system() + "\n" + sentence(10+rng.IntN(20))
		default:
			body["messages"] = []map[string]string{
				{"role": "system", "content": system()},
				{"role": "user", "content": sentence(8 + rng.IntN(30))},
			}
		}
		if req.Body == "" && req.Path != "/v1/models" {
			b, err := json.Marshal(body)
			if err != nil {
				panic(err)
			}
			req.Body = string(b)
		}
		ev = append(ev, req)
		streams[id] = stream && req.Path != "/v1/models"
		if rng.IntN(12) == 0 {
			respondAt[id+goldenLongWindow] = append(respondAt[id+goldenLongWindow], id)
		} else {
			respondAt[id+goldenWindow] = append(respondAt[id+goldenWindow], id)
		}
		for _, r := range respondAt[id] {
			respond(r)
		}
		delete(respondAt, id)
		ev = append(ev, goldenEvent{Op: "advance", Millis: goldenStepMs})
		elapsed += goldenStepMs
	}
	later := slices.Sorted(maps.Keys(respondAt))
	for _, at := range later {
		for _, r := range respondAt[at] {
			respond(r)
		}
	}
	ev = append(ev, goldenEvent{Op: "advance", Millis: 1000})
	for w := range goldenWorkers {
		ev = append(ev, goldenEvent{Op: "status", Worker: w})
	}
	return ev
}

// writeGoldenTrace writes ev as JSON lines.
func writeGoldenTrace(t *testing.T, ev []goldenEvent) {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	for i := range ev {
		if err := enc.Encode(&ev[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(goldenTracePath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(goldenTracePath, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readGoldenTrace(t *testing.T) []goldenEvent {
	t.Helper()
	f, err := os.Open(goldenTracePath)
	if err != nil {
		t.Fatalf("open the golden trace: %v (write it with -update-trace)", err)
	}
	defer f.Close()
	var ev []goldenEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<20)
	for sc.Scan() {
		var e goldenEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("golden trace line %d: %v", len(ev)+1, err)
		}
		ev = append(ev, e)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return ev
}

// goldenRun replays a trace and writes what the plugin decided, one line
// per observation.
type goldenRun struct {
	t       *testing.T
	h       *hostsim.Host
	vms     []*hostsim.VM
	pages   [goldenReplicas]goldenEvent // what each metrics cluster answers
	down    [goldenReplicas]bool
	open    map[int]*goldenStream
	out     bytes.Buffer
	logsOut int // guest log lines already written
}

type goldenStream struct {
	s    *hostsim.Stream
	dest string // the destination header ("" when answered locally)
}

// rootPrefix matches the log prefix's root id, which depends on how many
// roots the host created, not on routing.
var rootPrefix = "gpuroute: root "

func (g *goldenRun) linef(parts ...string) {
	g.out.WriteString(strings.Join(parts, " "))
	g.out.WriteByte('\n')
}

// flushLogs writes the guest's new warnings and errors.
func (g *goldenRun) flushLogs() {
	logs := g.h.Logs()
	for _, e := range logs[min(g.logsOut, len(logs)):] {
		if e.Level < hostsim.LogWarn {
			continue
		}
		msg := e.Message
		if rest, ok := strings.CutPrefix(msg, rootPrefix); ok {
			if i := strings.Index(rest, ": "); i >= 0 {
				msg = rest[i+2:]
			}
		}
		g.linef("log", e.Level.String(), msg)
	}
	g.logsOut = len(logs)
}

func (g *goldenRun) metricsCluster(r int) hostsim.Cluster {
	return hostsim.ClusterFunc(func(*hostsim.CallRequest) hostsim.CallReply {
		p := g.pages[r]
		if p.Silent {
			return hostsim.CallReply{NoAnswer: true}
		}
		return hostsim.CallReply{Status: p.Status, Body: []byte(p.Page), Latency: 3 * time.Millisecond}
	})
}

func (g *goldenRun) replay(ev []goldenEvent) {
	t := g.t
	for i, e := range ev {
		switch e.Op {
		case "config":
			for _, vm := range g.vms {
				if _, err := vm.Configure(testRootID, []byte(e.Config)); err != nil {
					t.Fatalf("event %d: Configure = %v", i, err)
				}
			}
			g.linef("config", strconv.Itoa(i))
		case "page":
			g.pages[e.Replica] = e
		case "down":
			g.down[e.Replica] = e.Down
		case "advance":
			if err := g.h.Advance(time.Duration(e.Millis) * time.Millisecond); err != nil {
				t.Fatalf("event %d: Advance = %v", i, err)
			}
			g.resets()
		case "request":
			g.request(e)
		case "response":
			g.response(e)
		case "done":
			if st := g.open[e.ID]; st != nil {
				if err := st.s.Done(); err != nil {
					t.Fatalf("event %d: Done = %v", i, err)
				}
				delete(g.open, e.ID)
			}
		case "status":
			g.status(e.Worker)
		default:
			t.Fatalf("event %d: unknown op %q", i, e.Op)
		}
		g.flushLogs()
	}
}

// resets writes the streams the plugin ended (a drain deadline).
func (g *goldenRun) resets() {
	ids := make([]int, 0, len(g.open))
	for id, st := range g.open {
		if st.s.Closed(hostsim.StreamResponse) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		g.linef("reset", strconv.Itoa(id))
		_ = g.open[id].s.Done()
		delete(g.open, id)
	}
}

var goldenHeaders = [][2]string{
	{":method", "POST"}, {":authority", "gateway"}, {":scheme", "https"},
	{"content-type", "application/json"}, {"user-agent", "openai-python/1.40"},
}

func (g *goldenRun) request(e goldenEvent) {
	t := g.t
	s, err := g.vms[e.Worker].Root(testRootID).NewStream()
	if err != nil {
		t.Fatalf("request %d: NewStream = %v", e.ID, err)
	}
	hdrs := append([][2]string{{":path", e.Path}}, goldenHeaders...)
	if e.Inject {
		hdrs = append(hdrs, [2]string{HeaderDestination, "203.0.113.7:443"})
	}
	if _, err := s.RequestHeaders(hdrs, e.Body == ""); err != nil {
		t.Fatalf("request %d: RequestHeaders = %v", e.ID, err)
	}
	if e.Body != "" && s.LocalReply() == nil {
		if _, err := s.RequestBody([]byte(e.Body), true); err != nil {
			t.Fatalf("request %d: RequestBody = %v", e.ID, err)
		}
	}
	id := "req " + strconv.Itoa(e.ID) + " w" + strconv.Itoa(e.Worker)
	if lr := s.LocalReply(); lr != nil {
		g.linef(id, "local", strconv.Itoa(int(lr.Status)), string(lr.Body))
		_ = s.Done()
		return
	}
	var dests []string
	for _, h := range s.RequestHeaderMap() {
		if strings.EqualFold(h[0], HeaderDestination) {
			dests = append(dests, h[1])
		}
	}
	g.linef(id, "->", strings.Join(dests, " | "))
	st := &goldenStream{s: s}
	if len(dests) == 1 {
		st.dest = dests[0]
	}
	g.open[e.ID] = st
}

// replicaOf returns the replica at the head of a destination list, or -1.
func replicaOf(dest string) int {
	first, _, _ := strings.Cut(dest, ",")
	for r := range goldenReplicas {
		if first == "10.0.0."+strconv.Itoa(r+1)+":8000" {
			return r
		}
	}
	return -1
}

func (g *goldenRun) response(e goldenEvent) {
	t := g.t
	st := g.open[e.ID]
	if st == nil {
		return // answered locally, or reset
	}
	s := st.s
	first, _, _ := strings.Cut(st.dest, ",")
	if r := replicaOf(st.dest); r >= 0 && g.down[r] {
		// Envoy's own 503: no upstream service time, code details naming
		// the failure.
		s.SetProperty(hostsim.PropertyPath("response", "code_details"), []byte("upstream_reset_before_response_started{connection_failure}"))
		if _, err := s.ResponseHeaders([][2]string{{":status", "503"}, {"content-type", "text/plain"}}, true); err != nil {
			t.Fatalf("response %d: ResponseHeaders = %v", e.ID, err)
		}
	} else {
		s.SetProperty(hostsim.PropertyPath("upstream", "address"), []byte(first))
		s.SetProperty(hostsim.PropertyPath("response", "code_details"), []byte("via_upstream"))
		ctype := "application/json"
		if e.Stream {
			ctype = "text/event-stream"
		}
		hdrs := [][2]string{{":status", strconv.Itoa(e.Status)}, {"content-type", ctype}, {"x-envoy-upstream-service-time", "4"}}
		noBody := len(e.Chunks) == 0
		if _, err := s.ResponseHeaders(hdrs, noBody && e.End); err != nil {
			t.Fatalf("response %d: ResponseHeaders = %v", e.ID, err)
		}
		for j, c := range e.Chunks {
			if _, err := s.ResponseBody([]byte(c), e.End && j == len(e.Chunks)-1); err != nil {
				t.Fatalf("response %d: ResponseBody = %v", e.ID, err)
			}
		}
	}
	if v, ok := s.ResponseHeader(HeaderDecision); ok {
		g.linef("resp", strconv.Itoa(e.ID), "decision", v)
	}
}

// status writes worker w's status endpoint, without the ids of its root
// and worker (the host's numbering, not a decision).
func (g *goldenRun) status(w int) {
	t := g.t
	s, err := g.vms[w].Root(testRootID).NewStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RequestHeaders([][2]string{{":method", "GET"}, {":path", "/status"}, {":authority", "gw"}}, true); err != nil {
		t.Fatal(err)
	}
	lr := s.LocalReply()
	_ = s.Done()
	if lr == nil {
		t.Fatalf("status of worker %d: no local reply", w)
	}
	var doc map[string]any
	if err := json.Unmarshal(lr.Body, &doc); err != nil {
		t.Fatalf("status body %q: %v", lr.Body, err)
	}
	delete(doc, "root")
	delete(doc, "worker")
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	g.linef("status w"+strconv.Itoa(w), string(b))
}

// stats writes every gpuroute stat's final value.
func (g *goldenRun) stats() {
	names := g.h.MetricNames()
	slices.Sort(names)
	for _, n := range names {
		if m, _ := g.h.Metric(n); strings.HasPrefix(n, "gpuroute_") {
			g.linef("stat", n, strconv.FormatInt(m.Value, 10))
		}
	}
}

// TestGoldenDecisions replays the golden trace and compares every decision
// with testdata/golden/decisions.golden.
func TestGoldenDecisions(t *testing.T) {
	if *updateTrace {
		writeGoldenTrace(t, goldenTrace())
	}
	ev := readGoldenTrace(t)
	h, mod := wasmHost(t, hostsim.Options{Start: start, LogLevel: hostsim.LogWarn})
	g := &goldenRun{t: t, h: h, open: map[int]*goldenStream{}}
	for r := range goldenReplicas {
		h.AddCluster("r"+strconv.Itoa(r)+"-metrics", g.metricsCluster(r))
	}
	for range goldenWorkers {
		vm, err := h.NewVM(context.Background(), mod, testVMID, nil)
		if err != nil {
			t.Fatalf("NewVM = %v", err)
		}
		g.vms = append(g.vms, vm)
	}
	g.replay(ev)
	g.stats()
	for i, vm := range g.vms {
		if err := vm.Err(); err != nil {
			t.Fatalf("worker %d failed: %v", i, err)
		}
	}
	got := g.out.Bytes()
	if *updateGolden {
		if err := os.WriteFile(goldenDecisionPath, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(goldenDecisionPath)
	if err != nil {
		t.Fatalf("read the golden decisions: %v (write them with -update)", err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := range max(len(gl), len(wl)) {
			var a, b string
			if i < len(gl) {
				a = gl[i]
			}
			if i < len(wl) {
				b = wl[i]
			}
			if a != b {
				t.Fatalf("replay of %s differs from %s at line %d:\ngot  %s\nwant %s\n(a change on purpose: rerun with -update and commit the golden file with the reason)",
					goldenTracePath, goldenDecisionPath, i+1, a, b)
			}
		}
	}
}
