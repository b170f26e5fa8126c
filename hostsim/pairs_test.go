package hostsim

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

func TestPairsRoundTrip(t *testing.T) {
	tests := []struct {
		name  string
		pairs [][2]string
	}{
		{"empty", nil},
		{"one", [][2]string{{":path", "/"}}},
		{"empty key and value", [][2]string{{"", ""}}},
		{"repeated keys keep order", [][2]string{{"a", "1"}, {"b", "2"}, {"a", "3"}}},
		{"binary", [][2]string{{"k\x00", "\xff\x00v"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			enc := EncodePairs(tc.pairs)
			got, err := DecodePairs(enc)
			if err != nil || len(got) != len(tc.pairs) || (len(got) > 0 && !reflect.DeepEqual(got, tc.pairs)) {
				t.Errorf("DecodePairs(EncodePairs(%q)) = %q, %v", tc.pairs, got, err)
			}
		})
	}
}

func TestPairsLayout(t *testing.T) {
	got := EncodePairs([][2]string{{"ab", "c"}})
	want := []byte{1, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 'a', 'b', 0, 'c', 0}
	if !bytes.Equal(got, want) {
		t.Errorf("EncodePairs(ab=c) = %v, want %v", got, want)
	}
}

func TestDecodePairsErrors(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want string // error substring; "" means the empty map
	}{
		{"nil is empty", nil, ""},
		{"single NUL is empty", []byte{0}, ""},
		{"short count", []byte{1, 0}, "need 4 bytes"},
		{"count overruns", []byte{5, 0, 0, 0}, "count 5 needs"},
		{"huge count", []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, "count 4294967295"},
		{"length overruns", []byte{1, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 'a', 0}, "overruns"},
		{"missing NUL", []byte{1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 'a', 'b', 'c'}, "not NUL-terminated"},
		{"trailing bytes", append(EncodePairs([][2]string{{"a", "b"}}), 'x'), "trailing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodePairs(tc.in)
			if tc.want == "" {
				if err != nil || len(got) != 0 {
					t.Errorf("DecodePairs(%v) = %q, %v, want the empty map", tc.in, got, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("DecodePairs(%v) error = %v, want one containing %q", tc.in, err, tc.want)
			}
		})
	}
}

// FuzzDecodePairs: DecodePairs never panics; whatever it accepts
// re-encodes to the same bytes (except the two empty-map spellings).
func FuzzDecodePairs(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0})
	f.Add(EncodePairs([][2]string{{":method", "GET"}, {":path", "/"}}))
	f.Add([]byte{1, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 'a', 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		kv, err := DecodePairs(b)
		if err != nil {
			return
		}
		if len(b) <= 1 {
			return
		}
		if enc := EncodePairs(kv); !bytes.Equal(enc, b) {
			t.Errorf("EncodePairs(DecodePairs(%v)) = %v", b, enc)
		}
	})
}
