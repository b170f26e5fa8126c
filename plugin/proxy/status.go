package proxy

import "strconv"

// Status is a proxy_status_t returned by every host call (docs/abi.md "proxy-wasm ABI v0.2.1", spec
// "Status codes"). A Status other than StatusOK is also an error; compare with
// errors.Is against the Err* values.
type Status uint32

// The spec's status codes. 5, 9 and 11 are unassigned in v0.2.1.
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

// Error values for the non-OK status codes. Host calls return exactly these
// values (never wrapped), so both == and errors.Is work.
var (
	// ErrNotFound: the key, header, property, queue or context does not exist.
	ErrNotFound error = StatusNotFound
	// ErrBadArgument: the host rejected an argument (e.g. an unknown cluster or a
	// proxy_http_call without :method, :path, :authority).
	ErrBadArgument error = StatusBadArgument
	// ErrSerializationFailure: the host could not serialize a value.
	ErrSerializationFailure error = StatusSerializationFailure
	// ErrParseFailure: the host could not parse what the plugin sent.
	ErrParseFailure error = StatusParseFailure
	// ErrInvalidMemoryAccess: a pointer/length pair was outside guest memory, or
	// the host returned memory this binding did not allocate.
	ErrInvalidMemoryAccess error = StatusInvalidMemoryAccess
	// ErrEmpty: the shared queue has nothing to dequeue.
	ErrEmpty error = StatusEmpty
	// ErrCASMismatch: proxy_set_shared_data with a stale CAS; re-read and retry.
	ErrCASMismatch error = StatusCASMismatch
	// ErrInternalFailure: the host failed (e.g. a call that could not be sent).
	ErrInternalFailure error = StatusInternalFailure
	// ErrUnimplemented: the host (or this build of the binding) lacks the call.
	ErrUnimplemented error = StatusUnimplemented
)

// Error implements error. Codes outside the spec print their number.
func (s Status) Error() string {
	switch s {
	case StatusOK:
		return "proxy: ok"
	case StatusNotFound:
		return "proxy: not found"
	case StatusBadArgument:
		return "proxy: bad argument"
	case StatusSerializationFailure:
		return "proxy: serialization failure"
	case StatusParseFailure:
		return "proxy: parse failure"
	case StatusInvalidMemoryAccess:
		return "proxy: invalid memory access"
	case StatusEmpty:
		return "proxy: empty"
	case StatusCASMismatch:
		return "proxy: cas mismatch"
	case StatusInternalFailure:
		return "proxy: internal failure"
	case StatusUnimplemented:
		return "proxy: unimplemented"
	}
	return "proxy: unknown host status " + strconv.FormatUint(uint64(s), 10)
}

// Err maps a status to its error: nil for StatusOK, one of the Err* values for a
// spec code, and the Status itself (still an error) for an unknown code. It
// never allocates for spec codes.
func (s Status) Err() error {
	switch s {
	case StatusOK:
		return nil
	case StatusNotFound:
		return ErrNotFound
	case StatusBadArgument:
		return ErrBadArgument
	case StatusSerializationFailure:
		return ErrSerializationFailure
	case StatusParseFailure:
		return ErrParseFailure
	case StatusInvalidMemoryAccess:
		return ErrInvalidMemoryAccess
	case StatusEmpty:
		return ErrEmpty
	case StatusCASMismatch:
		return ErrCASMismatch
	case StatusInternalFailure:
		return ErrInternalFailure
	case StatusUnimplemented:
		return ErrUnimplemented
	}
	return s
}
