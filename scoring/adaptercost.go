package scoring

import "math"

// adapterTerms is one replica's adapter terms for Pick's loop.
type adapterTerms struct {
	sec, reloadSec, pendingSec float64 // A(r, a), reloads it causes, loads queued ahead
	releases                   int     // GPU slots that must free first (with slotWait)
	ok, slotWait               bool    // r can serve the adapter; only after a slot frees
}

// adapterPass fills terms with the adapter terms of every open replica for
// req's adapter (hash is its HashString), from v, the adapter memory's view
// of it. ownBest is adapterReloads' result and stream adapterStream's; with
// waitForSlot, a replica whose GPU slots are all busy is scored with the
// wait for one rather than excluded. A pass of its own, not in Pick's loop:
// a call there makes the loop spill its live values on wasm
// (docs/performance.md "Go on wasm").
func adapterPass(p *Params, req *Request, replicas []Replica, v *adapterView, terms []adapterTerms, hash uint64, ownBest, stream float64, waitForSlot bool) {
	for i := range replicas {
		r := &replicas[i]
		if !r.Healthy || r.Drain != Serving || i >= len(terms) {
			continue // not scored
		}
		t := &terms[i]
		*t = adapterTerms{}
		h := &r.Hardware
		held := v.remembered(i)
		if held == TierStorage && i < len(req.AdapterRecent) && req.AdapterRecent[i] {
			held = TierHost
		}
		// The loads of other adapters sent there that have not started
		// (no GPU slot yet) run before this request's first token, each
		// inside an engine step that stalls the whole replica: vLLM
		// activates LoRAs before the forward pass. The queued prefill in W
		// does not count them.
		t.pendingSec = v.pendingOn(i)
		a, ok, rel := adapterCost(p, r, req.Adapter, hash, held, v.freshOn(i))
		t.releases = rel
		switch {
		case ok:
			t.ok = true
			t.sec = a
			t.reloadSec = v.reloadOn(i, ownBest)
			if h.AdapterLoadStorageSec > 0 && a >= h.AdapterLoadStorageSec {
				// A load from storage makes r the adapter's home: its
				// later requests find it resident here and follow it, so
				// the reloads its share of r's caches causes recur for
				// each of them, while the loads and stalls of going
				// elsewhere are paid once. Priced for one request, a
				// first placement or a split onto an idle replica with a
				// full host cache wins over a busy one with room, and
				// thrashes it (TestAdapterPlacementStream).
				t.reloadSec *= stream
			}
		case waitForSlot && r.AdapterSlots != 0:
			t.ok = true
			t.sec, t.slotWait = r.Hardware.AdapterLoadStorageSec+p.AdapterToleranceSec, true
			t.reloadSec = v.reloadOn(i, ownBest)
		default:
			t.ok = false
		}
	}
}

// adapterCost returns A(r, a) in seconds, whether r can serve adapter at
// all, and how many GPU slots must free before the adapter gets one (0: one
// is free for it): 0 when resident on the GPU (reported, or remembered by
// the ledger), AdapterLoadHostSec from host memory, AdapterLoadStorageSec
// from storage, plus Params.AdapterToleranceSec for any load
// (TestAdapterTolerance, TestAdapterRememberedTiers).
//
// The slots are claimed by the adapters r lists as resident, then by the
// fresh ones, then by those it reports waiting (listed with a tier other
// than TierGPU: queued requests, no slot), which the engine admits first.
// Fresh adapters are the other adapters this router sent to r after its
// snapshot that the snapshot does not list: each holds a slot the snapshot
// shows free, or waits for one (TestAdapterFreshDispatchesFillSlots). When
// they take every slot and no resident adapter is idle (evictable), r
// cannot serve it until one frees (TestAdapterSlotsBusyQueues). A replica
// with no slots serves no adapters; negative slots (unknown) count as free.
func adapterCost(p *Params, r *Replica, adapter string, hash uint64, remembered AdapterTier, fresh int) (float64, bool, int) {
	if r.AdapterSlots == 0 {
		return 0, false, 0
	}
	if remembered == TierGPU {
		return 0, true, 0
	}
	tier := remembered
	gpu, evictable, queued := 0, false, 0
	for i := range r.Adapters {
		a := &r.Adapters[i]
		// The keys first (hash is prefix.HashString(adapter)): comparing
		// names is a runtime call on wasm, for every listed adapter.
		if (a.Hash == 0 || a.Hash == hash) && a.Name == adapter {
			tier = min(tier, a.Tier)
			if a.Tier == TierGPU {
				return 0, true, 0
			}
			continue
		}
		if a.Tier == TierGPU {
			gpu++
			evictable = evictable || !a.Active
		} else if a.Active {
			queued++
		}
	}
	releases := 0
	if r.AdapterSlots > 0 {
		releases = max(gpu+fresh+queued-r.AdapterSlots+1, 0)
		if gpu+fresh >= r.AdapterSlots && !evictable {
			return 0, false, releases
		}
	}
	cost := r.Hardware.AdapterLoadStorageSec
	if tier == TierHost {
		cost = r.Hardware.AdapterLoadHostSec
	}
	return cost + p.AdapterToleranceSec, true, releases
}

// reloadCost returns the reload seconds that one more request of v's
// adapter on replica i costs, per request: others, to the other adapters
// remembered there, and own, to the adapter's own later requests there.
// r's GPU slots and host cache are LRU caches over the adapters sent
// there, at the rates this router (and its peers) sent them, in Che's
// approximation (H. Che, Y. Tung, Z. Wang, IEEE JSAC 20(7), 2002; see
// cheSolve), and this request adds one send (1/AdapterMemory per second in
// the memory's rate) to the adapter's rate there. Extra misses of the GPU
// slots each reload from host memory, those of the host cache from storage
// instead.
//
// Each cache is solved once for all the adapters remembered on r,
// whichever one a request names, and kept while their rates only decay
// (adapterMemory.levels); a send is priced from that solution by
// expanding Che's equation around it (cheLevel.sendDelta), within 1e-4
// misses per send of solving the cache without and with it (TestSendDelta,
// TestReloadCostMatchesSolve); a send the expansion cannot price (a rare
// adapter that one send makes a large share of a cache) is solved
// (cheLevel.sendExact).
//
// The rates, not a count of adapters against slots, price the
// displacement: a count says only whether something is displaced, the same
// on every replica whose caches are full; the rates say how soon the
// displaced ones come back, and a cache shared with one popular adapter
// keeps its rare ones longer than one cycling through many
// (TestReloadCostByRates).
//
// own is the other half of the same trade: a send commits part of the
// adapter's future stream to r. Where its rate is high it stays cached and
// the send adds almost no misses (or removes some: a hotter item is
// evicted less); where it is rare, among adapters that fill the caches,
// nearly every later request of that share misses and reloads. Pick
// charges own relative to the replica where it is least (adapterReloads,
// TestAdapterOwnReloads).
func reloadCost(p *Params, r *Replica, m *adapterMemory, v *adapterView, i int) (others, own float64) {
	window := p.AdapterMemory.Seconds()
	if !(window > 0) {
		return 0, 0
	}
	n, self := v.adapterRates(i)
	if n == 0 {
		return 0, 0 // nothing of this router's there to displace or be displaced by
	}
	one := 1 / window
	hostSlots := r.AdapterHostSlots
	if hostSlots <= 0 {
		hostSlots = r.AdapterSlots
	}
	// In the units of the cached levels (adapterMemory.levels): the rates
	// when they were solved. Misses per send do not depend on the units.
	gpu, host, items, toRef := m.levels(v, i, self, r.AdapterSlots, hostSlots)
	if gpu == nil {
		return 0, 0
	}
	self, one = self*toRef, one*toRef
	gpuOthers, gpuOwn, ok := gpu.sendDelta(self, one, items, r.AdapterSlots)
	if !ok {
		rest, _ := m.otherRates(v, i, toRef)
		gpuOthers, gpuOwn = gpu.sendExact(rest, self, one, r.AdapterSlots)
	}
	hostOthers, hostOwn := gpuOthers, gpuOwn
	if host != gpu {
		hostOthers, hostOwn, ok = host.sendDelta(self, one, items, hostSlots)
		if !ok {
			rest, _ := m.otherRates(v, i, toRef)
			hostOthers, hostOwn = host.sendExact(rest, self, one, hostSlots)
		}
	}
	h := &r.Hardware
	fromHost, fromStorage := h.AdapterLoadHostSec, h.AdapterLoadStorageSec-h.AdapterLoadHostSec
	others = (gpuOthers*fromHost + hostOthers*fromStorage) / one
	own = (gpuOwn*fromHost + hostOwn*fromStorage) / one
	return others, own
}

// adapterReloads fills v's reloadSec and ownSec with reloadCost for every
// open replica that can hold adapters, and returns the own cost the
// adapter's stream has anyway: at its home (the replica it was sent to
// most, by the memory's rates), or, for an adapter with no home, the least
// of any replica.
//
// Only the own misses a replica adds beyond that are this choice's doing:
// the stream must go somewhere, and where it already lives is what it is
// compared with. Without the term, splitting an adapter's traffic over
// replicas looks free, and each share then reloads from storage; against
// the least of any replica rather than the home, a replica whose cache has
// room sets the bar at 0, and the home of a rare adapter looks as costly
// as anywhere else (TestAdapterOwnReloads).
func adapterReloads(p *Params, replicas []Replica, l *Ledger, v *adapterView) float64 {
	if l == nil {
		return 0
	}
	m := &l.adapters
	if len(m.entries) == 0 {
		// Nothing remembered anywhere: nothing to displace or reload.
		clear(v.reloadSec)
		clear(v.ownSec)
		return 0
	}
	best, least := math.Inf(1), math.Inf(1)
	home := 0.0
	for i := range replicas {
		if i >= len(v.reloadSec) {
			break
		}
		r := &replicas[i]
		v.reloadSec[i], v.ownSec[i] = 0, 0
		if !r.Healthy || r.AdapterSlots == 0 || r.Drain != Serving {
			continue
		}
		others, own := reloadCost(p, r, m, v, i)
		v.reloadSec[i], v.ownSec[i] = others, own
		if _, self := v.adapterRates(i); self > home {
			home, best = self, own
		}
		if own < least {
			least = own
		}
	}
	if home == 0 {
		best = least
	}
	if !(best < math.Inf(1)) {
		return 0
	}
	return best
}
