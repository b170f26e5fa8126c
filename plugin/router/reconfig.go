package router

import (
	"strconv"
	"time"

	"github.com/gpuroute/gpuroute/plugin/config"
)

// Configuration changes (docs/design.md "Configuration changes"). Envoy
// creates a new root context in the same VM for every new plugin
// configuration, and the streams already routed stay with the old root's
// contexts. The new root takes the serving root's state over (adopt),
// replica by replica and keyed by name, so that a change of the replica
// list loses nothing and a change that alters nothing changes nothing
// observable (TestNoOpReconfigure, TestScaleUnderLoad):
//
//   - A kept replica (same name, same address) keeps everything: its
//     in-flight work, prefix index entries, adapter memory, calibration,
//     health, scraped figures, sessions and what the engine feedback
//     learned of its cache.
//   - A re-addressed replica (same name, new address) is a new engine
//     process: Kubernetes gives a restarted pod a new IP, and its KV
//     cache, adapters and health are those of a cold engine. Only its
//     calibration, which is its hardware's, carries over (unless its
//     hardware profile changed). The streams on its old address drain as a
//     removed replica's.
//   - A removed replica with streams of this VM still on it retires: it
//     is closed to new work and drains until removed_drain_ms after its
//     removal, when the tick resets what is left; it is gone once its
//     streams ended. A replica added back under its old name and address
//     takes its retiree's streams back.
//
// Every open stream of the VM moves to the new root, its ledger handle
// valid (scoring.Ledger.Adopt) and its replica renumbered. Shared state is
// keyed by the replica list (configID): the new root reads and writes its
// own, so a worker still on another list, for the moments of a reload,
// ignores it, and the other way round.

// retiree is a replica a configuration change removed or re-addressed, with
// streams of this VM still on it.
type retiree struct {
	name, addr    string
	deadlineNanos int64 // Unix time its streams are reset
	gone          bool  // its streams ended: no longer shown, not carried on
}

// handover says where the serving root's replicas go in a new root.
type handover struct {
	from *root
	// to maps each replica of from's ledger (configured, then retirees) to
	// the new root's ledger index (-1: forgotten).
	to []int
	// engine maps each configured replica of from to the new root's
	// replica of the same name and address (-1: none): the same engine,
	// whose caches and health carry over.
	engine []int
	// named maps each configured replica of from to the new root's replica
	// of the same name (-1: none): the same hardware.
	named    []int
	retirees []retiree
	// kept, added and retired count what changed, for the log.
	kept, added int
}

// planHandover plans how a root configured with cfg at now takes over
// from (nil: a VM's first root, nothing to take). It changes nothing.
func planHandover(from *root, cfg *config.Config, now int64) handover {
	if from == nil || from.cfg == nil {
		return handover{}
	}
	n, pn := len(cfg.Replicas), len(from.cfg.Replicas)
	h := handover{from: from, to: make([]int, pn+len(from.retirees)), engine: make([]int, pn), named: make([]int, pn)}
	streams := make([]int, len(h.to))
	for _, s := range from.vm.live {
		if s.replica >= 0 && s.replica < len(streams) {
			streams[s.replica]++
		}
	}
	byName := make(map[string]int, n)
	for j := range cfg.Replicas {
		byName[cfg.Replicas[j].Name] = j
	}
	// place maps from's ledger index i (replica name at addr) to the
	// replica of cfg at the same name and address, else to a retiree
	// while streams are on it.
	place := func(i int, name, addr string, deadline int64) {
		if j, ok := byName[name]; ok && cfg.Replicas[j].AddressText == addr {
			h.to[i] = j
			return
		}
		h.to[i] = -1
		if streams[i] > 0 && from.ledgerAt(i, now) {
			h.to[i] = n + len(h.retirees)
			h.retirees = append(h.retirees, retiree{name: name, addr: addr, deadlineNanos: deadline})
		}
	}
	deadline := now + int64(cfg.RemovedDrainMillis)*int64(time.Millisecond)
	for i := range from.cfg.Replicas {
		c := &from.cfg.Replicas[i]
		h.engine[i], h.named[i] = -1, -1
		if j, ok := byName[c.Name]; ok {
			h.named[i] = j
			if cfg.Replicas[j].AddressText == c.AddressText {
				h.engine[i] = j
				h.kept++
			}
		}
		place(i, c.Name, c.AddressText, deadline)
	}
	for k := range from.retirees {
		t := &from.retirees[k]
		place(pn+k, t.name, t.addr, t.deadlineNanos)
	}
	h.added = n - h.kept
	return h
}

// ledgerAt reports whether from's ledger index i still has a drain to
// wait for at now: a configured replica, or a retiree before its deadline.
func (r *root) ledgerAt(i int, now int64) bool {
	n := len(r.cfg.Replicas)
	return i < n || (i-n < len(r.retirees) && !r.retirees[i-n].gone && now < r.retirees[i-n].deadlineNanos)
}

// summary describes the handover for the configuration's log line.
func (h *handover) summary() string {
	if h.from == nil {
		return ""
	}
	s := "; from the previous configuration: " + strconv.Itoa(h.kept) + " kept, " + strconv.Itoa(h.added) + " new"
	if len(h.retirees) > 0 {
		s += ", " + strconv.Itoa(len(h.retirees)) + " removed or re-addressed draining their streams"
	}
	return s
}

// adopt takes the state of h.from over (see the top of this file), then
// retires it: it stops writing shared state and answering its callbacks.
func (r *root) adopt(h *handover, now int64) {
	from := h.from
	if from == nil {
		return
	}
	r.ledger.Adopt(from.ledger, h.to)
	r.index.Adopt(from.index, h.engine)
	r.calib.adopt(&from.calib, h.named)
	r.health.adopt(&from.health, h.engine)
	r.prefixes.adopt(&from.prefixes, h.engine, from.configID == r.configID)
	r.peers.adopt(&from.peers, h.engine)
	r.sessions.adopt(&from.sessions, h.engine)
	r.feedback.adopt(&from.feedback, h.engine)
	r.scrape.adopt(&from.scrape, h.engine)
	if !r.members.adopt(&from.members) {
		// Another role (worker or scraper): from leaves, and this root
		// joins and contests the lease at its first tick.
		from.scrape.giveUpLease(from.members.worker)
		from.members.leave()
		r.scrape.leader = false
	}
	r.free, from.free = from.free, nil
	n := len(r.cfg.Replicas)
	for _, s := range r.vm.live {
		s.root = r
		if s.replica >= 0 {
			s.replica = remap(h.to, s.replica)
			// A calibration learns the configured replicas' prefill.
			s.calibrate = s.calibrate && s.replica >= 0 && s.replica < n
		}
		if s.answeredBy >= 0 {
			if s.answeredBy = remap(h.to, s.answeredBy); s.answeredBy >= n {
				s.answeredBy = -1
			}
		}
	}
	r.flow.adopt(&from.flow, now)
	from.stats.flush()
	from.adopted = true
	r.scrape.apply()
}

// remap returns to[i], or -1 when i is out of range.
func remap(to []int, i int) int {
	if i < 0 || i >= len(to) {
		return -1
	}
	return to[i]
}
