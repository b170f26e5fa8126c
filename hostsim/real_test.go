package hostsim

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/gpuroute/gpuroute/internal/longtest"
)

// Tests of the real gpuroute module (make test builds it first).

// realWasmPath is $GPUROUTE_WASM, else ../build/gpuroute.wasm.
func realWasmPath() string {
	if p := os.Getenv("GPUROUTE_WASM"); p != "" {
		return p
	}
	return filepath.Join("..", "build", "gpuroute.wasm")
}

var realOnce struct {
	sync.Once
	b   []byte
	err error
}

func realWasm(t testing.TB) []byte {
	t.Helper()
	realOnce.Do(func() { realOnce.b, realOnce.err = os.ReadFile(realWasmPath()) })
	if realOnce.err != nil {
		t.Skipf("real module not built (%v): run `make wasm` or set GPUROUTE_WASM", realOnce.err)
	}
	return realOnce.b
}

// firstPluginConfig is the first plugin's configuration.
const firstPluginConfig = `{"replicas":[{"name":"a","address":"10.0.0.1:8000"},{"name":"b","address":"10.0.0.2:8000"}],"tick_ms":100}`

// TestRealModuleImportsAllowList: the built module imports only WASI
// functions every Envoy from 1.33 on provides (EnvoyWASIImports, a subset of
// what cpp-host provides from PR #533 on too) and proxy_* calls hostsim
// provides, and exports what the spec asks for.
func TestRealModuleImportsAllowList(t *testing.T) {
	b := realWasm(t)
	h := NewHost(Options{})
	defer h.Close()
	mod, err := h.Compile(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("module %s: %d bytes", realWasmPath(), mod.Size())
	for _, imp := range mod.Imports() {
		m, name, _ := strings.Cut(imp, ".")
		switch {
		case m == WASIModuleName && slices.Contains(EnvoyWASIImports, name):
		case m == EnvModuleName && strings.HasPrefix(name, "proxy_"):
			if !slices.Contains(EnvImports(), name) {
				t.Errorf("import %s is a proxy_* call hostsim does not provide", imp)
			}
		default:
			t.Errorf("import %s is outside Envoy's WASI set and env.proxy_*: Envoy would refuse the module", imp)
		}
	}
	exports := mod.Exports()
	for _, want := range RequiredExports {
		if !slices.Contains(exports, want) {
			t.Errorf("export %s missing (spec abi-versions/v0.2.1)", want)
		}
	}
}

// realWorkers starts n worker VMs of the real module sharing one Host.
func realWorkers(t testing.TB, n int, opts Options) (*Host, []*Root) {
	t.Helper()
	b := realWasm(t)
	h := NewHost(opts)
	t.Cleanup(func() { h.Close() })
	mod, err := h.Compile(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	roots := make([]*Root, n)
	for i := range roots {
		vm, err := h.NewVM(context.Background(), mod, "gpuroute", nil)
		if err != nil {
			t.Fatal(err)
		}
		if roots[i], err = vm.Configure("gpuroute", []byte(firstPluginConfig)); err != nil {
			t.Fatal(err)
		}
	}
	return h, roots
}

// TestRealModuleFourWorkers: four workers route every request to one
// configured replica and log no error, with the configuration canary and
// under each of V8's allow-lists.
func TestRealModuleFourWorkers(t *testing.T) {
	tests := []struct {
		name string
		v8   V8Restrictions
	}{
		{name: "no restrictions", v8: NoRestrictions},
		{name: "v8 before 533", v8: V8Before533},
		{name: "v8 after 533", v8: V8After533},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { fourWorkers(t, Options{V8: tc.v8}) })
	}
}

func fourWorkers(t *testing.T, opts Options) {
	h, roots := realWorkers(t, 4, opts)
	if got := h.Canaries(); got != 1 {
		t.Errorf("Canaries() after configuring four workers = %d, want 1", got)
	}
	addrs := []string{"10.0.0.1:8000", "10.0.0.2:8000"}
	seen := map[string]int{}
	for round := 0; round < 5; round++ {
		if err := h.Advance(100 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		for i, r := range roots {
			s, err := r.NewStream()
			if err != nil {
				t.Fatal(err)
			}
			hdrs := [][2]string{{":method", "POST"}, {":path", "/v1/completions"}, {":authority", "llm"},
				{"x-gateway-destination-endpoint", "6.6.6.6:1"}} // a client-sent value must not survive
			if _, err := s.RequestHeaders(hdrs, false); err != nil {
				t.Fatal(err)
			}
			if _, err := s.RequestBody([]byte(`{"model":"m","prompt":"hello"}`), true); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, kv := range s.RequestHeaderMap() {
				if kv[0] == "x-gateway-destination-endpoint" {
					got = append(got, kv[1])
				}
			}
			if lr := s.LocalReply(); lr != nil {
				t.Fatalf("worker %d round %d: local reply %d %q %s", i, round, lr.Status, lr.Details, lr.Body)
			}
			if len(got) != 1 || !slices.Contains(addrs, got[0]) {
				t.Fatalf("worker %d round %d: x-gateway-destination-endpoint = %q, want exactly one of %q", i, round, got, addrs)
			}
			seen[got[0]]++
			if _, err := s.ResponseHeaders([][2]string{{":status", "200"}}, true); err != nil {
				t.Fatal(err)
			}
			if err := s.Done(); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("destinations: %v", seen)
	for _, e := range h.Logs() {
		if e.Level >= LogError {
			t.Errorf("guest logged at %s: %s", e.Level, e.Message)
		}
	}
}

// TestRealModuleGCStress: many requests with bodies through one VM of the
// real module under ENOSYS poll_oneoff and V8's allow-lists of Envoy
// 1.33–1.37 (the Go runtime's collections run inside the allocator): no
// trap, no poll.
func TestRealModuleGCStress(t *testing.T) {
	h, roots := realWorkers(t, 1, Options{V8: V8Before533})
	n := 500
	if longtest.Enabled() {
		n = 5000
	}
	body := []byte(`{"model":"m","prompt":"` + strings.Repeat("lorem ipsum ", 200) + `","max_tokens":64}`)
	for i := 0; i < n; i++ {
		if i%50 == 0 {
			if err := h.Advance(100 * time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
		s, err := roots[0].NewStream()
		if err != nil {
			t.Fatal(err)
		}
		hdrs := [][2]string{{":method", "POST"}, {":path", "/v1/completions"}, {":authority", "llm"}, {"x-request-id", strconv.Itoa(i)}}
		if _, err := s.RequestHeaders(hdrs, false); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if _, err := s.RequestBody(body, true); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if _, err := s.ResponseHeaders([][2]string{{":status", "200"}}, false); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if _, err := s.ResponseBody([]byte(`data: {"choices":[{"text":"x"}]}`+"\n\n"), true); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if err := s.Done(); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if got := h.PollCalls(); got != 0 {
		t.Errorf("PollCalls() = %d, want 0: the runtime waited on something", got)
	}
}

// BenchmarkRealRequest: host+guest cost of a trivial request (create,
// headers, done) on the real module. Target ≤ 10 µs.
func BenchmarkRealRequest(b *testing.B) {
	h, roots := realWorkers(b, 1, Options{LogLevel: LogWarn})
	r := roots[0]
	h.Advance(100 * time.Millisecond)
	hdrs := [][2]string{{":method", "GET"}, {":path", "/v1/models"}, {":authority", "llm"}}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		s, err := r.NewStream()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.RequestHeaders(hdrs, true); err != nil {
			b.Fatal(err)
		}
		if err := s.Done(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNewVM: one more VM from the cached compiled module, through
// proxy_on_vm_start and proxy_on_configure. Target ≤ 10 ms.
func BenchmarkNewVM(b *testing.B) {
	wasm := realWasm(b)
	h := NewHost(Options{LogLevel: LogWarn})
	defer h.Close()
	mod, err := h.Compile(context.Background(), wasm)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		vm, err := h.NewVM(context.Background(), mod, "gpuroute", nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := vm.Configure("gpuroute", []byte(firstPluginConfig)); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		vm.Close()
		b.StartTimer()
	}
}

// BenchmarkCompile: compiling the real module without the cache.
func BenchmarkCompile(b *testing.B) {
	wasm := realWasm(b)
	b.ReportMetric(float64(len(wasm)), "module-bytes")
	b.ReportAllocs()
	for b.Loop() {
		// A fresh cache per iteration: nothing to reuse.
		h := NewHost(Options{CompilationCache: wazero.NewCompilationCache()})
		if _, err := h.Compile(context.Background(), wasm); err != nil {
			b.Fatal(err)
		}
		h.Close()
	}
}

// BenchmarkCompileCached: Compile in a new Host when the process-wide
// compilation cache already holds the module (what each test's Host pays).
func BenchmarkCompileCached(b *testing.B) {
	wasm := realWasm(b)
	warm := NewHost(Options{})
	if _, err := warm.Compile(context.Background(), wasm); err != nil {
		b.Fatal(err)
	}
	defer warm.Close()
	b.ReportAllocs()
	for b.Loop() {
		h := NewHost(Options{})
		if _, err := h.Compile(context.Background(), wasm); err != nil {
			b.Fatal(err)
		}
		h.Close()
	}
}

// TestRealModuleHeadersStopAll: under Envoy's default for a headers PAUSE
// (StopAllIterationAndWatermark) the module's body callback never runs, so
// an inference request is never routed: gpuroute needs the wasm
// PluginConfig's allow_on_headers_stop_iteration (HeadersStopIteration),
// under which the same request is routed at the end of its body.
func TestRealModuleHeadersStopAll(t *testing.T) {
	tests := []struct {
		name   string
		pause  HeadersPause
		routed bool
	}{
		{name: "stop iteration", pause: HeadersStopIteration, routed: true},
		{name: "stop all", pause: HeadersStopAll, routed: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, roots := realWorkers(t, 1, Options{HeadersPause: tc.pause})
			if err := h.Advance(100 * time.Millisecond); err != nil {
				t.Fatal(err)
			}
			s, err := roots[0].NewStream()
			if err != nil {
				t.Fatal(err)
			}
			hdrs := [][2]string{{":method", "POST"}, {":path", "/v1/completions"}, {":authority", "llm"}}
			if _, err := s.RequestHeaders(hdrs, false); err != nil {
				t.Fatal(err)
			}
			if _, err := s.RequestBody([]byte(`{"model":"m","prompt":"hello"}`), true); err != nil {
				t.Fatal(err)
			}
			if err := h.Advance(time.Second); err != nil {
				t.Fatal(err)
			}
			_, routed := s.RequestHeader("x-gateway-destination-endpoint")
			if routed != tc.routed || s.RequestPaused() == tc.routed {
				t.Errorf("destination set %v, RequestPaused() = %v; want routed %v", routed, s.RequestPaused(), tc.routed)
			}
			if err := s.Done(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
