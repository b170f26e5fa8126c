package proxy

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuroute/gpuroute/hostsim"
)

// The recover at the ABI boundary (exports_wasm.go), proven in hostsim: a
// test module on this binding (plugin/internal/panicplugin) panics in the
// callback its configuration names, and the VM must not trap; the panic is
// logged with the callback's export name, counted in PanicsMetricName, and
// the callback returns its documented default.

// panicModule builds the test module once per test binary, in a temporary
// directory removed once the bytes are read (Go's build cache makes the
// next run's build cheap).
var panicModule = sync.OnceValues(func() ([]byte, error) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "panicplugin")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "panic.wasm")
	cmd := exec.Command(gobin, "build", "-buildmode=c-shared", "-o", out, "../internal/panicplugin")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, errors.New("build panicplugin: " + err.Error() + ": " + string(b))
	}
	return os.ReadFile(out)
})

// panicHost compiles the test module in a fresh host (fresh stats).
func panicHost(t *testing.T) (*hostsim.Host, *hostsim.Module) {
	t.Helper()
	wasm, err := panicModule()
	if err != nil {
		t.Skipf("cannot build the panic test module: %v", err)
	}
	h := hostsim.NewHost(hostsim.Options{})
	t.Cleanup(func() { h.Close() })
	h.AddCluster("panic-upstream", hostsim.ClusterFunc(func(*hostsim.CallRequest) hostsim.CallReply {
		return hostsim.CallReply{Body: []byte("ok"), Latency: time.Millisecond}
	}))
	mod, err := h.Compile(context.Background(), wasm)
	if err != nil {
		t.Fatalf("Compile(panicplugin) = %v", err)
	}
	return h, mod
}

var panicHeaders = [][2]string{
	{":method", "POST"}, {":path", "/v1/completions"}, {":authority", "gw"},
	{"X-Gateway-Destination-Endpoint", "6.6.6.6:1"},
}

// drive runs a whole stream under root r and reports the action of every
// phase (request headers, body, trailers, response headers, body, trailers).
func drive(t *testing.T, r *hostsim.Root) (*hostsim.Stream, []hostsim.Action) {
	t.Helper()
	s, err := r.NewStream()
	if err != nil {
		t.Fatalf("NewStream = %v", err)
	}
	var acts []hostsim.Action
	step := func(a hostsim.Action, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("stream phase %d = %v", len(acts), err)
		}
		acts = append(acts, a)
	}
	step(s.RequestHeaders(panicHeaders, false))
	step(s.RequestBody([]byte(`{"prompt":"x"}`), false))
	step(s.RequestTrailers([][2]string{{"x-t", "1"}}))
	step(s.ResponseHeaders([][2]string{{":status", "200"}}, false))
	step(s.ResponseBody([]byte("data: x\n\n"), false))
	step(s.ResponseTrailers([][2]string{{"x-t", "1"}}))
	if err := s.Done(); err != nil {
		t.Fatalf("Done = %v", err)
	}
	return s, acts
}

func TestPanicAtABIBoundary(t *testing.T) {
	tests := []struct {
		name   string
		export string // the export whose recover must log and count
		// run injects the panic and checks the callback's own fallback.
		run func(t *testing.T, h *hostsim.Host, mod *hostsim.Module)
	}{
		{name: "vm_start", export: "proxy_on_vm_start", run: func(t *testing.T, h *hostsim.Host, mod *hostsim.Module) {
			// Fallback: false. Envoy then refuses the VM; no trap.
			_, err := h.NewVM(context.Background(), mod, "p", []byte("vm_start"))
			if err == nil || errors.Is(err, hostsim.ErrVMFailed) || !strings.Contains(err.Error(), "returned false") {
				t.Errorf("NewVM(vm_start) = %v, want proxy_on_vm_start to return false without a trap", err)
			}
		}},
		{name: "configure", export: "proxy_on_configure", run: func(t *testing.T, h *hostsim.Host, mod *hostsim.Module) {
			vm := newPanicVM(t, h, mod)
			ok := configurePanic(t, vm, "none")
			// Fallback: false, the configuration is refused, the previous root serves.
			if _, err := vm.Configure("r", []byte("configure")); err == nil || errors.Is(err, hostsim.ErrVMFailed) {
				t.Errorf("Configure(configure) = %v, want refused without a trap", err)
			}
			if vm.Root("r") != ok {
				t.Errorf("after a panicking configure the serving root changed; want the previous one")
			}
			driveContinue(t, ok)
		}},
		{name: "context_create", export: "proxy_on_context_create", run: func(t *testing.T, h *hostsim.Host, mod *hostsim.Module) {
			// Fallback: no stream state, so every stream callback continues.
			r := configurePanic(t, newPanicVM(t, h, mod), "context_create")
			driveContinue(t, r)
		}},
		{name: "tick", export: "proxy_on_tick", run: func(t *testing.T, h *hostsim.Host, mod *hostsim.Module) {
			r := configurePanic(t, newPanicVM(t, h, mod), "tick")
			if err := h.Advance(350 * time.Millisecond); err != nil {
				t.Fatalf("Advance over 3 panicking ticks = %v", err)
			}
			if m, _ := h.Metric(PanicsMetricName); m.Value != 3 {
				t.Errorf("%s after 3 ticks = %d, want 3 (the tick keeps firing)", PanicsMetricName, m.Value)
			}
			driveContinue(t, r)
		}},
		{name: "http_call_response", export: "proxy_on_http_call_response", run: func(t *testing.T, h *hostsim.Host, mod *hostsim.Module) {
			r := configurePanic(t, newPanicVM(t, h, mod), "http_call_response")
			if err := h.Advance(10 * time.Millisecond); err != nil {
				t.Fatalf("Advance to the call's response = %v", err)
			}
			driveContinue(t, r)
		}},
		{name: "request_headers", export: "proxy_on_request_headers", run: streamPanic("request_headers", 0)},
		{name: "request_body runtime error", export: "proxy_on_request_body", run: streamPanic("request_body", 1)},
		{name: "request_trailers", export: "proxy_on_request_trailers", run: streamPanic("request_trailers", 2)},
		{name: "response_headers", export: "proxy_on_response_headers", run: streamPanic("response_headers", 3)},
		{name: "response_body runtime error", export: "proxy_on_response_body", run: streamPanic("response_body", 4)},
		{name: "response_trailers", export: "proxy_on_response_trailers", run: streamPanic("response_trailers", 5)},
		{name: "log", export: "proxy_on_log", run: streamPanic("log", -1)},
		{name: "done", export: "proxy_on_done", run: func(t *testing.T, h *hostsim.Host, mod *hostsim.Module) {
			vm := newPanicVM(t, h, mod)
			old := configurePanic(t, vm, "done")
			// A new configuration retires the old root: its on_done panics;
			// fallback true, so the host can still delete it.
			next := configurePanic(t, vm, "none")
			if !old.Deleted() {
				t.Errorf("root whose proxy_on_done panicked was not deleted; want the fallback true to let the host reclaim it")
			}
			driveContinue(t, next)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, mod := panicHost(t)
			tt.run(t, h, mod)
			for _, vmErr := range vmErrors(h) {
				t.Errorf("a VM failed: %v", vmErr)
			}
			var logged bool
			for _, e := range h.Logs() {
				if e.Level == hostsim.LogCritical && strings.Contains(e.Message, "proxy: panic in "+tt.export+": ") {
					logged = true
				}
			}
			if !logged {
				t.Errorf("no critical log naming %s; logs: %v", tt.export, h.Logs())
			}
			if m, ok := h.Metric(PanicsMetricName); !ok || m.Value < 1 || m.Type != hostsim.MetricCounter {
				t.Errorf("Metric(%s) = %+v, %v; want a counter ≥ 1", PanicsMetricName, m, ok)
			}
		})
	}
}

// TestPanicOnDeleteHasNoPluginCode documents the one export the table
// leaves out: proxy_on_delete runs no plugin code (the binding forgets the
// context), so there is nothing to inject; it must still be safe after a
// stream whose every callback panicked.
func TestPanicOnDeleteHasNoPluginCode(t *testing.T) {
	h, mod := panicHost(t)
	r := configurePanic(t, newPanicVM(t, h, mod), "context_create")
	drive(t, r)
	if errs := vmErrors(h); len(errs) > 0 {
		t.Errorf("VM failed: %v", errs)
	}
}

// livePanicVMs tracks the VMs a test made, to check none trapped.
var livePanicVMs sync.Map // *hostsim.Host -> []*hostsim.VM

func newPanicVM(t *testing.T, h *hostsim.Host, mod *hostsim.Module) *hostsim.VM {
	t.Helper()
	vm, err := h.NewVM(context.Background(), mod, "p", nil)
	if err != nil {
		t.Fatalf("NewVM = %v", err)
	}
	v, _ := livePanicVMs.LoadOrStore(h, &[]*hostsim.VM{})
	list := v.(*[]*hostsim.VM)
	*list = append(*list, vm)
	return vm
}

func vmErrors(h *hostsim.Host) []error {
	v, ok := livePanicVMs.Load(h)
	if !ok {
		return nil
	}
	var out []error
	for _, vm := range *v.(*[]*hostsim.VM) {
		if err := vm.Err(); err != nil {
			out = append(out, err)
		}
	}
	return out
}

func configurePanic(t *testing.T, vm *hostsim.VM, mode string) *hostsim.Root {
	t.Helper()
	r, err := vm.Configure("r", []byte(mode))
	if err != nil {
		t.Fatalf("Configure(%s) = %v", mode, err)
	}
	return r
}

// streamPanic injects a panic in one stream callback: phase indexes the
// action of drive that must be the fallback Continue (-1: proxy_on_log).
func streamPanic(mode string, phase int) func(t *testing.T, h *hostsim.Host, mod *hostsim.Module) {
	return func(t *testing.T, h *hostsim.Host, mod *hostsim.Module) {
		r := configurePanic(t, newPanicVM(t, h, mod), mode)
		s, acts := drive(t, r)
		// Fallback Continue: the stream proceeds through every phase.
		wantAllContinue(t, s, acts)
		if phase >= 0 {
			if m, _ := h.Metric(PanicsMetricName); m.Value != 1 {
				t.Errorf("%s = %d after one panicking %s, want 1", PanicsMetricName, m.Value, mode)
			}
		}
		// The destination header a client sent was removed before the
		// panic and stays removed (the router's rule, stream.go).
		for _, kv := range s.RequestHeaderMap() {
			if kv[0] == "x-gateway-destination-endpoint" {
				t.Errorf("client-sent %s = %q survived a panic in %s", kv[0], kv[1], mode)
			}
		}
		// The VM keeps serving: the next stream runs too.
		driveContinue(t, r)
	}
}

func wantAllContinue(t *testing.T, s *hostsim.Stream, acts []hostsim.Action) {
	t.Helper()
	for i, a := range acts {
		if a != hostsim.ActionContinue {
			t.Errorf("phase %d action = %v, want Continue", i, a)
		}
	}
	if s.LocalReply() != nil || s.Closed(hostsim.StreamRequest) || s.Closed(hostsim.StreamResponse) {
		t.Errorf("stream answered locally or closed; want it to proceed")
	}
}

// driveContinue runs a whole stream under r and wants Continue everywhere.
func driveContinue(t *testing.T, r *hostsim.Root) {
	t.Helper()
	s, acts := drive(t, r)
	wantAllContinue(t, s, acts)
}
