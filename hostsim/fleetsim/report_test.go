package fleetsim

import (
	"bytes"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// seeded is a summary whose pooled mean TTFT is mean and whose seeds had
// the given means (none: a single run).
func seeded(policy string, mean float64, bySeed ...float64) Summary {
	return Summary{Policy: policy, Completed: 100, TTFTMeanSec: mean, TTFTMeanBySeedSec: bySeed}
}

var meanTTFT = Metric{Label: "mean TTFT"}

func TestRankTies(t *testing.T) {
	cases := []struct {
		name  string
		sums  []Summary
		ranks map[string]int
	}{
		{"lead beyond the floor, steady seeds", []Summary{
			seeded("a", 1.00, 1.00, 1.01, 0.99), seeded("b", 1.20, 1.20, 1.21, 1.19)},
			map[string]int{"a": 1, "b": 2}},
		{"under the floor", []Summary{
			seeded("a", 1.00, 1.00, 1.00, 1.00), seeded("b", 1.02, 1.02, 1.02, 1.02)},
			map[string]int{"a": 1, "b": 1}},
		{"beyond the floor, within the seeds' spread", []Summary{
			seeded("a", 1.00, 0.70, 1.30, 1.00), seeded("b", 1.10, 1.30, 0.80, 1.20)},
			map[string]int{"a": 1, "b": 1}},
		{"single run, within SingleRunNoise", []Summary{seeded("a", 1.00), seeded("b", 1.04)},
			map[string]int{"a": 1, "b": 1}},
		{"single run, beyond SingleRunNoise", []Summary{seeded("a", 1.00), seeded("b", 1.06)},
			map[string]int{"a": 1, "b": 2}},
		{"the reference takes no rank", []Summary{seeded(ReferencePolicy, 0.5), seeded("a", 1.0), seeded("b", 1.5)},
			map[string]int{ReferencePolicy: 1, "a": 1, "b": 2}},
		{"ties share a rank, the next counts both", []Summary{seeded("a", 1.0), seeded("b", 1.01), seeded("c", 2)},
			map[string]int{"a": 1, "b": 1, "c": 3}},
		{"no completed request: not ranked", []Summary{seeded("a", 1.0), {Policy: "b"}},
			map[string]int{"a": 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Rank(c.sums, meanTTFT)
			got := map[string]int{}
			for _, p := range r.Placings {
				got[p.Policy] = p.Rank
			}
			if len(got) != len(c.ranks) {
				t.Errorf("Rank(%v) placed %v, want %v", c.sums, got, c.ranks)
			}
			for p, want := range c.ranks {
				if got[p] != want {
					t.Errorf("Rank(%v): %s rank %d, want %d", c.sums, p, got[p], want)
				}
			}
			if !slices.IsSortedFunc(r.Placings, func(a, b Placing) int { return int((a.Value - b.Value) * 1e9) }) {
				t.Errorf("Rank(%v) = %v, not in value order", c.sums, r.Placings)
			}
		})
	}
}

func TestVerdict(t *testing.T) {
	cases := []struct {
		name string
		sums []Summary
		want string
	}{
		{"focus first", []Summary{seeded("gpuroute", 1.0), seeded("llm-d", 1.12), seeded("round-robin", 3)},
			"gpuroute first on mean TTFT by 12% over llm-d"},
		{"tie at the top", []Summary{seeded("always-warm", 1.0), seeded("gpuroute", 1.02), seeded("llm-d", 1.3)},
			"always-warm and gpuroute tied on mean TTFT (2% apart, within the noise), 30% ahead of llm-d"},
		{"focus behind", []Summary{seeded("least-tokens", 1.0), seeded("round-robin", 1.09), seeded("gpuroute", 1.21)},
			"least-tokens first on mean TTFT by 9% over round-robin; gpuroute 3rd, 21% behind"},
		{"focus the runner-up", []Summary{seeded("llm-d-322", 1.0), seeded("gpuroute", 1.52), seeded("llm-d", 7)},
			"llm-d-322 first on mean TTFT by 52% over gpuroute"},
		{"far behind in times", []Summary{seeded("gpuroute", 1.0), seeded("round-robin", 25)},
			"gpuroute first on mean TTFT by 25.0× over round-robin"},
		{"everyone tied", []Summary{seeded("a", 1.0), seeded("b", 1.01)},
			"a and b tied on mean TTFT (1% apart, within the noise)"},
		{"the reference is not the winner", []Summary{seeded(ReferencePolicy, 0.5), seeded("gpuroute", 1.0), seeded("sglang", 1.5)},
			"gpuroute first on mean TTFT by 50% over sglang"},
		{"one competitor: no verdict", []Summary{seeded(ReferencePolicy, 0.5), seeded("gpuroute", 1.0)}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Rank(c.sums, meanTTFT).Verdict("gpuroute"); got != c.want {
				t.Errorf("Verdict(%v) = %q, want %q", c.sums, got, c.want)
			}
		})
	}
}

func TestWorkloadVerdict(t *testing.T) {
	// classed is a policy's result on a priority workload: its critical
	// requests' mean TTFT (p99 twice that) and the sheddable ones it shed.
	classed := func(policy string, critical float64, shed int) *Result {
		return &Result{Summary: Summary{Policy: policy, Completed: 100 - shed, Failed: shed, Shed: shed, TTFTMeanSec: 1, TTFTP99Sec: 2,
			Classes: map[string]*Summary{
				ClassCritical:  {Completed: 50, TTFTMeanSec: critical, TTFTP99Sec: 2 * critical},
				ClassSheddable: {Completed: 50 - shed, Failed: shed, Shed: shed},
			}}}
	}
	cases := []struct {
		name    string
		results []*Result
		want    string
	}{
		{"the leader sheds", []*Result{classed("gpuroute", 1, 22), classed("llm-d", 3, 0)},
			"gpuroute first on critical mean TTFT by 3.0× over llm-d; gpuroute first on critical p99 TTFT by 3.0× over llm-d; gpuroute shed 22% of the requests (22 sheddable)."},
		{"a tied leader sheds", []*Result{classed("gpuroute", 1, 0), classed("least-tokens", 1, 5)},
			"gpuroute and least-tokens tied on critical mean TTFT (<1% apart, within the noise); gpuroute and least-tokens tied on critical p99 TTFT (<1% apart, within the noise); least-tokens shed 5% of the requests (5 sheddable)."},
		{"the focus sheds behind", []*Result{classed("llm-d", 1, 0), classed("round-robin", 2, 0), classed("gpuroute", 4, 9)},
			"llm-d first on critical mean TTFT by 2.0× over round-robin; gpuroute 3rd, 4.0× behind; llm-d first on critical p99 TTFT by 2.0× over round-robin; gpuroute 3rd, 4.0× behind; gpuroute shed 9% of the requests (9 sheddable)."},
		{"a follower's and the reference's sheds go unsaid", []*Result{classed("gpuroute", 1, 0), classed("llm-d", 2, 7), classed(ReferencePolicy, 1, 9)},
			"gpuroute first on critical mean TTFT by 2.0× over llm-d; gpuroute first on critical p99 TTFT by 2.0× over llm-d."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			wr := WorkloadResults{Workload: &Workload{}, Results: c.results}
			if got := wr.Verdict("gpuroute"); got != c.want {
				t.Errorf("Verdict(%s) =\n%q, want\n%q", c.name, got, c.want)
			}
		})
	}
}

func TestTickFormat(t *testing.T) {
	cases := []struct {
		name string
		v    float64
		want string
	}{
		{"decade below one", 0.01, "0.01"},
		{"fraction", 0.25, "0.25"},
		{"small integer", 50, "50"},
		{"thousand", 1000, "1000"},
		{"thousands", 2500, "2500"},
		{"ten thousand", 1e4, "10000"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := tickFormat(c.v); got != c.want {
				t.Errorf("tickFormat(%v) = %q, want %q", c.v, got, c.want)
			}
		})
	}
}

func TestMetrics(t *testing.T) {
	classed := &Result{Summary: Summary{Policy: "a", Classes: map[string]*Summary{ClassCritical: {}, ClassSheddable: {}}}}
	plain := &Result{Summary: Summary{Policy: "a"}}
	cases := []struct {
		name   string
		wr     WorkloadResults
		labels []string
	}{
		{"plain", WorkloadResults{Workload: &Workload{}, Results: []*Result{plain}}, []string{"mean TTFT", "p99 TTFT"}},
		{"warm-up", WorkloadResults{Workload: &Workload{WarmUp: time.Second}, Results: []*Result{plain}},
			[]string{"mean TTFT", "p99 TTFT", "steady mean TTFT", "steady p99 TTFT"}},
		{"protected class", WorkloadResults{Workload: &Workload{}, Results: []*Result{classed}},
			[]string{"critical mean TTFT", "critical p99 TTFT"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, m := range c.wr.Metrics() {
				got = append(got, m.Label)
			}
			if !slices.Equal(got, c.labels) {
				t.Errorf("Metrics() = %q, want %q", got, c.labels)
			}
		})
	}
}

// TestReportStructure renders a report of real runs (a workload with a
// warm-up, one with classes, one without prefix reuse) and checks what a
// reader relies on: every chart has an x and a y axis label and a legend,
// every workload a verdict, and nothing loads from outside the file.
func TestReportStructure(t *testing.T) {
	policies := []string{"round-robin", "least-tokens", "llm-d", "oracle"}
	var all []WorkloadResults
	for _, wl := range []struct {
		name     string
		duration time.Duration
	}{{"few-prefixes", 90 * time.Second}, {"priority", 10 * time.Second}, {"bimodal", 5 * time.Second}} {
		var runs [][]*Result
		seeds := 2
		requests := 0
		var first *Workload
		for seed := range seeds {
			w, err := Generate(wl.name, WorkloadOptions{Seed: int64(seed + 1), Duration: wl.duration})
			if err != nil {
				t.Fatal(err)
			}
			if first == nil {
				first = w
			}
			requests += len(w.Requests)
			reps, err := ParseHardware(w.Hardware, 0)
			if err != nil {
				t.Fatal(err)
			}
			res, err := RunPolicies(Config{Replicas: reps, Seed: int64(seed + 1)}, w, policies, PolicyOptions{Seed: int64(seed + 1)}, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			runs = append(runs, res)
		}
		wr := WorkloadResults{Workload: first, Seeds: seeds, Requests: requests}
		for p := range policies {
			wr.Results = append(wr.Results, Pool([]*Result{runs[0][p], runs[1][p]}))
		}
		all = append(all, wr)
	}
	var buf bytes.Buffer
	if err := WriteHTML(&buf, "t", all); err != nil {
		t.Fatal(err)
	}
	doc := buf.String()

	svgs := regexp.MustCompile(`(?s)<figure class="chart"><figcaption>(.*?)</figcaption>(<svg.*?</svg>)`).FindAllStringSubmatch(doc, -1)
	if len(svgs) < 3*5 {
		t.Fatalf("report has %d charts, want at least %d (three workloads, four policies' load each)", len(svgs), 3*5)
	}
	if n := strings.Count(doc, "<svg"); n != len(svgs) {
		t.Errorf("report has %d svg elements, %d of them in chart figures", n, len(svgs))
	}
	label := func(svg, class string) string {
		m := regexp.MustCompile(`<text[^>]*class="` + class + `"[^>]*>([^<]*)</text>`).FindStringSubmatch(svg)
		if m == nil {
			return ""
		}
		return m[1]
	}
	for _, s := range svgs {
		title, svg := s[1], s[2]
		if label(svg, "x-label") == "" || label(svg, "y-label") == "" {
			t.Errorf("chart %q: x label %q, y label %q; want both", title, label(svg, "x-label"), label(svg, "y-label"))
		}
		if xl := label(svg, "x-label"); !strings.Contains(xl, "(") && xl != "policy" {
			t.Errorf("chart %q: x label %q has no unit", title, xl)
		}
		if !strings.Contains(svg, `<g class="x-axis">`) || strings.Count(regexp.MustCompile(`(?s)<g class="x-axis">.*?</g>`).FindString(svg), "<text") < 3 {
			t.Errorf("chart %q: fewer than two x tick labels", title)
		}
		if n := strings.Count(svg, `class="legend-entry"`); n == 0 {
			t.Errorf("chart %q has no legend entry", title)
		}
	}

	sections := regexp.MustCompile(`(?s)<section class="workload".*?</section>`).FindAllString(doc, -1)
	if len(sections) != len(all) {
		t.Fatalf("report has %d workload sections, want %d", len(sections), len(all))
	}
	verdict := regexp.MustCompile(`<p class="verdict"><b>Verdict:</b> ([^<]+)</p>`)
	for i, sec := range sections {
		m := verdict.FindStringSubmatch(sec)
		if m == nil || !strings.Contains(m[1], " on ") {
			t.Errorf("workload %s: verdict %v, want a ranking clause", all[i].Workload.Name, m)
		}
		if !strings.Contains(sec, `<table class="ranking">`) {
			t.Errorf("workload %s: no ranking table", all[i].Workload.Name)
		}
	}
	if !strings.Contains(sections[1], "critical TTFT p99 s") || !strings.Contains(sections[1], "critical mean TTFT") {
		t.Errorf("priority section lacks the critical class's figures or verdict")
	}
	if !strings.Contains(sections[0], "steady TTFT mean s") {
		t.Errorf("few-prefixes section lacks the steady figures")
	}
	for _, ref := range regexp.MustCompile(`(?:src|href)="([^"]*)"`).FindAllStringSubmatch(doc, -1) {
		if !strings.HasPrefix(ref[1], "#") {
			t.Errorf("report loads %q: want a self-contained file", ref[1])
		}
	}
}
