package fleetsim

import (
	"math"
	"slices"
	"strconv"
	"strings"
)

// ReferencePolicy is the policy the report ranks beside the others but
// never names a winner or runner-up: the oracle sees true output lengths
// and exact state, which no router has.
const ReferencePolicy = "oracle"

// Tie rule. Two policies' figures are tied unless their ratio differs from
// 1 by more than the noise: TieFloor, or twice the standard error of the
// ratio over the seeds pooled when that is larger (the per-seed ratios are
// paired: both policies ran the same requests). A single run has no seeds
// to measure its noise by and uses SingleRunNoise. TestRankTies holds the
// rule; docs/simulator.md, "Results", has the spread that set the values.
const (
	TieFloor       = 0.03
	SingleRunNoise = 0.05
)

// Metric is one figure the report ranks policies by, lower being better.
type Metric struct {
	// Label names the figure in the verdict and the table ("mean TTFT").
	Label string
	// Of selects the summary the figure is read from (the whole run, one
	// class, the steady part); nil when the policy has none.
	Of func(*Summary) *Summary
	// P99 ranks by the p99 rather than the mean time to first token.
	P99 bool
}

// value returns the metric's figure and its per-seed values for s, ok
// false when s has no such summary or no completed request.
func (m Metric) value(s *Summary) (v float64, bySeed []float64, ok bool) {
	if m.Of != nil {
		s = m.Of(s)
	}
	if s == nil || s.Completed == 0 {
		return 0, nil, false
	}
	if m.P99 {
		return s.TTFTP99Sec, s.TTFTP99BySeedSec, true
	}
	return s.TTFTMeanSec, s.TTFTMeanBySeedSec, true
}

// Placing is one policy's place in a Ranking.
type Placing struct {
	Policy string
	Value  float64
	// Rank counts from 1; policies tied with each other can share it (1
	// plus the number of policies that beat this one by more than the
	// noise).
	Rank int
	// Reference marks the ReferencePolicy: ranked, never a winner.
	Reference bool
}

// Ranking is the policies ordered by one metric, best first.
type Ranking struct {
	Metric   Metric
	Placings []Placing
	// noise[i][j] is the tie threshold between Placings i and j, as a
	// relative difference.
	noise [][]float64
}

// Rank orders the summaries by m with the tie rule. The reference policy
// is placed among the others by its value but does not take a rank from
// them: ranks count the competing policies only.
func Rank(sums []Summary, m Metric) Ranking {
	type entry struct {
		p      Placing
		bySeed []float64
	}
	var es []entry
	for i := range sums {
		v, bySeed, ok := m.value(&sums[i])
		if !ok {
			continue
		}
		es = append(es, entry{Placing{Policy: sums[i].Policy, Value: v, Reference: sums[i].Policy == ReferencePolicy}, bySeed})
	}
	slices.SortStableFunc(es, func(a, b entry) int {
		switch {
		case a.p.Value < b.p.Value:
			return -1
		case a.p.Value > b.p.Value:
			return 1
		}
		return 0
	})
	r := Ranking{Metric: m, Placings: make([]Placing, len(es)), noise: make([][]float64, len(es))}
	for i := range es {
		r.noise[i] = make([]float64, len(es))
		for j := range es {
			r.noise[i][j] = pairNoise(es[i].bySeed, es[j].bySeed)
		}
	}
	for i, e := range es {
		e.p.Rank = 1
		for j, o := range es {
			if !o.p.Reference && j != i && r.beats(o.p.Value, e.p.Value, r.noise[i][j]) {
				e.p.Rank++
			}
		}
		r.Placings[i] = e.p
	}
	return r
}

// beats reports whether a is lower than b by more than noise.
func (Ranking) beats(a, b, noise float64) bool {
	if a >= b {
		return false
	}
	if a <= 0 {
		return true
	}
	return b/a-1 > noise
}

// pairNoise is the tie threshold between two policies from their per-seed
// figures: TieFloor or twice the standard error of the mean log ratio,
// whichever is larger; SingleRunNoise without at least two paired seeds.
func pairNoise(a, b []float64) float64 {
	k := len(a)
	if k < 2 || len(b) != k {
		return SingleRunNoise
	}
	d := make([]float64, 0, k)
	for i := range a {
		if a[i] <= 0 || b[i] <= 0 {
			return SingleRunNoise
		}
		d = append(d, math.Log(a[i]/b[i]))
	}
	m := 0.0
	for _, v := range d {
		m += v
	}
	m /= float64(k)
	ss := 0.0
	for _, v := range d {
		ss += (v - m) * (v - m)
	}
	se := math.Sqrt(ss/float64(k-1)) / math.Sqrt(float64(k))
	return max(TieFloor, math.Expm1(2*se))
}

// Leaders returns the competing placings of rank 1, best first.
func (r Ranking) Leaders() []Placing {
	var out []Placing
	for _, p := range r.Placings {
		if !p.Reference && p.Rank == 1 {
			out = append(out, p)
		}
	}
	return out
}

// Verdict says in one clause who leads on the ranking's metric and by how
// much, who ties with the leader, and where focus (gpuroute) stands when
// it is neither among the leaders nor the runner-up named with the margin:
//
//	gpuroute first on mean TTFT by 12% over llm-d-322
//	gpuroute and always-warm tied on p99 TTFT (2% apart, within the noise), 30% ahead of llm-d
//	least-tokens first on steady mean TTFT by 9% over round-robin; gpuroute 4th, 21% behind
//
// It returns "" when fewer than two competing policies have the figure.
func (r Ranking) Verdict(focus string) string {
	var competing []Placing
	for _, p := range r.Placings {
		if !p.Reference {
			competing = append(competing, p)
		}
	}
	if len(competing) < 2 {
		return ""
	}
	leaders := r.Leaders()
	best := leaders[0]
	var next *Placing
	for i := range competing {
		if competing[i].Rank > 1 {
			next = &competing[i]
			break
		}
	}
	var b strings.Builder
	if len(leaders) == 1 {
		b.WriteString(best.Policy + " first on " + r.Metric.Label)
		if next != nil {
			b.WriteString(" by " + margin(next.Value, best.Value) + " over " + next.Policy)
		}
	} else {
		names := make([]string, len(leaders))
		for i, p := range leaders {
			names[i] = p.Policy
		}
		b.WriteString(joinAnd(names) + " tied on " + r.Metric.Label + " (" + percent(r.tieSpan(leaders)) + " apart, within the noise)")
		if next != nil {
			b.WriteString(", " + margin(next.Value, best.Value) + " ahead of " + next.Policy)
		}
	}
	for _, p := range competing {
		// The runner-up is named above, with its margin.
		if p.Policy == focus && p.Rank > 1 && p.Policy != next.Policy {
			b.WriteString("; " + focus + " " + ordinal(p.Rank) + ", " + margin(p.Value, best.Value) + " behind")
		}
	}
	return b.String()
}

// tieSpan is the largest relative difference between the best leader and
// the others it ties with.
func (r Ranking) tieSpan(leaders []Placing) float64 {
	span := 0.0
	for _, p := range leaders[1:] {
		if leaders[0].Value > 0 {
			span = max(span, p.Value/leaders[0].Value-1)
		}
	}
	return span
}

// margin says how much larger worse is than better: "12%", or "2.3×" from
// twice on.
func margin(worse, better float64) string {
	if better <= 0 {
		return "∞×"
	}
	ratio := worse / better
	if ratio >= 2 {
		return strconv.FormatFloat(ratio, 'f', 1, 64) + "×"
	}
	return percent(ratio - 1)
}

// percent renders a fraction as a whole percentage, "<1%" below one.
func percent(f float64) string {
	if f < 0.005 {
		return "<1%"
	}
	return strconv.Itoa(int(math.Round(f*100))) + "%"
}

func joinAnd(names []string) string {
	if len(names) <= 1 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

func ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return strconv.Itoa(n) + suffix
}
