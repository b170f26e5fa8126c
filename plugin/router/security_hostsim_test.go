package router

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/gpuroute/gpuroute/hostsim"
	"github.com/gpuroute/gpuroute/internal/longtest"
)

// Security tests: what a hostile client or a careless configuration can do
// to the router. Both legs where the driver can express the input, the
// built module in hostsim otherwise (chunked bodies, trailers, memory).

const evilDestination = "169.254.169.254:80"

// TestDestinationStrippedFirst holds the router to its own rule: the first
// call of OnHttpRequestHeaders strips a client-sent destination, and the
// first call of OnHttpRequestTrailers strips one smuggled into trailers,
// before anything that could panic (a panic answers Continue, and the
// request must not leave with the client's choice; plugin/proxy's
// TestPanicAtABIBoundary shows a removal made before a panic sticks).
func TestDestinationStrippedFirst(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "stream.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"OnHttpRequestHeaders": "stripDestination", "OnHttpRequestTrailers": "removeAll"}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv == nil || want[fn.Name.Name] == "" {
			continue
		}
		first := firstCall(fn.Body)
		if first != want[fn.Name.Name] {
			t.Errorf("first call in stream.%s = %q, want %s (strip the destination before anything can fail)", fn.Name.Name, first, want[fn.Name.Name])
		}
		delete(want, fn.Name.Name)
	}
	for name := range want {
		t.Errorf("stream.%s not found in stream.go", name)
	}
}

// firstCall names the first function called in body, in source order.
func firstCall(body *ast.BlockStmt) string {
	name := ""
	ast.Inspect(body, func(n ast.Node) bool {
		if name != "" {
			return false
		}
		if c, ok := n.(*ast.CallExpr); ok {
			switch fn := c.Fun.(type) {
			case *ast.Ident:
				name = fn.Name
			case *ast.SelectorExpr:
				name = fn.Sel.Name
			}
			return false
		}
		return true
	})
	return name
}

// TestDestinationInjectionWithBody: the injected header on inference
// requests (routed after the body) and on requests the router answers
// locally never survives.
func TestDestinationInjectionWithBody(t *testing.T) {
	in := append(append([][2]string(nil), baseRequest...),
		[2]string{HeaderDestination, evilDestination}, [2]string{HeaderDestination, evilDestination + ",10.9.9.9:1"})
	eachLeg(t, func(t *testing.T, d driver) {
		if !d.configure(cfgTwo) {
			t.Fatal("configure(cfgTwo) = false, want true")
		}
		got, action, local := d.request(in, chatBody("hello"))
		if dst := destinations(got); action != types.ActionContinue || local != nil || len(dst) != 1 || dst[0] == evilDestination {
			t.Errorf("request with injected destinations and a body = %q, action %v, local %+v; want one replica address", dst, action, local)
		}
		if !d.configure(cfgNone) {
			t.Fatal("configure(cfgNone) = false, want true")
		}
		got, _, local = d.request(in, chatBody("hello"))
		if dst := destinations(got); local == nil || local.status != 503 || len(dst) != 0 {
			t.Errorf("locally answered request kept destinations %q (local %+v); want none and a 503", dst, local)
		}
	})
}

// TestDestinationInRequestTrailers: a destination smuggled into request
// trailers is removed (Envoy can merge trailers into what upstream sees).
func TestDestinationInRequestTrailers(t *testing.T) {
	d := newWasmDriver(t).(*wasmDriver)
	if !d.configure(cfgTwo) {
		t.Fatal("configure(cfgTwo) = false, want true")
	}
	s, err := d.root().NewStream()
	if err != nil {
		t.Fatal(err)
	}
	hdrs := append(append([][2]string(nil), baseRequest...), [2]string{"X-Gateway-Destination-Endpoint", evilDestination})
	mustAct(t, "RequestHeaders", ok2(s.RequestHeaders(hdrs, false)))
	mustAct(t, "RequestBody", ok2(s.RequestBody([]byte(chatBody("hi")), false)))
	trailers := [][2]string{{HeaderDestination, evilDestination}, {"x-checksum", "1"}, {"X-GATEWAY-DESTINATION-ENDPOINT", evilDestination}}
	a, err := s.RequestTrailers(trailers)
	if err != nil || a != hostsim.ActionContinue {
		t.Fatalf("RequestTrailers = %v, %v; want Continue", a, err)
	}
	for _, kv := range s.RequestTrailerMap() {
		if kv[0] == HeaderDestination {
			t.Errorf("request trailers kept %s = %q", kv[0], kv[1])
		}
	}
	if dst := destinations(s.RequestHeaderMap()); len(dst) != 1 || dst[0] == evilDestination {
		t.Errorf("destinations after trailers = %q, want one replica address", dst)
	}
	if err := s.Done(); err != nil {
		t.Fatal(err)
	}
}

func ok2(a hostsim.Action, err error) error { return err }

func mustAct(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s = %v", what, err)
	}
}

// TestOversizedBodyChunked: past max_body_bytes the router routes on the
// prefix it read, as soon as the buffer crosses the limit, and forwards
// the whole body untouched; never a 413 or a 5xx.
func TestOversizedBodyChunked(t *testing.T) {
	d := newWasmDriver(t).(*wasmDriver)
	cfg := strings.Replace(cfgTwo, `"tick_ms":250`, `"tick_ms":250,"max_body_bytes":1024`, 1)
	if !d.configure(cfg) {
		t.Fatalf("configure(%s) = false, want true", cfg)
	}
	body := []byte(chatBody(strings.Repeat("a long prompt that goes on ", 12000))) // ~320 KiB
	chunks := [][]byte{body[:512], body[512:65536], body[65536:200000], body[200000:]}
	s, err := d.root().NewStream()
	if err != nil {
		t.Fatal(err)
	}
	mustAct(t, "RequestHeaders", ok2(s.RequestHeaders(baseRequest, false)))
	wantActions := []hostsim.Action{hostsim.ActionPause, hostsim.ActionContinue, hostsim.ActionContinue, hostsim.ActionContinue}
	for i, c := range chunks {
		a, err := s.RequestBody(c, i == len(chunks)-1)
		if err != nil {
			t.Fatalf("RequestBody(chunk %d) = %v", i, err)
		}
		if a != wantActions[i] {
			t.Errorf("RequestBody(chunk %d of %d bytes) = %v, want %v", i, len(c), a, wantActions[i])
		}
	}
	if lr := s.LocalReply(); lr != nil {
		t.Fatalf("oversized body answered locally: %d %s", lr.Status, lr.Body)
	}
	if dst := destinations(s.RequestHeaderMap()); len(dst) != 1 {
		t.Errorf("destinations = %q, want one", dst)
	}
	if fw := s.RequestBodyForwarded(); !bytes.Equal(fw, body) {
		t.Errorf("forwarded body is %d bytes, want the whole %d-byte body untouched", len(fw), len(body))
	}
	if err := s.Done(); err != nil {
		t.Fatal(err)
	}
}

// TestHostileInputs: oversized single-chunk bodies, huge headers, deeply
// nested JSON, invalid UTF-8: each routed (load alone at worst), Continue,
// never a local reply, never a trap.
func TestHostileInputs(t *testing.T) {
	deepArray := `{"model":"m","messages":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`
	deepObject := `{"model":"m","prompt":"p","x":` + strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000) + `}`
	manyHeaders := append([][2]string(nil), baseRequest...)
	for i := range 2000 {
		manyHeaders = append(manyHeaders, [2]string{"x-h-" + strconv.Itoa(i), strings.Repeat("v", 32)})
	}
	tests := []struct {
		name string
		hdrs [][2]string
		body string
	}{
		{name: "body 2 MiB in one chunk", body: chatBody(strings.Repeat("x", 2<<20))},
		{name: "body 1 MiB of whitespace", body: strings.Repeat(" ", 1<<20) + `{"model":"m","prompt":"p"}`},
		{name: "2000 headers", hdrs: manyHeaders, body: chatBody("hi")},
		{name: "header value 256 KiB", hdrs: append(append([][2]string(nil), baseRequest...), [2]string{"x-big", strings.Repeat("b", 256<<10)}), body: chatBody("hi")},
		{name: "path 64 KiB", hdrs: [][2]string{{":method", "POST"}, {":path", "/v1/chat/completions?" + strings.Repeat("q", 64<<10)}, {":authority", "gw"}}, body: chatBody("hi")},
		{name: "array nesting 10k", body: deepArray},
		{name: "object nesting 10k", body: deepObject},
		{name: "nesting 10k unterminated", body: `{"model":"m","messages":` + strings.Repeat(`[{"content":`, 10000)},
		{name: "invalid UTF-8 in prompt", body: "{\"model\":\"m\",\"prompt\":\"ab\xff\xfe\xc0\x80cd\"}"},
		{name: "invalid UTF-8 in chat content", body: "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\xed\xa0\x80 surrogate\"}]}"},
		{name: "invalid UTF-8 in model", body: "{\"model\":\"\xff\xff\",\"prompt\":\"p\"}"},
		{name: "lone surrogate escape", body: `{"model":"m","prompt":"\ud800\udbff x \u0000"}`},
		{name: "NUL bytes", body: "{\"model\":\"m\",\"prompt\":\"a\x00b\"}"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			eachLeg(t, func(t *testing.T, d driver) {
				if !d.configure(cfgTwo) {
					t.Fatal("configure(cfgTwo) = false, want true")
				}
				hdrs := tc.hdrs
				if hdrs == nil {
					hdrs = baseRequest
				}
				got, action, local := d.request(hdrs, tc.body)
				if dst := destinations(got); action != types.ActionContinue || local != nil || len(dst) != 1 {
					t.Errorf("request = destinations %q, action %v, local %+v; want one destination, Continue, no local reply", dst, action, local)
				}
				// The worker keeps routing afterwards.
				route(t, d)
				if logs := d.errorLogs(); len(logs) > 0 {
					t.Errorf("error logs: %q", logs)
				}
			})
		})
	}
}

// TestStatusEndpointExactPath: the status endpoint answers its exact path
// (query ignored) and nothing else, and echoes nothing from the request.
func TestStatusEndpointExactPath(t *testing.T) {
	const marker = "SECRETMARK"
	tests := []struct {
		name     string
		path     string
		answered bool
	}{
		{name: "exact", path: "/admin/gpuroute", answered: true},
		{name: "query", path: "/admin/gpuroute?who=" + marker + "&x=<script>", answered: true},
		{name: "trailing slash", path: "/admin/gpuroute/"},
		{name: "longer", path: "/admin/gpurouter"},
		{name: "sub path", path: "/admin/gpuroute/" + marker},
		{name: "prefix", path: "/admin"},
		{name: "upper case", path: "/ADMIN/GPUROUTE"},
		{name: "double slash", path: "//admin/gpuroute"},
		{name: "encoded", path: "/admin/gpuroute%3F"},
		{name: "fragment", path: "/admin/gpuroute#x"},
		{name: "semicolon", path: "/admin/gpuroute;x"},
	}
	cfg := strings.Replace(cfgTwo, `"tick_ms":250`, `"tick_ms":250,"status_path":"/admin/gpuroute"`, 1)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			eachLeg(t, func(t *testing.T, d driver) {
				hdrs := [][2]string{{":method", "GET"}, {":path", tc.path}, {":authority", marker + ".example"},
					{"user-agent", marker}, {"cookie", "s=" + marker}, {"authorization", "Bearer " + marker}}
				if !d.configure(cfgTwo) {
					t.Fatal("configure(cfgTwo) = false, want true")
				}
				if _, _, local := d.request(hdrs, ""); local != nil {
					t.Fatalf("status endpoint off by default, but %s got a local reply %d", tc.path, local.status)
				}
				if !d.configure(cfg) {
					t.Fatalf("configure(%s) = false, want true", cfg)
				}
				got, _, local := d.request(hdrs, "")
				if answered := local != nil; answered != tc.answered {
					t.Fatalf("request(%s) answered locally = %v, want %v", tc.path, answered, tc.answered)
				}
				if !tc.answered {
					if dst := destinations(got); len(dst) != 1 {
						t.Errorf("request(%s) destinations = %q, want it routed", tc.path, dst)
					}
					return
				}
				if local.status != 200 || strings.Contains(local.body, marker) || strings.Contains(local.body, "script") {
					t.Errorf("status reply = %d %q; want 200 without request data", local.status, local.body)
				}
			})
		})
	}
}

// replicasConfig renders n replicas (name length nameLen) with extra keys.
func replicasConfig(n, nameLen int, extra string) string {
	var b strings.Builder
	b.WriteString(`{"replicas":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		name := "r" + strconv.Itoa(i)
		if nameLen > len(name) {
			name += strings.Repeat("n", nameLen-len(name))
		}
		b.WriteString(`{"name":"` + name + `","address":"10.` + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255) + `:8000"}`)
	}
	b.WriteString("]" + extra + "}")
	return b.String()
}

func adaptersConfig(n int) string {
	var b strings.Builder
	b.WriteString(`,"adapters":{`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"lora-` + strconv.Itoa(i) + `":"base"`)
	}
	b.WriteString("}")
	return b.String()
}

// TestConfigBounds: sizes that could exhaust a VM's memory are refused
// through the plugin with a log line that names the bound; the largest
// accepted sizes start and route without trouble.
func TestConfigBounds(t *testing.T) {
	tests := []struct {
		name    string
		cfg     string
		wantLog string // "" means accepted
	}{
		{name: "4096 replicas", cfg: replicasConfig(4096, 0, "")},
		{name: "4097 replicas", cfg: replicasConfig(4097, 0, ""), wantLog: "replicas has more than 4096 entries"},
		{name: "4096 adapters", cfg: replicasConfig(2, 0, adaptersConfig(4096))},
		{name: "4097 adapters", cfg: replicasConfig(2, 0, adaptersConfig(4097)), wantLog: "adapters has more than 4096 entries"},
		{name: "adapter name 257 bytes", cfg: replicasConfig(2, 0, `,"adapters":{"`+strings.Repeat("a", 257)+`":"b"}`), wantLog: "1 to 256 bytes"},
		{name: "block_chars max", cfg: replicasConfig(2, 0, `,"block_chars":4096`)},
		{name: "block_chars over", cfg: replicasConfig(2, 0, `,"block_chars":4097`), wantLog: "block_chars"},
		{name: "block_chars under", cfg: replicasConfig(2, 0, `,"block_chars":7`), wantLog: "block_chars"},
		{name: "block_chars huge", cfg: replicasConfig(2, 0, `,"block_chars":1e18`), wantLog: "block_chars"},
		{name: "max_body_bytes over 1 MiB", cfg: replicasConfig(2, 0, `,"max_body_bytes":1048577`), wantLog: "max_body_bytes"},
		{name: "kv_capacity_tokens over", cfg: `{"replicas":[{"name":"a","address":"10.0.0.1:1","kv_capacity_tokens":2199023255553}]}`, wantLog: "kv_capacity_tokens"},
		{name: "kv_capacity_tokens max", cfg: `{"replicas":[{"name":"a","address":"10.0.0.1:1","kv_capacity_tokens":1099511627776}]}`},
		{name: "adapter_slots over", cfg: `{"replicas":[{"name":"a","address":"10.0.0.1:1","adapter_slots":1025}]}`, wantLog: "adapter_slots"},
		{name: "tick_ms 0", cfg: replicasConfig(2, 0, `,"tick_ms":0`), wantLog: "tick_ms"},
		{name: "fallbacks 9", cfg: replicasConfig(2, 0, `,"fallbacks":9`), wantLog: "fallbacks"},
		{name: "status_path 257 bytes", cfg: replicasConfig(2, 0, `,"status_path":"/`+strings.Repeat("s", 256)+`"`), wantLog: "status_path"},
		{name: "253-byte replica names", cfg: replicasConfig(16, 253, "")},
		{name: "64 KiB replica names", cfg: replicasConfig(16, 64<<10, ""), wantLog: "is 65536 bytes, more than the limit of 253"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			eachLeg(t, func(t *testing.T, d driver) {
				ok := d.configure(tc.cfg)
				if ok != (tc.wantLog == "") {
					t.Fatalf("configure(%s…) = %v, want %v (logs %q)", tc.cfg[:min(len(tc.cfg), 80)], ok, tc.wantLog == "", d.errorLogs())
				}
				if tc.wantLog != "" {
					if logs := strings.Join(d.errorLogs(), "\n"); !strings.Contains(logs, tc.wantLog) {
						t.Errorf("refusal logs %q, want one naming %q", logs, tc.wantLog)
					}
					return
				}
				for range 3 {
					route(t, d)
					d.tick()
				}
			})
		})
	}
}

// TestConfigChurnLargest: the largest configuration, reconfigured again and
// again in one VM (each creates a root; the old ones go), never traps.
func TestConfigChurnLargest(t *testing.T) {
	longtest.Skip(t) // six configurations of 4096 replicas and adapters
	d := newWasmDriver(t).(*wasmDriver)
	for i := range 6 {
		cfg := replicasConfig(4096, 0, adaptersConfig(4096)+`,"tick_ms":`+strconv.Itoa(100+i))
		if !d.configure(cfg) {
			t.Fatalf("configure #%d of 4096 replicas and adapters = false; logs %q", i, d.errorLogs())
		}
		route(t, d)
	}
	if err := d.vm.Err(); err != nil {
		t.Fatalf("VM failed: %v", err)
	}
}
