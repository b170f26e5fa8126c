package scoring_test

import (
	"fmt"
	"strings"

	"github.com/gpuroute/gpuroute/scoring"
	"github.com/gpuroute/gpuroute/scoring/prefix"
)

// A request with a long shared system prompt: the warm replica is busier,
// but the cached prefix saves more prefill than its queue costs.
func ExamplePick() {
	now := int64(1_000_000_000_000)
	h100, _ := scoring.LookupHardware("h100")
	replicas := []scoring.Replica{
		{Addr: "10.0.0.1:8000", Hardware: h100, Healthy: true, ScrapedNanos: now, WaitingRequests: 2},
		{Addr: "10.0.0.2:8000", Hardware: h100, Healthy: true, ScrapedNanos: now},
	}
	for i := range replicas {
		replicas[i].AddrHash = prefix.HashString(replicas[i].Addr)
	}

	// Hash the prompt as it streams out of the JSON parser.
	var hasher prefix.Hasher
	hasher.Init(prefix.DefaultBlockChars, 0)
	hasher.Reset("llama-3-8b", "")
	hasher.WriteString(strings.Repeat("You are a careful assistant. ", 1000))
	hasher.WriteString("What is the capital of France?")

	// The router sent this prefix to replica 0 before.
	index := prefix.NewIndex(prefix.IndexConfig{})
	index.Record(0, hasher.Chain())
	cached := make([]int, len(replicas))
	index.Lookup(hasher.Chain(), cached)

	p := scoring.DefaultParams()
	req := scoring.Request{PromptTokens: hasher.Tokens(), Chain: hasher.Chain(), Model: "llama-3-8b"}
	var d scoring.Decision
	scoring.Pick(&p, &req, replicas, cached, nil, now, &d)

	fmt.Println("chosen:", replicas[d.Index].Addr, d.Reason)
	for _, c := range d.Top[:d.NumTop] {
		fmt.Printf("  %s W=%.3fs A=%.3fs P=%.3fs k=%d\n", replicas[c.Index].Addr, c.WaitSec, c.AdapterSec, c.PrefillSec, c.CachedTokens)
	}
	// Output:
	// chosen: 10.0.0.1:8000 prefix-affinity
	//   10.0.0.1:8000 W=0.360s A=0.000s P=0.031s k=7248
	//   10.0.0.2:8000 W=0.000s A=0.000s P=1.250s k=0
}

func ExampleLookupHardware() {
	h, ok := scoring.LookupHardware("A100")
	fmt.Println(h.Name, ok)
	fmt.Printf("prefill of 2000 tokens: %.2fs, decode step at batch 32: %.1fms\n", h.PrefillSeconds(2000), 1000*h.DecodeStepSeconds(32))
	// Output:
	// a100 true
	// prefill of 2000 tokens: 0.66s, decode step at batch 32: 23.1ms
}

func ExampleNewProfile() {
	m, _ := scoring.LookupModelShape("llama-3-70b")
	h, err := scoring.NewProfile("h100", m, 4) // one replica on 4 H100s
	if err != nil {
		panic(err)
	}
	fmt.Printf("prefill of 2000 tokens: %.2fs, decode step: %.1fms, KV cache: %d tokens\n",
		h.PrefillSeconds(2000), 1000*h.DecodeStepSeconds(1), h.KVCapacityTokens)
	_, err = scoring.NewProfile("l40s", m, 1)
	fmt.Println(err != nil)
	// Output:
	// prefill of 2000 tokens: 0.76s, decode step: 26.4ms, KV cache: 419878 tokens
	// true
}

func ExampleCalibrator() {
	label, _ := scoring.LookupHardware("h100")
	truth, _ := scoring.LookupHardware("l40s") // what the replica really is
	var c scoring.Calibrator
	for i := 0; i < 100; i++ {
		tokens := 500 + 70*i
		c.Observe(&label, tokens, 0.2+truth.PrefillSeconds(tokens), 0.2)
	}
	fitted := c.Apply(&label)
	fmt.Printf("per-token: label %.2fms, fitted %.2fms\n", 1000*label.PrefillSecPerToken, 1000*fitted.PrefillSecPerToken)
	// Output:
	// per-token: label 0.15ms, fitted 0.60ms
}
