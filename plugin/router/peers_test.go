package router

import (
	"net/url"
	"strconv"
	"strings"
	"testing"
)

func TestQueryUint(t *testing.T) {
	tests := []struct {
		name, path string
		want       uint64
	}{
		{"present", "/p?epoch=7&since=42", 42},
		{"first", "/p?since=3&epoch=1", 3},
		{"absent", "/p?epoch=7", 0},
		{"no query", "/p", 0},
		{"negative", "/p?since=-1", 0},
		{"overflow", "/p?since=18446744073709551616", 0},
		{"max", "/p?since=18446744073709551615", 1<<64 - 1},
		{"prefix of another name", "/p?sincere=5&since=6", 6},
		{"empty value", "/p?since=", 0},
		{"empty pairs", "/p?&&since=9&", 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := queryUint([]byte(tt.path), querySince); got != tt.want {
				t.Errorf("queryUint(%q, %q) = %d, want %d", tt.path, querySince, got, tt.want)
			}
		})
	}
}

// FuzzQueryUint holds queryUint to net/url's reading of the same query for
// plain decimal values (the exchange's own asks), and to never panicking.
func FuzzQueryUint(f *testing.F) {
	f.Add("/p?epoch=7&since=42")
	f.Add("/p?since=%34%32")
	f.Add("?since=1&since=2")
	f.Fuzz(func(t *testing.T, path string) {
		got := queryUint([]byte(path), querySince)
		_, q, ok := strings.Cut(path, "?")
		if !ok {
			if got != 0 {
				t.Fatalf("queryUint(%q) = %d without a query, want 0", path, got)
			}
			return
		}
		vals, err := url.ParseQuery(q)
		if err != nil || len(vals[querySince]) == 0 {
			return // escapes and odd separators: only "no panic" is promised
		}
		want, err := strconv.ParseUint(vals[querySince][0], 10, 64)
		if err == nil && vals[querySince][0] == firstRaw(q) && got != want {
			t.Fatalf("queryUint(%q) = %d, want %d", path, got, want)
		}
	})
}

// firstRaw returns the raw (unescaped) value of the first since= pair.
func firstRaw(q string) string {
	for q != "" {
		var kv string
		kv, q, _ = strings.Cut(q, "&")
		if v, ok := strings.CutPrefix(kv, querySince+"="); ok {
			return v
		}
	}
	return ""
}
