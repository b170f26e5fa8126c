package router

import (
	"testing"
	"time"

	"github.com/gpuroute/gpuroute/plugin/shared"
)

// TestCanaryLeavesNoTrace: the configuration canary (the throwaway VM Envoy
// configures first and destroys without proxy_on_done) takes no worker id,
// joins no worker list, takes no lease and scrapes nothing; the worker's
// own first tick, firstTickMillis later, does all of it.
func TestCanaryLeavesNoTrace(t *testing.T) {
	f := newTestFleet(t, 1, 2, "")
	if got := f.h.Canaries(); got != 1 {
		t.Fatalf("Canaries() after one configuration = %d, want 1", got)
	}
	for _, key := range []string{shared.KeyWorkerSeq, shared.KeyRegistry, shared.KeyLease, shared.KeySnapshot} {
		if _, _, ok := f.h.SharedData(testVMID, key); ok {
			t.Errorf("shared data %q after configuration, before any tick: present, want absent", key)
		}
	}
	if n := f.replicas[0].count() + f.replicas[1].count(); n != 0 {
		t.Errorf("scrapes after configuration, before any tick = %d, want 0", n)
	}
	f.advance(firstTickMillis * time.Millisecond)
	if l := lease(t, f.h); l.Holder == 0 {
		t.Errorf("lease after the first tick = %+v, want held", l)
	}
	if n := f.replicas[0].count() + f.replicas[1].count(); n != 2 {
		t.Errorf("scrapes after the first tick = %d, want 2", n)
	}
	if _, _, ok := f.h.SharedData(testVMID, shared.KeyRegistry); !ok {
		t.Errorf("worker list after the first tick: absent, want the worker")
	}
}
