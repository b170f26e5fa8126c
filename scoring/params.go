package scoring

import (
	"errors"
	"strconv"
	"time"
)

// Params are the decision's tunables. The zero value is invalid; start from
// DefaultParams() and check changes with Validate.
type Params struct {
	// StaleAfter is how old a replica's snapshot may be before its state is
	// uncertain (default 2s: 40 scrape intervals of llm-d's 50 ms, several
	// of a 250 ms plugin tick).
	StaleAfter time.Duration
	// StalePenaltySec is added to W of an uncertain replica (default 0.25s):
	// it still gets work if it is clearly better, but is never taken for
	// idle because nobody has heard from it.
	StalePenaltySec float64
	// AdapterMemory is how long the router counts an adapter it sent to a
	// replica as resident (default 60s; vLLM only reports adapters with
	// running or waiting requests, so a just-finished adapter disappears
	// from metrics while still loaded).
	AdapterMemory time.Duration
	// AdapterHostMemory is how long, after AdapterMemory, an adapter the
	// router sent to a replica counts as held in the replica's host-memory
	// LoRA cache, so loading it again costs AdapterLoadHostSec rather than a
	// load from storage (default 10m: vLLM's CPU LoRA cache is LRU over
	// --max-cpu-loras adapters, which turn over in minutes, not seconds).
	AdapterHostMemory time.Duration
	// AdapterToleranceSec is extra cost added to any adapter load, to
	// favour residency beyond the raw load time (default 0: the pure rule).
	AdapterToleranceSec float64
	// TieEpsilonSec is how close two ETTFTs must be to count as a tie,
	// broken by rendezvous hashing of the prefix (default 1 ms).
	TieEpsilonSec float64
	// HomeBlocks is how many leading blocks of the chain key the
	// rendezvous tie-break (default 4: 256 characters at 64-char blocks,
	// shorter than typical shared system prompts).
	HomeBlocks int
	// DefaultPromptTokens values a reported waiting request the router did
	// not send (default 1000) before the Ledger has learned a mean.
	DefaultPromptTokens int
	// ExternalityWeight scales the delay a request's own work (adapter
	// load, prefill) imposes on the requests that will arrive behind it at
	// the chosen replica (Candidate.ExternalSec). 1 counts that delay in
	// full, the social cost of the choice; 0 is the greedy ETTFT rule
	// (default 1).
	ExternalityWeight float64
	// StallWeight weighs, against time to first token, the decode time the
	// request's prefill and adapter load add to the generations running on
	// the chosen replica, which wait for the steps that carry the prefill
	// (chunked prefill shares every step with the batch), scaled by how
	// full its KV cache is and how busy the fleet is. 0 ignores the
	// generations; default 0.25 (externalSec, TestStallSpreadsPrefills).
	StallWeight float64
	// RateWindow is the time constant of the routers' dispatch rates the
	// externality uses (default 10s: long enough to average a burst, short
	// enough to follow a load change).
	RateWindow time.Duration
	// DefaultOutputTokens is the output estimate with neither max_tokens
	// nor a learned mean (default 256).
	DefaultOutputTokens int
	// PrefillChunkTokens is the replicas' per-step token budget (vLLM
	// max_num_batched_tokens, SGLang chunked_prefill_size): how many prompt
	// tokens one engine step prefills while the running batch decodes.
	// W(r) uses it to count the steps a new prefill shares with running
	// decodes. Default 8192: vLLM V1's default for the OpenAI server on
	// GPUs with at least 70 GiB other than A100 (vllm/engine/arg_utils.py;
	// it is 2048 on A100 and smaller GPUs, so set 2048 for such a fleet).
	// A smaller value makes running decodes slow a prefill over more steps.
	PrefillChunkTokens int
}

// DefaultParams returns the documented defaults.
func DefaultParams() Params {
	return Params{
		StaleAfter:          2 * time.Second,
		StalePenaltySec:     0.25,
		AdapterMemory:       60 * time.Second,
		AdapterHostMemory:   10 * time.Minute,
		AdapterToleranceSec: 0,
		TieEpsilonSec:       0.001,
		HomeBlocks:          4,
		DefaultPromptTokens: 1000,
		DefaultOutputTokens: 256,
		ExternalityWeight:   1,
		StallWeight:         0.25,
		RateWindow:          10 * time.Second,
		PrefillChunkTokens:  8192,
	}
}

// Validate reports the first parameter outside its range, quoting it.
func (p *Params) Validate() error {
	switch {
	case p.StaleAfter <= 0:
		return errors.New("scoring: stale_after must be > 0, got " + p.StaleAfter.String())
	case !(p.StalePenaltySec >= 0) || p.StalePenaltySec > 3600:
		return errors.New("scoring: stale_penalty_sec must be in [0, 3600], got " + ftoa(p.StalePenaltySec))
	case p.AdapterMemory < 0:
		return errors.New("scoring: adapter_memory must be >= 0, got " + p.AdapterMemory.String())
	case p.AdapterHostMemory < 0:
		return errors.New("scoring: adapter_host_memory must be >= 0, got " + p.AdapterHostMemory.String())
	case !(p.AdapterToleranceSec >= 0) || p.AdapterToleranceSec > 3600:
		return errors.New("scoring: adapter_tolerance_sec must be in [0, 3600], got " + ftoa(p.AdapterToleranceSec))
	case !(p.TieEpsilonSec >= 0) || p.TieEpsilonSec > 10:
		return errors.New("scoring: tie_epsilon_sec must be in [0, 10], got " + ftoa(p.TieEpsilonSec))
	case p.HomeBlocks < 1:
		return errors.New("scoring: home_blocks must be >= 1, got " + strconv.Itoa(p.HomeBlocks))
	case p.DefaultPromptTokens < 1:
		return errors.New("scoring: default_prompt_tokens must be >= 1, got " + strconv.Itoa(p.DefaultPromptTokens))
	case !(p.ExternalityWeight >= 0) || p.ExternalityWeight > 100:
		return errors.New("scoring: externality_weight must be in [0, 100], got " + ftoa(p.ExternalityWeight))
	case !(p.StallWeight >= 0) || p.StallWeight > 100:
		return errors.New("scoring: stall_weight must be in [0, 100], got " + ftoa(p.StallWeight))
	case p.RateWindow <= 0:
		return errors.New("scoring: rate_window must be > 0, got " + p.RateWindow.String())
	case p.DefaultOutputTokens < 1:
		return errors.New("scoring: default_output_tokens must be >= 1, got " + strconv.Itoa(p.DefaultOutputTokens))
	case p.PrefillChunkTokens < 1 || p.PrefillChunkTokens > 1<<24:
		return errors.New("scoring: prefill_chunk_tokens must be in [1, 16777216], got " + strconv.Itoa(p.PrefillChunkTokens))
	}
	return nil
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
