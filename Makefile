# gpuroute — build, test and demo targets. `make` alone lists them.

GO        ?= go
WASM      := build/gpuroute.wasm
FUZZTIME  ?= 30s
BENCHTIME ?= 1s
# Test timeout for the default run: CI has 2 cores and must finish well under 10 minutes.
TESTTIMEOUT ?= 8m
LONGTIMEOUT ?= 30m
# staticcheck for `make lint` (native build only: it cannot see //go:wasmexport roots, so the
# wasip1 build's exports would all look unused).
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

.DEFAULT_GOAL := help
.PHONY: help wasm test test-long demo bench fuzz lint clean e2e e2e-browser load-bench peers-bench

help: ## list targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-8s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

wasm: $(WASM) ## build the plugin module (build/gpuroute.wasm)

# Always rebuilt through go's own cache: it knows the dependency graph better than make.
$(WASM): FORCE
	@mkdir -p build
	GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -trimpath -o $@ ./plugin

.PHONY: FORCE
FORCE:

# go test's own vet pass is off: it doubled the run, and `make lint` (first in .ci/run) vets
# everything, both targets.
# go test starts packages in the order it is given them, -p (GOMAXPROCS) at a time, so the
# packages whose tests run longest come first: given in import-path order, the longest
# (plugin/router) starts last and runs alone while the other core idles.
TESTFIRST := ./plugin/router ./hostsim/fleetsim ./hostsim ./hostsim/faults ./hostsim/gateway
test: wasm ## build the module, then run every test (both legs, fuzz seeds), and scoring's again under wasip1
	GPUROUTE_WASM=$(CURDIR)/$(WASM) $(GO) test -count=1 -vet=off -timeout $(TESTTIMEOUT) $(TESTFIRST) ./...
	$(GO) build -o $(WASMEXEC) ./hostsim/cmd/wasmexec
	GOOS=wasip1 GOARCH=wasm $(GO) test -count=1 -vet=off -exec $(CURDIR)/$(WASMEXEC) ./scoring/...

test-long: wasm ## every test again with the long ones (GPUROUTE_LONG=1: full-size stress and fault scenarios, V8 via node)
	GPUROUTE_LONG=1 GPUROUTE_WASM=$(CURDIR)/$(WASM) $(GO) test -count=1 -timeout $(LONGTIMEOUT) ./...

demo: wasm ## build the module and race it against peer routers on a simulated GPU fleet (build/report.html)
	$(GO) run ./hostsim/cmd/gpuroute-sim --wasm $(WASM)

e2e: wasm ## gateway end to end: simulated replicas, the local gateway, net/http and the openai npm client (node required)
	GPUROUTE_WASM=$(CURDIR)/$(WASM) GPUROUTE_E2E_REQUIRE_NODE=1 $(GO) test -count=1 -run '^TestE2E' -v ./hostsim/gateway/

# The fleet page in headless Chromium: Debian's chromium (installed when
# /usr/bin/chromium is absent; needs root, as CI runs) driven by playwright-core
# from npm, never a downloaded browser. Not part of `make test`: it installs.
CHROMIUM ?= /usr/bin/chromium
e2e-browser: wasm ## the gateway's fleet page in headless Chromium under load, with a screenshot check (installs chromium, node required)
	@test -x $(CHROMIUM) || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }
	GPUROUTE_WASM=$(CURDIR)/$(WASM) GPUROUTE_E2E_BROWSER=1 GPUROUTE_E2E_SCREENSHOT=$(CURDIR)/build/fleet.png $(GO) test -count=1 -run '^TestE2EBrowser' -v ./hostsim/gateway/

# The load generator (hostsim/cmd/gpuroute-load) over real HTTP: the local
# gateway running the module against round-robin and least-request proxies
# on the same simulated replicas, two runs each, fresh replicas per run. In
# real time: the plugin prices its costs in real seconds, so replicas run
# faster than the modelled GPUs (--time-scale below 1) mislead it.
# The gateway runs as its own process, as the peers do, not inside the bench's.
LOAD_BENCH_ARGS ?= --workload few-prefixes,shared-prefix --runs 2 --time-scale 1
GATEWAY_BIN     := build/gpuroute-gateway
BENCH_GATEWAY   := --gateway-command '$(GATEWAY_BIN) --listen 127.0.0.1:{port} --wasm $(WASM) --workers 2 --plugin-config {config} --fleet-path -'
$(GATEWAY_BIN): FORCE
	$(GO) build -o $@ ./hostsim/cmd/gpuroute-gateway
load-bench: wasm $(GATEWAY_BIN) ## gateway vs round-robin and least-request over real HTTP (build/load-bench.*)
	$(GO) run ./hostsim/cmd/gpuroute-load bench $(LOAD_BENCH_ARGS) $(BENCH_GATEWAY) --json build/load-bench.json --out build/load-bench.txt

# The real peer routers from PyPI (pinned in hostsim/peersbench/requirements.txt,
# installed into build/peers-venv) beside gpuroute's gateway and the two
# reference proxies, in front of the same simulated replicas.
PEERS_VENV   := build/peers-venv
PEERS_REQ    := hostsim/peersbench/requirements.txt
# The first candidate that runs and is 3.12 or newer: a pyenv shim for a
# version that is installed but not selected is on PATH and fails.
PEERS_PYTHON ?= $(firstword $(foreach p,$(shell command -v python3.13 python3.12 python3) $(wildcard $(HOME)/.pyenv/versions/3.1[23]*/bin/python3),$(shell $(p) -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1 && echo $(p))))
$(PEERS_VENV)/.installed: $(PEERS_REQ)
	@test -n "$(PEERS_PYTHON)" || { echo "peers-bench needs Python >= 3.12 (set PEERS_PYTHON)"; exit 1; }
	$(PEERS_PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/pip install -q -r $(PEERS_REQ)
	touch $@

peers-bench: wasm $(GATEWAY_BIN) $(PEERS_VENV)/.installed ## SGLang's and vLLM's routers from PyPI beside gpuroute on the same replicas (opt-in; build/peers-bench.*)
	@$(PEERS_VENV)/bin/pip freeze | grep -E '^(sglang-router|vllm-router|inference-perf)==' > build/peers-bench.versions; cat build/peers-bench.versions
	$(GO) run ./hostsim/cmd/gpuroute-load bench $(LOAD_BENCH_ARGS) $(BENCH_GATEWAY) --json build/peers-bench.json --out build/peers-bench.txt \
	  --peer 'sglang=$(PEERS_VENV)/bin/python -m sglang_router.launch_router --host 127.0.0.1 --port {port} --worker-startup-check-interval 1 --worker-urls {workers}' \
	  --peer 'vllm-router=$(PEERS_VENV)/bin/vllm-router --host 127.0.0.1 --port {port} --worker-startup-check-interval 1 --worker-urls {workers}'

# Its own module (controller/e2e): a kube-apiserver built from k8s.io/kubernetes
# and an embedded etcd, far too long to build for make test on a cold cache.
.PHONY: e2e-kube
e2e-kube: ## gpuroute-controller against a real kube-apiserver and etcd, the example manifests applied (opt-in)
	cd controller/e2e && $(GO) test -count=1 -timeout 30m -v .

bench: wasm ## run benchmarks (opt-in; not part of make test)
	GPUROUTE_WASM=$(CURDIR)/$(WASM) $(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./...

# The scoring benchmarks natively, then as a wasip1 test binary under wazero's
# compiler (the engine hostsim runs the plugin in) through hostsim/cmd/wasmexec,
# a `go test -exec` runner with full WASI; compare the two ns/op columns.
WASMEXEC := build/wasmexec
.PHONY: bench-wasm
bench-wasm: ## scoring benchmarks natively and under wazero (wasip1), to compare
	@mkdir -p build
	$(GO) build -o $(WASMEXEC) ./hostsim/cmd/wasmexec
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./scoring
	GOOS=wasip1 GOARCH=wasm $(GO) test -exec $(CURDIR)/$(WASMEXEC) -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./scoring

# The decision's benchmarks (the whole decision on a 32 KB body, Pick, the prompt
# memo, the body parse, a streamed token event) natively, under wazero and under
# V8, the engine Envoy runs modules in by default (Node.js, through
# hostsim/cmd/wasmexec/node.mjs); compare the three ns/op columns.
ENGINE_BENCH := -run '^$$' -bench 'Decision64$$|PickBase64$$|MemoReplay32KB$$|ParseTextRouter|StreamCounterEvent$$' -benchmem -benchtime $(BENCHTIME)
ENGINE_PKGS := ./scoring ./plugin/openai ./plugin/router
.PHONY: bench-engines
bench-engines: ## the decision's benchmarks natively, under wazero and under V8 (node required)
	@mkdir -p build
	$(GO) build -o $(WASMEXEC) ./hostsim/cmd/wasmexec
	$(GO) test $(ENGINE_BENCH) $(ENGINE_PKGS)
	GOOS=wasip1 GOARCH=wasm $(GO) test -exec $(CURDIR)/$(WASMEXEC) $(ENGINE_BENCH) $(ENGINE_PKGS)
	GOOS=wasip1 GOARCH=wasm $(GO) test -timeout 0 -exec "node --no-liftoff $(CURDIR)/hostsim/cmd/wasmexec/node.mjs" $(ENGINE_BENCH) $(ENGINE_PKGS)

# BenchmarkRequestPathGuest64's scenario with the module under V8 (node
# --no-liftoff, TurboFan only as in Envoy's V8) through a benchmark host in
# JavaScript; prints one JSON line of per-request percentiles.
.PHONY: bench-v8
bench-v8: wasm ## the whole request path under V8 (node required), as BenchmarkRequestPathGuest64 runs it under wazero
	node --no-liftoff hostsim/v8/requestpath.mjs $(WASM) 20000

# docs/performance.md "Benchmarks": the request path in hostsim, and the
# decision's benchmarks natively and under wazero, PERF_COUNT runs each (the
# request path 20,000 requests a run: its percentiles need them), as
# tables by hostsim/cmd/benchtab (build/perf/tables.md; the raw output
# beside it).
PERF_DIR   := build/perf
PERF_COUNT ?= 3
# The request path's per-request percentiles the tables show (benchtab -metrics).
PERF_METRICS := min-p50-µs,min-p99-µs,rest-min-p99-µs,guest-p50-µs,guest-p99-µs,ref-p50-µs,ref-p99-µs,held-extra-µs
PERF_PATH  := -run '^$$' -bench 'RequestPath(Replay64|Guest64|Guest64W8)$$|HeldRequest$$' -benchmem -benchtime 20000x -count $(PERF_COUNT)
PERF_PKGS  := $(ENGINE_PKGS) ./scoring/prefix
.PHONY: perf-tables
perf-tables: wasm ## the benchmark tables of docs/performance.md from a fresh run (build/perf/tables.md)
	@mkdir -p $(PERF_DIR)
	$(GO) build -o $(WASMEXEC) ./hostsim/cmd/wasmexec
	GPUROUTE_WASM=$(CURDIR)/$(WASM) $(GO) test $(PERF_PATH) ./plugin/router > $(PERF_DIR)/request-path.txt
	$(GO) test $(ENGINE_BENCH) -count $(PERF_COUNT) $(PERF_PKGS) > $(PERF_DIR)/native.txt
	GOOS=wasip1 GOARCH=wasm $(GO) test -exec $(CURDIR)/$(WASMEXEC) $(ENGINE_BENCH) -count $(PERF_COUNT) $(PERF_PKGS) > $(PERF_DIR)/wazero.txt
	$(GO) run ./hostsim/cmd/benchtab -metrics $(PERF_METRICS) wazero=$(PERF_DIR)/request-path.txt > $(PERF_DIR)/tables.md
	$(GO) run ./hostsim/cmd/benchtab -metrics - native=$(PERF_DIR)/native.txt wazero=$(PERF_DIR)/wazero.txt >> $(PERF_DIR)/tables.md
	@echo "wrote $(PERF_DIR)/tables.md"

fuzz: ## run every fuzz target for FUZZTIME each (opt-in)
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

lint: ## gofmt, go vet (native and wasip1), the wasip1 build of scoring, staticcheck (native)
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	GOOS=wasip1 GOARCH=wasm $(GO) vet ./scoring/... ./plugin/...
	GOOS=wasip1 GOARCH=wasm $(GO) build ./scoring/...
	$(GO) run $(STATICCHECK) -checks 'all,-ST1000,-ST1003,-ST1008,-S1016' ./...

# Istio WasmPlugin image: an OCI image layout in build/oci (compat variant of
# the Wasm image spec; OCI_VARIANT=oci for the two-layer variant). Push it with
# e.g. `crane push build/oci REGISTRY/gpuroute:TAG`. See examples/istio/README.md.
OCI_DIR     ?= build/oci
OCI_REF     ?= gpuroute:dev
OCI_VARIANT ?= compat
.PHONY: oci
oci: wasm ## package build/gpuroute.wasm as an OCI image layout in build/oci (Istio WasmPlugin)
	$(GO) run ./examples/cmd/gpuroute-oci -wasm $(WASM) -out $(OCI_DIR) -ref $(OCI_REF) -variant $(OCI_VARIANT)

clean: ## remove build outputs
	rm -rf build
