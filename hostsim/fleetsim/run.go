package fleetsim

import (
	"errors"
	"sync"
)

// RunPolicies runs each named policy on its own fresh fleet built from cfg,
// on the same workload, using up to workers goroutines (at least 1), and
// returns the results in the order of names. A policy that cannot be built
// is reported in the joined error and skipped (its slot is nil); progress,
// if not nil, is called after each run with the number done.
func RunPolicies(cfg Config, w *Workload, names []string, o PolicyOptions, workers int, progress func(done, total int)) ([]*Result, error) {
	w.Prepare()
	workers = max(workers, 1)
	out := make([]*Result, len(names))
	errs := make([]error, len(names))
	var mu sync.Mutex
	done := 0
	jobs := make(chan int)
	var wg sync.WaitGroup
	for k := 0; k < min(workers, len(names)); k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				p, err := NewPolicy(names[i], o)
				if err == nil {
					out[i], err = Run(cfg, w, p)
				}
				errs[i] = err
				mu.Lock()
				done++
				if progress != nil {
					progress(done, len(names))
				}
				mu.Unlock()
			}
		}()
	}
	for i := range names {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return out, errors.Join(errs...)
}
