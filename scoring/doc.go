// Package scoring is gpuroute's decision core: it picks, for one LLM request,
// the model-server replica with the lowest expected time to first token,
//
//	ETTFT(r) = W(r) + A(r, a) + P_r(n − k(r))
//
// where W is the work queued ahead on r (in tokens, converted to seconds by
// r's [Hardware] profile), A the adapter load cost, P_r the prefill time of
// the n − k(r) prompt tokens not already cached on r.
//
// It is pure Go with no I/O, clock or global state, so the proxy-wasm plugin,
// the simulator and tests call the same code:
//
//	h, _ := scoring.LookupHardware("h100")
//	replicas := []scoring.Replica{{Addr: "10.0.0.1:8000", Hardware: h, Healthy: true}}
//	var d scoring.Decision
//	scoring.Pick(&scoring.DefaultParams(), &req, replicas, nil, nil, nowNanos, &d)
//	// d.Index is the chosen replica (or -1), d.Explain says why.
package scoring
