package hostsim

import (
	"encoding/hex"
	"reflect"
	"strings"
	"testing"
	"time"
)

// Held requests as Envoy's wasm filter runs them (filter.go): the guest
// answers PAUSE at the end of the request body and later, from another
// callback of its VM, points proxy_set_effective_context at the held stream
// and either edits its headers and continues it or answers it locally.

// heldRoot is the script of a root whose streams hold their request:
// headers PAUSE (StopIteration), the body PAUSE at its end, the stream on
// the guest's held list.
const heldRoot = "request_headers: ret 1\nrequest_body: hold; ret 1\n"

// resumeScript edits the first held stream's destination, continues it,
// then tries the same edits after the continue.
const resumeScript = "effective $held; replace 0 x-dest 10.0.0.7:8000; continue 0; " +
	"replace 0 x-late 1; get 0 x-dest; pairs 0; getbuf 0 0 100; unhold"

// resumed is what an OnRequestResumed hook saw.
type resumed struct {
	at     time.Duration
	dest   string
	late   bool
	body   string
	paused bool
}

// holdStream opens a stream under r whose request the guest holds, with an
// OnRequestResumed hook that records what went upstream.
func holdStream(t *testing.T, h *Host, r *Root, body string) (*Stream, *[]resumed) {
	t.Helper()
	s := stream(t, r, [][2]string{{":method", "POST"}, {":path", "/v1/completions"}})
	var got []resumed
	s.OnRequestResumed(func() {
		dest, _ := s.RequestHeader("x-dest")
		_, late := s.RequestHeader("x-late")
		got = append(got, resumed{at: h.Now(), dest: dest, late: late, body: string(s.RequestBodyForwarded()), paused: s.RequestPaused()})
	})
	if a, err := s.RequestBody([]byte(body), true); a != ActionPause || err != nil {
		t.Fatalf("RequestBody(%q, eos) = %v, %v; want PAUSE", body, a, err)
	}
	if !s.RequestPaused() || len(s.RequestBodyForwarded()) != 0 {
		t.Fatalf("held request: RequestPaused() = %v, forwarded %q; want held, nothing forwarded", s.RequestPaused(), s.RequestBodyForwarded())
	}
	return s, &got
}

// TestHeldResumed: wherever the continue comes from, the request goes
// upstream once the guest call that made it returns, with the headers as
// edited before the continue and the whole held body; edits after the
// continue fail with BAD_ARGUMENT (Envoy drops the filter's request header
// map at once), the header map then reads as empty, and the held body stays
// readable until the call returns.
func TestHeldResumed(t *testing.T) {
	tests := []struct {
		name string
		// resumer is the callback that resumes, its root's script, and how
		// the test makes it run.
		cb, script string
		run        func(t *testing.T, h *Host, vm *VM, other *Root)
		at         time.Duration
	}{
		{
			name: "tick", cb: "tick", script: "configure: tick 100\ntick: " + resumeScript,
			run: func(t *testing.T, h *Host, _ *VM, _ *Root) {
				if err := h.Advance(99 * time.Millisecond); err != nil {
					t.Fatal(err)
				}
				if err := h.Advance(time.Millisecond); err != nil {
					t.Fatal(err)
				}
			},
			at: 100 * time.Millisecond,
		},
		{
			name: "another stream's response body", cb: "response_body", script: "response_body: " + resumeScript,
			run: func(t *testing.T, h *Host, _ *VM, other *Root) {
				h.Advance(40 * time.Millisecond)
				s := stream(t, other, nil)
				if _, err := s.ResponseHeaders([][2]string{{":status", "200"}}, false); err != nil {
					t.Fatal(err)
				}
				if _, err := s.ResponseBody([]byte("data: x\n\n"), true); err != nil {
					t.Fatal(err)
				}
			},
			at: 40 * time.Millisecond,
		},
		{
			// The producer is another VM of the vm_id: on_queue_ready runs
			// in the VM whose root registered the queue (cpp-host
			// src/shared_queue.cc), after the producer's call returned.
			name: "queue ready", cb: "queue_ready", script: "configure: regq wake\nqueue_ready: deq 1; " + resumeScript,
			run: func(t *testing.T, h *Host, vm *VM, _ *Root) {
				producer, err := h.NewVM(t.Context(), vm.mod, vm.ID(), nil)
				if err != nil {
					t.Fatal(err)
				}
				h.Advance(70 * time.Millisecond)
				configure(t, producer, "producer", "configure: resq "+vm.ID()+" wake; enq 1 go")
			},
			at: 70 * time.Millisecond,
		},
		{
			name: "http call response", cb: "http_call_response", script: "configure: call c :method=GET,:path=/,:authority=c - 1000\nhttp_call_response: " + resumeScript,
			run: func(t *testing.T, h *Host, _ *VM, _ *Root) {
				if err := h.Advance(time.Second); err != nil {
					t.Fatal(err)
				}
			},
			at: 250 * time.Millisecond,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, vm := newGuestVM(t, Options{}, "vm", "")
			h.AddCluster("c", ClusterFunc(func(*CallRequest) CallReply { return CallReply{Latency: 250 * time.Millisecond} }))
			held := configure(t, vm, "held", heldRoot)
			s, got := holdStream(t, h, held, `{"prompt":"hi"}`)
			other := configure(t, vm, "other", tc.script)
			tc.run(t, h, vm, other)
			want := []resumed{{at: tc.at, dest: "10.0.0.7:8000", body: `{"prompt":"hi"}`}}
			if !reflect.DeepEqual(*got, want) {
				t.Fatalf("OnRequestResumed saw %+v, want %+v; logs:\n%s", *got, want, dumpLogs(h))
			}
			if s.RequestPaused() {
				t.Errorf("RequestPaused() = true after the continue")
			}
			checks := []struct{ cmd, want string }{
				{"replace", "2"},  // after the continue: BAD_ARGUMENT
				{"get", "2 "},     // likewise
				{"pairs", "0 "},   // an absent map reads as empty
				{"continue", "0"}, // OK
				{"getbuf", `0 {"prompt":"hi"}`},
			}
			for _, c := range checks {
				if r := result(t, h, tc.cb, c.cmd); r != c.want {
					t.Errorf("%s %s after the continue = %q, want %q", tc.cb, c.cmd, r, c.want)
				}
			}
			if r := results(h, tc.cb, "effective"); len(r) != 1 || r[0] != "0" {
				t.Errorf("set_effective_context(held) = %q, want [0]", r)
			}
		})
	}
}

// TestHeldLocalReply: a held request answered from a tick. Envoy sends the
// reply once on_tick returns, through the filter chain (so the guest's own
// response callbacks see it, with the headers Envoy adds), then ends the
// stream: proxy_on_log, proxy_on_done, proxy_on_delete. Nothing went
// upstream, the embedder's later calls reach no guest, and Done is a no-op.
func TestHeldLocalReply(t *testing.T) {
	h, vm := newGuestVM(t, Options{}, "vm", "")
	held := configure(t, vm, "held", heldRoot+
		"response_headers: pairs 2\nresponse_body: getbuf 1 0 100\n"+
		"log: get 0 :path\ndone: log 2 done\ndelete: log 2 deleted")
	s, got := holdStream(t, h, held, "{}")
	var replies []string
	s.OnLocalReply(func(lr *LocalReply) {
		replies = append(replies, h.Now().String()+" "+itoa(int64(lr.Status))+" "+string(lr.Body))
		if !s.Ended() {
			t.Errorf("Ended() = false inside OnLocalReply")
		}
	})
	configure(t, vm, "ticker", `configure: tick 50`+"\ntick: effective $held; local 429 overloaded {\"error\":\"busy\"} retry-after=1; unhold")
	if err := h.Advance(50 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if want := []string{`50ms 429 {"error":"busy"}`}; !reflect.DeepEqual(replies, want) {
		t.Fatalf("OnLocalReply saw %q, want %q; logs:\n%s", replies, want, dumpLogs(h))
	}
	if len(*got) != 0 || len(s.RequestBodyForwarded()) != 0 {
		t.Errorf("a request answered locally went upstream: resumed %+v, body %q", *got, s.RequestBodyForwarded())
	}
	wantHdrs := [][2]string{{":status", "429"}, {"retry-after", "1"}, {"content-length", "16"}, {"content-type", "text/plain"}}
	enc := strings.TrimPrefix(result(t, h, "response_headers", "pairs"), "0 ")
	if kv := decodeHex(t, enc); !reflect.DeepEqual(kv, wantHdrs) {
		t.Errorf("guest's on_response_headers saw %q, want %q", kv, wantHdrs)
	}
	if got := result(t, h, "response_body", "getbuf"); got != `0 {"error":"busy"}` {
		t.Errorf("guest's on_response_body saw %q, want the reply's body", got)
	}
	// Envoy's connection manager writes the access log, then destroys the
	// filters; in on_log the request headers are still readable.
	if got := streamCallbacks(h, s.ID()); !reflect.DeepEqual(got, []string{"create", "request_headers", "request_body", "response_headers", "response_body", "log", "done", "delete"}) {
		t.Errorf("callbacks of the answered stream = %q", got)
	}
	if got := result(t, h, "log", "get"); got != "0 /v1/completions" {
		t.Errorf("get_header_map_value(:path) in on_log = %q, want the request's path", got)
	}
	if a, err := s.ResponseHeaders([][2]string{{":status", "200"}}, true); a != ActionPause || err != nil {
		t.Errorf("ResponseHeaders after the local reply = %v, %v; want PAUSE, nil", a, err)
	}
	if err := s.Done(); err != nil {
		t.Errorf("Done() after the local reply = %v", err)
	}
	if n := len(streamCallbacks(h, s.ID())); n != 8 {
		t.Errorf("Done() after the local reply ran guest callbacks: %d in all", n)
	}
}

// TestHeldClientGone: the client disconnects while its request is held.
// The stream ends (proxy_on_log, proxy_on_done, proxy_on_delete), nothing
// goes upstream, and a later attempt to resume it finds no context.
func TestHeldClientGone(t *testing.T) {
	h, vm := newGuestVM(t, Options{}, "vm", "")
	held := configure(t, vm, "held", heldRoot)
	s, got := holdStream(t, h, held, "{}")
	if err := s.Done(); err != nil {
		t.Fatal(err)
	}
	if got := streamCallbacks(h, s.ID()); !reflect.DeepEqual(got, []string{"create", "request_headers", "request_body", "log", "done", "delete"}) {
		t.Errorf("callbacks of the abandoned stream = %q", got)
	}
	configure(t, vm, "ticker", "configure: tick 10\ntick: "+resumeScript)
	if err := h.Advance(10 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if r := result(t, h, "tick", "effective"); r != "2" {
		t.Errorf("set_effective_context(gone stream) = %q, want 2 (BAD_ARGUMENT)", r)
	}
	if len(*got) != 0 || len(s.RequestBodyForwarded()) != 0 {
		t.Errorf("an abandoned request went upstream: resumed %+v, body %q", *got, s.RequestBodyForwarded())
	}
	if _, err := s.RequestBody(nil, true); err == nil {
		t.Errorf("RequestBody after Done = nil error, want the stream's end")
	}
}

// TestDeferredContinue: Envoy carries out proxy_continue_stream after the
// guest call returns but before it looks at that call's answer, so a
// stream that continues itself and answers PAUSE is held again: its
// headers went upstream, the body chunk it paused on did not.
func TestDeferredContinue(t *testing.T) {
	tests := []struct {
		name, script string
		paused       bool
		forwarded    string
	}{
		{name: "continue then PAUSE", script: "request_body: continue 0; ret 1", paused: true, forwarded: ""},
		{name: "continue then CONTINUE", script: "request_body: continue 0", paused: false, forwarded: "abc"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, vm := newGuestVM(t, Options{}, "vm", "")
			r := configure(t, vm, "r", "request_headers: ret 1\n"+tc.script)
			s := stream(t, r, nil)
			var hooks int
			s.OnRequestResumed(func() { hooks++ })
			if _, err := s.RequestBody([]byte("abc"), true); err != nil {
				t.Fatal(err)
			}
			if s.RequestPaused() != tc.paused || string(s.RequestBodyForwarded()) != tc.forwarded || hooks != 1 {
				t.Errorf("RequestPaused() = %v, forwarded %q, hooks %d; want %v, %q, 1; logs:\n%s",
					s.RequestPaused(), s.RequestBodyForwarded(), hooks, tc.paused, tc.forwarded, dumpLogs(h))
			}
		})
	}
}

// TestHeadersStopAll: Envoy's default for a headers PAUSE stops all
// iteration. The body waits in the host and the guest's body callback does
// not run until the guest continues; then the headers are gone before it
// sees the body, too late to route on it. The same script under
// HeadersStopIteration lets the body callback edit the held headers.
func TestHeadersStopAll(t *testing.T) {
	tests := []struct {
		name       string
		pause      HeadersPause
		early, all []string // body callbacks before the first tick, in all
		ticks      int      // ticks until the body went upstream
		replace    string   // proxy_replace_header_map_value in the last body callback
		dest       string   // x-dest upstream
	}{
		{name: "stop iteration", pause: HeadersStopIteration,
			early: []string{"cb request_body 2 3 0", "cb request_body 2 6 1"},
			all:   []string{"cb request_body 2 3 0", "cb request_body 2 6 1"},
			ticks: 1, replace: "0", dest: "10.0.0.9:1"},
		{name: "stop all", pause: HeadersStopAll,
			early: nil,
			all:   []string{"cb request_body 2 6 1"},
			ticks: 2, replace: "2", dest: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, vm := newGuestVM(t, Options{HeadersPause: tc.pause}, "vm", "")
			r := configure(t, vm, "r", "configure: tick 10\n"+
				"request_headers: hold; ret 1\n"+
				"request_body: replace 0 x-dest 10.0.0.9:1; hold; ret 1\n"+
				"tick: effective $held; continue 0; unhold")
			s := stream(t, r, [][2]string{{":path", "/"}})
			s.RequestBody([]byte("abc"), false)
			s.RequestBody([]byte("def"), true)
			if got := logsWithPrefix(h, "cb request_body"); !reflect.DeepEqual(got, tc.early) {
				t.Errorf("body callbacks before the continue = %q, want %q", got, tc.early)
			}
			for i := range tc.ticks {
				if got := string(s.RequestBodyForwarded()); got != "" || !s.RequestPaused() {
					t.Fatalf("before tick %d: forwarded %q, RequestPaused() = %v; want the body held", i+1, got, s.RequestPaused())
				}
				if err := h.Advance(10 * time.Millisecond); err != nil {
					t.Fatal(err)
				}
			}
			if got := string(s.RequestBodyForwarded()); got != "abcdef" || s.RequestPaused() {
				t.Errorf("after %d ticks: forwarded %q, RequestPaused() = %v; want abcdef gone; logs:\n%s", tc.ticks, got, s.RequestPaused(), dumpLogs(h))
			}
			if got := logsWithPrefix(h, "cb request_body"); !reflect.DeepEqual(got, tc.all) {
				t.Errorf("body callbacks = %q, want %q", got, tc.all)
			}
			if got := result(t, h, "request_body", "replace"); got != tc.replace {
				t.Errorf("replace in the body callback = %q, want %q", got, tc.replace)
			}
			if got, _ := s.RequestHeader("x-dest"); got != tc.dest {
				t.Errorf("x-dest upstream = %q, want %q", got, tc.dest)
			}
		})
	}
}

// decodeHex decodes the hex a guest logged for a serialized header map.
func decodeHex(t *testing.T, s string) [][2]string {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := DecodePairs(b)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// logsWithPrefix returns the guest log lines that start with prefix.
func logsWithPrefix(h *Host, prefix string) []string {
	var out []string
	for _, e := range h.Logs() {
		if strings.HasPrefix(e.Message, prefix) {
			out = append(out, e.Message)
		}
	}
	return out
}

// streamCallbacks lists the callbacks the guest logged for context id, in
// order ("cb request_headers 2 0 0" → "request_headers").
func streamCallbacks(h *Host, id uint32) []string {
	var out []string
	for _, e := range h.Logs() {
		f := strings.Fields(e.Message)
		if len(f) >= 3 && f[0] == "cb" && e.Context == id {
			out = append(out, f[1])
		}
	}
	return out
}

// TestHeldResponse: a response held at its headers and body goes
// downstream when the guest continues it from a tick; like Envoy's
// continueStream, continuing the response also drops the guest's view of
// the request headers.
func TestHeldResponse(t *testing.T) {
	h, vm := newGuestVM(t, Options{}, "vm", "")
	r := configure(t, vm, "r", "configure: tick 10\nrequest_headers: ret 1\nrequest_body: ret 0\n"+
		"response_headers: hold; ret 1\nresponse_body: ret 1\n"+
		"tick: effective $held; get 0 :path; continue 1; get 0 :path; unhold")
	s := stream(t, r, [][2]string{{":path", "/p"}})
	if _, err := s.RequestBody([]byte("q"), true); err != nil {
		t.Fatal(err)
	}
	var resumed []string
	s.OnResponseResumed(func() { resumed = append(resumed, h.Now().String()+" "+string(s.ResponseBodyForwarded())) })
	if a, err := s.ResponseHeaders([][2]string{{":status", "200"}}, false); a != ActionPause || err != nil {
		t.Fatalf("ResponseHeaders = %v, %v; want PAUSE", a, err)
	}
	if _, err := s.ResponseBody([]byte("chunk"), true); err != nil {
		t.Fatal(err)
	}
	if !s.ResponsePaused() || len(s.ResponseBodyForwarded()) != 0 {
		t.Fatalf("ResponsePaused() = %v, forwarded %q; want the response held", s.ResponsePaused(), s.ResponseBodyForwarded())
	}
	if err := h.Advance(10 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if want := []string{"10ms chunk"}; !reflect.DeepEqual(resumed, want) {
		t.Errorf("OnResponseResumed saw %q, want %q; logs:\n%s", resumed, want, dumpLogs(h))
	}
	if got, want := results(h, "tick", "get"), []string{"0 /p", "2 "}; !reflect.DeepEqual(got, want) {
		t.Errorf("request header reads before and after continue(RESPONSE) = %q, want %q", got, want)
	}
	if s.ResponsePaused() {
		t.Errorf("ResponsePaused() = true after the continue")
	}
}
