// The cross-check holds the parser to github.com/prometheus/common/expfmt, the
// reference Prometheus text parser (a test-only dependency: it never reaches
// the wasm module).

package metrics

import (
	"bytes"
	"math"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// expfmtParse parses body with the reference text parser, accepting quoted
// UTF-8 names as Prometheus 3 does.
func expfmtParse(body []byte) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(bytes.NewReader(body))
}

func sampleValue(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return math.NaN()
}

func labelOf(m *dto.Metric, name string) (string, bool) {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue(), true
		}
	}
	return "", false
}

// refSource aggregates one Source over expfmt's families the way Names
// documents: finite values only, sum / mean / max, Alt only when Metric is absent.
func refSource(fams map[string]*dto.MetricFamily, src Source, agg uint8) (float64, bool) {
	for _, name := range []string{src.Metric, src.Alt} {
		if name == "" {
			continue
		}
		var sum, max float64
		n := 0
		for _, m := range fams[name].GetMetric() {
			if src.Label != "" {
				if v, ok := labelOf(m, src.Label); !ok || v != src.Value {
					continue
				}
			}
			v := sampleValue(m)
			if math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			if n == 0 || v > max {
				max = v
			}
			sum += v
			n++
		}
		if n == 0 {
			continue
		}
		switch agg {
		case aggMean:
			return sum / float64(n), true
		case aggMax:
			return max, true
		}
		return sum, true
	}
	return 0, false
}

// verdict parses line alone: whether p examined it (a family p reads, or
// not a sample line at all) and found it invalid. A line of another family
// is skipped unexamined, which a line starting with a name p reads never
// is.
func verdict(t *testing.T, p *Parser, s *Sample, line string) (examined, bad bool) {
	t.Helper()
	_ = p.Parse([]byte(line+"\n"), s)
	bad = s.Problems&ProblemBadLine != 0
	examined = bad || s.Problems&ProblemNoSamples == 0
	if !examined && startsWithRead(p, line) {
		t.Errorf("line %q of a metric the parser reads was skipped", line)
	}
	return examined, bad
}

// startsWithRead reports whether line's first token is a bare metric name
// p reads.
func startsWithRead(p *Parser, line string) bool {
	line = strings.TrimLeft(line, " \t")
	names := []string{p.names.CacheConfigInfo, p.names.LoRAInfo}
	for k := range p.nslots {
		names = append(names, p.slots[k].metric)
	}
	for _, n := range names {
		if n != "" && strings.HasPrefix(line, n) && (len(line) == len(n) || !nameBytes[line[len(n)]]) {
			return true
		}
	}
	return false
}

// nameThenQuote reports whether line starts with a bare metric name
// directly followed by a double quote.
func nameThenQuote(line string) bool {
	line = strings.TrimLeft(line, " \t")
	i := 0
	for i < len(line) && nameBytes[line[i]] {
		i++
	}
	return i > 0 && i < len(line) && line[i] == '"'
}

// TestExpfmtLineVerdicts: for every fixture line it examines, this parser
// rejects it alone exactly when expfmt does.
func TestExpfmtLineVerdicts(t *testing.T) {
	p := mustParser(t, EngineVLLM)
	var s Sample
	for _, fx := range fixtureEngines {
		for i, line := range strings.Split(strings.TrimSuffix(string(readFixture(t, fx.file)), "\n"), "\n") {
			examined, mineBad := verdict(t, p, &s, line)
			if _, err := expfmtParse([]byte(line + "\n")); examined && mineBad != (err != nil) {
				t.Errorf("%s line %d %q: bad = %v, expfmt error = %v", fx.file, i+1, line, mineBad, err)
			}
		}
	}
	for _, tc := range syntaxCases {
		if tc.crlf || tc.body == "" || tc.wantErr == ErrTruncated {
			continue // deliberate leniency, or nothing to compare
		}
		_ = p.Parse([]byte(tc.body), &s)
		_, err := expfmtParse([]byte(tc.body))
		if mineBad := s.Problems&(ProblemBadLine|ProblemNoSamples) != 0; mineBad != (err != nil) {
			t.Errorf("%s: bad = %v, expfmt error = %v", tc.name, mineBad, err)
		}
	}
}

// TestExpfmtCrossCheck parses every fixture with expfmt (minus the lines both
// parsers reject) and asserts each figure this parser extracts equals the one
// computed from expfmt's families.
func TestExpfmtCrossCheck(t *testing.T) {
	for _, fx := range fixtureEngines {
		t.Run(fx.file, func(t *testing.T) {
			body := readFixture(t, fx.file)
			p := mustParser(t, fx.engine)
			var s Sample
			_ = p.Parse(body, &s)

			// Drop the lines this parser skipped (TestExpfmtLineVerdicts shows
			// expfmt rejects exactly those), then expfmt must accept the rest.
			var kept bytes.Buffer
			var one Sample
			for _, line := range bytes.SplitAfter(body, []byte("\n")) {
				if _ = p.Parse(line, &one); one.Problems&ProblemBadLine == 0 {
					kept.Write(line)
				}
			}
			fams, err := expfmtParse(kept.Bytes())
			if err != nil {
				t.Fatalf("expfmt(%s without bad lines) error = %v", fx.file, err)
			}
			if len(fams) == 0 {
				t.Fatalf("expfmt(%s) found no families", fx.file)
			}

			nm := DefaultNames(fx.engine)
			srcs := nm.sources()
			got := [numFields]float64{
				fWaiting: float64(s.Waiting), fRunning: float64(s.Running), fMaxRunning: float64(s.MaxRunning),
				fKVUsage: s.KVUsage, fKVUsedTokens: float64(s.KVUsedTokens),
				fKVCapacityTokens: float64(s.KVCapacityTokens), fKVBlocks: float64(s.KVBlocks),
				fKVUsedBlocks: float64(s.KVUsedBlocks), fBlockSize: float64(s.BlockSizeTokens),
				fPrefixQueries: s.PrefixQueries, fPrefixHits: s.PrefixHits, fCacheHitRate: s.CacheHitRate,
				fPromptTokens: s.PromptTokensTotal, fGenerationTokens: s.GenerationTokensTotal,
				fPreemptions: s.PreemptionsTotal, fBatchMaxTokens: float64(s.BatchMaxTokens),
				fContextTokens: float64(s.ContextTokens),
			}
			checked := 0
			for f := 0; f < numFields; f++ {
				want, ok := refSource(fams, *srcs[f], fieldAgg[f])
				if f == fPrefixQueries && !ok {
					// Derived as hits + misses when only those are exposed.
					h, okH := refSource(fams, *srcs[fPrefixHits], aggSum)
					m, okM := refSource(fams, *srcs[fPrefixMisses], aggSum)
					want, ok = h+m, okH && okM
				}
				if !ok || fieldBit[f] == 0 {
					continue // no such series, or an input to a derived figure
				}
				switch f {
				case fKVUsage, fCacheHitRate:
					want = clamp01(want)
				case fPrefixQueries, fPrefixHits, fPromptTokens, fGenerationTokens, fPreemptions:
					want = nonNeg(want)
				default:
					want = float64(toCount(want))
				}
				checked++
				if fieldBit[f] != 0 && !s.Has(fieldBit[f]) || got[f] != want {
					t.Errorf("%s: %s = %v (present %v), expfmt gives %v", fx.file, fieldKeys[f], got[f],
						s.Has(fieldBit[f]), want)
				}
			}

			// vLLM info metrics: cache_config_info labels and the newest
			// lora_requests_info series.
			if nm.CacheConfigInfo != "" {
				var blocks, tokens float64
				var bs int64
				for _, m := range fams[nm.CacheConfigInfo].GetMetric() {
					b, errB := strconv.ParseInt(mustLabel(m, LabelBlockSize), 10, 64)
					n, errN := strconv.ParseInt(mustLabel(m, LabelNumGPUBlocks), 10, 64)
					if errB == nil && b > 0 {
						bs = max(bs, b)
						if errN == nil {
							blocks += float64(n)
							tokens += float64(n * b)
						}
					}
				}
				if bs > 0 {
					checked++
					if s.BlockSizeTokens != bs {
						t.Errorf("%s: block size %d, expfmt labels give %d", fx.file, s.BlockSizeTokens, bs)
					}
				}
				if tokens > 0 && (float64(s.KVCapacityTokens) != tokens || float64(s.KVBlocks) != blocks) {
					t.Errorf("%s: capacity %d tokens / %d blocks, expfmt labels give %v / %v",
						fx.file, s.KVCapacityTokens, s.KVBlocks, tokens, blocks)
				}
			}
			if nm.LoRAInfo != "" {
				var best *dto.Metric
				for _, m := range fams[nm.LoRAInfo].GetMetric() {
					if v := sampleValue(m); !math.IsNaN(v) && (best == nil || v > sampleValue(best)) {
						best = m
					}
				}
				if best != nil {
					checked++
					if r := strings.Join(names(s.RunningAdapters), ","); r != mustLabel(best, LabelRunningAdapters) {
						t.Errorf("%s: running adapters %q, expfmt newest series has %q", fx.file, r, mustLabel(best, LabelRunningAdapters))
					}
					if w := strings.Join(names(s.WaitingAdapters), ","); w != mustLabel(best, LabelWaitingAdapters) {
						t.Errorf("%s: waiting adapters %q, expfmt newest series has %q", fx.file, w, mustLabel(best, LabelWaitingAdapters))
					}
					if m := strconv.FormatInt(s.MaxAdapters, 10); m != mustLabel(best, LabelMaxLoRA) {
						t.Errorf("%s: max adapters %s, expfmt newest series has %q", fx.file, m, mustLabel(best, LabelMaxLoRA))
					}
				}
			}
			if checked == 0 {
				t.Errorf("%s: no figure cross-checked", fx.file)
			}
		})
	}
}

func mustLabel(m *dto.Metric, name string) string {
	v, _ := labelOf(m, name)
	return v
}

// FuzzExpfmtVerdict compares line validity with expfmt on arbitrary single
// lines (CR excluded: accepting CRLF is a deliberate leniency), as they are
// and after a metric name the parser reads, so that the rest of the line is
// examined.
func FuzzExpfmtVerdict(f *testing.F) {
	for _, tc := range syntaxCases {
		if !tc.crlf && tc.body != "" {
			f.Add(strings.SplitN(tc.body, "\n", 2)[0])
		}
	}
	p, err := NewParser(EngineVLLM, DefaultNames(EngineVLLM))
	if err != nil {
		f.Fatal(err)
	}
	var s Sample
	f.Fuzz(func(t *testing.T, line string) {
		if strings.ContainsAny(line, "\r\n") || strings.HasPrefix(strings.TrimLeft(line, " \t"), "#") {
			return // comment lines: HELP/TYPE are not validated here
		}
		for _, l := range []string{line, "vllm:num_requests_waiting" + line} {
			if nameThenQuote(l) {
				// expfmt joins a bare name and a quoted string right after
				// it (`a"b" 1` is metric ab); we reject that: no exposition
				// writer produces it.
				continue
			}
			examined, mineBad := verdict(t, p, &s, l)
			if _, err := expfmtParse([]byte(l + "\n")); examined && mineBad != (err != nil) {
				t.Errorf("line %q: bad = %v, expfmt error = %v", l, mineBad, err)
			}
		}
	})
}
