package scoring

import "math"

// Rate is an exponentially weighted event rate (events per second) with
// time constant window: each event adds 1/window, and the total decays by
// e^(−Δt/window). A steady stream of λ events per second reads λ. The zero
// value reads 0. Time is an argument, as everywhere in scoring.
type Rate struct {
	perSec    float64
	lastNanos int64
}

// Add records one event at nowNanos.
func (r *Rate) Add(nowNanos int64, window float64) {
	r.perSec = r.At(nowNanos, window) + 1/window
	if nowNanos > r.lastNanos {
		r.lastNanos = nowNanos
	}
}

// At returns the rate at nowNanos. Events stamped after nowNanos (a clock
// step backwards) count undecayed.
func (r *Rate) At(nowNanos int64, window float64) float64 {
	if r.perSec == 0 || !(window > 0) {
		return 0
	}
	dt := float64(nowNanos-r.lastNanos) / 1e9
	if dt <= 0 {
		return r.perSec
	}
	return r.perSec * math.Exp(-dt/window)
}
