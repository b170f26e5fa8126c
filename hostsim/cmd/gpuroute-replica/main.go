// Command gpuroute-replica serves one simulated OpenAI-compatible model
// server (hostsim/gateway.Replica): /v1/chat/completions, /v1/completions,
// /v1/messages (Anthropic Messages) and /v1/responses (OpenAI Responses),
// SSE when "stream" is true, /metrics in vLLM's format,
// and the endpoints routers call on vLLM and SGLang workers (/health,
// /v1/models, /get_model_info, /get_server_info, /get_load, /load).
//
//	go run ./hostsim/cmd/gpuroute-replica --listen 127.0.0.1:8001 --name a --time-scale 0.1
//	go run ./hostsim/cmd/gpuroute-replica --lora-modules sql-lora,chat-lora
package main

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"strings"
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
	model := fs.String("model", "", "base model name (any model name not in --lora-modules is served by it)")
	loras := fs.String("lora-modules", "", "comma-separated LoRA adapter names the replica serves")
	maxLoras := fs.Int("max-loras", 0, "adapters resident on the GPU at once (0: 4)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	hw, ok := scoring.LookupHardware(*hwName)
	if !ok {
		return errors.New("unknown --hardware " + strconv.Quote(*hwName))
	}
	var adapters []string
	if *loras != "" {
		adapters = strings.Split(*loras, ",")
	}
	rep := gateway.NewReplica(gateway.ReplicaOptions{Name: *name, Hardware: hw, TimeScale: *scale, Model: *model,
		Adapters: adapters, MaxLoras: *maxLoras})
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
