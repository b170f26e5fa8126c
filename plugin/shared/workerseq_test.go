package shared

import "testing"

func TestWorkerSeqCodec(t *testing.T) {
	tests := []struct {
		name      string
		v         []byte
		id, nonce uint64
		ok        bool
	}{
		{name: "round trip", v: AppendWorkerSeq(nil, 7, 0xfeed), id: 7, nonce: 0xfeed, ok: true},
		{name: "short", v: make([]byte, 15)},
		{name: "long", v: make([]byte, 17)},
		{name: "empty"},
	}
	for _, tt := range tests {
		if id, nonce, ok := DecodeWorkerSeq(tt.v); id != tt.id || nonce != tt.nonce || ok != tt.ok {
			t.Errorf("DecodeWorkerSeq(%s) = %d, %#x, %v; want %d, %#x, %v", tt.name, id, nonce, ok, tt.id, tt.nonce, tt.ok)
		}
	}
}
