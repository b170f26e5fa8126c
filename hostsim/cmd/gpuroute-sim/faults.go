package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/gpuroute/gpuroute/hostsim/faults"
)

// faultsMain runs the reliability report when the arguments ask for it
// (--faults): every fault-injection scenario of hostsim/faults against the
// plugin module, printed as a table, then it exits (status 1 if a scenario
// failed). Without --faults it returns and the simulator runs as usual.
//
//	go run ./hostsim/cmd/gpuroute-sim --faults
//	go run ./hostsim/cmd/gpuroute-sim --faults --scenarios replica-crash,gc-pressure --gc-requests 100000
func faultsMain(args []string) {
	if !wantsFaults(args) {
		return
	}
	fs := flag.NewFlagSet("gpuroute-sim --faults", flag.ExitOnError)
	fs.Bool("faults", false, "run the fault-injection scenarios and print the reliability report")
	wasm := fs.String("wasm", "build/gpuroute.wasm", "plugin module to test")
	requests := fs.Int("faults-requests", 2000, "client requests per load scenario")
	gc := fs.Int("gc-requests", 1_000_000, "requests of the gc-pressure scenario")
	only := fs.String("scenarios", "", "comma-separated scenarios (default all): "+strings.Join(faults.Names(), ", "))
	_ = fs.Parse(args)
	b, err := os.ReadFile(*wasm)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpuroute-sim: --faults needs the module (make wasm):", err)
		os.Exit(1)
	}
	o := faults.Options{Wasm: b, Requests: *requests, GCRequests: *gc}
	if *only != "" {
		o.Only = strings.Split(*only, ",")
	}
	results := faults.Run(o)
	if err := faults.WriteTable(os.Stdout, results); err != nil {
		fmt.Fprintln(os.Stderr, "gpuroute-sim:", err)
		os.Exit(1)
	}
	for _, r := range results {
		if r.Err != nil {
			os.Exit(1)
		}
	}
	os.Exit(0)
}

// wantsFaults reports whether --faults (or -faults, =true) is among args.
func wantsFaults(args []string) bool {
	for _, a := range args {
		switch strings.TrimLeft(a, "-") {
		case "faults", "faults=true", "faults=1":
			return strings.HasPrefix(a, "-")
		}
	}
	return false
}
