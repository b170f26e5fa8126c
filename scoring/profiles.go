package scoring

import (
	"errors"
	"strconv"
	"strings"
)

// A replica's cost profile is a function of three things: the GPU class, the
// model's shape and the tensor-parallel degree (NewProfile). Each GPU class
// has a reference profile, the reference model (ReferenceModel, Llama-3-8B
// class, BF16) on one GPU; every other profile scales it by the ratios the
// roofline gives:
//
//   - prefill per token ∝ FLOPs per token (2 × active parameters) / TP, plus
//     TP's all-reduces (2 per layer of hidden_size BF16 values per token,
//     ring all-reduce: 2(TP−1)/TP of them through the GPU's peer links);
//   - the attention term ∝ layers × attention heads × head_dim / TP;
//   - a decode step at batch 1, and a prefill's fixed part (a forward pass
//     that reads every weight once), ∝ active weight bytes / TP;
//   - each further sequence in a step ∝ its KV bytes read per GPU (KV heads
//     split over min(TP, KV heads) GPUs), plus one token's all-reduces;
//   - KV capacity = the memory vLLM's default gpu_memory_utilization (0.9)
//     leaves per GPU after its share of the weights, over the KV bytes per
//     token each GPU stores.
//
// A reference profile therefore carries its GPU's efficiencies, roofline
// time over what the GPU achieves (TestProfileEfficiency bounds them): for
// h100, a100, l40s and l4 it is the profile the router has always had, so
// NewProfile(g, reference model, TP 1) is exactly LookupHardware(g)
// (TestProfileReferenceUnchanged). h200, b200 and mi300x have no published
// batch-1 figures in the sources defaultProfiles cites: they take the H100's
// efficiencies, scaled by their datasheets' FLOPs (prefill) and memory
// bandwidth (decode), and the online Calibrator corrects prefill on a real
// fleet. Not modelled: FP8 or quantized weights (the shapes are BF16), the
// experts an MoE model's larger decode batches touch beyond the active
// ones, and all-reduce latency.

// ReferenceModel names the model shape the GPU classes' reference profiles
// describe (LookupHardware returns them).
const ReferenceModel = "llama-3-8b"

// MaxTensorParallel bounds the tensor-parallel degree NewProfile accepts:
// 8 GPUs per node, across at most 8 nodes.
const MaxTensorParallel = 64

// gpuMemoryUtilization is the share of GPU memory vLLM takes for weights,
// activations and KV cache (its --gpu-memory-utilization default, 0.9;
// docs.vllm.ai engine arguments).
const gpuMemoryUtilization = 0.9

// bytesPerParam is BF16's.
const bytesPerParam = 2

// gpuClass is one GPU class's datasheet figures and its reference profile.
type gpuClass struct {
	// ref is ReferenceModel's profile on one such GPU; ref.Name is the
	// class's name.
	ref Hardware
	// denseTFLOPS is peak dense BF16 tensor throughput (without 2:4
	// sparsity), memoryGB and memoryTBps the device memory (10⁹ bytes) and
	// its bandwidth (10¹² bytes/s), peerGBps the bandwidth to the node's
	// other GPUs in each direction (10⁹ bytes/s): NVLink through NVSwitch,
	// AMD Infinity Fabric across its fully connected mesh, or PCIe.
	denseTFLOPS, memoryGB, memoryTBps, peerGBps float64
}

// gpuClasses returns the GPU classes, fastest first. Datasheet figures:
//   - b200: NVIDIA HGX B200 (1,000 W), 2,250 TFLOPS dense BF16; DGX B200
//     datasheet, 1,440 GB of HBM3e at 64 TB/s for 8 GPUs (180 GB, 8 TB/s
//     each), NVLink 5 at 1.8 TB/s.
//   - mi300x: AMD Instinct MI300X datasheet, 1,307.4 TFLOPS dense BF16,
//     192 GB of HBM3 at 5.3 TB/s, 896 GB/s of peak aggregate Infinity
//     Fabric bandwidth.
//   - h200: NVIDIA H200 datasheet (SXM), 141 GB of HBM3e at 4.8 TB/s; the
//     H100's GH100 die, hence its 989 TFLOPS dense BF16 (1,979 with
//     sparsity) and 900 GB/s NVLink 4.
//   - h100: NVIDIA H100 datasheet (SXM), 989 TFLOPS dense BF16, 80 GB of
//     HBM3 at 3.35 TB/s, NVLink 4 at 900 GB/s.
//   - a100: NVIDIA A100 datasheet (SXM 80 GB), 312 TFLOPS dense BF16,
//     80 GB of HBM2e at 2,039 GB/s, NVLink 3 at 600 GB/s.
//   - l40s: NVIDIA L40S datasheet, 362.05 TFLOPS dense BF16, 48 GB of
//     GDDR6 at 864 GB/s, PCIe Gen4 x16 at 64 GB/s (no NVLink).
//   - l4: NVIDIA L4 datasheet, 121 TFLOPS dense BF16 (242 with
//     sparsity), 24 GB of GDDR6 at 300 GB/s, PCIe Gen4 x16 at 64 GB/s.
//
// The link figures are both directions together; TP's all-reduce sends
// and receives at once, so each direction gets half.
func gpuClasses() [7]gpuClass {
	ref := defaultProfiles()
	h100, a100, l40s, l4 := ref[0], ref[1], ref[2], ref[3]
	return [7]gpuClass{
		fromH100(HardwareB200, h100, 2250, 180, 8.0, 1800),
		fromH100(HardwareMI300X, h100, 1307.4, 192, 5.3, 896),
		fromH100(HardwareH200, h100, 989, 141, 4.8, 900),
		{ref: h100, denseTFLOPS: 989, memoryGB: 80, memoryTBps: 3.35, peerGBps: 900 / 2},
		{ref: a100, denseTFLOPS: 312, memoryGB: 80, memoryTBps: 2.039, peerGBps: 600 / 2},
		{ref: l40s, denseTFLOPS: 362.05, memoryGB: 48, memoryTBps: 0.864, peerGBps: 64 / 2},
		{ref: l4, denseTFLOPS: 121, memoryGB: 24, memoryTBps: 0.300, peerGBps: 64 / 2},
	}
}

// fromH100 builds the class name from its datasheet (linkGBps both
// directions) with the H100's efficiencies: the H100 reference profile's
// compute terms scaled by the FLOPs ratio, its memory terms by the
// bandwidth ratio, its KV capacity by the memory the reference weights
// leave. Adapter loads are the H100's: these parts sit on PCIe Gen5 hosts
// as it does.
func fromH100(name string, h100 Hardware, tflops, memGB, tbps, linkGBps float64) gpuClass {
	const h100TFLOPS, h100TBps, h100GB = 989, 3.35, 80
	g := gpuClass{ref: h100, denseTFLOPS: tflops, memoryGB: memGB, memoryTBps: tbps, peerGBps: linkGBps / 2}
	h := &g.ref
	h.Name = name
	compute, memory := h100TFLOPS/tflops, h100TBps/tbps
	h.PrefillSecPerToken *= compute
	h.PrefillSecPerToken2 *= compute
	h.PrefillFixedSec *= memory
	h.DecodeStepSec *= memory
	h.DecodeStepSecPerSeq *= memory
	refWeights := referenceShape().weightBytes()
	h.KVCapacityTokens = int(float64(h.KVCapacityTokens) * (usableBytes(memGB) - refWeights) / (usableBytes(h100GB) - refWeights))
	return g
}

// usableBytes is what vLLM takes of a GPU of memGB for weights and KV.
func usableBytes(memGB float64) float64 { return gpuMemoryUtilization * memGB * 1e9 }

func lookupGPU(name string) (gpuClass, bool) {
	gs := gpuClasses()
	for i := range gs {
		if strings.EqualFold(gs[i].ref.Name, name) {
			return gs[i], true
		}
	}
	return gpuClass{}, false
}

// ModelShape is what a replica's cost profile needs to know of its model:
// the sizes a Hugging Face config.json gives (num_hidden_layers,
// hidden_size, num_attention_heads, num_key_value_heads, head_dim) and the
// parameter counts. Weights and KV cache are BF16.
type ModelShape struct {
	// Name is the shape's lowercase identifier ("llama-3-70b").
	Name string
	// ParamsB is the parameter count in billions; ActiveParamsB the
	// parameters one token runs through, for a mixture of experts (0:
	// ParamsB, a dense model).
	ParamsB, ActiveParamsB float64
	// Layers, HiddenSize, AttentionHeads, KVHeads and HeadDim are the
	// transformer's sizes.
	Layers, HiddenSize, AttentionHeads, KVHeads, HeadDim int
}

// Model shape names of the built-in shapes.
const (
	ModelLlama3x8B    = "llama-3-8b"
	ModelLlama3x70B   = "llama-3-70b"
	ModelLlama3x405B  = "llama-3-405b"
	ModelQwen3x32B    = "qwen3-32b"
	ModelQwen3x30BA3B = "qwen3-30b-a3b"
	ModelMixtral8x7B  = "mixtral-8x7b"
)

// modelShapes returns the built-in shapes, from each model's config.json on
// Hugging Face (meta-llama/Llama-3.1-8B, -70B and -405B, Qwen/Qwen3-32B,
// Qwen/Qwen3-30B-A3B, mistralai/Mixtral-8x7B-v0.1) and the parameter
// counts their model cards give (Mixtral: 46.7B, 12.9B per token;
// Qwen3-30B-A3B: 30.5B, 3.3B activated). Llama 3.3 70B has 3.1's shape.
func modelShapes() [6]ModelShape {
	return [6]ModelShape{
		{Name: ModelLlama3x8B, ParamsB: 8.03, Layers: 32, HiddenSize: 4096, AttentionHeads: 32, KVHeads: 8, HeadDim: 128},
		{Name: ModelLlama3x70B, ParamsB: 70.6, Layers: 80, HiddenSize: 8192, AttentionHeads: 64, KVHeads: 8, HeadDim: 128},
		{Name: ModelLlama3x405B, ParamsB: 405.9, Layers: 126, HiddenSize: 16384, AttentionHeads: 128, KVHeads: 8, HeadDim: 128},
		{Name: ModelQwen3x32B, ParamsB: 32.8, Layers: 64, HiddenSize: 5120, AttentionHeads: 64, KVHeads: 8, HeadDim: 128},
		{Name: ModelQwen3x30BA3B, ParamsB: 30.5, ActiveParamsB: 3.3, Layers: 48, HiddenSize: 2048, AttentionHeads: 32, KVHeads: 4, HeadDim: 128},
		{Name: ModelMixtral8x7B, ParamsB: 46.7, ActiveParamsB: 12.9, Layers: 32, HiddenSize: 4096, AttentionHeads: 32, KVHeads: 8, HeadDim: 128},
	}
}

func referenceShape() ModelShape { return modelShapes()[0] }

// LookupModelShape returns the built-in model shape named name
// (case-insensitive), and false if there is none.
func LookupModelShape(name string) (ModelShape, bool) {
	ms := modelShapes()
	for i := range ms {
		if strings.EqualFold(ms[i].Name, name) {
			return ms[i], true
		}
	}
	return ModelShape{}, false
}

// ModelShapeNames returns the names of the built-in model shapes, the
// reference first.
func ModelShapeNames() []string {
	ms := modelShapes()
	out := make([]string, len(ms))
	for i := range ms {
		out[i] = ms[i].Name
	}
	return out
}

// Bounds of a ModelShape (Validate): beyond them a shape is a typo, not a
// model (the largest published dense models have about 130 layers).
const (
	MaxModelParamsB = 10_000
	MaxModelLayers  = 1024
	MaxModelWidth   = 1 << 20 // hidden size, heads, head dimension
)

// Validate reports the first size of m outside its bounds: parameters in
// (0, MaxModelParamsB], active parameters 0 or in (0, ParamsB], the other
// sizes at least 1 and at most MaxModelLayers or MaxModelWidth.
func (m ModelShape) Validate() error {
	where := "scoring: model shape " + strconv.Quote(m.Name) + ": "
	switch {
	case !(m.ParamsB > 0 && m.ParamsB <= MaxModelParamsB):
		return errors.New(where + "parameters must be in (0, " + strconv.Itoa(MaxModelParamsB) + "] billion, got " + ftoa(m.ParamsB))
	case !(m.ActiveParamsB == 0 || m.ActiveParamsB > 0 && m.ActiveParamsB <= m.ParamsB):
		return errors.New(where + "active parameters must be 0 or in (0, " + ftoa(m.ParamsB) + "] billion, got " + ftoa(m.ActiveParamsB))
	}
	for _, s := range [...]struct {
		name  string
		v, hi int
	}{
		{"layers", m.Layers, MaxModelLayers}, {"hidden size", m.HiddenSize, MaxModelWidth},
		{"attention heads", m.AttentionHeads, MaxModelWidth}, {"KV heads", m.KVHeads, MaxModelWidth},
		{"head dimension", m.HeadDim, MaxModelWidth},
	} {
		if s.v < 1 || s.v > s.hi {
			return errors.New(where + s.name + " must be in [1, " + strconv.Itoa(s.hi) + "], got " + strconv.Itoa(s.v))
		}
	}
	return nil
}

// activeParams returns the parameters a token runs through.
func (m ModelShape) activeParams() float64 {
	if m.ActiveParamsB > 0 {
		return m.ActiveParamsB * 1e9
	}
	return m.ParamsB * 1e9
}

// weightBytes is the memory m's weights take.
func (m ModelShape) weightBytes() float64 { return m.ParamsB * 1e9 * bytesPerParam }

// attentionWidth is proportional to the FLOPs of one query-key pair:
// layers × attention heads × head dimension.
func (m ModelShape) attentionWidth() float64 {
	return float64(m.Layers) * float64(m.AttentionHeads) * float64(m.HeadDim)
}

// kvBytesPerGPU is the KV cache one token takes on each of tp GPUs: keys
// and values of every layer's KV heads, split over min(tp, KV heads) GPUs
// (vLLM replicates a KV head when TP exceeds their number).
func (m ModelShape) kvBytesPerGPU(tp int) float64 {
	perToken := 2 * float64(m.Layers) * float64(m.KVHeads) * float64(m.HeadDim) * bytesPerParam
	return perToken / float64(min(tp, m.KVHeads))
}

// KVBytesPerToken returns the KV cache one token of m takes in BF16 (keys
// and values of every layer's KV heads).
func (m ModelShape) KVBytesPerToken() int { return int(m.kvBytesPerGPU(1)) }

// allReduceSec is the seconds TP's all-reduces add per token on g: two per
// layer of hidden_size BF16 values (after attention and after the MLP, as
// Megatron-style tensor parallelism does), a ring all-reduce moving
// 2(tp−1)/tp of each through the GPU's peer links; 0 on one GPU.
func allReduceSec(g *gpuClass, m ModelShape, tp int) float64 {
	if tp <= 1 {
		return 0
	}
	bytes := 2 * float64(m.Layers) * float64(m.HiddenSize) * bytesPerParam
	return bytes * 2 * float64(tp-1) / float64(tp) / (g.peerGBps * 1e9)
}

// NewProfile returns the cost profile of a replica serving model m on
// tensorParallel GPUs of class hardware (LookupHardware's names): the
// class's reference profile scaled as this file's comment says. It fails
// for an unknown class, a degree outside [1, MaxTensorParallel], a shape
// Validate refuses, or weights that leave no KV cache room.
func NewProfile(hardware string, m ModelShape, tensorParallel int) (Hardware, error) {
	g, ok := lookupGPU(hardware)
	if !ok {
		return Hardware{}, errors.New("scoring: hardware " + strconv.Quote(hardware) + " is not a known GPU class (" + strings.Join(HardwareNames(), ", ") + ")")
	}
	if tensorParallel < 1 || tensorParallel > MaxTensorParallel {
		return Hardware{}, errors.New("scoring: tensor parallel degree must be in [1, " + strconv.Itoa(MaxTensorParallel) + "], got " + strconv.Itoa(tensorParallel))
	}
	if err := m.Validate(); err != nil {
		return Hardware{}, err
	}
	ref := referenceShape()
	tp := float64(tensorParallel)
	free := usableBytes(g.memoryGB) - m.weightBytes()/tp
	if !(free >= m.kvBytesPerGPU(tensorParallel)) {
		return Hardware{}, errors.New("scoring: " + strconv.Quote(m.Name) + " (" + ftoa(m.ParamsB) + "B parameters, " +
			ftoa(m.weightBytes()/1e9) + " GB in BF16) leaves no room for a KV cache on " + strconv.Itoa(tensorParallel) + " × " +
			g.ref.Name + " (" + ftoa(gpuMemoryUtilization) + " of " + ftoa(g.memoryGB) + " GB each)")
	}
	// Each ratio is exactly 1 for the reference shape on one GPU, so its
	// profile is the reference's to the bit. active is both the FLOPs per
	// token and the weight bytes a batch-1 step reads, per GPU.
	active := m.activeParams() / ref.activeParams() / tp
	attention := m.attentionWidth() / ref.attentionWidth() / tp
	kvRead := m.kvBytesPerGPU(tensorParallel) / ref.kvBytesPerGPU(1)
	comm := allReduceSec(&g, m, tensorParallel)
	refFree := usableBytes(g.memoryGB) - ref.weightBytes()

	h := g.ref
	h.PrefillFixedSec *= active
	h.PrefillSecPerToken = h.PrefillSecPerToken*active + comm
	h.PrefillSecPerToken2 *= attention
	h.DecodeStepSec = h.DecodeStepSec*active + comm
	h.DecodeStepSecPerSeq = h.DecodeStepSecPerSeq*kvRead + comm
	h.KVCapacityTokens = int(float64(h.KVCapacityTokens) * (free / refFree) * (ref.kvBytesPerGPU(1) / m.kvBytesPerGPU(tensorParallel)))
	return h, nil
}
