package router

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSessionAffinity: a request of a session goes where the session's
// previous request went, as if that replica held the session's context,
// although its prompt shares nothing with the previous one and that
// replica is slightly busier; the decision still overrules the affinity
// when that replica is busy. A session is named by the configured session
// header, or by the Responses API's previous_response_id (the id the
// previous response's stream reported); a session the router never saw
// gets no affinity. A new configuration that keeps the replica keeps the
// session.
func TestSessionAffinity(t *testing.T) {
	const header = "x-session-id"
	chat := func(seed int) string {
		return `{"model":"m","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"` + words(seed, 1000) + `"}]}`
	}
	responses := func(extra string, seed int) string {
		return `{"model":"m","max_output_tokens":16,"stream":true` + extra + `,"input":"` + words(seed, 1000) + `"}`
	}
	chatDone := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"
	responsesDone := "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_7\",\"status\":\"in_progress\"}}\n\n" +
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"ok\"}\n\n" +
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_7\",\"status\":\"completed\"}}\n\n"
	session := [2]string{header, "s-1"}
	cases := []struct {
		name string
		// first opens the session; next is the request after it.
		path, first, next, done string
		firstHdr, nextHdr       [][2]string
		// busy: the first request's replica reports a long queue (else
		// two running requests, a little more than the other's none).
		busy, want bool // want: next goes where first went
		// reconfigure: a new configuration, keeping both replicas, takes
		// the worker over between the two requests.
		reconfigure bool
	}{
		{name: "header", path: "/v1/chat/completions", first: chat(1), next: chat(2), done: chatDone,
			firstHdr: [][2]string{session}, nextHdr: [][2]string{session}, want: true},
		{name: "header across a reconfiguration", path: "/v1/chat/completions", first: chat(1), next: chat(2), done: chatDone,
			firstHdr: [][2]string{session}, nextHdr: [][2]string{session}, want: true, reconfigure: true},
		{name: "header overruled on a busy replica", path: "/v1/chat/completions", first: chat(1), next: chat(2), done: chatDone,
			firstHdr: [][2]string{session}, nextHdr: [][2]string{session}, busy: true},
		{name: "another session", path: "/v1/chat/completions", first: chat(1), next: chat(2), done: chatDone,
			firstHdr: [][2]string{session}, nextHdr: [][2]string{{header, "s-2"}}},
		{name: "no header", path: "/v1/chat/completions", first: chat(1), next: chat(2), done: chatDone,
			firstHdr: [][2]string{session}},
		{name: "previous response", path: "/v1/responses", first: responses("", 1), next: responses(`,"previous_response_id":"resp_7"`, 2),
			done: responsesDone, want: true},
		{name: "previous response across a reconfiguration", path: "/v1/responses", first: responses("", 1),
			next: responses(`,"previous_response_id":"resp_7"`, 2), done: responsesDone, want: true, reconfigure: true},
		{name: "previous response overruled on a busy replica", path: "/v1/responses", first: responses("", 1),
			next: responses(`,"previous_response_id":"resp_7"`, 2), done: responsesDone, busy: true},
		{name: "unknown previous response", path: "/v1/responses", first: responses("", 1),
			next: responses(`,"previous_response_id":"resp_8"`, 2), done: responsesDone},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			extra := `,"session_header":"` + header + `"`
			f := newTestFleet(t, 1, 2, extra)
			f.advance(time.Second)
			s, first := f.sendWith(c.path, c.first, c.firstHdr...)
			f.respond(s, c.done)
			i, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(first, "10.0.0."), ":8000"))
			if err != nil {
				t.Fatalf("first request went to %q", first)
			}
			f.replicas[i-1].set(func(r *fakeReplica) {
				r.running = 2
				if c.busy {
					r.waiting, r.running, r.kv = 40, 60, 0.9
				}
			})
			if c.reconfigure {
				f.configure(f.config(extra+`,"decision_header":true`, nil))
			}
			f.advance(time.Second)
			s, next := f.sendWith(c.path, c.next, c.nextHdr...)
			f.respond(s, c.done)
			if got := next == first; got != c.want {
				t.Errorf("%s: first request to %s, next to %s: same replica = %v, want %v", c.name, first, next, got, c.want)
			}
		})
	}
}
