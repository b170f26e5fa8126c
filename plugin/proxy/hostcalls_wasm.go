//go:build wasip1

package proxy

import (
	"runtime"
	"unsafe"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// scratch backs proxy_on_memory_allocate and outbound encodings; see arena.
var scratch arena

// wholeBuffer is the max_size used to read a whole buffer: the SDK passes
// math.MaxInt32 to Envoy, which clamps to the buffer's size.
const wholeBuffer = 0x7fffffff

func strArg(s string) (unsafe.Pointer, uint32) {
	return unsafe.Pointer(unsafe.StringData(s)), uint32(len(s))
}

func bytesArg(b []byte) (unsafe.Pointer, uint32) {
	return unsafe.Pointer(unsafe.SliceData(b)), uint32(len(b))
}

// returned turns a host status and the (ptr, len) the host wrote into a slice of
// the arena. Memory the arena did not hand out is refused rather than trusted.
func returned(st, ptr, size uint32) ([]byte, error) {
	if err := Status(st).Err(); err != nil {
		return nil, err
	}
	b, ok := scratch.lookup(uintptr(ptr), int(size))
	if !ok {
		return nil, ErrInvalidMemoryAccess
	}
	return b, nil
}

// encodePairs serializes pairs into arena memory (no allocation in steady state).
func encodePairs(pairs [][2]string) []byte {
	b := scratch.alloc(EncodedPairsLen(pairs))
	if b == nil {
		return nil
	}
	return AppendPairs(b[:0], pairs)
}

// SetVMContext registers the plugin's VM context. Call it from init: in a
// c-shared wasip1 module main never runs.
func SetVMContext(vm types.VMContext) { vmContext = vm }

// Log writes msg at level through proxy_log.
func Log(level LogLevel, msg string) error {
	p, n := strArg(msg)
	st := hostLog(uint32(level), p, n)
	runtime.KeepAlive(msg)
	return Status(st).Err()
}

// LogBytes is Log for a message assembled in a reused buffer.
func LogBytes(level LogLevel, msg []byte) error {
	p, n := bytesArg(msg)
	st := hostLog(uint32(level), p, n)
	runtime.KeepAlive(msg)
	return Status(st).Err()
}

// SetTickPeriodMillis sets the calling root context's tick period; 0 disables it.
func SetTickPeriodMillis(periodMillis uint32) error {
	return Status(hostSetTickPeriodMilliseconds(periodMillis)).Err()
}

// GetBufferBytes reads up to maxSize bytes from start of a host buffer. The
// result aliases the scratch arena (valid until the callback returns).
func GetBufferBytes(bt BufferType, start, maxSize uint32) ([]byte, error) {
	var ptr, size uint32
	st := hostGetBufferBytes(uint32(bt), start, maxSize, &ptr, &size)
	return returned(st, ptr, size)
}

// SetBufferBytes replaces size bytes at start of a host buffer with value:
// start=0,size=0 prepends; start=0,size>=len replaces; start>=len appends
// (spec proxy_set_buffer_bytes).
func SetBufferBytes(bt BufferType, start, size uint32, value []byte) error {
	p, n := bytesArg(value)
	st := hostSetBufferBytes(uint32(bt), start, size, p, n)
	runtime.KeepAlive(value)
	return Status(st).Err()
}

// GetPluginConfiguration returns the plugin configuration (arena memory); call it
// from OnPluginStart.
func GetPluginConfiguration() ([]byte, error) {
	return GetBufferBytes(BufferTypePluginConfiguration, 0, wholeBuffer)
}

// GetVMConfiguration returns the VM configuration (arena memory); call it from
// OnVMStart.
func GetVMConfiguration() ([]byte, error) {
	return GetBufferBytes(BufferTypeVMConfiguration, 0, wholeBuffer)
}

// GetHeaderMapPairs returns the serialized map (docs/abi.md "proxy-wasm ABI v0.2.1") in arena memory;
// decode it with VisitPairs or DecodePairs without allocating.
func GetHeaderMapPairs(mt MapType) ([]byte, error) {
	var ptr, size uint32
	st := hostGetHeaderMapPairs(uint32(mt), &ptr, &size)
	return returned(st, ptr, size)
}

// GetHeaderMap returns a copy of the whole map (allocates).
func GetHeaderMap(mt MapType) ([][2]string, error) {
	b, err := GetHeaderMapPairs(mt)
	if err != nil {
		return nil, err
	}
	return DecodePairsStrings(b)
}

// SetHeaderMapPairs replaces the whole map.
func SetHeaderMapPairs(mt MapType, pairs [][2]string) error {
	enc := encodePairs(pairs)
	if enc == nil {
		return ErrBadArgument
	}
	p, n := bytesArg(enc)
	return Status(hostSetHeaderMapPairs(uint32(mt), p, n)).Err()
}

// GetHeaderMapValue returns the value of key (arena memory); ErrNotFound if absent.
func GetHeaderMapValue(mt MapType, key string) ([]byte, error) {
	var ptr, size uint32
	kp, kn := strArg(key)
	st := hostGetHeaderMapValue(uint32(mt), kp, kn, &ptr, &size)
	runtime.KeepAlive(key)
	return returned(st, ptr, size)
}

// GetHeaderMapValueString is GetHeaderMapValue returning a copy.
func GetHeaderMapValueString(mt MapType, key string) (string, error) {
	b, err := GetHeaderMapValue(mt, key)
	return string(b), err
}

// AddHeaderMapValue appends a value for key (keeping existing ones).
func AddHeaderMapValue(mt MapType, key, value string) error {
	kp, kn := strArg(key)
	vp, vn := strArg(value)
	st := hostAddHeaderMapValue(uint32(mt), kp, kn, vp, vn)
	runtime.KeepAlive(key)
	runtime.KeepAlive(value)
	return Status(st).Err()
}

// ReplaceHeaderMapValue sets key to value, adding it when missing. Whether every
// existing instance is replaced is host behaviour; see the router for the
// defensive pattern.
func ReplaceHeaderMapValue(mt MapType, key, value string) error {
	kp, kn := strArg(key)
	vp, vn := strArg(value)
	st := hostReplaceHeaderMapValue(uint32(mt), kp, kn, vp, vn)
	runtime.KeepAlive(key)
	runtime.KeepAlive(value)
	return Status(st).Err()
}

// RemoveHeaderMapValue removes key.
func RemoveHeaderMapValue(mt MapType, key string) error {
	kp, kn := strArg(key)
	st := hostRemoveHeaderMapValue(uint32(mt), kp, kn)
	runtime.KeepAlive(key)
	return Status(st).Err()
}

// ContinueStream resumes a stream paused with types.ActionPause.
func ContinueStream(st StreamType) error { return Status(hostContinueStream(uint32(st))).Err() }

// CloseStream closes (resets) a stream.
func CloseStream(st StreamType) error { return Status(hostCloseStream(uint32(st))).Err() }

// SendLocalResponse answers the current HTTP stream from the proxy; return
// types.ActionPause afterwards. grpcStatus is NoGrpcStatus for plain HTTP.
func SendLocalResponse(statusCode uint32, details string, body []byte, headers [][2]string, grpcStatus int32) error {
	enc := encodePairs(headers)
	if enc == nil {
		return ErrBadArgument
	}
	dp, dn := strArg(details)
	bp, bn := bytesArg(body)
	hp, hn := bytesArg(enc)
	st := hostSendLocalResponse(statusCode, dp, dn, bp, bn, hp, hn, grpcStatus)
	runtime.KeepAlive(details)
	runtime.KeepAlive(body)
	return Status(st).Err()
}

// DispatchHttpCall sends an HTTP request to the Envoy cluster named cluster
// (headers must carry :method, :path and :authority). callback runs in
// proxy_on_http_call_response of the root context that owns the caller, with the
// caller set as effective context; numHeaders == 0 means failure or timeout.
// Read the response with GetHeaderMapPairs(MapTypeHttpCallResponseHeaders) and
// GetBufferBytes(BufferTypeHttpCallResponseBody, ...).
func DispatchHttpCall(cluster string, headers [][2]string, body []byte, trailers [][2]string,
	timeoutMillis uint32, callback func(numHeaders, bodySize, numTrailers int)) (uint32, error) {
	hdrs := encodePairs(headers)
	trls := encodePairs(trailers)
	if hdrs == nil || trls == nil {
		return 0, ErrBadArgument
	}
	up, un := strArg(cluster)
	hp, hn := bytesArg(hdrs)
	bp, bn := bytesArg(body)
	tp, tn := bytesArg(trls)
	var id uint32
	st := hostHttpCall(up, un, hp, hn, bp, bn, tp, tn, timeoutMillis, &id)
	runtime.KeepAlive(cluster)
	runtime.KeepAlive(body)
	if err := Status(st).Err(); err != nil {
		return 0, err
	}
	registerCallout(id, callback)
	return id, nil
}

// GetSharedData returns the value (arena memory) and CAS of key in the VM's
// shared data; ErrNotFound if absent.
func GetSharedData(key string) ([]byte, uint32, error) {
	var ptr, size, cas uint32
	kp, kn := strArg(key)
	st := hostGetSharedData(kp, kn, &ptr, &size, &cas)
	runtime.KeepAlive(key)
	b, err := returned(st, ptr, size)
	if err != nil {
		return nil, 0, err
	}
	return b, cas, nil
}

// SetSharedData stores value under key. cas 0 is unconditional; otherwise it must
// equal the key's current CAS or ErrCASMismatch is returned. Envoy ignores cas
// when the key is missing (docs/abi.md "Envoy behaviour").
func SetSharedData(key string, value []byte, cas uint32) error {
	kp, kn := strArg(key)
	vp, vn := bytesArg(value)
	st := hostSetSharedData(kp, kn, vp, vn, cas)
	runtime.KeepAlive(key)
	runtime.KeepAlive(value)
	return Status(st).Err()
}

// RegisterSharedQueue creates or opens queue name of this VM id; the calling root
// context receives OnQueueReady for it.
func RegisterSharedQueue(name string) (uint32, error) {
	var id uint32
	np, nn := strArg(name)
	st := hostRegisterSharedQueue(np, nn, &id)
	runtime.KeepAlive(name)
	return id, Status(st).Err()
}

// ResolveSharedQueue finds a queue registered by VM id vmID; ErrNotFound if none.
func ResolveSharedQueue(vmID, name string) (uint32, error) {
	var id uint32
	vp, vn := strArg(vmID)
	np, nn := strArg(name)
	st := hostResolveSharedQueue(vp, vn, np, nn, &id)
	runtime.KeepAlive(vmID)
	runtime.KeepAlive(name)
	return id, Status(st).Err()
}

// EnqueueSharedQueue appends value to the queue.
func EnqueueSharedQueue(queueID uint32, value []byte) error {
	vp, vn := bytesArg(value)
	st := hostEnqueueSharedQueue(queueID, vp, vn)
	runtime.KeepAlive(value)
	return Status(st).Err()
}

// DequeueSharedQueue pops the oldest value (arena memory); ErrEmpty when empty.
func DequeueSharedQueue(queueID uint32) ([]byte, error) {
	var ptr, size uint32
	st := hostDequeueSharedQueue(queueID, &ptr, &size)
	return returned(st, ptr, size)
}

// DefineMetric defines (or looks up) a metric and returns its id.
func DefineMetric(mt MetricType, name string) (uint32, error) {
	var id uint32
	np, nn := strArg(name)
	st := hostDefineMetric(uint32(mt), np, nn, &id)
	runtime.KeepAlive(name)
	return id, Status(st).Err()
}

// IncrementMetric adds delta to a counter or gauge (negative deltas only for
// gauges).
func IncrementMetric(metricID uint32, delta int64) error {
	return Status(hostIncrementMetric(metricID, delta)).Err()
}

// RecordMetric sets a gauge or records a histogram sample.
func RecordMetric(metricID uint32, value uint64) error {
	return Status(hostRecordMetric(metricID, value)).Err()
}

// GetMetric returns a metric's current value.
func GetMetric(metricID uint32) (uint64, error) {
	var v uint64
	st := hostGetMetric(metricID, &v)
	return v, Status(st).Err()
}

// GetProperty reads a host property (e.g. {"plugin_vm_id"}, {"upstream",
// "address"}); the result is raw bytes in arena memory.
func GetProperty(path []string) ([]byte, error) {
	enc := encodePath(path)
	if enc == nil {
		return nil, ErrBadArgument
	}
	var ptr, size uint32
	pp, pn := bytesArg(enc)
	st := hostGetProperty(pp, pn, &ptr, &size)
	return returned(st, ptr, size)
}

// SetProperty writes a host property.
func SetProperty(path []string, value []byte) error {
	enc := encodePath(path)
	if enc == nil {
		return ErrBadArgument
	}
	pp, pn := bytesArg(enc)
	vp, vn := bytesArg(value)
	st := hostSetProperty(pp, pn, vp, vn)
	runtime.KeepAlive(value)
	return Status(st).Err()
}

func encodePath(path []string) []byte {
	if len(path) == 0 {
		return nil
	}
	n := len(path) - 1
	for _, s := range path {
		n += len(s)
	}
	b := scratch.alloc(n)
	if b == nil {
		return nil
	}
	return AppendPropertyPath(b[:0], path)
}

// SetEffectiveContext directs following host calls at contextID (e.g. to answer
// or resume a stream from a root-context callback).
func SetEffectiveContext(contextID uint32) error {
	return Status(hostSetEffectiveContext(contextID)).Err()
}

// CallForeignFunction calls a host-specific function (Envoy: "clear_route_cache",
// "set_envoy_filter_state"); the result is arena memory.
func CallForeignFunction(name string, args []byte) ([]byte, error) {
	var ptr, size uint32
	np, nn := strArg(name)
	ap, an := bytesArg(args)
	st := hostCallForeignFunction(np, nn, ap, an, &ptr, &size)
	runtime.KeepAlive(name)
	runtime.KeepAlive(args)
	return returned(st, ptr, size)
}

// Done tells the host that a root context which returned false from
// OnPluginDone has finished (proxy_done).
func Done() error { return Status(hostDone()).Err() }
