package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gpuroute/gpuroute/hostsim"
)

func TestCut(t *testing.T) {
	for _, tc := range []struct {
		name, in, key, value string
		ok                   bool
	}{
		{"plain", "A=b", "A", "b", true},
		{"empty value", "A=", "A", "", true},
		{"value with =", "A=b=c", "A", "b=c", true},
		{"no =", "A", "", "", false},
		{"leading = (Windows drive variables)", "=C:=C:\\", "=C:", "C:\\", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, v, ok := cut(tc.in)
			if k != tc.key || v != tc.value || ok != tc.ok {
				t.Errorf("cut(%q) = %q, %q, %v, want %q, %q, %v", tc.in, k, v, ok, tc.key, tc.value, tc.ok)
			}
		})
	}
}

func TestModuleRoot(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := moduleRoot(wd)
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Errorf("moduleRoot(%q) = %q, which holds no go.mod", wd, root)
	}
	if got := moduleRoot("/"); got != "" && got != "/" {
		t.Errorf("moduleRoot(/) = %q, want \"\" (or / if it holds a go.mod)", got)
	}
}

// buildProbe builds the probe guest for wasip1 and returns its path.
func buildProbe(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds a wasip1 program")
	}
	out := filepath.Join(t.TempDir(), "probe.wasm")
	cmd := exec.Command("go", "build", "-o", out, "./testdata/probe")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build probe: %v\n%s", err, b)
	}
	t.Setenv("WASMEXEC_PROBE", "yes")
	return out
}

// TestRun runs the probe guest: arguments, environment, the module
// directory, a temporary directory, real clocks and the empty proxy-wasm
// host reach it, and its exit code comes back.
func TestRun(t *testing.T) {
	probe := buildProbe(t)
	for _, want := range []uint32{0, 3} {
		code, err := run(probe, []string{string(rune('0' + want))})
		if err != nil || code != want {
			t.Errorf("run(probe %d) = %d, %v, want %d, nil", want, code, err, want)
		}
	}
}

// TestNodeRun runs the probe guest under node.mjs (V8), which must give it
// what wasmexec gives. Skipped without Node.js 20 or later.
func TestNodeRun(t *testing.T) {
	node, err := hostsim.NodeWASI()
	if err != nil {
		t.Skip(err)
	}
	probe := buildProbe(t)
	for _, want := range []int{0, 3} {
		out, err := exec.Command(node, "node.mjs", probe, string(rune('0'+want))).CombinedOutput()
		code := 0
		if exit, ok := err.(*exec.ExitError); ok {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatalf("node node.mjs probe: %v\n%s", err, out)
		}
		if code != want {
			t.Errorf("node node.mjs probe %d exited %d, want %d\n%s", want, code, want, out)
		}
	}
}
