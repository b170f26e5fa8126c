//go:build wasip1

package proxy

import "unsafe"

// Guest exports (docs/abi.md "proxy-wasm ABI v0.2.1", spec v0.2.1 "Functions exposed by the Wasm
// module"). Each one but proxy_on_memory_allocate recovers: on panic it
// logs and counts (recovered) and returns the default given in its comment.
// Names are the wire names.
const (
	exportOnVMStart          = "proxy_on_vm_start"
	exportOnConfigure        = "proxy_on_configure"
	exportOnContextCreate    = "proxy_on_context_create"
	exportOnTick             = "proxy_on_tick"
	exportOnHttpCallResponse = "proxy_on_http_call_response"
	exportOnQueueReady       = "proxy_on_queue_ready"
	exportOnRequestHeaders   = "proxy_on_request_headers"
	exportOnRequestBody      = "proxy_on_request_body"
	exportOnRequestTrailers  = "proxy_on_request_trailers"
	exportOnResponseHeaders  = "proxy_on_response_headers"
	exportOnResponseBody     = "proxy_on_response_body"
	exportOnResponseTrailers = "proxy_on_response_trailers"
	exportOnDone             = "proxy_on_done"
	exportOnLog              = "proxy_on_log"
	exportOnDelete           = "proxy_on_delete"
)

// proxyABIVersion marks the module as ABI v0.2.1; hosts look for the export's
// name and never call it.
//
//go:wasmexport proxy_abi_version_0_2_1
func proxyABIVersion() {}

// proxyOnMemoryAllocate hands the host size bytes of scratch memory to copy a
// value into during a host call. Returns nil (0, failure) on an oversized
// request. It is the one export without a recover: it runs no plugin code,
// arena.alloc bounds every index it takes, and the one failure left, the
// runtime running out of memory, is fatal rather than a panic, so a
// recover would never run, and the deferred call would cost every one of
// a request's calls (BenchmarkRequestPathPaired64).
//
//go:wasmexport proxy_on_memory_allocate
func proxyOnMemoryAllocate(size uint32) (ptr unsafe.Pointer) {
	b := scratch.alloc(int(size))
	if b == nil {
		return nil
	}
	return unsafe.Pointer(unsafe.SliceData(b))
}

// proxyOnVMStart runs VMContext.OnVMStart. Panic: false (VM unusable), because a
// VM that failed half way through start has unknown state.
//
//go:wasmexport proxy_on_vm_start
func proxyOnVMStart(rootID, vmConfigSize uint32) (ok bool) {
	prev := enter(rootID)
	defer func() {
		if r := recover(); r != nil {
			recovered(exportOnVMStart, r)
			ok = false
		}
		leave(prev)
	}()
	if vmContext == nil {
		return false
	}
	return bool(vmContext.OnVMStart(int(vmConfigSize)))
}

// proxyOnConfigure runs PluginContext.OnPluginStart of root rootID. Panic: false
// (configuration rejected; Envoy keeps the previous root serving).
//
//go:wasmexport proxy_on_configure
func proxyOnConfigure(rootID, pluginConfigSize uint32) (ok bool) {
	prev := enter(rootID)
	defer func() {
		if r := recover(); r != nil {
			recovered(exportOnConfigure, r)
			ok = false
		}
		leave(prev)
	}()
	root := roots[rootID]
	if root == nil {
		return false
	}
	return bool(root.plugin.OnPluginStart(int(pluginConfigSize)))
}

// proxyOnContextCreate creates a root context (parentID 0) or an HTTP stream
// context under root parentID. A plugin context that returns a nil HttpContext
// gets no stream state: its stream callbacks answer Continue.
//
//go:wasmexport proxy_on_context_create
func proxyOnContextCreate(contextID, parentID uint32) {
	prev := enter(contextID)
	defer func() {
		if r := recover(); r != nil {
			recovered(exportOnContextCreate, r)
		}
		leave(prev)
	}()
	if parentID == 0 {
		if vmContext == nil {
			return
		}
		if p := vmContext.NewPluginContext(contextID); p != nil {
			roots[contextID] = &rootState{plugin: p}
		}
		return
	}
	root := roots[parentID]
	if root == nil {
		return
	}
	if h := root.plugin.NewHttpContext(contextID); h != nil {
		streams.put(contextID, streamState{http: h, root: parentID})
	}
}

// proxyOnTick runs PluginContext.OnTick.
//
//go:wasmexport proxy_on_tick
func proxyOnTick(rootID uint32) {
	prev := enter(rootID)
	defer func() {
		if r := recover(); r != nil {
			recovered(exportOnTick, r)
		}
		leave(prev)
	}()
	if root := roots[rootID]; root != nil {
		root.plugin.OnTick()
	}
}

// proxyOnHttpCallResponse runs the callback DispatchHttpCall registered for
// callID, with the dispatching context as effective context. A callback whose
// dispatching stream is already gone is dropped, as the SDK does (a late answer
// must not resume or reply to a deleted stream).
//
//go:wasmexport proxy_on_http_call_response
func proxyOnHttpCallResponse(rootID, callID, numHeaders, bodySize, numTrailers uint32) {
	prev := enter(rootID)
	defer func() {
		if r := recover(); r != nil {
			recovered(exportOnHttpCallResponse, r)
		}
		leave(prev)
	}()
	key := calloutKey{rootID, callID}
	c, ok := callouts[key]
	if !ok {
		key = calloutKey{0, callID}
		if c, ok = callouts[key]; !ok {
			return
		}
	}
	delete(callouts, key)
	if c.caller != rootID && c.caller != 0 {
		if _, alive := streams.get(c.caller); !alive {
			return
		}
		_ = SetEffectiveContext(c.caller)
		active = c.caller
	}
	c.fn(int(numHeaders), int(bodySize), int(numTrailers))
}

// proxyOnQueueReady runs PluginContext.OnQueueReady.
//
//go:wasmexport proxy_on_queue_ready
func proxyOnQueueReady(rootID, queueID uint32) {
	prev := enter(rootID)
	defer func() {
		if r := recover(); r != nil {
			recovered(exportOnQueueReady, r)
		}
		leave(prev)
	}()
	if root := roots[rootID]; root != nil {
		root.plugin.OnQueueReady(queueID)
	}
}

// proxyOnRequestHeaders runs HttpContext.OnHttpRequestHeaders. Panic: Continue.
//
//go:wasmexport proxy_on_request_headers
func proxyOnRequestHeaders(contextID, numHeaders uint32, endOfStream bool) (action uint32) {
	prev := enter(contextID)
	defer func() {
		if r := recover(); r != nil {
			recovered(exportOnRequestHeaders, r)
			action = actionContinue
		}
		leave(prev)
	}()
	if s, ok := streams.get(contextID); ok {
		return uint32(s.http.OnHttpRequestHeaders(int(numHeaders), endOfStream))
	}
	return actionContinue
}

// proxyOnRequestBody runs HttpContext.OnHttpRequestBody. Panic: Continue.
//
//go:wasmexport proxy_on_request_body
func proxyOnRequestBody(contextID, bodySize uint32, endOfStream bool) (action uint32) {
	prev := enter(contextID)
	defer func() {
		if r := recover(); r != nil {
			recovered(exportOnRequestBody, r)
			action = actionContinue
		}
		leave(prev)
	}()
	if s, ok := streams.get(contextID); ok {
		return uint32(s.http.OnHttpRequestBody(int(bodySize), endOfStream))
	}
	return actionContinue
}

// proxyOnRequestTrailers runs HttpContext.OnHttpRequestTrailers. Panic: Continue.
//
//go:wasmexport proxy_on_request_trailers
func proxyOnRequestTrailers(contextID, numTrailers uint32) (action uint32) {
	prev := enter(contextID)
	defer func() {
		if r := recover(); r != nil {
			recovered(exportOnRequestTrailers, r)
			action = actionContinue
		}
		leave(prev)
	}()
	if s, ok := streams.get(contextID); ok {
		return uint32(s.http.OnHttpRequestTrailers(int(numTrailers)))
	}
	return actionContinue
}

// proxyOnResponseHeaders runs HttpContext.OnHttpResponseHeaders. Panic: Continue.
//
//go:wasmexport proxy_on_response_headers
func proxyOnResponseHeaders(contextID, numHeaders uint32, endOfStream bool) (action uint32) {
	prev := enter(contextID)
	defer func() {
		if r := recover(); r != nil {
			recovered(exportOnResponseHeaders, r)
			action = actionContinue
		}
		leave(prev)
	}()
	if s, ok := streams.get(contextID); ok {
		return uint32(s.http.OnHttpResponseHeaders(int(numHeaders), endOfStream))
	}
	return actionContinue
}

// proxyOnResponseBody runs HttpContext.OnHttpResponseBody. Panic: Continue.
//
//go:wasmexport proxy_on_response_body
func proxyOnResponseBody(contextID, bodySize uint32, endOfStream bool) (action uint32) {
	prev := enter(contextID)
	defer func() {
		if r := recover(); r != nil {
			recovered(exportOnResponseBody, r)
			action = actionContinue
		}
		leave(prev)
	}()
	if s, ok := streams.get(contextID); ok {
		return uint32(s.http.OnHttpResponseBody(int(bodySize), endOfStream))
	}
	return actionContinue
}

// proxyOnResponseTrailers runs HttpContext.OnHttpResponseTrailers. Panic: Continue.
//
//go:wasmexport proxy_on_response_trailers
func proxyOnResponseTrailers(contextID, numTrailers uint32) (action uint32) {
	prev := enter(contextID)
	defer func() {
		if r := recover(); r != nil {
			recovered(exportOnResponseTrailers, r)
			action = actionContinue
		}
		leave(prev)
	}()
	if s, ok := streams.get(contextID); ok {
		return uint32(s.http.OnHttpResponseTrailers(int(numTrailers)))
	}
	return actionContinue
}

// proxyOnDone asks a root's OnPluginDone whether it may be deleted now (false:
// it calls Done later); streams answer true. Panic: true, so the host can still
// reclaim the context.
//
//go:wasmexport proxy_on_done
func proxyOnDone(contextID uint32) (done bool) {
	prev := enter(contextID)
	defer func() {
		if r := recover(); r != nil {
			recovered(exportOnDone, r)
			done = true
		}
		leave(prev)
	}()
	if root := roots[contextID]; root != nil {
		return root.plugin.OnPluginDone()
	}
	return true
}

// proxyOnLog ends a stream: HttpContext.OnHttpStreamDone.
//
//go:wasmexport proxy_on_log
func proxyOnLog(contextID uint32) {
	prev := enter(contextID)
	defer func() {
		if r := recover(); r != nil {
			recovered(exportOnLog, r)
		}
		leave(prev)
	}()
	if s, ok := streams.get(contextID); ok {
		s.http.OnHttpStreamDone()
	}
}

// proxyOnDelete forgets a context; a root's pending http-call callbacks go with it.
//
//go:wasmexport proxy_on_delete
func proxyOnDelete(contextID uint32) {
	prev := enter(contextID)
	defer func() {
		if r := recover(); r != nil {
			recovered(exportOnDelete, r)
		}
		leave(prev)
	}()
	if streams.del(contextID) {
		return
	}
	if _, ok := roots[contextID]; ok {
		delete(roots, contextID)
		for k := range callouts {
			if k.root == contextID {
				delete(callouts, k)
			}
		}
	}
}
