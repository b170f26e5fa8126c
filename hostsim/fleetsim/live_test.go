package fleetsim

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpuroute/gpuroute/scoring"
)

// liveRun submits each request after the previous one completed and
// returns the modelled TTFTs, cached tokens and token counts.
func liveRun(t *testing.T, l *LiveReplica, reqs []LiveRequest) (ttft []float64, cached, tokens []int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, q := range reqs {
		s, err := l.Submit(q)
		if err != nil {
			t.Fatal(err)
		}
		n, done := 0, false
		for !done {
			if n, done, err = s.Wait(ctx, n); err != nil {
				t.Fatalf("Wait: %v after %d tokens", err, n)
			}
		}
		ttft = append(ttft, s.TTFT().Seconds())
		cached = append(cached, s.CachedTokens())
		tokens = append(tokens, n)
	}
	return ttft, cached, tokens
}

// TestLiveMatchesRun: a LiveReplica is the fleet simulator's engine, so a
// cold prompt, a warm one (same prefix, new question) and a first adapter
// use get the TTFT Run gives the same shapes, within 10% (equal in fact),
// and the warm one reports its cached prefix.
func TestLiveMatchesRun(t *testing.T) {
	h := scoring.DefaultHardware()
	rc := ReplicaConfig{Hardware: h}
	const system, question, out = 1600, 400, 4
	shared := Segment{Seed: 42, Tokens: system}
	runReqs := []*Request{
		NewRequest(0, 0, DefaultModel, "", []Segment{shared, {Seed: 43, Tokens: question}}, out, out),
		NewRequest(1, 100*time.Second, DefaultModel, "", []Segment{shared, {Seed: 44, Tokens: question}}, out, out),
		NewRequest(2, 200*time.Second, DefaultModel, "sql-lora", []Segment{{Seed: 45, Tokens: question}}, out, out),
	}
	want := runOne(t, rc, runReqs)

	text := func(seed byte, tokens int) string { return strings.Repeat(string('a'+seed), tokens*CharsPerToken) }
	prefix := text(0, system)
	l := NewLiveReplica(LiveOptions{Replica: rc, TimeScale: MinTimeScale})
	defer l.Close()
	got, cached, tokens := liveRun(t, l, []LiveRequest{
		{Prompt: prefix + text(1, question), MaxTokens: out},
		{Prompt: prefix + text(2, question), MaxTokens: out},
		{Adapter: "sql-lora", Prompt: text(3, question), MaxTokens: out},
	})
	for i, name := range []string{"cold", "warm", "adapter"} {
		if math.Abs(got[i]-want[i]) > 0.1*want[i] {
			t.Errorf("%s: live TTFT = %.4f s, Run's = %.4f s, want within 10%%", name, got[i], want[i])
		}
		if tokens[i] != out {
			t.Errorf("%s: live stream generated %d tokens, want %d", name, tokens[i], out)
		}
	}
	if cached[0] != 0 || cached[1] != system {
		t.Errorf("cached tokens cold, warm = %d, %d; want 0, %d", cached[0], cached[1], system)
	}
	t.Logf("TTFT live/Run: cold %.4f/%.4f s, warm %.4f/%.4f s, adapter %.4f/%.4f s", got[0], want[0], got[1], want[1], got[2], want[2])
}

// TestLiveBatches: requests submitted together share engine steps
// (continuous batching): two equal prompts finish their prefill in one
// step, so both first tokens come at the same modelled time, sooner than
// two prefills one after the other.
func TestLiveBatches(t *testing.T) {
	h := scoring.DefaultHardware()
	l := NewLiveReplica(LiveOptions{Replica: ReplicaConfig{Hardware: h}, TimeScale: MinTimeScale})
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ss []*LiveStream
	l.mu.Lock() // both arrive at the same modelled instant
	for i := range 2 {
		s, err := l.submitLocked(LiveRequest{Prompt: strings.Repeat(string(rune('p'+i)), 2000*CharsPerToken), MaxTokens: 2})
		if err != nil {
			t.Fatal(err)
		}
		ss = append(ss, s)
	}
	l.mu.Unlock()
	for _, s := range ss {
		for n, done := 0, false; !done; {
			var err error
			if n, done, err = s.Wait(ctx, n); err != nil {
				t.Fatal(err)
			}
		}
	}
	serial := 2 * h.PrefillSeconds(2000)
	if a, b := ss[0].TTFT(), ss[1].TTFT(); a != b || b.Seconds() >= serial {
		t.Errorf("TTFT of two prompts submitted together = %v, %v; want equal (one step) and under %.4f s (one prefill after the other)", a, b, serial)
	}
}

// TestLiveCancel: a cancelled request leaves the engine (no request
// counted, its blocks released) and Wait reports it.
func TestLiveCancel(t *testing.T) {
	l := NewLiveReplica(LiveOptions{TimeScale: 1})
	defer l.Close()
	s, err := l.Submit(LiveRequest{Prompt: strings.Repeat("z", 4000), MaxTokens: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if st := l.State(); st.Waiting+st.Running != 1 || st.KVUsedTokens == 0 {
		t.Fatalf("State() with one request = %+v, want it waiting or running, holding KV", st)
	}
	s.Cancel()
	if st := l.State(); st.Waiting+st.Running != 0 || st.KVUsedTokens != 0 {
		t.Errorf("State() after Cancel = %+v, want an empty engine", st)
	}
	if _, _, err := s.Wait(context.Background(), 0); err != ErrLiveCancelled {
		t.Errorf("Wait after Cancel = %v, want ErrLiveCancelled", err)
	}
}

// TestPromptChain: equal text prefixes give equal leading hashes, the key
// separates models, and a partial block is not hashed.
func TestPromptChain(t *testing.T) {
	a := promptChain(1, strings.Repeat("x", 128)+strings.Repeat("y", 64)+"tail")
	b := promptChain(1, strings.Repeat("x", 128)+strings.Repeat("z", 64))
	c := promptChain(2, strings.Repeat("x", 128))
	if len(a) != 3 || len(b) != 3 || len(c) != 2 {
		t.Fatalf("chain lengths = %d, %d, %d; want 3, 3, 2", len(a), len(b), len(c))
	}
	if a[0] != b[0] || a[1] != b[1] || a[2] == b[2] || c[0] == a[0] {
		t.Errorf("textChain: shared prefix %v/%v, diverging block %v/%v, other key %v", a[:2], b[:2], a[2], b[2], c[0])
	}
}
