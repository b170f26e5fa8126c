package fleetsim

import (
	"html"
	"io"
	"math"
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
}

var palette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

// WriteHTML writes a self-contained HTML report (inline SVG, no scripts, no
// network): per workload a table of the figures, the TTFT CDF per policy
// (log time axis), the prefix hit rate per policy, and each policy's load
// per replica over time.
func WriteHTML(w io.Writer, title string, all []WorkloadResults) error {
	var b strings.Builder
	b.WriteString("<!doctype html><html><head><meta charset=\"utf-8\"><title>" + html.EscapeString(title) + "</title><style>" +
		"body{font:14px sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;margin:1em 0}" +
		"td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f4f4f4}td:first-child{text-align:left}" +
		".small{display:inline-block;margin:4px}svg text{font:11px sans-serif}</style></head><body>")
	b.WriteString("<h1>" + html.EscapeString(title) + "</h1>")
	for _, wr := range all {
		requests, pooled := len(wr.Workload.Requests), ""
		if wr.Requests > 0 {
			requests = wr.Requests
		}
		if wr.Seeds > 1 {
			pooled = " over " + strconv.Itoa(wr.Seeds) + " seeds, pooled (the load charts show the first)"
		}
		b.WriteString("<h2>" + html.EscapeString(wr.Workload.Name) + "</h2><p>" + strconv.Itoa(requests) +
			" requests" + pooled + ". " + html.EscapeString(wr.Workload.Source) + "</p>")
		writeTable(&b, wr.Results)
		writeCDF(&b, wr.Results)
		writeHitBars(&b, wr.Results)
		b.WriteString("<h3>Load per replica (waiting + running) over time</h3>")
		for i, r := range wr.Results {
			if r != nil {
				writeLoad(&b, r, i)
			}
		}
	}
	b.WriteString("</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func f3(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }

func writeTable(b *strings.Builder, rs []*Result) {
	b.WriteString("<table><tr><th>policy</th><th>TTFT mean s</th><th>p50</th><th>p90</th><th>p99</th><th>e2e p50 s</th><th>e2e p99</th>" +
		"<th>tok/s</th><th>prefix hit</th><th>adapter loads</th><th>completed</th><th>failed</th><th>migrated</th><th>drain done s</th><th>new after close</th></tr>")
	for _, r := range rs {
		if r == nil {
			continue
		}
		s := r.Summary
		cells := []string{html.EscapeString(s.Policy), f3(s.TTFTMeanSec), f3(s.TTFTP50Sec), f3(s.TTFTP90Sec), f3(s.TTFTP99Sec),
			f3(s.E2EP50Sec), f3(s.E2EP99Sec), strconv.FormatFloat(s.ThroughputTokS, 'f', 0, 64), f3(s.PrefixHitRate),
			strconv.FormatInt(s.AdapterLoads, 10), strconv.Itoa(s.Completed), strconv.Itoa(s.Failed), strconv.Itoa(s.Migrated),
			f3(s.Drain.FinishedSec), strconv.Itoa(s.Drain.NewAfterClose)}
		b.WriteString("<tr><td>" + strings.Join(cells, "</td><td>") + "</td></tr>")
	}
	b.WriteString("</table>")
}

const svgW, svgH, padL, padB = 640.0, 300.0, 50.0, 30.0

func writeCDF(b *strings.Builder, rs []*Result) {
	lo, hi := math.Inf(1), 0.0
	for _, r := range rs {
		if r != nil && len(r.TTFTSec) > 0 {
			lo = min(lo, max(r.TTFTSec[0], 1e-3))
			hi = max(hi, r.TTFTSec[len(r.TTFTSec)-1])
		}
	}
	if hi <= 0 {
		return
	}
	lo, hi = math.Log10(lo), math.Log10(max(hi, lo*1.0001+1e-3))
	if hi-lo < 0.5 {
		hi = lo + 0.5
	}
	x := func(v float64) float64 { return padL + (math.Log10(max(v, 1e-3))-lo)/(hi-lo)*(svgW-padL-10) }
	y := func(p float64) float64 { return svgH - padB - p*(svgH-padB-10) }
	b.WriteString("<h3>TTFT CDF (log scale)</h3><svg width=\"" + ff(svgW+150) + "\" height=\"" + ff(svgH) + "\">")
	axes(b)
	for d := math.Ceil(lo); d <= hi; d++ {
		xv := x(math.Pow(10, d))
		b.WriteString("<line x1=\"" + ff(xv) + "\" y1=\"" + ff(svgH-padB) + "\" x2=\"" + ff(xv) + "\" y2=\"10\" stroke=\"#eee\"/>")
		b.WriteString("<text x=\"" + ff(xv-10) + "\" y=\"" + ff(svgH-padB+15) + "\">" + strconv.FormatFloat(math.Pow(10, d), 'g', 3, 64) + "s</text>")
	}
	for _, p := range []float64{0.5, 0.9, 1} {
		b.WriteString("<text x=\"5\" y=\"" + ff(y(p)+4) + "\">" + strconv.FormatFloat(p, 'g', 2, 64) + "</text>")
	}
	for i, r := range rs {
		if r == nil || len(r.TTFTSec) == 0 {
			continue
		}
		c := palette[i%len(palette)]
		var pts strings.Builder
		n := len(r.TTFTSec)
		step := max(n/400, 1)
		for k := 0; k < n; k += step {
			pts.WriteString(ff(x(r.TTFTSec[k])) + "," + ff(y(float64(k+1)/float64(n))) + " ")
		}
		pts.WriteString(ff(x(r.TTFTSec[n-1])) + "," + ff(y(1)))
		b.WriteString("<polyline fill=\"none\" stroke=\"" + c + "\" stroke-width=\"1.5\" points=\"" + pts.String() + "\"/>")
		legend(b, i, r.Summary.Policy)
	}
	b.WriteString("</svg>")
}

func writeHitBars(b *strings.Builder, rs []*Result) {
	b.WriteString("<h3>Prefix hit rate (cached prompt tokens / prompt tokens)</h3><svg width=\"" + ff(svgW) + "\" height=\"" + strconv.Itoa(22*len(rs)+10) + "\">")
	for i, r := range rs {
		if r == nil {
			continue
		}
		yv := float64(i*22 + 5)
		wv := r.Summary.PrefixHitRate * (svgW - 200)
		b.WriteString("<text x=\"0\" y=\"" + ff(yv+13) + "\">" + html.EscapeString(r.Summary.Policy) + "</text>")
		b.WriteString("<rect x=\"110\" y=\"" + ff(yv) + "\" width=\"" + ff(wv) + "\" height=\"16\" fill=\"" + palette[i%len(palette)] + "\"/>")
		b.WriteString("<text x=\"" + ff(115+wv) + "\" y=\"" + ff(yv+13) + "\">" + f3(r.Summary.PrefixHitRate) + "</text>")
	}
	b.WriteString("</svg>")
}

func writeLoad(b *strings.Builder, r *Result, idx int) {
	const w, h = 380.0, 150.0
	peak, n := 1.0, 0
	for _, s := range r.Load {
		n = max(n, len(s))
		for _, v := range s {
			peak = max(peak, v)
		}
	}
	if n < 2 {
		return
	}
	b.WriteString("<div class=\"small\"><svg width=\"" + ff(w) + "\" height=\"" + ff(h+20) + "\"><text x=\"4\" y=\"12\">" +
		html.EscapeString(r.Summary.Policy) + " (peak " + strconv.FormatFloat(peak, 'f', 0, 64) + ", " +
		strconv.FormatFloat(float64(n)*r.LoadEvery.Seconds(), 'f', 0, 64) + " s)</text>")
	b.WriteString("<rect x=\"0\" y=\"18\" width=\"" + ff(w) + "\" height=\"" + ff(h) + "\" fill=\"none\" stroke=\"#ccc\"/>")
	for i, s := range r.Load {
		var pts strings.Builder
		step := max(len(s)/300, 1)
		for k := 0; k < len(s); k += step {
			pts.WriteString(ff(float64(k)/float64(n-1)*w) + "," + ff(18+h-s[k]/peak*(h-4)) + " ")
		}
		b.WriteString("<polyline fill=\"none\" stroke=\"" + palette[i%len(palette)] + "\" stroke-width=\"1\" points=\"" + pts.String() + "\"/>")
	}
	b.WriteString("</svg></div>")
	_ = idx
}

func axes(b *strings.Builder) {
	b.WriteString("<line x1=\"" + ff(padL) + "\" y1=\"" + ff(svgH-padB) + "\" x2=\"" + ff(svgW) + "\" y2=\"" + ff(svgH-padB) + "\" stroke=\"#000\"/>")
	b.WriteString("<line x1=\"" + ff(padL) + "\" y1=\"10\" x2=\"" + ff(padL) + "\" y2=\"" + ff(svgH-padB) + "\" stroke=\"#000\"/>")
}

func legend(b *strings.Builder, i int, name string) {
	yv := float64(20 + 16*i)
	b.WriteString("<rect x=\"" + ff(svgW+10) + "\" y=\"" + ff(yv-9) + "\" width=\"12\" height=\"10\" fill=\"" + palette[i%len(palette)] + "\"/>")
	b.WriteString("<text x=\"" + ff(svgW+26) + "\" y=\"" + ff(yv) + "\">" + html.EscapeString(name) + "</text>")
}

func ff(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
