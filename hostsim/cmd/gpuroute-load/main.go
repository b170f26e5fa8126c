// Command gpuroute-load drives any OpenAI-compatible endpoint with the
// fleet simulator's workloads and traces as real streamed HTTP requests
// (hostsim/loadgen): seeded, open loop, bounded in count and time; it
// prints TTFT and end-to-end percentiles over the whole run and past the
// workload's warm-up, the warm share and the placement over replicas, as a
// table and JSON.
//
//	go run ./hostsim/cmd/gpuroute-load --url http://127.0.0.1:8080 --workload few-prefixes --time-scale 0.25
//	go run ./hostsim/cmd/gpuroute-load proxy --policy round-robin --listen 127.0.0.1:9000 --upstream http://127.0.0.1:8001 --upstream http://127.0.0.1:8002
//	go run ./hostsim/cmd/gpuroute-load bench --workload few-prefixes --runs 2   # gpuroute's gateway, round-robin and least-request on the same replicas
//
// bench starts the replicas (simulated, hostsim/gateway), the local
// gateway running build/gpuroute.wasm and the two reference proxies in
// process, and any router given with --peer as a process in front of the
// same replicas ("{port}" and "{workers}" are filled in), fresh for every
// run.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/gpuroute/gpuroute/hostsim/fleetsim"
	"github.com/gpuroute/gpuroute/hostsim/loadgen"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	args := os.Args[1:]
	var err error
	switch {
	case len(args) > 0 && args[0] == "proxy":
		err = proxy(ctx, args[1:])
	case len(args) > 0 && args[0] == "bench":
		err = bench(ctx, args[1:])
	default:
		err = drive(ctx, args)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpuroute-load:", err)
		os.Exit(1)
	}
}

// load is the workload selection and request shaping both drive and bench
// take.
type load struct {
	workloads, trace, api, model string
	seeds, limit, requests       int
	seed                         int64
	rateScale                    float64
	duration, timeout            time.Duration
	workloadMaxTokens            bool
}

func (l *load) flags(fs *flag.FlagSet, defaultWorkload string) {
	fs.StringVar(&l.workloads, "workload", defaultWorkload, "comma-separated workloads: "+strings.Join(fleetsim.WorkloadNames, ", "))
	fs.StringVar(&l.trace, "trace", "", "replay a Mooncake .jsonl or Azure .csv trace instead")
	fs.IntVar(&l.limit, "limit", 0, "with --trace: the first N requests")
	fs.Int64Var(&l.seed, "seed", 1, "workload seed (the first of --seeds)")
	fs.IntVar(&l.seeds, "seeds", 1, "seeds seed … seed+N-1, pooled")
	fs.Float64Var(&l.rateScale, "rate-scale", 0, "multiply the workload's arrival rates (0: its default)")
	fs.DurationVar(&l.duration, "duration", 0, "stop sending after this much wall time (0: the whole workload)")
	fs.IntVar(&l.requests, "requests", 0, "send at most N requests (0: all)")
	fs.DurationVar(&l.timeout, "timeout", 10*time.Minute, "one request's bound")
	fs.StringVar(&l.api, "api", loadgen.APIChat, "chat or completions")
	fs.StringVar(&l.model, "model", "", `"model" field for every request (default: the workload's)`)
	fs.BoolVar(&l.workloadMaxTokens, "workload-max-tokens", false, "send the workload's max_tokens with the true output as min_tokens (default: max_tokens = the output, with ignore_eos)")
}

// workloads generates the selected workloads for seed.
func (l *load) generate(seed int64) ([]*fleetsim.Workload, error) {
	if l.trace != "" {
		w, err := fleetsim.LoadTrace(l.trace, l.limit)
		return []*fleetsim.Workload{w}, err
	}
	var out []*fleetsim.Workload
	for _, name := range strings.Split(l.workloads, ",") {
		w, err := fleetsim.Generate(strings.TrimSpace(name), fleetsim.WorkloadOptions{Seed: seed, RateScale: l.rateScale})
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, nil
}

func (l *load) options() loadgen.Options {
	return loadgen.Options{API: l.api, Model: l.model, Duration: l.duration, MaxRequests: l.requests,
		Timeout: l.timeout, WorkloadMaxTokens: l.workloadMaxTokens}
}

func drive(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("gpuroute-load", flag.ContinueOnError)
	var l load
	l.flags(fs, "shared-prefix")
	url := fs.String("url", "", "base URL of the OpenAI-compatible endpoint (required)")
	label := fs.String("label", "", "name of the target in the table (default: the URL)")
	scale := fs.Float64("time-scale", 1, "wall seconds per modelled second (the replicas' --time-scale)")
	jsonPath := fs.String("json", "", "write the reports as JSON to this file")
	var metrics listFlag
	fs.Var(&metrics, "metrics", "a replica's /metrics URL, for the prefix-cache hit rate (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *url == "" {
		return errors.New("--url is required")
	}
	var reports []*loadgen.Report
	for k := range max(l.seeds, 1) {
		ws, err := l.generate(l.seed + int64(k))
		if err != nil {
			return err
		}
		for _, w := range ws {
			o := l.options()
			o.URL, o.Label, o.TimeScale, o.MetricsURLs = *url, *label, *scale, metrics
			rep, err := loadgen.Run(ctx, w, l.seed+int64(k), o)
			if err != nil {
				return err
			}
			reports = append(reports, rep)
		}
	}
	loadgen.WriteTable(os.Stdout, reports, "")
	return writeJSON(*jsonPath, reports)
}

func proxy(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("gpuroute-load proxy", flag.ContinueOnError)
	policy := fs.String("policy", loadgen.ProxyRoundRobin, "round-robin or least-request")
	listen := fs.String("listen", "127.0.0.1:9000", "address to serve on")
	var ups listFlag
	fs.Var(&ups, "upstream", "an upstream base URL (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	p, err := loadgen.NewProxy(*policy, ups)
	if err != nil {
		return err
	}
	srv := &http.Server{Addr: *listen, Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	fmt.Fprintf(os.Stderr, "gpuroute-load: %s proxy on %s over %d upstreams\n", *policy, *listen, len(ups))
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func bench(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("gpuroute-load bench", flag.ContinueOnError)
	var l load
	l.flags(fs, "few-prefixes")
	var o loadgen.BenchOptions
	fs.IntVar(&o.Replicas, "replicas", 4, "simulated replicas")
	fs.StringVar(&o.Hardware, "hardware", "", "their hardware profile (default: the workload's)")
	fs.Float64Var(&o.TimeScale, "time-scale", 1, "wall seconds per modelled second for the replicas and the load (below 1 misleads gpuroute, which prices in real seconds)")
	fs.IntVar(&o.Runs, "runs", 2, "runs per target and workload (fresh replicas each)")
	fs.IntVar(&o.Workers, "workers", 2, "gpuroute gateway worker VMs")
	fs.IntVar(&o.TickMillis, "tick-ms", 0, "gpuroute gateway tick_ms (default: 100 ms in the replicas' time, 100 × --time-scale)")
	targets := fs.String("targets", "gpuroute,round-robin,least-request", "in-process targets")
	wasmPath := fs.String("wasm", "build/gpuroute.wasm", "plugin module for the gpuroute target")
	gatewayCmd := fs.String("gateway-command", "", `run the gpuroute target as this process ("{port}", "{config}": the plugin configuration file), e.g. 'build/gpuroute-gateway --listen 127.0.0.1:{port} --plugin-config {config}' (default: in process)`)
	jsonPath := fs.String("json", "", "write the pooled reports as JSON to this file")
	outPath := fs.String("out", "", "also write the tables to this file")
	var peers listFlag
	fs.Var(&peers, "peer", `a router to run: name='command {port} … {workers}' (repeatable)`)
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, t := range strings.Split(*targets, ",") {
		if t = strings.TrimSpace(t); t != "" {
			o.Targets = append(o.Targets, t)
		}
	}
	for _, v := range peers {
		p, err := loadgen.ParsePeer(v)
		if err != nil {
			return err
		}
		o.Peers = append(o.Peers, p)
	}
	o.GatewayCommand = strings.Fields(*gatewayCmd)
	if len(o.Targets) > 0 && o.Targets[0] == loadgen.TargetGPURoute && len(o.GatewayCommand) == 0 {
		b, err := os.ReadFile(*wasmPath)
		if err != nil {
			return errors.New("read module (build it with `make wasm`): " + err.Error())
		}
		o.WASM = b
	}
	o.Load = l.options()
	o.Log = os.Stderr
	type pooled struct {
		Workload string            `json:"workload"`
		Runs     int               `json:"runs"`
		Seeds    int               `json:"seeds"`
		Results  []*loadgen.Report `json:"results"`
		Each     []*loadgen.Report `json:"each_run"`
	}
	var all []pooled
	var tables strings.Builder
	stdout := io.MultiWriter(os.Stdout, &tables)
	ws0, err := l.generate(l.seed)
	if err != nil {
		return err
	}
	for wi := range ws0 {
		byTarget := map[int][]*loadgen.Report{}
		var each []*loadgen.Report
		var name string
		for k := range max(l.seeds, 1) {
			ws, err := l.generate(l.seed + int64(k))
			if err != nil {
				return err
			}
			w := ws[wi]
			name = w.Name
			res, err := loadgen.Bench(ctx, w, l.seed+int64(k), o)
			if err != nil {
				return err
			}
			for t, r := range res {
				byTarget[t] = append(byTarget[t], r.Runs...)
				each = append(each, r.Runs...)
			}
		}
		p := pooled{Workload: name, Runs: o.Runs, Seeds: max(l.seeds, 1), Each: each}
		for t := range len(byTarget) {
			p.Results = append(p.Results, loadgen.Pool(byTarget[t]))
		}
		hw := o.Hardware
		if hw == "" {
			hw = "the workload's"
		}
		fmt.Fprintf(stdout, "\n== %s: %d runs × %d seeds per target, %d × %s simulated replicas at time scale %g\n",
			name, o.Runs, max(l.seeds, 1), o.Replicas, hw, o.TimeScale)
		base := ""
		if len(p.Results) > 0 {
			base = p.Results[0].Label
		}
		loadgen.WriteTable(stdout, p.Results, base)
		all = append(all, p)
	}
	if *outPath != "" {
		if err := os.WriteFile(*outPath, []byte(tables.String()), 0o644); err != nil {
			return err
		}
	}
	return writeJSON(*jsonPath, all)
}

func writeJSON(path string, v any) error {
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
