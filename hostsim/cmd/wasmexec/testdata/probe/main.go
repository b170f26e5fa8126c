// Command probe is wasmexec's test guest: it checks what a test binary
// relies on (arguments, environment, working directory, the module's files,
// a writable temporary directory, a moving clock, the empty proxy-wasm
// host) and exits with the code given as its first argument.
package main

import (
	"os"
	"path/filepath"
	"strconv"
	"time"
)

func main() {
	fail := func(msg string) {
		os.Stderr.WriteString("probe: " + msg + "\n")
		os.Exit(100)
	}
	if len(os.Args) != 2 {
		fail("want one argument, got " + strconv.Itoa(len(os.Args)-1))
	}
	if os.Getenv("WASMEXEC_PROBE") != "yes" {
		fail("environment not passed")
	}
	if _, err := os.ReadFile(filepath.Join("testdata", "probe", "main.go")); err != nil {
		fail("module files not mounted at the working directory: " + err.Error())
	}
	tmp, err := os.MkdirTemp("", "probe")
	if err != nil {
		fail("temporary directory: " + err.Error())
	}
	os.Remove(tmp)
	t0 := time.Now()
	time.Sleep(time.Millisecond)
	if time.Since(t0) < time.Millisecond {
		fail("clock does not move")
	}
	if msg := checkHost(); msg != "" {
		fail(msg)
	}
	code, _ := strconv.Atoi(os.Args[1])
	os.Exit(code)
}
