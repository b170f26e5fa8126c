package router

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestHeldKeepsModel: a request held while the fleet is saturated keeps
// its model's replicas when it is sent later, also when a configuration
// change renumbers the replicas while it waits (the new root's mask, not
// the old one's). r0 serves another model and, ties going to the first
// replica, would take the request if the mask were lost.
func TestHeldKeepsModel(t *testing.T) {
	// chatBody asks for llama-3-8b; r1 serves it.
	models := map[int]string{0: `"models":["qwen"]`, 1: `"models":["llama-3-8b"]`}
	config := func(f *testFleet, order []int) string {
		cfg := f.configOf(order, "")
		for i, m := range models {
			cluster := `"metrics_cluster":"r` + strconv.Itoa(i) + `-metrics"`
			cfg = strings.Replace(cfg, cluster+"}", cluster+","+m+"}", 1)
		}
		return cfg
	}
	for _, tt := range []struct {
		name   string
		reload []int // the replicas' order after the request is held; nil: no reload
	}{
		{name: "same configuration"},
		{name: "renumbered while held", reload: []int{1, 0}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newBareFleet(t, 1, 2)
			f.configure(config(f, []int{0, 1}))
			saturate(f, true)
			f.advance(300 * time.Millisecond)
			h := f.openWith(0, "which replica?")
			if !h.held() {
				t.Fatalf("request to a saturated fleet: held %v, destination %q, reply %+v; want it held", h.held(), h.dst, h.reply)
			}
			if tt.reload != nil {
				f.configure(config(f, tt.reload))
			}
			saturate(f, false)
			f.advance(300 * time.Millisecond)
			if !h.resumed || h.dst != "10.0.0.2:8000" {
				t.Fatalf("after room returned: resumed %v, destination %q; want 10.0.0.2:8000 (r1, the one serving llama-3-8b)", h.resumed, h.dst)
			}
		})
	}
}
