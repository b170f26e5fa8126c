package jsonx

import (
	"bytes"
	"strings"
	"testing"
)

// texts walks a document and returns every string value decoded through
// WriteString, each followed by '|'.
func texts(r *Reader, w *bytes.Buffer, scratch []byte) {
	switch r.Kind() {
	case Object:
		r.Object()
		for r.Member() {
			texts(r, w, scratch)
		}
	case Array:
		r.Array()
		for r.Elem() {
			texts(r, w, scratch)
		}
	case String:
		r.WriteString(w, scratch)
		w.WriteByte('|')
	default:
		r.Skip()
	}
}

// checkTape records a tape over doc (storage of cap entries) and checks
// that a walk using it writes what a walk without it writes.
func checkTape(t *testing.T, doc []byte, capEntries int) {
	t.Helper()
	var tape Tape
	tape.Reset(make([]uint32, 0, capEntries))
	var r Reader
	r.Reset(doc)
	r.RecordTape(&tape)
	r.Skip()
	if r.End() != nil {
		return
	}
	scratch := make([]byte, 64)
	var plain, taped bytes.Buffer
	r.Reset(doc)
	texts(&r, &plain, scratch)
	r.Reset(doc)
	r.UseTape(&tape)
	texts(&r, &taped, scratch)
	if err := r.End(); err != nil || plain.String() != taped.String() {
		t.Fatalf("taped walk of %.80q (tape %d/%d) = %q, %v, want %q", doc, tape.Len(), capEntries, taped.String(), err, plain.String())
	}
}

func TestTape(t *testing.T) {
	long := strings.Repeat("x", 100)
	docs := []string{
		`{"a":"` + long + `","b":["` + long + `\n` + long + `",""],"c":"` + long + `\ud83d\ude00\ud800\u00e9\"` + long + `"}`,
		`["\ud83d","` + long + `\ud83d"]`,
		`["` + strings.Repeat(`ab\n`, 500) + `","tail\t"]`,
		string(doc32K()),
	}
	for _, d := range docs {
		for _, c := range []int{0, 1, 3, 10, 8192} {
			checkTape(t, []byte(d), c)
		}
	}
}
