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

// TestFeedbackAdopt: a new configuration keeps what the feedback learned of
// the engines it keeps, on their new indexes, and bounds their index by it
// at once; an engine it does not keep starts unlearned.
func TestFeedbackAdopt(t *testing.T) {
	const configured = 100 // index entries of the configured KV capacity
	setup := func(replicas int) (*feedback, *prefix.Index) {
		index := prefix.NewIndex(prefix.IndexConfig{BlockChars: 64, MaxReplicas: replicas, Stride: indexStride, MaxEntries: 4096})
		f := new(feedback)
		f.setup(index, &prefixShare{}, &stats{}, replicas, 64, true, false)
		for i := range replicas {
			f.capacity(i, configured*index.TokensPerEntry())
		}
		return f, index
	}
	old, _ := setup(2)
	for range 20 {
		old.learn(1, 4)
	}
	old.settled[1] = 7
	f, index := setup(2)
	f.adopt(old, []int{-1, 0}) // replica 1 is the new replica 0; old replica 0 is gone
	if f.learned[0] != old.learned[1] || f.settled[0] != 7 || f.learned[1] != 0 {
		t.Fatalf("learned %v settled %v, want replica 0 to carry old replica 1's %d and 7, replica 1 none", f.learned, f.settled, old.learned[1])
	}
	for i := range 4 * configured {
		index.RecordCheckpoints(0, []uint64{prefix.Finalize(uint64(i) + 1)})
		index.RecordCheckpoints(1, []uint64{prefix.Finalize(uint64(i) + 1)})
	}
	if kept, fresh := index.Resident(0), index.Resident(1); kept > configured/2 || fresh <= configured/2 {
		t.Errorf("resident entries: kept engine %d (want at most %d, its learned size), new one %d (want its configured %d)", kept, configured/2, fresh, configured)
	}
}
