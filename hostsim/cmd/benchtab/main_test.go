package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestResult(t *testing.T) {
	tests := []struct {
		name, line string
		want       string // name and units, "" for not a result
	}{
		{name: "benchmem", line: "BenchmarkPickBase64-2   \t  500000\t      2100 ns/op\t       0 B/op\t       0 allocs/op",
			want: "BenchmarkPickBase64 2100 ns/op 0 B/op 0 allocs/op"},
		{name: "no procs suffix", line: "BenchmarkPickBase64 \t 100 \t 7300 ns/op", want: "BenchmarkPickBase64 7300 ns/op"},
		{name: "sub-benchmark", line: "BenchmarkParseTextMessages/sorted75-2  10  47900 ns/op  12.5 custom-µs",
			want: "BenchmarkParseTextMessages/sorted75 47900 ns/op 12.5 custom-µs"},
		{name: "name ends in a word", line: "BenchmarkX/w-abc 10 5 ns/op", want: "BenchmarkX/w-abc 5 ns/op"},
		{name: "log line", line: "BenchmarkX-2 is starting", want: ""},
		{name: "odd fields", line: "BenchmarkX-2 10 5 ns/op 3", want: ""},
		{name: "PASS", line: "PASS", want: ""},
		{name: "ok", line: "ok  \tgithub.com/gpuroute/gpuroute/scoring\t3.1s", want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name, units, ok := result(tc.line)
			got := ""
			if ok {
				parts := []string{name}
				for _, u := range units {
					parts = append(parts, number(u.value), u.unit)
				}
				got = strings.Join(parts, " ")
			}
			if got != tc.want {
				t.Errorf("result(%q) = %q, want %q", tc.line, got, tc.want)
			}
		})
	}
}

func TestCell(t *testing.T) {
	tests := []struct {
		name  string
		vs    []float64
		scale func(float64) (float64, string)
		want  string
	}{
		{name: "none", vs: nil, scale: nanoScale, want: "–"},
		{name: "one run", vs: []float64{7300}, scale: nanoScale, want: "7.30 µs"},
		{name: "median and range", vs: []float64{2300, 2100, 2200}, scale: nanoScale, want: "2.20 µs (2.10–2.30)"},
		{name: "even count", vs: []float64{10, 20}, scale: noScale, want: "15 (10–20)"},
		{name: "equal runs", vs: []float64{0, 0, 0}, scale: noScale, want: "0"},
		{name: "ms", vs: []float64{1.02e6}, scale: nanoScale, want: "1.02 ms"},
		{name: "ns", vs: []float64{156}, scale: nanoScale, want: "156 ns"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := cell(tc.vs, tc.scale); got != tc.want {
				t.Errorf("cell(%v) = %q, want %q", tc.vs, got, tc.want)
			}
		})
	}
}

// TestRun: two labelled inputs give one time column each where they have
// results, runs and ranges from -count, and custom metrics in their own
// table, all, those -metrics names or none; an input without benchmarks
// is an error.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	native := filepath.Join(dir, "native.txt")
	wazero := filepath.Join(dir, "wazero.txt")
	empty := filepath.Join(dir, "empty.txt")
	write(t, native, `goos: linux
goarch: amd64
pkg: example/scoring
cpu: AMD EPYC
BenchmarkPickBase64-2   	  500000	      2100 ns/op	       0 B/op	       0 allocs/op
BenchmarkPickBase64-2   	  500000	      2300 ns/op	       0 B/op	       0 allocs/op
BenchmarkPickBase64-2   	  500000	      2200 ns/op	       0 B/op	       0 allocs/op
PASS
pkg: example/router
BenchmarkRequestPathReplay64-2 	   20000	     45123 ns/op	        36.1 guest-p50-µs	        44.0 guest-p99-µs	       0 B/op	       0 allocs/op
`)
	write(t, wazero, `goos: wasip1
goarch: wasm
pkg: example/scoring
BenchmarkPickBase64 	  100000	      7300 ns/op	       0 B/op	       0 allocs/op
`)
	write(t, empty, "PASS\n")
	var out bytes.Buffer
	if err := run([]string{"native=" + native, wazero}, nil, &out); err != nil {
		t.Fatal(err)
	}
	want := "Inputs:\n" +
		"- `native`: linux/amd64, AMD EPYC\n" +
		"- `wazero`: wasip1/wasm\n" +
		"\n`example/scoring`\n\n" +
		"| benchmark | runs | native | wazero | B/op | allocs/op |\n" +
		"|---|---|---|---|---|---|\n" +
		"| `PickBase64` | 3 / 1 | 2.20 µs (2.10–2.30) | 7.30 µs | 0 | 0 |\n" +
		"\n`example/router`\n\n" +
		"| benchmark | runs | native | B/op | allocs/op |\n" +
		"|---|---|---|---|---|\n" +
		"| `RequestPathReplay64` | 1 | 45.1 µs | 0 | 0 |\n" +
		"\n| benchmark | guest-p50-µs | guest-p99-µs |\n" +
		"|---|---|---|\n" +
		"| `RequestPathReplay64` | 36.1 | 44 |\n"
	if got := out.String(); got != want {
		t.Errorf("run(native, wazero) wrote\n%s\nwant\n%s", got, want)
	}
	out.Reset()
	if err := run([]string{"-metrics", "guest-p99-µs,min-p99-µs", "native=" + native}, nil, &out); err != nil {
		t.Fatal(err)
	}
	wantMetrics := "| benchmark | guest-p99-µs | min-p99-µs |\n|---|---|---|\n| `RequestPathReplay64` | 44 | – |\n"
	if got := out.String(); !strings.HasSuffix(got, wantMetrics) {
		t.Errorf("run(-metrics guest-p99-µs,min-p99-µs) wrote\n%s\nwant it to end with\n%s", got, wantMetrics)
	}
	out.Reset()
	if err := run([]string{"-metrics", "-", native}, nil, &out); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); strings.Contains(got, "guest-p50") {
		t.Errorf("run(-metrics -) wrote a metrics table:\n%s", got)
	}
	if err := run([]string{empty}, nil, &out); err == nil || !strings.Contains(err.Error(), "no benchmark results") {
		t.Errorf("run(%q) = %v, want a no benchmark results error", empty, err)
	}
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
