//go:build wasip1

package proxy

import "unsafe"

// Host functions, module "env" (docs/abi.md "proxy-wasm ABI v0.2.1"; spec abi-versions/v0.2.1 "Functions
// implemented in the host environment"). Every one returns proxy_status_t. Only
// wasm-representable types cross: pointers are i32 offsets (unsafe.Pointer or
// *uint32 for ret_* out-parameters the host writes little-endian), sizes u32,
// metric values i64/u64. //go:noescape keeps the out-parameters on the stack.

//go:wasmimport env proxy_log
//go:noescape
func hostLog(level uint32, msg unsafe.Pointer, msgLen uint32) uint32

//go:wasmimport env proxy_set_tick_period_milliseconds
func hostSetTickPeriodMilliseconds(periodMillis uint32) uint32

//go:wasmimport env proxy_get_buffer_bytes
//go:noescape
func hostGetBufferBytes(bufType, start, maxSize uint32, retPtr, retLen *uint32) uint32

//go:wasmimport env proxy_set_buffer_bytes
//go:noescape
func hostSetBufferBytes(bufType, start, size uint32, val unsafe.Pointer, valLen uint32) uint32

//go:wasmimport env proxy_get_header_map_pairs
//go:noescape
func hostGetHeaderMapPairs(mapType uint32, retPtr, retLen *uint32) uint32

//go:wasmimport env proxy_set_header_map_pairs
//go:noescape
func hostSetHeaderMapPairs(mapType uint32, data unsafe.Pointer, dataLen uint32) uint32

//go:wasmimport env proxy_get_header_map_value
//go:noescape
func hostGetHeaderMapValue(mapType uint32, key unsafe.Pointer, keyLen uint32, retPtr, retLen *uint32) uint32

//go:wasmimport env proxy_add_header_map_value
//go:noescape
func hostAddHeaderMapValue(mapType uint32, key unsafe.Pointer, keyLen uint32, val unsafe.Pointer, valLen uint32) uint32

//go:wasmimport env proxy_replace_header_map_value
//go:noescape
func hostReplaceHeaderMapValue(mapType uint32, key unsafe.Pointer, keyLen uint32, val unsafe.Pointer, valLen uint32) uint32

//go:wasmimport env proxy_remove_header_map_value
//go:noescape
func hostRemoveHeaderMapValue(mapType uint32, key unsafe.Pointer, keyLen uint32) uint32

//go:wasmimport env proxy_continue_stream
func hostContinueStream(streamType uint32) uint32

//go:wasmimport env proxy_close_stream
func hostCloseStream(streamType uint32) uint32

//go:wasmimport env proxy_send_local_response
//go:noescape
func hostSendLocalResponse(statusCode uint32, details unsafe.Pointer, detailsLen uint32,
	body unsafe.Pointer, bodyLen uint32, headers unsafe.Pointer, headersLen uint32, grpcStatus int32) uint32

//go:wasmimport env proxy_http_call
//go:noescape
func hostHttpCall(upstream unsafe.Pointer, upstreamLen uint32, headers unsafe.Pointer, headersLen uint32,
	body unsafe.Pointer, bodyLen uint32, trailers unsafe.Pointer, trailersLen uint32,
	timeoutMillis uint32, retCallID *uint32) uint32

//go:wasmimport env proxy_get_shared_data
//go:noescape
func hostGetSharedData(key unsafe.Pointer, keyLen uint32, retPtr, retLen, retCAS *uint32) uint32

//go:wasmimport env proxy_set_shared_data
//go:noescape
func hostSetSharedData(key unsafe.Pointer, keyLen uint32, val unsafe.Pointer, valLen uint32, cas uint32) uint32

//go:wasmimport env proxy_register_shared_queue
//go:noescape
func hostRegisterSharedQueue(name unsafe.Pointer, nameLen uint32, retQueueID *uint32) uint32

//go:wasmimport env proxy_resolve_shared_queue
//go:noescape
func hostResolveSharedQueue(vmID unsafe.Pointer, vmIDLen uint32, name unsafe.Pointer, nameLen uint32, retQueueID *uint32) uint32

//go:wasmimport env proxy_enqueue_shared_queue
//go:noescape
func hostEnqueueSharedQueue(queueID uint32, val unsafe.Pointer, valLen uint32) uint32

//go:wasmimport env proxy_dequeue_shared_queue
//go:noescape
func hostDequeueSharedQueue(queueID uint32, retPtr, retLen *uint32) uint32

//go:wasmimport env proxy_define_metric
//go:noescape
func hostDefineMetric(metricType uint32, name unsafe.Pointer, nameLen uint32, retMetricID *uint32) uint32

//go:wasmimport env proxy_increment_metric
func hostIncrementMetric(metricID uint32, delta int64) uint32

//go:wasmimport env proxy_record_metric
func hostRecordMetric(metricID uint32, value uint64) uint32

//go:wasmimport env proxy_get_metric
//go:noescape
func hostGetMetric(metricID uint32, retValue *uint64) uint32

//go:wasmimport env proxy_get_property
//go:noescape
func hostGetProperty(path unsafe.Pointer, pathLen uint32, retPtr, retLen *uint32) uint32

//go:wasmimport env proxy_set_property
//go:noescape
func hostSetProperty(path unsafe.Pointer, pathLen uint32, val unsafe.Pointer, valLen uint32) uint32

//go:wasmimport env proxy_set_effective_context
func hostSetEffectiveContext(contextID uint32) uint32

//go:wasmimport env proxy_call_foreign_function
//go:noescape
func hostCallForeignFunction(name unsafe.Pointer, nameLen uint32, args unsafe.Pointer, argsLen uint32, retPtr, retLen *uint32) uint32

//go:wasmimport env proxy_done
func hostDone() uint32
