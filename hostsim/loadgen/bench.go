package loadgen

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpuroute/gpuroute/hostsim"
	"github.com/gpuroute/gpuroute/hostsim/fleetsim"
	"github.com/gpuroute/gpuroute/hostsim/gateway"
	"github.com/gpuroute/gpuroute/scoring"
)

// Target names of the routers a bench starts in process.
const (
	TargetGPURoute = "gpuroute"
)

// Peer is a router run as a process in front of the bench's replicas:
// Command's words, where "{port}" is replaced by the port it must listen
// on and "{workers}" by the replicas' base URLs, one word each.
type Peer struct {
	Name    string
	Command []string
}

// ParsePeer reads "name=command words" (the command split on spaces).
func ParsePeer(v string) (Peer, error) {
	name, cmd, ok := strings.Cut(v, "=")
	if !ok || name == "" || strings.TrimSpace(cmd) == "" {
		return Peer{}, errors.New("loadgen: peer must be name=command, got " + strconv.Quote(v))
	}
	return Peer{Name: name, Command: strings.Fields(cmd)}, nil
}

// BenchOptions configure Bench. Zero fields take the defaults given.
type BenchOptions struct {
	// Replicas simulated replicas (default 4) of Hardware (default: the
	// workload's fleet, fleetsim.Workload.Hardware, else "h100"), their
	// model TimeScale times real time (default 1). Below 1 the replicas run
	// faster than the hardware profiles gpuroute prices them with, and its
	// rates and externality are in wall seconds: its figures are then not
	// the simulator's.
	Replicas  int
	Hardware  string
	TimeScale float64
	// Targets are the in-process routers: TargetGPURoute (the local
	// gateway running WASM with Workers worker VMs), ProxyRoundRobin,
	// ProxyLeastRequest. Peers are routers run as processes.
	Targets []string
	Peers   []Peer
	WASM    []byte
	Workers int
	// GatewayCommand, if set, runs TargetGPURoute as a process (a Peer
	// command, where "{config}" is also replaced by the plugin
	// configuration file the bench writes) instead of in the bench's own
	// process, where the gateway would share the Go scheduler and the
	// garbage collector with the replicas and the load generator while
	// every peer runs on its own.
	GatewayCommand []string
	// TickMillis is the gateway's tick_ms (default 100 × TimeScale: the
	// local gateway's 100 ms in the replicas' time).
	TickMillis int
	// Runs is how many times each target runs each load (default 2),
	// targets interleaved run by run; every run gets fresh replicas.
	Runs int
	// Load is passed to Run (URL, Label and TimeScale are the bench's).
	Load Options
	// Log, if set, gets one line per run.
	Log io.Writer
	// StartTimeout bounds a peer's start (default 2 minutes).
	StartTimeout time.Duration
}

// BenchResult is one target's runs on one workload, pooled.
type BenchResult struct {
	Pooled *Report
	Runs   []*Report
}

// Bench runs every target on w, Runs times each, and returns one result
// per target in order (in-process targets first, then peers).
func Bench(ctx context.Context, w *fleetsim.Workload, seed int64, o BenchOptions) ([]BenchResult, error) {
	o.Replicas = max(o.Replicas, 1)
	if o.Hardware == "" {
		o.Hardware = "h100"
		if reps, err := fleetsim.ParseHardware(w.Hardware, 0); err == nil && len(reps) > 0 {
			o.Hardware = reps[0].Hardware.Name
		}
	}
	if o.TimeScale <= 0 {
		o.TimeScale = 1
	}
	o.Runs = max(o.Runs, 1)
	if o.StartTimeout <= 0 {
		o.StartTimeout = 2 * time.Minute
	}
	hw, ok := scoring.LookupHardware(o.Hardware)
	if !ok {
		return nil, errors.New("loadgen: unknown hardware " + strconv.Quote(o.Hardware))
	}
	names := append([]string(nil), o.Targets...)
	for _, p := range o.Peers {
		names = append(names, p.Name)
	}
	runs := make([][]*Report, len(names))
	for run := range o.Runs {
		for k, name := range names {
			rep, err := benchOne(ctx, w, seed, &o, hw, k, name)
			if err != nil {
				return nil, errors.New("loadgen: " + name + " run " + strconv.Itoa(run+1) + ": " + err.Error())
			}
			if o.Log != nil {
				io.WriteString(o.Log, w.Name+" "+name+" run "+strconv.Itoa(run+1)+": ttft mean "+
					strconv.FormatFloat(rep.TTFTMeanSec, 'f', 3, 64)+" s, after warm-up "+
					strconv.FormatFloat(rep.Steady.TTFTMeanSec, 'f', 3, 64)+" s, failed "+strconv.Itoa(rep.Failed)+"\n")
			}
			runs[k] = append(runs[k], rep)
		}
	}
	out := make([]BenchResult, len(names))
	for k := range names {
		out[k] = BenchResult{Pooled: Pool(runs[k]), Runs: runs[k]}
	}
	return out, nil
}

// benchOne starts fresh replicas and target k (named name), drives it
// with w and tears both down.
func benchOne(ctx context.Context, w *fleetsim.Workload, seed int64, o *BenchOptions, hw scoring.Hardware, k int, name string) (*Report, error) {
	var urls, metrics []string
	var specs []gateway.ReplicaSpec
	for i := range o.Replicas {
		rname := "replica-" + strconv.Itoa(i)
		srv, err := gateway.Serve("127.0.0.1:0", gateway.NewReplica(gateway.ReplicaOptions{Name: rname, Hardware: hw, TimeScale: o.TimeScale}))
		if err != nil {
			return nil, err
		}
		defer srv.Close()
		urls = append(urls, srv.URL())
		metrics = append(metrics, srv.URL()+gateway.PathMetrics)
		specs = append(specs, gateway.ReplicaSpec{Name: rname, Address: srv.Addr, Hardware: hw.Name})
	}
	var front string
	switch {
	case k >= len(o.Targets):
		base, stop, err := startPeer(ctx, o.Peers[k-len(o.Targets)], urls, o.StartTimeout)
		if err != nil {
			return nil, err
		}
		defer stop()
		front = base
	case name == TargetGPURoute:
		tick := o.TickMillis
		if tick <= 0 {
			tick = max(int(100*o.TimeScale+0.5), 1)
		}
		cfg, err := gateway.PluginConfig(specs, gateway.ConfigOptions{TickMillis: tick})
		if err != nil {
			return nil, err
		}
		if len(o.GatewayCommand) > 0 {
			base, stop, err := startGateway(ctx, o.GatewayCommand, cfg, urls, o.StartTimeout)
			if err != nil {
				return nil, err
			}
			defer stop()
			front = base
			break
		}
		gw, err := gateway.New(ctx, gateway.Options{WASM: o.WASM, Workers: max(o.Workers, 1), PluginConfig: cfg, PluginLogLevel: hostsim.LogWarn})
		if err != nil {
			return nil, err
		}
		defer gw.Close()
		srv, err := gateway.Serve("127.0.0.1:0", gw)
		if err != nil {
			return nil, err
		}
		defer srv.Close()
		front = srv.URL()
	default:
		p, err := NewProxy(name, urls)
		if err != nil {
			return nil, err
		}
		srv, err := gateway.Serve("127.0.0.1:0", p)
		if err != nil {
			return nil, err
		}
		defer srv.Close()
		front = srv.URL()
	}
	lo := o.Load
	lo.URL, lo.Label, lo.TimeScale, lo.MetricsURLs = front, name, o.TimeScale, metrics
	return Run(ctx, w, seed, lo)
}

// startGateway writes cfg to a temporary file and runs command as a peer
// with "{config}" naming that file.
func startGateway(ctx context.Context, command []string, cfg []byte, workers []string, timeout time.Duration) (string, func(), error) {
	f, err := os.CreateTemp("", "gpuroute-bench-*.json")
	if err != nil {
		return "", nil, err
	}
	_, err = f.Write(cfg)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", nil, errors.New("loadgen: write the gateway's plugin configuration: " + err.Error())
	}
	words := make([]string, len(command))
	for i, w := range command {
		words[i] = strings.ReplaceAll(w, "{config}", f.Name())
	}
	base, stop, err := startPeer(ctx, Peer{Name: TargetGPURoute, Command: words}, workers, timeout)
	if err != nil {
		os.Remove(f.Name())
		return "", nil, err
	}
	return base, func() { stop(); os.Remove(f.Name()) }, nil
}

// startPeer runs p on a free port in front of workers and waits until it
// answers a models listing or a health check; stop ends its process group.
func startPeer(ctx context.Context, p Peer, workers []string, timeout time.Duration) (string, func(), error) {
	port, err := freePort()
	if err != nil {
		return "", nil, err
	}
	var args []string
	for _, a := range p.Command {
		switch a {
		case "{workers}":
			args = append(args, workers...)
		default:
			args = append(args, strings.ReplaceAll(a, "{port}", strconv.Itoa(port)))
		}
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logf, err := os.CreateTemp("", "peer-"+p.Name+"-*.log")
	if err != nil {
		return "", nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return "", nil, errors.New("start " + strconv.Quote(strings.Join(args, " ")) + ": " + err.Error())
	}
	stop := func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		logf.Close()
		os.Remove(logf.Name())
	}
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, path := range []string{"/v1/models", "/health", "/readiness"} {
			if resp, err := http.Get(base + path); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return base, stop, nil
				}
			}
		}
		if cmd.ProcessState != nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	tail, _ := os.ReadFile(logf.Name())
	stop()
	if len(tail) > 2000 {
		tail = tail[len(tail)-2000:]
	}
	return "", nil, errors.New("peer " + p.Name + " did not become ready on " + base + " within " + timeout.String() + "; its log ends:\n" + string(tail))
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
