package scoring

import (
	"math"
	"testing"
)

func TestLookupHardware(t *testing.T) {
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{name: "lower", in: "h100", ok: true},
		{name: "upper", in: "A100", ok: true},
		{name: "mixed", in: "L40s", ok: true},
		{name: "l4", in: "l4", ok: true},
		{name: "h200", in: "H200", ok: true},
		{name: "b200", in: "b200", ok: true},
		{name: "mi300x", in: "MI300X", ok: true},
		{name: "typo", in: "h999", ok: false},
		{name: "unknown", in: "tpu", ok: false},
		{name: "empty", in: "", ok: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, ok := LookupHardware(tt.in)
			if ok != tt.ok {
				t.Fatalf("LookupHardware(%q) ok = %v, want %v", tt.in, ok, tt.ok)
			}
			if ok && h.PrefillSecPerToken <= 0 {
				t.Fatalf("LookupHardware(%q).PrefillSecPerToken = %v, want > 0", tt.in, h.PrefillSecPerToken)
			}
		})
	}
}

// TestHardwareAnchors holds the defaults to the published anchors that
// defaultProfiles cites.
func TestHardwareAnchors(t *testing.T) {
	h100, _ := LookupHardware(HardwareH100)
	tests := []struct {
		name     string
		got      float64
		min, max float64
	}{
		{name: "h100 1 token prefill ~30ms", got: h100.PrefillSeconds(1), min: 0.025, max: 0.035},
		{name: "h100 10k prefill s", got: h100.PrefillSeconds(10_000), min: 1.0, max: 4.5},
		{name: "h100 decode step s", got: h100.DecodeStepSeconds(1), min: 0.010, max: 0.015},
		{name: "a100 / h100 prefill", got: ratio(HardwareA100, 2000), min: 1.7, max: 2.3},
		{name: "l40s / h100 prefill", got: ratio(HardwareL40S, 2000), min: 3.3, max: 4.7},
		{name: "l4 / h100 prefill", got: ratio(HardwareL4, 2000), min: 6, max: 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got < tt.min || tt.got > tt.max || math.IsNaN(tt.got) {
				t.Fatalf("%s = %v, want in [%v, %v]", tt.name, tt.got, tt.min, tt.max)
			}
		})
	}
	for _, n := range HardwareNames() {
		h, _ := LookupHardware(n)
		if h.DecodeStepSeconds(64) <= h.DecodeStepSeconds(1) {
			t.Errorf("%s DecodeStepSeconds(64) = %v, want > DecodeStepSeconds(1) = %v", n, h.DecodeStepSeconds(64), h.DecodeStepSeconds(1))
		}
		if h.AdapterLoadStorageSec <= h.AdapterLoadHostSec {
			t.Errorf("%s AdapterLoadStorageSec = %v, want > AdapterLoadHostSec %v", n, h.AdapterLoadStorageSec, h.AdapterLoadHostSec)
		}
	}
}

func ratio(name string, tokens int) float64 {
	h, _ := LookupHardware(name)
	b, _ := LookupHardware(HardwareH100)
	return h.PrefillSeconds(tokens) / b.PrefillSeconds(tokens)
}
