package fleetsim

import (
	"html"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// WorkloadResults groups one workload's results for the HTML report.
type WorkloadResults struct {
	Workload *Workload
	Results  []*Result
	// Seeds is the number of seeds pooled into Results (0 or 1: one run)
	// and Requests their requests in all (0: Workload's).
	Seeds, Requests int
	// Hardware is the fleet spec the runs used ("h100:2,a100:2,l4:2"; "":
	// Workload.Hardware); the load charts name each replica's profile.
	Hardware string
}

// ProtectedClasses are the request classes a flow-control workload exists
// to protect, in the order the report looks for them: the critical band
// of the priority workload and the light tenant of the fairness one. When
// a workload has one, its verdict is that class's time to first token.
var ProtectedClasses = []string{ClassCritical, ClassLight}

// protectedClass returns the first of ProtectedClasses that rs have, "" if
// none.
func protectedClass(rs []*Result) string {
	for _, c := range ProtectedClasses {
		for _, r := range rs {
			if r != nil && r.Summary.Classes[c] != nil {
				return c
			}
		}
	}
	return ""
}

// Metrics returns the figures the report ranks wr's policies by, the first
// deciding the table's order: the mean and p99 time to first token of the
// protected class when the workload has one, else of every request; then,
// when the workload declares a warm-up, the same two after it.
func (wr WorkloadResults) Metrics() []Metric {
	prefix, of := "", func(s *Summary) *Summary { return s }
	if c := protectedClass(wr.Results); c != "" {
		prefix, of = c+" ", func(s *Summary) *Summary { return s.Classes[c] }
	}
	ms := []Metric{
		{Label: prefix + "mean TTFT", Of: of},
		{Label: prefix + "p99 TTFT", Of: of, P99: true},
	}
	if wr.Workload.WarmUp > 0 {
		steady := func(s *Summary) *Summary {
			if s = of(s); s != nil {
				return s.Steady
			}
			return nil
		}
		ms = append(ms, Metric{Label: "steady " + prefix + "mean TTFT", Of: steady},
			Metric{Label: "steady " + prefix + "p99 TTFT", Of: steady, P99: true})
	}
	return ms
}

// Verdict is wr's one-line verdict: a clause per metric (Ranking.Verdict)
// with focus named where it is not first, then what focus and the first
// metric's leaders shed: a router can lead on the time to first token by
// refusing work, and the line says so (TestWorkloadVerdict).
func (wr WorkloadResults) Verdict(focus string) string {
	sums := wr.summaries()
	var clauses []string
	var leaders []Placing
	for k, m := range wr.Metrics() {
		r := Rank(sums, m)
		if k == 0 {
			leaders = r.Leaders()
		}
		if v := r.Verdict(focus); v != "" {
			clauses = append(clauses, v)
		}
	}
	if len(clauses) == 0 {
		return "no verdict: fewer than two policies completed requests"
	}
	for _, s := range sums {
		named := s.Policy == focus || slices.ContainsFunc(leaders, func(p Placing) bool { return p.Policy == s.Policy })
		if named && s.Shed > 0 && s.Policy != ReferencePolicy {
			clauses = append(clauses, shedClause(s))
		}
	}
	return strings.Join(clauses, "; ") + "."
}

// shedClause says what share of its requests s's policy shed, and of which
// classes: "gpuroute shed 22% of the requests (1745 sheddable)".
func shedClause(s Summary) string {
	out := s.Policy + " shed " + percent(float64(s.Shed)/float64(max(s.Completed+s.Failed, 1))) + " of the requests"
	var by []string
	for _, c := range slices.Sorted(maps.Keys(s.Classes)) {
		if n := s.Classes[c].Shed; n > 0 {
			by = append(by, strconv.Itoa(n)+" "+c)
		}
	}
	if len(by) > 0 {
		out += " (" + strings.Join(by, ", ") + ")"
	}
	return out
}

// color is policy's curve color: by its place in wr.Results, the order
// the policies were run in, so that a policy keeps its color from one
// workload's chart to the next while the ranking reorders them.
func (wr WorkloadResults) color(policy string) string {
	i := slices.IndexFunc(wr.Results, func(r *Result) bool { return r != nil && r.Summary.Policy == policy })
	return palette[max(i, 0)%len(palette)]
}

func (wr WorkloadResults) summaries() []Summary {
	var out []Summary
	for _, r := range wr.Results {
		if r != nil {
			out = append(out, r.Summary)
		}
	}
	return out
}

// ranked returns wr's results in the order of the first metric's ranking,
// policies without the figure last.
func (wr WorkloadResults) ranked() []*Result {
	ms := wr.Metrics()
	order := Rank(wr.summaries(), ms[0]).Placings
	pos := func(r *Result) int {
		for i, p := range order {
			if p.Policy == r.Summary.Policy {
				return i
			}
		}
		return len(order)
	}
	out := slices.DeleteFunc(slices.Clone(wr.Results), func(r *Result) bool { return r == nil })
	slices.SortStableFunc(out, func(a, b *Result) int { return pos(a) - pos(b) })
	return out
}

// WriteHTML writes a self-contained HTML report (inline SVG and CSS, no
// scripts, no network): a verdict per workload at the top, then per
// workload its verdict, a table ranking the policies, the time to first
// token per policy with its spread over seeds, the TTFT distribution, the
// prefix hit rates and each policy's load per replica over time. Every
// chart has labelled axes with units and a legend (TestReportStructure).
// The verdicts say where gpuroute (GPURouteName) stands when it is not
// first.
func WriteHTML(w io.Writer, title string, all []WorkloadResults) error {
	const focus = GPURouteName
	var b strings.Builder
	b.WriteString("<!doctype html><html><head><meta charset=\"utf-8\"><title>" + html.EscapeString(title) + "</title><style>" + reportCSS + "</style></head><body>")
	b.WriteString("<h1>" + html.EscapeString(title) + "</h1>")
	b.WriteString("<p class=\"lede\">Each workload runs every policy on the same requests and the same simulated fleet. " +
		"Policies are ranked by time to first token (TTFT, lower is better). A policy leads another only by more than the noise: " +
		percent(TieFloor) + ", or twice the standard error of their ratio over the seeds pooled when that is larger (" +
		percent(SingleRunNoise) + " for a single run); closer figures are tied. <i>" + ReferencePolicy +
		"</i> (exact state and true output lengths, which no router has) is ranked as a reference and never wins.</p>")
	b.WriteString("<table class=\"verdicts\"><tr><th>workload</th><th>verdict</th></tr>")
	for i, wr := range all {
		b.WriteString("<tr><td><a href=\"#w" + strconv.Itoa(i) + "\">" + html.EscapeString(wr.Workload.Name) + "</a></td><td>" +
			html.EscapeString(wr.Verdict(focus)) + "</td></tr>")
	}
	b.WriteString("</table>")
	for i, wr := range all {
		writeWorkload(&b, i, wr, focus)
	}
	b.WriteString("</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

const reportCSS = "body{font:14px/1.4 sans-serif;margin:2em;max-width:1300px;color:#222}" +
	"h2{margin-top:2.5em;border-bottom:1px solid #ccc}table{border-collapse:collapse;margin:1em 0}" +
	"td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}th{background:#f4f4f4;font-weight:600}" +
	"td:first-child,td:nth-child(2),table.verdicts td,table.verdicts th{text-align:left}tr.ref td{color:#777;font-style:italic}" +
	"td.best{font-weight:700;background:#eef6ee}.verdict{font-size:15px;background:#f6f6fb;border-left:4px solid #1f77b4;padding:.5em .8em}" +
	"figure{display:inline-block;margin:6px 10px 6px 0;vertical-align:top}figcaption{font-weight:600;margin-bottom:2px}" +
	".note{color:#555}svg text{font:11px sans-serif;fill:#222}svg .x-label,svg .y-label{font-size:12px}"

func writeWorkload(b *strings.Builder, i int, wr WorkloadResults, focus string) {
	requests, seeds := len(wr.Workload.Requests), "one run"
	if wr.Requests > 0 {
		requests = wr.Requests
	}
	if wr.Seeds > 1 {
		seeds = strconv.Itoa(wr.Seeds) + " seeds pooled"
	}
	hw := wr.Hardware
	if hw == "" {
		hw = wr.Workload.Hardware
	}
	b.WriteString("<section class=\"workload\" id=\"w" + strconv.Itoa(i) + "\"><h2>" + html.EscapeString(wr.Workload.Name) + "</h2>")
	b.WriteString("<p>" + strconv.Itoa(requests) + " requests, " + seeds + ", fleet " + html.EscapeString(hw) + ". " +
		html.EscapeString(wr.Workload.Source) + "</p>")
	b.WriteString("<p class=\"verdict\"><b>Verdict:</b> " + html.EscapeString(wr.Verdict(focus)) + "</p>")
	rs := wr.ranked()
	writeTable(b, wr, rs)
	writeTTFTRanges(b, wr, rs)
	writeCDF(b, wr, rs)
	writeHitBars(b, wr, rs)
	b.WriteString("<h3>Load per replica over time</h3><p class=\"note\">Requests waiting or running on each replica")
	if wr.Seeds > 1 {
		b.WriteString(", first seed's run")
	}
	b.WriteString("; each chart has its own scale.</p>")
	names := replicaNames(hw)
	for _, r := range rs {
		writeLoad(b, r, names)
	}
	b.WriteString("</section>")
}

// column is one figure of the ranking table.
type column struct {
	head   string
	cell   func(s *Summary) string
	metric *Metric // ranked: its leaders' cells are marked
}

func f3(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }

// columns returns the table's figures for wr: the ranked metrics, e2e p99,
// each class's, the steady ones, and the counts that apply.
func columns(wr WorkloadResults, rs []*Result) []column {
	ms := wr.Metrics()
	any := func(f func(s *Summary) bool) bool {
		return slices.ContainsFunc(rs, func(r *Result) bool { return f(&r.Summary) })
	}
	ttft := func(of func(*Summary) *Summary, p99 bool) func(*Summary) string {
		return func(s *Summary) string {
			if s = of(s); s == nil || s.Completed == 0 {
				return "–"
			}
			if p99 {
				return f3(s.TTFTP99Sec)
			}
			return f3(s.TTFTMeanSec)
		}
	}
	var cols []column
	cols = append(cols, column{head: "TTFT mean s", cell: ttft(func(s *Summary) *Summary { return s }, false)},
		column{head: "TTFT p99 s", cell: ttft(func(s *Summary) *Summary { return s }, true)},
		column{head: "e2e p99 s", cell: func(s *Summary) string { return f3(s.E2EP99Sec) }})
	var classes []string
	for _, r := range rs {
		for c := range r.Summary.Classes {
			if !slices.Contains(classes, c) {
				classes = append(classes, c)
			}
		}
	}
	slices.SortFunc(classes, func(a, b string) int {
		ia, ib := slices.Index(ProtectedClasses, a), slices.Index(ProtectedClasses, b)
		if (ia >= 0) != (ib >= 0) {
			return ib - ia // protected first
		}
		return strings.Compare(a, b)
	})
	for _, c := range classes {
		of := func(s *Summary) *Summary { return s.Classes[c] }
		cols = append(cols, column{head: c + " TTFT mean s", cell: ttft(of, false)},
			column{head: c + " TTFT p99 s", cell: ttft(of, true)},
			column{head: c + " failed", cell: func(s *Summary) string {
				if cs := s.Classes[c]; cs != nil {
					return strconv.Itoa(cs.Failed)
				}
				return "–"
			}})
	}
	if wr.Workload.WarmUp > 0 {
		steady := func(s *Summary) *Summary { return s.Steady }
		cols = append(cols, column{head: "steady TTFT mean s", cell: ttft(steady, false)},
			column{head: "steady TTFT p99 s", cell: ttft(steady, true)})
	}
	// Mark the ranked metrics' columns: their leaders' cells are bold.
	for k := range ms {
		for j := range cols {
			if cols[j].head == metricColumn(ms[k]) {
				cols[j].metric = &ms[k]
			}
		}
	}
	cols = append(cols, column{head: "prefix hit", cell: func(s *Summary) string { return f3(s.PrefixHitRate) }},
		column{head: "tok/s", cell: func(s *Summary) string { return strconv.FormatFloat(s.ThroughputTokS, 'f', 0, 64) }},
		column{head: "completed", cell: func(s *Summary) string { return strconv.Itoa(s.Completed) }},
		column{head: "failed", cell: func(s *Summary) string { return strconv.Itoa(s.Failed) }})
	if any(func(s *Summary) bool { return s.AdapterLoads > 0 }) {
		cols = append(cols, column{head: "adapter loads", cell: func(s *Summary) string { return strconv.FormatInt(s.AdapterLoads, 10) }})
	}
	if any(func(s *Summary) bool { return s.HeldMeanSec > 0 }) {
		cols = append(cols, column{head: "held mean s", cell: func(s *Summary) string { return f3(s.HeldMeanSec) }})
	}
	if any(func(s *Summary) bool { return s.Shed > 0 }) {
		cols = append(cols, column{head: "shed", cell: func(s *Summary) string { return strconv.Itoa(s.Shed) }})
	}
	// Lost requests (no response at all) are a correctness figure: shown
	// wherever a router may hold requests, so that a 0 is seen to be 0.
	if len(classes) > 0 || any(func(s *Summary) bool { return s.Lost > 0 }) {
		cols = append(cols, column{head: "lost", cell: func(s *Summary) string { return strconv.Itoa(s.Lost) }})
	}
	if any(func(s *Summary) bool { return s.Migrated > 0 }) {
		cols = append(cols, column{head: "migrated", cell: func(s *Summary) string { return strconv.Itoa(s.Migrated) }})
	}
	if any(func(s *Summary) bool { return s.Drain.DeadlineSec > 0 }) {
		cols = append(cols, column{head: "longest drain s", cell: func(s *Summary) string { return f3(s.Drain.FinishedSec) }},
			column{head: "new after close", cell: func(s *Summary) string { return strconv.Itoa(s.Drain.NewAfterClose) }})
	}
	return cols
}

// metricColumn is the table head of m's figure.
func metricColumn(m Metric) string {
	head := strings.TrimSuffix(strings.TrimSuffix(m.Label, "mean TTFT"), "p99 TTFT")
	if m.P99 {
		return head + "TTFT p99 s"
	}
	return head + "TTFT mean s"
}

func writeTable(b *strings.Builder, wr WorkloadResults, rs []*Result) {
	cols := columns(wr, rs)
	sums := wr.summaries()
	leaders := make([][]string, len(cols))
	for j, c := range cols {
		if c.metric != nil {
			for _, p := range Rank(sums, *c.metric).Leaders() {
				leaders[j] = append(leaders[j], p.Policy)
			}
		}
	}
	first := Rank(sums, wr.Metrics()[0])
	b.WriteString("<table class=\"ranking\"><tr><th>rank</th><th>policy</th>")
	for _, c := range cols {
		b.WriteString("<th>" + html.EscapeString(c.head) + "</th>")
	}
	b.WriteString("</tr>")
	for _, r := range rs {
		s := &r.Summary
		rank, class := "–", ""
		for _, p := range first.Placings {
			if p.Policy == s.Policy {
				rank = strconv.Itoa(p.Rank)
				if p.Reference {
					rank, class = "ref", " class=\"ref\""
				}
			}
		}
		b.WriteString("<tr" + class + "><td>" + rank + "</td><td>" + html.EscapeString(s.Policy) + "</td>")
		for j, c := range cols {
			td := "<td>"
			if slices.Contains(leaders[j], s.Policy) {
				td = "<td class=\"best\">"
			}
			b.WriteString(td + c.cell(s) + "</td>")
		}
		b.WriteString("</tr>")
	}
	b.WriteString("</table><p class=\"note\">Ranked by " + html.EscapeString(first.Metric.Label) +
		"; policies tied within the noise share a rank; bold: first (or tied first) on a ranked figure.</p>")
}

// writeTTFTRanges draws the verdict's figures per policy: the pooled mean
// and p99 time to first token, each with the range of its per-seed values.
func writeTTFTRanges(b *strings.Builder, wr WorkloadResults, rs []*Result) {
	ms := wr.Metrics()
	mean, p99 := ms[0], ms[1]
	type row struct {
		name               string
		m, p               float64
		mLo, mHi, pLo, pHi float64
	}
	var rows []row
	lo, hi := math.Inf(1), 0.0
	for _, r := range rs {
		mv, mSeeds, ok := mean.value(&r.Summary)
		pv, pSeeds, _ := p99.value(&r.Summary)
		if !ok {
			continue
		}
		x := row{name: r.Summary.Policy, m: mv, p: pv, mLo: mv, mHi: mv, pLo: pv, pHi: pv}
		for _, v := range mSeeds {
			x.mLo, x.mHi = min(x.mLo, v), max(x.mHi, v)
		}
		for _, v := range pSeeds {
			x.pLo, x.pHi = min(x.pLo, v), max(x.pHi, v)
		}
		lo, hi = min(lo, x.mLo), max(hi, x.pHi)
		rows = append(rows, x)
	}
	if len(rows) == 0 {
		return
	}
	names := make([]string, len(rows))
	for i, x := range rows {
		names[i] = x.name
	}
	c := newChart(ms[0].Label+" and p99 by policy", 560, float64(22*len(rows)+10))
	c.x = logAxis(lo, hi)
	c.xLabel = "time to first token (s, log scale)"
	c.yLabel = "policy"
	c.yCats = names
	const meanColor, p99Color = "#1f77b4", "#d62728"
	for i, x := range rows {
		y := c.catY(i)
		c.line(c.px(x.mLo), y-3, c.px(x.mHi), y-3, meanColor, 1)
		c.line(c.px(x.pLo), y+3, c.px(x.pHi), y+3, p99Color, 1)
		c.body.WriteString("<circle cx=\"" + ff(c.px(x.m)) + "\" cy=\"" + ff(y-3) + "\" r=\"4\" fill=\"" + meanColor + "\"/>")
		c.body.WriteString("<rect x=\"" + ff(c.px(x.p)-4) + "\" y=\"" + ff(y-1) + "\" width=\"8\" height=\"8\" fill=\"" + p99Color + "\"/>")
	}
	c.legend = []legendEntry{{"mean, pooled", meanColor, "dot"}, {"p99, pooled", p99Color, "square"}}
	if wr.Seeds > 1 {
		c.legend = append(c.legend, legendEntry{"range over seeds", "#555", "line"})
	}
	b.WriteString("<h3>Time to first token by policy</h3>")
	c.write(b)
}

// writeCDF draws the distribution of the time to first token per policy
// (of the protected class when the workload has one).
func writeCDF(b *strings.Builder, wr WorkloadResults, rs []*Result) {
	class := protectedClass(rs)
	ttft := func(r *Result) []float64 {
		if class != "" {
			if cr := r.Classes[class]; cr != nil {
				return cr.TTFTSec
			}
			return nil
		}
		return r.TTFTSec
	}
	lo, hi := math.Inf(1), 0.0
	for _, r := range rs {
		if t := ttft(r); len(t) > 0 {
			lo, hi = min(lo, t[0]), max(hi, t[len(t)-1])
		}
	}
	if hi <= 0 {
		return
	}
	title := "TTFT distribution"
	if class != "" {
		title += ", " + class + " requests"
	}
	c := newChart(title, 640, 300)
	c.x = logAxis(lo, hi)
	c.y = axis{lo: 0, hi: 1, ticks: []float64{0, 0.25, 0.5, 0.75, 0.9, 1}, format: func(v float64) string { return strconv.FormatFloat(v, 'g', 3, 64) }}
	c.xLabel = "time to first token (s, log scale)"
	c.yLabel = "fraction of requests"
	for _, r := range rs {
		t := ttft(r)
		n := len(t)
		if n == 0 {
			continue
		}
		color := wr.color(r.Summary.Policy)
		var pts strings.Builder
		step := max(n/400, 1)
		for k := 0; k < n; k += step {
			pts.WriteString(ff(c.px(t[k])) + "," + ff(c.py(float64(k+1)/float64(n))) + " ")
		}
		pts.WriteString(ff(c.px(t[n-1])) + "," + ff(c.py(1)))
		c.body.WriteString("<polyline fill=\"none\" stroke=\"" + color + "\" stroke-width=\"1.5\" points=\"" + pts.String() + "\"/>")
		c.legend = append(c.legend, legendEntry{r.Summary.Policy, color, "line"})
	}
	b.WriteString("<h3>Distribution of the time to first token</h3>")
	c.write(b)
}

// writeHitBars draws each policy's prefix hit rate, over the whole run and
// after the warm-up when the workload declares one; nothing when no policy
// reuses a prefix (unique prompts).
func writeHitBars(b *strings.Builder, wr WorkloadResults, rs []*Result) {
	if !slices.ContainsFunc(rs, func(r *Result) bool { return r.Summary.PrefixHitRate > 0.0005 }) {
		b.WriteString("<p class=\"note\">No prefix reuse in this workload: every policy's prefix hit rate is 0.</p>")
		return
	}
	steady := wr.Workload.WarmUp > 0
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = r.Summary.Policy
	}
	c := newChart("Prefix hit rate by policy", 480, float64(22*len(rs)+10))
	c.x = axis{lo: 0, hi: 1, ticks: []float64{0, 0.2, 0.4, 0.6, 0.8, 1}, format: func(v float64) string { return strconv.FormatFloat(v, 'g', 2, 64) }}
	c.xLabel = "prefix hit rate (cached prompt tokens / prompt tokens)"
	c.yLabel = "policy"
	c.yCats = names
	const wholeColor, steadyColor = "#1f77b4", "#9ecae1"
	for i, r := range rs {
		y, h := c.catY(i)-8, 16.0
		if steady && r.Summary.Steady != nil {
			h = 8
			c.rect(c.px(0), y+8, c.px(r.Summary.Steady.PrefixHitRate)-c.px(0), h, steadyColor)
		}
		c.rect(c.px(0), y, c.px(r.Summary.PrefixHitRate)-c.px(0), h, wholeColor)
		c.text(c.px(r.Summary.PrefixHitRate)+4, y+11, f3(r.Summary.PrefixHitRate), "")
	}
	c.legend = []legendEntry{{"whole run", wholeColor, "square"}}
	if steady {
		c.legend = append(c.legend, legendEntry{"after the warm-up", steadyColor, "square"})
	}
	b.WriteString("<h3>Prefix hit rate</h3>")
	c.write(b)
}

// maxLoadLines is the most replicas a load chart draws one line each for;
// a bigger fleet is drawn as the least, mean and most loaded replica.
const maxLoadLines = 8

// writeLoad draws one policy's load per replica over time.
func writeLoad(b *strings.Builder, r *Result, replicas []string) {
	n := 0
	for _, s := range r.Load {
		n = max(n, len(s))
	}
	if n < 2 {
		return
	}
	series, labels := r.Load, make([]string, len(r.Load))
	for i := range labels {
		labels[i] = "replica " + strconv.Itoa(i)
		if i < len(replicas) {
			labels[i] += " (" + replicas[i] + ")"
		}
	}
	if len(series) > maxLoadLines {
		series, labels = loadBand(r.Load, n), []string{"most loaded replica", "mean over replicas", "least loaded replica"}
	}
	peak := 1.0
	for _, s := range series {
		for _, v := range s {
			peak = max(peak, v)
		}
	}
	every := r.LoadEvery.Seconds()
	c := newChart(r.Summary.Policy, 300, 150)
	c.x = linAxis(0, float64(n-1)*every)
	c.y = linAxis(0, peak)
	c.xLabel = "time (s)"
	c.yLabel = "requests"
	for i, s := range series {
		color := palette[i%len(palette)]
		var pts strings.Builder
		step := max(len(s)/200, 1)
		for k := 0; k < len(s); k += step {
			pts.WriteString(ff(c.px(float64(k)*every)) + "," + ff(c.py(s[k])) + " ")
		}
		c.body.WriteString("<polyline fill=\"none\" stroke=\"" + color + "\" stroke-width=\"1\" points=\"" + pts.String() + "\"/>")
		c.legend = append(c.legend, legendEntry{labels[i], color, "line"})
	}
	c.write(b)
}

// loadBand reduces per-replica series to the most loaded, the mean and the
// least loaded replica at each sample.
func loadBand(load [][]float64, n int) [][]float64 {
	hi, mid, lo := make([]float64, n), make([]float64, n), make([]float64, n)
	for k := range n {
		lo[k] = math.Inf(1)
		count := 0
		for _, s := range load {
			if k < len(s) {
				hi[k], lo[k] = max(hi[k], s[k]), min(lo[k], s[k])
				mid[k] += s[k]
				count++
			}
		}
		if count > 0 {
			mid[k] /= float64(count)
		} else {
			lo[k] = 0
		}
	}
	return [][]float64{hi, mid, lo}
}

// replicaNames returns each replica's hardware profile name for a fleet
// spec, nil if it does not parse.
func replicaNames(spec string) []string {
	reps, err := ParseHardware(spec, 0)
	if err != nil {
		return nil
	}
	out := make([]string, len(reps))
	for i, r := range reps {
		out[i] = r.Hardware.Name
	}
	return out
}
