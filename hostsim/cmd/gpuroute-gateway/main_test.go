package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuroute/gpuroute/hostsim/gateway"
)

// TestPluginConfigRebindsSimulated: an existing configuration file from an
// older --simulate run names that run's ports; this run's addresses replace
// them (else every request gets a 503), and the file's other edits stay.
func TestPluginConfigRebindsSimulated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plugin.json")
	old := `{"tick_ms":250,"replicas":[{"name":"sim-0","address":"127.0.0.1:40001","state":"draining"},` +
		`{"name":"real","address":"10.0.0.9:8000"}]}`
	if err := os.WriteFile(path, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	specs := []gateway.ReplicaSpec{{Name: "sim-0", Address: "127.0.0.1:50002"}}
	cfg, rebound, err := pluginConfig(path, specs, map[string]string{"sim-0": "127.0.0.1:50002"}, gateway.ConfigOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		TickMs   int `json:"tick_ms"`
		Replicas []struct {
			Name, Address, State string
		} `json:"replicas"`
	}
	if err := json.Unmarshal(cfg, &got); err != nil {
		t.Fatal(err)
	}
	if len(rebound) != 1 || got.TickMs != 250 || len(got.Replicas) != 2 ||
		got.Replicas[0].Address != "127.0.0.1:50002" || got.Replicas[0].State != "draining" || got.Replicas[1].Address != "10.0.0.9:8000" {
		t.Errorf("pluginConfig(older file) = %s, rebound %v; want sim-0 at 127.0.0.1:50002 still draining, real and tick_ms untouched", cfg, rebound)
	}
	if b, _ := os.ReadFile(path); string(b) != string(cfg) {
		t.Errorf("the file holds %s, want the rebound configuration written back", b)
	}
}
