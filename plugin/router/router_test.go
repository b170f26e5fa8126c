package router

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// Configurations used across tests.
const (
	cfgTwo = `{"replicas":[` +
		`{"name":"vllm-0","address":"10.0.0.1:8000","metrics_cluster":"vllm-0-metrics","engine":"vllm","hardware":"h100","state":"active"},` +
		`{"name":"vllm-1","address":"10.0.0.2:8000"}],"tick_ms":250}`
	cfgOther = `{"replicas":[{"name":"sglang-0","address":"10.0.1.1:30000","engine":"sglang"}]}`
	cfgMixed = `{"replicas":[` +
		`{"name":"a","address":"10.0.0.1:8000"},` +
		`{"name":"b","address":"10.0.0.2:8000","state":"draining","drain_deadline_ms":1767225600000},` +
		`{"name":"c","address":"10.0.0.3:8000"},` +
		`{"name":"d","address":"10.0.0.4:8000","state":"drained"}]}`
	cfgNone = `{"replicas":[` +
		`{"name":"b","address":"10.0.0.2:8000","state":"draining"},` +
		`{"name":"d","address":"10.0.0.4:8000","state":"drained"}]}`
)

var baseRequest = [][2]string{
	{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "gateway"},
	{"content-type", "application/json"},
}

// destinations returns every value of HeaderDestination in hdrs (any case).
func destinations(hdrs [][2]string) []string {
	var out []string
	for _, h := range hdrs {
		if strings.EqualFold(h[0], HeaderDestination) {
			out = append(out, h[1])
		}
	}
	return out
}

// route sends one base request and returns its single destination.
func route(t *testing.T, d driver) string {
	t.Helper()
	got, action, local := d.request(baseRequest)
	dst := destinations(got)
	if action != types.ActionContinue || local != nil || len(dst) != 1 {
		t.Fatalf("request() = headers %q, action %v, local %+v; want one destination, Continue, no local reply", got, action, local)
	}
	return dst[0]
}

func TestConfigure(t *testing.T) {
	tests := []struct {
		name    string
		cfg     string
		ok      bool
		wantLog string // substring of an error log line when refused
	}{
		{name: "accepted", cfg: cfgTwo, ok: true},
		{name: "bad address", cfg: `{"replicas":[{"name":"a","address":"10.0.0.1:1"},{"name":"b","address":"10.0.0.2:1"},{"name":"c","address":"10.0.0.1"}]}`,
			wantLog: `config: replicas[2].address "10.0.0.1" is not ip:port`},
		{name: "unknown key", cfg: `{"replicas":[{"name":"a","address":"10.0.0.1:1"}],"tick":1}`,
			wantLog: `config: unknown key "tick"`},
		{name: "not json", cfg: `replicas: []`, wantLog: `config: want a JSON object`},
		{name: "empty", cfg: ``, wantLog: `config: want a JSON object`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			eachLeg(t, func(t *testing.T, d driver) {
				if got := d.configure(tc.cfg); got != tc.ok {
					t.Fatalf("configure(%s) = %v, want %v", tc.cfg, got, tc.ok)
				}
				if tc.ok {
					if p := d.tickPeriodMillis(); p != 250 {
						t.Errorf("tick period after configure(%s) = %d ms, want 250", tc.cfg, p)
					}
					return
				}
				logs := d.errorLogs()
				for _, l := range logs {
					if strings.Contains(l, tc.wantLog) {
						return
					}
				}
				t.Errorf("error logs after configure(%s) = %q, want a line containing %q", tc.cfg, logs, tc.wantLog)
			})
		})
	}
}

func TestReconfigure(t *testing.T) {
	eachLeg(t, func(t *testing.T, d driver) {
		if !d.configure(cfgOther) {
			t.Fatalf("configure(cfgOther) = false, want true")
		}
		if got := route(t, d); got != "10.0.1.1:30000" {
			t.Fatalf("destination under cfgOther = %q, want 10.0.1.1:30000", got)
		}
		if d.configure(`{"replicas":[{"name":"x","address":"nowhere"}]}`) {
			t.Fatalf("configure(bad address) = true, want false")
		}
		if got := route(t, d); got != "10.0.1.1:30000" {
			t.Errorf("destination after a refused reconfigure = %q, want the previous root's 10.0.1.1:30000", got)
		}
		if !d.configure(cfgTwo) {
			t.Fatalf("configure(cfgTwo) = false, want true")
		}
		if a, b := route(t, d), route(t, d); a != "10.0.0.1:8000" || b != "10.0.0.2:8000" {
			t.Errorf("destinations after reconfigure = %q, %q; want 10.0.0.1:8000, 10.0.0.2:8000", a, b)
		}
	})
}

func TestRoundRobinSkipsInactive(t *testing.T) {
	eachLeg(t, func(t *testing.T, d driver) {
		if !d.configure(cfgMixed) {
			t.Fatalf("configure(cfgMixed) = false, want true")
		}
		want := []string{"10.0.0.1:8000", "10.0.0.3:8000", "10.0.0.1:8000", "10.0.0.3:8000", "10.0.0.1:8000"}
		for i, w := range want {
			if got := route(t, d); got != w {
				t.Errorf("request %d destination = %q, want %q", i, got, w)
			}
		}
		if n, ok := d.counter(MetricDecisionsRouted); !ok || n != uint64(len(want)) {
			t.Errorf("counter %s = %d, %v; want %d", MetricDecisionsRouted, n, ok, len(want))
		}
	})
}

func TestClientDestinationReplaced(t *testing.T) {
	const evil = "169.254.169.254:80"
	tests := []struct {
		name  string
		extra [][2]string
	}{
		{name: "absent"},
		{name: "lowercase", extra: [][2]string{{"x-gateway-destination-endpoint", evil}}},
		{name: "mixed case", extra: [][2]string{{"X-Gateway-Destination-Endpoint", evil}}},
		{name: "repeated", extra: [][2]string{{"x-gateway-destination-endpoint", evil}, {"x-other", "1"}, {"x-gateway-destination-endpoint", evil}, {"X-GATEWAY-DESTINATION-ENDPOINT", "10.9.9.9:1"}}},
		{name: "list value", extra: [][2]string{{"x-gateway-destination-endpoint", evil + "," + evil}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			eachLeg(t, func(t *testing.T, d driver) {
				if !d.configure(cfgOther) {
					t.Fatalf("configure(cfgOther) = false, want true")
				}
				in := append(append([][2]string(nil), baseRequest...), tc.extra...)
				got, action, local := d.request(in)
				dst := destinations(got)
				if action != types.ActionContinue || local != nil || len(dst) != 1 || dst[0] != "10.0.1.1:30000" {
					t.Errorf("request(%q) = destinations %q, action %v, local %+v; want exactly [10.0.1.1:30000], Continue", in, dst, action, local)
				}
			})
		})
	}
}

func TestNoEligibleReplica(t *testing.T) {
	eachLeg(t, func(t *testing.T, d driver) {
		if !d.configure(cfgNone) {
			t.Fatalf("configure(cfgNone) = false, want true")
		}
		in := append(append([][2]string(nil), baseRequest...), [2]string{HeaderDestination, "10.9.9.9:1"})
		_, action, local := d.request(in)
		if action != types.ActionPause || local == nil || local.status != 503 {
			t.Fatalf("request with no eligible replica = action %v, local %+v; want Pause and a 503", action, local)
		}
		var body struct {
			Error struct {
				Message string `json:"message"`
				Type    string `json:"type"`
				Code    int    `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(local.body), &body); err != nil {
			t.Fatalf("503 body %q is not JSON: %v", local.body, err)
		}
		if body.Error.Type != "service_unavailable" || body.Error.Code != 503 || body.Error.Message == "" {
			t.Errorf("503 body = %+v, want type service_unavailable, code 503, a message", body.Error)
		}
		ct := ""
		for _, h := range local.headers {
			if strings.EqualFold(h[0], "content-type") {
				ct = h[1]
			}
		}
		if ct != "application/json" {
			t.Errorf("503 content-type = %q, want application/json", ct)
		}
		if n, ok := d.counter(MetricDecisionsUnavailable); !ok || n != 1 {
			t.Errorf("counter %s = %d, %v; want 1", MetricDecisionsUnavailable, n, ok)
		}
	})
}

func TestTickPublishesSharedData(t *testing.T) {
	eachLeg(t, func(t *testing.T, d driver) {
		if !d.configure(cfgTwo) {
			t.Fatalf("configure(cfgTwo) = false, want true")
		}
		if _, _, ok := d.sharedData(SharedKeyTick); ok {
			t.Fatalf("shared data %q present before any tick", SharedKeyTick)
		}
		var lastCAS uint32
		for i := uint64(1); i <= 3; i++ {
			d.tick()
			v, cas, ok := d.sharedData(SharedKeyTick)
			_, ticks, valid := DecodeTick(v)
			if !ok || !valid || ticks != i {
				t.Fatalf("after tick %d shared data = %v (ok %v), decoded ticks %d (valid %v); want %d", i, v, ok, ticks, valid, i)
			}
			if cas == lastCAS {
				t.Errorf("after tick %d CAS = %d, unchanged; want a new CAS per write", i, cas)
			}
			lastCAS = cas
		}
	})
}

func TestDecodeTick(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		ok   bool
	}{
		{name: "valid", in: []byte{1, 7, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0}, ok: true},
		{name: "short", in: []byte{1, 7}, ok: false},
		{name: "wrong version", in: []byte{2, 7, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0}, ok: false},
		{name: "empty", in: nil, ok: false},
	}
	for _, tc := range tests {
		root, ticks, ok := DecodeTick(tc.in)
		if ok != tc.ok || (ok && (root != 7 || ticks != 3)) {
			t.Errorf("DecodeTick(%v) = %d, %d, %v; want ok %v", tc.in, root, ticks, ok, tc.ok)
		}
	}
}
