// Command gpuroute-replica serves one simulated OpenAI-compatible model
// server (hostsim/gateway.Replica): /v1/chat/completions and
// /v1/completions (SSE when "stream" is true), /metrics in vLLM's format,
// with time to first token from a prefix-cache and adapter model.
//
//	go run ./hostsim/cmd/gpuroute-replica --listen 127.0.0.1:8001 --name a --time-scale 0.1
package main

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/gpuroute/gpuroute/hostsim/gateway"
	"github.com/gpuroute/gpuroute/scoring"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gpuroute-replica:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("gpuroute-replica", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8001", "address to serve on")
	name := fs.String("name", "replica", "replica name (x-gpuroute-sim-replica response header)")
	hwName := fs.String("hardware", "h100", "hardware profile")
	scale := fs.Float64("time-scale", 1, "modelled seconds are multiplied by this (0.1: ten times faster)")
	model := fs.String("model", "", "base model name (others are LoRA adapters)")
	maxLoras := fs.Int("max-loras", 0, "adapters resident on the GPU (0: 4, -1: none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	hw, ok := scoring.LookupHardware(*hwName)
	if !ok {
		return errors.New("unknown --hardware " + strconv.Quote(*hwName))
	}
	rep := gateway.NewReplica(gateway.ReplicaOptions{Name: *name, Hardware: hw, TimeScale: *scale, Model: *model, MaxLoras: *maxLoras})
	srv, err := gateway.Serve(*listen, rep)
	if err != nil {
		return err
	}
	defer srv.Close()
	log.Printf("gpuroute-replica %s (%s, time scale %g) on %s", *name, hw.Name, *scale, srv.URL())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	return nil
}
