package router

import (
	"testing"

	"github.com/gpuroute/gpuroute/scoring/prefix"
)

// TestFeedbackLearnedCapacity: an eviction's sample bounds the replica's
// index entries only with learn_kv_capacity; without it the configured KV
// capacity stands, and the eviction's correction (DropOlder) is the
// feedback's only effect.
func TestFeedbackLearnedCapacity(t *testing.T) {
	const configured = 100 // index entries of the configured KV capacity
	cases := []struct {
		name          string
		learning      bool
		atLeast, most int
	}{
		// Samples of 4 entries move the learned capacity an eighth of the
		// way each, down to its bound: half the configured one.
		{name: "learned", learning: true, atLeast: configured / 4, most: configured / 2},
		{name: "configured", learning: false, atLeast: configured/2 + 1, most: configured},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			index := prefix.NewIndex(prefix.IndexConfig{BlockChars: 64, MaxReplicas: 1, Stride: indexStride, MaxEntries: 4096})
			var f feedback
			f.setup(index, &prefixShare{}, &stats{}, 1, 64, c.learning, false)
			f.capacity(0, configured*index.TokensPerEntry())
			for range 20 {
				f.learn(0, 4)
			}
			for i := range 4 * configured {
				index.RecordCheckpoints(0, []uint64{prefix.Finalize(uint64(i) + 1)})
			}
			if got := index.Resident(0); got < c.atLeast || got > c.most {
				t.Errorf("learning %v: resident entries after filling = %d, want %d to %d", c.learning, got, c.atLeast, c.most)
			}
		})
	}
}
