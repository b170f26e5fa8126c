package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestEnvoyFailureReplies(t *testing.T) {
	_, refused := net.Dial("tcp", closedAddr(t))
	tests := []struct {
		name        string
		err         error
		retried     bool
		wantBody    string
		wantDetails string
		wantFlags   string
	}{
		{name: "refused", err: refused,
			wantBody:    "upstream connect error or disconnect/reset before headers. reset reason: remote connection failure, transport failure reason: delayed connect error: Connection refused",
			wantDetails: "upstream_reset_before_response_started{remote_connection_failure|delayed_connect_error:_Connection_refused}",
			wantFlags:   "UF"},
		{name: "refused after retries", err: refused, retried: true,
			wantBody:    "upstream connect error or disconnect/reset before headers. retried and the latest reset reason: remote connection failure, transport failure reason: delayed connect error: Connection refused",
			wantDetails: "upstream_reset_before_response_started{remote_connection_failure|delayed_connect_error:_Connection_refused}",
			wantFlags:   "URX,UF"},
		{name: "terminated", err: io.ErrUnexpectedEOF,
			wantBody:    "upstream connect error or disconnect/reset before headers. reset reason: connection termination",
			wantDetails: "upstream_reset_before_response_started{connection_termination}",
			wantFlags:   "UC"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, ok := classifyFailure(tt.err)
			if !ok {
				t.Fatalf("classifyFailure(%v) = not the upstream's, want a failure", tt.err)
			}
			e := failureReply(f, tt.retried)
			if e.status != 503 || e.body != tt.wantBody || e.details != tt.wantDetails || e.flags != tt.wantFlags {
				t.Errorf("failureReply(%v, retried %v) = %d %q %q %q, want 503 %q %q %q", tt.err, tt.retried,
					e.status, e.body, e.details, e.flags, tt.wantBody, tt.wantDetails, tt.wantFlags)
			}
		})
	}
	if _, ok := classifyFailure(context.Canceled); ok {
		t.Error("classifyFailure(context.Canceled) = the upstream's failure, want the client's")
	}
}

// fleet is replicas behind a gateway, for the failure tests.
type fleet struct {
	replicas []*Replica
	servers  []*Server
	specs    []ReplicaSpec
	gw       *Gateway
	url      string
	logs     *bytes.Buffer
	logMu    *sync.Mutex
}

// startFleet starts n replicas (plus the dead addresses given) and a
// gateway over them.
func startFleet(t *testing.T, n int, dead []string, co ConfigOptions, o Options) *fleet {
	t.Helper()
	f := &fleet{logs: &bytes.Buffer{}, logMu: &sync.Mutex{}}
	for i := range n {
		r := NewReplica(ReplicaOptions{Name: string(rune('a' + i)), TimeScale: 0.05})
		s, err := Serve("127.0.0.1:0", r)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close(); r.Close() })
		f.replicas, f.servers = append(f.replicas, r), append(f.servers, s)
		f.specs = append(f.specs, ReplicaSpec{Name: r.Name(), Address: s.Addr})
	}
	for i, addr := range dead {
		f.specs = append(f.specs, ReplicaSpec{Name: "dead-" + strconv.Itoa(i), Address: addr})
	}
	cfg, err := PluginConfig(f.specs, co)
	if err != nil {
		t.Fatal(err)
	}
	o.WASM, o.PluginConfig, o.Workers = readWASM(t), cfg, 2
	o.Logger = log.New(syncWriter{mu: f.logMu, w: f.logs}, "", log.Lmicroseconds)
	gw, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := Serve("127.0.0.1:0", gw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Close()
		gw.Close()
		if t.Failed() {
			f.logMu.Lock()
			t.Logf("gateway log:\n%s", f.logs.String())
			f.logMu.Unlock()
		}
	})
	f.gw, f.url = gw, srv.URL()
	return f
}

// complete sends one short completion and returns the status, the body and
// the answering replica.
func (f *fleet) complete(t *testing.T, prompt string) (int, string, string) {
	t.Helper()
	resp, err := http.Post(f.url+PathCompletions, "application/json",
		strings.NewReader(`{"prompt":"`+prompt+`","max_tokens":4}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header.Get(HeaderReplica)
}

// status reads the plugin's status endpoint through the gateway.
func (f *fleet) status(t *testing.T) map[string]map[string]any {
	t.Helper()
	resp, err := http.Get(f.url + "/gpuroute/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Replicas []map[string]any `json:"replicas"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, r := range st.Replicas {
		out[r["name"].(string)] = r
	}
	return out
}

// TestGatewayAnswersLikeEnvoy: a replica that refuses connections gets
// Envoy's local reply (503, text/plain, the router's body), the plugin sees
// it as Envoy's (a passive failure against the replica), and the client
// gets the same reply.
func TestGatewayAnswersLikeEnvoy(t *testing.T) {
	// Its metrics answer (from a replica the plugin does not route to), so
	// only the refused requests speak against it.
	metrics := NewReplica(ReplicaOptions{Name: "metrics", TimeScale: 0.05})
	ms, err := Serve("127.0.0.1:0", metrics)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ms.Close(); metrics.Close() })
	f := startFleet(t, 0, []string{closedAddr(t)}, ConfigOptions{TickMillis: 1000, StatusPath: "/gpuroute/status"},
		Options{Clusters: map[string]string{"dead-0" + MetricsClusterSuffix: ms.URL()}})
	status, body, _ := f.complete(t, "hello")
	want := failureReply(failureRefused, false).body
	if status != http.StatusServiceUnavailable || body != want {
		t.Fatalf("completion to a refusing replica = %d %q, want 503 %q", status, body, want)
	}
	if got := f.status(t)["dead-0"]["passive_failures"]; got == nil || got.(float64) < 1 {
		t.Errorf("status passive_failures of the refusing replica = %v, want >= 1 (the plugin read the 503 as Envoy's)", got)
	}
}

// TestGatewayRetriesFallbacks: with "fallbacks" the route's retries walk
// the plugin's list, as Envoy's override_host does: a refusing replica
// costs the client nothing while another is listed; with every listed
// replica refusing, the reply says the request was retried.
func TestGatewayRetriesFallbacks(t *testing.T) {
	f := startFleet(t, 1, []string{closedAddr(t)}, ConfigOptions{TickMillis: 1000, Fallbacks: 1, StatusPath: "/gpuroute/status"}, Options{})
	for i := range 8 {
		if status, body, rep := f.complete(t, "fallback "+strconv.Itoa(i)); status != 200 || rep != "a" {
			t.Fatalf("request %d with a refusing replica and a fallback = %d %q from %q, want 200 from a", i, status, body, rep)
		}
	}
	g := startFleet(t, 0, []string{closedAddr(t), closedAddr(t)}, ConfigOptions{TickMillis: 1000, Fallbacks: 1}, Options{})
	status, body, _ := g.complete(t, "nobody")
	if want := failureReply(failureRefused, true).body; status != 503 || body != want {
		t.Errorf("every listed replica refusing = %d %q, want 503 %q", status, body, want)
	}
}

// TestKilledReplicaRuledOut kills the replica the plugin prefers, under
// load: at most passive_failures requests (3 by default) fail before the plugin
// stops sending it work, and every request after that succeeds elsewhere.
// The tick is 1 s, so no scrape rules it out within the test.
func TestKilledReplicaRuledOut(t *testing.T) {
	const passiveFailures = 3 // config.DefaultPassiveFailures
	f := startFleet(t, 3, nil, ConfigOptions{TickMillis: 1000, StatusPath: "/gpuroute/status"}, Options{})
	// Load: a long stream in flight, and short requests one after another.
	stream, err := http.Post(f.url+PathCompletions, "application/json", strings.NewReader(`{"prompt":"inflight","max_tokens":4000,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	busy := stream.Header.Get(HeaderReplica)
	served := map[string]int{}
	for i := range 12 {
		status, body, rep := f.complete(t, "warm "+strconv.Itoa(i))
		if status != 200 {
			t.Fatalf("request %d before the kill = %d %q", i, status, body)
		}
		served[rep]++
	}
	victim := -1 // the replica without the stream that served most: the plugin keeps choosing it
	for i, r := range f.replicas {
		if r.Name() != busy && served[r.Name()] > 0 && (victim < 0 || served[r.Name()] > served[f.replicas[victim].Name()]) {
			victim = i
		}
	}
	if victim < 0 {
		t.Fatalf("the short requests all went to %s, which holds the stream: %v", busy, served)
	}
	// Kill it: its listener and connections closed at once (a crashed
	// process), between two of its requests.
	killedAt := time.Now()
	if err := f.servers[victim].srv.Close(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		t.Fatal(err)
	}
	failed, lastFailure := 0, time.Duration(0)
	for i := range 30 {
		status, body, rep := f.complete(t, "after "+strconv.Itoa(i))
		switch {
		case status == http.StatusServiceUnavailable && strings.HasPrefix(body, "upstream connect error"):
			failed++
			lastFailure = time.Since(killedAt)
		case status != 200:
			t.Fatalf("request %d after the kill = %d %q", i, status, body)
		case rep == f.replicas[victim].Name():
			t.Fatalf("request %d after the kill was answered by the killed replica", i)
		}
	}
	// The stream on the replica that stayed up still flows.
	if _, err := stream.Body.Read(make([]byte, 512)); err != nil {
		t.Errorf("the stream on %s after the kill: %v", busy, err)
	}
	if failed == 0 || failed > passiveFailures {
		t.Errorf("%d requests failed after the kill, want 1 to passive_failures = %d (the plugin's choice was the killed replica)", failed, passiveFailures)
	}
	ej, _ := f.gw.Host().Metric("gpuroute_passive_ejections_total")
	t.Logf("%d requests failed after the kill, the last %v after it; passive ejections %d", failed, lastFailure.Round(time.Millisecond), ej.Value)
}

// TestRefusedConfigurationChangesNothing: a configuration the plugin
// refuses (a bad address) leaves every metrics cluster where the serving
// configuration has it.
func TestRefusedConfigurationChangesNothing(t *testing.T) {
	f := startFleet(t, 1, nil, ConfigOptions{TickMillis: 1000}, Options{})
	cluster := "a" + MetricsClusterSuffix
	before := f.gw.clusters[cluster]
	bad := []byte(`{"replicas":[{"name":"a","address":"not-an-address","metrics_cluster":"` + cluster + `"},` +
		`{"name":"b","address":"127.0.0.1:1","metrics_cluster":"b-new-metrics"}]}`)
	if err := f.gw.Reconfigure(bad); err == nil {
		t.Fatal("Reconfigure(bad address) = nil, want the plugin's refusal")
	}
	if got := f.gw.clusters[cluster]; got != before {
		t.Errorf("cluster %s after a refused configuration = %q, want %q", cluster, got, before)
	}
	if _, ok := f.gw.clusters["b-new-metrics"]; ok {
		t.Error("a refused configuration left its new cluster registered")
	}
	if status, body, _ := f.complete(t, "still serving"); status != 200 {
		t.Errorf("after a refused configuration: %d %q, want 200", status, body)
	}
}

// TestReloadAfterRefusal: a refused file, then the good file again (the
// same bytes as the one serving), is applied.
func TestReloadAfterRefusal(t *testing.T) {
	f := startFleet(t, 1, nil, ConfigOptions{TickMillis: 1000}, Options{})
	path := filepath.Join(t.TempDir(), "plugin.json")
	good := f.gw.lastCfg
	write := func(b []byte) {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(good)
	if err := f.gw.ReloadFile(path, false); err != nil {
		t.Fatal(err)
	}
	gen := f.gw.Generation()
	write([]byte(`{"replicas":[],"tick_ms":-1}`))
	if err := f.gw.ReloadFile(path, false); err == nil {
		t.Fatal("ReloadFile(refused) = nil, want the plugin's refusal")
	}
	write(good)
	if err := f.gw.ReloadFile(path, false); err != nil {
		t.Fatalf("ReloadFile(the good file again) = %v", err)
	}
	if got := f.gw.Generation(); got != gen+1 {
		t.Errorf("Generation() after restoring the good file = %d, want %d (applied)", got, gen+1)
	}
	if err := f.gw.ReloadFile(path, false); err != nil || f.gw.Generation() != gen+1 {
		t.Errorf("ReloadFile(unchanged) = %v, generation %d; want nil and %d (skipped)", err, f.gw.Generation(), gen+1)
	}
}

// TestFleetPage: the gateway serves the page and its data itself (the
// plugin never sees them); FleetPath "-" turns them off.
func TestFleetPage(t *testing.T) {
	f := startFleet(t, 1, nil, ConfigOptions{TickMillis: 1000, StatusPath: "/gpuroute/status"}, Options{})
	f.complete(t, "one decision")
	resp, err := http.Get(f.url + DefaultFleetPath)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || !bytes.Contains(page, []byte(`<table id="replicas">`)) {
		t.Fatalf("GET %s = %d %s, %d bytes; want the fleet page", DefaultFleetPath, resp.StatusCode, resp.Header.Get("Content-Type"), len(page))
	}
	resp, err = http.Get(f.url + DefaultFleetPath + "/stats.json")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		StatusPath string `json:"status_path"`
		Stats      []struct {
			Name  string `json:"name"`
			Value int64  `json:"value"`
		} `json:"stats"`
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || st.StatusPath != "/gpuroute/status" || len(st.Stats) == 0 {
		t.Fatalf("stats.json = %+v (%v), want the status path and the plugin's stats", st, err)
	}
	if n := len(f.replicas[0].Requests()); n != 1 {
		t.Errorf("the replica saw %d requests, want 1: the page's requests must not reach it", n)
	}
	g := startFleet(t, 1, nil, ConfigOptions{TickMillis: 1000}, Options{FleetPath: "-"})
	resp, err = http.Get(g.url + DefaultFleetPath)
	if err != nil {
		t.Fatal(err)
	}
	page, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if bytes.Contains(page, []byte(`<table id="replicas">`)) {
		t.Errorf("with FleetPath \"-\" GET %s still served the fleet page", DefaultFleetPath)
	}
}
