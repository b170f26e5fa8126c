// Package faults runs gpuroute's fault-injection scenarios: the real plugin
// module (build/gpuroute.wasm) in hostsim Hosts, worker VMs and fake
// replicas, with one fault each (metrics timeouts, 5xx, truncated and
// garbage bodies, flapping, a replica crash mid-stream, every replica down,
// stale metrics, clock jumps, the scrape leader deleted, 16 contending
// workers, a bad reconfiguration, a module swap, GC pressure), each ending
// in a Result with its figures.
//
//	results := faults.Run(faults.Options{Wasm: wasmBytes})
//	faults.WriteTable(os.Stdout, results)
//
// The client model is Envoy plus a client that retries once: a request goes
// through a worker VM's plugin, Envoy sends it to the first destination in
// x-gateway-destination-endpoint that accepts connections (Envoy's
// override_host load balancing policy walks the list on connect failures),
// and a stream
// that fails (connect refused everywhere, reset mid-stream, ended by a drain
// deadline) is re-sent once by the client through the plugin again. A
// request is lost when that re-send fails too; local replies of the plugin
// are answers, counted by status.
//
// A scenario's figures come from one deterministic run (virtual clock,
// seeded WASI random), so they are the same on every machine.
package faults
