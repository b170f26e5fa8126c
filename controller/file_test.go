package controller

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuroute/gpuroute/controller/pool"
	"github.com/gpuroute/gpuroute/plugin/config"
)

func replicas(addrs ...string) []pool.Replica {
	var rs []pool.Replica
	for i, a := range addrs {
		rs = append(rs, pool.Replica{Name: "vllm-" + string(rune('a'+i)), Address: netip.MustParseAddrPort(a)})
	}
	return rs
}

// TestFilePublish: the file holds the whole configuration, is replaced
// only when it changes, and keeps its last good content when the list is
// one the plugin would refuse.
func TestFilePublish(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plugin.json")
	f := &File{Path: path, Base: []byte(`{"tick_ms": 100}`)}
	ctx := context.Background()
	if err := f.Publish(ctx, replicas("10.0.0.1:8000")); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if before.Mode().Perm() != 0o644 {
		t.Errorf("file mode %v, want 0644", before.Mode().Perm())
	}
	if err := f.Publish(ctx, replicas("10.0.0.1:8000")); err != nil {
		t.Fatal(err)
	}
	if after, err := os.Stat(path); err != nil || !os.SameFile(before, after) {
		t.Errorf("an unchanged list replaced the file (err %v)", err)
	}
	if err := f.Publish(ctx, replicas("10.0.0.1:8000", "10.0.0.2:8000")); err != nil {
		t.Fatal(err)
	}
	err = f.Publish(ctx, nil)
	if err == nil || !strings.Contains(err.Error(), "replicas must list at least one replica") {
		t.Errorf("Publish(no replicas) = %v, want the plugin's refusal", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(b)
	if err != nil {
		t.Fatalf("config.Parse(file) = %v", err)
	}
	if len(cfg.Replicas) != 2 || cfg.TickMillis != 100 {
		t.Errorf("file has %d replicas and tick %d, want the last good list of 2 on the base's tick 100", len(cfg.Replicas), cfg.TickMillis)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".plugin.json.*")); len(left) != 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
}
