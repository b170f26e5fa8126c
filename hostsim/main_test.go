package hostsim

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// guestWasm is testdata/guest built once per `go test` run.
var guestWasm []byte

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "hostsim-guest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "hostsim test: temp dir:", err)
		os.Exit(2)
	}
	out := filepath.Join(dir, "guest.wasm")
	cmd := exec.Command(goTool(), "build", "-buildmode=c-shared", "-o", out, "./testdata/guest")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if b, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "hostsim test: build guest: %v\n%s", err, b)
		os.Exit(2)
	}
	guestWasm, err = os.ReadFile(out)
	os.RemoveAll(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hostsim test: read guest:", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// goTool is the go command that runs these tests (on PATH under go test).
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "go"
}

// newGuestVM starts the conformance guest in a fresh Host without the
// configuration canary: the guest's scripts log their own effects, which a
// canary would repeat once per configuration (the canary's tests start the
// guest with startGuest).
func newGuestVM(t testing.TB, opts Options, vmID, vmConfig string) (*Host, *VM) {
	t.Helper()
	opts.NoCanary = true
	return startGuest(t, opts, vmID, vmConfig)
}

// startGuest starts the conformance guest in a fresh Host with opts as given.
func startGuest(t testing.TB, opts Options, vmID, vmConfig string) (*Host, *VM) {
	t.Helper()
	h := NewHost(opts)
	t.Cleanup(func() { h.Close() })
	mod, err := h.Compile(context.Background(), guestWasm)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := h.NewVM(context.Background(), mod, vmID, []byte(vmConfig))
	if err != nil {
		t.Fatal(err)
	}
	return h, vm
}

// results returns the outputs the guest logged for "<cb> <cmd> = <out>".
func results(h *Host, cb, cmd string) []string {
	prefix := cb + " " + cmd + " = "
	var out []string
	for _, e := range h.Logs() {
		if strings.HasPrefix(e.Message, prefix) {
			out = append(out, strings.TrimPrefix(e.Message, prefix))
		}
	}
	return out
}

// result returns the last output of cb/cmd, failing if there is none.
func result(t testing.TB, h *Host, cb, cmd string) string {
	t.Helper()
	r := results(h, cb, cmd)
	if len(r) == 0 {
		t.Fatalf("no %q result for %q in logs:\n%s", cmd, cb, dumpLogs(h))
	}
	return r[len(r)-1]
}

func dumpLogs(h *Host) string {
	var b strings.Builder
	for _, e := range h.Logs() {
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	return b.String()
}

func TestSmoke(t *testing.T) {
	h, vm := newGuestVM(t, Options{}, "vm", "vm_start: log 2 hello")
	root, err := vm.Configure("root", []byte("configure: tick 100; now\nrequest_headers: replace 0 x-a b; get 0 :path"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := root.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.RequestHeaders([][2]string{{":path", "/x"}, {"X-A", "c"}}, true)
	if err != nil || a != ActionContinue {
		t.Fatalf("RequestHeaders = %v, %v", a, err)
	}
	if err := s.Done(); err != nil {
		t.Fatal(err)
	}
	t.Log(s.RequestHeaderMap())
	t.Log(dumpLogs(h))
}
