package hostsim

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuroute/gpuroute/internal/longtest"
)

// Host-call conformance through the guest: each case configures a root
// whose callbacks run a script, drives it, and compares the logged results.

func configure(t *testing.T, vm *VM, rootID, cfg string) *Root {
	t.Helper()
	r, err := vm.Configure(rootID, []byte(cfg))
	if err != nil {
		t.Fatalf("Configure(%q) = %v", rootID, err)
	}
	return r
}

func stream(t *testing.T, r *Root, hdrs [][2]string) *Stream {
	t.Helper()
	s, err := r.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RequestHeaders(hdrs, false); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSharedDataCAS(t *testing.T) {
	h, vm := newGuestVM(t, Options{}, "vmid", "")
	configure(t, vm, "r", "configure: "+strings.Join([]string{
		"getshared k",        // NOT_FOUND
		"setshared k v1 777", // missing key ignores cas
		"getshared k",        // v1, cas 1
		"setshared k v2 99",  // existing key, stale cas
		"setshared k v2 1",   // matching cas
		"setshared k v3 0",   // cas 0: unconditional
		"getshared k",
	}, "; "))
	got := results(h, "configure", "getshared")
	want := []string{"1  0", "0 v1 1", "0 v3 3"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("getshared results = %q, want %q", got, want)
	}
	sets := results(h, "configure", "setshared")
	if want := []string{"0", "8", "0", "0"}; !reflect.DeepEqual(sets, want) {
		t.Errorf("setshared statuses = %q, want %q", sets, want)
	}
	// The counter is global: another vm_id continues it, never reusing 0.
	if st := h.SetSharedData("other", "x", []byte("y"), 0); st != StatusOK {
		t.Fatalf("SetSharedData = %d", st)
	}
	if _, cas, _ := h.SharedData("other", "x"); cas != 4 {
		t.Errorf("cas of first key in second vm_id = %d, want 4", cas)
	}
	h.casSeq = ^uint32(0) // wrap: 0 is skipped
	h.SetSharedData("other", "x", []byte("z"), 0)
	if _, cas, _ := h.SharedData("other", "x"); cas != 1 {
		t.Errorf("cas after wrap = %d, want 1", cas)
	}
	// Values are copied: mutating a returned value does not change the store.
	v, _, _ := h.SharedData("vmid", "k")
	v[0] = 'X'
	v2, _, _ := h.SharedData("vmid", "k")
	if string(v2) != "v3" {
		t.Errorf("store changed through a returned copy: %q", v2)
	}
	// An update reuses the entry's buffer; a value read before it stays.
	h.SetSharedData("vmid", "k", []byte("v4"), 0)
	if string(v2) != "v3" {
		t.Errorf("value read before an update = %q after it, want %q", v2, "v3")
	}
}

func TestSharedDataScopeAndLifetime(t *testing.T) {
	h, vm := newGuestVM(t, Options{}, "a", "")
	mod := vm.mod
	vm2, err := h.NewVM(t.Context(), mod, "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	other, err := h.NewVM(t.Context(), mod, "b", nil)
	if err != nil {
		t.Fatal(err)
	}
	configure(t, vm, "r", "configure: setshared k 1 0")
	configure(t, vm2, "r", "configure: getshared k")
	configure(t, other, "r2", "configure: getshared k")
	if got := results(h, "configure", "getshared"); !reflect.DeepEqual(got, []string{"0 1 1", "1  0"}) {
		t.Errorf("getshared same vm_id, other vm_id = %q, want [\"0 1 1\" \"1  0\"]", got)
	}
	// Module swap: a new VM with the same vm_id keeps the data alive.
	vm3, err := h.NewVM(t.Context(), mod, "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	vm.Close()
	vm2.Close()
	if _, _, ok := h.SharedData("a", "k"); !ok {
		t.Errorf("shared data lost while a VM with its vm_id lives")
	}
	vm3.Close()
	if _, _, ok := h.SharedData("a", "k"); ok {
		t.Errorf("shared data survived the last VM of its vm_id")
	}
}

func TestHeaderMaps(t *testing.T) {
	h, vm := newGuestVM(t, Options{}, "vm", "")
	r := configure(t, vm, "r", "request_headers: "+strings.Join([]string{
		"pairs 0",
		"get 0 X-Client",
		"get 0 missing",
		"add 0 x-multi 1", "add 0 x-multi 2",
		"replace 0 x-multi 3",
		"replace 0 x-new n",
		"remove 0 x-client",
		"mapsize 0",
		"get 2 :status", // response headers do not exist yet
		"get 9 a",       // unknown map type
		"get 6 :status", // no http call response now
		"rawpairs 1 zz", // trailers do not exist yet
	}, "; "))
	s := stream(t, r, [][2]string{{":path", "/p"}, {"X-Client", "c"}})
	enc := result(t, h, "request_headers", "pairs")
	b, err := hex.DecodeString(strings.TrimPrefix(enc, "0 "))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := DecodePairs(b)
	if want := [][2]string{{":path", "/p"}, {"x-client", "c"}}; err != nil || !reflect.DeepEqual(kv, want) {
		t.Errorf("DecodePairs(get_header_map_pairs) = %q, %v, want %q", kv, err, want)
	}
	checks := []struct{ cmd, want string }{
		{"mapsize", "0 " + strconv.Itoa(len(EncodePairs([][2]string{{":path", "/p"}, {"x-multi", "3"}, {"x-new", "n"}})))},
		{"rawpairs", "2"},
	}
	for _, c := range checks {
		if got := result(t, h, "request_headers", c.cmd); got != c.want {
			t.Errorf("%s = %q, want %q", c.cmd, got, c.want)
		}
	}
	if got, want := results(h, "request_headers", "get"), []string{"0 c", "1 ", "2 ", "2 ", "2 "}; !reflect.DeepEqual(got, want) {
		t.Errorf("get results = %q, want %q", got, want)
	}
	want := [][2]string{{":path", "/p"}, {"x-multi", "3"}, {"x-new", "n"}}
	if got := s.RequestHeaderMap(); !reflect.DeepEqual(got, want) {
		t.Errorf("RequestHeaderMap() = %q, want %q", got, want)
	}
	// set_header_map_pairs replaces the whole map.
	h.ClearLogs()
	r2 := configure(t, vm, "r2", "response_headers: setpairs 2 :status=201,X-B=b; pairs 2")
	s2 := stream(t, r2, nil)
	if _, err := s2.ResponseHeaders([][2]string{{":status", "200"}, {"x-old", "o"}}, true); err != nil {
		t.Fatal(err)
	}
	if got, want := s2.ResponseHeaderMap(), [][2]string{{":status", "201"}, {"x-b", "b"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("after set_header_map_pairs: %q, want %q", got, want)
	}
}

func TestBuffers(t *testing.T) {
	h, vm := newGuestVM(t, Options{}, "vm", "vm_start: getbuf 6 0 100")
	r := configure(t, vm, "r", "configure: getbuf 7 0 9; getbuf 7 100000 5; getbuf 9 0 1; getbuf 0 0 1\n"+
		"request_body: bufstatus 0; getbuf 0 0 100; ret 1\n"+
		"response_body: getbuf 1 2 3; setbuf 1 0 2 AB; setbuf 1 99 0 !; setbuf 1 1 0 x; setbuf 7 0 0 x")
	if got := result(t, h, "vm_start", "getbuf"); got != "0 vm_start: getbuf 6 0 100" {
		t.Errorf("vm configuration buffer = %q", got)
	}
	if got, want := results(h, "configure", "getbuf"), []string{"0 configure", "1 ", "2 ", "1 "}; !reflect.DeepEqual(got, want) {
		t.Errorf("plugin configuration reads = %q, want %q", got, want)
	}
	s := stream(t, r, nil)
	// PAUSE on a body chunk buffers: the next call sees both chunks.
	s.RequestBody([]byte("hello "), false)
	s.RequestBody([]byte("world"), true)
	if got, want := results(h, "request_body", "getbuf"), []string{"0 hello ", "0 hello world"}; !reflect.DeepEqual(got, want) {
		t.Errorf("buffered request body = %q, want %q", got, want)
	}
	if got := results(h, "request_body", "bufstatus"); !reflect.DeepEqual(got, []string{"0 6", "0 11"}) {
		t.Errorf("buffer status = %q", got)
	}
	s.ResponseBody([]byte("0123456"), true)
	if got := result(t, h, "response_body", "getbuf"); got != "0 234" {
		t.Errorf("get_buffer_bytes(1, 2, 3) = %q, want %q", got, "0 234")
	}
	if got, want := results(h, "response_body", "setbuf"), []string{"0", "0", "2", "1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("set_buffer_bytes statuses = %q, want %q", got, want)
	}
	if got := string(s.ResponseBodyForwarded()); got != "AB23456!" {
		t.Errorf("response body after edits = %q, want %q", got, "AB23456!")
	}
	// Done hands the body buffers to the next stream: it sees only its own.
	if err := s.Done(); err != nil {
		t.Fatal(err)
	}
	s2 := stream(t, r, nil)
	s2.RequestBody([]byte("hi"), true)
	if got := results(h, "request_body", "getbuf"); got[len(got)-1] != "0 hi" {
		t.Errorf("next stream's request body = %q, want %q", got[len(got)-1], "0 hi")
	}
	// The same edits on "9": its first two bytes become "AB", "!" appended.
	s2.ResponseBody([]byte("9"), true)
	if got := string(s2.ResponseBodyForwarded()); got != "AB!" {
		t.Errorf("next stream's forwarded response = %q, want %q", got, "AB!")
	}
}

func TestHTTPCall(t *testing.T) {
	h, vm := newGuestVM(t, Options{}, "vm", "")
	var seen *CallRequest
	h.AddCluster("metrics", ClusterFunc(func(req *CallRequest) CallReply {
		seen = req
		return CallReply{Headers: [][2]string{{"content-type", "text/plain"}}, Body: []byte("up 1"), Latency: 30 * time.Millisecond}
	}))
	h.AddCluster("dead", ClusterFunc(func(*CallRequest) CallReply { return CallReply{NoAnswer: true} }))
	h.AddCluster("slow", ClusterFunc(func(*CallRequest) CallReply { return CallReply{Latency: time.Second} }))
	hdr := ":method=GET,:path=/metrics,:authority=replica-a"
	configure(t, vm, "r", "configure: "+strings.Join([]string{
		"call metrics " + hdr + " - 100",
		"call nope " + hdr + " - 100",
		"call metrics :method=GET,:path=/metrics - 100",
		"call metrics :path=/x,:authority=a - 100",
		"call dead " + hdr + " - 200",
		"call slow " + hdr + " - 500",
	}, "; ")+"\nhttp_call_response: callresp; status")
	if got, want := results(h, "configure", "call"), []string{"0 1", "2 0", "2 0", "2 0", "0 2", "0 3"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("http_call results = %q, want %q", got, want)
	}
	if seen == nil || seen.Method != "GET" || seen.Path != "/metrics" || seen.Authority != "replica-a" || seen.Timeout != 100*time.Millisecond {
		t.Fatalf("cluster saw %+v", seen)
	}
	h.Advance(29 * time.Millisecond)
	if got := results(h, "http_call_response", "callresp"); len(got) != 0 {
		t.Fatalf("response delivered before its latency: %q", got)
	}
	h.Advance(time.Millisecond)
	resp := result(t, h, "http_call_response", "callresp")
	f := strings.Fields(resp)
	b, _ := hex.DecodeString(f[1])
	kv, _ := DecodePairs(b)
	if want := [][2]string{{":status", "200"}, {"content-type", "text/plain"}}; !reflect.DeepEqual(kv, want) || f[3]+" "+f[4] != "up 1" {
		t.Errorf("call response = %q (headers %q), want headers %q body \"up 1\"", resp, kv, want)
	}
	if got := result(t, h, "http_call_response", "status"); got != "0 200 " {
		t.Errorf("get_status in response = %q", got)
	}
	// Timeouts: num_headers = 0 at the timeout, for no answer and for too slow.
	h.Advance(time.Second)
	var calls []string
	for _, e := range h.Logs() {
		if strings.HasPrefix(e.Message, "cb http_call_response") {
			calls = append(calls, strings.TrimPrefix(e.Message, "cb http_call_response "))
		}
	}
	if want := []string{"1 1 2 4 0", "1 2 0 0 0", "1 3 0 0 0"}; !reflect.DeepEqual(calls, want) {
		t.Errorf("on_http_call_response(root, token, headers, body, trailers) = %q, want %q", calls, want)
	}
}

func TestLocalReplyAndStreamControl(t *testing.T) {
	h, vm := newGuestVM(t, Options{}, "vm", "")
	r := configure(t, vm, "r", "request_headers: local 503 no_replica {\"error\":1} content-type=application/json; ret 0\n"+
		"response_headers: pairs 2")
	s := stream(t, r, [][2]string{{":path", "/"}})
	lr := s.LocalReply()
	want := &LocalReply{Status: 503, Details: "no_replica", Body: []byte(`{"error":1}`), Headers: [][2]string{{"content-type", "application/json"}}, GRPCStatus: -1}
	if !reflect.DeepEqual(lr, want) {
		t.Errorf("LocalReply() = %+v, want %+v", lr, want)
	}
	// Sent once on_request_headers returned (whatever it answered), through
	// the guest's own response callbacks, with Envoy's content-length; the
	// guest's content-type stands. Then the stream ended by itself.
	wantHdrs := [][2]string{{":status", "503"}, {"content-type", "application/json"}, {"content-length", "11"}}
	if kv := decodeHex(t, strings.TrimPrefix(result(t, h, "response_headers", "pairs"), "0 ")); !reflect.DeepEqual(kv, wantHdrs) {
		t.Errorf("on_response_headers of the local reply saw %q, want %q", kv, wantHdrs)
	}
	if got, want := streamCallbacks(h, s.ID()), []string{"create", "request_headers", "response_headers", "response_body", "log", "done", "delete"}; !reflect.DeepEqual(got, want) {
		t.Errorf("callbacks of the answered stream = %q, want %q", got, want)
	}
	if !s.Ended() || len(s.RequestBodyForwarded()) != 0 {
		t.Errorf("Ended() = %v, forwarded %q; want ended, nothing upstream", s.Ended(), s.RequestBodyForwarded())
	}
	if a, err := s.RequestBody([]byte("x"), true); a != ActionPause || err != nil {
		t.Errorf("RequestBody after local reply = %v, %v, want pause without a guest call", a, err)
	}
	if got := results(h, "request_body", ""); len(got) != 0 {
		t.Errorf("guest saw a body after the local reply")
	}
	if err := s.Done(); err != nil {
		t.Fatal(err)
	}
	// Pause, continue from a root callback via set_effective_context, close.
	h.ClearLogs()
	r2 := configure(t, vm, "r2", "configure: regq q\nrequest_headers: ret 1\nqueue_ready: effective 4; continue 0; effective 99\nresponse_headers: close 1")
	s2 := stream(t, r2, nil)
	if !s2.RequestPaused() {
		t.Fatalf("RequestPaused() = false after PAUSE")
	}
	configure(t, vm, "r3", "configure: enq 1 go")
	if s2.ID() != 4 {
		t.Fatalf("stream id = %d, the script assumes 4", s2.ID())
	}
	if s2.RequestPaused() {
		t.Errorf("RequestPaused() = true after proxy_continue_stream; logs:\n%s", dumpLogs(h))
	}
	if got := results(h, "queue_ready", "effective"); !reflect.DeepEqual(got, []string{"0", "2"}) {
		t.Errorf("set_effective_context statuses = %q, want [0 2]", got)
	}
	s2.ResponseHeaders([][2]string{{":status", "200"}}, false)
	if !s2.Closed(StreamResponse) || !s2.Ended() {
		t.Errorf("Closed(response) = false after proxy_close_stream")
	}
}

func TestSharedQueues(t *testing.T) {
	h, vm := newGuestVM(t, Options{}, "vmid", "")
	vm2, err := h.NewVM(t.Context(), vm.mod, "vmid", nil)
	if err != nil {
		t.Fatal(err)
	}
	configure(t, vm, "owner", "configure: regq jobs; deq 1\nqueue_ready: deq 1; deq 1")
	configure(t, vm2, "producer", "configure: resq vmid jobs; resq vmid nope; resq other jobs; enq 1 a; enq 1 b; enq 9 c")
	if got, want := results(h, "configure", "regq"), []string{"0 1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("register = %q, want %q", got, want)
	}
	if got, want := results(h, "configure", "resq"), []string{"0 1", "1 0", "1 0"}; !reflect.DeepEqual(got, want) {
		t.Errorf("resolve = %q, want %q", got, want)
	}
	if got, want := results(h, "configure", "enq"), []string{"0", "0", "1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("enqueue = %q, want %q", got, want)
	}
	if got, want := results(h, "configure", "deq"), []string{"7 "}; !reflect.DeepEqual(got, want) {
		t.Errorf("dequeue on empty = %q, want %q", got, want)
	}
	// One notification per enqueue, on the registering VM's root.
	var ready []string
	for _, e := range h.Logs() {
		if strings.HasPrefix(e.Message, "cb queue_ready") {
			ready = append(ready, e.VMID+":"+strconv.Itoa(int(e.Context))+":"+e.Message)
		}
	}
	if want := []string{"vmid:1:cb queue_ready 1 1", "vmid:1:cb queue_ready 1 1"}; !reflect.DeepEqual(ready, want) {
		t.Errorf("queue_ready deliveries = %q, want %q", ready, want)
	}
	if got, want := results(h, "queue_ready", "deq"), []string{"0 a", "0 b", "7 ", "7 "}; !reflect.DeepEqual(got, want) {
		t.Errorf("dequeues = %q, want %q", got, want)
	}
}

func TestMetrics(t *testing.T) {
	h, vm := newGuestVM(t, Options{}, "vm", "")
	configure(t, vm, "r", "configure: "+strings.Join([]string{
		"defmetric 0 reqs", "defmetric 1 inflight", "defmetric 2 lat", "defmetric 0 reqs", "defmetric 1 reqs", "defmetric 3 x",
		"incmetric 4 5", "incmetric 16 2", "incmetric 4 -1", "getmetric 4",
		"recmetric 9 7", "incmetric 9 -2", "getmetric 9",
		"recmetric 14 12", "recmetric 14 30", "getmetric 14", "incmetric 14 1",
		"getmetric 999",
	}, "; "))
	// ids: (n<<2)|type: 4 counter, 9 gauge, 14 histogram, 16 counter again.
	if got, want := results(h, "configure", "defmetric"), []string{"0 4", "0 9", "0 14", "0 16", "2 0", "2 0"}; !reflect.DeepEqual(got, want) {
		t.Errorf("define = %q, want %q", got, want)
	}
	if got, want := results(h, "configure", "incmetric"), []string{"0", "0", "2", "0", "2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("increment = %q, want %q", got, want)
	}
	if got, want := results(h, "configure", "getmetric"), []string{"0 7", "0 5", "2 0", "1 0"}; !reflect.DeepEqual(got, want) {
		t.Errorf("get = %q, want %q", got, want)
	}
	tests := []struct {
		name string
		want Metric
	}{
		{"reqs", Metric{Name: "reqs", Type: MetricCounter, Value: 7}},
		{"inflight", Metric{Name: "inflight", Type: MetricGauge, Value: 5}},
		{"lat", Metric{Name: "lat", Type: MetricHistogram, Samples: []uint64{12, 30}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := h.Metric(tc.name)
			if !ok || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Metric(%q) = %+v, %v, want %+v", tc.name, got, ok, tc.want)
			}
		})
	}
}

func TestProperties(t *testing.T) {
	h, vm := newGuestVM(t, Options{Properties: map[string][]byte{"node\x00id": []byte("n1")}}, "the-vm", "")
	r := configure(t, vm, "the-root", "configure: getprop plugin_root_id; getprop plugin_vm_id; getprop node\\0id; getprop nope\n"+
		"request_headers: getprop request\\0path; getprop request\\0url_path; getprop request\\0method; getprop upstream\\0address; setprop my\\0key v; getprop my\\0key\n"+
		"response_headers: getprop response\\0code")
	hexOf := func(s string) string { return "0 " + hex.EncodeToString([]byte(s)) }
	if got, want := results(h, "configure", "getprop"), []string{hexOf("the-root"), hexOf("the-vm"), hexOf("n1"), "1 "}; !reflect.DeepEqual(got, want) {
		t.Errorf("root properties = %q, want %q", got, want)
	}
	s, _ := r.NewStream()
	s.SetProperty(PropertyPath("upstream", "address"), []byte("10.0.0.1:8000"))
	s.RequestHeaders([][2]string{{":path", "/v1/completions?x=1"}, {":method", "POST"}}, true)
	want := []string{hexOf("/v1/completions?x=1"), hexOf("/v1/completions"), hexOf("POST"), hexOf("10.0.0.1:8000"), hexOf("v")}
	if got := results(h, "request_headers", "getprop"); !reflect.DeepEqual(got, want) {
		t.Errorf("stream properties = %q, want %q", got, want)
	}
	s.ResponseHeaders([][2]string{{":status", "429"}}, true)
	code := binary.LittleEndian.AppendUint64(nil, 429)
	if got := result(t, h, "response_headers", "getprop"); got != "0 "+hex.EncodeToString(code) {
		t.Errorf("response.code = %q, want 8-byte little-endian 429", got)
	}
}

func TestTicksAndTime(t *testing.T) {
	h, vm := newGuestVM(t, Options{LogLevel: LogDebug}, "vm", "")
	vm2, _ := h.NewVM(t.Context(), vm.mod, "vm", nil)
	configure(t, vm, "a", "configure: tick 100; loglevel; log 0 dropped\ntick: now")
	configure(t, vm2, "b", "configure: tick 150")
	h.ClearLogs()
	if err := h.Advance(310 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, e := range h.Logs() {
		if strings.HasPrefix(e.Message, "cb tick") {
			order = append(order, e.VMID+"@"+e.Time.String())
		}
	}
	// Ticks of every VM fire in virtual-time order.
	_ = vm2
	want := []string{"vm@100ms", "vm@150ms", "vm@200ms", "vm@300ms", "vm@300ms"}
	if !reflect.DeepEqual(order, want) {
		t.Errorf("tick order = %q, want %q", order, want)
	}
	nows := results(h, "tick", "now")
	if len(nows) != 3 || nows[0] != "0 "+strconv.FormatInt(DefaultStart.Add(100*time.Millisecond).UnixNano(), 10) {
		t.Errorf("proxy_get_current_time_nanoseconds in ticks = %q", nows)
	}
	if h.Now() != 310*time.Millisecond {
		t.Errorf("Now() = %v, want 310ms", h.Now())
	}
}

func TestReconfigure(t *testing.T) {
	h, vm := newGuestVM(t, Options{}, "vm", "")
	old := configure(t, vm, "p", "configure: tick 100\ntick: log 2 old-tick")
	s := stream(t, old, nil)
	// A rejected configuration keeps the old root serving.
	if _, err := vm.Configure("p", []byte("configure: ret 0")); err == nil || !strings.Contains(err.Error(), "keeps serving") {
		t.Fatalf("Configure(rejected) error = %v", err)
	}
	if vm.Root("p") != old {
		t.Fatalf("old root replaced by a rejected configuration")
	}
	nw := configure(t, vm, "p", "configure: tick 100\ntick: log 2 new-tick")
	if vm.Root("p") != nw || nw.ID() == old.ID() {
		t.Fatalf("new root not serving")
	}
	h.ClearLogs()
	h.Advance(250 * time.Millisecond)
	var ticks []string
	for _, e := range h.Logs() {
		if strings.HasSuffix(e.Message, "-tick") {
			ticks = append(ticks, e.Message)
		}
	}
	if want := []string{"new-tick", "new-tick"}; !reflect.DeepEqual(ticks, want) {
		t.Errorf("ticks after reconfigure = %q, want %q", ticks, want)
	}
	// The old root is deleted once its stream drains.
	if old.Deleted() {
		t.Errorf("old root deleted while a stream is open")
	}
	s.Done()
	if !old.Deleted() {
		t.Errorf("old root not deleted after draining")
	}
}

// TestTraps: a trap fails the VM with an error naming the callback. Under
// ENOSYS poll_oneoff (the default, like Envoy 1.33–1.37) a Go panic never
// prints its message: the runtime's panic path sleeps (runtime.usleep →
// poll_oneoff), gets ENOSYS and dies with "fatal error:
// wasi_snapshot_preview1.poll_oneoff / panic during panic". With 0-event
// polling (cpp-host PR #533) the message survives.
func TestTraps(t *testing.T) {
	tests := []struct {
		name, script string
		poll         PollMode
		want         []string
	}{
		{"panic enosys", "panic", PollENOSYS, []string{"proxy_on_request_headers(2, 0, 1)", "trapped", "fatal error: wasi_snapshot_preview1.poll_oneoff"}},
		{"panic zero events", "panic", PollZeroEvents, []string{"proxy_on_request_headers(2, 0, 1)", "panic: guest panic on command"}},
		{"nil map zero events", "nilmap", PollZeroEvents, []string{"proxy_on_request_headers(", "assignment to entry in nil map"}},
		{"proc_exit", "exit 3", PollENOSYS, []string{"proxy_on_request_headers(", "proc_exit(3)"}},
		{"sleep enosys", "sleep 2", PollENOSYS, []string{"proxy_on_request_headers(", "poll_oneoff"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, vm := newGuestVM(t, Options{Poll: tc.poll}, "vm", "")
			r := configure(t, vm, "r", "request_headers: "+tc.script)
			s, _ := r.NewStream()
			_, err := s.RequestHeaders(nil, true)
			if err == nil || !errors.Is(err, ErrVMFailed) {
				t.Fatalf("RequestHeaders() error = %v, want a trap", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if _, err2 := r.NewStream(); !errors.Is(err2, ErrVMFailed) || vm.Err() == nil {
				t.Errorf("after a trap: NewStream() = %v, want the VM's failure", err2)
			}
		})
	}
}

func TestPollZeroEvents(t *testing.T) {
	h, vm := newGuestVM(t, Options{Poll: PollZeroEvents}, "vm", "")
	r := configure(t, vm, "r", "request_headers: sleep 2")
	s, _ := r.NewStream()
	if _, err := s.RequestHeaders(nil, true); err != nil {
		t.Fatalf("sleep with 0-event poll_oneoff: %v", err)
	}
	if h.PollCalls() == 0 || h.Now() < 2*time.Millisecond {
		t.Errorf("PollCalls() = %d, Now() = %v: want polls and time spent spinning", h.PollCalls(), h.Now())
	}
}

// TestGCStress: many requests that allocate, with Envoy 1.33–1.37's
// ENOSYS poll_oneoff; the Go runtime must never need to poll.
func TestGCStress(t *testing.T) {
	h, vm := newGuestVM(t, Options{LogLevel: LogWarn}, "vm", "")
	r := configure(t, vm, "r", "quiet\nrequest_headers: alloc 200 512; replace 0 x-a b\nresponse_body: alloc 50 4096")
	n := 500
	if longtest.Enabled() {
		n = 3000
	}
	for i := 0; i < n; i++ {
		s, err := r.NewStream()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.RequestHeaders([][2]string{{":path", "/"}}, false); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if _, err := s.ResponseBody(make([]byte, 100), true); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if err := s.Done(); err != nil {
			t.Fatal(err)
		}
	}
	if got := h.PollCalls(); got != 0 {
		t.Errorf("PollCalls() = %d, want 0", got)
	}
}

func TestMisc(t *testing.T) {
	h, vm := newGuestVM(t, Options{}, "vm", "")
	r := configure(t, vm, "r", "request_headers: foreign clear_route_cache -; foreign nope -; continue 2; continue 7; log 9 x\nconfigure: effective 12345; done")
	s := stream(t, r, nil)
	if got, want := results(h, "request_headers", "foreign"), []string{"0", "1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("foreign = %q, want %q", got, want)
	}
	if s.RouteCacheClears() != 1 {
		t.Errorf("RouteCacheClears() = %d, want 1", s.RouteCacheClears())
	}
	// Envoy's continueStream answers OK for DOWNSTREAM in an HTTP filter
	// (no network callbacks to continue) and BAD_ARGUMENT past UPSTREAM.
	if got, want := results(h, "request_headers", "continue"), []string{"0", "2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("continue(downstream), continue(7) = %q, want %q", got, want)
	}
	if got := result(t, h, "request_headers", "log"); got != "2" {
		t.Errorf("log with level 9 = %q, want 2", got)
	}
	if got, want := results(h, "configure", "effective"), []string{"2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("effective(unknown) = %q, want %q", got, want)
	}
}

func TestHTTPClusterLoopback(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("x-host", r.Host)
		io.WriteString(w, "path="+r.URL.Path)
	}))
	defer srv.Close()
	h, vm := newGuestVM(t, Options{}, "vm", "")
	h.AddCluster("real", &HTTPCluster{BaseURL: srv.URL, Latency: 5 * time.Millisecond})
	configure(t, vm, "r", "configure: call real :method=GET,:path=/metrics,:authority=pod-a - 1000\nhttp_call_response: callresp")
	h.Advance(5 * time.Millisecond)
	resp := result(t, h, "http_call_response", "callresp")
	f := strings.Fields(resp)
	b, _ := hex.DecodeString(f[1])
	kv, _ := DecodePairs(b)
	hm := headerMap{kv: kv}
	if st, _ := hm.get(":status"); st != "200" || f[len(f)-1] != "path=/metrics" {
		t.Errorf("loopback call response = %q (headers %q)", resp, kv)
	}
	if host, _ := hm.get("x-host"); host != "pod-a" {
		t.Errorf(":authority sent as Host = %q, want pod-a", host)
	}
}

// TestModuleSwap: new VMs of another compiled module with the same vm_id
// keep the shared data; Root.Tick runs on_tick on demand.
func TestModuleSwap(t *testing.T) {
	h, vm := newGuestVM(t, Options{}, "fleet", "")
	r := configure(t, vm, "r", "configure: setshared lease me 0\ntick: log 2 ticked")
	if err := r.Tick(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dumpLogs(h), "ticked") {
		t.Fatalf("Tick() did not run proxy_on_tick")
	}
	other := append([]byte(nil), guestWasm...)
	other = append(other, 0, 9, 7, 'h', 's', '-', 's', 'w', 'a', 'p', 1) // a custom section: new bytes, same code
	mod2, err := h.Compile(t.Context(), other)
	if err != nil {
		t.Fatal(err)
	}
	vm2, err := h.NewVM(t.Context(), mod2, "fleet", nil)
	if err != nil {
		t.Fatal(err)
	}
	vm.Close()
	configure(t, vm2, "r", "configure: getshared lease")
	if got := result(t, h, "configure", "getshared"); got != "0 me 1" {
		t.Errorf("shared data after module swap = %q, want %q", got, "0 me 1")
	}
}

// Example_usage mirrors the package doc.
func Example_usage() {
	ctx := context.Background()
	h := NewHost(Options{})
	defer h.Close()
	mod, _ := h.Compile(ctx, guestWasm)
	vm, _ := h.NewVM(ctx, mod, "gpuroute", nil)
	root, _ := vm.Configure("gpuroute", []byte("quiet\nrequest_headers: replace 0 x-gateway-destination-endpoint 10.0.0.1:8000"))
	s, _ := root.NewStream()
	s.RequestHeaders([][2]string{{":path", "/v1/completions"}}, true)
	v, _ := s.RequestHeader("x-gateway-destination-endpoint")
	fmt.Println(v)
	// Output: 10.0.0.1:8000
}

// TestWASIClock: the guest's time.Now reads the virtual wall clock through
// clock_time_get(REALTIME).
func TestWASIClock(t *testing.T) {
	start := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	h, vm := newGuestVM(t, Options{Start: start}, "vm", "")
	h.Advance(1500 * time.Millisecond)
	configure(t, vm, "r", "configure: walltime")
	want := strconv.FormatInt(start.Add(1500*time.Millisecond).UnixNano(), 10)
	if got := result(t, h, "configure", "walltime"); got != want {
		t.Errorf("guest time.Now().UnixNano() = %s, want %s", got, want)
	}
}

// TestGuestTime: with TimeGuest a VM counts the module's own time, not its
// host functions': a log sink that sleeps 20 ms inside proxy_log leaves it
// well under the call's wall time. Without TimeGuest it stays 0.
func TestGuestTime(t *testing.T) {
	sleepy := func(LogEntry) { time.Sleep(20 * time.Millisecond) }
	for _, timed := range []bool{false, true} {
		h, vm := newGuestVM(t, Options{TimeGuest: timed, LogSink: sleepy}, "vm", "")
		before := vm.GuestTime()
		t0 := time.Now()
		configure(t, vm, "r", "configure: getshared k")
		wall := time.Since(t0)
		got := vm.GuestTime() - before
		if logs := len(h.Logs()); logs == 0 || wall < 20*time.Millisecond {
			t.Fatalf("configure logged %d lines in %v; want a log line's 20 ms sleep", logs, wall)
		}
		switch {
		case !timed && got != 0:
			t.Errorf("GuestTime without TimeGuest = %v, want 0", got)
		case timed && (got <= 0 || got > wall-15*time.Millisecond):
			t.Errorf("GuestTime of a configure that took %v with a 20 ms host call = %v, want > 0 and without the host call", wall, got)
		}
	}
}

// TestProxyDone: a root whose proxy_on_done answered false stays until it
// calls proxy_done, and is deleted once that call returns; proxy_done from
// a root nobody is waiting for is NOT_FOUND (cpp-host WasmBase::done).
func TestProxyDone(t *testing.T) {
	h, vm := newGuestVM(t, Options{}, "vm", "")
	h.AddCluster("c", ClusterFunc(func(*CallRequest) CallReply { return CallReply{Latency: 100 * time.Millisecond} }))
	old := configure(t, vm, "r", "configure: done; call c :method=GET,:path=/,:authority=c - 1000\n"+
		"done: ret 0\nhttp_call_response: done; log 2 after-done; done")
	configure(t, vm, "r", "configure: log 2 new")
	if old.Deleted() {
		t.Fatalf("root whose on_done answered false was deleted")
	}
	if err := h.Advance(100 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got, want := results(h, "http_call_response", "done"), []string{"0", "1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("proxy_done from the waiting root, then again = %q, want %q", got, want)
	}
	if got := result(t, h, "configure", "done"); got != "1" {
		t.Errorf("proxy_done from a serving root = %q, want 1 (NOT_FOUND)", got)
	}
	if !old.Deleted() {
		t.Errorf("root not deleted after its proxy_done")
	}
	// on_delete ran after the callback that called proxy_done returned.
	var order []string
	for _, e := range h.Logs() {
		if e.Message == "after-done" || strings.HasPrefix(e.Message, "cb delete") {
			order = append(order, e.Message)
		}
	}
	if want := []string{"after-done", "cb delete " + itoa(int64(old.ID()))}; !reflect.DeepEqual(order, want) {
		t.Errorf("order = %q, want %q", order, want)
	}
}
