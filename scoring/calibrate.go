package scoring

import "math"

// Calibrator fits one replica's prefill cost online from observed
// time-to-first-token, so a fleet with mixed or mislabelled hardware
// converges to its real costs instead of trusting the profile's label.
//
// Each observation is (uncached prompt tokens x, TTFT, the queue wait
// W the router expected at dispatch). The prefill part y = TTFT − W is
// regressed as y ≈ a + b·g(x), where g(x) = x + (c₀/b₀)·x² keeps the
// prior profile's quadratic-to-linear ratio, so b scales the per-token
// and attention terms together and a is the fixed cost. The fit is
// weighted least squares with exponential forgetting (recent behaviour
// wins), Huber-weighted against a running residual scale (and ignoring
// residuals beyond 6 scales) so stalls (preemption, a GC pause, a retried
// request) do not drag it, and
// clamped to 1/16–16× the prior per-token cost (an H100 profile on an L4
// is ~8× off) and to [0, 2 s] fixed cost.
//
// The zero value is ready: it returns the prior unchanged until
// CalibrationMinSamples observations. Not safe for concurrent use.
type Calibrator struct {
	sw, sg, sy, sgg, sgy float64
	scale                float64 // running mean |residual|, seconds
	n                    int
	prior                Hardware
	hasPrior             bool
}

const (
	// CalibrationMinSamples is how many observations a Calibrator needs
	// before it changes a profile.
	CalibrationMinSamples = 8
	// calForget is the forgetting factor: about 100 observations of memory.
	calForget = 0.99
	// calHuberK is the Huber threshold in units of the residual scale
	// (mean absolute residual); beyond calRejectK an observation is ignored.
	calHuberK  = 2.5
	calRejectK = 6
	// calMaxRatio bounds the fitted per-token cost to prior/16 … prior×16.
	calMaxRatio = 16
	// calMaxFixedSec bounds the fitted fixed cost.
	calMaxFixedSec = 2.0
	// calDeadband: a fit within ±25% of the profile at the observed prompt
	// lengths is noise, not different hardware (a mislabelled GPU is 2–8×
	// off). Keeping the profile there keeps identical replicas identical in
	// every router, so their ties, and the rendezvous homes they give
	// prefixes, agree across routers that calibrate independently.
	calDeadband = 0.25
)

// Samples returns the number of accepted observations.
func (c *Calibrator) Samples() int { return c.n }

func (c *Calibrator) g(x float64) float64 {
	if c.prior.PrefillSecPerToken > 0 {
		return x + c.prior.PrefillSecPerToken2/c.prior.PrefillSecPerToken*x*x
	}
	return x
}

// Observe adds one observation for a replica whose configured profile is
// prior: uncachedTokens prefilled, ttftSec measured from dispatch to the
// first token, queueSec the W(r) the router expected at dispatch. It
// ignores observations that cannot be right (non-positive or NaN values,
// TTFT shorter than the queue estimate by more than the whole prefill).
func (c *Calibrator) Observe(prior *Hardware, uncachedTokens int, ttftSec, queueSec float64) {
	if !c.hasPrior || c.prior != *prior {
		if c.hasPrior {
			*c = Calibrator{}
		}
		c.prior, c.hasPrior = *prior, true
	}
	if uncachedTokens <= 0 || !(ttftSec > 0) || !(queueSec >= 0) || math.IsInf(ttftSec, 0) || math.IsInf(queueSec, 0) {
		return
	}
	y := ttftSec - queueSec
	if y <= 0 {
		// The queue estimate was too high; the prefill part is unknown.
		return
	}
	x := c.g(float64(uncachedTokens))
	w := 1.0
	if c.n >= CalibrationMinSamples && c.scale > 0 {
		h := c.Apply(prior)
		r := math.Abs(y - h.PrefillSeconds(uncachedTokens))
		switch {
		case r > calRejectK*c.scale:
			w = 0 // a stall, not a prefill: ignore it
		case r > calHuberK*c.scale:
			w = calHuberK * c.scale / r
		}
		// The scale follows winsorized residuals so outliers cannot
		// inflate it and then hide behind it.
		c.scale += 0.05 * (min(r, calHuberK*c.scale) - c.scale)
	} else {
		c.scale += (math.Abs(y-prior.PrefillSeconds(uncachedTokens)) - c.scale) / float64(c.n+1)
	}
	c.sw = calForget*c.sw + w
	c.sg = calForget*c.sg + w*x
	c.sy = calForget*c.sy + w*y
	c.sgg = calForget*c.sgg + w*x*x
	c.sgy = calForget*c.sgy + w*x*y
	c.n++
}

// Apply returns prior with the fitted prefill costs, or prior unchanged
// before CalibrationMinSamples observations (or when the calibrator was
// fed a different prior).
func (c *Calibrator) Apply(prior *Hardware) Hardware {
	h := *prior
	if c.n < CalibrationMinSamples || !c.hasPrior || c.prior != *prior || c.sw <= 0 {
		return h
	}
	a, b := prior.PrefillFixedSec, prior.PrefillSecPerToken
	den := c.sw*c.sgg - c.sg*c.sg
	if den > 1e-9*c.sw*c.sgg && den > 0 {
		b = (c.sw*c.sgy - c.sg*c.sy) / den
		a = (c.sy - b*c.sg) / c.sw
	} else if c.sg > 0 {
		// All observations at one length: keep the prior fixed cost and
		// fit the slope through it.
		b = (c.sy - a*c.sw) / c.sg
	}
	lo, hi := prior.PrefillSecPerToken/calMaxRatio, prior.PrefillSecPerToken*calMaxRatio
	if prior.PrefillSecPerToken <= 0 {
		lo, hi = 0, 1
	}
	if math.IsNaN(b) {
		b = prior.PrefillSecPerToken
	}
	b = min(max(b, lo), hi)
	if math.IsNaN(a) {
		a = prior.PrefillFixedSec
	}
	a = min(max(a, 0), calMaxFixedSec)
	if xm := c.sg / c.sw; xm > 0 {
		fit, was := a+b*xm, prior.PrefillFixedSec+prior.PrefillSecPerToken*xm
		if was > 0 && math.Abs(fit/was-1) < calDeadband {
			return h
		}
	}
	h.PrefillFixedSec = a
	if prior.PrefillSecPerToken > 0 {
		h.PrefillSecPerToken2 = prior.PrefillSecPerToken2 * b / prior.PrefillSecPerToken
	}
	h.PrefillSecPerToken = b
	return h
}
