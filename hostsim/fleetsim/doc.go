// Package fleetsim is gpuroute's discrete-event GPU fleet simulator: model-server
// replicas with continuous batching, chunked prefill, a prefix-reusing KV cache,
// LoRA slots, drains and crashes, on a virtual clock; workload generators and
// trace replay; baseline routing policies; and a runner that scores policies
// on the same fleet and workload.
//
//	w, _ := fleetsim.Generate("shared-prefix", fleetsim.WorkloadOptions{Seed: 1})
//	cfg := fleetsim.Config{Replicas: fleetsim.UniformReplicas(4, "h100"), Seed: 1}
//	p, _ := fleetsim.NewPolicy("llm-d", fleetsim.PolicyOptions{Seed: 1})
//	res, _ := fleetsim.Run(cfg, w, p)
//	// res.Summary.TTFTP90Sec, res.Summary.PrefixHitRate, ...
//
// A replica serves one base model ([ReplicaConfig].Model) and a request
// names its own: no baseline knows models, so each chooses among the
// replicas serving the request's model, the pool a gateway's route for
// that model would hold; a request sent to another replica fails with the
// engine's 404 ([Summary].WrongModel).
//
// Everything is deterministic for a seed: time is a [time.Duration] since the
// start of the run (no wall clock), randomness comes from seeded generators, and
// ties in the event queue break by insertion order.
//
// A [Policy] sees each request and the events of its life (dispatched, first
// token, tokens streamed, completed, cancelled), and, before every event time,
// an [Policy.Advance] call so that an external router (the proxy-wasm plugin
// driven by hostsim, with its own ticks and metric scrapes) can catch up on the
// same clock. Replicas render their state in the engine's own Prometheus text
// format ([Replica.MetricsText]) for such a router to scrape.
package fleetsim
