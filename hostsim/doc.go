// Package hostsim is gpuroute's proxy-wasm host: it runs a plugin module
// (proxy-wasm ABI v0.2.1, built as a Go wasip1 reactor) in wazero and behaves
// like Envoy where it matters, so the built .wasm can be tested off-proxy.
//
//	h := hostsim.NewHost(hostsim.Options{})
//	mod, _ := h.Compile(ctx, wasmBytes)
//	vm, _ := h.NewVM(ctx, mod, "gpuroute", nil)
//	root, _ := vm.Configure("gpuroute", []byte(`{"tick_ms":100}`))
//
// then root.NewStream(), stream.RequestHeaders(...), h.Advance(time.Second).
//
// What it emulates (sources: the spec, proxy-wasm-cpp-host, Envoy; the
// reasoning is in docs/abi.md, "How hostsim emulates Envoy"):
//
//   - A Host is one Envoy process: a virtual clock (tests never sleep),
//     shared data and shared queues keyed by vm_id with cpp-host's CAS rules
//     (one global CAS counter skipping 0; a cas≠0 set on an existing key must
//     match; a set on a missing key ignores cas; values are copied on every
//     read; erased when the last VM of the vm_id closes), a process-wide stats
//     store looked up by name, and named upstream clusters answered by Go
//     handlers (Cluster, HTTPCluster) after a virtual latency.
//   - A VM is one worker thread's instance of a Module; modules are compiled
//     once (wazero compiler engine, a compilation cache shared process-wide)
//     and instantiated per VM. Its WASI is hostsim's copy of Envoy's stubs,
//     not wazero's full WASI: poll_oneoff answers ENOSYS (Envoy 1.33–1.37,
//     the default) or 0 events (cpp-host PR #533) per Options.Poll.
//   - Roots (VM.Configure) tick on the virtual clock; Host.Advance fires due
//     ticks, http_call responses and timeouts and queue deliveries in time
//     order. Reconfiguring a root id creates a new root in the same VM; a
//     rejected configuration keeps the old root. Each new configuration
//     first runs in a throwaway canary VM, as in Envoy (canary.go;
//     Options.NoCanary skips it).
//   - Options.V8 enforces V8's allow-lists of host calls during _initialize
//     and proxy_on_memory_allocate; WASI answers as cpp-host's stubs do
//     (an unknown clock id is ENOTSUP).
//   - Streams are driven like Envoy's HTTP filter chain drives the wasm
//     filter (filter.go): the guest's stream calls (proxy_continue_stream,
//     proxy_close_stream, proxy_send_local_response) take effect once the
//     guest call that made them returns; a local reply runs the guest's own
//     response callbacks and then ends the stream; a stream ends with
//     proxy_on_log, proxy_on_done, proxy_on_delete. Options.HeadersPause
//     selects what a headers PAUSE holds back.
//   - Held requests: a guest that holds a request (PAUSE) and releases it or
//     answers it from another callback of its VM — a tick, another stream's
//     callback, proxy_on_queue_ready, an http_call response — tells the
//     embedder through the stream's hooks, at the virtual time it happens:
//     Stream.OnRequestResumed (the headers as the guest left them and the
//     held body have gone upstream), Stream.OnLocalReply, Stream.OnReset.
//   - A guest trap fails the VM: the error names the callback, later calls
//     return it (errors.Is(err, ErrVMFailed)).
//   - Options.Probe (GuestProbe) counts and times chosen guest functions,
//     so benchmarks can profile the module without importing wazero.
//
// The host knows the ABI, not routing.
package hostsim
