// Package gateway is gpuroute's local gateway: a real HTTP listener that runs
// the built plugin (build/gpuroute.wasm) in hostsim the way Envoy's HTTP
// filter chain does, and forwards each request to the replica the plugin
// picked; plus simulated OpenAI-compatible replicas to route to.
//
//	rep := gateway.NewReplica(gateway.ReplicaOptions{Name: "a", TimeScale: 0.1})
//	rs, _ := gateway.Serve("127.0.0.1:0", rep)
//	cfg, _ := gateway.PluginConfig([]gateway.ReplicaSpec{{Name: "a", Address: rs.Addr}}, gateway.ConfigOptions{TickMillis: 100})
//	gw, _ := gateway.New(ctx, gateway.Options{WASM: wasm, PluginConfig: cfg})
//	gs, _ := gateway.Serve("127.0.0.1:8080", gw)
//
// What one request goes through (Envoy's order, docs/abi.md "Envoy
// behaviour"): a new stream on the next worker VM (round robin, one VM per
// Envoy worker thread); request headers; the body, buffered by hostsim
// while the plugin pauses; the plugin's x-gateway-destination-endpoint read
// as an ORIGINAL_DST cluster with use_http_header would (a comma-separated
// list is override_host's: retries take the next address); the request
// forwarded with net/http; the response headers and each body chunk through
// the plugin's response callbacks and on to the client as they arrive (SSE
// stays a stream); done. A local reply (503, 429, the status endpoint) is
// returned as the plugin made it; a stream the plugin resets (a drain
// deadline) resets the client's connection. An upstream that cannot be
// reached gets Envoy's own local reply, through the response callbacks too
// (envoy.go).
//
// Time: the host's virtual clock starts at the wall time of New and a
// goroutine advances it to wall time every ClockStep (requests also catch it
// up on arrival), so ticks, metric scrapes (proxy_http_call to clusters
// served by the replicas' /metrics, answered as Envoy's async client
// answers a failed connection) and drain
// deadlines in Unix milliseconds all follow real time. hostsim runs one
// guest call per VM at a time, so the clock and the requests never enter a
// VM concurrently.
//
// Configuration updates (Reconfigure, ReloadFile, WatchFile) create a new
// root context in every VM; streams in flight finish under the root they
// started with. A configuration the plugin refuses changes nothing: the
// previous one keeps serving, its metrics clusters where they were.
//
// The gateway serves a live fleet page at DefaultFleetPath (fleet.go).
//
// The replicas ([Replica]) run the fleet simulator's engine in wall time
// (fleetsim.LiveReplica): continuous batching with chunked prefill, a KV
// cache that reuses a cached prompt prefix (16-token blocks), LoRA adapters
// that cost a host-memory or storage load unless resident; every duration
// follows scoring's hardware profiles times TimeScale. They answer chat,
// completions, the Anthropic Messages API and the OpenAI Responses API,
// streamed or whole, reporting the prompt tokens their cache served in each
// endpoint's usage fields, and serve /metrics
// in vLLM V1's format and the health, model, server-information and load
// endpoints vLLM and SGLang serve, so real routers can sit in front of them.
package gateway
