package router

import (
	"testing"

	"github.com/gpuroute/gpuroute/plugin/config"
	"github.com/gpuroute/gpuroute/plugin/shared"
	"github.com/gpuroute/gpuroute/scoring"
)

// TestSnapshotAdapterTiers: an adapter the replica lists as running is on
// its GPU; one listed only as waiting has requests queued for a GPU slot,
// so the decision must not price it as loaded.
func TestSnapshotAdapterTiers(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"replicas":[{"name":"a","address":"10.0.0.1:8000","adapter_slots":1}]}`))
	if err != nil {
		t.Fatalf("config.Parse = %v", err)
	}
	r := &root{id: 1, vm: &vm{}}
	if err := r.setup(cfg, nil); err != nil {
		t.Fatalf("setup = %v", err)
	}
	r.scrape.snap.Replicas[0].Adapters = []shared.AdapterState{{Name: "sql"}, {Name: "chat", Waiting: true}}
	r.scrape.apply()
	tests := []struct {
		name string
		want scoring.AdapterTier
	}{
		{name: "sql", want: scoring.TierGPU},
		{name: "chat", want: scoring.TierStorage},
	}
	got := r.view.sync()[0].Adapters
	if len(got) != len(tests) {
		t.Fatalf("apply: adapters %+v, want %d", got, len(tests))
	}
	for i, tt := range tests {
		if got[i].Name != tt.name || got[i].Tier != tt.want || !got[i].Active {
			t.Errorf("apply(%s) = %+v, want tier %v, active", tt.name, got[i], tt.want)
		}
	}
}

// TestCalibrates: which requests' TTFT may calibrate the replica's prefill
// cost.
func TestCalibrates(t *testing.T) {
	tests := []struct {
		name    string
		waiting int
		c       scoring.Candidate
		want    bool
	}{
		{name: "idle replica, resident or no adapter", c: scoring.Candidate{PrefillSec: 0.2}, want: true},
		{name: "requests reported waiting", waiting: 1, c: scoring.Candidate{PrefillSec: 0.2}},
		{name: "expected wait above a tenth of the prefill", c: scoring.Candidate{WaitSec: 0.03, PrefillSec: 0.2}},
		{name: "adapter loaded from host memory", c: scoring.Candidate{AdapterSec: 0.015, PrefillSec: 0.2}},
		{name: "adapter loaded from storage", c: scoring.Candidate{AdapterSec: 1.5, PrefillSec: 0.2}},
		{name: "part of the prompt cached there", c: scoring.Candidate{CachedTokens: 992, PrefillSec: 0.2}},
	}
	for _, tt := range tests {
		rep := scoring.Replica{WaitingRequests: tt.waiting}
		if got := calibrates(&rep, &tt.c); got != tt.want {
			t.Errorf("calibrates(%s) = %v, want %v", tt.name, got, tt.want)
		}
	}
}
