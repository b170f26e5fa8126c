package shared

import (
	"bytes"
	"errors"
	"testing"
)

func TestHeldNoticeRoundTrip(t *testing.T) {
	for _, n := range []HeldNotice{
		{Worker: 7, Held: 0, TopBand: NoBand},
		{Worker: 1 << 60, Held: 12, TopBand: 2, OldestNanos: 1e18},
	} {
		b, err := n.AppendBinary(nil)
		if err != nil {
			t.Fatal(err)
		}
		var got HeldNotice
		if err := got.Decode(b); err != nil || got != n {
			t.Fatalf("Decode(AppendBinary(%+v)) = %+v, %v", n, got, err)
		}
	}
}

func TestHeldNoticeRefused(t *testing.T) {
	for _, n := range []HeldNotice{
		{Held: 3, TopBand: NoBand},
		{Held: 0, TopBand: 1},
		{Held: 1, TopBand: 300},
		{Held: 1, TopBand: 0, OldestNanos: -5},
	} {
		if _, err := n.AppendBinary(nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("AppendBinary(%+v) = %v, want ErrInvalid", n, err)
		}
	}
	good, _ := (&HeldNotice{Worker: 1, Held: 1, TopBand: 0}).AppendBinary(nil)
	var n HeldNotice
	for name, b := range map[string][]byte{
		"short":    good[:len(good)-1],
		"trailing": append(append([]byte(nil), good...), 0),
		"magic":    append([]byte("GRXX"), good[4:]...),
		"wake":     AppendWake(nil, 1),
	} {
		if err := n.Decode(b); err == nil {
			t.Errorf("Decode(%s) = nil, want an error", name)
		}
	}
}

func TestWake(t *testing.T) {
	w := AppendWake(nil, 42)
	if !IsWake(w) || IsWake(w[:len(w)-1]) || IsWake(append(w, 0)) {
		t.Fatal("IsWake does not recognise exactly a wake")
	}
	n, _ := (&HeldNotice{Worker: 42, Held: 1, TopBand: 0}).AppendBinary(nil)
	if IsWake(n) {
		t.Fatal("a held notice is taken for a wake")
	}
	if q := WakeQueue(0xab); q != WakeQueuePrefix+"00000000000000ab" {
		t.Fatalf("WakeQueue(0xab) = %q", q)
	}
}

// FuzzHeldNotice: any bytes decode to a valid notice or an error, and a
// valid one round-trips to the same bytes.
func FuzzHeldNotice(f *testing.F) {
	good, _ := (&HeldNotice{Worker: 3, Held: 9, TopBand: 1, OldestNanos: 77}).AppendBinary(nil)
	f.Add(good)
	f.Add(AppendWake(nil, 3))
	f.Fuzz(func(t *testing.T, b []byte) {
		var n HeldNotice
		if err := n.Decode(b); err != nil {
			return
		}
		out, err := n.AppendBinary(nil)
		if err != nil || !bytes.Equal(out, b) {
			t.Fatalf("decoded %+v re-encodes to %x, %v; was %x", n, out, err, b)
		}
		_ = IsWake(b)
	})
}
