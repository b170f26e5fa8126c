// Command gpuroute-sim runs routing policies against a simulated GPU fleet on
// the same workloads and reports TTFT, throughput, prefix hits, adapter loads
// and drains, as tables, JSON and a self-contained HTML report.
//
//	go run ./hostsim/cmd/gpuroute-sim                       # demo suite, build/report.html
//	go run ./hostsim/cmd/gpuroute-sim --workload lora --policies llm-d,oracle
//	go run ./hostsim/cmd/gpuroute-sim --trace testdata/traces/mooncake_fast25_conversation_trace_first2000.jsonl --limit 500
package main

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpuroute/gpuroute/hostsim/fleetsim"
)

// wasmPolicy is the registry name of gpuroute's own policy: the plugin
// module driven through hostsim (fleetsim.GPURoute), registered in init.
const wasmPolicy = fleetsim.GPURouteName

// The demo's gateway comparison: gpuroute in two gateway instances of four
// worker VMs each, with the peer exchange and with gateways that share
// nothing, against one gateway (the issue's "4 workers × 2 gateways keep
// the hit rate of one").
const (
	wasmTwoGateways = "gpuroute-2gw"
	wasmIsolated    = "gpuroute-iso"
)

func init() {
	fleetsim.Register(wasmPolicy, fleetsim.NewGPURoute)
	fleetsim.Register(wasmTwoGateways, twoGateways(wasmTwoGateways, false))
	fleetsim.Register(wasmIsolated, twoGateways(wasmIsolated, true))
}

// twoGateways builds the gpuroute policy as two gateways of four workers.
func twoGateways(name string, isolated bool) fleetsim.Factory {
	return func(o fleetsim.PolicyOptions) (fleetsim.Policy, error) {
		o.Gateways, o.Workers, o.IsolatedGateways = 2, 4, isolated
		p, err := fleetsim.NewGPURoute(o)
		if err != nil {
			return nil, err
		}
		return renamed{p, name}, nil
	}
}

// renamed reports a policy under another name in tables and reports.
type renamed struct {
	fleetsim.Policy
	name string
}

func (r renamed) Name() string { return r.name }

// demoTrace is the Mooncake slice the demo replays (first 2,000 lines of
// kvcache-ai/Mooncake FAST25-release/traces/conversation_trace.jsonl).
const demoTrace = "testdata/traces/mooncake_fast25_conversation_trace_first2000.jsonl"

type options struct {
	workload, trace, hardware, engine, policies, jsonPath, reportPath, wasm string
	limit, replicas, workers, gateways, parallel, seeds                     int
	seed                                                                    int64
	duration                                                                time.Duration
	list, isolated                                                          bool
}

func main() {
	faultsMain(os.Args[1:]) // --faults: the reliability report (faults.go); exits when asked
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gpuroute-sim:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	var o options
	fs := flag.NewFlagSet("gpuroute-sim", flag.ContinueOnError)
	fs.StringVar(&o.workload, "workload", "", "workload to run: "+strings.Join(fleetsim.WorkloadNames, ", ")+" (default: the demo suite)")
	fs.StringVar(&o.trace, "trace", "", "replay a Mooncake .jsonl or Azure .csv trace instead of a workload")
	fs.IntVar(&o.limit, "limit", 0, "with --trace: replay only the first N requests")
	fs.IntVar(&o.replicas, "replicas", 0, "number of replicas (default: the workload's fleet)")
	fs.StringVar(&o.hardware, "hardware", "", `fleet hardware: "h100" or "h100:4,a100:2,l4:2" (default: the workload's)`)
	fs.StringVar(&o.engine, "engine", fleetsim.EngineVLLM, "model server whose metrics format the replicas serve: vllm, sglang or tgi")
	fs.StringVar(&o.policies, "policies", "", "comma-separated policies (default: all baselines, and gpuroute when available)")
	fs.IntVar(&o.workers, "workers", 2, "worker VMs per gateway for the gpuroute policy (Envoy's --concurrency)")
	fs.IntVar(&o.parallel, "parallel", runtime.NumCPU(), "policies simulated at once")
	fs.IntVar(&o.gateways, "gateways", 1, "gateway instances the wasm policy emulates")
	fs.BoolVar(&o.isolated, "isolated-gateways", false, "gateways share nothing (turns the plugin's peer exchange off)")
	fs.Int64Var(&o.seed, "seed", 1, "seed of the workload generators and policies")
	fs.IntVar(&o.seeds, "seeds", 0, "run each generated workload with seeds seed … seed+N-1 and pool the requests (default: each demo workload's own count, "+
		"else 1; a trace runs once)")
	fs.DurationVar(&o.duration, "duration", 0, "truncate arrivals after this much virtual time")
	fs.StringVar(&o.jsonPath, "json", "", "write results as JSON to this file")
	fs.StringVar(&o.reportPath, "report", "", "write the HTML report to this file (demo default: build/report.html)")
	fs.BoolVar(&o.list, "list", false, "list workloads and policies, then exit")
	fs.StringVar(&o.wasm, "wasm", "build/gpuroute.wasm", "gpuroute plugin module for the gpuroute policy (build/gpuroute.wasm)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.list {
		fmt.Println("workloads:", strings.Join(fleetsim.WorkloadNames, ", "), "(or --trace FILE)")
		fmt.Println("policies: ", strings.Join(fleetsim.Policies(), ", "))
		if !slices.Contains(fleetsim.Policies(), wasmPolicy) {
			fmt.Println("          (" + wasmPolicy + ": not available in this build)")
		}
		return nil
	}

	if !slices.Contains([]string{fleetsim.EngineVLLM, fleetsim.EngineSGLang, fleetsim.EngineTGI}, o.engine) {
		return errors.New("unknown --engine " + fmt.Sprintf("%q", o.engine) + " (have vllm, sglang, tgi)")
	}
	names, err := pickPolicies(o.policies)
	if err != nil {
		return err
	}
	if o.seeds < 0 {
		return errors.New("--seeds must be >= 1, got " + strconv.Itoa(o.seeds))
	}
	var runs []demoRun // policies nil: names
	generate := func(name string) func(int64) (*fleetsim.Workload, error) {
		return func(seed int64) (*fleetsim.Workload, error) {
			return fleetsim.Generate(name, fleetsim.WorkloadOptions{Seed: seed, Duration: o.duration})
		}
	}
	switch {
	case o.trace != "":
		runs = append(runs, demoRun{load: func(int64) (*fleetsim.Workload, error) { return fleetsim.LoadTrace(o.trace, o.limit) }, seeds: 1})
	case o.workload != "":
		runs = append(runs, demoRun{load: generate(o.workload), seeds: max(o.seeds, 1)})
	default:
		for _, d := range demoSuite {
			n := d.seeds
			if o.seeds > 0 {
				n = o.seeds
			}
			if d.name == "" {
				if p := findUp(demoTrace); p != "" {
					runs = append(runs, demoRun{load: func(int64) (*fleetsim.Workload, error) { return fleetsim.LoadTrace(p, 0) }, seeds: 1})
				} else {
					fmt.Fprintln(os.Stderr, "gpuroute-sim: demo trace", demoTrace, "not found; skipping it")
				}
				continue
			}
			runs = append(runs, demoRun{load: generate(d.name), seeds: n, requests: d.name})
		}
		if slices.Contains(names, wasmPolicy) {
			// The shared-prefix run again, gpuroute alone, through two
			// gateways with and without the peer exchange.
			sharedPrefix := generate("shared-prefix")
			n := demoGatewaySeeds
			if o.seeds > 0 {
				n = o.seeds
			}
			runs = append(runs, demoRun{load: func(seed int64) (*fleetsim.Workload, error) {
				w, err := sharedPrefix(seed)
				if err == nil {
					w.Name += ", 2 gateways x 4 workers"
				}
				return w, err
			}, policies: []string{wasmPolicy, wasmTwoGateways, wasmIsolated}, seeds: n, requests: "shared-prefix"})
		}
		if o.reportPath == "" {
			o.reportPath = "build/report.html"
		}
	}

	start := time.Now()
	done, err := runSuite(runs, names, o)
	if err != nil {
		return err
	}
	var reports []fleetsim.Report
	var all []fleetsim.WorkloadResults
	for _, d := range done {
		rep := fleetsim.Report{Workload: d.WorkloadResults.Workload.Name}
		for _, r := range d.Results {
			rep.Results = append(rep.Results, r.Summary)
		}
		reports = append(reports, rep)
		all = append(all, d.WorkloadResults)
		printTable(d.WorkloadResults, d.replicas, d.took)
	}
	fmt.Printf("\n%d workloads in %.1fs\n", len(done), time.Since(start).Seconds())
	if o.jsonPath != "" {
		if err := writeFile(o.jsonPath, func(f *os.File) error { return fleetsim.WriteJSON(f, reports) }); err != nil {
			return err
		}
	}
	if o.reportPath != "" {
		if err := writeFile(o.reportPath, func(f *os.File) error { return fleetsim.WriteHTML(f, "gpuroute fleet simulation", all) }); err != nil {
			return err
		}
		fmt.Println("report:", o.reportPath)
	}
	return nil
}

// pickPolicies resolves --policies; the wasm policy, when requested but not
// registered in this build, is reported and skipped.
func pickPolicies(spec string) ([]string, error) {
	have := fleetsim.Policies()
	if spec == "" {
		names := slices.Clone(fleetsim.BaselineNames)
		if slices.Contains(have, wasmPolicy) {
			names = append([]string{wasmPolicy}, names...)
		}
		return names, nil
	}
	var names []string
	for _, n := range strings.Split(spec, ",") {
		n = strings.TrimSpace(n)
		switch {
		case n == "":
		case slices.Contains(have, n):
			names = append(names, n)
		case n == wasmPolicy:
			fmt.Fprintln(os.Stderr, "gpuroute-sim: policy \"gpuroute\" (the wasm plugin through hostsim) is not available in this build yet; running the others")
		default:
			return nil, errors.New("unknown policy " + fmt.Sprintf("%q", n) + " (have " + strings.Join(have, ", ") + ")")
		}
	}
	if len(names) == 0 {
		return nil, errors.New("no runnable policy in --policies " + fmt.Sprintf("%q", spec))
	}
	return names, nil
}

// printTable prints one workload's figures, each seed's mean and p99, the
// steady figures, the classes' and the drains, then its verdict; took is its runs' time
// summed.
func printTable(wr fleetsim.WorkloadResults, replicas int, took time.Duration) {
	rs, seeds := wr.Results, wr.Seeds
	runs := ""
	if seeds > 1 {
		runs = fmt.Sprintf(" (%d seeds pooled)", seeds)
	}
	fmt.Printf("\n== %s: %d requests%s, %d replicas (%s), runs %.1fs\n", wr.Workload.Name, wr.Requests, runs, replicas, wr.Hardware, took.Seconds())
	fmt.Printf("%-14s %8s %8s %8s %8s %8s %8s %8s %6s %6s %6s %5s %5s\n",
		"policy", "ttft_avg", "ttft_p50", "ttft_p90", "ttft_p99", "e2e_p50", "e2e_p99", "tok/s", "hit", "loads", "done", "fail", "migr")
	for _, r := range rs {
		s := r.Summary
		fmt.Printf("%-14s %8.3f %8.3f %8.3f %8.3f %8.2f %8.2f %8.0f %6.3f %6d %6d %5d %5d\n",
			s.Policy, s.TTFTMeanSec, s.TTFTP50Sec, s.TTFTP90Sec, s.TTFTP99Sec, s.E2EP50Sec, s.E2EP99Sec,
			s.ThroughputTokS, s.PrefixHitRate, s.AdapterLoads, s.Completed, s.Failed, s.Migrated)
	}
	if seeds > 1 {
		fmt.Println("  each seed's ttft_avg/ttft_p99:")
		for _, r := range rs {
			s := r.Summary
			fmt.Printf("  %-14s", s.Policy)
			for k := range s.TTFTMeanBySeedSec {
				fmt.Printf(" %6.3f/%-6.3f", s.TTFTMeanBySeedSec[k], s.TTFTP99BySeedSec[k])
			}
			fmt.Println()
		}
	}
	if len(rs) > 0 && rs[0].Summary.Steady != nil {
		fmt.Println("  after the warm-up (steady): ttft_avg/ttft_p50/ttft_p99, hit:")
		for _, r := range rs {
			if st := r.Summary.Steady; st != nil {
				fmt.Printf("  %-14s %6.3f/%6.3f/%6.3f, hit %.3f (%d requests)\n", st.Policy, st.TTFTMeanSec, st.TTFTP50Sec, st.TTFTP99Sec, st.PrefixHitRate, st.Completed+st.Failed)
			}
		}
	}
	if len(rs) > 0 && len(rs[0].Summary.Classes) > 0 {
		fmt.Println("  per class: ttft_avg/ttft_p99 and failed; requests the router shed and lost:")
		for _, r := range rs {
			s := r.Summary
			fmt.Printf("  %-14s", s.Policy)
			for _, c := range slices.Sorted(maps.Keys(s.Classes)) {
				cs := s.Classes[c]
				fmt.Printf(" %s %6.3f/%-6.3f failed %d;", c, cs.TTFTMeanSec, cs.TTFTP99Sec, cs.Failed)
			}
			fmt.Printf(" shed %d, lost %d\n", s.Shed, s.Lost)
		}
	}
	if len(rs) > 0 && rs[0].Summary.Drain.DeadlineSec > 0 {
		for _, r := range rs {
			d := r.Summary.Drain
			fmt.Printf("  drain %-14s deadline %.0fs, longest drain %.1fs, new after close %d\n", r.Summary.Policy, d.DeadlineSec, d.FinishedSec, d.NewAfterClose)
		}
	}
	fmt.Println("  verdict:", wr.Verdict(fleetsim.GPURouteName))
}

func writeFile(path string, fn func(*os.File) error) error {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := fn(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// findUp looks for rel in the working directory and its parents (go run may
// start anywhere inside the module).
func findUp(rel string) string {
	dir, _ := os.Getwd()
	for dir != "" {
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err == nil {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return ""
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
