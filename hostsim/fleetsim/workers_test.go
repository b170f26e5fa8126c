package fleetsim

import (
	"testing"
	"time"
)

// pickRecorder is a round-robin policy that records each request's
// replica and worker.
type pickRecorder struct {
	*roundRobin
	replicas, workers []int
}

func (p *pickRecorder) Pick(now time.Duration, req *Request, attempt int) Decision {
	d := p.roundRobin.Pick(now, req, attempt)
	p.replicas = append(p.replicas, d.Replica)
	p.workers = append(p.workers, p.conns.worker(req.ID))
	return d
}

// pickSequence routes n short requests, one a second, through round-robin
// on four replicas and returns each request's replica and worker.
func pickSequence(t *testing.T, o PolicyOptions, n int) (replicas, workers []int) {
	t.Helper()
	var reqs []*Request
	for i := range n {
		reqs = append(reqs, NewRequest(i, time.Duration(i)*time.Second, DefaultModel, "", []Segment{{Seed: uint64(i + 1), Tokens: 10}}, 1, 1))
	}
	w := &Workload{Name: "rotation", Requests: reqs}
	w.finish()
	p := &pickRecorder{roundRobin: newRoundRobin(o)}
	if _, err := Run(Config{Replicas: UniformReplicas(4, "h100")}, w, p); err != nil {
		t.Fatal(err)
	}
	return p.replicas, p.workers
}

func TestRoundRobinPerWorker(t *testing.T) {
	const n = 400
	t.Run("one worker", func(t *testing.T) {
		got, _ := pickSequence(t, PolicyOptions{Seed: 3, Workers: 1}, n)
		for id, r := range got {
			if r != id%4 {
				t.Fatalf("request %d -> replica %d, want %d (one global rotation)", id, r, id%4)
			}
		}
	})
	t.Run("two workers", func(t *testing.T) {
		got, workers := pickSequence(t, PolicyOptions{Seed: 3, Workers: 2}, n)
		last := map[int]int{}
		back := 0
		for id, r := range got {
			w := workers[id]
			if prev, ok := last[w]; ok && r != (prev+1)%4 {
				t.Fatalf("request %d on worker %d -> replica %d after %d, want %d (each worker rotates)", id, w, r, prev, (prev+1)%4)
			}
			last[w] = r
			if id > 0 && got[id-1] == r {
				back++
			}
		}
		if len(last) != 2 {
			t.Fatalf("requests used %d workers, want 2", len(last))
		}
		// Uncoordinated rotations send consecutive requests to one
		// replica now and then, which a single rotation never does.
		if back == 0 {
			t.Errorf("no two consecutive requests on one replica in %d, want some", n)
		}
	})
}

func TestConnectionsKeepRetries(t *testing.T) {
	c := newConnections(4, 9)
	first := make([]int, 100)
	seen := map[int]bool{}
	for id := range first {
		first[id] = c.worker(id)
		seen[first[id]] = true
	}
	for id := range first {
		if got := c.worker(id); got != first[id] {
			t.Errorf("worker(%d) on retry = %d, want %d (its connection's)", id, got, first[id])
		}
	}
	if len(seen) != 4 {
		t.Errorf("100 requests used %d of 4 workers", len(seen))
	}
	d := newConnections(4, 9)
	for id := range first {
		if got := d.worker(id); got != first[id] {
			t.Fatalf("worker(%d) = %d with the same seed, want %d", id, got, first[id])
		}
	}
}
