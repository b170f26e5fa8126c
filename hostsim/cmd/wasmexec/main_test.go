package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
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

// TestRun builds the probe guest for wasip1 and runs it: arguments,
// environment, the module directory, a temporary directory and real clocks
// reach it, and its exit code comes back.
func TestRun(t *testing.T) {
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
	for _, want := range []uint32{0, 3} {
		code, err := run(out, []string{string(rune('0' + want))})
		if err != nil || code != want {
			t.Errorf("run(probe %d) = %d, %v, want %d, nil", want, code, err, want)
		}
	}
}
