package scoring

// Adopt moves old's accounting into l, a ledger made for a new replica
// list: replica i of old is replica to[i] of l (negative, or past l's
// replicas: forgotten, with its requests and adapter memory). The requests
// in flight keep their slots, so every Flight handle old gave out works on
// l; their prefill groups, the adapter memory, the learned lengths and the
// dispatch rates move with them, and l keeps its own Params. The plugin
// calls it when a configuration change creates a new root in the same VM,
// so that the streams routed before the change count on the new root
// (TestLedgerAdopt). Both ledgers must have the same maxInFlight; old must
// not be used afterwards.
func (l *Ledger) Adopt(old *Ledger, to []int) {
	if l == nil || old == nil {
		return
	}
	dst := func(i int) int {
		if i < 0 || i >= len(to) || to[i] < 0 || to[i] >= len(l.work.reps) {
			return -1
		}
		return to[i]
	}
	// Every field, then l's own Params and the per-replica state, which
	// are renumbered.
	p, work, groups, adapters := l.p, l.work, l.groups, l.adapters
	*l = *old
	l.p, l.work, l.groups, l.adapters = p, work, groups, adapters
	l.lengths.est = append(make([]outputEst, 0, cap(old.lengths.est)), old.lengths.est...)
	l.work.adopt(&old.work, dst)
	clear(l.groups)
	for i := range old.groups {
		if j := dst(i); j >= 0 {
			l.groups[j] = old.groups[i]
		}
	}
	l.adapters.adopt(&old.adapters, dst)
}

// adopt replaces t with old's requests, renumbered by dst, each in its old
// slot and generation; the per-replica sums are counted again.
func (t *inFlight) adopt(old *inFlight, dst func(int) int) {
	clear(t.reps)
	for i := range old.reps {
		if j := dst(i); j >= 0 {
			t.reps[j].syncedSnap = old.reps[i].syncedSnap
		}
	}
	for s := range t.flights {
		gen := t.flights[s].gen
		if s < len(old.flights) {
			gen = max(gen, old.flights[s].gen)
		}
		t.flights[s] = flight{gen: gen}
	}
	t.live = t.live[:0]
	for _, slot := range old.live {
		f := old.flights[slot]
		j := dst(int(f.replica))
		if j < 0 || int(slot) >= len(t.flights) {
			continue
		}
		f.replica, f.at = int32(j), int32(len(t.live))
		t.flights[slot] = f
		t.live = append(t.live, slot)
		r := &t.reps[j]
		if f.first {
			r.DecodeN++
			r.DecodeTokens += f.remaining
		} else {
			r.QueuedN++
			r.QueuedTokens += f.prefill
		}
		if f.dispatched > r.syncedSnap {
			r.UnseenN++
			r.UnseenTokens += f.prefill
		}
	}
	t.free = t.free[:0]
	for s := len(t.flights) - 1; s >= 0; s-- {
		if !t.flights[s].used {
			t.free = append(t.free, int32(s))
		}
	}
}

// adopt replaces m's placements with old's, renumbered by dst; the solved
// caches are solved again.
func (m *adapterMemory) adopt(old *adapterMemory, dst func(int) int) {
	m.entries = m.entries[:0]
	for _, a := range old.entries {
		if j := dst(int(a.replica)); j >= 0 && len(m.entries) < cap(m.entries) {
			a.replica = int32(j)
			m.entries = append(m.entries, a)
		}
	}
	clear(m.che)
	m.growEpoch, m.growNanos, m.growAt = old.growEpoch, old.growNanos, old.growAt
}
