//go:build !wasip1

package proxy

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// The native build: the same API forwarding to the SDK's proxywasm package, so
// plugin contexts run unchanged under proxytest. Calls the SDK has no
// counterpart for return ErrUnimplemented. Allocation here is of no concern: it
// never runs inside Envoy.

// sdkErr maps the SDK's error values onto this package's.
func sdkErr(err error) error {
	switch err {
	case nil:
		return nil
	case types.ErrorStatusNotFound:
		return ErrNotFound
	case types.ErrorStatusBadArgument:
		return ErrBadArgument
	case types.ErrorStatusEmpty:
		return ErrEmpty
	case types.ErrorStatusCasMismatch:
		return ErrCASMismatch
	case types.ErrorInternalFailure:
		return ErrInternalFailure
	case types.ErrorUnimplemented:
		return ErrUnimplemented
	}
	// The SDK's own argument checks ("path must not be empty", ...).
	return ErrBadArgument
}

// guard turns an SDK panic (its metric helpers panic on host errors, proxytest
// panics on unsupported map types) into ErrBadArgument.
func guard(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = ErrBadArgument
		}
	}()
	return f()
}

// window applies start/maxSize to a whole buffer, as the host would.
func window(b []byte, start, maxSize uint32) []byte {
	if int(start) >= len(b) {
		return nil
	}
	b = b[start:]
	if uint64(maxSize) < uint64(len(b)) {
		b = b[:maxSize]
	}
	return b
}

// SetVMContext registers the plugin's VM context. Call it from init: in a
// c-shared wasip1 module main never runs.
func SetVMContext(vm types.VMContext) { proxywasm.SetVMContext(vm) }

// Log writes msg at level through proxy_log.
func Log(level LogLevel, msg string) error {
	switch level {
	case LogLevelTrace:
		proxywasm.LogTrace(msg)
	case LogLevelDebug:
		proxywasm.LogDebug(msg)
	case LogLevelInfo:
		proxywasm.LogInfo(msg)
	case LogLevelWarn:
		proxywasm.LogWarn(msg)
	case LogLevelError:
		proxywasm.LogError(msg)
	case LogLevelCritical:
		proxywasm.LogCritical(msg)
	default:
		return ErrBadArgument
	}
	return nil
}

// LogBytes is Log for a message assembled in a reused buffer.
func LogBytes(level LogLevel, msg []byte) error { return Log(level, string(msg)) }

// SetTickPeriodMillis sets the calling root context's tick period; 0 disables it.
func SetTickPeriodMillis(periodMillis uint32) error {
	return sdkErr(proxywasm.SetTickPeriodMilliSeconds(periodMillis))
}

// GetBufferBytes reads up to maxSize bytes from start of a host buffer. The
// result aliases the scratch arena (valid until the callback returns).
func GetBufferBytes(bt BufferType, start, maxSize uint32) ([]byte, error) {
	var b []byte
	var err error
	switch bt {
	case BufferTypeVMConfiguration:
		b, err = proxywasm.GetVMConfiguration()
		b = window(b, start, maxSize)
	case BufferTypePluginConfiguration:
		b, err = proxywasm.GetPluginConfiguration()
		b = window(b, start, maxSize)
	case BufferTypeHttpRequestBody:
		b, err = proxywasm.GetHttpRequestBody(int(start), int(maxSize))
	case BufferTypeHttpResponseBody:
		b, err = proxywasm.GetHttpResponseBody(int(start), int(maxSize))
	case BufferTypeHttpCallResponseBody:
		b, err = proxywasm.GetHttpCallResponseBody(int(start), int(maxSize))
	case BufferTypeDownstreamData:
		b, err = proxywasm.GetDownstreamData(int(start), int(maxSize))
	case BufferTypeUpstreamData:
		b, err = proxywasm.GetUpstreamData(int(start), int(maxSize))
	default:
		return nil, ErrUnimplemented
	}
	if err != nil {
		return nil, sdkErr(err)
	}
	return b, nil
}

// SetBufferBytes replaces size bytes at start of a host buffer with value:
// start=0,size=0 prepends; start=0,size>=len replaces; start>=len appends
// (spec proxy_set_buffer_bytes).
func SetBufferBytes(bt BufferType, start, size uint32, value []byte) error {
	var prepend, replace, appendTo func([]byte) error
	switch bt {
	case BufferTypeHttpRequestBody:
		prepend, replace, appendTo = proxywasm.PrependHttpRequestBody, proxywasm.ReplaceHttpRequestBody, proxywasm.AppendHttpRequestBody
	case BufferTypeHttpResponseBody:
		prepend, replace, appendTo = proxywasm.PrependHttpResponseBody, proxywasm.ReplaceHttpResponseBody, proxywasm.AppendHttpResponseBody
	case BufferTypeDownstreamData:
		prepend, replace, appendTo = proxywasm.PrependDownstreamData, proxywasm.ReplaceDownstreamData, proxywasm.AppendDownstreamData
	case BufferTypeUpstreamData:
		prepend, replace, appendTo = proxywasm.PrependUpstreamData, proxywasm.ReplaceUpstreamData, proxywasm.AppendUpstreamData
	default:
		return ErrUnimplemented
	}
	switch {
	case start == 0 && size == 0:
		return sdkErr(prepend(value))
	case start == 0:
		return sdkErr(replace(value))
	default:
		return sdkErr(appendTo(value))
	}
}

// GetPluginConfiguration returns the plugin configuration (arena memory); call it
// from OnPluginStart.
func GetPluginConfiguration() ([]byte, error) {
	b, err := proxywasm.GetPluginConfiguration()
	return b, sdkErr(err)
}

// GetVMConfiguration returns the VM configuration (arena memory); call it from
// OnVMStart.
func GetVMConfiguration() ([]byte, error) {
	b, err := proxywasm.GetVMConfiguration()
	return b, sdkErr(err)
}

// GetHeaderMapPairs returns the serialized map (docs/abi.md "proxy-wasm ABI v0.2.1") in arena memory;
// decode it with VisitPairs or DecodePairs without allocating.
func GetHeaderMapPairs(mt MapType) ([]byte, error) {
	m, err := GetHeaderMap(mt)
	if err != nil {
		return nil, err
	}
	return AppendPairs(nil, m), nil
}

// GetHeaderMap returns a copy of the whole map (allocates).
func GetHeaderMap(mt MapType) ([][2]string, error) {
	var m [][2]string
	err := guard(func() (err error) {
		switch mt {
		case MapTypeHttpRequestHeaders:
			m, err = proxywasm.GetHttpRequestHeaders()
		case MapTypeHttpRequestTrailers:
			m, err = proxywasm.GetHttpRequestTrailers()
		case MapTypeHttpResponseHeaders:
			m, err = proxywasm.GetHttpResponseHeaders()
		case MapTypeHttpResponseTrailers:
			m, err = proxywasm.GetHttpResponseTrailers()
		case MapTypeHttpCallResponseHeaders:
			m, err = proxywasm.GetHttpCallResponseHeaders()
		case MapTypeHttpCallResponseTrailers:
			m, err = proxywasm.GetHttpCallResponseTrailers()
		default:
			return ErrUnimplemented
		}
		return sdkErr(err)
	})
	return m, err
}

// SetHeaderMapPairs replaces the whole map.
func SetHeaderMapPairs(mt MapType, pairs [][2]string) error {
	return guard(func() error {
		switch mt {
		case MapTypeHttpRequestHeaders:
			return sdkErr(proxywasm.ReplaceHttpRequestHeaders(pairs))
		case MapTypeHttpRequestTrailers:
			return sdkErr(proxywasm.ReplaceHttpRequestTrailers(pairs))
		case MapTypeHttpResponseHeaders:
			return sdkErr(proxywasm.ReplaceHttpResponseHeaders(pairs))
		case MapTypeHttpResponseTrailers:
			return sdkErr(proxywasm.ReplaceHttpResponseTrailers(pairs))
		}
		return ErrUnimplemented
	})
}

// GetHeaderMapValue returns the value of key (arena memory); ErrNotFound if absent.
func GetHeaderMapValue(mt MapType, key string) ([]byte, error) {
	v, err := GetHeaderMapValueString(mt, key)
	if err != nil {
		return nil, err
	}
	return []byte(v), nil
}

// GetHeaderMapValueString is GetHeaderMapValue returning a copy.
func GetHeaderMapValueString(mt MapType, key string) (string, error) {
	var v string
	err := guard(func() (err error) {
		switch mt {
		case MapTypeHttpRequestHeaders:
			v, err = proxywasm.GetHttpRequestHeader(key)
		case MapTypeHttpRequestTrailers:
			v, err = proxywasm.GetHttpRequestTrailer(key)
		case MapTypeHttpResponseHeaders:
			v, err = proxywasm.GetHttpResponseHeader(key)
		case MapTypeHttpResponseTrailers:
			v, err = proxywasm.GetHttpResponseTrailer(key)
		default:
			m, err := GetHeaderMap(mt)
			if err != nil {
				return err
			}
			for _, p := range m {
				if p[0] == key {
					v = p[1]
					return nil
				}
			}
			return ErrNotFound
		}
		return sdkErr(err)
	})
	return v, err
}

// AddHeaderMapValue appends a value for key (keeping existing ones).
func AddHeaderMapValue(mt MapType, key, value string) error {
	return guard(func() error {
		switch mt {
		case MapTypeHttpRequestHeaders:
			return sdkErr(proxywasm.AddHttpRequestHeader(key, value))
		case MapTypeHttpRequestTrailers:
			return sdkErr(proxywasm.AddHttpRequestTrailer(key, value))
		case MapTypeHttpResponseHeaders:
			return sdkErr(proxywasm.AddHttpResponseHeader(key, value))
		case MapTypeHttpResponseTrailers:
			return sdkErr(proxywasm.AddHttpResponseTrailer(key, value))
		}
		return ErrUnimplemented
	})
}

// ReplaceHeaderMapValue sets key to value, adding it when missing. Whether every
// existing instance is replaced is host behaviour; see the router for the
// defensive pattern.
func ReplaceHeaderMapValue(mt MapType, key, value string) error {
	return guard(func() error {
		switch mt {
		case MapTypeHttpRequestHeaders:
			return sdkErr(proxywasm.ReplaceHttpRequestHeader(key, value))
		case MapTypeHttpRequestTrailers:
			return sdkErr(proxywasm.ReplaceHttpRequestTrailer(key, value))
		case MapTypeHttpResponseHeaders:
			return sdkErr(proxywasm.ReplaceHttpResponseHeader(key, value))
		case MapTypeHttpResponseTrailers:
			return sdkErr(proxywasm.ReplaceHttpResponseTrailer(key, value))
		}
		return ErrUnimplemented
	})
}

// RemoveHeaderMapValue removes key.
func RemoveHeaderMapValue(mt MapType, key string) error {
	return guard(func() error {
		switch mt {
		case MapTypeHttpRequestHeaders:
			return sdkErr(proxywasm.RemoveHttpRequestHeader(key))
		case MapTypeHttpRequestTrailers:
			return sdkErr(proxywasm.RemoveHttpRequestTrailer(key))
		case MapTypeHttpResponseHeaders:
			return sdkErr(proxywasm.RemoveHttpResponseHeader(key))
		case MapTypeHttpResponseTrailers:
			return sdkErr(proxywasm.RemoveHttpResponseTrailer(key))
		}
		return ErrUnimplemented
	})
}

// ContinueStream resumes a stream paused with types.ActionPause.
func ContinueStream(st StreamType) error {
	switch st {
	case StreamTypeHttpRequest:
		return sdkErr(proxywasm.ResumeHttpRequest())
	case StreamTypeHttpResponse:
		return sdkErr(proxywasm.ResumeHttpResponse())
	case StreamTypeDownstream, StreamTypeUpstream:
		return sdkErr(proxywasm.ContinueTcpStream())
	}
	return ErrBadArgument
}

// CloseStream closes (resets) a stream.
func CloseStream(st StreamType) error {
	switch st {
	case StreamTypeDownstream:
		return sdkErr(proxywasm.CloseDownstream())
	case StreamTypeUpstream:
		return sdkErr(proxywasm.CloseUpstream())
	}
	return ErrUnimplemented
}

// SendLocalResponse answers the current HTTP stream from the proxy; return
// types.ActionPause afterwards. grpcStatus is NoGrpcStatus for plain HTTP.
func SendLocalResponse(statusCode uint32, details string, body []byte, headers [][2]string, grpcStatus int32) error {
	// The SDK drops the details string; proxytest records it empty.
	return sdkErr(proxywasm.SendHttpResponse(statusCode, headers, body, grpcStatus))
}

// DispatchHttpCall sends an HTTP request to the Envoy cluster named cluster
// (headers must carry :method, :path and :authority). callback runs in
// proxy_on_http_call_response of the root context that owns the caller, with the
// caller set as effective context; numHeaders == 0 means failure or timeout.
// Read the response with GetHeaderMapPairs(MapTypeHttpCallResponseHeaders) and
// GetBufferBytes(BufferTypeHttpCallResponseBody, ...).
func DispatchHttpCall(cluster string, headers [][2]string, body []byte, trailers [][2]string,
	timeoutMillis uint32, callback func(numHeaders, bodySize, numTrailers int)) (uint32, error) {
	if callback == nil {
		callback = func(int, int, int) {}
	}
	id, err := proxywasm.DispatchHttpCall(cluster, headers, body, trailers, timeoutMillis, callback)
	return id, sdkErr(err)
}

// GetSharedData returns the value (arena memory) and CAS of key in the VM's
// shared data; ErrNotFound if absent.
func GetSharedData(key string) ([]byte, uint32, error) {
	v, cas, err := proxywasm.GetSharedData(key)
	if err != nil {
		return nil, 0, sdkErr(err)
	}
	return v, cas, nil
}

// SetSharedData stores value under key. cas 0 is unconditional; otherwise it must
// equal the key's current CAS or ErrCASMismatch is returned. Envoy ignores cas
// when the key is missing (docs/abi.md "Envoy behaviour").
func SetSharedData(key string, value []byte, cas uint32) error {
	return sdkErr(proxywasm.SetSharedData(key, value, cas))
}

// RegisterSharedQueue creates or opens queue name of this VM id; the calling root
// context receives OnQueueReady for it.
func RegisterSharedQueue(name string) (uint32, error) {
	id, err := proxywasm.RegisterSharedQueue(name)
	return id, sdkErr(err)
}

// ResolveSharedQueue finds a queue registered by VM id vmID; ErrNotFound if none.
func ResolveSharedQueue(vmID, name string) (uint32, error) {
	id, err := proxywasm.ResolveSharedQueue(vmID, name)
	return id, sdkErr(err)
}

// EnqueueSharedQueue appends value to the queue.
func EnqueueSharedQueue(queueID uint32, value []byte) error {
	return sdkErr(proxywasm.EnqueueSharedQueue(queueID, value))
}

// DequeueSharedQueue pops the oldest value (arena memory); ErrEmpty when empty.
func DequeueSharedQueue(queueID uint32) ([]byte, error) {
	v, err := proxywasm.DequeueSharedQueue(queueID)
	return v, sdkErr(err)
}

// metricTypes remembers each defined metric's type: the SDK exposes typed
// handles while the ABI (and this API) speaks in ids.
var metricTypes = map[uint32]MetricType{}

// DefineMetric defines (or looks up) a metric and returns its id.
func DefineMetric(mt MetricType, name string) (uint32, error) {
	var id uint32
	err := guard(func() error {
		switch mt {
		case MetricTypeCounter:
			id = uint32(proxywasm.DefineCounterMetric(name))
		case MetricTypeGauge:
			id = uint32(proxywasm.DefineGaugeMetric(name))
		case MetricTypeHistogram:
			id = uint32(proxywasm.DefineHistogramMetric(name))
		default:
			return ErrBadArgument
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	metricTypes[id] = mt
	return id, nil
}

// IncrementMetric adds delta to a counter or gauge (negative deltas only for
// gauges).
func IncrementMetric(metricID uint32, delta int64) error {
	return guard(func() error {
		switch metricTypes[metricID] {
		case MetricTypeCounter:
			if delta < 0 {
				return ErrBadArgument
			}
			proxywasm.MetricCounter(metricID).Increment(uint64(delta))
		case MetricTypeGauge:
			proxywasm.MetricGauge(metricID).Add(delta)
		default:
			return ErrBadArgument
		}
		return nil
	})
}

// RecordMetric sets a gauge or records a histogram sample.
func RecordMetric(metricID uint32, value uint64) error {
	return guard(func() error {
		switch metricTypes[metricID] {
		case MetricTypeGauge:
			g := proxywasm.MetricGauge(metricID)
			g.Add(int64(value) - g.Value())
		case MetricTypeHistogram:
			proxywasm.MetricHistogram(metricID).Record(value)
		default:
			return ErrBadArgument
		}
		return nil
	})
}

// GetMetric returns a metric's current value.
func GetMetric(metricID uint32) (uint64, error) {
	var v uint64
	err := guard(func() error {
		mt, ok := metricTypes[metricID]
		if !ok {
			return ErrNotFound
		}
		switch mt {
		case MetricTypeCounter:
			v = proxywasm.MetricCounter(metricID).Value()
		case MetricTypeGauge:
			v = uint64(proxywasm.MetricGauge(metricID).Value())
		default:
			v = proxywasm.MetricHistogram(metricID).Value()
		}
		return nil
	})
	return v, err
}

// GetProperty reads a host property (e.g. {"plugin_vm_id"}, {"upstream",
// "address"}); the result is raw bytes in arena memory.
func GetProperty(path []string) ([]byte, error) {
	v, err := proxywasm.GetProperty(path)
	return v, sdkErr(err)
}

// SetProperty writes a host property.
func SetProperty(path []string, value []byte) error {
	return sdkErr(proxywasm.SetProperty(path, value))
}

// SetEffectiveContext directs following host calls at contextID (e.g. to answer
// or resume a stream from a root-context callback).
func SetEffectiveContext(contextID uint32) error {
	return sdkErr(proxywasm.SetEffectiveContext(contextID))
}

// CallForeignFunction calls a host-specific function (Envoy: "clear_route_cache",
// "set_envoy_filter_state"); the result is arena memory.
func CallForeignFunction(name string, args []byte) ([]byte, error) {
	v, err := proxywasm.CallForeignFunction(name, args)
	return v, sdkErr(err)
}

// Done tells the host that a root context which returned false from
// OnPluginDone has finished (proxy_done).
func Done() error {
	proxywasm.PluginDone()
	return nil
}
