// Command wasmexec runs a GOOS=wasip1 GOARCH=wasm program, typically a test
// binary, in wazero with its full WASI (wasi_snapshot_preview1), so any
// package's tests and benchmarks can run under the same engine that runs the
// plugin in hostsim:
//
//	go build -o build/wasmexec ./hostsim/cmd/wasmexec
//	GOOS=wasip1 GOARCH=wasm go test -exec "$PWD/build/wasmexec" -run '^$' -bench . ./scoring
//
// It is a test-binary runner, not the Envoy emulation: the guest gets real
// clocks, sleeps, random numbers, its arguments and the environment, and the
// module directory (where go.mod is, found from the working directory) and
// the temporary directory mounted read-write at their own paths, so
// testdata/ and t.TempDir work. The exit code is the guest's.
//
// A test binary of a plugin package imports the proxy-wasm host functions
// (module "env"). They answer as a host with nothing in it: every
// proxy_get_* NotFound, every other call Ok, nothing written to the guest's
// memory. That is enough for benchmarks of code that only counts stats or
// looks for shared data in passing (plugin/router's BenchmarkDecision64);
// tests that need a host run in hostsim. node.mjs does the same under V8,
// the engine Envoy runs modules in by default.
//
// Compiled code is cached in the user cache directory (gpuroute-wasmexec),
// so a test binary that did not change starts fast the second time.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"
)

// cacheDirName is the compilation cache's directory under os.UserCacheDir.
const cacheDirName = "gpuroute-wasmexec"

func main() {
	if len(os.Args) < 2 {
		os.Stderr.WriteString("usage: wasmexec prog.wasm [args...]\n")
		os.Exit(2)
	}
	code, err := run(os.Args[1], os.Args[2:])
	if err != nil {
		os.Stderr.WriteString("wasmexec: " + err.Error() + "\n")
		os.Exit(1)
	}
	os.Exit(int(code))
}

// run executes the wasip1 program at path with args and returns its exit code.
func run(path string, args []string) (uint32, error) {
	ctx := context.Background()
	bin, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	cfg := wazero.NewRuntimeConfigCompiler()
	if dir, err := os.UserCacheDir(); err == nil {
		if cache, err := wazero.NewCompilationCacheWithDir(filepath.Join(dir, cacheDirName)); err == nil {
			cfg = cfg.WithCompilationCache(cache)
		}
	}
	rt := wazero.NewRuntimeWithConfig(ctx, cfg)
	defer rt.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	compiled, err := rt.CompileModule(ctx, bin)
	if err != nil {
		return 0, err
	}
	if err := instantiateEmptyHost(ctx, rt, compiled); err != nil {
		return 0, err
	}

	wd, err := os.Getwd()
	if err != nil {
		return 0, err
	}
	tmp := os.TempDir()
	fs := wazero.NewFSConfig().WithDirMount(tmp, tmp)
	if root := moduleRoot(wd); root != "" {
		fs = fs.WithDirMount(root, root)
	} else {
		fs = fs.WithDirMount(wd, wd)
	}
	mc := wazero.NewModuleConfig().
		WithName("").
		WithArgs(append([]string{filepath.Base(path)}, args...)...).
		WithStdin(os.Stdin).WithStdout(os.Stdout).WithStderr(os.Stderr).
		WithFSConfig(fs).
		// Real time and randomness: benchmarks measure with the clock, tests
		// sleep and seed from it (wazero's defaults are deterministic fakes).
		WithSysWalltime().WithSysNanotime().WithSysNanosleep().
		WithRandSource(rand.Reader)
	for _, kv := range os.Environ() {
		if k, v, ok := cut(kv); ok && k != "PWD" && k != "TMPDIR" {
			mc = mc.WithEnv(k, v)
		}
	}
	// Go's wasip1 runtime takes its working directory from PWD.
	mc = mc.WithEnv("PWD", wd).WithEnv("TMPDIR", tmp)

	_, err = rt.InstantiateModule(ctx, compiled, mc)
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), nil
	}
	return 0, err
}

// Results of the empty host's proxy-wasm functions (ABI v0.2.1 WasmResult).
const (
	resultOk       = 0
	resultNotFound = 1
)

// hostModule is the module name of the proxy-wasm host functions.
const hostModule = "env"

// instantiateEmptyHost instantiates, when compiled imports proxy-wasm host
// functions, a host module of that name whose functions have the imported
// signatures and answer as a host with nothing in it (see the package
// comment).
func instantiateEmptyHost(ctx context.Context, rt wazero.Runtime, compiled wazero.CompiledModule) error {
	b := rt.NewHostModuleBuilder(hostModule)
	n := 0
	for _, f := range compiled.ImportedFunctions() {
		module, name, _ := f.Import()
		if module != hostModule {
			continue
		}
		answer := uint64(resultOk)
		if strings.HasPrefix(name, "proxy_get_") {
			answer = resultNotFound
		}
		results := f.ResultTypes()
		b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(_ context.Context, _ api.Module, stack []uint64) {
			if len(results) > 0 {
				stack[0] = answer
			}
		}), f.ParamTypes(), results).Export(name)
		n++
	}
	if n == 0 {
		return nil
	}
	_, err := b.Instantiate(ctx)
	return err
}

// moduleRoot returns the nearest directory at or above dir holding go.mod, or "".
func moduleRoot(dir string) string {
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// cut splits an environment entry at its first '='.
func cut(kv string) (key, value string, ok bool) {
	for i := 1; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return "", "", false
}
