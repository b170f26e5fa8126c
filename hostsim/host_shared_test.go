package hostsim

import (
	"context"
	"testing"
)

// TestSharedRuntimeCompilesOnce: Hosts without a cache of their own share
// one runtime, in which given bytes are compiled once, and a Host's Close
// leaves the runtime to the others; a Host with a Probe has its own.
func TestSharedRuntimeCompilesOnce(t *testing.T) {
	ctx := context.Background()
	a, b := NewHost(Options{}), NewHost(Options{})
	wasm := guestWasm
	ma, err := a.Compile(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("Close of a Host on the shared runtime = %v", err)
	}
	mb, err := b.Compile(ctx, wasm)
	if err != nil {
		t.Fatalf("Compile after another Host closed = %v, want the shared runtime still open", err)
	}
	if ma.compiled != mb.compiled {
		t.Errorf("two Hosts compiled the same bytes into two modules, want one")
	}
	if own := NewHost(Options{Probe: NewGuestProbe(nil)}); own.rt == b.rt || !own.ownRuntime {
		t.Errorf("a Host with a Probe shares the process runtime, want its own")
	}
}
