package scoring

import (
	"math"
	"testing"
)

func shape(t *testing.T, name string) ModelShape {
	t.Helper()
	m, ok := LookupModelShape(name)
	if !ok {
		t.Fatalf("LookupModelShape(%q) = false, want a built-in shape", name)
	}
	return m
}

func profile(t *testing.T, hw, model string, tp int) Hardware {
	t.Helper()
	h, err := NewProfile(hw, shape(t, model), tp)
	if err != nil {
		t.Fatalf("NewProfile(%q, %q, %d) error %v", hw, model, tp, err)
	}
	return h
}

// TestProfileReferenceUnchanged: the reference model on one GPU is each
// class's reference profile to the bit, so configurations that name only
// the hardware, as every configuration did before model shapes, price
// exactly as they did.
func TestProfileReferenceUnchanged(t *testing.T) {
	for _, name := range HardwareNames() {
		want, ok := LookupHardware(name)
		if got := profile(t, name, ReferenceModel, 1); !ok || got != want {
			t.Errorf("NewProfile(%q, %q, 1) = %+v, want LookupHardware's %+v", name, ReferenceModel, got, want)
		}
	}
	if h, _ := LookupHardware(HardwareH100); h != DefaultHardware() {
		t.Errorf("LookupHardware(h100) = %+v, want DefaultHardware() %+v", h, DefaultHardware())
	}
}

// TestProfileEfficiency bounds what each class's reference profile implies
// it achieves of its datasheet: the reference model's FLOPs per token over
// peak dense BF16 FLOPs × the per-token prefill time, and its weight bytes
// over memory bandwidth × the batch-1 decode step. A datasheet typo (a
// sparsity figure for a dense one, GB/s for TB/s) falls outside.
func TestProfileEfficiency(t *testing.T) {
	ref := referenceShape()
	for _, g := range gpuClasses() {
		prefill := 2 * ref.activeParams() / (g.denseTFLOPS * 1e12 * g.ref.PrefillSecPerToken)
		decode := ref.weightBytes() / (g.memoryTBps * 1e12 * g.ref.DecodeStepSec)
		if !(prefill >= 0.05 && prefill <= 0.6) || !(decode >= 0.3 && decode <= 0.9) {
			t.Errorf("%s: prefill efficiency %.3f, decode %.3f; want in [0.05, 0.6] and [0.3, 0.9]", g.ref.Name, prefill, decode)
		}
	}
}

// TestProfileDerivedClasses: the classes without published batch-1 figures
// are the H100 reference scaled by their datasheets: compute by dense BF16
// FLOPs, memory-bound terms by bandwidth, and a KV cache as large as the
// memory the reference weights leave.
func TestProfileDerivedClasses(t *testing.T) {
	h100 := DefaultHardware()
	tests := []struct {
		name                string
		tflops, tbps, memGB float64
	}{
		{name: HardwareH200, tflops: 989, tbps: 4.8, memGB: 141},
		{name: HardwareB200, tflops: 2250, tbps: 8, memGB: 180},
		{name: HardwareMI300X, tflops: 1307.4, tbps: 5.3, memGB: 192},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, ok := LookupHardware(tt.name)
			if !ok {
				t.Fatalf("LookupHardware(%q) = false", tt.name)
			}
			w := 2 * 8.03e9
			checks := []struct {
				what           string
				got, want, tol float64
			}{
				{"prefill per token", h.PrefillSecPerToken, h100.PrefillSecPerToken * 989 / tt.tflops, 0},
				{"attention", h.PrefillSecPerToken2, h100.PrefillSecPerToken2 * 989 / tt.tflops, 0},
				{"decode step", h.DecodeStepSec, h100.DecodeStepSec * 3.35 / tt.tbps, 0},
				{"per sequence", h.DecodeStepSecPerSeq, h100.DecodeStepSecPerSeq * 3.35 / tt.tbps, 0},
				{"prefill fixed", h.PrefillFixedSec, h100.PrefillFixedSec * 3.35 / tt.tbps, 0},
				{"kv tokens", float64(h.KVCapacityTokens), float64(h100.KVCapacityTokens) * (0.9*tt.memGB*1e9 - w) / (0.9*80e9 - w), 1},
				{"host load", h.AdapterLoadHostSec, h100.AdapterLoadHostSec, 0},
			}
			for _, c := range checks {
				if math.Abs(c.got-c.want) > c.tol+1e-12*c.want {
					t.Errorf("%s %s = %v, want %v", tt.name, c.what, c.got, c.want)
				}
			}
		})
	}
}

// TestProfileScaling: a profile scales the reference as the roofline says:
// compute and batch-1 weight reads with the active parameters over TP,
// attention with layers × heads × head_dim over TP, per-sequence reads
// with the KV bytes each GPU holds, TP's all-reduces through the peer
// links, and KV capacity from the memory the weights leave.
func TestProfileScaling(t *testing.T) {
	h100 := DefaultHardware()
	h100g, _ := lookupGPU(HardwareH100)
	near := func(got, want float64) bool { return math.Abs(got-want) <= 1e-12*math.Abs(want) }
	// One token's all-reduces on 4 H100s for a 70B model: 2 per layer of
	// 8,192 BF16 values, 2·3/4 of them through 450 GB/s.
	comm70 := 2 * 80 * 8192 * 2 * 1.5 / 450e9
	tests := []struct {
		name      string
		got, want float64
	}{
		{name: "70b tp1 prefill per token (b200)", got: profile(t, HardwareB200, ModelLlama3x70B, 1).PrefillSecPerToken,
			want: profile(t, HardwareB200, ReferenceModel, 1).PrefillSecPerToken * 70.6 / 8.03},
		{name: "70b tp4 prefill per token", got: profile(t, HardwareH100, ModelLlama3x70B, 4).PrefillSecPerToken,
			want: h100.PrefillSecPerToken*70.6/8.03/4 + comm70},
		{name: "70b tp4 decode step", got: profile(t, HardwareH100, ModelLlama3x70B, 4).DecodeStepSec,
			want: h100.DecodeStepSec*70.6/8.03/4 + comm70},
		{name: "70b tp4 prefill fixed", got: profile(t, HardwareH100, ModelLlama3x70B, 4).PrefillFixedSec,
			want: h100.PrefillFixedSec * 70.6 / 8.03 / 4},
		{name: "70b tp4 attention", got: profile(t, HardwareH100, ModelLlama3x70B, 4).PrefillSecPerToken2,
			want: h100.PrefillSecPerToken2 * (80 * 64) / (32 * 32) / 4},
		{name: "70b tp4 per sequence", got: profile(t, HardwareH100, ModelLlama3x70B, 4).DecodeStepSecPerSeq,
			want: h100.DecodeStepSecPerSeq*(80.0/32)/4 + comm70},
		{name: "70b tp4 kv tokens", got: float64(profile(t, HardwareH100, ModelLlama3x70B, 4).KVCapacityTokens),
			want: math.Trunc(400_000 * (0.9*80e9 - 141.2e9/4) / (0.9*80e9 - 16.06e9) * (131072.0 / (327680.0 / 4)))},
		{name: "pcie all-reduce (8b tp2 l40s)", got: profile(t, HardwareL40S, ReferenceModel, 2).PrefillSecPerToken,
			want: 0.60e-3/2 + 2*32*4096*2*1.0/32e9},
		// A mixture of experts computes and reads with its active
		// parameters and stores all of them.
		{name: "moe prefill per token", got: profile(t, HardwareH100, ModelMixtral8x7B, 2).PrefillSecPerToken,
			want: h100.PrefillSecPerToken*12.9/8.03/2 + 2*32*4096*2*1.0/450e9},
		{name: "moe kv tokens", got: float64(profile(t, HardwareH100, ModelMixtral8x7B, 2).KVCapacityTokens),
			want: math.Trunc(400_000 * (0.9*80e9 - 93.4e9/2) / (0.9*80e9 - 16.06e9) * 2)},
		// Past its 4 KV heads, TP replicates them: each GPU reads and
		// stores as much KV per token at TP 8 as at TP 4.
		{name: "kv heads replicated", got: profile(t, HardwareH100, ModelQwen3x30BA3B, 8).DecodeStepSecPerSeq -
			allReduceSec(&h100g, shape(t, ModelQwen3x30BA3B), 8),
			want: profile(t, HardwareH100, ModelQwen3x30BA3B, 4).DecodeStepSecPerSeq -
				allReduceSec(&h100g, shape(t, ModelQwen3x30BA3B), 4)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !near(tt.got, tt.want) {
				t.Errorf("%s = %v, want %v", tt.name, tt.got, tt.want)
			}
		})
	}
}

// TestModelShapeKV holds the shapes to the KV bytes per token their
// configurations give: 2 (keys, values) × layers × KV heads × head_dim × 2
// bytes.
func TestModelShapeKV(t *testing.T) {
	tests := []struct {
		model string
		want  int
	}{
		{model: ModelLlama3x8B, want: 128 << 10},
		{model: ModelLlama3x70B, want: 320 << 10},
		{model: ModelLlama3x405B, want: 504 << 10},
		{model: ModelQwen3x32B, want: 256 << 10},
		{model: ModelQwen3x30BA3B, want: 96 << 10},
		{model: ModelMixtral8x7B, want: 128 << 10},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			m := shape(t, tt.model)
			if got := m.KVBytesPerToken(); got != tt.want {
				t.Errorf("%s.KVBytesPerToken() = %d, want %d", tt.model, got, tt.want)
			}
			if err := m.Validate(); err != nil {
				t.Errorf("%s.Validate() = %v, want nil", tt.model, err)
			}
		})
	}
	if _, ok := LookupModelShape("LLAMA-3-70B"); !ok {
		t.Errorf("LookupModelShape(%q) = false, want the case-insensitive match", "LLAMA-3-70B")
	}
}

func TestNewProfileRejects(t *testing.T) {
	llama70 := ModelShape{Name: "llama-3-70b", ParamsB: 70.6, Layers: 80, HiddenSize: 8192, AttentionHeads: 64, KVHeads: 8, HeadDim: 128}
	bad := llama70
	bad.Layers = 0
	moe := llama70
	moe.ActiveParamsB = 80
	tests := []struct {
		name     string
		hardware string
		model    ModelShape
		tp       int
		want     string
	}{
		{name: "unknown class", hardware: "h999", model: llama70, tp: 4,
			want: `scoring: hardware "h999" is not a known GPU class (b200, mi300x, h200, h100, a100, l40s, l4)`},
		{name: "tp zero", hardware: "h100", model: llama70, tp: 0, want: `scoring: tensor parallel degree must be in [1, 64], got 0`},
		{name: "tp too large", hardware: "h100", model: llama70, tp: 65, want: `scoring: tensor parallel degree must be in [1, 64], got 65`},
		{name: "no layers", hardware: "h100", model: bad, tp: 4, want: `scoring: model shape "llama-3-70b": layers must be in [1, 1024], got 0`},
		{name: "active above total", hardware: "h100", model: moe, tp: 4,
			want: `scoring: model shape "llama-3-70b": active parameters must be 0 or in (0, 70.6] billion, got 80`},
		{name: "does not fit", hardware: "l40s", model: llama70, tp: 1,
			want: `scoring: "llama-3-70b" (70.6B parameters, 141.2 GB in BF16) leaves no room for a KV cache on 1 × l40s (0.9 of 48 GB each)`},
		{name: "fits only on more gpus", hardware: "h100", model: llama70, tp: 1,
			want: `scoring: "llama-3-70b" (70.6B parameters, 141.2 GB in BF16) leaves no room for a KV cache on 1 × h100 (0.9 of 80 GB each)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := NewProfile(tt.hardware, tt.model, tt.tp)
			if err == nil || err.Error() != tt.want {
				t.Errorf("NewProfile(%q, %s, %d) = %+v, error %v; want error %q", tt.hardware, tt.model.Name, tt.tp, h, err, tt.want)
			}
		})
	}
}
