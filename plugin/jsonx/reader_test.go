package jsonx

import (
	"bytes"
	"math/bits"
	"strings"
	"testing"

	"github.com/gpuroute/gpuroute/scoring/le"
)

func TestValid(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want bool
	}{
		{name: "object", in: ` {"a":[1,-2.5e3,true,false,null,{"b":"c"}]} `, want: true},
		{name: "empty containers", in: `{"a":{},"b":[]}`, want: true},
		{name: "escapes", in: `"\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00"`, want: true},
		{name: "scalar", in: ` 12 `, want: true},
		{name: "invalid utf8 passes", in: "\"\xff\"", want: true},
		{name: "empty", in: ``, want: false},
		{name: "leading zero", in: `01`, want: false},
		{name: "bare minus", in: `-`, want: false},
		{name: "dot without digits", in: `1.`, want: false},
		{name: "exponent without digits", in: `1e+`, want: false},
		{name: "plus sign", in: `+1`, want: false},
		{name: "trailing comma", in: `[1,]`, want: false},
		{name: "trailing comma object", in: `{"a":1,}`, want: false},
		{name: "single quotes", in: `{'a':1}`, want: false},
		{name: "control char", in: "\"a\x01\"", want: false},
		{name: "bad escape", in: `"\x"`, want: false},
		{name: "short unicode escape", in: `"\u12"`, want: false},
		{name: "unterminated", in: `{"a":1`, want: false},
		{name: "missing colon", in: `{"a" 1}`, want: false},
		{name: "two values", in: `1 2`, want: false},
		{name: "bad literal", in: `[tru]`, want: false},
		{name: "depth 64", in: strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth), want: true},
		{name: "too deep", in: strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Valid([]byte(tt.in)); got != tt.want {
				t.Errorf("Valid(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
		code Code
	}{
		{name: "unexpected char", in: `{"a":x}`, want: `jsonx: unexpected character 'x' at offset 5`, code: BadSyntax},
		{name: "missing comma", in: `{"a":1 "b":2}`, want: `jsonx: want ',' or '}' at offset 7`, code: BadSyntax},
		{name: "array sep", in: `[1 2]`, want: `jsonx: want ',' or ']' at offset 3`, code: BadSyntax},
		{name: "key", in: `{1:2}`, want: `jsonx: want a string key at offset 1`, code: BadSyntax},
		{name: "colon", in: `{"a" 1}`, want: `jsonx: want ':' after key at offset 5`, code: BadSyntax},
		{name: "escape", in: `["ab\x"]`, want: `jsonx: bad escape at offset 4`, code: BadSyntax},
		{name: "u escape", in: `"\u12g4"`, want: `jsonx: bad \u escape at offset 1`, code: BadSyntax},
		{name: "control", in: "\"a\nb\"", want: `jsonx: control character in string at offset 2`, code: BadSyntax},
		{name: "number", in: `[1.e5]`, want: `jsonx: bad number at offset 1`, code: BadSyntax},
		{name: "literal", in: `[nul,1]`, want: `jsonx: invalid literal at offset 1`, code: BadSyntax},
		{name: "end", in: `{"a":[1,`, want: `jsonx: unexpected end of input at offset 8`, code: UnexpectedEnd},
		{name: "trailing", in: `{} {}`, want: `jsonx: trailing data after the value at offset 3`, code: BadSyntax},
		{name: "deep", in: strings.Repeat("[", 100), want: `jsonx: nesting deeper than 64 at offset 64`, code: TooDeep},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Reader
			r.Reset([]byte(tt.in))
			err := r.End()
			if err == nil || err.Error() != tt.want || err.(*Error).Code != tt.code {
				t.Errorf("End(%q) = %v, want %s (code %d)", tt.in, err, tt.want, tt.code)
			}
		})
	}
}

func TestUnescape(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{name: "plain", in: `abc`, want: "abc"},
		{name: "escapes", in: `a\"b\\c\/d\n\b\f\r\t`, want: "a\"b\\c/d\n\b\f\r\t"},
		{name: "bmp", in: `\u00e9\u20AC`, want: "é€"},
		{name: "surrogate pair", in: `\ud83d\ude00`, want: "😀"},
		{name: "lone high", in: `\ud83dx`, want: "\ufffdx"},
		{name: "lone low", in: `\ude00`, want: "\ufffd"},
		{name: "high then escape", in: `\ud83d\n`, want: "\ufffd\n"},
		{name: "two highs then low", in: `\ud83d\ud83d\ude00`, want: "\ufffd😀"},
		{name: "invalid utf8 passes", in: "a\xff", want: "a\xff"},
		{name: "bad escape stays literal", in: `a\qb`, want: `a\qb`},
		{name: "cut escape stays literal", in: `a\u00`, want: `a\u00`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(AppendUnescape(nil, []byte(tt.in))); got != tt.want {
				t.Errorf("AppendUnescape(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseInt(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want int64
		ok   bool
	}{
		{name: "zero", in: "0", ok: true},
		{name: "negative zero", in: "-0", ok: true},
		{name: "max", in: "9223372036854775807", want: 1<<63 - 1, ok: true},
		{name: "min", in: "-9223372036854775808", want: -1 << 63, ok: true},
		{name: "overflow", in: "9223372036854775808"},
		{name: "underflow", in: "-9223372036854775809"},
		{name: "twenty digits", in: "10000000000000000000"},
		{name: "fraction", in: "1.0"},
		{name: "exponent", in: "1e3"},
		{name: "leading zero", in: "01"},
		{name: "plus", in: "+1"},
		{name: "empty", in: ""},
		{name: "minus", in: "-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseInt([]byte(tt.in))
			if got != tt.want || ok != tt.ok {
				t.Errorf("ParseInt(%q) = %d, %v, want %d, %v", tt.in, got, ok, tt.want, tt.ok)
			}
		})
	}
}

// events walks the value due next and appends one line per event; partial
// strings end in "…". It is the test's view of what a Reader reports.
func events(r *Reader, ev []string) []string {
	switch r.Kind() {
	case Object:
		r.Object()
		ev = append(ev, "{")
		for r.Member() {
			ev = events(r, append(ev, "k:"+string(r.Key())))
		}
		if r.Err() == nil && !r.Truncated() {
			ev = append(ev, "}")
		}
		return ev
	case Array:
		r.Array()
		ev = append(ev, "[")
		for r.Elem() {
			ev = events(r, ev)
		}
		if r.Err() == nil && !r.Truncated() {
			ev = append(ev, "]")
		}
		return ev
	}
	v := r.Value()
	switch v.Kind {
	case None:
		return ev
	case String:
		s := "s:" + string(AppendUnescape(nil, v.Raw))
		if v.Partial {
			s += "…"
		}
		return append(ev, s)
	}
	return append(ev, v.Kind.String()+":"+string(v.Raw))
}

func TestEvents(t *testing.T) {
	in := ` {"a\u0062":[1, "x\ty", {"":null}], "t" : true,"f":false, "e":[]} `
	want := "{ k:ab [ number:1 s:x\ty { k: null:null } ] k:t boolean:true k:f boolean:false k:e [ ] }"
	var r Reader
	r.Reset([]byte(in))
	got := strings.Join(events(&r, nil), " ")
	if err := r.End(); err != nil || got != want {
		t.Errorf("events(%q) = %q, %v, want %q", in, got, err, want)
	}
}

func TestPrefix(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string // events
	}{
		{name: "complete", in: `{"a":1}`, want: "{ k:a number:1 }"},
		{name: "cut in string", in: `{"a":"xyz`, want: "{ k:a s:xyz…"},
		{name: "cut in escape", in: `{"a":"xy\u00`, want: "{ k:a s:xy…"},
		{name: "cut after high surrogate", in: `{"a":"xy\ud83d`, want: "{ k:a s:xy…"},
		{name: "cut in low surrogate", in: `{"a":"xy\ud83d\ude0`, want: "{ k:a s:xy…"},
		{name: "cut after pair", in: `{"a":"xy\ud83d\ude00`, want: "{ k:a s:xy😀…"},
		{name: "cut after backslash", in: `{"a":"xy\`, want: "{ k:a s:xy…"},
		{name: "empty string head", in: `{"a":"`, want: "{ k:a"},
		{name: "cut in number", in: `{"a":12`, want: "{ k:a"},
		{name: "cut in literal", in: `{"a":tr`, want: "{ k:a"},
		{name: "whole literal at cut", in: `{"a":true`, want: "{ k:a"},
		{name: "cut in key", in: `{"a":1,"bc`, want: "{ k:a number:1"},
		{name: "cut after colon", in: `{"a":1,"b":`, want: "{ k:a number:1"},
		{name: "cut in array", in: `[1,2,3`, want: "[ number:1 number:2"},
		{name: "cut after comma", in: `[1,`, want: "[ number:1"},
		{name: "empty", in: ``, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Reader
			r.ResetPrefix([]byte(tt.in))
			got := strings.Join(events(&r, nil), " ")
			err := r.End()
			if err != nil || got != tt.want {
				t.Errorf("events(prefix %q) = %q, %v, want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestPrefixSkippedContainer(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string // Raw of the partial value
	}{
		{name: "after element", in: `[{"id":"1"},`, want: `[{"id":"1"}`},
		{name: "in key", in: `[{"id":"1"},{"i`, want: `[{"id":"1"},{`},
		{name: "in string value", in: `[{"id":"1"},{"id":"2`, want: `[{"id":"1"},{"id":"2`},
		{name: "in escape", in: `[{"id":"1\u00`, want: `[{"id":"1`},
		{name: "empty string head", in: `[{"id":"`, want: `[{`},
		{name: "in number", in: `[1,22`, want: `[1`},
		{name: "opening only", in: `[`, want: `[`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Reader
			r.ResetPrefix([]byte(tt.in))
			v := r.Value()
			if !v.Partial || string(v.Raw) != tt.want || !r.Truncated() || r.Err() != nil {
				t.Errorf("Value(prefix %q) = %q partial %v, truncated %v, err %v, want %q partial",
					tt.in, v.Raw, v.Partial, r.Truncated(), r.Err(), tt.want)
			}
		})
	}
}

func TestKeyEscapes(t *testing.T) {
	long := strings.Repeat(`\u0041`, 30) // 180 raw bytes
	tests := []struct {
		name string
		in   string
		want string
	}{
		{name: "plain", in: `{"model":1}`, want: "model"},
		{name: "escaped", in: `{"mod\u0065l":1}`, want: "model"},
		{name: "long escaped stays raw", in: `{"` + long + `":1}`, want: long},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Reader
			r.Reset([]byte(tt.in))
			r.Object()
			if !r.Member() || string(r.Key()) != tt.want {
				t.Errorf("Key(%q) = %q, want %q", tt.in, r.Key(), tt.want)
			}
		})
	}
}

type chunkWriter struct {
	bytes.Buffer
	writes int
}

func (w *chunkWriter) Write(b []byte) (int, error) { w.writes++; return w.Buffer.Write(b) }

// TestWriteString checks streamed decoding against AppendUnescape for runs
// and escapes straddling every scratch boundary, and that long runs go out
// in few writes.
func TestWriteString(t *testing.T) {
	contents := []string{
		``, `abc`, `\n`, strings.Repeat(`x`, 5000),
		strings.Repeat(`SELECT 1;\n`, 300),
		strings.Repeat(`ab\ud83d\ude00\u00e9\"`, 200),
		strings.Repeat("y", 63) + `\t` + strings.Repeat("z", 64) + `\ud83dq`,
	}
	for _, c := range contents {
		want := string(AppendUnescape(nil, []byte(c)))
		for _, size := range []int{0, 16, 17, 31, 64, 100, 128, 200, 2048} {
			var r Reader
			r.Reset([]byte(`"` + c + `"`))
			var w chunkWriter
			if err := r.WriteString(&w, make([]byte, size)); err != nil || r.End() != nil || w.String() != want {
				t.Fatalf("WriteString(%.40q, scratch %d) = %q, %v, %v, want %q", c, size, w.String(), err, r.End(), want)
			}
		}
	}
	var r Reader
	r.Reset([]byte(`"` + strings.Repeat("x", 32<<10) + `"`))
	var w chunkWriter
	r.WriteString(&w, make([]byte, 2048))
	if max := 32<<10/(2048-decodeRoom) + 1; w.writes > max {
		t.Errorf("WriteString(32 KB run) made %d writes, want at most %d", w.writes, max)
	}
}

func TestWriteStringPrefix(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{name: "run", in: `"abc`, want: "abc"},
		{name: "escape", in: `"ab\nc\u00`, want: "ab\nc"},
		{name: "high surrogate", in: `"ab\ud83d`, want: "ab"},
		{name: "backslash", in: `"ab\`, want: "ab"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Reader
			r.ResetPrefix([]byte(tt.in))
			var w bytes.Buffer
			err := r.WriteString(&w, nil)
			if err != nil || w.String() != tt.want || !r.Truncated() || r.Err() != nil {
				t.Errorf("WriteString(prefix %q) = %q, %v, truncated %v, want %q", tt.in, w.String(), r.Err(), r.Truncated(), tt.want)
			}
		})
	}
}

type nopWriter struct{}

func (nopWriter) Write(b []byte) (int, error) { return len(b), nil }

// doc32K is shaped like an OpenAI chat body: long strings with an escape
// every few dozen bytes.
func doc32K() []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"m","messages":[`)
	for b.Len() < 32<<10 {
		b.WriteString(`{"role":"user","content":"` + strings.Repeat(`SELECT name FROM t WHERE id = 42;\n`, 12) + `"},`)
	}
	b.WriteString(`{"role":"user","content":"\u00e9"}]}`)
	return b.Bytes()
}

func TestAllocs(t *testing.T) {
	doc := doc32K()
	var r Reader
	scratch := make([]byte, 2048)
	allocs := testing.AllocsPerRun(20, func() {
		r.Reset(doc)
		r.Object()
		for r.Member() {
			if string(r.Key()) != "messages" {
				continue
			}
			r.Array()
			for r.Elem() {
				r.Object()
				for r.Member() {
					if string(r.Key()) == "content" {
						r.WriteString(nopWriter{}, scratch)
					}
				}
			}
		}
		if r.End() != nil || !Valid(doc) {
			t.Fatal("doc32K not valid")
		}
	})
	if allocs != 0 {
		t.Errorf("Reader walk of 32 KB allocs = %v, want 0", allocs)
	}
}

func BenchmarkSkip32K(b *testing.B) {
	doc := doc32K()
	var r Reader
	b.ReportAllocs()
	b.SetBytes(int64(len(doc)))
	for b.Loop() {
		r.Reset(doc)
		r.Skip()
	}
}

func BenchmarkWriteStrings32K(b *testing.B) {
	doc := doc32K()
	var r Reader
	scratch := make([]byte, 2048)
	b.ReportAllocs()
	b.SetBytes(int64(len(doc)))
	for b.Loop() {
		r.Reset(doc)
		r.Object()
		for r.Member() {
			if string(r.Key()) != "messages" {
				continue
			}
			r.Array()
			for r.Elem() {
				r.Object()
				for r.Member() {
					if string(r.Key()) == "content" {
						r.WriteString(nopWriter{}, scratch)
					}
				}
			}
		}
	}
}

// TestUnwind: a value left partway read is finished, and the document reads
// on from the next member.
func TestUnwind(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		steps int // Elem/Member calls made inside the value before Unwind
		want  string
	}{
		{name: "unread value", in: `{"a":[1,[2,{"x":3}]],"b":"next"}`, steps: -1, want: "next"},
		{name: "entered, nothing read", in: `{"a":[1,[2,{"x":3}]],"b":"next"}`, steps: 0, want: "next"},
		{name: "one element in", in: `{"a":[1,[2,{"x":3}]],"b":"next"}`, steps: 1, want: "next"},
		{name: "nested deeper", in: `{"a":[[[["deep"]]]],"b":"next"}`, steps: 4, want: "next"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Reader
			r.Reset([]byte(tt.in))
			r.Object()
			r.Member() // "a"
			depth := r.Depth()
			for i := 0; i < tt.steps; i++ {
				if r.Kind() == Array {
					r.Array()
				}
				r.Elem()
			}
			if tt.steps == 0 {
				r.Array()
			}
			r.Unwind(depth)
			if !r.Member() || string(r.Key()) != "b" {
				t.Fatalf("Unwind(%d) on %q: next member %q, err %v, want \"b\"", depth, tt.in, r.Key(), r.Err())
			}
			if v := r.Value(); string(v.Raw) != tt.want || r.End() != nil {
				t.Fatalf("Unwind(%d) on %q: b = %q, End %v, want %q", depth, tt.in, v.Raw, r.End(), tt.want)
			}
		})
	}
}

// TestSpecial checks special's contract on every byte value in every lane,
// behind every plain prefix and before any bytes: the lowest flagged lane is
// the first '"', '\\' or control byte, and a word without one has no flag.
func TestSpecial(t *testing.T) {
	isSpecial := func(c byte) bool { return c == '"' || c == '\\' || c < 0x20 }
	after := []byte{'a', 0x00, '"', '\\', 0x1f, 0x20, 0x21, 0x7f, 0x80, 0xa2, 0xdc, 0xff}
	var w [8]byte
	for lane := 0; lane < 8; lane++ {
		for c := 0; c < 256; c++ {
			for _, prev := range []byte{'a', 0x80, 0xff, 0x21} {
				for _, next := range after {
					for i := range w {
						switch {
						case i < lane:
							w[i] = prev
						case i == lane:
							w[i] = byte(c)
						default:
							w[i] = next
						}
					}
					want := 8
					for i, b := range w {
						if isSpecial(b) {
							want = i
							break
						}
					}
					got := 8
					if m := special(le.Uint64(w[:], 0)) & msb; m != 0 {
						got = bits.TrailingZeros64(m) >> 3
					}
					if got != want {
						t.Fatalf("special(%q) first lane = %d, want %d", w[:], got, want)
					}
				}
			}
		}
	}
}

// TestPrefixHeads: the reliable head of a container the input cuts, as
// Value reports it in prefix mode.
func TestPrefixHeads(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{name: "after a literal", in: `[1,true`, want: `[1,true`},
		{name: "in a literal", in: `[1,tr`, want: `[1`},
		{name: "in a number", in: `[1,22`, want: `[1`},
		{name: "after a number and space", in: `[1,22 `, want: `[1,22`},
		{name: "in a key", in: `{"a":1,"b`, want: `{"a":1`},
		{name: "after a colon", in: `{"a":1,"b":`, want: `{"a":1`},
		{name: "in a string value", in: `{"a":"xy`, want: `{"a":"xy`},
		{name: "in an escape", in: `{"a":"xy\u00`, want: `{"a":"xy`},
		{name: "in a nested container", in: `[1,[2,{"c":[3`, want: `[1,[2,{"c":[`},
		{name: "just opened", in: `[[`, want: `[[`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Reader
			r.ResetPrefix([]byte(tt.in))
			if v := r.Value(); string(v.Raw) != tt.want || !v.Partial || !r.Truncated() {
				t.Errorf("Value(prefix %q) = %q, partial %v, truncated %v; want %q, partial", tt.in, v.Raw, v.Partial, r.Truncated(), tt.want)
			}
		})
	}
}
