package fleetsim

import "math/rand/v2"

// connections decides which Envoy worker thread handles each request. The
// kernel spreads client connections over workers and each connection carries
// requests from any of a client's threads, so a request lands on a worker at
// random; a retry stays on its client's connection, hence on its worker.
type connections struct {
	workers int
	rng     *rand.Rand
	of      []int // request ID -> worker + 1; 0: not yet assigned
}

func newConnections(workers int, seed int64) *connections {
	if workers < 1 {
		workers = 1
	}
	return &connections{workers: workers, rng: rand.New(rand.NewPCG(uint64(seed), 0x636f6e6e))}
}

// worker returns the worker that handles request id.
func (c *connections) worker(id int) int {
	for id >= len(c.of) {
		c.of = append(c.of, 0)
	}
	if c.of[id] == 0 {
		c.of[id] = 1 + c.rng.IntN(c.workers)
	}
	return c.of[id] - 1
}
