package proxy

// LogLevel is proxy_log_level_t (docs/abi.md "proxy-wasm ABI v0.2.1").
type LogLevel uint32

// Log levels.
const (
	LogLevelTrace    LogLevel = 0
	LogLevelDebug    LogLevel = 1
	LogLevelInfo     LogLevel = 2
	LogLevelWarn     LogLevel = 3
	LogLevelError    LogLevel = 4
	LogLevelCritical LogLevel = 5
)

// BufferType is proxy_buffer_type_t (docs/abi.md "proxy-wasm ABI v0.2.1").
type BufferType uint32

// Buffer types.
const (
	BufferTypeHttpRequestBody          BufferType = 0
	BufferTypeHttpResponseBody         BufferType = 1
	BufferTypeDownstreamData           BufferType = 2
	BufferTypeUpstreamData             BufferType = 3
	BufferTypeHttpCallResponseBody     BufferType = 4
	BufferTypeGrpcCallMessage          BufferType = 5
	BufferTypeVMConfiguration          BufferType = 6
	BufferTypePluginConfiguration      BufferType = 7
	BufferTypeForeignFunctionArguments BufferType = 8
)

// MapType is proxy_map_type_t (docs/abi.md "proxy-wasm ABI v0.2.1").
type MapType uint32

// Map types.
const (
	MapTypeHttpRequestHeaders       MapType = 0
	MapTypeHttpRequestTrailers      MapType = 1
	MapTypeHttpResponseHeaders      MapType = 2
	MapTypeHttpResponseTrailers     MapType = 3
	MapTypeGrpcCallInitialMetadata  MapType = 4
	MapTypeGrpcCallTrailingMetadata MapType = 5
	MapTypeHttpCallResponseHeaders  MapType = 6
	MapTypeHttpCallResponseTrailers MapType = 7
)

// StreamType is proxy_stream_type_t (docs/abi.md "proxy-wasm ABI v0.2.1").
type StreamType uint32

// Stream types.
const (
	StreamTypeHttpRequest  StreamType = 0
	StreamTypeHttpResponse StreamType = 1
	StreamTypeDownstream   StreamType = 2
	StreamTypeUpstream     StreamType = 3
)

// MetricType is proxy_metric_type_t (docs/abi.md "proxy-wasm ABI v0.2.1").
type MetricType uint32

// Metric types.
const (
	MetricTypeCounter   MetricType = 0
	MetricTypeGauge     MetricType = 1
	MetricTypeHistogram MetricType = 2
)

// NoGrpcStatus is the grpc_status argument of SendLocalResponse for a plain HTTP
// reply (-1, i.e. 0xFFFFFFFF on the wire; the SDK documents
// the same value).
const NoGrpcStatus int32 = -1

// PanicsMetricName is the counter every recovered panic increments.
const PanicsMetricName = "gpuroute_panics_total"
