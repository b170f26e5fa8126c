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
// It covers the VM's streams routed by earlier roots too, matched by
// address.
func (r *root) enforceDrains(now int64) {
	replicas := r.view.replicas
	live := &r.vm.live
	for i := 0; i < len(*live); {
		s := (*live)[i]
		if j := replicaAt(replicas, s.addr); j >= 0 && replicas[j].DrainAt(now) == scoring.Drained {
			r.stats.add(r.stats.drainResets, 1)
			s.forceEnd()
			continue // forceEnd removed s from live
		}
		i++
	}
	var closed uint64
	for i := range replicas {
		if replicas[i].DrainAt(now) != scoring.Serving {
			closed++
		}
	}
	r.stats.set(r.stats.closedReplicas, closed)
}
