package config

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// valid reports whether b is one JSON value with optional surrounding space,
// by the reader in json.go.
func valid(b []byte) bool {
	i := skipSpace(b, 0)
	_, end, err := value(b, i, 0)
	return err == nil && skipSpace(b, end) == len(b)
}

func TestReaderValidity(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want bool
	}{
		{name: "object", in: ` {"a":[1,-2.5e3,true,false,null,{"b":"c"}]} `, want: true},
		{name: "empty containers", in: `{"a":{},"b":[]}`, want: true},
		{name: "escapes", in: `"\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00"`, want: true},
		{name: "leading zero", in: `01`, want: false},
		{name: "bare minus", in: `-`, want: false},
		{name: "dot without digits", in: `1.`, want: false},
		{name: "exponent without digits", in: `1e+`, want: false},
		{name: "trailing comma", in: `[1,]`, want: false},
		{name: "single quotes", in: `{'a':1}`, want: false},
		{name: "control char", in: "\"a\x01\"", want: false},
		{name: "bad escape", in: `"\x"`, want: false},
		{name: "short unicode escape", in: `"\u12"`, want: false},
		{name: "invalid utf8", in: "\"\xff\"", want: false},
		{name: "unterminated", in: `{"a":1`, want: false},
		{name: "missing colon", in: `{"a" 1}`, want: false},
		{name: "too deep", in: strings.Repeat("[", maxDepth+2) + strings.Repeat("]", maxDepth+2), want: false},
	}
	for _, tc := range tests {
		if got := valid([]byte(tc.in)); got != tc.want {
			t.Errorf("valid(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestUnquote(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{name: "plain", in: `"abc"`, want: "abc"},
		{name: "escapes", in: `"a\"b\\c\/d\n"`, want: "a\"b\\c/d\n"},
		{name: "bmp", in: `"\u00e9"`, want: "é"},
		{name: "surrogate pair", in: `"\ud83d\ude00"`, want: "😀"},
		{name: "lone surrogate", in: `"\ud83dx"`, want: "\ufffdx"},
	}
	for _, tc := range tests {
		if got := unquote([]byte(tc.in)); got != tc.want {
			t.Errorf("unquote(%s) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzReader holds the reader to encoding/json: the same validity verdict
// (below the nesting bound, for valid UTF-8) and the same decoded strings.
func FuzzReader(f *testing.F) {
	f.Add([]byte(example))
	f.Add([]byte(`"\ud83d\ude00\u0000"`))
	f.Add([]byte(`[1e5,-0.0,{"":null}]`))
	f.Add([]byte(`{"a":"\ud800"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if bytes.Count(data, []byte("["))+bytes.Count(data, []byte("{")) > maxDepth {
			return
		}
		got, want := valid(data), json.Valid(data)
		// encoding/json accepts invalid UTF-8 inside strings; the reader refuses
		// it (a replica name must be text), so there only got ⇒ want holds.
		if got != want && (got || utf8.Valid(data)) {
			t.Fatalf("valid(%q) = %v, encoding/json says %v", data, got, want)
		}
		if !got {
			return
		}
		i := skipSpace(data, 0)
		if data[i] != '"' {
			return
		}
		_, end, _ := value(data, i, 0)
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			t.Fatalf("encoding/json cannot decode %q: %v", data, err)
		}
		if u := unquote(data[i:end]); u != s {
			t.Fatalf("unquote(%q) = %q, encoding/json decodes %q", data[i:end], u, s)
		}
	})
}
