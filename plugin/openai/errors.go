package openai

import "strconv"

// Code classifies a parse failure so the plugin can count failures by kind
// without formatting a message.
type Code uint8

// Failure kinds. Every Error has one; the zero Code is never returned.
const (
	CodeNotJSON   Code = iota + 1 // the body is not one JSON object
	CodeTooDeep                   // arrays/objects nested deeper than MaxDepth
	CodeTruncated                 // a body not read as cut ends inside a JSON object
	CodeNoModel                   // "model" absent, null, empty, or cut off by truncation
	CodeBadField                  // a field read by this package has the wrong type or range
)

// Error is the error ParseText returns for bad input. It lives inside the
// Parser (returning it costs no allocation) and is overwritten by the next
// call, so copy what you need before parsing again.
// Compare with errors.Is against ErrNotJSON, ErrTooDeep, ErrTruncated,
// ErrNoModel or ErrBadField, or switch on Code.
type Error struct {
	Code   Code
	Field  string // wire name of the offending field for CodeBadField, e.g. "max_tokens"
	Rule   string // what the field must be, e.g. "an integer >= 0 or null"
	Offset int    // byte offset in the body for CodeNotJSON and CodeTooDeep, else -1

	value    [32]byte // head of the offending raw value, copied
	valueLen int
}

// Sentinel errors for errors.Is. They match any *Error with the same Code.
var (
	ErrNotJSON   error = &Error{Code: CodeNotJSON, Offset: -1}
	ErrTooDeep   error = &Error{Code: CodeTooDeep, Offset: -1}
	ErrTruncated error = &Error{Code: CodeTruncated, Offset: -1}
	ErrNoModel   error = &Error{Code: CodeNoModel, Offset: -1}
	ErrBadField  error = &Error{Code: CodeBadField, Offset: -1}
)

// Value returns the first bytes (at most 32) of the offending raw value.
func (e *Error) Value() []byte { return e.value[:e.valueLen] }

// Is makes errors.Is(err, ErrBadField) and friends match by Code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Error formats the failure; it allocates, so call it off the request path.
func (e *Error) Error() string {
	switch e.Code {
	case CodeNotJSON:
		return "openai: body is not a JSON object: unexpected byte at offset " + strconv.Itoa(e.Offset)
	case CodeTooDeep:
		return "openai: JSON nesting deeper than " + strconv.Itoa(MaxDepth) + " at offset " + strconv.Itoa(e.Offset)
	case CodeTruncated:
		return "openai: body ends inside a JSON value (ParseText with truncated set reads bodies cut at the buffer limit)"
	case CodeNoModel:
		return `openai: request has no "model" string`
	case CodeBadField:
		return "openai: field " + strconv.Quote(e.Field) + " must be " + e.Rule + ", got " + strconv.Quote(string(e.Value()))
	}
	return "openai: unknown error code " + strconv.Itoa(int(e.Code))
}

func (e *Error) set(code Code, field, rule string, offset int, value []byte) *Error {
	e.Code, e.Field, e.Rule, e.Offset = code, field, rule, offset
	e.valueLen = copy(e.value[:], value)
	return e
}
