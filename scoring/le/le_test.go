package le

import (
	"bytes"
	"testing"
)

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
		if got, want := Uint32(b, tt.at), uint32(tt.want); got != want {
			t.Errorf("Uint32(b, %d) = %#x, want %#x", tt.at, got, want)
		}
		if got, want := Uint16(b, tt.at), uint16(tt.want); got != want {
			t.Errorf("Uint16(b, %d) = %#x, want %#x", tt.at, got, want)
		}
	}
}

// TestAppend: the appenders write what the readers read.
func TestAppend(t *testing.T) {
	b := AppendUint16([]byte{9}, 0x0201)
	b = AppendUint32(b, 0x06050403)
	if want := []byte{9, 1, 2, 3, 4, 5, 6}; !bytes.Equal(b, want) {
		t.Fatalf("AppendUint16(9, 0x0201) then AppendUint32(0x06050403) = %v, want %v", b, want)
	}
	if got := Uint16(b, 1); got != 0x0201 {
		t.Errorf("Uint16(appended, 1) = %#x, want 0x201", got)
	}
	if got := Uint32(b, 3); got != 0x06050403 {
		t.Errorf("Uint32(appended, 3) = %#x, want 0x6050403", got)
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
