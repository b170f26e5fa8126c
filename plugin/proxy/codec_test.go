package proxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"testing"
)

func TestAppendPairsLayout(t *testing.T) {
	got := AppendPairs(nil, [][2]string{{"a", "bc"}, {"", "d"}})
	want := []byte{
		2, 0, 0, 0, // N
		1, 0, 0, 0, 2, 0, 0, 0, // a, bc
		0, 0, 0, 0, 1, 0, 0, 0, // "", d
		'a', 0, 'b', 'c', 0,
		0, 'd', 0,
	}
	if !bytes.Equal(got, want) {
		t.Errorf("AppendPairs(a:bc, :d) = %v, want %v", got, want)
	}
	if n := EncodedPairsLen([][2]string{{"a", "bc"}, {"", "d"}}); n != len(want) {
		t.Errorf("EncodedPairsLen = %d, want %d", n, len(want))
	}
}

func TestPairsRoundTrip(t *testing.T) {
	tests := []struct {
		name  string
		pairs [][2]string
	}{
		{name: "empty", pairs: nil},
		{name: "one", pairs: [][2]string{{":path", "/v1/chat/completions"}}},
		{name: "repeated key", pairs: [][2]string{{"x", "1"}, {"x", "2"}}},
		{name: "empty strings", pairs: [][2]string{{"", ""}, {"k", ""}}},
		{name: "binary", pairs: [][2]string{{"k\x00", "\xff\x00v"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prefix := []byte("pre")
			enc := AppendPairs(prefix, tc.pairs)
			if !bytes.Equal(enc[:3], []byte("pre")) {
				t.Fatalf("AppendPairs clobbered the prefix: %q", enc[:3])
			}
			got, err := DecodePairsStrings(enc[3:])
			if err != nil {
				t.Fatalf("DecodePairsStrings(%v) error %v", enc[3:], err)
			}
			if len(got) != len(tc.pairs) || (len(got) > 0 && !slices.Equal(got, tc.pairs)) {
				t.Errorf("DecodePairsStrings(AppendPairs(%q)) = %q, want %q", tc.pairs, got, tc.pairs)
			}
			raw, err := DecodePairs(nil, enc[3:])
			if err != nil || len(raw) != len(tc.pairs) {
				t.Fatalf("DecodePairs = %d pairs, %v; want %d", len(raw), err, len(tc.pairs))
			}
		})
	}
}

func TestDecodePairsErrors(t *testing.T) {
	good := AppendPairs(nil, [][2]string{{"k", "v"}})
	noNUL := bytes.Clone(good)
	noNUL[len(noNUL)-1] = 'x'
	huge := binary.LittleEndian.AppendUint32(nil, 1<<31)
	longKey := bytes.Clone(good)
	binary.LittleEndian.PutUint32(longKey[4:], 0xffffffff)
	tests := []struct {
		name  string
		data  []byte
		pairs int // -1: error expected
	}{
		{name: "zero bytes is empty", data: nil, pairs: 0},
		{name: "single NUL is empty", data: []byte{0}, pairs: 0},
		{name: "count zero is empty", data: []byte{0, 0, 0, 0}, pairs: 0},
		{name: "good", data: good, pairs: 1},
		{name: "short header", data: []byte{1, 0}, pairs: -1},
		{name: "count too big", data: huge, pairs: -1},
		{name: "missing NUL", data: noNUL, pairs: -1},
		{name: "trailing byte", data: append(bytes.Clone(good), 0), pairs: -1},
		{name: "truncated", data: good[:len(good)-1], pairs: -1},
		{name: "key length overflow", data: longKey, pairs: -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodePairs(nil, tc.data)
			if tc.pairs < 0 {
				if err == nil {
					t.Errorf("DecodePairs(%v) = %q, want an error", tc.data, got)
				}
				return
			}
			if err != nil || len(got) != tc.pairs {
				t.Errorf("DecodePairs(%v) = %d pairs, %v; want %d, nil", tc.data, len(got), err, tc.pairs)
			}
		})
	}
}

func TestVisitPairsStops(t *testing.T) {
	enc := AppendPairs(nil, [][2]string{{"a", "1"}, {"b", "2"}, {"c", "3"}})
	var seen []string
	err := VisitPairs(enc, func(k, v []byte) bool {
		seen = append(seen, string(k))
		return string(k) != "b"
	})
	if err != nil || !slices.Equal(seen, []string{"a", "b"}) {
		t.Errorf("VisitPairs stopping at b saw %q, %v; want [a b], nil", seen, err)
	}
}

func TestPairsZeroAlloc(t *testing.T) {
	pairs := [][2]string{{":method", "POST"}, {":path", "/v1/completions"}, {"content-type", "application/json"}}
	buf := make([]byte, 0, 256)
	dst := make([][2][]byte, 0, 8)
	allocs := testing.AllocsPerRun(100, func() {
		enc := AppendPairs(buf[:0], pairs)
		dst, _ = DecodePairs(dst[:0], enc)
		_ = VisitPairs(enc, func(k, v []byte) bool { return true })
	})
	if allocs != 0 {
		t.Errorf("AppendPairs+DecodePairs+VisitPairs allocs = %v, want 0", allocs)
	}
}

func TestPropertyPath(t *testing.T) {
	tests := []struct {
		name string
		in   []string
		want string
	}{
		{name: "one", in: []string{"plugin_vm_id"}, want: "plugin_vm_id"},
		{name: "two", in: []string{"upstream", "address"}, want: "upstream\x00address"},
		{name: "none", in: nil, want: ""},
	}
	for _, tc := range tests {
		if got := string(AppendPropertyPath(nil, tc.in)); got != tc.want {
			t.Errorf("AppendPropertyPath(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func FuzzDecodePairs(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0})
	f.Add(AppendPairs(nil, [][2]string{{"k", "v"}, {"", ""}}))
	f.Add([]byte{1, 0, 0, 0, 255, 255, 255, 255, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		raw, err := DecodePairs(nil, data)
		if err != nil {
			if VisitPairs(data, func(k, v []byte) bool { t.Fatal("visit on malformed input"); return false }) == nil {
				t.Fatalf("DecodePairs(%v) failed but VisitPairs accepted it", data)
			}
			return
		}
		pairs := make([][2]string, len(raw))
		for i, p := range raw {
			pairs[i] = [2]string{string(p[0]), string(p[1])}
		}
		enc := AppendPairs(nil, pairs)
		// The encoding is canonical except for the two short empty forms.
		if len(data) > 1 && !bytes.Equal(enc, data) {
			t.Fatalf("AppendPairs(DecodePairs(%v)) = %v, want the input", data, enc)
		}
		again, err := DecodePairsStrings(enc)
		if err != nil || len(again) != len(pairs) || (len(pairs) > 0 && !slices.Equal(again, pairs)) {
			t.Fatalf("round trip of %q = %q, %v", pairs, again, err)
		}
	})
}

func FuzzAppendPairs(f *testing.F) {
	f.Add("k", "v", "", "\x00")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		in := [][2]string{{k1, v1}, {k2, v2}}
		got, err := DecodePairsStrings(AppendPairs(nil, in))
		if err != nil || !slices.Equal(got, in) {
			t.Fatalf("DecodePairsStrings(AppendPairs(%q)) = %q, %v", in, got, err)
		}
	})
}

func TestStatusErr(t *testing.T) {
	tests := []struct {
		name string
		code uint32
		want error
	}{
		{name: "ok", code: 0, want: nil},
		{name: "not found", code: 1, want: ErrNotFound},
		{name: "bad argument", code: 2, want: ErrBadArgument},
		{name: "serialization failure", code: 3, want: ErrSerializationFailure},
		{name: "parse failure", code: 4, want: ErrParseFailure},
		{name: "invalid memory access", code: 6, want: ErrInvalidMemoryAccess},
		{name: "empty", code: 7, want: ErrEmpty},
		{name: "cas mismatch", code: 8, want: ErrCASMismatch},
		{name: "internal failure", code: 10, want: ErrInternalFailure},
		{name: "unimplemented", code: 12, want: ErrUnimplemented},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Status(tc.code).Err()
			if got != tc.want || !errors.Is(got, tc.want) {
				t.Errorf("Status(%d).Err() = %v, want %v", tc.code, got, tc.want)
			}
		})
	}
	unknown := Status(5).Err()
	if unknown == nil || unknown.Error() != "proxy: unknown host status 5" {
		t.Errorf("Status(5).Err() = %v, want proxy: unknown host status 5", unknown)
	}
	for _, e := range []error{ErrNotFound, ErrEmpty, ErrCASMismatch} {
		for _, other := range []error{ErrBadArgument, ErrInternalFailure} {
			if errors.Is(e, other) {
				t.Errorf("errors.Is(%v, %v) = true, want false", e, other)
			}
		}
	}
	if a := testing.AllocsPerRun(10, func() { _ = Status(8).Err() }); a != 0 {
		t.Errorf("Status.Err allocs = %v, want 0", a)
	}
}

var benchPairs = [][2]string{
	{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "gateway.example"},
	{"content-type", "application/json"}, {"user-agent", "openai-python/1.40"}, {"x-request-id", "5b0c7e0e-2f43-4a8b-9d1e-0d3c1f2a9b7c"},
}

func BenchmarkAppendPairs(b *testing.B) {
	b.ReportAllocs()
	buf := make([]byte, 0, 512)
	for i := 0; i < b.N; i++ {
		buf = AppendPairs(buf[:0], benchPairs)
	}
}

func BenchmarkVisitPairs(b *testing.B) {
	b.ReportAllocs()
	enc := AppendPairs(nil, benchPairs)
	n := 0
	for i := 0; i < b.N; i++ {
		_ = VisitPairs(enc, func(k, v []byte) bool { n += len(v); return true })
	}
}
