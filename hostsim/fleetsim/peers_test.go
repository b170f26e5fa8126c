package fleetsim

import "testing"

// testFleet builds a fleet of n replicas of hardware as Run does, before
// any request: the peers' Pick can be driven on it directly.
func testFleet(n int, hardware string) *Fleet {
	s := &sim{cfg: Config{}.withDefaults(), w: &Workload{}}
	s.f = &Fleet{cfg: s.cfg, s: s}
	for i, rc := range UniformReplicas(n, hardware) {
		s.f.replicas = append(s.f.replicas, newReplica(i, rc, s))
	}
	s.f.scrapes = make([]Scrape, n)
	s.load = make([][]float64, n)
	s.snapshot(0)
	return s.f
}

// promptOf returns a request whose prompt is a shared system prompt of
// sysTokens (seed sys) followed by its own question of qTokens.
func promptOf(id int, sys uint64, sysTokens, qTokens int) *Request {
	segs := []Segment{{Seed: sys, Tokens: sysTokens}, {Seed: uint64(id)*2 + 1001, Tokens: qTokens}}
	return NewRequest(id, 0, DefaultModel, "", segs, 64, 16)
}

func TestSGLangPick(t *testing.T) {
	tests := []struct {
		name     string
		inflight []int
		warm     int // replica whose tree holds the system prompt; -1 none
		sysTok   int // system prompt share of 1,000 prompt tokens
		want     int
	}{
		{"match above cache_threshold goes to the tree's worker", []int{0, 0, 0, 0}, 2, 500, 2},
		{"match below cache_threshold goes to the least loaded, first of equals", []int{3, 1, 1, 5}, 0, 250, 1},
		{"no match goes to the least loaded", []int{2, 2, 0, 1}, -1, 500, 2},
		{"imbalanced (65 apart, > 1.5x) ignores the match", []int{70, 5, 6, 6}, 0, 900, 1},
		{"65 apart but within 1.5x keeps the match", []int{200, 135, 140, 150}, 0, 900, 0},
		{"64 apart is balanced", []int{64, 0, 0, 0}, 0, 900, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newSGLang(PolicyOptions{})
			if err := p.Start(testFleet(4, "h100")); err != nil {
				t.Fatal(err)
			}
			copy(p.l.inflight, tt.inflight)
			req := promptOf(1, 7, tt.sysTok, 1000-tt.sysTok)
			if tt.warm >= 0 {
				p.idx[tt.warm].touchAll(p.tc.chain(promptOf(2, 7, tt.sysTok, 1000-tt.sysTok), sglBlockChars))
			}
			if got := p.Pick(0, req, 0); got.Replica != tt.want {
				t.Errorf("sglang.Pick(inflight %v, warm %d, shared %d/1000 tokens) = %d, want %d",
					tt.inflight, tt.warm, tt.sysTok, got.Replica, tt.want)
			}
		})
	}
}

func TestLLMDStickyPick(t *testing.T) {
	const sys, prompt = 3600, 4000 // 90% of the prompt shared: sticky where cached
	tests := []struct {
		name   string
		tokens []int64 // in-flight uncached prompt tokens per pod
		warm   []int   // pods whose index holds the system prompt
		want   int
	}{
		{"sticky pod despite a 10k-token backlog", []int64{0, 10_000, 0}, []int{1}, 1},
		{"the less loaded of two sticky pods", []int64{0, 9000, 5000}, []int{1, 2}, 2},
		{"18.8 s of backlog breaks stickiness", []int64{0, 300_000, 1000}, []int{1}, 0},
		{"17.9 s of backlog does not", []int64{0, 285_000, 1000}, []int{1}, 1},
		{"no sticky pod: the least in-flight plus uncached", []int64{100, 1000, 50}, nil, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newLLMDSticky(PolicyOptions{})
			if err := p.Start(testFleet(3, "h100")); err != nil {
				t.Fatal(err)
			}
			copy(p.tokens, tt.tokens)
			for _, i := range tt.warm {
				p.idx[i].touchAll(p.tc.chain(promptOf(9, 7, sys, prompt-sys), llmdBlockChars))
			}
			if got := p.Pick(0, promptOf(1, 7, sys, prompt-sys), 0); got.Replica != tt.want {
				t.Errorf("llm-d.Pick(in flight %v, warm %v) = %d, want %d", tt.tokens, tt.warm, got.Replica, tt.want)
			}
		})
	}
}

// TestLLMDStickyPartialMatch holds the token-load scorer's uncached term:
// a pod holding half the prompt (not sticky) beats an idle cold pod when
// its backlog is smaller than the half it saves.
func TestLLMDStickyPartialMatch(t *testing.T) {
	p := newLLMDSticky(PolicyOptions{})
	if err := p.Start(testFleet(2, "h100")); err != nil {
		t.Fatal(err)
	}
	p.tokens[1] = 1000
	p.idx[1].touchAll(p.tc.chain(promptOf(9, 7, 2000, 2000), llmdBlockChars))
	if got := p.Pick(0, promptOf(1, 7, 2000, 2000), 0); got.Replica != 1 {
		t.Errorf("llm-d.Pick(pod 1: half the prompt cached, 1,000 tokens in flight) = %d, want 1", got.Replica)
	}
}

// TestLLMDStickyInFlight holds inflight-load-producer's accounting: a
// request's uncached tokens count from dispatch to its first token.
func TestLLMDStickyInFlight(t *testing.T) {
	p := newLLMDSticky(PolicyOptions{})
	if err := p.Start(testFleet(2, "h100")); err != nil {
		t.Fatal(err)
	}
	req := promptOf(1, 7, 0, 4000)
	d := p.Pick(0, req, 0)
	steps := []struct {
		ev   EventKind
		want int64
	}{{Dispatched, 4000}, {Tokens, 4000}, {FirstToken, 0}, {Completed, 0}}
	for _, s := range steps {
		p.Observe(&Event{Kind: s.ev, Req: req, Replica: d.Replica})
		if got := p.tokens[d.Replica]; got != s.want {
			t.Errorf("after %v: in-flight tokens = %d, want %d", s.ev, got, s.want)
		}
	}
	refused := promptOf(2, 7, 0, 4000)
	d = p.Pick(0, refused, 0)
	p.Observe(&Event{Kind: Cancelled, Req: refused, Replica: d.Replica, Reason: Refused})
	if got := p.tokens[d.Replica]; got != 0 {
		t.Errorf("after a refusal: in-flight tokens = %d, want 0", got)
	}
}

func TestVLLMPrefixAwarePick(t *testing.T) {
	const sys = 1000
	p := newVLLMPrefixAware(PolicyOptions{Seed: 1})
	if err := p.Start(testFleet(4, "h100")); err != nil {
		t.Fatal(err)
	}
	full := promptOf(1, 7, sys, 200)
	half := promptOf(2, 7, sys/2, 0)
	p.record(p.tc.chain(full, vllmChunkChars), 1)
	p.record(p.tc.chain(half, vllmChunkChars), 2)
	// Replica 1 is busy (ignored: load plays no part).
	p.l.inflight[1] = 500
	for k := range 20 {
		if got := p.Pick(0, promptOf(10+k, 7, sys, 300), 0); got.Replica != 1 {
			t.Fatalf("vllm-prefixaware.Pick(system prompt on 1, half of it on 2) = %d, want 1", got.Replica)
		}
	}
	seen := map[int]bool{}
	for k := range 40 {
		seen[p.Pick(0, promptOf(100+k, uint64(100+k), 400, 10), 0).Replica] = true
	}
	if len(seen) != 4 {
		t.Errorf("vllm-prefixaware.Pick(40 unmatched prompts) reached replicas %v, want all 4 (random)", seen)
	}
}

// TestPeersOnFewPrefixes runs the peers on a small few-prefixes fleet: all
// complete, and the affinity peers hit their prefix cache more than a
// rotation that spreads every prompt.
func TestPeersOnFewPrefixes(t *testing.T) {
	w := smallSharedPrefix(4, 20, 2000, 4)
	cfg := Config{Replicas: UniformReplicas(3, "h100")}
	names := []string{"round-robin", "sglang", "llm-d", "llm-d-322", "vllm-prefixaware"}
	res, err := RunPolicies(cfg, w, names, PolicyOptions{Seed: 1}, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		s := r.Summary
		if s.Completed != len(w.Requests) {
			t.Errorf("%s: completed %d of %d", names[i], s.Completed, len(w.Requests))
		}
		if i > 0 && s.PrefixHitRate <= res[0].Summary.PrefixHitRate {
			t.Errorf("%s: prefix hit rate %.3f, want above round-robin's %.3f", names[i], s.PrefixHitRate, res[0].Summary.PrefixHitRate)
		}
	}
}
