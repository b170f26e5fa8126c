package fleetsim

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuroute/gpuroute/plugin/metrics"
	"github.com/gpuroute/gpuroute/scoring"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

const mooncakeSlice = "../../testdata/traces/mooncake_fast25_conversation_trace_first2000.jsonl"

func TestDeterminism(t *testing.T) {
	for _, name := range []string{"shared-prefix", "lora", "drain"} {
		t.Run(name, func(t *testing.T) {
			var prev []Summary
			for run := 0; run < 2; run++ {
				w, err := Generate(name, WorkloadOptions{Seed: 3, Duration: 40 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				cfg := Config{Replicas: UniformReplicas(4, "h100")}
				res, err := RunPolicies(cfg, w, []string{"llm-d", "sglang", "oracle"}, PolicyOptions{Seed: 3}, 2, nil)
				if err != nil {
					t.Fatal(err)
				}
				var got []Summary
				for _, r := range res {
					got = append(got, r.Summary)
				}
				if run == 1 && !reflect.DeepEqual(got, prev) {
					t.Errorf("Run(%s, seed 3) differs between runs:\n%+v\n%+v", name, got, prev)
				}
				prev = got
			}
		})
	}
}

func TestKVEvictionAtCapacity(t *testing.T) {
	// 64 blocks = 1,024 tokens of KV. Three 480-token prompts (30 blocks +
	// 1 private each) run one after another: the third must evict 27 of
	// the first's 30 cached blocks, tail first as vLLM frees them, so the
	// first prompt again finds only its first 3 blocks (48 tokens).
	a := []Segment{{Seed: 1, Tokens: 480}}
	b := []Segment{{Seed: 2, Tokens: 480}}
	c := []Segment{{Seed: 3, Tokens: 480}}
	reqs := []*Request{
		NewRequest(0, 0, DefaultModel, "", a, 1, 1),
		NewRequest(1, 1*time.Second, DefaultModel, "", a, 1, 1), // warm hit
		NewRequest(2, 2*time.Second, DefaultModel, "", b, 1, 1),
		NewRequest(3, 3*time.Second, DefaultModel, "", c, 1, 1), // evicts a
		NewRequest(4, 4*time.Second, DefaultModel, "", a, 1, 1), // head only
	}
	res, cached := runOneReplica(t, 64, reqs)
	if want := []int{0, 464, 0, 0, 48}; !reflect.DeepEqual(cached, want) {
		t.Errorf("cached tokens per request = %v, want %v", cached, want)
	}
	if res.KVEvictions == 0 {
		t.Errorf("KVEvictions = 0, want > 0 at capacity")
	}
}

// TestAnswersTakeKV: an answer's full blocks stay cached, as vLLM keeps
// them. On 64 blocks, a 480-token prompt with a 480-token answer leaves 60
// cached blocks; the next 480-token prompt needs 31 and evicts 27, all from
// the first request's answer (its tail), so that prompt still hits in full.
func TestAnswersTakeKV(t *testing.T) {
	a := []Segment{{Seed: 1, Tokens: 480}}
	b := []Segment{{Seed: 2, Tokens: 480}}
	reqs := []*Request{
		NewRequest(0, 0, DefaultModel, "", a, 480, 480),
		NewRequest(1, 100*time.Second, DefaultModel, "", b, 1, 1),
		NewRequest(2, 200*time.Second, DefaultModel, "", a, 1, 1),
	}
	res, cached := runOneReplica(t, 64, reqs)
	if res.KVEvictions != 27 {
		t.Errorf("KVEvictions = %d, want 27 (b's 31 blocks beside a's 30 prompt and 30 answer blocks)", res.KVEvictions)
	}
	if want := []int{0, 0, 464}; !reflect.DeepEqual(cached, want) {
		t.Errorf("cached tokens per request = %v, want %v", cached, want)
	}
}

// runOneReplica runs reqs on one replica of kvBlocks KV blocks and returns
// the result and each request's cached tokens at its first token.
func runOneReplica(t *testing.T, kvBlocks int, reqs []*Request) (*Result, []int) {
	t.Helper()
	w := &Workload{Name: t.Name(), Requests: reqs}
	w.finish()
	rec := &cacheRecorder{}
	res, err := Run(Config{Replicas: []ReplicaConfig{{KVBlocks: kvBlocks, MaxLoras: -1}}}, w, rec)
	if err != nil {
		t.Fatal(err)
	}
	return res, rec.cached
}

type cacheRecorder struct {
	roundRobin
	cached []int
}

func (p *cacheRecorder) Observe(ev *Event) {
	if ev.Kind == FirstToken {
		for len(p.cached) <= ev.Req.ID {
			p.cached = append(p.cached, -1)
		}
		p.cached[ev.Req.ID] = ev.CachedTokens
	}
}

func TestAdapterLoadTiers(t *testing.T) {
	h := scoring.DefaultHardware()
	// One GPU slot, host cache of 2: x (storage), y (storage, evicts x
	// from the GPU), x again (host), z (storage, host cache drops y), x (host).
	seq := []string{"x", "y", "x", "z", "y"}
	var reqs []*Request
	for i, a := range seq {
		reqs = append(reqs, NewRequest(i, time.Duration(i)*10*time.Second, DefaultModel, a, []Segment{{Seed: uint64(i + 1), Tokens: 100}}, 1, 1))
	}
	ttft := runOne(t, ReplicaConfig{Hardware: h, MaxLoras: 1, MaxCPULoras: 2}, reqs)
	base := h.PrefillSeconds(100)
	wantLoad := []float64{h.AdapterLoadStorageSec, h.AdapterLoadStorageSec, h.AdapterLoadHostSec, h.AdapterLoadStorageSec, h.AdapterLoadStorageSec}
	for i := range seq {
		if got := ttft[i] - base; got < wantLoad[i]-1e-6 || got > wantLoad[i]+1e-6 {
			t.Errorf("adapter %q (request %d) load = %.4f s, want %.4f s", seq[i], i, got, wantLoad[i])
		}
	}
}

func TestDrainHardStop(t *testing.T) {
	// Two replicas; long requests; replica 0 drains at 1 s with a 2 s
	// deadline: what is left on it at 3 s is migrated and re-dispatched to
	// replica 1, and completes there.
	var reqs []*Request
	for i := 0; i < 8; i++ {
		reqs = append(reqs, NewRequest(i, time.Duration(i)*50*time.Millisecond, DefaultModel, "", []Segment{{Seed: uint64(i + 1), Tokens: 500}}, 2000, 2000))
	}
	w := &Workload{Name: "drain-test", Requests: reqs,
		Actions: []Action{{At: time.Second, Kind: ActionDrain, Replica: 0, Deadline: 2 * time.Second}}}
	w.finish()
	rec := &migrationRecorder{}
	res, err := Run(Config{Replicas: UniformReplicas(2, "h100")}, w, rec)
	if err != nil {
		t.Fatal(err)
	}
	s := res.Summary
	if s.Migrated != 4 || s.Completed != 8 || s.Failed != 0 {
		t.Errorf("drain: migrated %d, completed %d, failed %d; want 4, 8, 0", s.Migrated, s.Completed, s.Failed)
	}
	if s.Drain.DeadlineSec != 2 || s.Drain.FinishedSec != 2 || s.Drain.NewAfterClose != 0 {
		t.Errorf("drain summary = %+v, want deadline 2, finished 2, new after close 0", s.Drain)
	}
	for _, ev := range rec.cancels {
		if ev.at != 3*time.Second || ev.reason != Migrated || ev.replica != 0 {
			t.Errorf("cancel %+v, want at 3s, migrated, from replica 0", ev)
		}
	}
	for id, r := range rec.lastReplica {
		if r != 1 && rec.migrated[id] {
			t.Errorf("migrated request %d re-dispatched to %d, want 1", id, r)
		}
	}
}

type migrationRecorder struct {
	roundRobin
	cancels []struct {
		at      time.Duration
		reason  CancelReason
		replica int
	}
	lastReplica map[int]int
	migrated    map[int]bool
}

func (p *migrationRecorder) Observe(ev *Event) {
	if p.lastReplica == nil {
		p.lastReplica, p.migrated = map[int]int{}, map[int]bool{}
	}
	switch ev.Kind {
	case Cancelled:
		p.cancels = append(p.cancels, struct {
			at      time.Duration
			reason  CancelReason
			replica int
		}{ev.At, ev.Reason, ev.Replica})
		p.migrated[ev.Req.ID] = true
	case Dispatched:
		p.lastReplica[ev.Req.ID] = ev.Replica
	}
}

func TestTraceSharesPrefixes(t *testing.T) {
	w, err := LoadTrace(mooncakeSlice, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Requests 0 and 1 share hash_id 0 (one 512-token block), then differ.
	a, b := w.Requests[0], w.Requests[1]
	ta, tb := a.AppendPrompt(nil), b.AppendPrompt(nil)
	if len(ta) != a.PromptTokens*CharsPerToken {
		t.Errorf("prompt bytes = %d, want %d", len(ta), a.PromptTokens*CharsPerToken)
	}
	common := 0
	for common < min(len(ta), len(tb)) && ta[common] == tb[common] {
		common++
	}
	if common < 512*CharsPerToken || common > 512*CharsPerToken+8 {
		t.Errorf("common text prefix = %d bytes, want 512 tokens = %d (+ chance)", common, 512*CharsPerToken)
	}
	ca, cb := a.Chain(), b.Chain()
	k := 0
	for k < min(len(ca), len(cb)) && ca[k] == cb[k] {
		k++
	}
	if k != 512/BlockTokens {
		t.Errorf("shared KV blocks = %d, want %d", k, 512/BlockTokens)
	}
	// A text-hashing router sees the same sharing.
	var tc textChain
	x := append([]uint64(nil), tc.chain(a, 64)...)
	y := tc.chain(b, 64)
	m := 0
	for m < min(len(x), len(y)) && x[m] == y[m] {
		m++
	}
	if m != 512*CharsPerToken/64 {
		t.Errorf("shared 64-char text blocks = %d, want %d", m, 512*CharsPerToken/64)
	}
	// Replay on 16 replicas: a cache-aware policy gets more prefix hits than
	// round-robin (which still gets the shared first block now and then).
	cfg := Config{Replicas: UniformReplicas(16, "h100")}
	aware, err := Run(cfg, w, newSGLang(PolicyOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	rr, err := Run(cfg, w, &roundRobin{})
	if err != nil {
		t.Fatal(err)
	}
	if a, r := aware.Summary.PrefixHitRate, rr.Summary.PrefixHitRate; !(a > r && r > 0) {
		t.Errorf("Mooncake slice prefix hit rate: sglang %.3f, round-robin %.3f; want sglang > round-robin > 0", a, r)
	}
}

func TestAzureTrace(t *testing.T) {
	w, err := LoadTrace("../../testdata/traces/azure_llm_inference_2023_conv_first300.csv", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Requests) != 300 || w.Requests[0].PromptTokens != 374 || w.Requests[1].Arrival <= 0 {
		t.Errorf("azure: %d requests, first prompt %d, second arrival %v; want 300, 374, > 0",
			len(w.Requests), w.Requests[0].PromptTokens, w.Requests[1].Arrival)
	}
}

// busyReplica returns a replica in the middle of a LoRA workload.
func busyReplica(t *testing.T) *Replica {
	t.Helper()
	w, err := Generate("lora", WorkloadOptions{Seed: 1, Duration: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	st := &stopper{at: 15 * time.Second}
	if _, err := Run(Config{Replicas: UniformReplicas(2, "h100"), Horizon: 15 * time.Second}, w, st); err != nil {
		t.Fatal(err)
	}
	return st.f.Replica(0)
}

type stopper struct {
	roundRobin
	at time.Duration
	f  *Fleet
}

func (p *stopper) Start(f *Fleet) error { p.f = f; return p.roundRobin.Start(f) }

func TestMetricsTextParses(t *testing.T) {
	r := busyReplica(t)
	for _, engine := range []string{EngineVLLM, EngineSGLang, EngineTGI} {
		t.Run(engine, func(t *testing.T) {
			text := r.MetricsText(nil, engine)
			p := expfmt.NewTextParser(model.UTF8Validation)
			fams, err := p.TextToMetricFamilies(bytes.NewReader(text))
			if err != nil {
				t.Fatalf("expfmt parse: %v\n%s", err, text)
			}
			waiting := map[string]string{EngineVLLM: vllmWaiting, EngineSGLang: sglQueue, EngineTGI: tgiQueueSize}[engine]
			f, ok := fams[waiting]
			if !ok || f.GetMetric()[0].GetGauge().GetValue() != float64(r.Waiting()) {
				t.Errorf("%s = %v, want %d", waiting, f, r.Waiting())
			}
		})
	}
}

// TestMetricsCrossCheckPlugin parses the rendered pages with the plugin's own
// parser (plugin/metrics) and compares the figures with the replica state.
func TestMetricsCrossCheckPlugin(t *testing.T) {
	r := busyReplica(t)
	for _, engine := range []string{EngineVLLM, EngineSGLang, EngineTGI} {
		t.Run(engine, func(t *testing.T) {
			e, err := metrics.ParseEngine(engine)
			if err != nil {
				t.Fatal(err)
			}
			p, err := metrics.NewParser(e, metrics.DefaultNames(e))
			if err != nil {
				t.Fatal(err)
			}
			var s metrics.Sample
			text := r.MetricsText(nil, engine)
			if err := p.Parse(text, &s); err != nil {
				t.Fatalf("Parse(%s page) = %v\n%s", engine, err, text)
			}
			if s.Waiting != int64(r.Waiting()) || s.Running != int64(r.Running()) {
				t.Errorf("waiting, running = %d, %d, want %d, %d", s.Waiting, s.Running, r.Waiting(), r.Running())
			}
			if engine == EngineTGI {
				return
			}
			if d := s.KVUsage - r.KVUsage(); d > 1e-9 || d < -1e-9 {
				t.Errorf("KV usage = %v, want %v", s.KVUsage, r.KVUsage())
			}
			if s.KVCapacityTokens != int64(r.KVCapacityTokens()) {
				t.Errorf("KV capacity = %d tokens, want %d", s.KVCapacityTokens, r.KVCapacityTokens())
			}
			if engine == EngineVLLM {
				var names []string
				for _, a := range s.RunningAdapters {
					names = append(names, a.String())
				}
				var want []string
				for _, sl := range r.slots {
					if sl.active > 0 {
						want = append(want, sl.name)
					}
				}
				if strings.Join(names, ",") != strings.Join(want, ",") || s.MaxAdapters != int64(r.cfg.MaxLoras) {
					t.Errorf("running adapters %v max %d, want %v max %d", names, s.MaxAdapters, want, r.cfg.MaxLoras)
				}
			}
		})
	}
}

func TestParseHardware(t *testing.T) {
	for _, c := range []struct {
		name, spec string
		replicas   int
		want       string
		ok         bool
	}{
		{"single", "h100", 3, "h100,h100,h100", true},
		{"mixed", "h100:2,a100:1,l4:1", 0, "h100,h100,a100,l4", true},
		{"repeat", "h100,a100", 4, "h100,a100,h100,a100", true},
		{"unknown", "tpu", 1, "", false},
		{"bad count", "h100:x", 0, "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseHardware(c.spec, c.replicas)
			if (err == nil) != c.ok {
				t.Fatalf("ParseHardware(%q, %d) error = %v, want ok %v", c.spec, c.replicas, err, c.ok)
			}
			var names []string
			for _, r := range got {
				names = append(names, r.Hardware.Name)
			}
			if strings.Join(names, ",") != c.want {
				t.Errorf("ParseHardware(%q, %d) = %v, want %s", c.spec, c.replicas, names, c.want)
			}
		})
	}
}

func TestAllBaselinesComplete(t *testing.T) {
	w, err := Generate("multi-turn", WorkloadOptions{Seed: 2, Duration: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	res, err := RunPolicies(Config{Replicas: UniformReplicas(3, "h100")}, w, BaselineNames, PolicyOptions{Seed: 2}, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Summary.Completed != len(w.Requests) || r.Summary.Failed != 0 {
			t.Errorf("%s: completed %d of %d, failed %d", r.Summary.Policy, r.Summary.Completed, len(w.Requests), r.Summary.Failed)
		}
	}
	var buf bytes.Buffer
	if err := WriteHTML(&buf, "t", []WorkloadResults{{Workload: w, Results: res}}); err != nil || !bytes.Contains(buf.Bytes(), []byte("<svg")) {
		t.Errorf("WriteHTML: err %v, svg %v", err, bytes.Contains(buf.Bytes(), []byte("<svg")))
	}
}

// BenchmarkSimulate measures simulator speed on the Mooncake slice (2,000
// requests, 16 replicas) with round-robin (the cheapest policy).
func BenchmarkSimulate(b *testing.B) {
	b.ReportAllocs()
	w, err := LoadTrace(mooncakeSlice, 0)
	if err != nil {
		b.Fatal(err)
	}
	w.Prepare()
	var events uint64
	var wall time.Duration
	for i := 0; i < b.N; i++ {
		res, err := Run(Config{Replicas: UniformReplicas(16, "h100")}, w, &roundRobin{})
		if err != nil {
			b.Fatal(err)
		}
		events += res.Events
		wall += res.Wall
	}
	b.ReportMetric(float64(events)/wall.Seconds(), "events/s")
	b.ReportMetric(float64(len(w.Requests)*b.N)/wall.Seconds(), "requests/s")
}

// TestOracleLoRA holds the oracle to being the bound it is reported as on
// LoRA fleets: with the engines' exact adapter caches and the router's
// memory of sends, it must do at least as well as pinning each adapter to
// where it is resident. Given only the request's own adapter tier and no
// memory, it queued requests behind full adapter slots and thrashed the
// host caches (TTFT mean 2.6 s against always-warm's 0.9 s).
func TestOracleLoRA(t *testing.T) {
	w, err := Generate("lora", WorkloadOptions{Seed: 1, Duration: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	res, err := RunPolicies(Config{Replicas: UniformReplicas(4, "h100")}, w, []string{"oracle", "always-warm"}, PolicyOptions{Seed: 1}, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	oracle, warm := res[0].Summary, res[1].Summary
	t.Logf("TTFT mean/p99: oracle %.3f/%.3f s, always-warm %.3f/%.3f s; storage loads %d vs %d",
		oracle.TTFTMeanSec, oracle.TTFTP99Sec, warm.TTFTMeanSec, warm.TTFTP99Sec, res[0].StorageLoads, res[1].StorageLoads)
	if oracle.TTFTMeanSec > warm.TTFTMeanSec {
		t.Errorf("lora seed 1 (60 s): oracle TTFT mean = %.3f s, want <= always-warm's %.3f s", oracle.TTFTMeanSec, warm.TTFTMeanSec)
	}
}

// TestHostCacheRecency: the host LoRA cache is an LRU over uses, as vLLM's
// worker manager keeps it, not over loads: an adapter in steady use on the
// GPU must not age out of host memory behind adapters loaded after it.
func TestHostCacheRecency(t *testing.T) {
	r := newReplica(0, ReplicaConfig{Hardware: scoring.DefaultHardware(), MaxLoras: 2, MaxCPULoras: 2}, nil)
	use := func(at time.Duration, name string) float64 {
		sec, ok := r.acquireAdapter(name, at)
		if !ok {
			t.Fatalf("acquireAdapter(%s) at %v: no slot", name, at)
		}
		r.releaseAdapter(name, at+time.Second)
		return sec
	}
	use(0, "x")
	use(10*time.Second, "y")
	if sec := use(20*time.Second, "x"); sec != 0 {
		t.Fatalf("x on the GPU again: load %.3f s, want 0", sec)
	}
	use(30*time.Second, "z") // takes y's GPU slot; the host cache must drop y, not x
	if want := []string{"x", "z"}; !slices.Equal(r.host, want) {
		t.Errorf("host cache after x, y, x, z = %v, want %v", r.host, want)
	}
	if tier, _ := r.AdapterTier("y"); tier != scoring.TierStorage {
		t.Errorf("AdapterTier(y) = %v, want %v", tier, scoring.TierStorage)
	}
}

// workSeen is the oracle, recording the work it saw on replica 0 at each pick.
type workSeen struct {
	oracle
	queued []int64
}

func (p *workSeen) Pick(now time.Duration, req *Request, n int) Decision {
	d := p.oracle.Pick(now, req, n)
	p.queued = append(p.queued, p.reps[0].PeerWork.QueuedTokens)
	return d
}

// TestOracleSeesPrefillProgress: the oracle's exact state counts what is
// left of a prefill in the step in flight, as the engine will run it, not
// the whole chunk until the step ends. Counted whole, the oracle charged a
// replica mid-prefill its full prompt (bimodal, one request queued: ETTFT
// predicted 0.369 s, measured 0.255 s) and trailed round-robin there.
func TestOracleSeesPrefillProgress(t *testing.T) {
	h := scoring.DefaultHardware()
	const prompt = 8000 // one step: the default budget holds it
	step := h.PrefillFixedSec + prompt*h.PrefillSecPerToken + prompt*prompt*h.PrefillSecPerToken2
	at := time.Duration(step / 2 * 1e9)
	reqs := []*Request{
		NewRequest(0, 0, DefaultModel, "", []Segment{{Seed: 1, Tokens: prompt}}, 1, 1),
		NewRequest(1, at, DefaultModel, "", []Segment{{Seed: 2, Tokens: 100}}, 1, 1),
	}
	w := &Workload{Name: "progress", Requests: reqs}
	w.finish()
	p := &workSeen{}
	if _, err := Run(Config{Replicas: []ReplicaConfig{{Hardware: h}}}, w, p); err != nil {
		t.Fatal(err)
	}
	if len(p.queued) != 2 {
		t.Fatalf("oracle picked %d times, want 2", len(p.queued))
	}
	if got := p.queued[1]; got < prompt/2-50 || got > prompt/2+50 {
		t.Errorf("halfway through an %d-token prefill step the oracle saw %d tokens queued, want about %d", prompt, got, prompt/2)
	}
}
