package router

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuroute/gpuroute/hostsim"
)

// feedbackFleet is two replicas behind one worker, whose responses the
// tests write.
func feedbackFleet(t *testing.T) *testFleet {
	t.Helper()
	f := newTestFleet(t, 1, 2, "")
	f.advance(time.Second)
	return f
}

// send routes body on path and returns the stream and its destination.
func (f *testFleet) send(path, body string) (*hostsim.Stream, string) {
	f.t.Helper()
	return f.sendWith(path, body)
}

// sendWith is send with extra request headers.
func (f *testFleet) sendWith(path, body string, extra ...[2]string) (*hostsim.Stream, string) {
	f.t.Helper()
	s, err := f.vms[0].Root(testRootID).NewStream()
	if err != nil {
		f.t.Fatalf("NewStream = %v", err)
	}
	hdrs := append([][2]string{{":method", "POST"}, {":path", path}, {":authority", "gw"}, {"content-type", "application/json"}}, extra...)
	if _, err := s.RequestHeaders(hdrs, false); err != nil {
		f.t.Fatalf("RequestHeaders = %v", err)
	}
	if _, err := s.RequestBody([]byte(body), true); err != nil {
		f.t.Fatalf("RequestBody = %v", err)
	}
	dst, _ := s.RequestHeader(HeaderDestination)
	if dst == "" {
		f.t.Fatalf("%s: no destination", path)
	}
	return s, dst
}

// respond streams events as one chunk each, then ends the stream.
func (f *testFleet) respond(s *hostsim.Stream, events ...string) {
	f.t.Helper()
	if _, err := s.ResponseHeaders([][2]string{{":status", "200"}, {"content-type", "text/event-stream"}}, false); err != nil {
		f.t.Fatalf("ResponseHeaders = %v", err)
	}
	for i, ev := range events {
		if _, err := s.ResponseBody([]byte(ev), i == len(events)-1); err != nil {
			f.t.Fatalf("ResponseBody = %v", err)
		}
	}
	if err := s.Done(); err != nil {
		f.t.Fatalf("Done = %v", err)
	}
}

// hitTokens returns the prefix-hit tokens counted so far (after a tick).
func (f *testFleet) hitTokens() int64 {
	f.advance(200 * time.Millisecond)
	return f.metric(statPrefixHitTokens)
}

func words(seed, n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString("w" + strconv.Itoa(seed*100000+i) + " ")
	}
	return b.String()
}

// TestSecondTurnHitsAnswer: a Messages API conversation's second turn,
// which quotes the first turn's streamed answer, finds the answer cached on
// the replica that wrote it: the plugin hashed the answer after the
// prompt's chain, so the hit covers the first turn's prompt and most of
// its answer, not the prompt alone; also when a new configuration took the
// worker over while the answer streamed.
func TestSecondTurnHitsAnswer(t *testing.T) {
	for _, reconfigure := range []bool{false, true} {
		t.Run("reconfigured="+strconv.FormatBool(reconfigure), func(t *testing.T) {
			f := feedbackFleet(t)
			system, question, answer := words(1, 500), words(2, 200), words(3, 600)
			turn1 := `{"model":"m","max_tokens":512,"stream":true,"system":"` + system +
				`","messages":[{"role":"user","content":"` + question + `"}]}`
			s, first := f.send("/v1/messages", turn1)
			var events []string
			events = append(events, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":900,\"output_tokens\":1}}}\n\n",
				"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
			for i := 0; i < len(answer); i += 40 {
				events = append(events, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\""+
					answer[i:min(i+40, len(answer))]+"\"}}\n\n")
			}
			events = append(events, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
				"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":150}}\n\n",
				"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
			if _, err := s.ResponseHeaders([][2]string{{":status", "200"}, {"content-type", "text/event-stream"}}, false); err != nil {
				t.Fatalf("ResponseHeaders = %v", err)
			}
			for i, ev := range events {
				if reconfigure && i == len(events)/2 {
					f.configure(f.config(`,"decision_header":true`, nil))
				}
				if _, err := s.ResponseBody([]byte(ev), i == len(events)-1); err != nil {
					t.Fatalf("ResponseBody = %v", err)
				}
			}
			if err := s.Done(); err != nil {
				t.Fatalf("Done = %v", err)
			}
			before := f.hitTokens()

			turn2 := `{"model":"m","max_tokens":512,"stream":true,"system":"` + system +
				`","messages":[{"role":"user","content":"` + question + `"},{"role":"assistant","content":"` + answer +
				`"},{"role":"user","content":"` + words(4, 50) + `"}]}`
			s, second := f.send("/v1/messages", turn2)
			f.respond(s, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
			hit := f.hitTokens() - before
			if second != first {
				t.Errorf("turn 2 went to %s, turn 1 to %s", second, first)
			}
			promptTokens := int64(len(system)+len(question)) / 4
			answerTokens := int64(len(answer)) / 4
			if hit < promptTokens+answerTokens*3/4 {
				t.Errorf("turn 2 hit %d tokens, want at least turn 1's prompt (%d) and most of its answer (%d)", hit, promptTokens, answerTokens)
			}
		})
	}
}

// TestFeedbackEviction: a response whose usage reports fewer cached tokens
// than the index predicted, of a prefix the replica had computed, corrects
// the index within that response: the entries recorded before the evicted
// prefix are dropped, so the tail of a prompt recorded only before it is no
// longer believed cached there, while the evicted prompt itself, which the
// response just computed again, still is. The two prompts share a
// beginning, so that affinity puts them on one replica.
func TestFeedbackEviction(t *testing.T) {
	f := feedbackFleet(t)
	completion := func(prompt string) string {
		return `{"model":"m","max_tokens":16,"stream":true,"prompt":"` + prompt + `"}`
	}
	usage := func(prompt string, cached int) string {
		return `data: {"choices":[],"usage":{"prompt_tokens":` + strconv.Itoa(len(prompt)/4) +
			`,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":` + strconv.Itoa(cached) + `}}}` + "\n\n" + "data: [DONE]\n\n"
	}
	token := "data: {\"choices\":[{\"index\":0,\"text\":\"x\"}]}\n\n"
	shared := words(5, 400)
	old, evicted := shared+words(7, 400), shared+words(6, 400)
	sharedTokens := int64(len(shared) / 4)
	s, dOld := f.send("/v1/completions", completion(old))
	f.respond(s, token, usage(old, 0))
	s, dEvicted := f.send("/v1/completions", completion(evicted))
	f.respond(s, token, usage(evicted, len(shared)/4))
	if dEvicted != dOld {
		t.Fatalf("the prompt sharing a beginning went to %s, want %s (affinity)", dEvicted, dOld)
	}
	shortBefore := f.metric(statCorrectionsShort)

	// The engine reports the evicted prompt uncached.
	s, _ = f.send("/v1/completions", completion(evicted))
	f.respond(s, token, usage(evicted, 0))
	f.advance(200 * time.Millisecond)
	if got := f.metric(statCorrectionsShort) - shortBefore; got != 1 {
		t.Errorf("short corrections = %d, want 1", got)
	}
	if p, r := f.metric(statCachePredicted), f.metric(statCacheReported); p <= r {
		t.Errorf("predicted %d, reported %d tokens: want the prediction above the report", p, r)
	}
	before := f.hitTokens()
	s, _ = f.send("/v1/completions", completion(old))
	f.respond(s, token, usage(old, 0))
	if hit := f.hitTokens() - before; hit > sharedTokens {
		t.Errorf("the prompt recorded before the eviction hit %d tokens, want at most the shared %d (its tail dropped)", hit, sharedTokens)
	}
	before = f.hitTokens()
	s, _ = f.send("/v1/completions", completion(evicted))
	f.respond(s, token, usage(evicted, 0))
	if hit := f.hitTokens() - before; hit < int64(len(evicted)/4)-64 {
		t.Errorf("the prompt computed again hit %d tokens, want about %d", hit, len(evicted)/4)
	}
}

// TestWholeResponseInChunks: a whole (not streamed) response that reaches
// the plugin in several chunks, each passed on, is read as one body at its
// end, with its usage at the end of the last chunk: the engine's cached
// tokens are counted as when the body comes in one chunk, also when the
// end comes as an empty chunk of its own.
func TestWholeResponseInChunks(t *testing.T) {
	prompt := words(8, 400)
	request := `{"model":"m","max_tokens":16,"prompt":"` + prompt + `"}`
	promptTokens := len(prompt) / 4
	body := `{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"` + words(9, 300) +
		`","finish_reason":"length"}],"usage":{"prompt_tokens":` + strconv.Itoa(promptTokens) +
		`,"completion_tokens":16,"prompt_tokens_details":{"cached_tokens":` + strconv.Itoa(promptTokens/2) + `}}}`
	reported := func(chunks int, emptyEnd bool) int64 {
		f := feedbackFleet(t)
		s, _ := f.send("/v1/completions", request)
		if _, err := s.ResponseHeaders([][2]string{{":status", "200"}, {"content-type", "application/json"}}, false); err != nil {
			t.Fatalf("ResponseHeaders = %v", err)
		}
		step := (len(body) + chunks - 1) / chunks
		for i := 0; i < len(body); i += step {
			last := i+step >= len(body) && !emptyEnd
			if _, err := s.ResponseBody([]byte(body[i:min(i+step, len(body))]), last); err != nil {
				t.Fatalf("ResponseBody = %v", err)
			}
		}
		if emptyEnd {
			if _, err := s.ResponseBody(nil, true); err != nil {
				t.Fatalf("ResponseBody(end) = %v", err)
			}
		}
		if err := s.Done(); err != nil {
			t.Fatalf("Done = %v", err)
		}
		f.advance(200 * time.Millisecond)
		return f.metric(statCacheReported)
	}
	whole := reported(1, false)
	if whole <= 0 {
		t.Fatalf("one chunk: reported cached tokens %d, want the usage's", whole)
	}
	for _, c := range []struct {
		chunks   int
		emptyEnd bool
	}{{3, false}, {7, true}} {
		if got := reported(c.chunks, c.emptyEnd); got != whole {
			t.Errorf("%d chunks (empty end %v): reported cached tokens %d, want %d as in one chunk", c.chunks, c.emptyEnd, got, whole)
		}
	}
}

// TestResponseEndsWithTrailers: a response whose end comes with trailers
// (its last body chunk not marked as the end) is learned from as one that
// ended with its body, streamed or whole: the engine's cached tokens are
// counted.
func TestResponseEndsWithTrailers(t *testing.T) {
	prompt := words(10, 400)
	promptTokens := len(prompt) / 4
	usage := `"usage":{"prompt_tokens":` + strconv.Itoa(promptTokens) +
		`,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":` + strconv.Itoa(promptTokens/2) + `}}`
	for _, c := range []struct {
		name, request, contentType, body string
	}{
		{"streamed", `{"model":"m","max_tokens":16,"stream":true,"prompt":"` + prompt + `"}`, "text/event-stream",
			"data: {\"choices\":[{\"index\":0,\"text\":\"x\"}]}\n\ndata: {\"choices\":[]," + usage + "}\n\ndata: [DONE]\n\n"},
		{"whole", `{"model":"m","max_tokens":16,"prompt":"` + prompt + `"}`, "application/json",
			`{"choices":[{"index":0,"text":"x","finish_reason":"length"}],` + usage + `}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := feedbackFleet(t)
			s, _ := f.send("/v1/completions", c.request)
			if _, err := s.ResponseHeaders([][2]string{{":status", "200"}, {"content-type", c.contentType}}, false); err != nil {
				t.Fatalf("ResponseHeaders = %v", err)
			}
			if _, err := s.ResponseBody([]byte(c.body), false); err != nil {
				t.Fatalf("ResponseBody = %v", err)
			}
			if _, err := s.ResponseTrailers([][2]string{{"x-trailer", "1"}}); err != nil {
				t.Fatalf("ResponseTrailers = %v", err)
			}
			if err := s.Done(); err != nil {
				t.Fatalf("Done = %v", err)
			}
			f.advance(200 * time.Millisecond)
			if got := f.metric(statCacheReported); got <= 0 {
				t.Errorf("reported cached tokens %d, want the usage's", got)
			}
		})
	}
}
