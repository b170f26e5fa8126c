package router

import (
	"slices"
	"time"

	"github.com/gpuroute/gpuroute/plugin/internal/gcdrive"
	"github.com/gpuroute/gpuroute/plugin/proxy"
	"github.com/gpuroute/gpuroute/plugin/shared"
	"github.com/gpuroute/gpuroute/scoring"
	"github.com/gpuroute/gpuroute/scoring/prefix"
)

// sweepAfter drops a flight whose response callbacks never came (a lost
// stream must not count as load forever); no generation runs this long.
const sweepAfter = 30 * time.Minute

// gcFinishBytes bounds the garbage a tick allocates to end a collection
// (gcdrive.Finish): each 64 KiB chunk buys at least 64 KiB of marking, and
// on BenchmarkRequestPath64's traffic (two workers, 64 replicas) the ticks
// ended the four cycles of 20,000 requests with six chunks in all. A cycle
// that needs more goes on at the next tick.
const gcFinishBytes = 8 << 20

// tick is the root's periodic work, in order: join the worker list, hold or
// contest the scrape lease (the leader scrapes), refresh the fleet snapshot,
// exchange in-flight work with the other workers, merge the prefix index,
// and end what a drain deadline has closed.
func (r *root) tick(now int64) {
	if !r.registered {
		r.join(now)
	}
	r.holdLease(now)
	if r.leader {
		r.scrape(now)
	}
	r.readSnapshot()
	r.syncSuspects()
	// Ejections end and evidence ages between snapshots too, so every
	// replica's view is refreshed whether or not the shared state changed.
	r.presentAll(now)
	r.readRemoteWork(now)
	if !r.cfg.Scraper {
		// A scraper routes nothing: it has no in-flight work or
		// placements of its own to share.
		r.exchangeWork(now)
		r.exchangeAdapters(now)
	}
	r.mergePrefixes(now)
	if r.leader && len(r.peers) > 0 {
		r.askPeers()
	}
	r.enforceDrains(now)
	if n := r.ledger.Sweep(now - int64(sweepAfter)); n > 0 {
		r.stats.add(r.stats.sweptFlights, int64(n))
	}
	r.stats.flush()
	// A collection begun since the last tick ends here rather than
	// marking on through the requests (gcdrive).
	gcdrive.Finish(gcFinishBytes)
}

// join takes a worker id and adds it to the shared worker list so the other
// workers read this one's in-flight work. Ids come from a CAS counter; the
// list is updated with CAS too (a lost race retries on the next tick). A
// scraper's id carries shared.ScraperBit and is not listed: it has no work
// for the workers to read on every request.
func (r *root) join(now int64) {
	if r.worker == 0 {
		id, ok := r.nextWorkerID(now)
		if !ok {
			return
		}
		if r.cfg.Scraper {
			r.worker, r.registered = id|shared.ScraperBit, true
			return
		}
		r.worker = id
		r.workerKey = shared.WorkKey(id)
		r.record.Worker = id
	}
	v, cas, err := proxy.GetSharedData(shared.KeyRegistry)
	switch {
	case err == proxy.ErrNotFound:
		r.registry.Workers = r.registry.Workers[:0]
		cas = 0
	case err != nil:
		return
	default:
		if r.registry.Decode(v) != nil {
			r.registry.Workers = r.registry.Workers[:0] // a garbled list is rebuilt by the next joins
		}
	}
	if !r.registry.Add(r.worker) {
		r.log.warn("worker list full; this worker's in-flight work is not shared")
		r.registered = true
		return
	}
	buf, err := r.registry.AppendBinary(r.scratch[:0])
	if err != nil {
		return
	}
	r.scratch = buf
	if proxy.SetSharedData(shared.KeyRegistry, buf, cas) == nil {
		r.registered = true
	}
}

// leave gives up the scrape lease (so another worker takes it at once
// instead of after its TTL) and removes this worker from the list, best
// effort.
func (r *root) leave() {
	if r.leader {
		if v, cas, err := proxy.GetSharedData(shared.KeyLease); err == nil {
			var cur shared.Lease
			if cur.Decode(v) == nil && cur.Holder == r.worker {
				buf, _ := shared.Lease{}.AppendBinary(r.scratch[:0])
				_ = proxy.SetSharedData(shared.KeyLease, buf, cas)
			}
		}
		r.leader = false
	}
	if !r.registered || r.cfg.Scraper {
		return
	}
	for range 3 {
		v, cas, err := proxy.GetSharedData(shared.KeyRegistry)
		if err != nil || r.registry.Decode(v) != nil {
			return
		}
		r.registry.Remove(r.worker)
		buf, err := r.registry.AppendBinary(r.scratch[:0])
		if err != nil {
			return
		}
		r.scratch = buf
		if proxy.SetSharedData(shared.KeyRegistry, buf, cas) != proxy.ErrCASMismatch {
			return
		}
	}
}

// nextWorkerID increments the shared worker counter. The value carries a
// nonce: two workers creating the missing key at once both succeed (Envoy
// ignores CAS on a missing key, ABI.md §3.2), and the re-read tells the loser.
func (r *root) nextWorkerID(now int64) (uint64, bool) {
	nonce := uint64(now) ^ uint64(r.id)<<40 ^ prefix.HashString(string(r.log))
	var buf [16]byte
	for range 8 {
		v, cas, err := proxy.GetSharedData(keyWorkerID)
		var n uint64
		switch {
		case err == proxy.ErrNotFound:
			cas = 0
		case err != nil:
			return 0, false
		case len(v) == 16:
			n = le64(v[:8])
		}
		n++
		putLE(buf[:8], n)
		putLE(buf[8:], nonce)
		if proxy.SetSharedData(keyWorkerID, buf[:], cas) != nil {
			continue
		}
		if v, _, err := proxy.GetSharedData(keyWorkerID); err == nil && len(v) == 16 && le64(v[8:]) == nonce {
			return n, true
		}
	}
	return 0, false
}

// holdLease runs one step of the leader lease (shared.LeaseStep). A lease
// created on a missing key is confirmed by a re-read, because that set
// ignores CAS and two workers may both have "created" it.
func (r *root) holdLease(now int64) {
	if r.worker == 0 {
		r.leader = false
		return
	}
	ttl := int64(r.cfg.LeaseMillis) * int64(time.Millisecond)
	v, cas, err := proxy.GetSharedData(shared.KeyLease)
	found := err == nil
	var cur shared.Lease
	if found && cur.Decode(v) != nil {
		found = false // garbage: claim it, with the CAS we read
	}
	if err != nil && err != proxy.ErrNotFound {
		r.leader = false
		return
	}
	next, write, leader := shared.LeaseStep(cur, found, r.worker, now, ttl)
	if write {
		buf, _ := next.AppendBinary(r.scratch[:0])
		r.scratch = buf
		if proxy.SetSharedData(shared.KeyLease, buf, cas) != nil {
			leader = false
		} else if cas == 0 {
			v, _, err := proxy.GetSharedData(shared.KeyLease)
			leader = err == nil && cur.Decode(v) == nil && cur.Holder == r.worker
		}
	}
	if leader != r.leader {
		r.stats.add(r.stats.leaseChanges, 1)
		if leader {
			r.log.info("took the scrape lease")
		}
	}
	r.leader = leader
}

// readSnapshot decodes the fleet snapshot when its CAS changed (values are
// copied on every read, so readers skip the decode when nothing changed).
// The leader applies its own scrapes as they arrive (scrape.go) and reads
// back what it published like everyone else.
func (r *root) readSnapshot() {
	v, cas, err := proxy.GetSharedData(shared.KeySnapshot)
	if err != nil || cas == r.snapCAS {
		return
	}
	r.snapCAS = cas
	s := &r.snap
	gen := s.Generation
	if err := s.Decode(v); err != nil || s.ConfigID != r.configID || len(s.Replicas) != len(r.replicas) {
		if err != nil {
			r.log.warn("fleet snapshot unreadable: " + err.Error())
		}
		s.ConfigID, s.Generation = r.configID, gen
		if len(s.Replicas) != len(r.replicas) {
			s.Replicas = s.Replicas[:0]
			for range r.replicas {
				s.Replicas = append(s.Replicas, shared.Replica{MaxAdapters: -1})
			}
		}
		return
	}
	r.applySnapshot()
}

// applySnapshot copies the snapshot's figures into the decision's view.
func (r *root) applySnapshot() {
	now := proxy.NowNanos()
	for i := range r.replicas {
		s := &r.snap.Replicas[i]
		rep := &r.replicas[i]
		c := &r.cfg.Replicas[i]
		rep.WaitingRequests = int(s.Waiting)
		rep.RunningRequests = int(s.Running)
		rep.KVUsage = float64(s.KVUsage)
		rep.KVCapacityTokens = c.KVCapacityTokens
		if rep.KVCapacityTokens == 0 {
			rep.KVCapacityTokens = int(s.KVCapacityTokens)
		}
		rep.AdapterSlots = c.AdapterSlots
		if rep.AdapterSlots < 0 && s.MaxAdapters >= 0 {
			rep.AdapterSlots = int(s.MaxAdapters)
		}
		rep.Adapters = rep.Adapters[:0]
		for _, a := range s.Adapters {
			// An adapter listed only as waiting has queued requests but no
			// GPU slot (vLLM lists an adapter as running once a request of
			// it runs): counting it as resident priced requests for it at
			// no load while they queued behind a full set of slots.
			tier := scoring.TierGPU
			if a.Waiting {
				tier = scoring.TierStorage
			}
			rep.Adapters = append(rep.Adapters, scoring.Adapter{Name: a.Name, Tier: tier, Active: true, Hash: prefix.HashString(a.Name)})
		}
		// Metrics that keep failing rule the replica out; a single failure
		// only ages its figures (Pick treats stale as uncertain). Health and
		// age also weigh the passive evidence (passive.go).
		r.present(i, now)
		if rep.KVCapacityTokens > 0 {
			r.index.SetCapacityTokens(i, rep.KVCapacityTokens)
		}
	}
}

// exchangeWork publishes this worker's in-flight work per replica and adds
// up the other workers' (each under its own key) into Replica.PeerWork. The
// tick refreshes the record and the worker list; between ticks the request
// path keeps both directions current (publishWorkOn after each change,
// gatherPeerWork before each decision), so workers deciding in the same
// burst see each other's dispatches, not only the last tick's.
func (r *root) exchangeWork(now int64) {
	if r.worker == 0 {
		return
	}
	r.ledger.SyncSnapshots(r.replicas)
	r.refreshWork(now)
	if v, _, err := proxy.GetSharedData(shared.KeyRegistry); err == nil && r.registry.Decode(v) == nil {
		r.board.Retain(r.registry.Workers)
	}
	r.gatherPeerWork(now)
}

// refreshWork republishes this worker's record at the tick: its rate and
// time always (a record that stops moving expires), and the entries that
// moved since they were published (a scrape's unseen work, a prefill's
// window), as patches when a few did. The other workers then read and sum
// those entries again, not the whole record: a whole publish at every tick
// made the first decision after it in every other worker decode and sum
// all of each worker's entries.
func (r *root) refreshWork(now int64) {
	moved := r.workMoved[:0]
	for i := range r.replicas {
		if w := r.ledger.WorkOn(i, &r.replicas[i].Hardware, r.replicas[i].ScrapedNanos); w != r.record.Work[i] {
			r.record.Work[i] = w
			moved = append(moved, i)
		}
	}
	r.workMoved = moved
	if len(moved) > shared.MaxPatches || len(r.record.Work) == 0 {
		r.writeWork(now)
		return
	}
	if len(moved) == 0 {
		// A publish of an unchanged entry carries the new time and rate.
		moved = append(moved, 0)
	}
	r.record.WrittenNanos, r.record.ArrivalPerSec = now, r.ledger.Rate(now)
	for _, i := range moved {
		if !r.record.PutEntry(r.workBuf, i) {
			r.writeWork(now)
			return
		}
	}
	_ = proxy.SetSharedData(r.workerKey, r.workBuf, 0)
}

// publishWorkOn updates this worker's published work for one replica (the
// one a request was just dispatched to, or that answered).
func (r *root) publishWorkOn(replica int, now int64) {
	if r.worker == 0 || len(r.registry.Workers) < 2 || replica < 0 || replica >= len(r.record.Work) {
		return
	}
	r.record.Work[replica] = r.ledger.WorkOn(replica, &r.replicas[replica].Hardware, r.replicas[replica].ScrapedNanos)
	r.record.WrittenNanos, r.record.ArrivalPerSec = now, r.ledger.Rate(now)
	if r.record.PutEntry(r.workBuf, replica) {
		_ = proxy.SetSharedData(r.workerKey, r.workBuf, 0)
		return
	}
	r.writeWork(now)
}

// writeWork encodes this worker's whole record (kept in workBuf so that
// publishWorkOn can patch one entry) and publishes it under its own key:
// no contention, so no CAS.
func (r *root) writeWork(now int64) {
	r.record.WrittenNanos, r.record.ArrivalPerSec = now, r.ledger.Rate(now)
	r.record.NextPublish()
	if buf, err := r.record.AppendBinary(r.workBuf[:0]); err == nil {
		r.workBuf = buf
		_ = proxy.SetSharedData(r.workerKey, buf, 0)
	}
}

// gatherPeerWork sets Replica.PeerWork to the other workers' work plus what
// the peer gateways reported (peers.go), rewriting only the replicas whose
// sum moved since the last call (shared.Board.Gather) unless the peer
// gateways' sum or whether the board counts changed.
func (r *root) gatherPeerWork(now int64) {
	local := r.worker != 0 && len(r.registry.Workers) > 1
	if !local && r.remoteNanos == 0 {
		r.peerWorkSet = false // what PeerWork holds is left as it was
		r.ledger.SetPeerRate(0)
		return
	}
	var sum []scoring.Work
	var changed []int
	all := !r.peerWorkSet || r.remoteGen != r.remoteGathered || local != r.localGathered
	rate := 0.0
	if r.remoteNanos != 0 {
		rate = r.remoteRate
	}
	if local {
		r.refreshBoard()
		// A record older than a few lease lifetimes is a dead worker's.
		var every bool
		var workers float64
		sum, changed, every, workers = r.board.Gather(r.worker, now, r.peerWorkTTL(), len(r.replicas))
		all = all || every
		rate += workers
	}
	r.ledger.SetPeerRate(rate)
	r.peerWorkSet, r.remoteGathered, r.localGathered = true, r.remoteGen, local
	if all {
		for i := range r.replicas {
			r.setPeerWork(i, sum)
		}
		return
	}
	for _, i := range changed {
		r.setPeerWork(i, sum)
	}
}

// setPeerWork sets replica i's PeerWork to the other workers' sum (nil:
// none counted) plus the peer gateways'.
func (r *root) setPeerWork(i int, sum []scoring.Work) {
	w := &r.replicas[i].PeerWork
	*w = scoring.Work{}
	if sum != nil {
		*w = sum[i]
	}
	if r.remoteNanos != 0 {
		w.Add(&r.remoteWork[i])
	}
}

// refreshBoard reads the other workers' records, decoding only those whose
// CAS changed.
func (r *root) refreshBoard() {
	if !slices.Equal(r.workKeysOf, r.registry.Workers) {
		// Built when the worker list changes, not per request and peer.
		r.workKeysOf = append(r.workKeysOf[:0], r.registry.Workers...)
		r.workKeys = r.workKeys[:0]
		for _, w := range r.workKeysOf {
			r.workKeys = append(r.workKeys, shared.WorkKey(w))
		}
	}
	for i, w := range r.workKeysOf {
		if w == r.worker {
			continue
		}
		if v, cas, err := proxy.GetSharedData(r.workKeys[i]); err == nil {
			_ = r.board.Update(w, cas, v)
		}
	}
}

// mergePrefixes shares the prefix index between the worker VMs (a
// shared.PrefixShare: a base and a tail of placements): it applies the
// placements the other workers appended since this worker last looked
// (all of base and tail when the base changed), then appends this
// worker's dispatches since the last tick and the placements imported
// from peer gateways, with the read CAS; a lost race retries. When the
// tail has outgrown the base, the writer encodes its own index, which
// holds everything, as the new base instead. Affinity thereby holds
// across the workers of one Envoy, and across gateways with the peer
// exchange (peers.go); without it the rendezvous tie-break still gives a
// new prefix the same home on an idle fleet. Our own dispatches are then
// journaled for the peers.
//
// The request path records a dispatch in the local index at once, so the
// merge appends the outbox without applying it again, except after a new
// base replaced the local index. A new base continues the generation it
// was written over (shared.PrefixShare.Prev): its tail repeats that
// generation's from where this worker's previous merge left it, then the
// writer's dispatches (which the base also holds), so that the workers that
// merged since go on at the same entry without decoding the base.
func (r *root) mergePrefixes(now int64) {
	pending := r.outbox.Len() > 0 || (r.importBox != nil && r.importBox.Len() > 0)
	for range 3 {
		var sh shared.PrefixShare
		gen0, end0 := r.shareGen, r.shareEnd // where the last merge left the index
		v, cas, err := proxy.GetSharedData(shared.KeyPrefixShare)
		fresh := false // write a new base rather than append
		switch {
		case err == proxy.ErrNotFound:
			cas, fresh = 0, true
		case err != nil:
			return
		case cas == r.shareBadCAS:
			fresh = true // still the value found unreadable: logged once
		default:
			if fresh = !r.applyShare(v, &sh); fresh {
				r.shareBadCAS = cas
			}
		}
		if !pending {
			return
		}
		gen, end := r.shareGen, r.shareEnd // what the index holds of the share read
		if r.importBox != nil {
			r.importBox.Each(r.recordPrefix)
		}
		// A worker that merged into this generation before writes its next
		// base, once the tail grew shareMerges times what the other
		// workers appended since that merge (in a tick period).
		rebase := fresh
		if !fresh && gen0 == sh.Gen && end0 <= len(sh.Tail) {
			rebase = sh.Grown() >= max(len(sh.Base)/2, minShareTail, shareMerges*(len(sh.Tail)-end0))
		}
		// A merge appends each placement of the outbox and the imports
		// once: a tick's dispatches of one prompt prefix all carry its
		// checkpoints (two workers at 500 requests a second each, 32 KB
		// prompts over six system prompts: 13 KB a tick each, 1.3 KB
		// without the repeats), which every other worker would copy
		// with the share and record again, and the tail would reach the
		// size that makes a new base four times as often.
		r.shareSeen.Reset()
		if rebase {
			// The new base holds the whole tail, applied above. Every
			// worker that merged since this one last did is past where
			// that merge left the tail: the new tail repeats the rest.
			prev, from := uint64(0), 0
			if !fresh {
				prev, from = gen, end0
			}
			r.shareGen = r.epochNonce(now)
			r.scratch = shared.AppendPrefixShareHeader(r.scratch[:0], r.shareGen, prev, from, end)
			if r.scratch, err = r.index.AppendBinary(r.scratch); err != nil || !shared.SetPrefixShareBase(r.scratch) {
				r.shareGen, r.shareEnd = gen, end
				return
			}
			tailAt := len(r.scratch)
			if prev != 0 {
				r.scratch = append(r.scratch, sh.Tail[from:end]...)
			}
			r.outbox.Each(r.shareAppend)
			if r.importBox != nil {
				r.importBox.Each(r.shareAppend)
			}
			r.shareEnd = len(r.scratch) - tailAt
		} else {
			r.scratch = append(r.scratch[:0], v...)
			r.outbox.Each(r.shareAppend)
			if r.importBox != nil {
				r.importBox.Each(r.shareAppend)
			}
			r.shareEnd = len(r.scratch) - (len(v) - len(sh.Tail))
		}
		if proxy.SetSharedData(shared.KeyPrefixShare, r.scratch, cas) == nil {
			r.journalDispatches(now)
			r.outbox.Reset()
			if r.importBox != nil {
				r.importBox.Reset()
			}
			return
		}
		// Lost the race: the next read finds the winner's value, whose
		// generation or tail says what to apply to what the index held.
		r.shareGen, r.shareEnd = gen, end
	}
}

// minShareTail is the tail a PrefixShare may grow to before a writer
// replaces it with a new base (or half the base, when larger): the copy of
// the value each tick grows with the tail, the writer's encoding of a new
// base (and the decode in a worker that fell behind) with the base.
const minShareTail = 16 << 10

// shareMerges is how many tick periods' worth of placements a PrefixShare's
// tail grows at least before a new base replaces it: a new base every
// period or two, as the tail bounded by size alone gave at 1,000 requests a
// second, left the workers that had not merged since the one before it a
// generation behind, to decode the new one (four workers: 78 decodes of 36
// bases in 5,000 requests; 3, the joining workers', of 17 with this).
const shareMerges = 4

// applyShare decodes the share encoded in v into sh and brings the local
// index up to it: the tail entries past shareEnd when sh has the
// generation last applied, or when its base continues that generation and
// its tail repeats the old one from before shareEnd (the index holds the
// rest already), else its base and whole tail, and then this worker's
// dispatches not yet shared (the base replaced the index that held them).
// It returns false, with the index cleared but for those dispatches and
// the reason logged, when v cannot be read.
func (r *root) applyShare(v []byte, sh *shared.PrefixShare) bool {
	err := sh.Decode(v)
	switch {
	case err != nil || sh.Gen == r.shareGen && r.shareEnd <= len(sh.Tail):
	case sh.Prev != 0 && sh.Prev == r.shareGen && sh.PrevFrom <= r.shareEnd && r.shareEnd <= sh.PrevTail &&
		r.shareEnd-sh.PrevFrom <= len(sh.Tail):
		// The base holds what the index does; the tail repeats what the
		// index lacks of the old one.
		r.shareGen, r.shareEnd = sh.Gen, r.shareEnd-sh.PrevFrom
	default:
		if err = r.index.UnmarshalBinary(sh.Base); err == nil {
			r.shareGen, r.shareEnd = sh.Gen, 0
			r.outbox.Each(r.recordPrefix)
		}
	}
	if err == nil {
		r.shareEnd, err = sh.Each(r.shareEnd, r.shareScratch, r.recordPrefix)
	}
	if err != nil {
		r.log.warn("shared prefix index unreadable, rebuilding: " + err.Error())
		r.index.Clear()
		r.outbox.Each(r.recordPrefix) // the new base must carry them
		r.shareGen, r.shareEnd = 0, 0
		*sh = shared.PrefixShare{}
		return false
	}
	return true
}

// enforceDrains ends what still streams from a replica whose drain deadline
// passed: reset the stream so the client or Envoy's retry re-dispatches it
// (paying the prefill again). No drain waits forever. It covers the VM's
// streams routed by earlier roots too, matched by address, because the
// configuration that starts a drain is what creates this root.
func (r *root) enforceDrains(now int64) {
	live := &r.vm.live
	for i := 0; i < len(*live); {
		s := (*live)[i]
		if j := r.replicaIndex(s.addr); j >= 0 && r.replicas[j].DrainAt(now) == scoring.Drained {
			r.stats.add(r.stats.drainResets, 1)
			s.forceEnd()
			continue // forceEnd removed s from live
		}
		i++
	}
	var draining uint64
	for i := range r.replicas {
		if r.replicas[i].DrainAt(now) != scoring.Serving {
			draining++
		}
	}
	r.stats.set(r.stats.closedReplicas, draining)
}

// exchangeAdapters publishes where this worker sent which LoRA adapter and
// merges the other workers' placements into its ledger, so every worker
// prices adapter loads and host-cache evictions by all the placements of
// this Envoy. Once a tick: placements last minutes.
func (r *root) exchangeAdapters(now int64) {
	if r.worker == 0 || len(r.cfg.Adapters) == 0 {
		return
	}
	r.adapters.Worker, r.adapters.ConfigID = r.worker, r.configID
	r.adapters.Placements = r.ledger.AppendAdapterPlacements(r.adapters.Placements[:0], now)
	if buf, err := r.adapters.AppendBinary(r.scratch[:0]); err == nil {
		r.scratch = buf
		r.keyScratch = shared.AppendAdapterKey(r.keyScratch[:0], r.worker)
		_ = proxy.SetSharedData(string(r.keyScratch), buf, 0) // our own key
	}
	for _, w := range r.registry.Workers {
		if w == r.worker {
			continue
		}
		r.keyScratch = shared.AppendAdapterKey(r.keyScratch[:0], w)
		v, _, err := proxy.GetSharedData(string(r.keyScratch))
		if err != nil || r.peerAdapters.Decode(v) != nil || r.peerAdapters.ConfigID != r.configID {
			continue
		}
		for _, pl := range r.peerAdapters.Placements {
			r.ledger.MergeAdapterPlacement(pl)
		}
	}
}
