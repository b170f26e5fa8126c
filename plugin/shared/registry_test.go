package shared

import (
	"bytes"
	"errors"
	"testing"
)

func TestRegistry(t *testing.T) {
	var g Registry
	for _, id := range []uint64{5, 1, 9, 5, 0, 3} {
		g.Add(id)
	}
	want := []uint64{1, 3, 5, 9}
	if len(g.Workers) != len(want) {
		t.Fatalf("Add(5 1 9 5 0 3) = %v, want %v", g.Workers, want)
	}
	for i := range want {
		if g.Workers[i] != want[i] {
			t.Fatalf("Add(5 1 9 5 0 3) = %v, want %v", g.Workers, want)
		}
	}
	if !g.Remove(5) || g.Remove(5) || g.Contains(5) || !g.Contains(9) {
		t.Fatalf("Remove(5) twice / Contains wrong: %v", g.Workers)
	}
	b, err := g.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	var out Registry
	if err := out.Decode(b); err != nil || len(out.Workers) != 3 || out.Workers[2] != 9 {
		t.Fatalf("Decode(AppendBinary(%v)) = %v, %v", g.Workers, out.Workers, err)
	}
	var full Registry
	for i := 1; i <= MaxWorkers+1; i++ {
		full.Add(uint64(i) * 3)
	}
	if len(full.Workers) != MaxWorkers {
		t.Fatalf("len after %d Adds = %d, want %d", MaxWorkers+1, len(full.Workers), MaxWorkers)
	}
	set := func(off int, v ...byte) []byte { c := bytes.Clone(b); copy(c[off:], v); return c }
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{name: "empty", in: nil, want: ErrShort},
		{name: "cut", in: b[:len(b)-1], want: ErrShort},
		{name: "trailing", in: append(bytes.Clone(b), 0), want: ErrInvalid},
		{name: "count above max", in: set(5, 0x01, 0x01), want: ErrInvalid},
		{name: "unsorted", in: set(registryHeaderLen, 0xff), want: ErrInvalid},
		{name: "zero id", in: set(registryHeaderLen, 0), want: ErrInvalid},
		{name: "version", in: set(4, Version+1), want: ErrVersion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Registry{Workers: []uint64{7}}
			if err := r.Decode(tc.in); !errors.Is(err, tc.want) || len(r.Workers) != 1 || r.Workers[0] != 7 {
				t.Fatalf("Decode(%s) = %v, workers %v; want %v, unchanged", tc.name, err, r.Workers, tc.want)
			}
		})
	}
	if _, err := (&Registry{Workers: []uint64{2, 1}}).AppendBinary(nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("AppendBinary(unsorted) = %v, want ErrInvalid", err)
	}
}
