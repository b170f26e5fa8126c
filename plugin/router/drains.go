package router

import (
	"time"

	"github.com/gpuroute/gpuroute/plugin/config"
	"github.com/gpuroute/gpuroute/scoring"
)

// Drains. A replica is closed to new work by a configuration update (the
// configuration that starts a drain is what creates the root); its
// in-flight generations continue until its drain deadline, when the tick
// ends what is left (docs/design.md "Health and drains").

// drainOf returns the admission state the configuration gives replica c,
// and its drain deadline in Unix nanoseconds (0: none).
func drainOf(c *config.Replica) (scoring.DrainState, int64) {
	switch c.State {
	case config.StateDraining:
		return scoring.Draining, c.DrainDeadlineUnixMillis * int64(time.Millisecond)
	case config.StateDrained:
		return scoring.Drained, 0
	}
	return scoring.Serving, 0
}

// enforceDrains ends what still streams from a replica whose drain deadline
// passed: reset the stream so the client or Envoy's retry re-dispatches it
// (paying the prefill again). No drain waits forever (TestDrainDeadline).
// It covers the streams of the retirees (the replicas a configuration
// change removed; TestScaleUnderLoad) and the streams routed by earlier
// roots, which the serving root adopted; a retiree with no stream left is
// gone.
func (r *root) enforceDrains(now int64) {
	live := &r.vm.live
	for i := 0; i < len(*live); {
		s := (*live)[i]
		if s.replica >= 0 && r.drainedAt(s.replica, now) {
			r.stats.add(r.stats.drainResets, 1)
			s.forceEnd()
			continue // forceEnd removed s from live
		}
		i++
	}
	var closed uint64
	for i := range r.view.replicas {
		if r.view.replicas[i].DrainAt(now) != scoring.Serving {
			closed++
		}
	}
	n := len(r.view.replicas)
	for k := range r.retirees {
		t := &r.retirees[k]
		if !t.gone && r.ledger.InFlightOn(n+k) == 0 && !r.streamsOn(n+k) {
			t.gone = true
			r.log.info("removed replica " + t.name + " drained")
		}
		if !t.gone {
			closed++
		}
	}
	r.stats.set(r.stats.closedReplicas, closed)
}

// drainedAt reports whether the replica at ledger index i (a configured
// replica or a retiree) is closed to its streams at now.
func (r *root) drainedAt(i int, now int64) bool {
	n := len(r.view.replicas)
	if i < n {
		return r.view.replicas[i].DrainAt(now) == scoring.Drained
	}
	return i-n < len(r.retirees) && now >= r.retirees[i-n].deadlineNanos
}

// streamsOn reports whether a stream of this VM is on the replica at ledger
// index i (one the ledger does not count: it was full).
func (r *root) streamsOn(i int) bool {
	for _, s := range r.vm.live {
		if s.replica == i {
			return true
		}
	}
	return false
}
