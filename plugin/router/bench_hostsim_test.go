package router

import (
	"cmp"
	"context"
	"encoding/json"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuroute/gpuroute/hostsim"
)

// Benchmarks of build/gpuroute.wasm in hostsim (wazero's compiler engine):
// the whole request path as Envoy drives it, on a 64-replica fleet whose
// metrics the leader scrapes from fake clusters. Run them with
//
//	make wasm && GPUROUTE_WASM=$PWD/build/gpuroute.wasm go test -run '^$' \
//	  -bench 'RequestPath64' -benchtime 20000x ./plugin/router
//	GPUROUTE_WASM=$PWD/build/gpuroute.wasm go test -run '^$' \
//	  -bench 'VMHeap' -benchtime 100000x ./plugin/router
//
// Times are host + guest: hostsim's own work (copying headers and bodies
// into guest memory, serving the ABI calls) is counted, as Envoy's would be.
// They are wall-clock times on whatever else the machine runs: read the
// percentiles with the load in mind.
//
// BenchmarkVMHeap and BenchmarkGuestProfile instrument the module through
// hostsim.GuestProbe (wazero function listeners, which only hostsim
// imports); the module itself links nothing of wazero (plugin/main_test.go
// checks).

const (
	benchReplicas = 64
	benchWorkers  = 2  // worker VMs of one Envoy (unless said); requests alternate
	benchWindow   = 16 // requests in flight: one completes 16 starts after it began
	benchWarmup   = 3000
	// benchTickEvery requests pass per 100 ms tick (1000 requests/s per
	// Envoy): ten times the default tick's rate, so that a run of 20,000
	// requests sees 200 ticks.
	benchTickEvery = 100
	benchSystems   = 6 // distinct system prompts
	benchBodyBytes = 32 << 10
)

// benchModel is the requests' model (no adapter).
const benchModel = "meta-llama/Llama-3.1-8B-Instruct"

// sseChunk is one streamed token event as vLLM's OpenAI server sends it.
var sseChunk = []byte(`data: {"id":"cmpl-1","object":"chat.completion.chunk","model":"` + benchModel +
	`","choices":[{"index":0,"delta":{"content":" token"},"finish_reason":null}]}` + "\n\n")

var sseDone = []byte("data: [DONE]\n\n")

var benchResponseHeaders = [][2]string{{":status", "200"}, {"content-type", "text/event-stream"}}

// benchRequestHeaders are a client's request headers plus the request id
// Envoy adds.
var benchRequestHeaders = [][2]string{
	{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "gateway"},
	{":scheme", "https"}, {"content-type", "application/json"}, {"user-agent", "openai-python/1.40"},
	{"x-request-id", "5f0c7f3e-1d3b-4b8e-9f1a-3c2f6b9d8e71"},
}

// benchBodies returns n chat bodies of about benchBodyBytes (≈ 8k tokens):
// one of benchSystems system prompts of ~30 KB (most of a long prompt in
// agent and RAG traffic is a shared preamble) and a distinct user question
// of 1–2 KB, so the prefix index sees a few long shared chains and many
// short distinct tails.
func benchBodies(n int) [][]byte {
	words := strings.Fields("the replica cache prefix token model request queue batch decode prefill " +
		"kernel tensor adapter memory latency throughput schedule policy context window answer tool")
	systems := make([]string, benchSystems)
	for s := range systems {
		var b strings.Builder
		b.WriteString("You are assistant " + strconv.Itoa(s) + ". Follow the policy below.\n")
		for i := 0; b.Len() < benchBodyBytes-2048; i++ {
			b.WriteString(words[(i*7+s*3)%len(words)])
			if i%13 == 12 {
				b.WriteString(".\n")
			} else {
				b.WriteByte(' ')
			}
		}
		systems[s] = b.String()
	}
	out := make([][]byte, n)
	for i := range out {
		var q strings.Builder
		q.WriteString("Question " + strconv.Itoa(i) + ": ")
		for j := 0; q.Len() < 1024+(i%8)*128; j++ {
			q.WriteString(words[(i+j*5)%len(words)])
			q.WriteByte(' ')
		}
		b, _ := json.Marshal(map[string]any{
			"model": benchModel,
			"messages": []map[string]string{
				{"role": "system", "content": systems[i%benchSystems]},
				{"role": "user", "content": q.String()},
			},
			"max_tokens": 256,
			"stream":     true,
		})
		out[i] = b
	}
	return out
}

// benchMetrics renders vLLM V1 metrics for replica i, varied so scores differ.
func benchMetrics(i int) []byte {
	return []byte("# TYPE vllm:num_requests_waiting gauge\n" +
		"vllm:num_requests_waiting{model_name=\"" + benchModel + "\"} " + strconv.Itoa(i%5) + "\n" +
		"# TYPE vllm:num_requests_running gauge\n" +
		"vllm:num_requests_running{model_name=\"" + benchModel + "\"} " + strconv.Itoa(8+i%17) + "\n" +
		"# TYPE vllm:kv_cache_usage_perc gauge\n" +
		"vllm:kv_cache_usage_perc{model_name=\"" + benchModel + "\"} 0." + strconv.Itoa(10+i%80) + "\n" +
		"vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"25000\"} 1\n" +
		"# TYPE vllm:prompt_tokens_total counter\n" +
		"vllm:prompt_tokens_total{model_name=\"" + benchModel + "\"} " + strconv.Itoa(1000000+i) + "\n")
}

// benchConfig is a 64-replica configuration over three hardware profiles
// with the benchmarks' 100 ms tick.
func benchConfig() string { return benchConfigTick(benchTickEvery) }

// benchConfigTick is benchConfig with a tick every tickMillis.
func benchConfigTick(tickMillis int) string {
	hw := []string{"h100", "a100", "l40s", "h100"}
	var b strings.Builder
	b.WriteString(`{"tick_ms":` + strconv.Itoa(tickMillis) + `,"replicas":[`)
	for i := range benchReplicas {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"name":"r` + strconv.Itoa(i) + `","address":"10.0.` + strconv.Itoa(i/250) + `.` +
			strconv.Itoa(i%250+1) + `:8000","metrics_cluster":"r` + strconv.Itoa(i) +
			`-metrics","hardware":"` + hw[i%len(hw)] + `"}`)
	}
	b.WriteString("]}")
	return b.String()
}

// benchFleet is one Envoy with workers VMs of the module.
type benchFleet struct {
	b       testing.TB
	workers int // a divisor of benchWindow
	// tickEvery requests pass per tick, of as many milliseconds.
	tickEvery int
	h         *hostsim.Host
	vms       []*hostsim.VM
	roots     []*hostsim.Root
	bodies    [][]byte
	open      []*hostsim.Stream // ring of the benchWindow requests in flight
	openDur   []time.Duration   // time already spent on each of them
	openCPU   []time.Duration   // thread CPU time already spent on each
	// With hostsim.Options.TimeGuest: the guest time already spent on
	// each request in flight, and every finished request's.
	openGuest []time.Duration
	guest     []time.Duration
	// guestPos says where each of guest's requests stood against the
	// ticks (requestAfterTick, responseAfterTick or 0).
	guestPos []uint8
	// The guest time of each request's headers and body (the decision),
	// for the first request after each tick and for the others: the tick
	// leaves the request path's code caches cold (docs/performance.md
	// "Request path").
	openAfterTick, openOthers []time.Duration
	n                         int // requests started
	ticks                     []time.Duration
	// workerTicks holds, per tick period, the guest time of the worker VM
	// that spent most in it (hostsim.Options.TimeGuest): how long a tick
	// holds a worker's thread, and the requests waiting on it.
	workerTicks []time.Duration
	tickGuest0  []time.Duration // advance's scratch
	// phase, when non-nil, collects per-callback times: request headers,
	// request body (the decision), response headers, response body chunks,
	// done/log/delete.
	phase *[5][]time.Duration
}

var phaseNames = [5]string{"reqhdr", "reqbody", "resphdr", "respbody", "done"}

// newBenchFleet compiles the module into a Host of its own made with opts
// (whose Probe, if set, instruments it) and configures benchWorkers
// workers.
func newBenchFleet(b testing.TB, opts hostsim.Options) *benchFleet {
	return newBenchFleetOf(b, opts, benchShape{workers: benchWorkers})
}

// benchShape is an Envoy's VMs of the module: workers worker VMs (a
// divisor of benchWindow), and with scraper one more configured with
// "role":"scraper", the bootstrap service on Envoy's main thread; a tick
// every tickEvery requests (1000 requests/s: tick_ms is tickEvery; 0
// means benchTickEvery).
type benchShape struct {
	workers   int
	scraper   bool
	tickEvery int
}

// newBenchFleetOf is newBenchFleet with the VMs of shape.
func newBenchFleetOf(b testing.TB, opts hostsim.Options, shape benchShape) *benchFleet {
	b.Helper()
	wasm, err := moduleBytes()
	if err != nil {
		b.Skipf("skipped: %v (run `make wasm`)", err)
	}
	return newBenchFleetFrom(b, opts, shape, wasm)
}

// newBenchFleetFrom is newBenchFleetOf with the module wasm.
func newBenchFleetFrom(b testing.TB, opts hostsim.Options, shape benchShape, wasm []byte) *benchFleet {
	workers := shape.workers
	tickEvery := cmp.Or(shape.tickEvery, benchTickEvery)
	ctx := context.Background()
	b.Helper()
	opts.Start = start
	opts.LogLevel = hostsim.LogWarn
	h := hostsim.NewHost(opts)
	b.Cleanup(func() { h.Close() })
	mod, err := h.Compile(ctx, wasm)
	if err != nil {
		b.Fatalf("Compile(gpuroute.wasm) = %v", err)
	}
	for i := range benchReplicas {
		body := benchMetrics(i)
		h.AddCluster("r"+strconv.Itoa(i)+"-metrics", hostsim.ClusterFunc(func(*hostsim.CallRequest) hostsim.CallReply {
			return hostsim.CallReply{Body: body, Latency: 3 * time.Millisecond}
		}))
	}
	f := &benchFleet{b: b, workers: workers, tickEvery: tickEvery, h: h, bodies: benchBodies(4096),
		open: make([]*hostsim.Stream, benchWindow), openDur: make([]time.Duration, benchWindow),
		openCPU: make([]time.Duration, benchWindow), openGuest: make([]time.Duration, benchWindow)}
	cfg := []byte(benchConfigTick(tickEvery))
	for range workers {
		vm, err := h.NewVM(ctx, mod, testVMID, nil)
		if err != nil {
			b.Fatalf("NewVM = %v", err)
		}
		root, err := vm.Configure(testRootID, cfg)
		if err != nil {
			b.Fatalf("Configure = %v", err)
		}
		f.vms, f.roots = append(f.vms, vm), append(f.roots, root)
	}
	if shape.scraper {
		vm, err := h.NewVM(ctx, mod, testVMID, nil)
		if err != nil {
			b.Fatalf("NewVM = %v", err)
		}
		scfg := []byte(strings.Replace(string(cfg), `{"tick_ms"`, `{"role":"scraper","tick_ms"`, 1))
		if _, err := vm.Configure(testRootID, scfg); err != nil {
			b.Fatalf("Configure(scraper) = %v", err)
		}
	}
	f.advance() // the first scrape of all 64 replicas
	return f
}

// advance runs one tick period of virtual time (ticks, scrapes and their
// responses) and records how long it took.
func (f *benchFleet) advance() {
	g0 := f.tickGuest0[:0]
	for _, vm := range f.vms {
		g0 = append(g0, vm.GuestTime())
	}
	f.tickGuest0 = g0
	t0 := time.Now()
	if err := f.h.Advance(time.Duration(f.tickEvery) * time.Millisecond); err != nil {
		f.b.Fatalf("Advance = %v", err)
	}
	f.ticks = append(f.ticks, time.Since(t0))
	busiest := time.Duration(0)
	for i, vm := range f.vms {
		busiest = max(busiest, vm.GuestTime()-g0[i])
	}
	f.workerTicks = append(f.workerTicks, busiest)
}

// step starts one request and finishes the one started benchWindow
// requests earlier, returning that request's whole wall and thread CPU
// times (0 while the window fills). Ticks run between requests and are
// timed apart.
func (f *benchFleet) step() (wall, cpu time.Duration) {
	if f.n > 0 && f.n%f.tickEvery == 0 {
		f.advance()
	}
	slot := f.n % benchWindow
	// A request runs on one worker VM; the window is a multiple of the
	// workers, so the one finishing in this slot ran on this request's.
	vm := f.vms[f.n%f.workers]
	if s := f.open[slot]; s != nil {
		c0, g0 := threadCPU(), vm.GuestTime()
		wall = f.openDur[slot] + f.finish(s)
		cpu = f.openCPU[slot] + threadCPU() - c0
		f.guest = append(f.guest, f.openGuest[slot]+vm.GuestTime()-g0)
		f.guestPos = append(f.guestPos, f.tickPos(f.n))
	}
	g0 := vm.GuestTime()
	c0 := threadCPU()
	t0 := time.Now()
	s, err := f.roots[f.n%f.workers].NewStream()
	if err != nil {
		f.b.Fatalf("NewStream = %v", err)
	}
	if _, err := s.RequestHeaders(benchRequestHeaders, false); err != nil {
		f.b.Fatalf("RequestHeaders = %v", err)
	}
	t1 := time.Now()
	if _, err := s.RequestBody(f.bodies[f.n%len(f.bodies)], true); err != nil {
		f.b.Fatalf("RequestBody = %v", err)
	}
	t2 := time.Now()
	f.openCPU[slot] = threadCPU() - c0
	f.openGuest[slot] = vm.GuestTime() - g0
	if f.n%f.tickEvery == 0 {
		f.openAfterTick = append(f.openAfterTick, f.openGuest[slot])
	} else {
		f.openOthers = append(f.openOthers, f.openGuest[slot])
	}
	f.openDur[slot] = t2.Sub(t0)
	f.mark(0, t1.Sub(t0))
	f.mark(1, t2.Sub(t1))
	if lr := s.LocalReply(); lr != nil {
		f.b.Fatalf("request %d answered locally: %d %s", f.n, lr.Status, lr.Body)
	}
	f.open[slot] = s
	f.n++
	return wall, cpu
}

// Where a request stood against the ticks: its headers and body ran first
// after a tick, or its response did (on the worker that comes first after
// the tick; the other worker's first callbacks find the code warm).
const (
	requestAfterTick  = 1
	responseAfterTick = 2
)

// tickPos returns where the request finished at step n stood.
func (f *benchFleet) tickPos(n int) uint8 {
	switch {
	case n%f.tickEvery == 0:
		return responseAfterTick
	case (n-benchWindow)%f.tickEvery == 0:
		return requestAfterTick
	}
	return 0
}

// finish runs the response (headers, four SSE chunks, [DONE]) and the end
// of the stream, returning the time it took.
func (f *benchFleet) finish(s *hostsim.Stream) time.Duration {
	t0 := time.Now()
	if _, err := s.ResponseHeaders(benchResponseHeaders, false); err != nil {
		f.b.Fatalf("ResponseHeaders = %v", err)
	}
	t1 := time.Now()
	for range 4 {
		if _, err := s.ResponseBody(sseChunk, false); err != nil {
			f.b.Fatalf("ResponseBody = %v", err)
		}
	}
	if _, err := s.ResponseBody(sseDone, true); err != nil {
		f.b.Fatalf("ResponseBody = %v", err)
	}
	t2 := time.Now()
	if err := s.Done(); err != nil {
		f.b.Fatalf("Done = %v", err)
	}
	t3 := time.Now()
	f.mark(2, t1.Sub(t0))
	f.mark(3, t2.Sub(t1))
	f.mark(4, t3.Sub(t2))
	return t3.Sub(t0)
}

func (f *benchFleet) mark(i int, d time.Duration) {
	if f.phase != nil {
		f.phase[i] = append(f.phase[i], d)
	}
}

// warm runs n requests, checks that the VMs are well and nothing was
// logged at error level, and forgets the times measured so far.
func (f *benchFleet) warm(n int) {
	for range n {
		f.step()
	}
	for _, vm := range f.vms {
		if err := vm.Err(); err != nil {
			f.b.Fatalf("VM failed during warm-up: %v", err)
		}
	}
	for _, e := range f.h.Logs() {
		if e.Level >= hostsim.LogError {
			f.b.Fatalf("guest logged an error during warm-up: %s", e.Message)
		}
	}
	f.ticks, f.guest, f.guestPos, f.workerTicks = f.ticks[:0], f.guest[:0], f.guestPos[:0], f.workerTicks[:0]
	f.openAfterTick, f.openOthers = f.openAfterTick[:0], f.openOthers[:0]
	if f.phase != nil {
		for i := range f.phase {
			f.phase[i] = f.phase[i][:0]
		}
	}
}

// dumpLogs prints the guest's log lines when GPUROUTE_BENCH_LOGS is set (an
// instrumented build of the module can report stage times this way).
func (f *benchFleet) dumpLogs() {
	if os.Getenv("GPUROUTE_BENCH_LOGS") == "" {
		return
	}
	for _, e := range f.h.Logs() {
		f.b.Log(e.String())
	}
}

// percentile returns the p-th quantile (0 < p ≤ 1) of sorted d.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(p*float64(len(d))+0.5) - 1
	return d[min(max(i, 0), len(d)-1)]
}

func micros(d time.Duration) float64 { return float64(d) / 1e3 }

// BenchmarkRequestPath64: one whole request per op (stream create, request
// headers, a 32 KB chat body, response headers, four SSE chunks and [DONE],
// done/log/delete) on 64 scraped replicas, with 16 requests in flight and a
// 100 ms tick (scraping 64 clusters) every 100 requests. ns/op includes the
// ticks; p50-µs, p99-µs and max-µs are per-request wall times without them;
// p50-cpu-µs and p99-cpu-µs the same requests' thread CPU times (Linux),
// which leave out preemption by whatever else the machine runs; each
// callback's median and p99 are <phase>-p50-µs and <phase>-p99-µs (where a
// tail comes from), and tick-p50-µs is one tick
// period's work (with TimeGuest, worker-tick-p50-µs the guest time of the
// worker VM that spent most in it). ref-p50-µs and ref-p99-µs time a fixed native loop of
// about a request's length (refWork) after each request, the same way: the
// tail the machine adds to any job that long, which the request's p99
// carries too. The target is p99 ≤ 50 µs (figures: docs/performance.md
// "Benchmarks"). Run with -benchtime 20000x (percentiles need ≥ 1000 ops).
func BenchmarkRequestPath64(b *testing.B) {
	benchRequestPath(b, hostsim.Options{}, benchShape{workers: benchWorkers})
}

// BenchmarkRequestPathGuest64 is BenchmarkRequestPath64 with the guest's
// own time measured too (hostsim.Options.TimeGuest): guest-p50-µs and
// guest-p99-µs are each request's time inside the module, without
// hostsim's host functions (its ABI implementation, which Envoy's host
// replaces). Its wall times carry the timing's own clock reads.
// after-tick-open-p50-µs is the median guest time of the request headers
// and body (the decision) of the first request after each tick,
// open-p50-µs that of the others.
func BenchmarkRequestPathGuest64(b *testing.B) {
	benchRequestPath(b, hostsim.Options{TimeGuest: true}, benchShape{workers: benchWorkers})
}

// BenchmarkRequestPathGuest64Scraper is BenchmarkRequestPathGuest64 with a
// third VM of the module configured as the scraper (an Envoy bootstrap
// service): it holds the scrape lease, so the two workers' ticks do not
// scrape. hostsim runs every VM on one thread, so the scraper's tick still
// runs on the workers' core, as it would not on Envoy's main thread.
func BenchmarkRequestPathGuest64Scraper(b *testing.B) {
	benchRequestPath(b, hostsim.Options{TimeGuest: true}, benchShape{workers: benchWorkers, scraper: true})
}

// BenchmarkRequestPathGuest64W8 is BenchmarkRequestPathGuest64 on an Envoy
// of 8 worker VMs: each decision reads the other 7 workers' in-flight work.
func BenchmarkRequestPathGuest64W8(b *testing.B) {
	benchRequestPath(b, hostsim.Options{TimeGuest: true}, benchShape{workers: 8})
}

// BenchmarkRequestPathReplay64 runs the same b.N requests (after the same
// warm-up) through replayRuns fresh fleets with the guest's time measured,
// and takes each request's shortest guest time over the runs. The module
// sees the same inputs and the same virtual clock in every run, so it does
// the same work; what the machine adds to one run (preemption, cache
// misses after another job, the host's GC) rarely hits the same request in
// all of them. min-p50-µs and min-p99-µs are the module's own median and
// tail; guest-p99-µs is one run's, for comparison. The tail is made of
// two groups of exactly 1% each (a tick every benchTickEvery requests):
// the requests whose headers and body ran first after a tick, and those
// whose response did, on the worker that came first after it
// (request-after-tick-min-p50-µs, response-after-tick-min-p50-µs).
// min-p99-µs, the 201st longest of 20,000, falls between the first group's
// fastest and the second's slowest; rest-min-p99-µs is the other 98%'s.
// Run with -benchtime 20000x.
func BenchmarkRequestPathReplay64(b *testing.B) { benchReplay(b, benchShape{workers: benchWorkers}) }

// BenchmarkRequestPathReplay64Tick1s is BenchmarkRequestPathReplay64 at the
// default tick_ms, 1000: a tick every 1,000 requests, so the two after-tick
// groups are 0.1% each and min-p99-µs is the other requests' tail.
func BenchmarkRequestPathReplay64Tick1s(b *testing.B) {
	benchReplay(b, benchShape{workers: benchWorkers, tickEvery: 1000})
}

// BenchmarkRequestPathReplay64Scraper is BenchmarkRequestPathReplay64 with
// the scraper VM of BenchmarkRequestPathGuest64Scraper.
func BenchmarkRequestPathReplay64Scraper(b *testing.B) {
	benchReplay(b, benchShape{workers: benchWorkers, scraper: true})
}

func benchReplay(b *testing.B, shape benchShape) {
	const replayRuns = 3
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var best, first []time.Duration
	var pos []uint8
	b.ReportAllocs()
	for run := range replayRuns {
		f := newBenchFleetOf(b, hostsim.Options{TimeGuest: true}, shape)
		f.warm(benchWarmup)
		if run == 0 {
			b.ResetTimer()
		}
		for range b.N {
			f.step()
		}
		if run == 0 {
			b.StopTimer()
			best, first, pos = slices.Clone(f.guest), slices.Clone(f.guest), slices.Clone(f.guestPos)
			continue
		}
		for i := range min(len(best), len(f.guest)) {
			best[i] = min(best[i], f.guest[i])
		}
	}
	if len(best) >= 1000 {
		var byPos [3][]time.Duration
		for i, d := range best {
			byPos[pos[i]] = append(byPos[pos[i]], d)
		}
		for _, d := range byPos {
			slices.Sort(d)
		}
		slices.Sort(best)
		slices.Sort(first)
		b.ReportMetric(micros(percentile(byPos[requestAfterTick], 0.50)), "request-after-tick-min-p50-µs")
		b.ReportMetric(micros(percentile(byPos[responseAfterTick], 0.50)), "response-after-tick-min-p50-µs")
		b.ReportMetric(micros(percentile(byPos[0], 0.99)), "rest-min-p99-µs")
		b.ReportMetric(micros(percentile(best, 0.50)), "min-p50-µs")
		b.ReportMetric(micros(percentile(best, 0.99)), "min-p99-µs")
		b.ReportMetric(micros(percentile(first, 0.50)), "guest-p50-µs")
		b.ReportMetric(micros(percentile(first, 0.99)), "guest-p99-µs")
	}
}

// BenchmarkRequestPathPaired64 compares two builds of the module at the
// same moments: BenchmarkRequestPathGuest64's requests through the module
// under test (GPUROUTE_WASM) and through GPUROUTE_WASM_BASE, one fleet
// each, request by request in alternation (the same inputs and virtual
// clock), timing each build's guest. The machine's drift, which moves a
// build's median by ~10% between runs minutes apart, then falls on both
// alike. new-p50-µs, base-p50-µs (and p99) are each build's; diff-p50-µs
// is the median over requests of new minus base. Skipped without
// GPUROUTE_WASM_BASE. Run with -benchtime 20000x.
func BenchmarkRequestPathPaired64(b *testing.B) {
	basePath := os.Getenv("GPUROUTE_WASM_BASE")
	if basePath == "" {
		b.Skip("set GPUROUTE_WASM_BASE to the .wasm to compare with")
	}
	base, err := os.ReadFile(basePath)
	if err != nil {
		b.Fatalf("GPUROUTE_WASM_BASE: %v", err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f := newBenchFleet(b, hostsim.Options{TimeGuest: true})
	g := newBenchFleetFrom(b, hostsim.Options{TimeGuest: true}, benchShape{workers: benchWorkers}, base)
	f.warm(benchWarmup)
	g.warm(benchWarmup)
	b.ReportAllocs()
	b.ResetTimer()
	// A tick period of one build, then the same requests on the other,
	// which goes first in turn: each build runs on its own caches but for
	// the first request of a period (after a tick in any case), and the
	// machine changes little within two periods (~20 ms).
	for i := 0; i < b.N; i += benchTickEvery {
		first, second := f, g
		if (i/benchTickEvery)%2 == 1 {
			first, second = g, f
		}
		for range min(benchTickEvery, b.N-i) {
			first.step()
		}
		for range min(benchTickEvery, b.N-i) {
			second.step()
		}
	}
	b.StopTimer()
	n := min(len(f.guest), len(g.guest))
	if n < 1000 {
		return
	}
	diff := make([]time.Duration, n)
	for i := range n {
		diff[i] = f.guest[i] - g.guest[i]
	}
	slices.Sort(diff)
	slices.Sort(f.guest)
	slices.Sort(g.guest)
	b.ReportMetric(micros(percentile(f.guest, 0.50)), "new-p50-µs")
	b.ReportMetric(micros(percentile(g.guest, 0.50)), "base-p50-µs")
	b.ReportMetric(micros(percentile(f.guest, 0.99)), "new-p99-µs")
	b.ReportMetric(micros(percentile(g.guest, 0.99)), "base-p99-µs")
	b.ReportMetric(micros(percentile(diff, 0.50)), "diff-p50-µs")
}

// BenchmarkResponseChunk64 times one streamed token event (one
// proxy_on_response_body with one SSE chunk) of a routed request, 200 per
// response as a long answer streams them: the module's own time per chunk
// (guest-ns/chunk, hostsim.Options.TimeGuest) and the wall time
// (wall-ns/chunk). A response costs the module this once per token.
func BenchmarkResponseChunk64(b *testing.B) {
	const chunksPerResponse = 200
	f := newBenchFleet(b, hostsim.Options{TimeGuest: true})
	f.warm(benchWarmup)
	vm := f.vms[0]
	var guest, wall time.Duration
	chunks := 0
	b.ReportAllocs()
	for b.Loop() {
		s, err := f.roots[0].NewStream()
		if err != nil {
			b.Fatalf("NewStream = %v", err)
		}
		if _, err := s.RequestHeaders(benchRequestHeaders, false); err != nil {
			b.Fatalf("RequestHeaders = %v", err)
		}
		if _, err := s.RequestBody(f.bodies[chunks%len(f.bodies)], true); err != nil {
			b.Fatalf("RequestBody = %v", err)
		}
		if _, err := s.ResponseHeaders(benchResponseHeaders, false); err != nil {
			b.Fatalf("ResponseHeaders = %v", err)
		}
		for range chunksPerResponse {
			g0, t0 := vm.GuestTime(), time.Now()
			if _, err := s.ResponseBody(sseChunk, false); err != nil {
				b.Fatalf("ResponseBody = %v", err)
			}
			guest += vm.GuestTime() - g0
			wall += time.Since(t0)
			chunks++
		}
		if _, err := s.ResponseBody(sseDone, true); err != nil {
			b.Fatalf("ResponseBody = %v", err)
		}
		if err := s.Done(); err != nil {
			b.Fatalf("Done = %v", err)
		}
	}
	b.ReportMetric(float64(guest.Nanoseconds())/float64(chunks), "guest-ns/chunk")
	b.ReportMetric(float64(wall.Nanoseconds())/float64(chunks), "wall-ns/chunk")
}

func benchRequestPath(b *testing.B, opts hostsim.Options, shape benchShape) {
	runtime.LockOSThread() // threadCPU measures this thread
	defer runtime.UnlockOSThread()
	f := newBenchFleetOf(b, opts, shape)
	f.phase = new([5][]time.Duration)
	f.warm(benchWarmup)
	var lat, cpu, ref []time.Duration
	refBuf := make([]uint64, refWords)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if w, c := f.step(); w > 0 {
			lat, cpu = append(lat, w), append(cpu, c)
		}
		t0 := time.Now()
		refSink += refWork(refBuf)
		ref = append(ref, time.Since(t0))
	}
	b.StopTimer()
	if len(lat) >= 1000 {
		slices.Sort(lat)
		b.ReportMetric(micros(percentile(lat, 0.50)), "p50-µs")
		b.ReportMetric(micros(percentile(lat, 0.99)), "p99-µs")
		b.ReportMetric(micros(lat[len(lat)-1]), "max-µs")
		if opts.TimeGuest {
			slices.Sort(f.guest)
			b.ReportMetric(micros(percentile(f.guest, 0.50)), "guest-p50-µs")
			b.ReportMetric(micros(percentile(f.guest, 0.99)), "guest-p99-µs")
			slices.Sort(f.openAfterTick)
			slices.Sort(f.openOthers)
			b.ReportMetric(micros(percentile(f.openAfterTick, 0.50)), "after-tick-open-p50-µs")
			b.ReportMetric(micros(percentile(f.openOthers, 0.50)), "open-p50-µs")
		}
		slices.Sort(ref)
		b.ReportMetric(micros(percentile(ref, 0.50)), "ref-p50-µs")
		b.ReportMetric(micros(percentile(ref, 0.99)), "ref-p99-µs")
		if haveThreadCPU {
			slices.Sort(cpu)
			b.ReportMetric(micros(percentile(cpu, 0.50)), "p50-cpu-µs")
			b.ReportMetric(micros(percentile(cpu, 0.99)), "p99-cpu-µs")
		}
		for i, p := range f.phase {
			slices.Sort(p)
			b.ReportMetric(micros(percentile(p, 0.50)), phaseNames[i]+"-p50-µs")
			b.ReportMetric(micros(percentile(p, 0.99)), phaseNames[i]+"-p99-µs")
		}
	}
	if len(f.ticks) > 0 {
		slices.Sort(f.ticks)
		b.ReportMetric(micros(percentile(f.ticks, 0.50)), "tick-p50-µs")
	}
	if opts.TimeGuest && len(f.workerTicks) > 0 {
		slices.Sort(f.workerTicks)
		b.ReportMetric(micros(percentile(f.workerTicks, 0.50)), "worker-tick-p50-µs")
	}
	f.dumpLogs()
}

// refWords sizes refWork: six multiply–xorshift passes over 32 KB take
// about as long as a request, all in L1/L2.
const refWords = 4096

// refSink keeps refWork's result live, so the compiler cannot drop the work.
var refSink uint64

// refWork is BenchmarkRequestPath64's reference job: fixed, CPU-bound,
// allocation-free work whose timing spread is the machine's, not the
// plugin's.
func refWork(buf []uint64) uint64 {
	h := uint64(1)
	for range 6 {
		for i, w := range buf {
			h = (h ^ w ^ uint64(i)) * 0x9e3779b97f4a7c15
			h ^= h >> 29
		}
	}
	return h
}

// Guest runtime functions BenchmarkVMHeap counts: every heap allocation of
// the module goes through runtime.mallocgc, and each GC cycle starts in
// runtime.gcStart. The probe matches substrings, so it also instruments
// the helpers mallocgc calls (runtime.mallocgcTiny, ...); the counts are
// read by exact name so that an allocation counts once.
const (
	guestMalloc  = "runtime.mallocgc"
	guestGCStart = "runtime.gcStart"
)

// BenchmarkVMHeap: one whole request per op, as BenchmarkRequestPath64, on
// a module instrumented to count guest heap allocations and GC cycles.
// After a warm-up it reports, over the timed requests, the guest's heap
// allocations per request (guest-allocs/op, want 0), its GC cycles
// (gc-cycles, want 0) and the growth of the worker VMs' linear memory
// (growth-KiB, want 0), and for contrast the allocations and GC cycles of
// configuration and warm-up. Run with -benchtime 100000x. Its ns/op is not
// the uninstrumented cost.
func BenchmarkVMHeap(b *testing.B) {
	probe := hostsim.NewGuestProbe([]string{guestMalloc, guestGCStart})
	f := newBenchFleet(b, hostsim.Options{Probe: probe})
	f.warm(benchWarmup)
	mem := func() (total uint32) {
		for _, vm := range f.vms {
			total += vm.MemoryBytes()
		}
		return total
	}
	counts := func() (mallocs, gcs uint64) {
		return probe.Func(guestMalloc).Calls, probe.Func(guestGCStart).Calls
	}
	before := mem()
	mallocs0, gcs0 := counts()
	if mallocs0 == 0 {
		b.Fatal("no runtime.mallocgc call during configuration and warm-up: the probe is not attached")
	}
	if os.Getenv("GPUROUTE_BENCH_ALLOCSITES") != "" {
		probe.RecordCallers(guestMalloc, 6)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		f.step()
	}
	b.StopTimer()
	for site, n := range probe.Callers() {
		b.Logf("%d guest allocations at %s", n, site)
	}
	after := mem()
	mallocs1, gcs1 := counts()
	b.ReportMetric(float64(mallocs1-mallocs0)/float64(b.N), "guest-allocs/op")
	b.ReportMetric(float64(gcs1-gcs0), "gc-cycles")
	b.ReportMetric((float64(after)-float64(before))/1024, "growth-KiB")
	b.ReportMetric(float64(before)/1024/float64(len(f.vms)), "mem-KiB/vm")
	b.ReportMetric(float64(mallocs0), "warmup-allocs")
	b.ReportMetric(float64(gcs0), "warmup-gcs")
	f.dumpLogs()
}

// BenchmarkGuestProfile runs BenchmarkRequestPath64's traffic on a module
// whose functions matching GPUROUTE_BENCH_PROFILE (comma-separated
// substrings of wasm function names, such as "plugin_router.,scoring.Pick")
// are timed, and logs their inclusive time per request. Skipped without it.
func BenchmarkGuestProfile(b *testing.B) {
	match := os.Getenv("GPUROUTE_BENCH_PROFILE")
	if match == "" {
		b.Skip("set GPUROUTE_BENCH_PROFILE to substrings of guest function names")
	}
	probe := hostsim.NewGuestProbe(strings.Split(match, ","))
	f := newBenchFleet(b, hostsim.Options{Probe: probe})
	f.warm(benchWarmup)
	probe.Reset()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		f.step()
	}
	b.StopTimer()
	// Stats come most time first. The times are of outermost calls, with
	// the probe's own cost (of the order of a microsecond a call) in them.
	all := probe.Stats()
	for _, st := range all[:min(len(all), 40)] {
		b.Logf("%9.2f µs/request %8d calls %9.2f µs/call %9.2f µs max  %s", micros(st.Time)/float64(b.N),
			st.OuterCalls, micros(st.Time)/float64(st.OuterCalls), micros(st.Max), st.Name)
	}
}
