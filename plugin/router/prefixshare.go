package router

import (
	"github.com/gpuroute/gpuroute/plugin/proxy"
	"github.com/gpuroute/gpuroute/plugin/shared"
	"github.com/gpuroute/gpuroute/scoring/prefix"
)

// Bounds of what one worker shares of its dispatches between two merges.
const (
	outboxEntries = 256 // dispatches between two prefix-index merges
	// outboxHashes is the checkpoints shared per dispatch; a longer
	// prompt shares its beginning.
	outboxHashes = 4096/indexStride + 1
	// shareSeenSlots sizes the set that drops the placements a merge
	// appended already (shared.Seen); past it the rest of the outbox is
	// appended whole.
	shareSeenSlots = 4096
	// minShareTail is the tail a PrefixShare may grow to before a writer
	// replaces it with a new base (or half the base, when larger): the
	// copy of the value each tick grows with the tail, the writer's
	// encoding of a new base (and the decode in a worker that fell behind)
	// with the base.
	minShareTail = 16 << 10
	// shareMerges is how many tick periods' worth of placements a
	// PrefixShare's tail grows at least before a new base replaces it: a
	// new base every period or two leaves the workers that did not merge
	// since the one before it a generation behind, to decode the new one
	// (TestWorkersKeepIndexAcrossRebases).
	shareMerges = 4
)

// prefixShare shares the prefix index between the worker VMs of one
// Envoy: shared data holds a shared.PrefixShare (a base and a tail of
// placements, shared.KeyPrefixShare); each worker records its dispatches
// in its own index at once and in its outbox, and at the tick applies the
// others' placements and appends its own. Affinity thereby holds across
// the workers (TestAffinityAcrossWorkersAndGateways); without it the
// rendezvous tie-break still gives a new prefix the same home on an idle
// fleet. It owns the outbox and how much of the shared value the local
// index holds; the index itself is the root's, read by the view.
type prefixShare struct {
	index    *prefix.Index
	configID uint64 // the share's replica numbers index this list
	members  *membership
	log      logPrefix

	outbox *shared.Outbox
	// checkpoints is scratch for a dispatch's chain reduced to the hashes
	// the index stores (what the outbox shares).
	checkpoints []uint64

	// gen and end say how much of the shared value the local index holds:
	// the base of generation gen and its tail up to byte end; an idle
	// worker skips a value it already found unreadable (badCAS) instead of
	// logging it every tick (TestPrefixShareGarbageLoggedOnce).
	gen    uint64
	end    int
	badCAS uint32 // CAS of the last value found unreadable (0: none)
	// appendEntry appends an outbox entry to buf, without the placements
	// seen holds (one merge's), through fresh; tailHashes receives a tail
	// entry's checkpoints.
	appendEntry func(replica int, checkpoints []uint64)
	record      func(replica int, checkpoints []uint64)
	seen        *shared.Seen
	fresh       []uint64
	tailHashes  []uint64
	buf         []byte
}

func (p *prefixShare) setup(index *prefix.Index, configID uint64, m *membership, log logPrefix) {
	p.index, p.configID, p.members, p.log = index, configID, m, log
	p.outbox = shared.NewOutbox(outboxEntries, outboxHashes)
	p.checkpoints = make([]uint64, 0, outboxHashes)
	p.tailHashes = make([]uint64, outboxHashes)
	p.seen = shared.NewSeen(shareSeenSlots)
	p.fresh = make([]uint64, 0, outboxHashes)
	p.appendEntry = func(replica int, checkpoints []uint64) {
		p.fresh = p.seen.AppendNew(p.fresh[:0], replica, checkpoints)
		p.buf = shared.AppendPrefixShareEntry(p.buf, replica, p.fresh)
	}
	p.record = index.RecordCheckpoints
	// Room for a base of the whole index and a tail half its size (when
	// a merge writes a new base, minShareTail at least), so that the
	// buffer does not grow once the caches fill (TestScenarios,
	// gc-pressure, in the long tests).
	base := shared.PrefixShareHeaderLen + index.MaxEncodedLen()
	p.buf = make([]byte, 0, base+max(base/2, minShareTail))
}

// dispatched records a dispatch of chain to replica: in the local index
// now, in the outbox for the next merge. stamps and held receive the first
// checkpoints' stamps before the record (Index.RecordCheckpointsBefore; the
// feedback's, from dispatching).
func (p *prefixShare) dispatched(replica int, chain []uint64, stamps []uint32, held []bool) {
	p.checkpoints = p.index.AppendCheckpoints(p.checkpoints[:0], chain)
	p.index.RecordCheckpointsBefore(replica, p.checkpoints, stamps, held)
	p.outbox.Push(replica, p.checkpoints)
}

// placed records checkpoints (of a chain, as Index.AppendCheckpoints
// reduces it) for replica: in the local index now, in the outbox for the
// next merge. An adapter sent to replica is placed as its key (adapterKey);
// a response's chain with its answer as the feedback gathers it.
func (p *prefixShare) placed(replica int, checkpoints []uint64) {
	p.index.RecordCheckpoints(replica, checkpoints)
	p.outbox.Push(replica, checkpoints)
}

// merge brings the local index up to the shared value and, when there is
// something to share (this worker's dispatches, and imports: placements
// from peer gateways), appends it with the read CAS; a lost race retries.
// It applies the placements the other workers appended since this worker
// last looked (all of base and tail when the base changed). When the tail
// has outgrown the base, the writer encodes its own index, which holds
// everything, as the new base instead. It reports whether it wrote: the
// caller then journals the outbox for the peer gateways and empties it and
// imports.
//
// The request path records a dispatch in the local index at once, so the
// merge appends the outbox without applying it again, except after a new
// base replaced the local index. A new base continues the generation it
// was written over (shared.PrefixShare.Prev): its tail repeats that
// generation's from where this worker's previous merge left it, then the
// writer's dispatches (which the base also holds), so that the workers that
// merged since go on at the same entry without decoding the base
// (TestPrefixShareTailAndBase).
func (p *prefixShare) merge(now int64, imports *shared.Outbox) bool {
	pending := p.outbox.Len() > 0 || (imports != nil && imports.Len() > 0)
	for range 3 {
		var sh shared.PrefixShare
		gen0, end0 := p.gen, p.end // where the last merge left the index
		v, cas, err := proxy.GetSharedData(shared.KeyPrefixShare)
		fresh := false // write a new base rather than append
		switch {
		case err == proxy.ErrNotFound:
			cas, fresh = 0, true
		case err != nil:
			return false
		case cas == p.badCAS:
			fresh = true // still the value found unreadable: logged once
		default:
			if fresh = !p.apply(v, &sh); fresh {
				p.badCAS = cas
			}
		}
		if !pending {
			return false
		}
		gen, end := p.gen, p.end // what the index holds of the share read
		if imports != nil {
			imports.Each(p.record)
		}
		// A worker that merged into this generation before writes its next
		// base once the tail grew shareMerges times what the other workers
		// appended since that merge.
		rebase := fresh
		if !fresh && gen0 == sh.Gen && end0 <= len(sh.Tail) {
			rebase = sh.Grown() >= max(len(sh.Base)/2, minShareTail, shareMerges*(len(sh.Tail)-end0))
		}
		// A merge appends each placement of the outbox and the imports
		// once: a tick's dispatches of one prompt prefix all carry its
		// checkpoints, which every other worker would copy with the share
		// and record again, and the tail would reach the size that makes a
		// new base sooner.
		p.seen.Reset()
		if rebase {
			// The new base holds the whole tail, applied above. Every
			// worker that merged since this one last did is past where
			// that merge left the tail: the new tail repeats the rest.
			prev, from := uint64(0), 0
			if !fresh {
				prev, from = gen, end0
			}
			p.gen = p.members.nonce(now)
			p.buf = shared.AppendPrefixShareHeader(p.buf[:0], p.gen, p.configID, prev, from, end)
			if p.buf, err = p.index.AppendBinary(p.buf); err != nil || !shared.SetPrefixShareBase(p.buf) {
				p.gen, p.end = gen, end
				return false
			}
			tailAt := len(p.buf)
			if prev != 0 {
				p.buf = append(p.buf, sh.Tail[from:end]...)
			}
			p.outbox.Each(p.appendEntry)
			if imports != nil {
				imports.Each(p.appendEntry)
			}
			p.end = len(p.buf) - tailAt
		} else {
			p.buf = append(p.buf[:0], v...)
			p.outbox.Each(p.appendEntry)
			if imports != nil {
				imports.Each(p.appendEntry)
			}
			p.end = len(p.buf) - (len(v) - len(sh.Tail))
		}
		if proxy.SetSharedData(shared.KeyPrefixShare, p.buf, cas) == nil {
			return true
		}
		// Lost the race: the next read finds the winner's value, whose
		// generation or tail says what to apply to what the index held.
		p.gen, p.end = gen, end
	}
	return false
}

// apply decodes the share encoded in v into sh and brings the local index
// up to it: the tail entries past end when sh has the generation last
// applied, or when its base continues that generation and its tail repeats
// the old one from before end (the index holds the rest already), else its
// base and whole tail, and then this worker's dispatches not yet shared
// (the base replaced the index that held them). It returns false, with the
// index cleared but for those dispatches and the reason logged, when v
// cannot be read (TestPrefixShareGarbage).
func (p *prefixShare) apply(v []byte, sh *shared.PrefixShare) bool {
	err := sh.Decode(v)
	if err == nil && sh.ConfigID != p.configID {
		// Another replica list's numbers (a worker on another
		// configuration, during a reload): not applied, and replaced by
		// this list's at the next write (TestReconfigureKeepsPrefixHits).
		*sh = shared.PrefixShare{}
		return false
	}
	switch {
	case err != nil || sh.Gen == p.gen && p.end <= len(sh.Tail):
	case sh.Prev != 0 && sh.Prev == p.gen && sh.PrevFrom <= p.end && p.end <= sh.PrevTail &&
		p.end-sh.PrevFrom <= len(sh.Tail):
		// The base holds what the index does; the tail repeats what the
		// index lacks of the old one.
		p.gen, p.end = sh.Gen, p.end-sh.PrevFrom
	default:
		if err = p.index.UnmarshalBinary(sh.Base); err == nil {
			p.gen, p.end = sh.Gen, 0
			p.outbox.Each(p.record)
		}
	}
	if err == nil {
		p.end, err = sh.Each(p.end, p.tailHashes, p.record)
	}
	if err != nil {
		p.log.warn("shared prefix index unreadable, rebuilding: " + err.Error())
		p.index.Clear()
		p.outbox.Each(p.record) // the new base must carry them
		p.gen, p.end = 0, 0
		*sh = shared.PrefixShare{}
		return false
	}
	return true
}

// adopt takes from's place in the shared value when the replica list is
// the same, and its dispatches not yet shared, renumbered (engine maps
// from's replicas to this list's; reconfig.go).
func (p *prefixShare) adopt(from *prefixShare, engine []int, sameList bool) {
	if sameList {
		p.gen, p.end, p.badCAS = from.gen, from.end, from.badCAS
	}
	from.outbox.Each(func(replica int, checkpoints []uint64) {
		if j := remap(engine, replica); j >= 0 {
			p.outbox.Push(j, checkpoints)
		}
	})
}
