// Command benchtab turns `go test -bench` output into the Markdown tables of
// docs/performance.md, so that the figures there are produced by a command
// anyone can run rather than pasted:
//
//	go test -run '^$' -bench . -benchmem -count 3 ./scoring > native.txt
//	GOOS=wasip1 GOARCH=wasm go test -exec "$PWD/build/wasmexec" -run '^$' -bench . -benchmem -count 3 ./scoring > wazero.txt
//	go run ./hostsim/cmd/benchtab native=native.txt wazero=wazero.txt
//
// Each argument is a file of benchmark output, optionally labelled
// (LABEL=FILE; the label defaults to the file's base name; "-" reads
// standard input). Benchmarks are grouped by package; each labelled input
// gets its own time column, so the same benchmarks run natively and under a
// wasm engine read side by side. A cell is the median of the runs (-count),
// with their range when they differ. Metrics other than ns/op, B/op and
// allocs/op (the request-path benchmarks' percentiles) go in a second table
// per package, a column per metric: all of them in order of name, or those
// -metrics lists, in its order ("-": none). `make perf-tables` runs the benchmarks
// docs/performance.md shows and this command over their output.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchtab:", err)
		os.Exit(1)
	}
}

func run(args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("benchtab", flag.ContinueOnError)
	metrics := fs.String("metrics", "", `comma-separated metrics of the second table, in order (default: all; "-": none)`)
	if err := fs.Parse(args); err != nil {
		return err
	}
	args = fs.Args()
	if len(args) == 0 {
		args = []string{"-"}
	}
	var inputs []input
	for _, a := range args {
		label, path, ok := strings.Cut(a, "=")
		if !ok {
			path = a
			label = strings.TrimSuffix(filepath.Base(a), filepath.Ext(a))
			if a == "-" {
				label = "stdin"
			}
		}
		r := stdin
		if path != "-" {
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			r = f
		}
		in, err := parse(label, r)
		if err != nil {
			return errors.New(path + ": " + err.Error())
		}
		inputs = append(inputs, in)
	}
	var selected []string
	switch *metrics {
	case "":
	case "-":
		selected = []string{}
	default:
		selected = strings.Split(*metrics, ",")
	}
	w := bufio.NewWriter(stdout)
	render(w, inputs, selected)
	return w.Flush()
}

// input is one file of benchmark output.
type input struct {
	label string
	// env is what the output says it ran on (goos, goarch, cpu).
	env map[string]string
	// results maps a package and benchmark to each unit's values, one per run.
	results map[key]map[string][]float64
	order   []key // first appearance
}

type key struct{ pkg, name string }

// parse reads `go test -bench` output: "pkg:", "goos:", "goarch:" and
// "cpu:" lines, and result lines "BenchmarkName-P  N  V unit  V unit ...".
// Lines of anything else (PASS, ok, test logs) are skipped.
func parse(label string, r io.Reader) (input, error) {
	in := input{label: label, env: map[string]string{}, results: map[key]map[string][]float64{}}
	pkg := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if k, v, ok := strings.Cut(line, ": "); ok && (k == "goos" || k == "goarch" || k == "cpu" || k == "pkg") {
			if k == "pkg" {
				pkg = strings.TrimSpace(v)
			} else {
				in.env[k] = strings.TrimSpace(v)
			}
			continue
		}
		name, units, ok := result(line)
		if !ok {
			continue
		}
		k := key{pkg, name}
		m := in.results[k]
		if m == nil {
			m = map[string][]float64{}
			in.results[k] = m
			in.order = append(in.order, k)
		}
		for _, u := range units {
			m[u.unit] = append(m[u.unit], u.value)
		}
	}
	if err := sc.Err(); err != nil {
		return in, err
	}
	if len(in.order) == 0 {
		return in, errors.New("no benchmark results")
	}
	return in, nil
}

type measure struct {
	value float64
	unit  string
}

// result parses one benchmark result line; ok is false for any other line.
func result(line string) (name string, units []measure, ok bool) {
	f := strings.Fields(line)
	if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
		return "", nil, false
	}
	if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
		return "", nil, false
	}
	for i := 2; i+1 < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return "", nil, false
		}
		units = append(units, measure{v, f[i+1]})
	}
	return trimProcs(f[0]), units, true
}

// trimProcs drops the "-P" GOMAXPROCS suffix the testing package appends.
func trimProcs(name string) string {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return name
	}
	if _, err := strconv.Atoi(name[i+1:]); err != nil {
		return name
	}
	return name[:i]
}

// Units every benchmark of -benchmem reports; the others are its own.
const (
	unitTime   = "ns/op"
	unitBytes  = "B/op"
	unitAllocs = "allocs/op"
)

// render writes, per package in order of first appearance, a table of
// ns/op per input with the first input's B/op and allocs/op, then a table
// of the other metrics (selected, or all).
func render(w io.Writer, inputs []input, selected []string) {
	fmt.Fprintln(w, "Inputs:")
	for _, in := range inputs {
		fmt.Fprintf(w, "- `%s`: %s/%s", in.label, orDash(in.env["goos"]), orDash(in.env["goarch"]))
		if cpu := in.env["cpu"]; cpu != "" {
			fmt.Fprintf(w, ", %s", cpu)
		}
		fmt.Fprintln(w)
	}
	var pkgs []string
	byPkg := map[string][]string{}
	for _, in := range inputs {
		for _, k := range in.order {
			if _, ok := byPkg[k.pkg]; !ok {
				pkgs = append(pkgs, k.pkg)
			}
			if !slices.Contains(byPkg[k.pkg], k.name) {
				byPkg[k.pkg] = append(byPkg[k.pkg], k.name)
			}
		}
	}
	for _, pkg := range pkgs {
		ins := withPackage(inputs, pkg)
		fmt.Fprintf(w, "\n`%s`\n\n", orDash(pkg))
		header(w, []string{"benchmark", "runs"}, labels(ins), []string{"B/op", "allocs/op"})
		for _, name := range byPkg[pkg] {
			k := key{pkg, name}
			fmt.Fprintf(w, "| `%s` | %s |", strings.TrimPrefix(name, "Benchmark"), runs(ins, k))
			for _, in := range ins {
				fmt.Fprintf(w, " %s |", cell(in.results[k][unitTime], nanoScale))
			}
			first := firstWith(ins, k)
			fmt.Fprintf(w, " %s | %s |\n", cell(first[unitBytes], noScale), cell(first[unitAllocs], noScale))
		}
		metrics := selected
		if metrics == nil {
			metrics = ownMetrics(ins, pkg)
		}
		renderMetrics(w, ins, pkg, byPkg[pkg], metrics)
	}
}

// renderMetrics writes the table of metrics: a column per metric, a row
// per benchmark (and input, when there are several) that reports any.
func renderMetrics(w io.Writer, ins []input, pkg string, names, metrics []string) {
	type row struct {
		name string
		in   *input
	}
	var rows []row
	for _, name := range names {
		for i := range ins {
			m := ins[i].results[key{pkg, name}]
			if slices.ContainsFunc(metrics, func(u string) bool { return len(m[u]) > 0 }) {
				rows = append(rows, row{name, &ins[i]})
			}
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w)
	lead := []string{"benchmark"}
	if len(ins) > 1 {
		lead = append(lead, "input")
	}
	header(w, lead, metrics)
	for _, r := range rows {
		fmt.Fprintf(w, "| `%s` |", strings.TrimPrefix(r.name, "Benchmark"))
		if len(ins) > 1 {
			fmt.Fprintf(w, " %s |", r.in.label)
		}
		for _, u := range metrics {
			fmt.Fprintf(w, " %s |", cell(r.in.results[key{pkg, r.name}][u], noScale))
		}
		fmt.Fprintln(w)
	}
}

// ownMetrics returns, sorted, the units the benchmarks of pkg report
// besides ns/op, B/op and allocs/op.
func ownMetrics(ins []input, pkg string) []string {
	var us []string
	for _, in := range ins {
		for k, m := range in.results {
			if k.pkg != pkg {
				continue
			}
			for u := range m {
				if u != unitTime && u != unitBytes && u != unitAllocs && !slices.Contains(us, u) {
					us = append(us, u)
				}
			}
		}
	}
	slices.Sort(us)
	return us
}

// header writes a table's header row, the columns of cols in order, and
// its separator.
func header(w io.Writer, cols ...[]string) {
	n := 0
	fmt.Fprint(w, "|")
	for _, c := range cols {
		for _, s := range c {
			fmt.Fprintf(w, " %s |", s)
			n++
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "|"+strings.Repeat("---|", n))
}

// labels returns the inputs' labels, the time columns' names.
func labels(ins []input) []string {
	var ls []string
	for _, in := range ins {
		ls = append(ls, in.label)
	}
	return ls
}

// withPackage returns the inputs that have results of pkg: an input of
// other packages gets no column there.
func withPackage(inputs []input, pkg string) []input {
	var out []input
	for _, in := range inputs {
		if slices.ContainsFunc(in.order, func(k key) bool { return k.pkg == pkg }) {
			out = append(out, in)
		}
	}
	return out
}

// runs is the number of runs of k, per input where they differ (inputs
// without k are left out).
func runs(inputs []input, k key) string {
	var ns []string
	for _, in := range inputs {
		n := 0
		for _, vs := range in.results[k] {
			n = max(n, len(vs))
		}
		if n > 0 {
			ns = append(ns, strconv.Itoa(n))
		}
	}
	if ns = slices.Compact(ns); len(ns) == 1 {
		return ns[0]
	}
	return strings.Join(ns, " / ")
}

// firstWith returns the results of k in the first input that has them.
func firstWith(inputs []input, k key) map[string][]float64 {
	for _, in := range inputs {
		if m := in.results[k]; m != nil {
			return m
		}
	}
	return nil
}

// cell is the median of vs and, when the runs differ, their range, in the
// unit scale chooses for the median.
func cell(vs []float64, scale func(float64) (float64, string)) string {
	if len(vs) == 0 {
		return "–"
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	div, unit := scale(med)
	lo, hi := number(s[0]/div), number(s[len(s)-1]/div)
	if lo == hi {
		return number(med/div) + unit
	}
	return number(med/div) + unit + " (" + lo + "–" + hi + ")"
}

// nanoScale writes a time in ns in the unit that keeps it readable.
func nanoScale(ns float64) (float64, string) {
	switch {
	case ns >= 1e9:
		return 1e9, " s"
	case ns >= 1e6:
		return 1e6, " ms"
	case ns >= 1e3:
		return 1e3, " µs"
	}
	return 1, " ns"
}

// noScale keeps a count or a metric in its own unit.
func noScale(float64) (float64, string) { return 1, "" }

// number writes integers as they are, other values to three significant
// digits.
func number(v float64) string {
	if v == float64(int64(v)) && v < 1e15 && v > -1e15 {
		return strconv.FormatInt(int64(v), 10)
	}
	return sig3(v)
}

// sig3 writes v with three significant digits, without exponent for the
// magnitudes benchmarks report.
func sig3(v float64) string {
	a := v
	if a < 0 {
		a = -a
	}
	prec := 0
	switch {
	case a == 0 || a >= 100:
		prec = 0
	case a >= 10:
		prec = 1
	case a >= 1:
		prec = 2
	default:
		prec = 3
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}
