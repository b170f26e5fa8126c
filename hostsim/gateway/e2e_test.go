package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuroute/gpuroute/hostsim"
)

// End-to-end tests over loopback: three simulated replicas, the gateway
// running the built module, a client streaming through it. The scenario
// runs twice, with a net/http client and with the openai npm package on
// Node.js; both legs check the same things.

// wasmPath is $GPUROUTE_WASM, else the repository's build/gpuroute.wasm.
func wasmPath() string {
	if p := os.Getenv("GPUROUTE_WASM"); p != "" {
		return p
	}
	return filepath.Join("..", "..", "build", "gpuroute.wasm")
}

func readWASM(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(wasmPath())
	if err != nil {
		t.Skipf("plugin module not built (%v): run `make wasm` or set GPUROUTE_WASM", err)
	}
	return b
}

// testTimeScale runs the replicas at half the modelled speed of an H100:
// a 300-token stream lasts about 2 s, long enough to reconfigure under it.
const testTimeScale = 0.5

const testModel = "meta-llama/Llama-3.1-8B-Instruct"

type fixture struct {
	t        *testing.T
	replicas []*Replica
	servers  []*Server
	specs    []ReplicaSpec
	gw       *Gateway
	srv      *Server
	cfgPath  string
}

// newFixture starts n replicas and a gateway watching a configuration file.
func newFixture(t *testing.T, n int) *fixture {
	t.Helper()
	wasm := readWASM(t)
	f := &fixture{t: t, cfgPath: filepath.Join(t.TempDir(), "plugin.json")}
	for i := 0; i < n; i++ {
		name := string(rune('a' + i))
		r := NewReplica(ReplicaOptions{Name: name, TimeScale: testTimeScale, Model: testModel})
		s, err := Serve("127.0.0.1:0", r)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		f.replicas = append(f.replicas, r)
		f.servers = append(f.servers, s)
		f.specs = append(f.specs, ReplicaSpec{Name: name, Address: s.Addr})
	}
	cfg := f.writeConfig()
	var logs bytes.Buffer
	var logMu sync.Mutex
	logger := newTestLogger(&logs, &logMu)
	t.Cleanup(func() {
		if t.Failed() {
			logMu.Lock()
			t.Logf("gateway log:\n%s", logs.String())
			logMu.Unlock()
		}
	})
	gw, err := New(context.Background(), Options{WASM: wasm, Workers: 2, PluginConfig: cfg, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	f.gw = gw
	srv, err := Serve("127.0.0.1:0", gw)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = srv
	ctx, cancel := context.WithCancel(context.Background())
	go gw.WatchFile(ctx, f.cfgPath, 20*time.Millisecond)
	t.Cleanup(func() {
		cancel()
		srv.Close()
		gw.Close()
	})
	return f
}

func (f *fixture) writeConfig() []byte {
	f.t.Helper()
	cfg, err := PluginConfig(f.specs, ConfigOptions{TickMillis: 50, StatusPath: "/gpuroute/status"})
	if err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(f.cfgPath, cfg, 0o644); err != nil {
		f.t.Fatal(err)
	}
	return cfg
}

// drain marks replica name draining in the configuration file and waits
// until the gateway applied it.
func (f *fixture) drain(name string, deadline time.Time) {
	f.t.Helper()
	gen := f.gw.Generation()
	for i := range f.specs {
		if f.specs[i].Name == name {
			f.specs[i].State, f.specs[i].DrainDeadline = StateDraining, deadline
		}
	}
	f.writeConfig()
	for end := time.Now().Add(5 * time.Second); f.gw.Generation() == gen; {
		if time.Now().After(end) {
			f.t.Fatalf("configuration draining %q not applied within 5 s (generation still %d)", name, gen)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (f *fixture) replica(name string) *Replica {
	for _, r := range f.replicas {
		if r.Name() == name {
			return r
		}
	}
	f.t.Fatalf("no replica %q", name)
	return nil
}

// checkDestinations asserts every request a replica saw carried exactly
// one destination: its own address (a client-sent value never survives).
func (f *fixture) checkDestinations() {
	f.t.Helper()
	total := 0
	for i, r := range f.replicas {
		for _, q := range r.Requests() {
			total++
			if len(q.Destination) != 1 || q.Destination[0] != f.servers[i].Addr {
				f.t.Errorf("replica %s (%s) was addressed by %s = %q, want exactly [%q]",
					r.Name(), f.servers[i].Addr, HeaderDestination, q.Destination, f.servers[i].Addr)
			}
		}
	}
	if total == 0 {
		f.t.Error("no replica recorded a request")
	}
}

// streamEvent is one line of what a client saw (the Node script's format).
type streamEvent struct {
	Type         string            `json:"type"`
	Status       int               `json:"status"`
	Headers      map[string]string `json:"headers"`
	Content      string            `json:"content"`
	FinishReason *string           `json:"finish_reason"`
	Usage        *struct {
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Message string `json:"message"`
}

// streamClient starts one streamed chat completion; events arrive on the
// channel, which is closed after "done" or "error".
type streamClient interface {
	stream(t *testing.T, baseURL, prompt string, maxTokens int, spoof string) <-chan streamEvent
}

// goClient speaks the same protocol with net/http and a hand-rolled SSE reader.
type goClient struct{}

func (goClient) stream(t *testing.T, baseURL, prompt string, maxTokens int, spoof string) <-chan streamEvent {
	ch := make(chan streamEvent, 1024)
	go func() {
		defer close(ch)
		fail := func(err error) { ch <- streamEvent{Type: "error", Message: err.Error()} }
		body, _ := json.Marshal(map[string]any{
			"model": testModel, "stream": true, "max_tokens": maxTokens,
			"messages":       []map[string]string{{"role": "user", "content": prompt}},
			"stream_options": map[string]bool{"include_usage": true},
		})
		req, _ := http.NewRequest(http.MethodPost, baseURL+"/chat/completions", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if spoof != "" {
			req.Header.Set(HeaderDestination, spoof)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fail(err)
			return
		}
		defer resp.Body.Close()
		hdrs := map[string]string{}
		for k := range resp.Header {
			hdrs[strings.ToLower(k)] = resp.Header.Get(k)
		}
		ch <- streamEvent{Type: "headers", Status: resp.StatusCode, Headers: hdrs}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			if data == "[DONE]" {
				ch <- streamEvent{Type: "done"}
				return
			}
			var c struct {
				Choices []struct {
					Delta struct {
						Content string `json:"content"`
					} `json:"delta"`
					FinishReason *string `json:"finish_reason"`
				} `json:"choices"`
				Usage *struct {
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
			}
			if err := json.Unmarshal([]byte(data), &c); err != nil {
				fail(err)
				return
			}
			ev := streamEvent{Type: "chunk"}
			if len(c.Choices) > 0 {
				ev.Content, ev.FinishReason = c.Choices[0].Delta.Content, c.Choices[0].FinishReason
			}
			ev.Usage = c.Usage
			ch <- ev
		}
		if err := sc.Err(); err != nil {
			fail(err)
			return
		}
		fail(errors.New("stream ended without [DONE]"))
	}()
	return ch
}

// result collects a finished stream.
type result struct {
	headers  streamEvent
	content  string
	finish   string
	usage    int
	chunks   int
	err      string
	finished bool
}

func collect(t *testing.T, ch <-chan streamEvent, timeout time.Duration) result {
	t.Helper()
	var r result
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return r
			}
			r.add(ev)
		case <-deadline:
			t.Fatalf("stream not finished after %v (got %d chunks)", timeout, r.chunks)
		}
	}
}

func (r *result) add(ev streamEvent) {
	switch ev.Type {
	case "headers":
		r.headers = ev
	case "chunk":
		r.chunks++
		r.content += ev.Content
		if ev.FinishReason != nil {
			r.finish = *ev.FinishReason
		}
		if ev.Usage != nil {
			r.usage = ev.Usage.CompletionTokens
		}
	case "done":
		r.finished = true
	case "error":
		r.err = ev.Message
	}
}

func expectedText(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteString(TokenText(i))
	}
	return b.String()
}

// sharedPrompt is long enough (about 300 tokens) that its cached prefix
// pulls later requests to the replica that served it.
var sharedPrompt = strings.Repeat("You are a careful assistant for the gpuroute test suite. ", 20) + "Question: what is 2+2?"

// runDrainScenario is the behaviour both legs check: a streamed answer
// arrives complete and in order through the gateway; the request reached
// one replica, addressed by the plugin's destination only; a configuration
// reload draining that replica moves new requests elsewhere while the
// stream started before it completes.
func runDrainScenario(t *testing.T, c streamClient) {
	f := newFixture(t, 3)
	base := f.srv.URL() + "/v1"
	const inflightTokens = 300

	// Warm-up: one short request per client teaches the plugin nothing in
	// particular but proves the path (and the first metrics scrape lands).
	warm := collect(t, c.stream(t, base, "warm up", 4, "6.6.6.6:1"), 20*time.Second)
	if warm.err != "" || !warm.finished || warm.content != expectedText(4) {
		t.Fatalf("warm-up stream = %+v, want %q and done", warm, expectedText(4))
	}

	// The in-flight stream, with a spoofed destination the plugin must replace.
	ch := c.stream(t, base, sharedPrompt, inflightTokens, "6.6.6.6:1")
	var inflight result
	deadline := time.After(20 * time.Second)
	for inflight.chunks < 2 && inflight.err == "" {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("in-flight stream ended early: %+v", inflight)
			}
			inflight.add(ev)
		case <-deadline:
			t.Fatal("in-flight stream sent no chunk within 20 s")
		}
	}
	if inflight.err != "" {
		t.Fatalf("in-flight stream failed: %s", inflight.err)
	}
	if inflight.headers.Status != http.StatusOK {
		t.Fatalf("in-flight stream status = %d, want 200", inflight.headers.Status)
	}
	home := inflight.headers.Headers[HeaderReplica]
	if f.replica(home) == nil {
		return
	}

	f.drain(home, time.Now().Add(time.Minute))
	drainedAt := time.Now()

	// New requests with the same prompt would go home for the cached
	// prefix; the drain must send them elsewhere.
	for i := 0; i < 4; i++ {
		r := collect(t, goClient{}.stream(t, base, sharedPrompt, 4, ""), 20*time.Second)
		if r.err != "" || r.headers.Status != http.StatusOK {
			t.Fatalf("request %d after the drain = %+v, want 200", i, r)
		}
		if got := r.headers.Headers[HeaderReplica]; got == home {
			t.Errorf("request %d after draining %s went to %s", i, home, got)
		}
	}
	// And one through the client under test.
	r := collect(t, c.stream(t, base, sharedPrompt, 4, ""), 20*time.Second)
	if got := r.headers.Headers[HeaderReplica]; r.err != "" || got == home {
		t.Errorf("client request after draining %s = replica %q (err %q), want another replica", home, got, r.err)
	}

	// The stream that started before the drain completes, in order.
	rest := collect(t, ch, 20*time.Second)
	inflight.content += rest.content
	inflight.chunks += rest.chunks
	inflight.finished, inflight.err, inflight.finish, inflight.usage = rest.finished, rest.err, rest.finish, rest.usage
	if inflight.err != "" || !inflight.finished {
		t.Fatalf("in-flight stream on draining %s: err %q finished %v after %d chunks", home, inflight.err, inflight.finished, inflight.chunks)
	}
	if want := expectedText(inflightTokens); inflight.content != want {
		t.Errorf("in-flight stream content = %.60q…, want %.60q… (in order, complete)", inflight.content, want)
	}
	if inflight.finish != "length" || inflight.usage != inflightTokens {
		t.Errorf("in-flight stream finish_reason %q usage %d, want \"length\" and %d", inflight.finish, inflight.usage, inflightTokens)
	}
	t.Logf("in-flight stream on %s: %d chunks, finished %v after the drain", home, inflight.chunks, time.Since(drainedAt).Round(time.Millisecond))
	// Only the in-flight request ever reached home after the warm-up.
	for _, q := range f.replica(home).Requests() {
		if q.PromptTokens > 100 && !q.Completed {
			t.Errorf("replica %s recorded an incomplete long request: %+v", home, q)
		}
	}
	f.checkDestinations()
	// The plugin scraped the replicas' /metrics through the gateway's clusters.
	scrapes, _ := f.gw.Host().Metric("gpuroute_scrapes_total")
	failures, _ := f.gw.Host().Metric("gpuroute_scrape_failures_total")
	if scrapes.Value == 0 || failures.Value != 0 {
		t.Errorf("scrapes = %d, failures = %d, want > 0 and 0", scrapes.Value, failures.Value)
	}
}

func TestE2EGoClient(t *testing.T) {
	runDrainScenario(t, goClient{})
}

// TestE2EDrainDeadline: past the drain deadline the plugin resets what
// still streams from the replica; the client sees the stream break.
func TestE2EDrainDeadline(t *testing.T) {
	f := newFixture(t, 3)
	base := f.srv.URL() + "/v1"
	ch := goClient{}.stream(t, base, sharedPrompt, 400, "")
	first := <-ch
	if first.Type != "headers" || first.Status != http.StatusOK {
		t.Fatalf("first event = %+v, want 200 headers", first)
	}
	home := first.Headers[HeaderReplica]
	f.drain(home, time.Now().Add(200*time.Millisecond))
	r := collect(t, ch, 10*time.Second)
	if r.finished || r.err == "" {
		t.Fatalf("stream on %s past its drain deadline: finished %v err %q after %d chunks, want it reset", home, r.finished, r.err, r.chunks)
	}
	if !strings.HasPrefix(expectedText(400), r.content) {
		t.Errorf("what arrived before the reset is not a prefix of the answer: %.60q", r.content)
	}
	t.Logf("reset after %d chunks: %s", r.chunks, r.err)
	// The replica saw its client go away.
	end := time.Now().Add(2 * time.Second)
	for {
		qs := f.replica(home).Requests()
		if len(qs) > 0 && !qs[len(qs)-1].Completed {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("replica %s did not record the reset request as incomplete: %+v", home, qs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got, _ := f.gw.Host().Metric("gpuroute_drain_resets_total"); got.Value < 1 {
		t.Errorf("gpuroute_drain_resets_total = %d, want >= 1", got.Value)
	}
}

// --- Node.js leg ---------------------------------------------------------

// nodeClient runs e2e/client.mjs (the openai npm package) per stream.
type nodeClient struct{ dir string }

func (n nodeClient) stream(t *testing.T, baseURL, prompt string, maxTokens int, spoof string) <-chan streamEvent {
	ch := make(chan streamEvent, 1024)
	arg, _ := json.Marshal(map[string]any{"baseURL": baseURL, "model": testModel, "prompt": prompt, "maxTokens": maxTokens, "spoof": spoof})
	cmd := exec.Command("node", filepath.Join(n.dir, "client.mjs"), string(arg))
	cmd.Dir = n.dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		t.Fatalf("node client: %v", err)
	}
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		sawEnd := false
		for sc.Scan() {
			var ev streamEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				ch <- streamEvent{Type: "error", Message: "node client printed " + strconv.Quote(sc.Text())}
				sawEnd = true
				continue
			}
			sawEnd = sawEnd || ev.Type == "done" || ev.Type == "error"
			ch <- ev
		}
		err := cmd.Wait()
		if !sawEnd {
			ch <- streamEvent{Type: "error", Message: "node client exited (" + errString(err) + "): " + stderr.String()}
		}
	}()
	return ch
}

func errString(err error) string {
	if err == nil {
		return "status 0"
	}
	return err.Error()
}

// installNodePackage installs the npm package in src (npm ci from its
// committed lock file) into a cache directory keyed by the lock file's
// hash, so repeated runs reuse it, copies src's scripts there and returns
// the directory; module is a package the install must contain. It skips the
// test when node or npm is missing, or when the registry cannot be reached,
// unless require is set (then it fails).
func installNodePackage(t *testing.T, src, module string, scripts []string, require bool) string {
	t.Helper()
	skip := func(format string, args ...any) {
		t.Helper()
		if require {
			t.Fatalf(format, args...)
		}
		t.Skipf(format+" (the Go-client leg covers the same behaviour)", args...)
	}
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			skip("%s not found: skipping the %s leg", tool, module)
		}
	}
	h := sha256.New()
	contents := map[string][]byte{}
	for _, name := range append([]string{"package.json", "package-lock.json"}, scripts...) {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		contents[name] = b
		if name == "package.json" || name == "package-lock.json" {
			h.Write(b)
		}
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "gpuroute", "gateway-e2e-"+hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(filepath.Join(dir, "node_modules", module, "package.json")); err != nil {
		tmp := dir + ".tmp-" + strconv.Itoa(os.Getpid())
		_ = os.RemoveAll(tmp)
		if err := os.MkdirAll(tmp, 0o755); err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(tmp)
		for _, name := range []string{"package.json", "package-lock.json"} {
			if err := os.WriteFile(filepath.Join(tmp, name), contents[name], 0o644); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		start := time.Now()
		cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = tmp
		if out, err := cmd.CombinedOutput(); err != nil {
			skip("npm ci of %s failed (%v): %s", src, err, out)
		}
		t.Logf("npm ci installed %s in %v", module, time.Since(start).Round(time.Millisecond))
		_ = os.RemoveAll(dir)
		if err := os.Rename(tmp, dir); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), contents[name], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestE2ENodeOpenAIClient(t *testing.T) {
	readWASM(t) // skip before installing anything if the module is missing
	dir := installNodePackage(t, "e2e", "openai", []string{"client.mjs"}, os.Getenv("GPUROUTE_E2E_REQUIRE_NODE") == "1")
	runDrainScenario(t, nodeClient{dir: dir})
}

// --- helpers ---------------------------------------------------------------

type syncWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (s syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func newTestLogger(w io.Writer, mu *sync.Mutex) *log.Logger {
	return log.New(syncWriter{mu: mu, w: w}, "", log.Lmicroseconds)
}

// TestE2EModuleReload: a new module takes new requests while a stream on
// the old one completes; the old VMs close once idle; a module that does
// not compile is refused and the serving one stays.
func TestE2EModuleReload(t *testing.T) {
	f := newFixture(t, 2)
	base := f.srv.URL() + "/v1"
	ch := goClient{}.stream(t, base, sharedPrompt, 150, "")
	if ev := <-ch; ev.Type != "headers" || ev.Status != http.StatusOK {
		t.Fatalf("first event = %+v, want 200 headers", ev)
	}
	f.gw.vmsMu.RLock()
	old := f.gw.vms
	f.gw.vmsMu.RUnlock()
	if err := f.gw.ReloadModule(context.Background(), readWASM(t)); err != nil {
		t.Fatal(err)
	}
	if got := f.gw.ModuleGeneration(); got != 2 {
		t.Errorf("ModuleGeneration() = %d, want 2", got)
	}
	if r := collect(t, goClient{}.stream(t, base, "after the swap", 4, ""), 10*time.Second); !r.finished || r.content != expectedText(4) {
		t.Errorf("request on the new module = %+v, want %q", r, expectedText(4))
	}
	rest := collect(t, ch, 10*time.Second)
	if !rest.finished || rest.content != expectedText(150) {
		t.Errorf("stream across the module swap: finished %v err %q, %d chunks, want all 150 tokens", rest.finished, rest.err, rest.chunks)
	}
	for end := time.Now().Add(5 * time.Second); ; {
		root := old[0].Root(DefaultID)
		if root == nil {
			break // Close retired the roots
		}
		s, err := root.NewStream()
		if errors.Is(err, hostsim.ErrVMClosed) {
			break
		}
		if err == nil {
			_ = s.Done()
		}
		if time.Now().After(end) {
			t.Fatalf("old worker VM still open 5 s after its last stream (NewStream error %v)", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := f.gw.ReloadModule(context.Background(), []byte("not wasm")); err == nil {
		t.Error("ReloadModule(not wasm) = nil, want an error")
	}
	if r := collect(t, goClient{}.stream(t, base, "after the refusal", 2, ""), 10*time.Second); !r.finished {
		t.Errorf("request after a refused module = %+v, want served", r)
	}
}
