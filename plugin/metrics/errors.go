package metrics

import (
	"errors"
	"strconv"
)

// Sentinel errors; Parse returns a *ParseError that matches one of them with
// errors.Is. Whatever the error, the Sample holds what the valid lines carried.
var (
	// ErrNoSamples: the body had no valid sample of a metric the parser
	// reads (empty, HTML, garbage, another engine's page).
	ErrNoSamples = errors.New("metrics: no valid sample of a metric read")
	// ErrTruncated: the body's last line had no newline and was ignored; the
	// scrape was probably cut short, so treat the replica as stale.
	ErrTruncated = errors.New("metrics: body truncated")
	// ErrBadLine: some lines were invalid and skipped; the rest was used.
	ErrBadLine = errors.New("metrics: invalid line skipped")
)

// excerptCap bounds how much of an offending line a ParseError quotes.
const excerptCap = 48

// ParseError describes why a scrape was not clean. It lives inside the Parser
// (so returning it allocates nothing) and is overwritten by the next Parse:
// copy what you need before parsing again.
type ParseError struct {
	kind      Problem // the one Problem bit this error reports
	Line      int32   // 1-based line the excerpt comes from
	BadLines  int32   // lines skipped as invalid
	BodyBytes int     // size of the parsed body
	n         uint8
	excerpt   [excerptCap]byte
}

// Error renders the problem, quoting the start of the offending line.
func (e *ParseError) Error() string {
	q := strconv.Quote(string(e.excerpt[:e.n]))
	line := strconv.Itoa(int(e.Line))
	switch e.kind {
	case ProblemNoSamples:
		msg := "metrics: no valid sample of a metric read in " + strconv.Itoa(e.BodyBytes) + "-byte body"
		if e.Line > 0 {
			msg += ", first bad line " + line + ": " + q
		}
		return msg
	case ProblemTruncated:
		return "metrics: body truncated, last line " + line + " has no newline and was ignored: " + q
	default:
		return "metrics: " + strconv.Itoa(int(e.BadLines)) + " invalid line(s) skipped, first is line " +
			line + ": " + q
	}
}

// Is matches the sentinel for e's kind (ErrNoSamples, ErrTruncated, ErrBadLine).
func (e *ParseError) Is(target error) bool {
	switch e.kind {
	case ProblemNoSamples:
		return target == ErrNoSamples
	case ProblemTruncated:
		return target == ErrTruncated
	case ProblemBadLine:
		return target == ErrBadLine
	}
	return false
}

// set fills e for kind, quoting the start of line.
func (e *ParseError) set(kind Problem, lineNo int32, line []byte) {
	e.kind = kind
	e.Line = lineNo
	e.n = uint8(copy(e.excerpt[:], line))
}
