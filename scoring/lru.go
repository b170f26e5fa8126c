package scoring

import "math"

// cheSolve returns the rate at which the items requested at rates miss an
// LRU cache of capacity slots that they share with one more item requested
// at rate extra (0: none), that item's own miss rate, and the cache's
// characteristic time, all independent Poisson streams (rates per second;
// zero rates are absent items), by Che's approximation (H. Che, Y. Tung,
// Z. Wang, "Hierarchical Web caching systems: modeling, design and
// experimental results", IEEE JSAC 20(7), 2002): an item stays cached for a
// characteristic time T after its last request, where T solves
//
//	Σ_b (1 − e^(−λ_b·T)) = slots
//
// over all items, extra included, so item b misses with probability
// e^(−λ_b·T): the items of rates miss at Σ_b λ_b·e^(−λ_b·T), the extra one
// at extra·e^(−extra·T). With no more items than slots nothing misses. The
// result scales with the rates (T scales inversely), so a difference
// divided by a rate is invariant: the rates need only be right relative to
// each other.
//
// An engine's LoRA caches are such caches: vLLM keeps max_loras adapters on
// the GPU and max_cpu_loras in host memory, each evicting the least
// recently used.
//
// Newton's method starts at from when it is positive (the T of a
// neighbouring problem), else at the root for equal rates. Pick prices one
// more send by solving the same cache with and without it, and from a
// cached or neighbouring T the solve takes a step or two instead of
// climbing from 0 (with 64 replicas of 10 adapters each, four solves from 0
// per replica made Pick take 60 µs natively).
func cheSolve(rates []float64, extra float64, slots int, from float64) (miss, own, t float64) {
	if slots <= 0 {
		return 0, 0, 0
	}
	items, sum := 0, 0.0
	for _, x := range rates {
		if x > 0 {
			items++
			sum += x
		}
	}
	if extra > 0 {
		items++
		sum += extra
	}
	if items <= slots || !(sum < math.Inf(1)) {
		return 0, 0, 0
	}
	// f(T) = Σ(1 − e^(−λT)) − slots is increasing and concave with
	// f(0) = −slots and f′(T) = Σ λ·e^(−λT), the total miss rate. Newton
	// from below the root climbs to it monotonically; from above, one step
	// lands below it (the tangent of a concave function lies above it),
	// and from there it climbs.
	c := float64(slots)
	t = from
	if !(t > 0 && t < math.Inf(1)) {
		// The root for equal rates, a guess within a few Newton steps of
		// the real one: cold, Newton climbed from 0 for 7 to 9 steps.
		t = -math.Log1p(-c/float64(items)) * float64(items) / sum
	}
	miss = sum
	for range 64 {
		f := -c
		miss = 0
		for _, x := range rates {
			if x > 0 {
				e := math.Exp(-x * t)
				f += 1 - e
				miss += x * e
			}
		}
		own = 0
		if extra > 0 {
			e := math.Exp(-extra * t)
			f += 1 - e
			own = extra * e
		}
		if !(miss+own > 0) || math.Abs(f) < 1e-9*c {
			break
		}
		t = max(t-f/(miss+own), 0)
	}
	return miss, own, t
}
