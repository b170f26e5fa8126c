package le

import "testing"

func TestUint64(t *testing.T) {
	b := []byte{0xff, 1, 2, 3, 4, 5, 6, 7, 8, 0xff}
	tests := []struct {
		name string
		at   int
		want uint64
	}{
		{"start", 0, 0x07060504030201ff},
		{"inside", 1, 0x0807060504030201},
		{"end", 2, 0xff08070605040302},
	}
	for _, tt := range tests {
		if got := Uint64(b, tt.at); got != tt.want {
			t.Errorf("Uint64(b, %d) = %#x, want %#x", tt.at, got, tt.want)
		}
		if got := StringUint64(string(b), tt.at); got != tt.want {
			t.Errorf("StringUint64(b, %d) = %#x, want %#x", tt.at, got, tt.want)
		}
	}
}

func TestUint64Short(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Uint64 of 7 bytes did not panic")
		}
	}()
	Uint64(make([]byte, 7), 0)
}
