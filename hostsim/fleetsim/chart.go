package fleetsim

import (
	"html"
	"math"
	"strconv"
	"strings"
)

// palette has a color for each of the demo's eleven policies and a spare,
// so no two curves of one chart share one.
var palette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#000000", "#393b79"}

// axis maps data values onto a chart side: linear or base-10 logarithmic
// between lo and hi, with labelled ticks.
type axis struct {
	lo, hi float64
	log    bool
	ticks  []float64
	format func(float64) string
}

// frac returns where v falls on the axis, 0 at lo and 1 at hi (clamped).
func (a axis) frac(v float64) float64 {
	lo, hi := a.lo, a.hi
	if a.log {
		v, lo, hi = math.Log10(max(v, a.lo)), math.Log10(lo), math.Log10(hi)
	}
	if hi <= lo {
		return 0
	}
	return min(max((v-lo)/(hi-lo), 0), 1)
}

// linAxis is a linear axis from lo to hi rounded out to about five ticks
// at 1, 2 or 5 times a power of ten.
func linAxis(lo, hi float64) axis {
	if hi <= lo {
		hi = lo + 1
	}
	raw := (hi - lo) / 5
	step := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*step >= raw {
			step *= m
			break
		}
	}
	a := axis{lo: math.Floor(lo/step) * step, hi: math.Ceil(hi/step) * step, format: tickFormat}
	for v := a.lo; v <= a.hi+step/2; v += step {
		a.ticks = append(a.ticks, v)
	}
	return a
}

// logAxis is a base-10 logarithmic axis covering lo to hi, from the decade
// below lo to the decade above hi, ticked at each decade, and at 2 and 5
// times it when the axis spans fewer than three decades.
func logAxis(lo, hi float64) axis {
	lo = max(lo, 1e-3)
	hi = max(hi, lo*1.01)
	dlo, dhi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if dhi <= dlo {
		dhi = dlo + 1
	}
	a := axis{lo: math.Pow(10, dlo), hi: math.Pow(10, dhi), log: true, format: tickFormat}
	mults := []float64{1}
	if dhi-dlo < 3 {
		mults = []float64{1, 2, 5}
	}
	for d := dlo; d <= dhi; d++ {
		for _, m := range mults {
			if v := m * math.Pow(10, d); v <= a.hi*1.0001 {
				a.ticks = append(a.ticks, v)
			}
		}
	}
	return a
}

// tickFormat labels a tick in plain digits ("0.01", "2500", "10000"):
// a reader of seconds and requests should not have to read "1e+03"
// (TestTickFormat).
func tickFormat(v float64) string {
	if math.Abs(v) >= 1000 && v == math.Trunc(v) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// legendEntry is one line of a chart's legend: a swatch drawn as a line,
// a dot or a square in color.
type legendEntry struct {
	label, color, mark string
}

// chart is an SVG plot with labelled axes and a legend. The plot area is
// w × h pixels; y is either a value axis or categories (yCats, one row
// each, top down).
type chart struct {
	title          string
	w, h           float64
	x, y           axis
	yCats          []string
	xLabel, yLabel string
	legend         []legendEntry
	body           strings.Builder
}

// Margins around a chart's plot area: the left one holds the y tick
// labels and the y axis label, the bottom one the x tick labels and the x
// axis label; the legend sits right of the plot.
const (
	marginTop, marginBottom, legendGap, legendRow = 10.0, 42.0, 16.0, 16.0
)

func newChart(title string, w, h float64) *chart { return &chart{title: title, w: w, h: h} }

func (c *chart) left() float64 {
	if len(c.yCats) > 0 {
		longest := 0
		for _, s := range c.yCats {
			longest = max(longest, len(s))
		}
		return 24 + 6.5*float64(longest)
	}
	return 58
}

// px and py place data values in the SVG.
func (c *chart) px(v float64) float64 { return c.left() + c.x.frac(v)*c.w }
func (c *chart) py(v float64) float64 { return marginTop + (1-c.y.frac(v))*c.h }

// catY is the vertical centre of category row i.
func (c *chart) catY(i int) float64 { return marginTop + 16 + 22*float64(i) }

func (c *chart) line(x1, y1, x2, y2 float64, color string, width float64) {
	c.body.WriteString("<line x1=\"" + ff(x1) + "\" y1=\"" + ff(y1) + "\" x2=\"" + ff(x2) + "\" y2=\"" + ff(y2) +
		"\" stroke=\"" + color + "\" stroke-width=\"" + ff(width) + "\"/>")
}

func (c *chart) rect(x, y, w, h float64, color string) {
	c.body.WriteString("<rect x=\"" + ff(x) + "\" y=\"" + ff(y) + "\" width=\"" + ff(max(w, 0)) + "\" height=\"" + ff(h) + "\" fill=\"" + color + "\"/>")
}

func (c *chart) text(x, y float64, s, attrs string) {
	c.body.WriteString("<text x=\"" + ff(x) + "\" y=\"" + ff(y) + "\"" + attrs + ">" + html.EscapeString(s) + "</text>")
}

// write renders the chart as a figure: grid, axes with ticks and labels,
// the body, and the legend.
func (c *chart) write(b *strings.Builder) {
	left := c.left()
	legendW := 0.0
	for _, e := range c.legend {
		legendW = max(legendW, 30+6.2*float64(len(e.label)))
	}
	width := left + c.w + legendGap + legendW + 8
	height := marginTop + max(c.h, legendRow*float64(len(c.legend))) + marginBottom
	bottom := marginTop + c.h
	b.WriteString("<figure class=\"chart\"><figcaption>" + html.EscapeString(c.title) + "</figcaption><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
		ff(width) + "\" height=\"" + ff(height) + "\" role=\"img\" aria-label=\"" + html.EscapeString(c.title) + "\">")
	var g chart
	g.body.WriteString("<g class=\"x-axis\">")
	for _, t := range c.x.ticks {
		xv := c.px(t)
		g.line(xv, marginTop, xv, bottom, "#e6e6e6", 1)
		g.line(xv, bottom, xv, bottom+4, "#000", 1)
		g.text(xv, bottom+15, c.x.format(t), " text-anchor=\"middle\"")
	}
	g.text(left+c.w/2, bottom+34, c.xLabel, " class=\"x-label\" text-anchor=\"middle\"")
	g.body.WriteString("</g><g class=\"y-axis\">")
	if len(c.yCats) > 0 {
		for i, s := range c.yCats {
			g.text(left-6, c.catY(i)+4, s, " text-anchor=\"end\"")
		}
	} else {
		for _, t := range c.y.ticks {
			yv := c.py(t)
			g.line(left, yv, left+c.w, yv, "#e6e6e6", 1)
			g.line(left-4, yv, left, yv, "#000", 1)
			g.text(left-6, yv+4, c.y.format(t), " text-anchor=\"end\"")
		}
	}
	mid := marginTop + c.h/2
	g.text(12, mid, c.yLabel, " class=\"y-label\" text-anchor=\"middle\" transform=\"rotate(-90 12 "+ff(mid)+")\"")
	g.body.WriteString("</g>")
	g.line(left, bottom, left+c.w, bottom, "#000", 1)
	g.line(left, marginTop, left, bottom, "#000", 1)
	b.WriteString(g.body.String())
	b.WriteString(c.body.String())
	b.WriteString("<g class=\"legend\">")
	lx := left + c.w + legendGap
	for i, e := range c.legend {
		y := marginTop + 8 + legendRow*float64(i)
		b.WriteString("<g class=\"legend-entry\">")
		switch e.mark {
		case "dot":
			b.WriteString("<circle cx=\"" + ff(lx+9) + "\" cy=\"" + ff(y-4) + "\" r=\"4\" fill=\"" + e.color + "\"/>")
		case "square":
			b.WriteString("<rect x=\"" + ff(lx+4) + "\" y=\"" + ff(y-9) + "\" width=\"10\" height=\"10\" fill=\"" + e.color + "\"/>")
		default:
			b.WriteString("<line x1=\"" + ff(lx) + "\" y1=\"" + ff(y-4) + "\" x2=\"" + ff(lx+18) + "\" y2=\"" + ff(y-4) + "\" stroke=\"" + e.color + "\" stroke-width=\"2\"/>")
		}
		b.WriteString("<text x=\"" + ff(lx+24) + "\" y=\"" + ff(y) + "\">" + html.EscapeString(e.label) + "</text></g>")
	}
	b.WriteString("</g></svg></figure>")
}

func ff(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
