package metrics

import (
	"errors"
	"strconv"
	"strings"
)

// Engine names the model server behind a replica; it selects the default
// metric names (DefaultNames). The zero value is EngineUnknown, which has no
// default names: a replica must name its engine in configuration.
type Engine uint8

// Engines with default metric names.
const (
	// EngineUnknown is the zero Engine; NewParser refuses it.
	EngineUnknown Engine = iota
	// EngineVLLM is vLLM, V1 or V0: the V0 KV-usage name is accepted as a
	// fallback so one setting covers both.
	EngineVLLM
	// EngineSGLang is SGLang's /metrics (started with --enable-metrics).
	EngineSGLang
	// EngineTGI is Hugging Face text-generation-inference: queue and batch
	// figures only, no KV-cache or LoRA metric.
	EngineTGI
	// EngineTriton is Triton Inference Server with the TensorRT-LLM backend
	// (label-keyed nv_trt_llm_* families on the metrics port, 8002 by default).
	EngineTriton
	// EngineTRTLLM is TensorRT-LLM's own OpenAI server, trtllm-serve, scraped
	// at /prometheus/metrics (trtllm_* names).
	EngineTRTLLM
	numEngines
)

// Configuration spellings of each engine; ParseEngine also accepts the aliases
// in engineAliases.
const (
	engineNameVLLM   = "vllm"
	engineNameSGLang = "sglang"
	engineNameTGI    = "tgi"
	engineNameTriton = "triton"
	engineNameTRTLLM = "trtllm-serve"
)

var engineNames = [numEngines]string{
	EngineUnknown: "unknown",
	EngineVLLM:    engineNameVLLM,
	EngineSGLang:  engineNameSGLang,
	EngineTGI:     engineNameTGI,
	EngineTriton:  engineNameTriton,
	EngineTRTLLM:  engineNameTRTLLM,
}

// engineAliases are other spellings operators use for the same servers.
var engineAliases = [...]struct {
	name string
	e    Engine
}{
	{"vllm-v1", EngineVLLM},
	{"vllm-v0", EngineVLLM},
	{"text-generation-inference", EngineTGI},
	{"triton-trtllm", EngineTriton},
	{"tensorrtllm_backend", EngineTriton},
	{"trtllm", EngineTRTLLM},
	{"trtllm_serve", EngineTRTLLM},
}

// String returns the configuration spelling of e ("vllm", "sglang", "tgi",
// "triton", "trtllm-serve"), or "unknown".
func (e Engine) String() string {
	if e < numEngines {
		return engineNames[e]
	}
	return "Engine(" + strconv.Itoa(int(e)) + ")"
}

// ParseEngine reads an engine name from configuration, case-insensitively,
// accepting the String spellings and a few common aliases ("vllm-v0",
// "text-generation-inference", "triton-trtllm", "trtllm").
func ParseEngine(s string) (Engine, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	for e := EngineVLLM; e < numEngines; e++ {
		if t == engineNames[e] {
			return e, nil
		}
	}
	for _, a := range engineAliases {
		if t == a.name {
			return a.e, nil
		}
	}
	return EngineUnknown, errors.New("metrics: engine " + strconv.Quote(s) +
		" is not one of vllm, sglang, tgi, triton, trtllm-serve")
}
