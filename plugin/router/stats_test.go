package router

import "testing"

// TestStatName: a replica name becomes one segment of a stat name.
func TestStatName(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{name: "kubernetes pod", in: "vllm-0", want: "vllm-0"},
		{name: "dotted", in: "vllm-0.vllm.svc", want: "vllm-0_vllm_svc"},
		{name: "underscore", in: "a_b", want: "a_b"},
		{name: "space and unicode", in: "gpu nœud", want: "gpu_n__ud"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := statName(tc.in); got != tc.want {
				t.Errorf("statName(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestVersionNumber: a release encodes as MAJOR×10⁶ + MINOR×10³ + PATCH.
func TestVersionNumber(t *testing.T) {
	tests := []struct {
		name, in string
		want     uint64
	}{
		{name: "release", in: "1.2.3", want: 1_002_003},
		{name: "pre-release", in: "0.2.0-dev", want: 2_000},
		{name: "build", in: "0.10.1+sha", want: 10_001},
		{name: "short", in: "3", want: 3_000_000},
		{name: "garbage", in: "x", want: 0},
		{name: "part bounded", in: "1.2000.3", want: 1_999_003},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := versionNumber(tc.in); got != tc.want {
				t.Errorf("versionNumber(%q) = %d, want %d", tc.in, got, tc.want)
			}
		})
	}
}
