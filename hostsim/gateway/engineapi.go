package gateway

import (
	"net/http"
	"strconv"
)

// The endpoints vLLM's and SGLang's servers answer besides completions and
// /metrics, which routers and clients call on their workers: health checks,
// the model list, model and server information, load. sglang-router probes
// /health when it adds a worker and on its health-check interval, reads
// /get_server_info for the model and dp_size and polls /get_load for its
// power-of-two policy (sgl-router src/core/workflow/steps/worker_registration.rs,
// src/core/worker_manager.rs); vllm-router (vllm-project/router, a fork of
// it) checks /health the same way and passes /v1/models, /get_model_info and
// /get_server_info through to a worker. The shapes follow the engines'
// servers: vLLM vllm/entrypoints/openai/api_server.py (/health, /load,
// /version, /v1/models), SGLang python/sglang/srt/entrypoints/http_server.py
// (/health, /health_generate, /get_model_info, /get_server_info, /get_load).
const (
	PathHealth         = "/health"
	PathHealthGenerate = "/health_generate"
	PathModels         = "/v1/models"
	PathModelInfo      = "/get_model_info"
	PathServerInfo     = "/get_server_info"
	PathServerInfoNew  = "/server_info" // SGLang's newer name for /get_server_info
	PathLoad           = "/get_load"
	PathVLLMLoad       = "/load"
	PathVersion        = "/version"
)

// SimVersion is what /version and /get_server_info report: no real engine
// release, so a client that checks versions sees a simulator.
const SimVersion = "0.0.0+gpuroute.sim"

// engineState is a snapshot of what the load and info endpoints report.
type engineState struct {
	waiting, running int
	kvUsedTokens     int
	kvCapacityTokens int
}

// serveEngineAPI answers the informational endpoints; false if path is not one.
func (r *Replica) serveEngineAPI(w http.ResponseWriter, req *http.Request) bool {
	switch req.URL.Path {
	case PathHealth, PathHealthGenerate:
		// Both engines answer 200 with an empty body while serving.
		w.WriteHeader(http.StatusOK)
	case PathModels:
		writeJSON(w, r.modelsJSON())
	case PathModelInfo:
		b := []byte(`{"model_path":`)
		b = appendJSONString(b, r.opts.Model)
		b = append(b, `,"tokenizer_path":`...)
		b = appendJSONString(b, r.opts.Model)
		b = append(b, `,"is_generation":true,"preferred_sampling_params":null,"weight_version":"default"}`...)
		writeJSON(w, b)
	case PathServerInfo, PathServerInfoNew:
		writeJSON(w, r.serverInfoJSON())
	case PathLoad:
		st := r.engineState()
		b := []byte(`[{"dp_rank":0,"num_reqs":`)
		b = strconv.AppendInt(b, int64(st.running+st.waiting), 10)
		b = append(b, `,"num_waiting_reqs":`...)
		b = strconv.AppendInt(b, int64(st.waiting), 10)
		b = append(b, `,"num_tokens":`...)
		b = strconv.AppendInt(b, int64(st.kvUsedTokens), 10)
		writeJSON(w, append(b, "}]"...))
	case PathVLLMLoad:
		st := r.engineState()
		b := []byte(`{"server_load":`)
		b = strconv.AppendInt(b, int64(st.running+st.waiting), 10)
		writeJSON(w, append(b, '}'))
	case PathVersion:
		writeJSON(w, []byte(`{"version":"`+SimVersion+`"}`))
	default:
		return false
	}
	return true
}

// modelsJSON is vLLM's /v1/models: the base model, then each LoRA adapter
// with the base model as its parent.
func (r *Replica) modelsJSON() []byte {
	b := []byte(`{"object":"list","data":[`)
	card := func(id, parent string) {
		b = append(b, `{"id":`...)
		b = appendJSONString(b, id)
		b = append(b, `,"object":"model","created":`...)
		b = strconv.AppendInt(b, r.created.Unix(), 10)
		b = append(b, `,"owned_by":"vllm","root":`...)
		b = appendJSONString(b, id)
		b = append(b, `,"parent":`...)
		if parent == "" {
			b = append(b, `null,"max_model_len":`...)
			b = strconv.AppendInt(b, int64(r.contextTokens()), 10)
		} else {
			b = appendJSONString(b, parent)
			b = append(b, `,"max_model_len":null`...)
		}
		b = append(b, '}')
	}
	card(r.opts.Model, "")
	for _, a := range r.opts.Adapters {
		b = append(b, ',')
		card(a, r.opts.Model)
	}
	return append(b, "]}"...)
}

// serverInfoJSON is SGLang's /get_server_info: the server arguments, the
// scheduler's internal state and the version. sglang-router reads model_path,
// dp_size and the max_* capacities from it.
func (r *Replica) serverInfoJSON() []byte {
	st := r.engineState()
	b := []byte(`{"model_path":`)
	b = appendJSONString(b, r.opts.Model)
	b = append(b, `,"tokenizer_path":`...)
	b = appendJSONString(b, r.opts.Model)
	b = append(b, `,"served_model_name":`...)
	b = appendJSONString(b, r.opts.Model)
	b = append(b, `,"tp_size":1,"dp_size":1,"page_size":`...)
	b = strconv.AppendInt(b, blockTokens, 10)
	b = append(b, `,"context_length":`...)
	b = strconv.AppendInt(b, int64(r.contextTokens()), 10)
	b = append(b, `,"max_total_num_tokens":`...)
	b = strconv.AppendInt(b, int64(st.kvCapacityTokens), 10)
	b = append(b, `,"enable_lora":`...)
	b = strconv.AppendBool(b, len(r.opts.Adapters) > 0)
	b = append(b, `,"max_loras_per_batch":`...)
	b = strconv.AppendInt(b, int64(max(r.opts.MaxLoras, 0)), 10)
	b = append(b, `,"internal_states":[{"num_running_reqs":`...)
	b = strconv.AppendInt(b, int64(st.running), 10)
	b = append(b, `,"num_waiting_reqs":`...)
	b = strconv.AppendInt(b, int64(st.waiting), 10)
	b = append(b, `,"token_usage":`...)
	b = strconv.AppendFloat(b, float64(st.kvUsedTokens)/float64(max(st.kvCapacityTokens, 1)), 'f', 4, 64)
	b = append(b, `}],"version":"`+SimVersion+`"}`...)
	return b
}

// contextTokens is the model's context length: the KV cache's size, capped
// at Llama 3.1's 131072 tokens.
func (r *Replica) contextTokens() int { return min(r.engineState().kvCapacityTokens, 131072) }

func writeJSON(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}
