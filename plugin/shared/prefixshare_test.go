package shared

import (
	"bytes"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// shareEntry is one decoded tail entry.
type shareEntry struct {
	replica int
	cps     []uint64
}

// testConfigID is the replica list the test shares number.
const testConfigID = 77

// newShare encodes a share of generation gen with base and entries.
func newShare(t testing.TB, gen uint64, base []byte, entries []shareEntry) []byte {
	t.Helper()
	b := append(AppendPrefixShareHeader(nil, gen, testConfigID, 0, 0, 0), base...)
	if !SetPrefixShareBase(b) {
		t.Fatalf("SetPrefixShareBase(%d-byte base) = false", len(base))
	}
	for _, e := range entries {
		b = AppendPrefixShareEntry(b, e.replica, e.cps)
	}
	return b
}

// walk decodes the tail of sh from skip with a scratch of n checkpoints.
func walk(sh *PrefixShare, skip, n int) ([]shareEntry, int, error) {
	var got []shareEntry
	end, err := sh.Each(skip, make([]uint64, n), func(r int, cps []uint64) {
		got = append(got, shareEntry{r, slices.Clone(cps)})
	})
	return got, end, err
}

func TestPrefixShare(t *testing.T) {
	base := []byte("an index encoding")
	first := []shareEntry{{3, []uint64{1, 2, 3}}, {0, []uint64{9}}}
	v := newShare(t, 42, base, first)
	var sh PrefixShare
	if err := sh.Decode(v); err != nil {
		t.Fatalf("Decode = %v", err)
	}
	if sh.Gen != 42 || sh.ConfigID != testConfigID || !bytes.Equal(sh.Base, base) {
		t.Fatalf("Decode = gen %d, configuration %d, base %q; want 42, %d, %q", sh.Gen, sh.ConfigID, sh.Base, testConfigID, base)
	}
	got, end, err := walk(&sh, 0, 8)
	if err != nil || end != len(sh.Tail) || !entriesEqual(got, first) {
		t.Fatalf("Each(0) = %v, end %d, %v; want %v, end %d", got, end, err, first, len(sh.Tail))
	}

	// A writer appends to a copy of the value; a reader at the old end
	// gets only the new entries.
	more := []shareEntry{{65535, []uint64{7, 8}}}
	v2 := AppendPrefixShareEntry(slices.Clone(v), more[0].replica, more[0].cps)
	if err := sh.Decode(v2); err != nil {
		t.Fatalf("Decode(appended) = %v", err)
	}
	if got, end2, err := walk(&sh, end, 8); err != nil || end2 != len(sh.Tail) || !entriesEqual(got, more) {
		t.Fatalf("Each(%d) after an append = %v, end %d, %v; want %v", end, got, end2, err, more)
	}

	// A scratch smaller than an entry passes the entry's first checkpoints
	// (each covers the prompt up to it: a prefix of the list is valid).
	if got, _, err := walk(&sh, 0, 2); err != nil || !slices.Equal(got[0].cps, []uint64{1, 2}) {
		t.Errorf("Each with a scratch of 2 = %v, %v; want the first entry cut to [1 2]", got, err)
	}

	// What AppendPrefixShareEntry refuses.
	for _, tc := range []struct {
		name    string
		replica int
		cps     []uint64
	}{
		{"empty list", 1, nil},
		{"negative replica", -1, []uint64{1}},
		{"replica beyond u16", 1 << 16, []uint64{1}},
	} {
		if out := AppendPrefixShareEntry(slices.Clone(v), tc.replica, tc.cps); !bytes.Equal(out, v) {
			t.Errorf("AppendPrefixShareEntry(%s) appended %d bytes, want none", tc.name, len(out)-len(v))
		}
	}
	if SetPrefixShareBase(make([]byte, PrefixShareHeaderLen-1)) {
		t.Errorf("SetPrefixShareBase(shorter than a header) = true, want false")
	}
}

// TestPrefixShareLineage: a base written over another generation says which
// one, how long its tail was and from where the new tail repeats it;
// figures a u32 cannot say, or a start past the end, make it a base that
// continues none, and a value saying so does not decode.
func TestPrefixShareLineage(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		prev                   uint64
		from, tail             int
		wantPrev               uint64
		wantFrom, wantPrevTail int
	}{
		{name: "continues", prev: 42, from: 100, tail: 70000, wantPrev: 42, wantFrom: 100, wantPrevTail: 70000},
		{name: "none", prev: 0},
		{name: "negative start", prev: 42, from: -1, tail: 10},
		{name: "start past the end", prev: 42, from: 11, tail: 10},
		{name: "tail beyond u32", prev: 42, from: 0, tail: 1 << 33},
	} {
		b := AppendPrefixShareHeader(nil, 43, testConfigID, tc.prev, tc.from, tc.tail)
		b = append(b, "base"...)
		if !SetPrefixShareBase(b) {
			t.Fatalf("%s: SetPrefixShareBase = false", tc.name)
		}
		b = AppendPrefixShareEntry(b, 2, []uint64{5})
		var sh PrefixShare
		if err := sh.Decode(b); err != nil {
			t.Fatalf("%s: Decode = %v", tc.name, err)
		}
		if sh.Gen != 43 || sh.Prev != tc.wantPrev || sh.PrevFrom != tc.wantFrom || sh.PrevTail != tc.wantPrevTail ||
			string(sh.Base) != "base" {
			t.Fatalf("%s: Decode = gen %d, prev %d from %d of %d, base %q; want 43, %d from %d of %d, \"base\"",
				tc.name, sh.Gen, sh.Prev, sh.PrevFrom, sh.PrevTail, sh.Base, tc.wantPrev, tc.wantFrom, tc.wantPrevTail)
		}
		if got, _, err := walk(&sh, 0, 4); err != nil || !entriesEqual(got, []shareEntry{{2, []uint64{5}}}) {
			t.Fatalf("%s: tail = %v, %v; want the one entry", tc.name, got, err)
		}
		// The tail's growth leaves out what it repeats of the previous
		// generation's.
		if want := max(len(sh.Tail)-(tc.wantPrevTail-tc.wantFrom), 0); sh.Grown() != want {
			t.Fatalf("%s: Grown() = %d, want %d", tc.name, sh.Grown(), want)
		}
	}
	sh := PrefixShare{Prev: 1, PrevFrom: 4, PrevTail: 10, Tail: make([]byte, 30)}
	if sh.Grown() != 24 {
		t.Fatalf("Grown() of a 30-byte tail repeating 6 bytes = %d, want 24", sh.Grown())
	}
	bad := AppendPrefixShareHeader(nil, 43, testConfigID, 42, 5, 10)
	copy(bad[headerLen+24:], []byte{11, 0, 0, 0}) // start 11 of a tail of 10
	SetPrefixShareBase(bad)
	if err := sh.Decode(bad); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Decode(start past the previous tail) = %v, want ErrInvalid", err)
	}
	copy(bad[headerLen+16:], make([]byte, 8)) // no previous generation, but its tail
	copy(bad[headerLen+24:], []byte{5, 0, 0, 0})
	if err := sh.Decode(bad); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Decode(a previous tail without a previous generation) = %v, want ErrInvalid", err)
	}
}

func entriesEqual(a, b []shareEntry) bool {
	return slices.EqualFunc(a, b, func(x, y shareEntry) bool { return x.replica == y.replica && slices.Equal(x.cps, y.cps) })
}

func TestPrefixShareErrors(t *testing.T) {
	good := newShare(t, 7, []byte("base"), []shareEntry{{1, []uint64{5, 6}}})
	set := func(off int, v ...byte) []byte { b := bytes.Clone(good); copy(b[off:], v); return b }
	for _, tc := range []struct {
		name      string
		in        []byte
		decodeErr error // nil: Decode accepts it, Each fails with eachErr
		eachErr   error
	}{
		{name: "empty", in: nil, decodeErr: ErrShort},
		{name: "header cut", in: good[:PrefixShareHeaderLen-1], decodeErr: ErrShort},
		{name: "base beyond bytes", in: set(offShareBaseLen, 0xff, 0xff), decodeErr: ErrShort},
		{name: "magic", in: set(0, 'g'), decodeErr: ErrMagic},
		{name: "version", in: set(4, Version+1), decodeErr: ErrVersion},
		{name: "entry head cut", in: good[:PrefixShareHeaderLen+4+3], eachErr: ErrShort},
		{name: "checkpoints cut", in: good[:len(good)-1], eachErr: ErrShort},
		{name: "empty entry", in: set(PrefixShareHeaderLen+4+2, 0, 0), eachErr: ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sh PrefixShare
			err := sh.Decode(tc.in)
			if !errors.Is(err, tc.decodeErr) || (tc.decodeErr == nil) != (err == nil) {
				t.Fatalf("Decode(%s) = %v, want %v", tc.name, err, tc.decodeErr)
			}
			if err != nil {
				return
			}
			got, end, err := walk(&sh, 0, 8)
			if !errors.Is(err, tc.eachErr) || len(got) != 0 || end != 0 {
				t.Fatalf("Each(%s) = %v, end %d, %v; want no entry, end 0, %v", tc.name, got, end, err, tc.eachErr)
			}
		})
	}
	var sh PrefixShare
	if err := sh.Decode(good); err != nil {
		t.Fatal(err)
	}
	for _, skip := range []int{-1, len(sh.Tail) + 1} {
		if _, _, err := walk(&sh, skip, 8); !errors.Is(err, ErrInvalid) {
			t.Errorf("Each(skip %d of a %d-byte tail) = %v, want %v", skip, len(sh.Tail), err, ErrInvalid)
		}
	}
}

func TestPrefixShareAllocs(t *testing.T) {
	v := newShare(t, 1, make([]byte, 1024), []shareEntry{{1, []uint64{1, 2, 3}}, {2, []uint64{4}}})
	buf := make([]byte, 0, len(v)+64)
	scratch := make([]uint64, 8)
	var sh PrefixShare
	sum := 0
	fn := func(r int, cps []uint64) { sum += r + len(cps) }
	if n := testing.AllocsPerRun(100, func() {
		buf = AppendPrefixShareEntry(append(buf[:0], v...), 3, scratch[:4])
		if sh.Decode(buf) == nil {
			_, _ = sh.Each(0, scratch, fn)
		}
	}); n != 0 {
		t.Errorf("append, Decode and Each allocated %.1f times per run, want 0", n)
	}
}

// FuzzPrefixShare: any value decodes or fails without panicking; the
// entries Each walks, appended again to a share of the same base,
// re-encode to the same bytes up to where it stopped; and a walk resumed
// from any entry boundary it returned yields the rest.
func FuzzPrefixShare(f *testing.F) {
	f.Add(newShare(f, 1, []byte("base"), []shareEntry{{1, []uint64{5, 6}}, {2, []uint64{7}}}))
	f.Add(newShare(f, 2, nil, nil))
	lineage := append(AppendPrefixShareHeader(nil, 3, testConfigID, 2, 8, 20), "base"...)
	SetPrefixShareBase(lineage)
	f.Add(AppendPrefixShareEntry(lineage, 4, []uint64{9}))
	f.Add([]byte("GRPX\x03"))
	f.Fuzz(func(t *testing.T, in []byte) {
		var sh PrefixShare
		if sh.Decode(in) != nil {
			return
		}
		var bounds []int
		var got []shareEntry
		end, err := sh.Each(0, make([]uint64, 1<<16), func(r int, cps []uint64) {
			got = append(got, shareEntry{r, slices.Clone(cps)})
		})
		if end < 0 || end > len(sh.Tail) || (err == nil) != (end == len(sh.Tail)) {
			t.Fatalf("Each(%q) = end %d, %v over a %d-byte tail", in, end, err, len(sh.Tail))
		}
		re := append(AppendPrefixShareHeader(nil, sh.Gen, sh.ConfigID, sh.Prev, sh.PrevFrom, sh.PrevTail), sh.Base...)
		SetPrefixShareBase(re)
		for _, e := range got {
			re = AppendPrefixShareEntry(re, e.replica, e.cps)
			bounds = append(bounds, len(re)-(len(in)-len(sh.Tail)))
		}
		if want := in[:len(in)-len(sh.Tail)+end]; !bytes.Equal(re, want) {
			t.Fatalf("re-encoding Each(%q)'s entries = %q, want %q", in, re, want)
		}
		for k, at := range bounds {
			rest, _, _ := walk(&sh, at, 1<<16)
			if !entriesEqual(rest, got[k+1:]) {
				t.Fatalf("Each(%q) from entry %d's end = %v, want %v", in, k, rest, got[k+1:])
			}
		}
	})
}

// TestPrefixShareKeyNamesVersion: the key changes with the encoding, so
// that old and new VMs sharing a vm_id during a module update keep an
// index each rather than replacing each other's unreadable value.
func TestPrefixShareKeyNamesVersion(t *testing.T) {
	if want := "/" + strconv.Itoa(Version); !strings.HasSuffix(KeyPrefixShare, want) {
		t.Fatalf("KeyPrefixShare = %q, want it to end with %q", KeyPrefixShare, want)
	}
}
