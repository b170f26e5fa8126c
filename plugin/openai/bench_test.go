package openai

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpuroute/gpuroute/scoring"
)

// routerBody builds a body shaped like plugin/router's BenchmarkRequestPath64
// traffic: encoding/json's output of a map (keys sorted, so "content" comes
// before "role" and "model" after "messages"), a ~30 KB system prompt with a
// ".\n" escape every 13 words, and a 1 KB question.
func routerBody() []byte {
	words := strings.Fields("the replica cache prefix token model request queue batch decode prefill " +
		"kernel tensor adapter memory latency throughput schedule policy context window answer tool")
	var s strings.Builder
	s.WriteString("You are assistant 0. Follow the policy below.\n")
	for i := 0; s.Len() < 30<<10; i++ {
		s.WriteString(words[(i*7)%len(words)])
		if i%13 == 12 {
			s.WriteString(".\n")
		} else {
			s.WriteByte(' ')
		}
	}
	var q strings.Builder
	q.WriteString("Question 0: ")
	for j := 0; q.Len() < 1024; j++ {
		q.WriteString(words[(j*5)%len(words)] + " ")
	}
	b, err := json.Marshal(map[string]any{
		"model": "meta-llama/Llama-3.1-8B-Instruct",
		"messages": []map[string]string{
			{"role": "system", "content": s.String()},
			{"role": "user", "content": q.String()},
		},
		"max_tokens": 256,
		"stream":     true,
	})
	if err != nil {
		panic(err)
	}
	return b
}

// BenchmarkParseTextRouter is the plugin's body step on the router
// benchmark's body: ParseText into the prefix hasher as plugin/router
// configures it (64-char blocks), then the seed. "count" writes into a
// counter instead, to separate the parse from the hashing.
func BenchmarkParseTextRouter(b *testing.B) {
	body := routerBody()
	b.Run("hasher", func(b *testing.B) {
		var p Parser
		var req Request
		var h scoring.PrefixHasher
		h.Init(scoring.DefaultBlockChars, (1<<20)/scoring.DefaultBlockChars)
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			h.ResetDeferred()
			p.ParseText(Chat, body, false, &h, &req)
			h.SetSeed(string(req.Model), "")
		}
	})
	b.Run("count", func(b *testing.B) {
		var p Parser
		var req Request
		var w countWriter
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			p.ParseText(Chat, body, false, &w, &req)
		}
	})
	b.Run("hashonly", func(b *testing.B) {
		// The hasher alone over the same text, in 2 KB writes.
		var p Parser
		var req Request
		var text strings.Builder
		p.ParseText(Chat, body, false, &text, &req)
		t := []byte(text.String())
		var h scoring.PrefixHasher
		h.Init(scoring.DefaultBlockChars, (1<<20)/scoring.DefaultBlockChars)
		b.ReportAllocs()
		b.SetBytes(int64(len(t)))
		for b.Loop() {
			h.ResetDeferred()
			for i := 0; i < len(t); i += 2048 {
				h.Write(t[i:min(i+2048, len(t))])
			}
		}
	})
}
