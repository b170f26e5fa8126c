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
// neighbouring problem: the replica's previous solution, or the one a
// send moves from), else at the root for equal rates. From there it takes
// a step or two instead of climbing from 0 (any start reaches the same
// root: TestCheSolveWarmStart; BenchmarkPickAdaptersFull64 times it). Pick
// solves a replica's caches only when its adapters change and prices sends
// from that solution (cheLevel); TestSendDelta holds that pricing to
// solving with and without the send here.
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
		// the real one, closer than 0.
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

// cheOrder is the highest order of the Taylor expansions with which a
// cheLevel prices a send (sendDelta).
const cheOrder = 12

// cheExp expands the sum Σ_b e^(−λ_b·(t+Δ)) over a cache's items in Δ at
// t: a[k] = (−1)^k·m_k/k!, where m_k = Σ_b λ_b^k·e^(−λ_b·t) are the items'
// moments at t. m_1 is their total miss rate; m_0 is how many of them are
// out of the cache (items − slots at Che's characteristic time). t is 0
// when there is no expansion.
type cheExp struct {
	t float64
	a [cheOrder + 1]float64
	// sr is the rate of the send solved at t (cheLevel.add), se
	// e^(−sr·t): a later send at a nearby rate needs no exponential.
	sr, se float64
}

// center expands x at t for the items of rates and extra.
func (x *cheExp) center(rates []float64, extra, t float64) {
	x.t = t
	x.a = [cheOrder + 1]float64{}
	x.addMoments(extra)
	for _, r := range rates {
		x.addMoments(r)
	}
	f := 1.0
	for k := range x.a {
		x.a[k] *= f
		f /= -float64(k + 1)
	}
}

func (x *cheExp) addMoments(r float64) {
	if !(r > 0) {
		return
	}
	m := math.Exp(-r * x.t)
	for k := range x.a {
		x.a[k] += m
		m *= r
	}
}

// cheLevel is one LRU cache solved for the rates of all the items it
// serves, so that one more send of any one of them is priced in a few
// exponentials (sendDelta) instead of two more solves of the cache.
//
// When the items outnumber the slots (full), now expands the items' sum
// at Che's characteristic time (cheSolve); otherwise nothing misses. add
// expands it where the send of a new item (one not among them) was last
// solved (sendExact): that send is the same for every adapter not
// remembered on the replica, so one solve serves them all for as long as
// the replica's adapters stay the same.
type cheLevel struct {
	full     bool
	now, add cheExp
}

// cheLevelOf solves the cache of slots shared by rates and extra (see
// cheSolve; from is its starting point) and returns its level.
func cheLevelOf(rates []float64, extra float64, slots int, from float64) cheLevel {
	_, _, t := cheSolve(rates, extra, slots, from)
	var lv cheLevel
	if t > 0 {
		lv.full = true
		lv.now.center(rates, extra, t)
	}
	return lv
}

// cheStepMax is the largest relative move of the characteristic time
// that sendDelta takes from an expansion: a rare item whose rate one send
// doubles can move it further, and such a send is solved (sendExact).
// cheTerm is how far, relative to the move, the first term an expansion
// drops may shift it (sendStep). TestSendDeltaRandom measures what they
// leave: under 1e-5 misses per send.
const (
	cheStepMax = 0.3
	cheTerm    = 1e-8
)

// sendDelta returns how much the miss rates of the LRU cache lv change
// when one of its items, requested at rate self (0: not in the cache yet),
// is requested delta more often: others, the change of the other items'
// total, and own, the change of the item's own; items counts the items lv
// was solved for. ok is false when no expansion can be trusted: then
// sendExact prices the send.
//
// With the send, Che's characteristic time T = t+Δ solves
//
//	Σ_{b≠a} e^(−λ_b·T) + e^(−(self+delta)·T) = n_others + 1 − slots,
//
// the other items' sum expanded in Δ: from now less the item's own terms,
// where at Δ = 0 it is known (n_others + 1 − slots − e^(−self·t)), or for a
// new item from add. The other items' misses at T are minus the
// derivative of their sum, the item's own exact (sendStep).
//
// A move beyond cheStepMax·t is not trusted: on a full cache, a rare item
// that one send makes a real share of it, or a new item in a cache only
// just over full until sendExact centres add there.
func (lv *cheLevel) sendDelta(self, delta float64, items, slots int) (others, own float64, ok bool) {
	if slots <= 0 || !(delta > 0) {
		return 0, 0, true
	}
	if self == 0 {
		if !lv.full && items < slots {
			return 0, 0, true // the new item fits
		}
		x := &lv.add
		if !(x.t > 0) {
			return 0, 0, false
		}
		b := float64(items+1-slots) - x.a[0]
		e, o, ok := sendStep(&x.a, x.t, b, delta, shift(x.se, (delta-x.sr)*x.t))
		if !ok {
			return 0, 0, false
		}
		others = -x.a[1] + o // at add.t they miss at m_1
		if lv.full {
			others += lv.now.a[1] // less m_1 at now.t, where they miss without the send
		}
		return others, delta * e, true
	}
	if !lv.full {
		return 0, 0, true // the send adds no item to a cache that holds them all
	}
	t := lv.now.t
	e0 := math.Exp(-self * t)
	own0 := self * e0
	// The item's own term e^(−self·(t+Δ)) has coefficients e0·(−self)^k/k!.
	var c [cheOrder + 1]float64
	p := e0
	for k := 1; k < len(c); k++ {
		p *= -self / float64(k)
		v := lv.now.a[k] - p
		if (k&1 == 0) != (v >= 0) {
			v = 0 // rounding: the other items' moments are not negative
		}
		c[k] = v
	}
	e, o, ok := sendStep(&c, t, e0, self+delta, math.Exp(-(self+delta)*t))
	if !ok {
		return 0, 0, false
	}
	return o, (self+delta)*e - own0, true
}

// sendStep solves P(d) − c[0] + e^(−r·(t+d)) = b for d, where P is the
// polynomial of coefficients c (an expansion of the other items' sum at
// t) and e is e^(−r·t), and returns e^(−r·(t+d)) and the change of the
// other items' misses from t to t+d, −(P′(d) − P′(0)); false when the
// expansion cannot be trusted at d or the solve fails.
//
// The left side is decreasing and convex in d (so c[1] < 0 < c[2]). Its
// quintic at 0, inverted as a series in Newton's first step u, is taken
// when its last term is below 1e-7·|d| (a send that moves t little, or an
// expansion centred near where this send was solved); else Newton's
// method starts at u, each step one exponential and two polynomials, and
// ends after a step below 1e-4·t (it converges quadratically: d is then
// exact to about 1e-8·t). The common case costs one division and no
// square root: a chain of divisions and roots cost as much as the rest of
// the pricing.
//
// The expansion is cut at the first order whose next term moves d by
// less than cheTerm of itself (|c[k+1]|·|d|^k ≤ cheTerm·|c[1] − r·e|):
// the terms fall like (|d|/t)^k (λ^k·e^(−λ·t) peaks at λ = k/t, where
// (λ·|d|)^k/k! is about (|d|/t)^k), but against a small slope (a cache
// whose items nearly all fit) a small term still moves d far. When even
// order cheOrder is not enough the send is solved (sendExact).
func sendStep(c *[cheOrder + 1]float64, t, b, r, e float64) (_, others float64, ok bool) {
	f0, f1 := e-b, c[1]-r*e
	if !(f1 < 0) {
		return 0, 0, false
	}
	inv := 1 / f1
	u := -f0 * inv
	if !(math.Abs(u) <= cheStepMax*t) {
		return 0, 0, false
	}
	// Series reversion of f0 + f1·d + a2·d² + … + a5·d⁵ = 0 (Lagrange
	// inversion), with b_k = a_k/f1.
	r2 := r * r
	r3 := r2 * r
	b2, b3 := (c[2]+r2*e*(1.0/2))*inv, (c[3]-r3*e*(1.0/6))*inv
	b4, b5 := (c[4]+r2*r2*e*(1.0/24))*inv, (c[5]-r2*r3*e*(1.0/120))*inv
	b22 := b2 * b2
	u2 := u * u
	last := (14*b22*b22 - 21*b22*b3 + 6*b2*b4 + 3*b3*b3 - b5) * u2 * u2 * u
	d := u*(1+u*(-b2+u*(2*b22-b3+u*(5*b2*(b3-b22)-b4)))) + last
	series := math.Abs(last) <= 1e-7*math.Abs(d)
	if !series {
		d = u
	}
	order, ok := cheOrderAt(c, d, f1)
	if !ok {
		return 0, 0, false
	}
	if series {
		e = shift(e, r*d)
	} else {
		for i := 0; ; i++ {
			if !(math.Abs(d) <= cheStepMax*t) || i == 16 {
				return 0, 0, false
			}
			// Horner: f = P(d) − c[0], fp = P′(d).
			f, fp := 0.0, 0.0
			for k := order; k >= 1; k-- {
				f = f*d + c[k]
				fp = fp*d + float64(k)*c[k]
			}
			f *= d
			e = math.Exp(-r * (t + d))
			f += e - b
			fp -= r * e
			if !(fp < 0) {
				return 0, 0, false
			}
			step := f / fp
			d -= step
			if math.Abs(step) <= 1e-4*t {
				e = shift(e, -r*step)
				break
			}
		}
		// Newton ends wherever the root is: check the order there.
		if o, ok := cheOrderAt(c, d, f1); !ok || o > order {
			return 0, 0, false
		}
	}
	q := 0.0
	for k := order; k >= 2; k-- {
		q = q*d + float64(k)*c[k]
	}
	return e, -q * d, true
}

// cheOrderAt returns the lowest order (at least 2) at which the expansion
// c may be cut at d, its next term below cheTerm of the slope f1 (see
// sendStep), and false when no order below cheOrder is.
func cheOrderAt(c *[cheOrder + 1]float64, d, f1 float64) (int, bool) {
	ad := math.Abs(d)
	lim := -cheTerm * f1
	p := ad * ad
	for k := 2; k < cheOrder; k++ {
		if math.Abs(c[k+1])*p <= lim {
			return k, true
		}
		p *= ad
	}
	return cheOrder, false
}

// shift returns e·e^(−y): to fifth order, as exact as the exponential
// for |y| ≤ 1e-2 (the error is y⁶/720), else by it.
func shift(e, y float64) float64 {
	if math.Abs(y) <= 1e-2 {
		return e * (1 - y*(1-y*(1.0/2-y*(1.0/6-y*(1.0/24-y*(1.0/120))))))
	}
	return e * math.Exp(-y)
}

// sendExact is sendDelta by solving the cache with the send (cheSolve):
// rest are the other items' rates. For a new item it centres lv.add on
// the solution, for sendDelta to expand from on the next request.
func (lv *cheLevel) sendExact(rest []float64, self, delta float64, slots int) (others, own float64) {
	if self == 0 {
		from := lv.add.t
		if !(from > 0) {
			from = lv.now.t
		}
		_, _, t := cheSolve(rest, delta, slots, from)
		if !(t > 0) {
			lv.add.t = 0
			return 0, 0
		}
		lv.add.center(rest, 0, t)
		lv.add.sr, lv.add.se = delta, math.Exp(-delta*t)
		others = -lv.add.a[1]
		if lv.full {
			others += lv.now.a[1]
		}
		return others, delta * lv.add.se
	}
	if !lv.full {
		return 0, 0
	}
	own0 := self * math.Exp(-self*lv.now.t)
	with, ownWith, _ := cheSolve(rest, self+delta, slots, lv.now.t)
	return with - (-lv.now.a[1] - own0), ownWith - own0
}
