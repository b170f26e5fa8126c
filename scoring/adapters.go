package scoring

import (
	"math"
	"time"
)

// adapterMemory remembers where the router sent each LoRA adapter, and how
// often: an adapter counts as GPU-resident on a replica for
// Params.AdapterMemory after its last send there, then as held in the
// replica's host-memory LoRA cache for Params.AdapterHostMemory. vLLM only
// reports adapters with running or waiting requests (lora_requests_info),
// so a just-finished adapter vanishes from the metrics while still loaded;
// the memory fills that gap, and its send rates are the input of the LRU
// model that prices displacing one adapter with another (reloadCost).
//
// It also keeps that model's solved caches per replica (cheCache), a memo
// of its entries: valid while a replica's adapters only decay together,
// solved again when one of them changes (TestCheCache).
type adapterMemory struct {
	memory, hostMemory time.Duration // Params.AdapterMemory, AdapterHostMemory
	entries            []adapterMem
	// ver counts, per replica, changes of the adapters remembered there
	// other than their common decay (a send, a new or replaced entry): a
	// cached solution is valid only within one version.
	ver []uint32
	che []cheCache
	// growAt is e^((growNanos − growEpoch)/AdapterMemory), the factor by
	// which every adapter's rate shrank from growEpoch to growNanos (the
	// last Pick's time). With each cache's own factor from its solve
	// (cheCache.shrink) it converts the current rates to every cache's
	// units, one exponential a Pick (levels, grow).
	growEpoch, growNanos int64
	growAt               float64
}

type adapterMem struct {
	adapter uint64
	replica int32
	until   int64
	// prev is the until of the send before the last one (0: none known):
	// where the adapter was when it was last sent, so what its load costs.
	prev int64
	// rate is how often adapter was sent to replica (time constant
	// Params.AdapterMemory, the span the router counts it resident): the
	// input of the LRU model that prices displacing it (cheSolve).
	rate Rate
}

// AdapterPlacement is one entry of a Ledger's adapter memory: adapter (its
// HashString) was sent to Replica, and counts as GPU-resident there until
// UntilNanos (then as host-cached for Params.AdapterHostMemory). Routers
// that share state exchange these so each prices adapters by what all of
// them sent, not only by its own dispatches.
type AdapterPlacement struct {
	Adapter    uint64
	Replica    int
	UntilNanos int64
}

// ledgerAdapterSlots bounds the adapter memory's entries.
const ledgerAdapterSlots = 256

func newAdapterMemory(p *Params, maxReplicas int) adapterMemory {
	return adapterMemory{
		memory:     p.AdapterMemory,
		hostMemory: p.AdapterHostMemory,
		entries:    make([]adapterMem, 0, ledgerAdapterSlots),
		ver:        make([]uint32, maxReplicas),
		che:        make([]cheCache, maxReplicas),
	}
}

// reset forgets every placement and solved cache.
func (m *adapterMemory) reset() {
	clear(m.che)
	clear(m.ver)
	m.entries = m.entries[:0]
}

// appendPlacements appends the placements still counted (GPU or host
// memory) at nowNanos.
func (m *adapterMemory) appendPlacements(dst []AdapterPlacement, nowNanos int64) []AdapterPlacement {
	for i := range m.entries {
		a := &m.entries[i]
		if a.until+int64(m.hostMemory) > nowNanos {
			dst = append(dst, AdapterPlacement{Adapter: a.adapter, Replica: int(a.replica), UntilNanos: a.until})
		}
	}
	return dst
}

// merge adds a placement another router made; the later of the two
// memories of the same placement wins (TestAdapterPlacementsMerge).
func (m *adapterMemory) merge(pl AdapterPlacement) {
	for i := range m.entries {
		a := &m.entries[i]
		if a.adapter == pl.Adapter && int(a.replica) == pl.Replica {
			if pl.UntilNanos > a.until {
				// A later send by the peer: one more request there.
				a.prev, a.until = a.until, pl.UntilNanos
				a.rate.Add(pl.UntilNanos-int64(m.memory), m.memory.Seconds())
				m.ver[a.replica]++
			}
			return
		}
	}
	m.remember(pl.Adapter, int32(pl.Replica), pl.UntilNanos-int64(m.memory), pl.UntilNanos)
}

// remember records a send of adapter to replica at sentNanos, counted
// resident until untilNanos; a new entry takes the one that expires first
// when all are taken.
func (m *adapterMemory) remember(adapter uint64, replica int32, sentNanos, until int64) {
	victim := -1
	window := m.memory.Seconds()
	for i := range m.entries {
		a := &m.entries[i]
		if a.adapter == adapter && a.replica == replica {
			if until > a.until {
				a.prev, a.until = a.until, until
			}
			a.rate.Add(sentNanos, window)
			m.ver[replica]++
			return
		}
		if victim < 0 || a.until < m.entries[victim].until {
			victim = i
		}
	}
	e := adapterMem{adapter: adapter, replica: replica, until: until}
	e.rate.Add(sentNanos, window)
	m.ver[replica]++
	if len(m.entries) < cap(m.entries) {
		m.entries = append(m.entries, e)
	} else if victim >= 0 {
		m.ver[m.entries[victim].replica]++
		m.entries[victim] = e
	}
}

// adapterView is what the adapter memory says, at one Pick's instant,
// about the adapter its request names, per replica (by index, up to the
// ledger's replica count): Pick's scratch, kept in its Decision and filled
// by adapterMemory.view. An empty view (no ledger) says nothing is
// remembered anywhere.
type adapterView struct {
	adapter  uint64
	nowNanos int64
	// gpu and host are bitsets of the replicas remembered to hold the
	// adapter in GPU memory and in host memory.
	gpu, host []uint64
	// fresh counts the other adapters sent to each replica after its
	// snapshot that the snapshot does not list (each holds or waits for a
	// GPU slot the snapshot shows free).
	fresh []int32
	// pending is, per replica, the seconds of loads still to run there for
	// other adapters sent there that have no GPU slot yet: listed as
	// waiting by the snapshot, or sent after it and not listed.
	pending []float64
	// selfRate is the adapter's own send rate on each replica, and otherN
	// how many other adapters have one there: the LRU model's inputs.
	selfRate []float64
	otherN   []int32
	// reloadSec and ownSec are, per replica, the reload seconds one more
	// request of the adapter there costs the other adapters there and the
	// adapter's own later requests (reloadCost, filled by adapterReloads).
	reloadSec, ownSec []float64
	// otherRate holds otherFor's (-1: none) other rates times otherScale,
	// which only solving its caches needs (adapterMemory.otherRates): a
	// rate costs an exponential.
	otherRate  []float64
	otherFor   int
	otherScale float64
	otherAhead bool
}

// size empties v for replicas replicas, allocating only when it must grow.
func (v *adapterView) size(replicas int) {
	if cap(v.selfRate) < replicas {
		words := (replicas + 63) / 64
		v.gpu, v.host = make([]uint64, words), make([]uint64, words)
		v.fresh, v.otherN = make([]int32, replicas), make([]int32, replicas)
		v.pending, v.selfRate = make([]float64, replicas), make([]float64, replicas)
		v.reloadSec, v.ownSec = make([]float64, replicas), make([]float64, replicas)
		v.otherRate = make([]float64, 0, ledgerAdapterSlots)
	}
	words := (replicas + 63) / 64
	v.gpu, v.host = v.gpu[:words], v.host[:words]
	v.fresh, v.otherN = v.fresh[:replicas], v.otherN[:replicas]
	v.pending, v.selfRate = v.pending[:replicas], v.selfRate[:replicas]
	v.reloadSec, v.ownSec = v.reloadSec[:replicas], v.ownSec[:replicas]
	clear(v.gpu)
	clear(v.host)
	clear(v.fresh)
	clear(v.pending)
	clear(v.selfRate)
	clear(v.otherN)
	v.otherFor = -1
}

// view fills v for adapter at nowNanos against replicas' snapshots: where
// it is remembered in GPU memory (sent there within AdapterMemory) or host
// memory (within AdapterHostMemory after that: engines keep recently used
// adapters in a CPU LoRA cache, vLLM --max-cpu-loras, that no metric
// shows), the fresh and pending adapters of every replica, and the LRU
// model's inputs. v must be sized for the ledger's replicas.
func (m *adapterMemory) view(v *adapterView, adapter uint64, replicas []Replica, nowNanos int64) {
	v.adapter, v.nowNanos = adapter, nowNanos
	if len(m.entries) == 0 {
		return
	}
	mem := int64(m.memory)
	hostMem := int64(m.hostMemory)
	window := m.memory.Seconds()
	for i := range m.entries {
		a := &m.entries[i]
		if int(a.replica) >= len(v.selfRate) || a.until+int64(m.hostMemory) <= nowNanos {
			continue
		}
		// The LRU model's inputs (reloadCost): the adapter's own rate
		// there, and how many others have one. Only the own rate costs an
		// exponential; the others' are only needed where a cache is
		// solved again (otherRates).
		if a.rate.perSec > 0 {
			if a.adapter == adapter {
				v.selfRate[a.replica] = a.rate.At(nowNanos, window)
			} else {
				v.otherN[a.replica]++
			}
		}
		if a.adapter != adapter {
			// Sent after the snapshot: its requests hold a slot or wait
			// for one, and the snapshot (which lists the adapters with
			// requests) counted the slot free. Until the next scrape only
			// this memory knows; at a cold start that is every slot.
			if int(a.replica) < len(replicas) && a.until > nowNanos {
				r := &replicas[a.replica]
				sent := a.until - mem
				listed, waiting := snapshotListing(r, a.adapter)
				fresh := sent > r.ScrapedNanos && !listed
				if fresh {
					v.fresh[a.replica]++
				}
				// Its load is still to come: it runs inside an engine
				// step and stalls every request there (vLLM activates
				// LoRAs before the forward pass). A fresh adapter that
				// was GPU-resident when sent likely still is
				// (TestAdapterPendingLoads).
				switch {
				case !fresh && !waiting:
				case a.prev > sent && fresh:
				case a.prev > 0 && a.prev+hostMem > sent:
					v.pending[a.replica] += r.Hardware.AdapterLoadHostSec
				default:
					v.pending[a.replica] += r.Hardware.AdapterLoadStorageSec
				}
			}
			continue
		}
		bit := uint64(1) << (uint(a.replica) & 63)
		switch {
		case a.until > nowNanos:
			v.gpu[a.replica>>6] |= bit
		case a.until+int64(m.hostMemory) > nowNanos:
			v.host[a.replica>>6] |= bit
		}
	}
}

// snapshotListing reports whether r's snapshot lists the adapter whose key
// is h, and whether as waiting for a GPU slot: with requests (Active) but
// not in GPU memory. An idle adapter cached in host memory waits for
// nothing.
func snapshotListing(r *Replica, h uint64) (listed, waiting bool) {
	for i := range r.Adapters {
		if a := &r.Adapters[i]; a.key() == h {
			return true, a.Tier != TierGPU && a.Active
		}
	}
	return false, false
}

// remembered returns where v's adapter is remembered on replica: TierGPU,
// TierHost, or TierStorage (nowhere).
func (v *adapterView) remembered(replica int) AdapterTier {
	if replica>>6 >= len(v.gpu) {
		return TierStorage
	}
	bit := uint64(1) << (uint(replica) & 63)
	switch {
	case v.gpu[replica>>6]&bit != 0:
		return TierGPU
	case v.host[replica>>6]&bit != 0:
		return TierHost
	}
	return TierStorage
}

// pendingOn returns the seconds of other adapters' loads still to run on
// replica.
func (v *adapterView) pendingOn(replica int) float64 {
	if replica >= len(v.pending) {
		return 0
	}
	return v.pending[replica]
}

// freshOn returns how many other adapters were sent to replica after its
// snapshot and are not listed in it.
func (v *adapterView) freshOn(replica int) int {
	if replica >= len(v.fresh) {
		return 0
	}
	return int(v.fresh[replica])
}

// adapterRates returns how many other adapters are remembered on replica
// with a send rate, and the adapter's own rate there.
func (v *adapterView) adapterRates(replica int) (others int, self float64) {
	if replica < 0 || replica >= len(v.otherN) {
		return 0, 0
	}
	return int(v.otherN[replica]), v.selfRate[replica]
}

// reloadOn returns the reload seconds per request that one more request of
// the adapter on replica costs, as of the last adapterReloads: the other
// adapters' extra misses plus its own beyond ownBest, the own cost it has
// anyway.
func (v *adapterView) reloadOn(replica int, ownBest float64) float64 {
	if replica >= len(v.reloadSec) {
		return 0
	}
	sec := v.reloadSec[replica]
	if own := v.ownSec[replica] - ownBest; own > 0 {
		sec += own
	}
	return sec
}

// otherRates returns the send rates of the adapters other than v's
// remembered on replica at v's instant, times scale (kept in v for the next
// call for the same replica and scale), and whether any adapter there, v's
// too, was sent after then.
func (m *adapterMemory) otherRates(v *adapterView, replica int, scale float64) (rates []float64, ahead bool) {
	if v.otherFor == replica && v.otherScale == scale {
		return v.otherRate, v.otherAhead
	}
	keep := int64(m.hostMemory)
	window := m.memory.Seconds()
	v.otherRate = v.otherRate[:0]
	for i := range m.entries {
		a := &m.entries[i]
		if int(a.replica) != replica || a.until+keep <= v.nowNanos || !(a.rate.perSec > 0) {
			continue
		}
		if a.rate.lastNanos > v.nowNanos {
			ahead = true
		}
		if a.adapter != v.adapter {
			v.otherRate = append(v.otherRate, a.rate.At(v.nowNanos, window)*scale)
		}
	}
	v.otherFor, v.otherScale, v.otherAhead = replica, scale, ahead
	return v.otherRate, ahead
}

// stream returns how many more requests of v's adapter the router expects
// within the next window seconds (Pick passes AdapterMemory, the span its
// rates cover): its recent sends to any replica (its rates summed, times
// window: a steady stream of λ reads λ·window), or, for an adapter
// remembered nowhere, the mean over the placements remembered, since
// nothing says it is rarer than the others (TestAdapterPlacementStream).
// 0 with no memory.
func (m *adapterMemory) stream(v *adapterView, window float64) float64 {
	if !(window > 0) {
		return 0
	}
	self := 0.0
	for _, x := range v.selfRate {
		self += x
	}
	if self > 0 {
		return self * window
	}
	// An adapter remembered nowhere: the placements' mean rate, which
	// costs an exponential each, paid only on such requests.
	keep := int64(m.hostMemory)
	sum, n := 0.0, 0
	for i := range m.entries {
		a := &m.entries[i]
		if a.until+keep <= v.nowNanos || !(a.rate.perSec > 0) {
			continue
		}
		sum += a.rate.At(v.nowNanos, m.memory.Seconds())
		n++
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n) * window
}

// cheCache is a replica's two LoRA caches (GPU slots and host memory)
// solved for all the adapters remembered there (cheLevelOf), whichever
// adapter a request names: each pricing of a send (cheLevel.sendDelta)
// then costs a few exponentials instead of solving the caches twice more,
// so of a fleet only the replica the last request went to (whose rates
// changed) solves again. The levels are solved for the rates at atNanos.
// The rates decay by one common factor between sends, and Che's solution
// scales with them (cheSolve), so they stay valid in those units until
// adapterMemory.ver moves or the number of adapters or the slots change:
// the current rates are converted to them, not the levels to the rates.
type cheCache struct {
	set                 bool
	ver                 uint32
	entries             int // adapters remembered there, with a rate
	items               int // of them with a positive rate at atNanos
	gpuSlots, hostSlots int
	atNanos             int64
	shrink              float64 // e^(−(atNanos − growEpoch)/AdapterMemory)
	gpu, host           cheLevel
}

// levels returns replica's GPU and host cache levels at v's instant, self
// being v's adapter's rate there, the number of adapters they were solved
// for, and toRef, the factor from the current rates to the units the
// levels are in (≥ 1: the rates when they were solved). Cached when still
// valid (see cheCache), else solved again, starting from the previous
// solution. host is gpu when the slot counts are equal. Nil when there is
// no cache for replica.
func (m *adapterMemory) levels(v *adapterView, replica int, self float64, gpuSlots, hostSlots int) (gpu, host *cheLevel, items int, toRef float64) {
	if replica < 0 || replica >= len(m.che) || replica >= len(v.otherN) {
		return nil, nil, 0, 0
	}
	now := v.nowNanos
	entries := int(v.otherN[replica])
	if self > 0 {
		entries++
	}
	grow := m.grow(now)
	c := &m.che[replica]
	sameSlots := c.gpuSlots == gpuSlots && c.hostSlots == hostSlots
	toRef = grow * c.shrink
	if !(c.set && now >= c.atNanos && toRef < math.Inf(1)) {
		toRef = 0 // the rates since the levels were solved are unknown
	}
	if !(toRef > 0 && c.ver == m.ver[replica] && c.entries == entries && sameSlots) {
		gpuFrom, hostFrom := 0.0, 0.0
		if sameSlots && toRef > 0 {
			// The previous solution in the current rates' units.
			gpuFrom, hostFrom = c.gpu.now.t*toRef, c.host.now.t*toRef
		}
		rest, ahead := m.otherRates(v, replica, 1)
		items = 0
		if self > 0 {
			items++
		}
		for _, x := range rest {
			if x > 0 {
				items++
			}
		}
		c.gpu = cheLevelOf(rest, self, gpuSlots, gpuFrom)
		if hostSlots != gpuSlots {
			c.host = cheLevelOf(rest, self, hostSlots, hostFrom)
		}
		// A rate stamped after now (a clock step back, or a peer's clock
		// ahead) reads undecayed until now passes it, so it does not decay
		// with the others: such a solution serves this Pick only.
		c.set, c.ver, c.entries, c.items, c.gpuSlots, c.hostSlots = !ahead, m.ver[replica], entries, items, gpuSlots, hostSlots
		c.atNanos, c.shrink, toRef = now, 1/grow, 1
	}
	if hostSlots == gpuSlots {
		return &c.gpu, &c.gpu, c.items, toRef
	}
	return &c.gpu, &c.host, c.items, toRef
}

// grow returns e^((nowNanos − growEpoch)/AdapterMemory) (see
// adapterMemory.growAt), moving the epoch to nowNanos, and so dropping
// every cached solution, when that would leave the range of float64.
func (m *adapterMemory) grow(nowNanos int64) float64 {
	if nowNanos == m.growNanos && m.growAt > 0 {
		return m.growAt
	}
	w := m.memory.Seconds()
	if !(w > 0) {
		return 0
	}
	x := float64(nowNanos-m.growEpoch) / 1e9 / w
	if !(x >= 0 && x <= 500) {
		m.growEpoch, x = nowNanos, 0
		for i := range m.che {
			m.che[i].set = false
		}
	}
	m.growNanos, m.growAt = nowNanos, math.Exp(x)
	return m.growAt
}
