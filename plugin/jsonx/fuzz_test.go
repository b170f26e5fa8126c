package jsonx

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/buger/jsonparser"
)

// tree builds the value due next in r the way encoding/json decodes into an
// interface{} with UseNumber: objects to maps (last duplicate wins), strings
// with each invalid UTF-8 byte replaced by U+FFFD (encoding/json's rule;
// jsonx itself passes such bytes through).
func tree(r *Reader) any {
	switch r.Kind() {
	case Object:
		m := map[string]any{}
		r.Object()
		for r.Member() {
			k := jsonValid(AppendUnescape(nil, r.Key()))
			m[k] = tree(r)
		}
		return m
	case Array:
		a := []any{}
		r.Array()
		for r.Elem() {
			a = append(a, tree(r))
		}
		return a
	}
	v := r.Value()
	switch v.Kind {
	case String:
		return jsonValid(AppendUnescape(nil, v.Raw))
	case Number:
		return json.Number(v.Raw)
	case Bool:
		return v.Raw[0] == 't'
	}
	return nil
}

func jsonValid(b []byte) string {
	var s strings.Builder
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n == 1 {
			s.WriteRune(utf8.RuneError)
		} else {
			s.Write(b[:n])
		}
		b = b[n:]
	}
	return s.String()
}

// FuzzReader holds the Reader to encoding/json (validity, decoded values,
// integers) and to github.com/buger/jsonparser (top-level members: keys,
// kinds, raw values, decoded strings), and checks prefix mode on cuts of
// every valid input: no error, and events that are a prefix of the full
// document's. Both oracles are test-only; neither is linked into the module.
func FuzzReader(f *testing.F) {
	seeds := []string{
		`{"replicas":[{"name":"vllm-0","address":"10.0.0.1:8000"}],"tick_ms":1000}`,
		`"\ud83d\ude00\u0000"`, `[1e5,-0.0,{"":null}]`, `{"a":"\ud800"}`,
		`{"model":"m","messages":[{"role":"user","content":"a\nb\u00e9"}],"max_tokens":-12}`,
		`{"a\u0062":[true,false,null,"x\/"], "n": 12345678901234567890}`,
		"{\"k\":\"\xff\"}", `[[[[]]]]`, ` 0 `,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if bytes.Count(data, []byte("["))+bytes.Count(data, []byte("{")) > MaxDepth {
			return // encoding/json has no nesting bound this low
		}
		got, want := Valid(data), json.Valid(data)
		if got != want {
			var r Reader
			r.Reset(data)
			t.Fatalf("Valid(%q) = %v (%v), encoding/json says %v", data, got, r.End(), want)
		}
		if !got {
			return
		}
		var r Reader
		r.Reset(data)
		mine := tree(&r)
		if err := r.End(); err != nil {
			t.Fatalf("walk(%q) error %v", data, err)
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var theirs any
		if err := dec.Decode(&theirs); err != nil {
			t.Fatalf("encoding/json cannot decode valid %q: %v", data, err)
		}
		if !reflect.DeepEqual(mine, theirs) {
			t.Fatalf("walk(%q) = %#v, encoding/json decodes %#v", data, mine, theirs)
		}
		checkTape(t, data, 8)
		checkTape(t, data, 4096)
		checkInts(t, data)
		checkJSONParser(t, data)
		checkPrefixes(t, data)
	})
}

// checkInts compares ParseInt with encoding/json's int64 decoding for a
// top-level number.
func checkInts(t *testing.T, data []byte) {
	var r Reader
	r.Reset(data)
	v := r.Value()
	if v.Kind != Number {
		return
	}
	n, ok := ParseInt(v.Raw)
	var want int64
	err := json.Unmarshal(data, &want)
	integral := !bytes.ContainsAny(v.Raw, ".eE")
	if ok != (err == nil && integral) || ok && n != want {
		t.Fatalf("ParseInt(%q) = %d, %v; encoding/json: %d, %v", v.Raw, n, ok, want, err)
	}
}

var kindOfParser = map[jsonparser.ValueType]Kind{
	jsonparser.Object: Object, jsonparser.Array: Array, jsonparser.String: String,
	jsonparser.Number: Number, jsonparser.Boolean: Bool, jsonparser.Null: Null,
}

func checkJSONParser(t *testing.T, data []byte) {
	var r Reader
	r.Reset(data)
	if r.Kind() != Object {
		return
	}
	type member struct {
		key  string
		kind Kind
		raw  string
	}
	var mine, theirs []member
	r.Object()
	for r.Member() {
		k := string(AppendUnescape(nil, r.Key()))
		v := r.Value()
		mine = append(mine, member{k, v.Kind, string(v.Raw)})
		if v.Kind == String && utf8.Valid(v.Raw) {
			if s, err := jsonparser.ParseString(v.Raw); err == nil && s != string(AppendUnescape(nil, v.Raw)) &&
				!strings.Contains(s, "\ufffd") { // jsonparser's lone-surrogate handling differs in corners
				t.Fatalf("AppendUnescape(%q) = %q, jsonparser.ParseString %q", v.Raw, AppendUnescape(nil, v.Raw), s)
			}
		}
	}
	err := jsonparser.ObjectEach(data, func(key, value []byte, vt jsonparser.ValueType, _ int) error {
		theirs = append(theirs, member{string(key), kindOfParser[vt], string(value)})
		return nil
	})
	if err != nil {
		return // jsonparser rejects some valid documents (e.g. keys with odd escapes); nothing to compare
	}
	if len(mine) != len(theirs) {
		t.Fatalf("members(%q) = %d, jsonparser.ObjectEach %d", data, len(mine), len(theirs))
	}
	for i := range mine {
		m, o := mine[i], theirs[i]
		if m.kind != o.kind || m.raw != o.raw || m.key != o.key && utf8.ValidString(m.key) && !strings.Contains(o.key, "\ufffd") {
			t.Fatalf("member %d of %q = %+v, jsonparser.ObjectEach %+v", i, data, m, o)
		}
	}
}

// checkPrefixes reads cuts of a valid document in prefix mode.
func checkPrefixes(t *testing.T, data []byte) {
	var r Reader
	r.Reset(data)
	full := events(&r, nil)
	step := 1
	if len(data) > 256 {
		step = len(data) / 64
	}
	for n := 0; n <= len(data); n += step {
		r.ResetPrefix(data[:n])
		got := events(&r, nil)
		if err := r.End(); err != nil {
			t.Fatalf("prefix %q of valid %q: error %v", data[:n], data, err)
		}
		if len(got) > len(full) {
			t.Fatalf("prefix %q gives %q, more than the full %q", data[:n], got, full)
		}
		for i, e := range got {
			if e == full[i] {
				continue
			}
			// Only the last event may differ: the head of a cut string.
			head, cut := strings.CutSuffix(e, "…")
			if i != len(got)-1 || !cut || !strings.HasPrefix(full[i], head) {
				t.Fatalf("prefix %q event %d = %q, full document has %q", data[:n], i, e, full[i])
			}
		}
	}
}

// FuzzWriteString holds WriteString's fast paths (short plain strings
// written from the input; decodeRun, scratch of 128 bytes or more), and
// AppendString (negative sizes: onto that many bytes), to its general loop (16-byte scratch, no short path) on every input, whole
// and cut at every length in prefix mode: the same error, cut and offset,
// the same text unless there is an error (what is written before a syntax
// error is unspecified), and for valid strings the text AppendUnescape
// gives.
func FuzzWriteString(f *testing.F) {
	for _, s := range []string{
		`"abc"`, `"` + strings.Repeat(`SELECT 1;\n`, 20) + `"`, `"a\u00e9\ud83d\ude00b` + strings.Repeat("x", 40) + `\q"`,
		`"` + strings.Repeat("y", 70) + "\x01\"", `"` + strings.Repeat(`\"`, 50) + `\`,
		`"` + strings.Repeat("é漢", 30) + `\t` + strings.Repeat("z", 57) + `\/` + strings.Repeat("w", 60) + "\x1f\"",
		`"` + strings.Repeat("v", 127) + `\u00e9` + strings.Repeat("u", 66) + `"`,
		`"` + strings.Repeat("t", 128) + `"`, `"` + strings.Repeat("t", 127) + `"x`, `"` + strings.Repeat("t", 129) + `"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		write := func(d []byte, prefix bool, size int, short bool) (string, error, bool, int) {
			var r Reader
			if prefix {
				r.ResetPrefix(d)
			} else {
				r.Reset(d)
			}
			if size < 0 { // AppendString, onto -size bytes already held
				pre := bytes.Repeat([]byte{'p'}, -size)
				got := r.AppendString(pre[:-size:-size])
				if !bytes.Equal(got[:-size], pre) {
					t.Fatalf("AppendString(%q) changed the %d bytes before it to %q", d, -size, got[:-size])
				}
				return string(got[-size:]), r.Err(), r.Truncated(), r.Offset()
			}
			var w chunkWriter
			r.writeString(&w, make([]byte, size), short)
			return w.String(), r.Err(), r.Truncated(), r.Offset()
		}
		for n := len(data); n >= 0; n-- {
			prefix := n < len(data)
			slow, serr, scut, soff := write(data[:n], prefix, 16, false)
			for _, size := range []int{16, 64, 128, 200, 2048, -1, -150} {
				fast, ferr, fcut, foff := write(data[:n], prefix, size, true)
				if fast != slow && serr == nil || (ferr == nil) != (serr == nil) || ferr != nil && ferr.Error() != serr.Error() ||
					fcut != scut || foff != soff {
					t.Fatalf("WriteString(%q, scratch %d) = %q, %v, cut %v, offset %d; scratch 16: %q, %v, cut %v, offset %d",
						data[:n], size, fast, ferr, fcut, foff, slow, serr, scut, soff)
				}
			}
			if !prefix && serr == nil && len(data) > 1 && data[0] == '"' {
				if want := string(AppendUnescape(nil, data[1:soff-1])); slow != want {
					t.Fatalf("WriteString(%q) = %q, AppendUnescape %q", data, slow, want)
				}
			}
			if n > 0 && len(data) > 300 {
				n -= len(data) / 50 // long inputs: a few dozen cuts
			}
		}
	})
}

// FuzzStringEnd holds StringEnd to scanString, the Reader's own string
// scanner: the same strings accepted, the same end, the same escape flag.
func FuzzStringEnd(f *testing.F) {
	for _, s := range []string{`plain"`, `a\"b"`, `\u00e9x"`, `\u00g9"`, "ctl\x01\"", `cut\`, `abcdefghijklmnopqrstuvwxyz0123456789"tail`, `\q"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, d []byte) {
		end, esc := StringEnd(d, 0)
		want, wantEsc, st := scanString(d, 0, nil)
		if st != sOK {
			if end != -1 {
				t.Fatalf("StringEnd(%q) = %d, want -1 (scanString status %d)", d, end, st)
			}
			return
		}
		if end != want-1 || esc != wantEsc {
			t.Fatalf("StringEnd(%q) = %d, %v, want %d, %v", d, end, esc, want-1, wantEsc)
		}
	})
}

// FuzzDecodeString holds DecodeString to the Reader's AppendString: when it
// accepts a string, the text and the end are the Reader's, the string is
// valid, and the text lies in dst's array (never a grown copy).
func FuzzDecodeString(f *testing.F) {
	for _, s := range []string{`plain"`, `a\"b\n"x`, `\u00e9\ud83d\ude00\ud83dx"`, `\u00g9"`, "ctl\x01\"", `cut\`, `cut\u00`,
		strings.Repeat(`SELECT 1;\n`, 20) + `"`, strings.Repeat("v", 127) + `\u00e9"`} {
		f.Add([]byte(s), uint16(100))
	}
	f.Fuzz(func(t *testing.T, d []byte, room uint16) {
		held := 3
		dst := make([]byte, held, held+int(room%4096))
		copy(dst, "pre")
		got, end, ok := DecodeString(dst, d, 0)
		if !ok {
			return
		}
		if cap(got) != cap(dst) || &got[:1][0] != &dst[:1][0] || string(got[:held]) != "pre" {
			t.Fatalf("DecodeString(%q, room %d) grew or moved dst", d, room%4096)
		}
		var r Reader
		doc := append([]byte{'"'}, d...)
		r.Reset(doc)
		want := r.AppendString(nil)
		if r.Err() != nil || r.Offset() != end+2 {
			t.Fatalf("DecodeString(%q) = end %d, ok; Reader: offset %d, %v", d, end, r.Offset(), r.Err())
		}
		if string(got[held:]) != string(want) {
			t.Fatalf("DecodeString(%q) = %q, want %q (AppendString)", d, got[held:], want)
		}
	})
}

// FuzzSkipValue holds SkipValue to the Reader: inside the same number of
// open containers, it accepts a value exactly when the Reader's Value does,
// and ends where the Reader does.
func FuzzSkipValue(f *testing.F) {
	for _, s := range []string{`"a\"b"`, `{"a":[1,-2.5e3,true,false,null,{}]}`, `[1,]`, `{"a" 1}`, `{"a":"b\q"}`,
		`01`, `-`, `nul`, `tru`, `[[[[` + strings.Repeat("[", 60) + `]]]]` + strings.Repeat("]", 60), `{"k":"v"` + "\x01" + `}`, `{"a":1}x`} {
		f.Add([]byte(s), uint8(0))
		f.Add([]byte(s), uint8(3))
	}
	f.Add([]byte(`[]`), uint8(MaxDepth-1))
	f.Add([]byte(`[]`), uint8(MaxDepth))
	f.Add([]byte(`7`), uint8(MaxDepth))
	f.Fuzz(func(t *testing.T, d []byte, depth uint8) {
		open := int(depth) % (MaxDepth + 1)
		got := SkipValue(d, 0, open)
		if len(d) > 0 && isSpace(d[0]) {
			if got != -1 {
				t.Fatalf("SkipValue(%q) = %d, want -1 (leading space)", d, got)
			}
			return
		}
		var r Reader
		r.Reset(append(bytes.Repeat([]byte("["), open), d...))
		for range open {
			r.Array()
			r.Elem()
		}
		want := -1
		if v := r.Value(); v.Kind != None && r.Err() == nil {
			want = r.Offset() - open
		}
		if got != want {
			t.Fatalf("SkipValue(%q, depth %d) = %d, want %d (Reader: %v)", d, open, got, want, r.Err())
		}
	})
}

// boundary is an offset where a cut leaves a reliable head: after an
// opening bracket or a complete value (a number only when more follows);
// or, with str set, the start of a string value's contents, whose head a
// cut inside it leaves as stringCut decides.
type boundary struct {
	at          int
	number, str bool
	end         int // str: the contents' end
}

// boundaries walks the value due next in r, a whole document, and appends
// where a cut inside it leaves a reliable head.
func boundaries(r *Reader, b []boundary) []boundary {
	switch r.Kind() {
	case Object, Array:
		obj := r.Kind() == Object
		if obj {
			r.Object()
		} else {
			r.Array()
		}
		b = append(b, boundary{at: r.Offset()})
		for obj && r.Member() || !obj && r.Elem() {
			b = boundaries(r, b)
		}
		return append(b, boundary{at: r.Offset()})
	case String:
		v := r.Value()
		b = append(b, boundary{at: v.Off + 1, str: true, end: v.Off + 1 + len(v.Raw)})
		return append(b, boundary{at: r.Offset()})
	}
	v := r.Value()
	return append(b, boundary{at: r.Offset(), number: v.Kind == Number})
}

// FuzzSkipHead holds the head Value reports for a container a cut falls in
// to the whole document's boundaries: it ends at the last one the cut keeps.
func FuzzSkipHead(f *testing.F) {
	for _, s := range []string{`[1,22,true,"ab\u00e9\ud83d\ude00c",{"k":[null,-3.5e2]},[]]`, `{"a":{"b":"x\ny"},"c":[1 , 2 ]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, d []byte) {
		var r Reader
		r.Reset(d)
		if k := r.Kind(); k != Object && k != Array || !Valid(d) {
			return
		}
		start := r.Offset()
		bs := boundaries(&r, nil)
		for n := start + 1; n < bs[len(bs)-1].at; n++ {
			want := start
			for _, b := range bs {
				switch {
				case b.str && b.at < n && n <= b.end:
					if c := stringCut(d[b.at:n]); c > 0 {
						want = max(want, b.at+c)
					}
				case !b.str && b.at <= n && (!b.number || b.at < n):
					want = max(want, b.at)
				}
			}
			r.ResetPrefix(d[:n])
			if v := r.Value(); !v.Partial || v.Off != start || v.Off+len(v.Raw) != want {
				t.Fatalf("Value(prefix %q) = %q (partial %v), want the head %q", d[:n], v.Raw, v.Partial, d[start:want])
			}
		}
	})
}
