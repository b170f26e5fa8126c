package loadgen

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// WriteTable writes one line per report: TTFT over the whole run and past
// the warm-up, the warm share, how evenly the replicas were used, and,
// when base names one of the reports, each figure as a ratio to base's
// (above 1: slower than base).
func WriteTable(w io.Writer, reports []*Report, base string) {
	var b *Report
	for _, r := range reports {
		if r.Label == base {
			b = r
		}
	}
	fmt.Fprintf(w, "%-16s %6s %5s %8s %8s %8s %8s %8s %8s %6s %6s %9s\n", "target", "done", "fail",
		"ttft_avg", "ttft_p50", "ttft_p99", "st_avg", "st_p50", "st_p99", "warm", "hit", "placement")
	for _, r := range reports {
		fmt.Fprintf(w, "%-16s %6d %5d %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %6s %6s %9s\n", r.Label, r.Completed, r.Failed,
			r.TTFTMeanSec, r.TTFTP50Sec, r.TTFTP99Sec, r.Steady.TTFTMeanSec, r.Steady.TTFTP50Sec, r.Steady.TTFTP99Sec,
			share(r.Steady.WarmShare), share(r.MetricsHitRate), spread(r.Placement))
	}
	if b == nil {
		return
	}
	fmt.Fprintf(w, "ratios to %s (above 1: slower):\n", base)
	for _, r := range reports {
		if r == b {
			continue
		}
		fmt.Fprintf(w, "  %-14s mean %5.2fx p99 %5.2fx; after warm-up mean %5.2fx p99 %5.2fx\n", r.Label,
			ratio(r.TTFTMeanSec, b.TTFTMeanSec), ratio(r.TTFTP99Sec, b.TTFTP99Sec),
			ratio(r.Steady.TTFTMeanSec, b.Steady.TTFTMeanSec), ratio(r.Steady.TTFTP99Sec, b.Steady.TTFTP99Sec))
	}
}

func share(v float64) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f", v)
}

func ratio(x, base float64) float64 {
	if base == 0 {
		return 0
	}
	return x / base
}

// spread renders the placement as the smallest and largest replica share
// ("0.24-0.26"), or "-" when no replica was named.
func spread(p map[string]int) string {
	total, lo, hi := 0, -1, 0
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == "unknown" {
			continue
		}
		v := p[k]
		total += v
		if lo < 0 || v < lo {
			lo = v
		}
		hi = max(hi, v)
	}
	if total == 0 {
		return "-"
	}
	return strings.TrimSpace(fmt.Sprintf("%.2f-%.2f", float64(lo)/float64(total), float64(hi)/float64(total)))
}
