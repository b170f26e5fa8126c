package router

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/gpuroute/gpuroute/hostsim"
)

// The "wasm" leg: build/gpuroute.wasm, the module that ships, in hostsim.
// `make test` builds it first; run alone, the leg skips when it is missing.
func init() { legs["wasm"] = newWasmDriver }

// moduleBytes reads the module once per test binary.
var moduleBytes = sync.OnceValues(func() ([]byte, error) {
	path := os.Getenv("GPUROUTE_WASM")
	if path == "" {
		path = filepath.Join("..", "..", "build", "gpuroute.wasm")
	}
	return os.ReadFile(path)
})

// wasmHost starts a hostsim host with one VM of the module, or skips.
func wasmHost(t testing.TB, opts hostsim.Options) (*hostsim.Host, *hostsim.Module) {
	t.Helper()
	wasm, err := moduleBytes()
	if err != nil {
		t.Skipf("wasm leg skipped: %v (run `make wasm`)", err)
	}
	h := hostsim.NewHost(opts)
	t.Cleanup(func() { h.Close() })
	mod, err := h.Compile(context.Background(), wasm)
	if err != nil {
		t.Fatalf("Compile(gpuroute.wasm) = %v", err)
	}
	return h, mod
}

const (
	testVMID   = "gpuroute"
	testRootID = "gpuroute"
)

type wasmDriver struct {
	t  *testing.T
	h  *hostsim.Host
	vm *hostsim.VM
}

func newWasmDriver(t *testing.T) driver {
	h, mod := wasmHost(t, hostsim.Options{})
	vm, err := h.NewVM(context.Background(), mod, testVMID, nil)
	if err != nil {
		t.Fatalf("NewVM = %v", err)
	}
	return &wasmDriver{t: t, h: h, vm: vm}
}

func (d *wasmDriver) configure(cfg string) bool {
	_, err := d.vm.Configure(testRootID, []byte(cfg))
	return err == nil
}

func (d *wasmDriver) root() *hostsim.Root {
	r := d.vm.Root(testRootID)
	if r == nil {
		d.t.Fatal("no serving root: configure first")
	}
	return r
}

func (d *wasmDriver) request(hdrs [][2]string, body string) ([][2]string, types.Action, *localReply) {
	d.t.Helper()
	s, err := d.root().NewStream()
	if err != nil {
		d.t.Fatalf("NewStream = %v", err)
	}
	a, err := s.RequestHeaders(hdrs, body == "")
	if err != nil {
		d.t.Fatalf("RequestHeaders = %v", err)
	}
	if body != "" && s.LocalReply() == nil {
		if a, err = s.RequestBody([]byte(body), true); err != nil {
			d.t.Fatalf("RequestBody = %v", err)
		}
	}
	got := s.RequestHeaderMap()
	var local *localReply
	if lr := s.LocalReply(); lr != nil {
		local = &localReply{status: uint32(lr.Status), headers: lr.Headers, body: string(lr.Body)}
	}
	if err := s.Done(); err != nil {
		d.t.Fatalf("Done = %v", err)
	}
	return got, types.Action(a), local
}

func (d *wasmDriver) tick() {
	if err := d.root().Tick(); err != nil {
		d.t.Fatalf("Tick = %v", err)
	}
}

func (d *wasmDriver) tickPeriodMillis() uint32 {
	return uint32(d.root().TickPeriod() / time.Millisecond)
}

func (d *wasmDriver) sharedData(key string) ([]byte, uint32, bool) {
	return d.h.SharedData(testVMID, key)
}

func (d *wasmDriver) counter(name string) (uint64, bool) {
	m, ok := d.h.Metric(name)
	return uint64(m.Value), ok && m.Type == hostsim.MetricCounter
}

func (d *wasmDriver) errorLogs() []string {
	var out []string
	for _, e := range d.h.Logs() {
		if e.Level >= hostsim.LogError {
			out = append(out, e.Message)
		}
	}
	return out
}
