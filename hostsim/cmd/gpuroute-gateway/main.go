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
// first (edit it to drain a replica). A replica's metrics_cluster is served
// by "http://" + its address unless --cluster maps it elsewhere.
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
	tickMs := fs.Int("tick-ms", 100, "generated configuration: tick_ms")
	statusPath := fs.String("status-path", "/gpuroute/status", `generated configuration: status_path ("" for none)`)
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
	for i := 0; i < *simulate; i++ {
		name := "sim-" + strconv.Itoa(i)
		rep := gateway.NewReplica(gateway.ReplicaOptions{Name: name, Hardware: hw, TimeScale: *simScale})
		srv, err := gateway.Serve("127.0.0.1:0", rep)
		if err != nil {
			return err
		}
		defer srv.Close()
		logger.Printf("simulated replica %s on %s", name, srv.URL())
		specs = append(specs, gateway.ReplicaSpec{Name: name, Address: srv.Addr, Hardware: hw.Name})
	}
	clusterMap := map[string]string{}
	for _, v := range clusters {
		name, url, ok := strings.Cut(v, "=")
		if !ok || name == "" || url == "" {
			return errors.New("--cluster must be name=url, got " + strconv.Quote(v))
		}
		clusterMap[name] = url
	}

	cfg, err := pluginConfig(*cfgPath, specs, gateway.ConfigOptions{TickMillis: *tickMs, StatusPath: *statusPath})
	if err != nil {
		return err
	}
	opts := gateway.Options{WASM: wasm, Workers: *workers, PluginConfig: cfg, Clusters: clusterMap,
		Logger: logger, PluginLogLevel: hostsim.LogWarn}
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
// replicas (writing it to path when path is set but missing).
func pluginConfig(path string, specs []gateway.ReplicaSpec, o gateway.ConfigOptions) ([]byte, error) {
	if path != "" {
		b, err := os.ReadFile(path)
		if err == nil {
			return b, nil
		}
		if !errors.Is(err, os.ErrNotExist) || len(specs) == 0 {
			return nil, errors.New("read --plugin-config: " + err.Error())
		}
	}
	if len(specs) == 0 {
		return nil, errors.New("no replicas: give --replica, --simulate or --plugin-config")
	}
	cfg, err := gateway.PluginConfig(specs, o)
	if err != nil {
		return nil, err
	}
	if path != "" {
		if err := os.WriteFile(path, cfg, 0o644); err != nil {
			return nil, errors.New("write --plugin-config: " + err.Error())
		}
	}
	return cfg, nil
}
