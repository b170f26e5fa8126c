package router

import (
	"github.com/gpuroute/gpuroute/plugin/config"
	"github.com/gpuroute/gpuroute/scoring"
)

// calibration is each replica's prefill cost: the configured hardware
// profile (the prior) refined online by the time to first token of the
// requests that may teach it (calibrates). It owns the priors, the
// calibrators and the current profile; the view copies a changed profile
// into the table, and the work exchanges price a replica's outstanding
// work with it.
type calibration struct {
	priors      []scoring.Hardware
	calibrators []scoring.Calibrator
	hardware    []scoring.Hardware // the prior as calibrated so far
	// changed lists the replicas whose profile changed since the view's
	// last sync (pending marks them, so each is listed once).
	changed []int
	pending []bool
}

func (c *calibration) setup(cfg *config.Config) {
	n := len(cfg.Replicas)
	c.priors = make([]scoring.Hardware, n)
	c.calibrators = make([]scoring.Calibrator, n)
	c.hardware = make([]scoring.Hardware, n)
	c.changed = make([]int, 0, n)
	c.pending = make([]bool, n)
	for i := range cfg.Replicas {
		hw := cfg.Replicas[i].Profile
		if k := cfg.Replicas[i].KVCapacityTokens; k > 0 {
			hw.KVCapacityTokens = k
		}
		c.priors[i], c.hardware[i] = hw, hw
	}
}

// observe learns from a request sent to replica i with uncached prompt
// tokens whose first token came ttftSec after dispatch, with waitSec of
// expected wait ahead of it.
func (c *calibration) observe(i, uncached int, ttftSec, waitSec float64) {
	c.calibrators[i].Observe(&c.priors[i], uncached, ttftSec, waitSec)
	c.hardware[i] = c.calibrators[i].Apply(&c.priors[i])
	c.mark(i)
}

// mark lists replica i as changed, once.
func (c *calibration) mark(i int) {
	if !c.pending[i] {
		c.pending[i] = true
		c.changed = append(c.changed, i)
	}
}

// adopt takes over what from learned of each replica that keeps its name
// (named maps from's replicas to c's), unless its hardware profile changed:
// the prefill cost is the hardware's, whichever pod runs on it
// (reconfig.go).
func (c *calibration) adopt(from *calibration, named []int) {
	for i, j := range named {
		if j >= 0 && from.priors[i] == c.priors[j] {
			c.calibrators[j], c.hardware[j] = from.calibrators[i], from.hardware[i]
			c.mark(j)
		}
	}
}

// synced empties the changed list: the view holds every profile.
func (c *calibration) synced() {
	for _, i := range c.changed {
		c.pending[i] = false
	}
	c.changed = c.changed[:0]
}

// calibrates reports whether the TTFT of a request sent to rep with the
// chosen candidate's costs c may calibrate rep's prefill cost. Only a TTFT
// that is the prefill alone teaches it: nothing reported queued and an
// expected wait small next to the prefill (the router cannot see other
// gateways' queued requests, and TTFT minus an underestimated wait would
// make a busy replica look slow), no adapter to load (the load is in the
// TTFT, its tier a guess), and none of the prompt believed cached there (an
// engine may hold more of a prompt than this router sent, so a warm
// request's uncached count overestimates and its prefill looks fast).
// TestCalibrates holds the cases.
func calibrates(rep *scoring.Replica, c *scoring.Candidate) bool {
	return rep.WaitingRequests == 0 && c.AdapterSec == 0 && c.CachedTokens == 0 &&
		c.WaitSec < calibrationMaxWaitShare*c.PrefillSec
}

// calibrationMaxWaitShare bounds the expected wait, as a share of the
// expected prefill, of a request whose TTFT calibrates its replica.
const calibrationMaxWaitShare = 0.1
