package scoring

// Hardware is the cost model of one GPU class serving one model: how long a
// prefill of x uncached tokens takes, how long one decode step takes for a
// batch, and how long an adapter load takes from each tier. All durations
// are in seconds (float64) because the decision sums and compares them.
//
// The zero value is not useful (every cost is zero, so every replica looks
// idle); start from [NewProfile], [LookupHardware] or [DefaultHardware] and
// override. LookupHardware's profiles model the reference model (an 8B dense
// model, Llama-3-8B class, in BF16) on one GPU; NewProfile scales them to
// another model and tensor-parallel degree, and the online [Calibrator]
// corrects the prefill cost of a real replica.
type Hardware struct {
	// Name is the GPU class's lowercase identifier ("h100", "a100", ...).
	Name string

	// PrefillFixedSec is the per-prefill overhead at batch 1: scheduling,
	// kernel launches, the first forward pass's fixed part.
	PrefillFixedSec float64
	// PrefillSecPerToken is the linear per-token cost of prefill (the
	// weight GEMMs: about 2 × parameters FLOPs per token).
	PrefillSecPerToken float64
	// PrefillSecPerToken2 is the quadratic attention term: seconds per
	// token² (causal attention does about n²/2 query-key pairs).
	PrefillSecPerToken2 float64

	// DecodeStepSec is the duration of one decode step at batch 1 (the
	// inter-token latency of a lone request: weights read once per step).
	DecodeStepSec float64
	// DecodeStepSecPerSeq is the marginal step time per extra sequence in
	// the batch (its KV reads and its share of compute). It is how running
	// decodes enter W(r): they lengthen each step a new prefill shares with
	// them by this much per sequence (see Pick), they do not queue ahead.
	DecodeStepSecPerSeq float64

	// AdapterLoadHostSec is the time to bring a LoRA adapter from host
	// memory (CPU LoRA cache) to GPU memory.
	AdapterLoadHostSec float64
	// AdapterLoadStorageSec is the time to load a LoRA adapter from local
	// disk or object storage.
	AdapterLoadStorageSec float64

	// KVCapacityTokens is the default number of tokens of KV cache the GPU
	// holds after weights (used when the replica does not report it).
	KVCapacityTokens int
}

// PrefillSeconds returns the time to prefill tokens uncached tokens:
// fixed + linear + quadratic. Zero or negative tokens cost nothing (a fully
// cached prompt still pays the fixed cost through its last token, which the
// server always recomputes, so callers pass at least 1 for a real request).
func (h *Hardware) PrefillSeconds(tokens int) float64 {
	if tokens <= 0 {
		return 0
	}
	return prefillSec(h, float64(tokens))
}

// DecodeStepSeconds returns the duration of one decode step with batch
// sequences in the batch: DecodeStepSec for the first, DecodeStepSecPerSeq
// for each further one. A batch below 1 is treated as 1.
func (h *Hardware) DecodeStepSeconds(batch int) float64 {
	if batch < 1 {
		batch = 1
	}
	return h.DecodeStepSec + h.DecodeStepSecPerSeq*float64(batch-1)
}

// GPU class names (LookupHardware, NewProfile).
const (
	HardwareB200   = "b200"
	HardwareMI300X = "mi300x"
	HardwareH200   = "h200"
	HardwareH100   = "h100"
	HardwareA100   = "a100"
	HardwareL40S   = "l40s"
	HardwareL4     = "l4"
)

// defaultProfiles returns the reference profiles of the GPU classes with
// published batch-1 figures: the reference model (an 8B BF16 model) on one
// GPU. The other classes' derive from the H100's (gpuClasses).
//
// Sources and reasoning (figures, not code, taken from these):
//   - Prefill at batch 1 on H100: ~30 ms overhead + 0.15–0.30 ms/token; A100
//     about 2×, L40S about 4× (llm-d-inference-sim docs/latency-profiles.md).
//     We take the low end of the H100 range (0.15 ms) because vLLM's chunked
//     prefill batches long prompts; the calibrator corrects a real fleet.
//   - Decode inter-token latency for 8B: H100 10–15 ms, A100 15–25 ms at
//     batch 1 (same source). L40S (864 GB/s) and L4 (300 GB/s) scale from
//     the memory bandwidth ratio to H100 SXM (3.35 TB/s) and A100 (2.0 TB/s)
//     because a batch-1 decode step reads all 16 GB of weights.
//   - Quadratic term: attention over n²/2 query-key pairs costs about
//     2·layers·d_model FLOPs per pair (32 × 4096 for Llama-3-8B) against
//     2·8e9 FLOPs per token for the weights, i.e. ~1.6e-5 of the per-token
//     cost per token of context. It is 15% of prefill at 10k tokens, which
//     matches the published Qwen3-32B 10k-token TTFT of 4.3 s cold vs 0.6 s
//     warm (llm-d talks) being slightly worse than linear.
//   - L4 dense BF16 is 121 TFLOPS vs 989 on H100 SXM (NVIDIA datasheets),
//     so ~8× on prefill.
//   - KV per token for Llama-3-8B is 128 KiB; after 16 GB of weights and
//     vLLM's 0.9 gpu_memory_utilization an 80 GB GPU holds ~400k tokens,
//     48 GB (L40S) ~200k, 24 GB (L4) ~40k.
//   - LoRA loads: host memory → GPU a few ms to tens of ms; disk or object
//     storage 0.5–3 s (docs/design.md "LoRA adapters"). PCIe Gen4 parts (A100, L40S, L4) get
//     the slower host figure.
//   - Per-sequence decode step growth: each extra sequence reads its own KV
//     (~1k tokens × 128 KiB = 128 MB) per step: 0.04 ms on H100 at 3.35 TB/s,
//     rounded up for compute; scaled by bandwidth for the others.
func defaultProfiles() [4]Hardware {
	return [4]Hardware{
		{
			Name:                  HardwareH100,
			PrefillFixedSec:       0.030,
			PrefillSecPerToken:    0.15e-3,
			PrefillSecPerToken2:   2.5e-9,
			DecodeStepSec:         0.012,
			DecodeStepSecPerSeq:   0.06e-3,
			AdapterLoadHostSec:    0.015,
			AdapterLoadStorageSec: 1.5,
			KVCapacityTokens:      400_000,
		},
		{
			Name:                  HardwareA100,
			PrefillFixedSec:       0.040,
			PrefillSecPerToken:    0.30e-3,
			PrefillSecPerToken2:   5e-9,
			DecodeStepSec:         0.020,
			DecodeStepSecPerSeq:   0.10e-3,
			AdapterLoadHostSec:    0.025,
			AdapterLoadStorageSec: 1.5,
			KVCapacityTokens:      400_000,
		},
		{
			Name:                  HardwareL40S,
			PrefillFixedSec:       0.050,
			PrefillSecPerToken:    0.60e-3,
			PrefillSecPerToken2:   1e-8,
			DecodeStepSec:         0.030,
			DecodeStepSecPerSeq:   0.25e-3,
			AdapterLoadHostSec:    0.025,
			AdapterLoadStorageSec: 2.0,
			KVCapacityTokens:      200_000,
		},
		{
			Name:                  HardwareL4,
			PrefillFixedSec:       0.060,
			PrefillSecPerToken:    1.2e-3,
			PrefillSecPerToken2:   2e-8,
			DecodeStepSec:         0.065,
			DecodeStepSecPerSeq:   0.70e-3,
			AdapterLoadHostSec:    0.030,
			AdapterLoadStorageSec: 2.5,
			KVCapacityTokens:      40_000,
		},
	}
}

// LookupHardware returns the reference profile of the GPU class named name
// (case-insensitive: "H100", "h100"): ReferenceModel on one GPU; false if
// there is no such class.
func LookupHardware(name string) (Hardware, bool) {
	g, ok := lookupGPU(name)
	return g.ref, ok
}

// HardwareNames returns the names of the GPU classes, fastest first.
func HardwareNames() []string {
	gs := gpuClasses()
	out := make([]string, len(gs))
	for i := range gs {
		out[i] = gs[i].ref.Name
	}
	return out
}

// DefaultHardware returns the H100 reference profile, used for a replica
// whose hardware is unknown.
func DefaultHardware() Hardware { return defaultProfiles()[0] }
