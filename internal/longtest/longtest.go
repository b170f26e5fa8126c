// Package longtest tells a test whether to run its long form. make test
// runs every test in its short form; make test-long (which CI runs too)
// sets GPUROUTE_LONG=1 and runs them all again with the long ones: GC
// stress at full size, fault scenarios at full size, the request path
// under V8 through Node.js.
//
//	if !longtest.Enabled() {
//		n = 500
//	}
//
// testing.Short is not used because make test passes no -short: the short
// form is the default so that a plain go test is fast.
package longtest

import (
	"os"
	"testing"
)

// EnvVar is the environment variable that asks for the long tests.
const EnvVar = "GPUROUTE_LONG"

// Enabled reports whether GPUROUTE_LONG=1 asks for the long tests.
func Enabled() bool { return os.Getenv(EnvVar) == "1" }

// Skip skips t unless the long tests run.
func Skip(t testing.TB) {
	t.Helper()
	if !Enabled() {
		t.Skip("long test: run it with " + EnvVar + "=1 (make test-long)")
	}
}
