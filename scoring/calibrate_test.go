package scoring

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestCalibratorConverges: replicas labelled H100 that are really other
// hardware converge to their real prefill cost despite noise, queue
// estimate errors and 10% outliers (stalls 3–10× long).
func TestCalibratorConverges(t *testing.T) {
	tests := []struct {
		name    string
		label   string
		truth   string
		outlier float64
	}{
		{name: "correct label", label: "h100", truth: "h100", outlier: 0.1},
		{name: "l4 labelled h100", label: "h100", truth: "l4", outlier: 0.1},
		{name: "h100 labelled l40s", label: "l40s", truth: "h100", outlier: 0.1},
		{name: "a100 labelled h100 no outliers", label: "h100", truth: "a100"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prior, _ := LookupHardware(tt.label)
			truth, _ := LookupHardware(tt.truth)
			rng := rand.New(rand.NewPCG(11, 12))
			var c Calibrator
			for i := 0; i < 400; i++ {
				x := 100 + rng.IntN(8000)
				queue := rng.Float64() * 0.5
				y := truth.PrefillSeconds(x) * math.Exp(rng.NormFloat64()*0.05)
				if rng.Float64() < tt.outlier {
					y *= 3 + 7*rng.Float64()
				}
				// The router's queue estimate is off by ±20%.
				est := queue * (0.8 + 0.4*rng.Float64())
				c.Observe(&prior, x, queue+y, est)
			}
			got := c.Apply(&prior)
			for _, n := range []int{500, 4000, 8000} {
				g, w := got.PrefillSeconds(n), truth.PrefillSeconds(n)
				if math.Abs(g-w)/w > 0.15 {
					t.Errorf("calibrated PrefillSeconds(%d) = %.3f, want %.3f ± 15%% (prior %.3f)", n, g, w, prior.PrefillSeconds(n))
				}
			}
		})
	}
}

func TestCalibratorBounds(t *testing.T) {
	prior, _ := LookupHardware("h100")
	tests := []struct {
		name        string
		secPerToken float64
		wantMax     float64
		wantMin     float64
	}{
		{name: "absurdly slow clamps at 16x", secPerToken: 1, wantMin: prior.PrefillSecPerToken * 16, wantMax: prior.PrefillSecPerToken * 16},
		{name: "absurdly fast clamps at 1/16", secPerToken: 1e-9, wantMin: prior.PrefillSecPerToken / 16, wantMax: prior.PrefillSecPerToken / 16},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Calibrator
			for i := 0; i < 50; i++ {
				x := 1000 + i*100
				c.Observe(&prior, x, float64(x)*tt.secPerToken, 0)
			}
			got := c.Apply(&prior)
			if got.PrefillSecPerToken < tt.wantMin*0.999 || got.PrefillSecPerToken > tt.wantMax*1.001 {
				t.Fatalf("PrefillSecPerToken = %v, want in [%v, %v]", got.PrefillSecPerToken, tt.wantMin, tt.wantMax)
			}
			if got.PrefillFixedSec < 0 || got.PrefillFixedSec > 2 {
				t.Fatalf("PrefillFixedSec = %v, want in [0, 2]", got.PrefillFixedSec)
			}
		})
	}
	// Garbage is ignored; too few samples change nothing.
	var c Calibrator
	c.Observe(&prior, 100, math.NaN(), 0)
	c.Observe(&prior, -5, 1, 0)
	c.Observe(&prior, 100, 0.1, math.Inf(1))
	c.Observe(&prior, 100, 0.1, 0.5)
	if c.Samples() != 0 || c.Apply(&prior) != prior {
		t.Fatalf("after bad observations Samples() = %d, want 0 and the prior unchanged", c.Samples())
	}
}

// TestCalibratorDeadband: a correctly labelled replica observed through a
// noisy queue estimate keeps exactly its profile, so identical replicas
// stay identical in every router that calibrates them on its own.
func TestCalibratorDeadband(t *testing.T) {
	prior, _ := LookupHardware("h100")
	for seed := uint64(1); seed <= 8; seed++ {
		rng := rand.New(rand.NewPCG(seed, 99))
		var c Calibrator
		for i := 0; i < 300; i++ {
			x := 500 + rng.IntN(7000)
			queue := rng.Float64()
			// Prefill up to 10% off and a queue estimate up to 30% off.
			y := prior.PrefillSeconds(x) * (0.9 + 0.2*rng.Float64())
			c.Observe(&prior, x, queue+y, queue*(0.7+0.6*rng.Float64()))
		}
		if got := c.Apply(&prior); got != prior {
			t.Errorf("seed %d: calibrated h100 = %+v, want the profile unchanged", seed, got)
		}
	}
}
