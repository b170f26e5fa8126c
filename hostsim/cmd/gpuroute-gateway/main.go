// Command gpuroute-gateway is a local gateway: it serves HTTP on loopback,
// runs build/gpuroute.wasm in hostsim the way Envoy's filter chain would
// (one host, N worker VMs, round robin) and forwards each request to the
// replica the plugin picked, streaming the answer back.
//
//	make wasm
//	go run ./hostsim/cmd/gpuroute-gateway --simulate 3                 # three simulated replicas
//	go run ./hostsim/cmd/gpuroute-gateway --replica a=10.0.0.1:8000 --replica b=10.0.0.2:8000
//	go run ./hostsim/cmd/gpuroute-gateway --plugin-config plugin.json  # your own plugin configuration
//
// With --plugin-config FILE the file is the plugin configuration, reloaded
// when its modification time changes and on SIGHUP; the module file is
// watched the same way and a changed module replaces the worker VMs (streams
// in flight finish on the old ones). If FILE does not exist
// and replicas are given, the generated configuration is written there
// first (edit it to drain a replica); if it exists, the simulated replicas'
// addresses in it are rewritten to this run's ports. A replica's
// metrics_cluster is served by "http://" + its address unless --cluster
// maps it elsewhere. The fleet page is at /gpuroute/fleet.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpuroute/gpuroute/hostsim"
	"github.com/gpuroute/gpuroute/hostsim/gateway"
	"github.com/gpuroute/gpuroute/scoring"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gpuroute-gateway:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("gpuroute-gateway", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve on")
	wasmPath := fs.String("wasm", "build/gpuroute.wasm", "plugin module")
	workers := fs.Int("workers", gateway.DefaultWorkers, "worker VMs (Envoy --concurrency)")
	cfgPath := fs.String("plugin-config", "", "plugin configuration file (JSON), watched and reloaded on SIGHUP")
	poll := fs.Duration("poll", time.Second, "how often to check --plugin-config and --wasm for changes")
	simulate := fs.Int("simulate", 0, "start N simulated replicas on loopback and route to them")
	simScale := fs.Float64("sim-time-scale", 1, "simulated replicas: modelled seconds are multiplied by this")
	simHW := fs.String("sim-hardware", "h100", "simulated replicas: hardware profile")
	simModel := fs.String("sim-model", "", "simulated replicas: base model (any model name not in --sim-adapters is served by it)")
	simAdapters := fs.String("sim-adapters", "", "simulated replicas: comma-separated LoRA adapters they serve")
	tickMs := fs.Int("tick-ms", 100, "generated configuration: tick_ms")
	statusPath := fs.String("status-path", "/gpuroute/status", `generated configuration: status_path ("" for none)`)
	fleetPath := fs.String("fleet-path", gateway.DefaultFleetPath, `the fleet page's path ("-" for none)`)
	verbose := fs.Bool("v", false, "log the plugin's info lines too (default: warnings and errors)")
	var replicas, clusters listFlag
	fs.Var(&replicas, "replica", "name=ip:port of a replica (repeatable)")
	fs.Var(&clusters, "cluster", "name=http://host:port serving an Envoy cluster the plugin calls (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	logger := log.New(os.Stderr, "gpuroute-gateway: ", log.LstdFlags|log.Lmicroseconds)
	wasm, err := os.ReadFile(*wasmPath)
	if err != nil {
		return errors.New("read module (build it with `make wasm`): " + err.Error())
	}

	var specs []gateway.ReplicaSpec
	for _, v := range replicas {
		s, err := gateway.ParseReplicaFlag(v)
		if err != nil {
			return err
		}
		specs = append(specs, s)
	}
	hw, ok := scoring.LookupHardware(*simHW)
	if !ok {
		return errors.New("unknown --sim-hardware " + strconv.Quote(*simHW))
	}
	var adapters []string
	adapterBase := map[string]string{}
	if *simAdapters != "" {
		adapters = strings.Split(*simAdapters, ",")
	}
	simAddrs := map[string]string{}
	for i := 0; i < *simulate; i++ {
		name := "sim-" + strconv.Itoa(i)
		rep := gateway.NewReplica(gateway.ReplicaOptions{Name: name, Hardware: hw, TimeScale: *simScale, Model: *simModel, Adapters: adapters})
		defer rep.Close()
		srv, err := gateway.Serve("127.0.0.1:0", rep)
		if err != nil {
			return err
		}
		defer srv.Close()
		logger.Printf("simulated replica %s on %s", name, srv.URL())
		specs = append(specs, gateway.ReplicaSpec{Name: name, Address: srv.Addr, Hardware: hw.Name})
		simAddrs[name] = srv.Addr
		for _, a := range adapters {
			adapterBase[a] = rep.Model()
		}
	}
	clusterMap := map[string]string{}
	for _, v := range clusters {
		name, url, ok := strings.Cut(v, "=")
		if !ok || name == "" || url == "" {
			return errors.New("--cluster must be name=url, got " + strconv.Quote(v))
		}
		clusterMap[name] = url
	}

	cfg, rebound, err := pluginConfig(*cfgPath, specs, simAddrs, gateway.ConfigOptions{TickMillis: *tickMs, StatusPath: *statusPath, Adapters: adapterBase})
	if err != nil {
		return err
	}
	if len(rebound) > 0 {
		logger.Printf("%s: rebound simulated replicas %s to this run's addresses", *cfgPath, strings.Join(rebound, ", "))
	}
	opts := gateway.Options{WASM: wasm, Workers: *workers, PluginConfig: cfg, Clusters: clusterMap,
		Logger: logger, PluginLogLevel: hostsim.LogWarn, FleetPath: *fleetPath}
	if *verbose {
		opts.PluginLogLevel = hostsim.LogInfo
	}
	gw, err := gateway.New(context.Background(), opts)
	if err != nil {
		return err
	}
	defer gw.Close()
	srv, err := gateway.Serve(*listen, gw)
	if err != nil {
		return err
	}
	defer srv.Close()
	logger.Printf("serving on %s with %d worker VMs; try: curl -N %s/v1/chat/completions -d '{\"model\":\"m\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}'",
		srv.URL(), *workers, srv.URL())
	if *statusPath != "" && *cfgPath == "" {
		logger.Printf("status: %s%s", srv.URL(), *statusPath)
	}
	if *fleetPath != "-" {
		logger.Printf("fleet page: %s%s", srv.URL(), *fleetPath)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	if *cfgPath != "" {
		go gw.WatchFile(ctx, *cfgPath, *poll)
	}
	go gw.WatchModule(ctx, *wasmPath, *poll)
	for {
		select {
		case <-ctx.Done():
			logger.Print("shutting down")
			return nil
		case <-hup:
			if err := gw.ReloadModuleFile(ctx, *wasmPath, false); err != nil {
				logger.Print("SIGHUP: ", err)
			}
			if *cfgPath == "" {
				continue
			}
			if err := gw.ReloadFile(*cfgPath, true); err != nil {
				logger.Print("SIGHUP: ", err, "; the previous configuration keeps serving")
			} else {
				logger.Printf("SIGHUP: plugin configuration %d applied", gw.Generation())
			}
		}
	}
}

// pluginConfig reads the configuration file, or generates one from the
// replicas (writing it to path when path is set but missing). An existing
// file's simulated replicas (simAddrs: name → this run's address) are
// rebound to this run's ports and the file rewritten; it returns their
// names.
func pluginConfig(path string, specs []gateway.ReplicaSpec, simAddrs map[string]string, o gateway.ConfigOptions) ([]byte, []string, error) {
	if path != "" {
		b, err := os.ReadFile(path)
		if err == nil {
			if len(simAddrs) == 0 {
				return b, nil, nil
			}
			b, rebound, err := gateway.RebindReplicas(b, simAddrs)
			if err != nil {
				return nil, nil, errors.New("--plugin-config " + strconv.Quote(path) + ": " + err.Error())
			}
			if err := os.WriteFile(path, b, 0o644); err != nil {
				return nil, nil, errors.New("write --plugin-config: " + err.Error())
			}
			return b, rebound, nil
		}
		if !errors.Is(err, os.ErrNotExist) || len(specs) == 0 {
			return nil, nil, errors.New("read --plugin-config: " + err.Error())
		}
	}
	if len(specs) == 0 {
		return nil, nil, errors.New("no replicas: give --replica, --simulate or --plugin-config")
	}
	cfg, err := gateway.PluginConfig(specs, o)
	if err != nil {
		return nil, nil, err
	}
	if path != "" {
		if err := os.WriteFile(path, cfg, 0o644); err != nil {
			return nil, nil, errors.New("write --plugin-config: " + err.Error())
		}
	}
	return cfg, nil, nil
}
