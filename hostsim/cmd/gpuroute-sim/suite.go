package main

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuroute/gpuroute/hostsim/fleetsim"
)

// demoSuite is what `make demo` runs, in report order: each generated
// workload pooled over its own number of seeds (1 … seeds), and the
// Mooncake slice (name "") once. A workload gets the fewest seeds whose
// disjoint seed sets give the same ranking under the report's tie rule:
// fewer where the policies' per-seed figures spread little or their gaps
// are wide, more where the leaders are close and their seeds noisy.
// docs/simulator.md, "Results", has the spread each count rests on.
var demoSuite = []struct {
	name  string
	seeds int
}{
	{"shared-prefix", 4},
	{"lora", 8},
	{"bimodal", 2},
	{"hetero", 4},
	{"drain", 8},
	{"few-prefixes", 8},
	{"priority", 2},
	{"fairness", 2},
	{"", 1},
}

// demoGatewaySeeds is how many seeds the two-gateway replay of
// shared-prefix pools: it compares gpuroute with itself, one gateway
// against two with and without the peer exchange, whose gap is wide.
const demoGatewaySeeds = 2

// demoRun is one workload of a run and the policies raced on it.
type demoRun struct {
	load     func(seed int64) (*fleetsim.Workload, error)
	policies []string // nil: the --policies selection
	seeds    int      // runs pooled: seeds seed … seed+seeds-1; a trace runs once
	// requests names the request stream load generates for a seed when
	// another run of the suite generates the same ("" for none): a
	// policy runs once per seed on it, and both runs pool that result.
	requests string
}

// wasmPolicies are the policies that run the plugin module: each of their
// runs costs many times a Go baseline's, so runSuite starts them first.
var wasmPolicies = []string{wasmPolicy, wasmTwoGateways, wasmIsolated}

// slot is where a job's result goes: run, policy, seed.
type slot struct{ run, policy, seed int }

// suiteResult is one workload's pooled results and what they cost.
type suiteResult struct {
	fleetsim.WorkloadResults
	replicas int
	took     time.Duration // the runs' own wall time, summed
}

// job is one policy on one seed of one workload; also pools its result
// into other runs of the same requests (demoRun.requests).
type job struct {
	run, seed, policy int
	also              []slot
	w                 *fleetsim.Workload
	cfg               fleetsim.Config
	name              string
	popts             fleetsim.PolicyOptions
	outputTokens      int64
}

// runSuite runs every policy on every seed of every workload of runs on a
// pool of o.parallel goroutines fed longest job first (the wasm policies,
// then by the workload's output tokens), so the last runs to finish are
// short ones and no core idles while one long run ends; it pools each
// workload's seeds in seed order. A policy that fails on any seed of a
// workload is reported and left out of that workload.
func runSuite(runs []demoRun, names []string, o options) ([]suiteResult, error) {
	var jobs []job
	shared := map[string]int{} // requests, seed, policy -> jobs index
	out := make([]suiteResult, len(runs))
	results := make([][][]*fleetsim.Result, len(runs)) // [run][policy][seed]
	for i, run := range runs {
		policies := names
		if run.policies != nil {
			policies = run.policies
		}
		results[i] = make([][]*fleetsim.Result, len(policies))
		for p := range policies {
			results[i][p] = make([]*fleetsim.Result, run.seeds)
		}
		for k := range run.seeds {
			seed := o.seed + int64(k)
			w, err := run.load(seed)
			if err != nil {
				return nil, err
			}
			w.Prepare() // the runs share w across goroutines
			spec := w.Hardware
			if o.hardware != "" {
				spec = o.hardware
			}
			reps, err := fleetsim.ParseHardware(spec, o.replicas)
			if err != nil {
				return nil, err
			}
			for r := range reps {
				reps[r].Engine = o.engine
			}
			if k == 0 {
				out[i].Workload, out[i].Seeds, out[i].Hardware, out[i].replicas = w, run.seeds, spec, len(reps)
			}
			out[i].Requests += len(w.Requests)
			var tokens int64
			for _, r := range w.Requests {
				tokens += int64(r.MaxTokens)
			}
			for p, name := range policies {
				key := run.requests + "\x00" + strconv.Itoa(k) + "\x00" + name
				if j, ok := shared[key]; ok && run.requests != "" {
					jobs[j].also = append(jobs[j].also, slot{i, p, k})
					continue
				}
				shared[key] = len(jobs)
				jobs = append(jobs, job{run: i, seed: k, policy: p, w: w, name: name, outputTokens: tokens,
					cfg:   fleetsim.Config{Replicas: reps, Seed: seed},
					popts: fleetsim.PolicyOptions{Seed: seed, WasmPath: o.wasm, Workers: o.workers, Gateways: o.gateways, IsolatedGateways: o.isolated}})
			}
		}
	}
	slices.SortStableFunc(jobs, func(a, b job) int {
		wa, wb := slices.Contains(wasmPolicies, a.name), slices.Contains(wasmPolicies, b.name)
		switch {
		case wa != wb && wa:
			return -1
		case wa != wb:
			return 1
		case a.outputTokens != b.outputTokens:
			if a.outputTokens > b.outputTokens {
				return -1
			}
			return 1
		}
		return 0
	})

	var mu sync.Mutex
	var errs []error
	finished := 0
	tty := isTerminal(os.Stderr)
	queue := make(chan job)
	var wg sync.WaitGroup
	for range max(o.parallel, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range queue {
				p, err := fleetsim.NewPolicy(j.name, j.popts)
				var r *fleetsim.Result
				if err == nil {
					r, err = fleetsim.Run(j.cfg, j.w, p)
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					results[j.run][j.policy][j.seed] = r
					for _, a := range j.also {
						results[a.run][a.policy][a.seed] = r
					}
				}
				finished++
				if tty {
					bar := strings.Repeat("#", finished*20/len(jobs)) + strings.Repeat(".", 20-finished*20/len(jobs))
					fmt.Fprintf(os.Stderr, "\r[%s] %d/%d runs", bar, finished, len(jobs))
				}
				mu.Unlock()
			}
		}()
	}
	for _, j := range jobs {
		queue <- j
	}
	close(queue)
	wg.Wait()
	if tty {
		fmt.Fprint(os.Stderr, "\r\033[K")
	}
	if len(errs) > 0 {
		fmt.Fprintln(os.Stderr, "gpuroute-sim:", errors.Join(errs...))
	}
	for i := range runs {
		for _, rs := range results[i] {
			if slices.Contains(rs, nil) {
				continue // failed on a seed: not pooled over fewer seeds than the others
			}
			for _, r := range rs {
				out[i].took += r.Wall
			}
			out[i].Results = append(out[i].Results, fleetsim.Pool(rs))
		}
	}
	return out, nil
}
