package examples

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuroute/gpuroute/plugin/config"
)

// TestREADMEConfiguration: the configuration example in the README is one
// the plugin accepts, so the first thing a user copies cannot rot.
func TestREADMEConfiguration(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n## Configuration\n")
	if !ok {
		t.Fatal("README.md has no Configuration section")
	}
	_, block, ok := strings.Cut(after, "```json\n")
	if !ok {
		t.Fatal("README.md's Configuration section has no ```json block")
	}
	block, _, _ = strings.Cut(block, "```")
	cfg, err := config.Parse([]byte(block))
	if err != nil {
		t.Fatalf("config.Parse(README example) = %v\n%s", err, block)
	}
	if len(cfg.Replicas) != 2 || len(cfg.Adapters) != 1 {
		t.Errorf("README example parsed to %d replicas and %d adapters, want 2 and 1", len(cfg.Replicas), len(cfg.Adapters))
	}
}
