package faults

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Options selects the module and the scenario sizes.
type Options struct {
	// Wasm is the plugin module (build/gpuroute.wasm); required.
	Wasm []byte
	// Requests is the client requests of each load scenario; 0 means 2000.
	Requests int
	// GCRequests is the requests of the GC-pressure scenario; 0 means
	// 20000 (the CLI runs 1,000,000).
	GCRequests int
	// Only names the scenarios to run; empty runs all.
	Only []string
}

func (o Options) requests() int {
	if o.Requests > 0 {
		return o.Requests
	}
	return 2000
}

func (o Options) gcRequests() int {
	if o.GCRequests > 0 {
		return o.GCRequests
	}
	return 20000
}

// Result is one scenario's figures.
type Result struct {
	// Name is the scenario's name; What says what it injects.
	Name, What string
	// Sent counts client requests; Completed those a replica answered in
	// full; Local the plugin's local replies by HTTP status.
	Sent, Completed int
	Local           map[int]int
	// Retried counts the client's re-sends (after a refused connection, a
	// reset stream or a drain deadline); Failover the attempts Envoy moved
	// to a fallback destination of the override_host list.
	Retried, Failover int
	// DrainEnded counts streams a drain deadline reset (each re-sent).
	DrainEnded int
	// Lost counts requests neither completed nor answered locally, even
	// after the client's re-send.
	Lost int
	// Unroutable counts requests that failed while no replica at all could
	// serve them (all-down's detection window): not lost by the plugin.
	Unroutable int
	// KnownGap, when set, explains an expectation the plugin is known not
	// to meet (lost requests it cannot avoid yet); the table marks it GAP.
	KnownGap string
	// Trapped reports whether any VM trapped.
	Trapped bool
	// ErrorLogs counts guest log lines at error level or above.
	ErrorLogs int
	// Figures are the scenario's own measurements, one line.
	Figures string
	// Err is a harness failure or a broken expectation of the scenario.
	Err error
	// Elapsed is the real time the scenario took.
	Elapsed time.Duration
}

func (r *Result) local(status int) {
	if r.Local == nil {
		r.Local = map[int]int{}
	}
	r.Local[status]++
}

// LocalText renders the local replies as "503:12 429:3", or "-".
func (r *Result) LocalText() string {
	if len(r.Local) == 0 {
		return "-"
	}
	codes := make([]int, 0, len(r.Local))
	for c := range r.Local {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	parts := make([]string, len(codes))
	for i, c := range codes {
		parts[i] = strconv.Itoa(c) + ":" + strconv.Itoa(r.Local[c])
	}
	return strings.Join(parts, " ")
}

// Names lists the scenarios in the order Run runs them.
func Names() []string {
	out := make([]string, len(scenarios))
	for i, s := range scenarios {
		out[i] = s.name
	}
	return out
}

// Run runs the selected scenarios one after another.
func Run(o Options) []Result {
	var out []Result
	for _, s := range scenarios {
		if len(o.Only) > 0 && !slices.Contains(o.Only, s.name) {
			continue
		}
		out = append(out, RunOne(o, s.name))
	}
	return out
}

// RunOne runs the scenario called name.
func RunOne(o Options, name string) Result {
	for _, s := range scenarios {
		if s.name != name {
			continue
		}
		res := Result{Name: s.name, What: s.what}
		t0 := time.Now()
		s.run(o, &res)
		res.Elapsed = time.Since(t0)
		return res
	}
	return Result{Name: name, Err: fmt.Errorf("faults: no scenario %q (have %s)", name, strings.Join(Names(), ", "))}
}

// WriteTable prints results as an aligned table, then each scenario's
// figures and errors.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tsent\tcompleted\tretried\tfailover\tdrain-ended\tno-upstream\tlost\tlocal replies\ttrap\terror logs\tverdict\t")
	for _, r := range results {
		verdict := "ok"
		switch {
		case r.Err != nil:
			verdict = "FAIL"
		case r.KnownGap != "":
			verdict = "GAP"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%v\t%d\t%s\t\n", r.Name, r.Sent, r.Completed, r.Retried,
			r.Failover, r.DrainEnded, r.Unroutable, r.Lost, r.LocalText(), r.Trapped, r.ErrorLogs, verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, r := range results {
		fmt.Fprintf(w, "%s (%s, %.1fs): %s\n", r.Name, r.What, r.Elapsed.Seconds(), r.Figures)
		if r.Err != nil {
			fmt.Fprintf(w, "  FAIL: %v\n", r.Err)
		}
		if r.KnownGap != "" {
			fmt.Fprintf(w, "  GAP: %s\n", r.KnownGap)
		}
	}
	return nil
}
