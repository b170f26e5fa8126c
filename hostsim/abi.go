package hostsim

// Wire constants of proxy-wasm ABI v0.2.1 (github.com/proxy-wasm/spec,
// abi-versions/v0.2.1, "Status FINAL") and of WASI preview 1, in one place.

// Status is a proxy_status_t returned by every host call (spec "Return values").
type Status uint32

// proxy_status_t values (spec abi-versions/v0.2.1 "proxy_status_t").
const (
	StatusOK                   Status = 0
	StatusNotFound             Status = 1
	StatusBadArgument          Status = 2
	StatusSerializationFailure Status = 3
	StatusParseFailure         Status = 4
	StatusInvalidMemoryAccess  Status = 6
	StatusEmpty                Status = 7
	StatusCASMismatch          Status = 8
	StatusInternalFailure      Status = 10
	StatusUnimplemented        Status = 12
)

// Action is a proxy_action_t returned by the stream callbacks.
type Action uint32

// proxy_action_t values; Envoy maps 2–4 to further FilterHeadersStatus
// variants, which hostsim passes through unchanged.
const (
	ActionContinue Action = 0
	ActionPause    Action = 1
)

// LogLevel is a proxy_log_level_t.
type LogLevel uint32

// proxy_log_level_t values. The zero value (Trace) lets every message through.
const (
	LogTrace    LogLevel = 0
	LogDebug    LogLevel = 1
	LogInfo     LogLevel = 2
	LogWarn     LogLevel = 3
	LogError    LogLevel = 4
	LogCritical LogLevel = 5
)

// String returns the Envoy spelling of the level.
func (l LogLevel) String() string {
	switch l {
	case LogTrace:
		return "trace"
	case LogDebug:
		return "debug"
	case LogInfo:
		return "info"
	case LogWarn:
		return "warn"
	case LogError:
		return "error"
	case LogCritical:
		return "critical"
	}
	return "level(" + itoa(int64(l)) + ")"
}

// BufferType is a proxy_buffer_type_t.
type BufferType uint32

// proxy_buffer_type_t values.
const (
	BufferHTTPRequestBody      BufferType = 0
	BufferHTTPResponseBody     BufferType = 1
	BufferDownstreamData       BufferType = 2
	BufferUpstreamData         BufferType = 3
	BufferHTTPCallResponseBody BufferType = 4
	BufferGRPCCallMessage      BufferType = 5
	BufferVMConfiguration      BufferType = 6
	BufferPluginConfiguration  BufferType = 7
	BufferForeignFunctionArgs  BufferType = 8
	maxBufferType                         = BufferForeignFunctionArgs
)

// MapType is a proxy_map_type_t.
type MapType uint32

// proxy_map_type_t values.
const (
	MapHTTPRequestHeaders       MapType = 0
	MapHTTPRequestTrailers      MapType = 1
	MapHTTPResponseHeaders      MapType = 2
	MapHTTPResponseTrailers     MapType = 3
	MapGRPCCallInitialMetadata  MapType = 4
	MapGRPCCallTrailingMetadata MapType = 5
	MapHTTPCallResponseHeaders  MapType = 6
	MapHTTPCallResponseTrailers MapType = 7
	maxMapType                          = MapHTTPCallResponseTrailers
)

// StreamType is a proxy_stream_type_t.
type StreamType uint32

// proxy_stream_type_t values.
const (
	StreamRequest    StreamType = 0
	StreamResponse   StreamType = 1
	StreamDownstream StreamType = 2
	StreamUpstream   StreamType = 3
)

// MetricType is a proxy_metric_type_t.
type MetricType uint32

// proxy_metric_type_t values.
const (
	MetricCounter   MetricType = 0
	MetricGauge     MetricType = 1
	MetricHistogram MetricType = 2
)

// String names the metric type.
func (t MetricType) String() string {
	switch t {
	case MetricCounter:
		return "counter"
	case MetricGauge:
		return "gauge"
	case MetricHistogram:
		return "histogram"
	}
	return "metric_type(" + itoa(int64(t)) + ")"
}

// WASI preview 1 errno values (WASI snapshot_preview1 witx "errno").
const (
	errnoSuccess = 0
	errnoBadf    = 8
	errnoFault   = 21
	errnoInval   = 28
	errnoNosys   = 52
	errnoNotsup  = 58
)

// Module names the host provides (spec abi-versions/v0.2.1 and its WASI "Logging/Clocks"
// section of the spec).
const (
	EnvModuleName  = "env"
	WASIModuleName = "wasi_snapshot_preview1"
)

// Guest export names (spec abi-versions/v0.2.1, "Callbacks").
const (
	exportABIVersion         = "proxy_abi_version_0_2_1"
	exportInitialize         = "_initialize"
	exportMemory             = "memory"
	exportMemoryAllocate     = "proxy_on_memory_allocate"
	exportOnVMStart          = "proxy_on_vm_start"
	exportOnConfigure        = "proxy_on_configure"
	exportOnContextCreate    = "proxy_on_context_create"
	exportOnTick             = "proxy_on_tick"
	exportOnHTTPCallResponse = "proxy_on_http_call_response"
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

// RequiredExports lists the spec's guest exports a gpuroute module must
// have; TestRealModuleImportsAllowList holds the built module to it.
var RequiredExports = []string{
	exportABIVersion, exportInitialize, exportMemory, exportMemoryAllocate,
	exportOnVMStart, exportOnConfigure, exportOnContextCreate, exportOnTick,
	exportOnHTTPCallResponse, exportOnQueueReady,
	exportOnRequestHeaders, exportOnRequestBody, exportOnRequestTrailers,
	exportOnResponseHeaders, exportOnResponseBody, exportOnResponseTrailers,
	exportOnDone, exportOnLog, exportOnDelete,
}

// EnvoyWASIImports is the WASI preview 1 set proxy-wasm-cpp-host provides
// from PR #427 (Envoy 1.33) to PR #533: the 15 functions of its
// FOR_ALL_WASI_FUNCTIONS before #427 and the sched_yield, poll_oneoff and
// fd_fdstat_set_flags stubs #427 added. PR #533 provides the rest of
// preview 1 and removes none, so a module importing only these loads in
// every Envoy from 1.33 on; one importing anything else fails to load
// before #533 (TestRealModuleImportsAllowList).
var EnvoyWASIImports = []string{
	"sched_yield", "proc_exit", "args_get", "args_sizes_get", "clock_time_get",
	"environ_get", "environ_sizes_get", "fd_write", "random_get", "poll_oneoff",
	"fd_fdstat_get", "fd_fdstat_set_flags", "fd_prestat_get", "fd_prestat_dir_name",
	"fd_close", "fd_read", "fd_seek", "path_open",
}

// Well-known HTTP pseudo-headers proxy_http_call requires (spec proxy_http_call).
const (
	headerMethod    = ":method"
	headerPath      = ":path"
	headerAuthority = ":authority"
	headerStatus    = ":status"
)

// Headers Envoy sets on a local reply (envoy source/common/http/utility.cc
// prepareLocalReply).
const (
	headerContentLength = "content-length"
	headerContentType   = "content-type"
	contentTypeText     = "text/plain"
)
