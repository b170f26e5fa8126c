// Package scoring is gpuroute's decision core: it picks, for one LLM request,
// the model-server replica with the lowest expected time to first token,
//
//	ETTFT(r) = W(r) + A(r, a) + P_r(n − k(r))
//
// where W is the delay ahead of the request on r (counted in tokens,
// converted to seconds by r's [Hardware] profile: queued prefill in full,
// running decodes only as the per-step slowdown they add under continuous
// batching, plus a wait for completions when KV or batch slots are full,
// plus the loads of other LoRA adapters queued there, each of which stalls
// an engine step),
// A the adapter load cost, P_r the prefill time of the n − k(r) prompt
// tokens not already cached on r.
//
//	var h prefix.Hasher
//	h.Init(prefix.DefaultBlockChars, 0)
//	h.Reset(model, adapter); h.Write(promptText)
//	index.Lookup(h.Chain(), cached)                      // k per replica
//	req := scoring.Request{PromptTokens: h.Tokens(), Chain: h.Chain(), Model: model}
//	scoring.Pick(&params, &req, replicas, cached, ledger, nowNanos, &decision)
//	c, _ := decision.Chosen() // decision.Index < 0: no replica, answer 503
//	f := ledger.Dispatch(c.Index, &req, req.PromptTokens-c.CachedTokens, nowNanos, c.StartNanos)
//	index.Record(c.Index, h.Chain())
//
// The package is pure Go: no I/O, no clock (time is an argument), no
// randomness (ties break by rendezvous hashing of the prefix), no
// package-level mutable state. It builds for GOOS=wasip1 and allocates
// nothing per decision in steady state, so the proxy-wasm plugin, the
// simulator and the tests run the same code.
//
// Pieces: [Hardware] (cost profiles with published defaults), [Replica] and
// [Request] (the inputs), [Params] (tunables), [Pick] and [Decision] (the
// rule and its explanation: each cost term is a function of its own in
// terms.go, composed plainly by pickPlain, which Pick's loop fuses for the
// wasm compiler), [Ledger] (the router's own accounting between metric
// scrapes), [Calibrator] (online fit of a replica's real prefill cost).
// Prefix identity (the block-hash chain of a prompt and the index of which
// replica holds which chain) is the subpackage [prefix].
package scoring
