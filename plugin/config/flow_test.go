package config

import (
	"strings"
	"testing"
)

const oneReplica = `"replicas":[{"name":"a","address":"10.0.0.1:8000"}]`

func TestFlowControlDefaults(t *testing.T) {
	cfg, err := Parse([]byte(`{` + oneReplica + `}`))
	if err != nil {
		t.Fatal(err)
	}
	f := cfg.Flow
	if !f.Enabled || f.HoldWaitSec != DefaultHoldWaitMillis/1000.0 || len(f.Bands) != 1 || f.Bands[0].Name != DefaultBandName ||
		f.Bands[0].MaxQueueSec != 30 || f.MaxHeld != DefaultMaxHeld || f.PriorityHeader != DefaultPriorityHeader || f.TenantHeader != "" {
		t.Fatalf("default flow control = %+v, want on, 1 s, one band %q of 30 s, %d held, no tenant header", f, DefaultBandName, DefaultMaxHeld)
	}
}

func TestFlowControlBands(t *testing.T) {
	cfg, err := Parse([]byte(`{` + oneReplica + `,"flow_control":{"hold_wait_ms":500,"max_queue_ms":20000,
		"tenant_header":"x-tenant","bands":[{"name":"critical","max_held":50,"max_queue_ms":60000,"from_header":true},
		{"name":"standard"},{"name":"sheddable","sheddable":true,"from_header":true,"hold_wait_ms":200}],
		"model_bands":{"sql-lora":"critical"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	f := cfg.Flow
	if f.HoldWaitSec != 0.5 || f.TenantHeader != "x-tenant" || f.DefaultBand != 1 || f.ModelBands["sql-lora"] != 0 {
		t.Fatalf("flow control = %+v", f)
	}
	want := []Band{{Name: "critical", MaxHeld: 50, MaxQueueSec: 60, FromHeader: true, HoldWaitSec: 0.5}, {Name: "standard", MaxQueueSec: 20, HoldWaitSec: 0.5},
		{Name: "sheddable", MaxQueueSec: 20, Sheddable: true, FromHeader: true, HoldWaitSec: 0.2}}
	for i := range want {
		if f.Bands[i] != want[i] {
			t.Fatalf("bands[%d] = %+v, want %+v", i, f.Bands[i], want[i])
		}
	}
	qc := f.QueueConfig()
	if qc.Bands[0].MaxWaitNanos != 60e9 || qc.Bands[0].MaxHeld != 50 || qc.MaxHeld != DefaultMaxHeld {
		t.Fatalf("QueueConfig() = %+v", qc)
	}
}

func TestFlowControlRefused(t *testing.T) {
	for _, tc := range []struct {
		name, flow, want string
	}{
		{"not an object", `[]`, "flow_control must be an object"},
		{"unknown key", `{"hold_ms":1}`, `unknown key "hold_ms"`},
		{"duplicate key", `{"max_held":1,"max_held":2}`, `duplicate key "max_held"`},
		{"bad bool", `{"enabled":"yes"}`, "flow_control.enabled must be true or false"},
		{"negative wait", `{"hold_wait_ms":-1}`, "flow_control.hold_wait_ms must be in [0, 3600000], got -1"},
		{"header with capitals", `{"tenant_header":"X-Tenant"}`, `"X-Tenant" must be a lowercase header name`},
		{"pseudo-header", `{"priority_header":":path"}`, "must be a lowercase header name"},
		{"no bands", `{"bands":[]}`, "bands must list at least one band"},
		{"band without name", `{"bands":[{"max_held":3}]}`, "bands[0] needs a name"},
		{"duplicate band", `{"bands":[{"name":"a"},{"name":"a"}],"default_band":"a"}`, `duplicate band name "a"`},
		{"unknown band key", `{"bands":[{"name":"a","weight":2}]}`, `bands[0]: unknown key "weight"`},
		{"default band unknown", `{"default_band":"gold"}`, `default_band "gold" names no band`},
		{"several bands, no default", `{"bands":[{"name":"hi"},{"name":"lo"}]}`, "none named \"standard\": set default_band"},
		{"model band unknown", `{"model_bands":{"m":"gold"}}`, `model_bands.m: "gold" names no band`},
		{"band bound over total", `{"max_held":10,"bands":[{"name":"standard","max_held":20}]}`, "exceeds flow_control.max_held 10"},
		{"too many bands", `{"bands":[` + manyBands(16) + `{"name":"standard"}]}`, "more than 16 bands"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(`{` + oneReplica + `,"flow_control":` + tc.flow + `}`))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse(flow_control %s) = %v, want an error containing %q", tc.flow, err, tc.want)
			}
		})
	}
}

func manyBands(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(`{"name":"b` + string(rune('a'+i)) + `"},`)
	}
	return b.String()
}
