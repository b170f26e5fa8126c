package shared

import (
	"bytes"
	"slices"
	"testing"
)

func TestSuspectsCodec(t *testing.T) {
	entries := []Suspect{{}, {Failures: 2, BadNanos: 7}, {}, {Ejections: 3, BadNanos: -1, UntilNanos: 1 << 62}}
	b := AppendSuspects(nil, 42, entries)
	if want := suspectsHeaderBytes + 2*suspectEntryBytes; len(b) != want {
		t.Fatalf("AppendSuspects(2 non-zero entries) = %d bytes, want %d", len(b), want)
	}
	tests := []struct {
		name   string
		v      []byte
		config uint64
		n      int
		ok     bool
		want   []Suspect
	}{
		{name: "round trip", v: b, config: 42, n: 4, ok: true, want: entries},
		{name: "fewer replicas", v: b, config: 42, n: 2, ok: true, want: entries[:2]},
		{name: "other configuration", v: b, config: 43, n: 4, want: make([]Suspect, 4)},
		{name: "other version", v: append([]byte{2}, b[1:]...), config: 42, n: 4, want: make([]Suspect, 4)},
		{name: "cut", v: b[:len(b)-1], config: 42, n: 4, want: make([]Suspect, 4)},
		{name: "trailing byte", v: append(slices.Clip(b), 0), config: 42, n: 4, want: make([]Suspect, 4)},
		{name: "empty", v: nil, config: 42, n: 4, want: make([]Suspect, 4)},
	}
	for _, tt := range tests {
		got := make([]Suspect, tt.n)
		for i := range got {
			got[i].Failures = 9 // zeroed by every decode
		}
		if ok := DecodeSuspects(tt.v, tt.config, got); ok != tt.ok || !slices.Equal(got, tt.want) {
			t.Errorf("DecodeSuspects(%s) = %v, %+v; want %v, %+v", tt.name, ok, got, tt.ok, tt.want)
		}
	}
}

// FuzzSuspectsDecode: any value decodes or is refused without a panic, and
// what decodes encodes back to the same bytes when it names no replica out
// of range and holds no all-zero entry (the encoding skips those).
func FuzzSuspectsDecode(f *testing.F) {
	f.Add(AppendSuspects(nil, 1, []Suspect{{Failures: 1}, {}, {Ejections: 2, UntilNanos: 5}}))
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, v []byte) {
		entries := make([]Suspect, 8)
		if !DecodeSuspects(v, 1, entries) {
			return
		}
		if out := AppendSuspects(nil, 1, entries); len(out) > len(v) {
			t.Fatalf("AppendSuspects(DecodeSuspects(%x)) = %x, longer than its input", v, out)
		} else if canonicalSuspects(v, len(entries)) && !bytes.Equal(out, v) {
			t.Fatalf("AppendSuspects(DecodeSuspects(%x)) = %x, want the input", v, out)
		}
	})
}

// canonicalSuspects reports whether v's entries are in ascending index order
// below n, each non-zero: those AppendSuspects writes back unchanged.
func canonicalSuspects(v []byte, n int) bool {
	prev := -1
	for body := v[suspectsHeaderBytes:]; len(body) >= suspectEntryBytes; body = body[suspectEntryBytes:] {
		i := int(uint32(body[0]) | uint32(body[1])<<8 | uint32(body[2])<<16 | uint32(body[3])<<24)
		if i <= prev || i >= n || bytes.Count(body[4:suspectEntryBytes], []byte{0}) == suspectEntryBytes-4 {
			return false
		}
		prev = i
	}
	return true
}
