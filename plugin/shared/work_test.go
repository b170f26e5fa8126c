package shared

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/gpuroute/gpuroute/scoring"
)

func testRecord(worker uint64, written int64, cfg uint64, n int) *WorkRecord {
	w := &WorkRecord{Worker: worker, WrittenNanos: written, ConfigID: cfg, ArrivalPerSec: 0.5 * float64(worker), Work: make([]scoring.Work, n)}
	for i := range w.Work {
		v := int64(i) + int64(worker)
		w.Work[i] = scoring.Work{QueuedN: v, QueuedTokens: 100 * v, DecodeN: 2 * v, DecodeTokens: 200 * v, UnseenN: 1, UnseenTokens: 10, RunFromNanos: 1000 * v, RunUntilNanos: 3000 * v, PendingN: v / 2}
	}
	return w
}

func recEqual(a, b *WorkRecord) bool {
	if a.Worker != b.Worker || a.WrittenNanos != b.WrittenNanos || a.ConfigID != b.ConfigID ||
		a.ArrivalPerSec != b.ArrivalPerSec || len(a.Work) != len(b.Work) {
		return false
	}
	for i := range a.Work {
		if a.Work[i] != b.Work[i] {
			return false
		}
	}
	return true
}

func TestWorkRecordCodec(t *testing.T) {
	for _, n := range []int{0, 1, 64, MaxReplicas} {
		in := testRecord(3, -7, 99, n)
		b, err := in.AppendBinary(nil)
		if err != nil || len(b) != in.EncodedLen() {
			t.Fatalf("AppendBinary(%d entries) = %d bytes, %v; want %d bytes", n, len(b), err, in.EncodedLen())
		}
		var out WorkRecord
		if err := out.Decode(b); err != nil || !recEqual(in, &out) {
			t.Fatalf("Decode(AppendBinary(%d entries)) = %v, equal %v", n, err, recEqual(in, &out))
		}
	}
	good, _ := testRecord(3, 1, 2, 2).AppendBinary(nil)
	set := func(off int, v ...byte) []byte { b := bytes.Clone(good); copy(b[off:], v); return b }
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{name: "empty", in: nil, want: ErrShort},
		{name: "header cut", in: good[:workHeaderLen-1], want: ErrShort},
		{name: "entry cut", in: good[:len(good)-1], want: ErrShort},
		{name: "trailing", in: append(bytes.Clone(good), 0), want: ErrInvalid},
		{name: "count above max", in: set(workHeaderLen-2, 0xff, 0xff), want: ErrInvalid},
		{name: "negative figure", in: set(workHeaderLen+7, 0x80), want: ErrInvalid},
		{name: "negative window", in: set(workHeaderLen+6*8+7, 0x80), want: ErrInvalid},
		{name: "NaN rate", in: set(workRateOff, 0x01, 0, 0, 0, 0, 0, 0xf8, 0x7f), want: ErrInvalid},
		{name: "negative rate", in: set(workRateOff+7, 0xbf), want: ErrInvalid},
		{name: "version", in: set(4, Version+1), want: ErrVersion},
		{name: "magic", in: set(0, 'g'), want: ErrMagic},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := testRecord(1, 1, 1, 1)
			if err := w.Decode(tc.in); !errors.Is(err, tc.want) || !recEqual(w, testRecord(1, 1, 1, 1)) {
				t.Fatalf("Decode(%s) = %v, want %v and the record unchanged", tc.name, err, tc.want)
			}
		})
	}
	bad := testRecord(1, 1, 1, 1)
	bad.Work[0].DecodeTokens = -1
	if b, err := bad.AppendBinary(nil); !errors.Is(err, ErrInvalid) || b != nil {
		t.Fatalf("AppendBinary(negative) = %v, %v; want nil, ErrInvalid", b, err)
	}
}

func enc(t *testing.T, w *WorkRecord) []byte {
	t.Helper()
	b, err := w.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestWorkKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   uint64
		want string
	}{
		{name: "zero", in: 0, want: "gpuroute/work/0000000000000000"},
		{name: "small", in: 0xab, want: "gpuroute/work/00000000000000ab"},
		{name: "max", in: 1<<64 - 1, want: "gpuroute/work/ffffffffffffffff"},
	} {
		if got := WorkKey(tc.in); got != tc.want || len(got) != WorkKeyLen {
			t.Errorf("WorkKey(%#x) = %q, want %q", tc.in, got, tc.want)
		}
	}
	buf := make([]byte, 0, WorkKeyLen)
	if n := testing.AllocsPerRun(100, func() { buf = AppendWorkKey(buf[:0], 12345) }); n != 0 {
		t.Fatalf("AppendWorkKey allocs = %v, want 0", n)
	}
}

// TestWorkRecordPutEntry: patching one entry in place gives the same bytes
// as encoding the changed record anew.
func TestWorkRecordPutEntry(t *testing.T) {
	w := testRecord(3, 10, 7, 8)
	buf, err := w.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	w.WrittenNanos, w.ArrivalPerSec = 99, 2.5
	w.Work[5] = scoring.Work{QueuedN: 4, QueuedTokens: 4000, DecodeN: 1, DecodeTokens: 7}
	if !w.PutEntry(buf, 5) {
		t.Fatal("PutEntry(valid buffer) = false")
	}
	want, _ := w.AppendBinary(nil)
	if !bytes.Equal(buf, want) {
		t.Fatalf("PutEntry result differs from a fresh encoding")
	}
	if w.PutEntry(buf[:len(buf)-1], 5) || w.PutEntry(buf, 8) {
		t.Error("PutEntry accepted a buffer of another shape or an entry out of range")
	}
	w.Work[2].QueuedN = -1
	if w.PutEntry(buf, 2) {
		t.Error("PutEntry accepted a negative figure")
	}
	w.Work[2].QueuedN, w.ArrivalPerSec = 0, math.Inf(1)
	if w.PutEntry(buf, 2) {
		t.Error("PutEntry accepted an infinite arrival rate")
	}
}

// TestApplyPatchesTakes: the patch path is taken exactly when the reader's
// publish is within the listed patches.
func TestApplyPatchesTakes(t *testing.T) {
	tests := []struct {
		name    string
		publish func(w *WorkRecord, buf []byte) []byte
		want    bool
	}{
		{"one patch", func(w *WorkRecord, buf []byte) []byte { w.PutEntry(buf, 3); return buf }, true},
		{"max patches", func(w *WorkRecord, buf []byte) []byte {
			for i := range MaxPatches {
				w.PutEntry(buf, i)
			}
			return buf
		}, true},
		{"one too many", func(w *WorkRecord, buf []byte) []byte {
			for i := range MaxPatches + 1 {
				w.PutEntry(buf, i%8)
			}
			return buf
		}, false},
		{"whole publish", func(w *WorkRecord, buf []byte) []byte {
			w.NextPublish()
			b, _ := w.AppendBinary(buf[:0])
			return b
		}, false},
		{"no publish", func(w *WorkRecord, buf []byte) []byte { return buf }, false},
		{"other worker", func(w *WorkRecord, buf []byte) []byte {
			w.PutEntry(buf, 3)
			buf[headerLen] ^= 1
			return buf
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := testRecord(3, 10, 7, 8)
			w.NextPublish()
			buf, _ := w.AppendBinary(nil)
			var held WorkRecord
			if err := held.Decode(buf); err != nil {
				t.Fatal(err)
			}
			for i := range w.Work {
				w.Work[i].QueuedN += 5
			}
			buf = tt.publish(w, buf)
			if got := held.applyPatches(buf, func(int) {}); got != tt.want {
				t.Errorf("applyPatches after %s = %v, want %v", tt.name, got, tt.want)
			}
		})
	}
}
