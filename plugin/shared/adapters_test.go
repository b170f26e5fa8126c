package shared

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/gpuroute/gpuroute/scoring"
)

func TestAdapterRecordCodec(t *testing.T) {
	in := AdapterRecord{Worker: 7, ConfigID: 99, Placements: []scoring.AdapterPlacement{
		{Adapter: 1, Replica: 0, UntilNanos: -5}, {Adapter: 1 << 63, Replica: 65535, UntilNanos: 1 << 62},
	}}
	b, err := in.AppendBinary(nil)
	if err != nil || len(b) != adaptersHeaderLen+2*placementLen {
		t.Fatalf("AppendBinary = %d bytes, %v", len(b), err)
	}
	var out AdapterRecord
	if err := out.Decode(b); err != nil || !reflect.DeepEqual(in, out) {
		t.Fatalf("Decode(AppendBinary(%+v)) = %+v, %v", in, out, err)
	}
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrShort},
		{"cut", b[:len(b)-1], ErrShort},
		{"trailing", append(bytes.Clone(b), 0), ErrInvalid},
		{"magic", append([]byte("GRWK"), b[4:]...), ErrMagic},
		{"version", append(append([]byte("GRAD"), Version+1), b[5:]...), ErrVersion},
	} {
		keep := out
		if err := out.Decode(tc.in); !errors.Is(err, tc.want) || !reflect.DeepEqual(keep, out) {
			t.Errorf("Decode(%s) = %v, want %v and the record unchanged", tc.name, err, tc.want)
		}
	}
	bad := AdapterRecord{Placements: []scoring.AdapterPlacement{{Replica: 70000}}}
	if _, err := bad.AppendBinary(nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("AppendBinary(replica 70000) = %v, want ErrInvalid", err)
	}
	if got := string(AppendAdapterKey(nil, 0xab)); got != AdapterKeyPrefix+"00000000000000ab" {
		t.Errorf("AppendAdapterKey(0xab) = %q", got)
	}
}

func FuzzAdapterRecordDecode(f *testing.F) {
	seed, _ := (&AdapterRecord{Worker: 1, Placements: []scoring.AdapterPlacement{{Adapter: 3, Replica: 2, UntilNanos: 9}}}).AppendBinary(nil)
	f.Add(seed)
	f.Add([]byte("GRAD"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var a AdapterRecord
		if a.Decode(b) != nil {
			return
		}
		again, err := a.AppendBinary(nil)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("re-encoding a decoded record = %x, %v; want the input %x", again, err, b)
		}
	})
}
