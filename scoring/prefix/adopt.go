package prefix

import "slices"

// Adopt replaces x's entries with old's, replica i of old becoming replica
// to[i] of x (negative, or past x's replicas: dropped), with their recency:
// x keeps its own configuration and capacities, and when old held more
// than they allow the least recently recorded entries go, as if old's
// history had been recorded into x. Block size and stride must match (a
// checkpoint of another stride is another block). The router calls it when
// a configuration change renumbers the replicas (TestIndexAdopt).
func (x *Index) Adopt(old *Index, to []int) {
	x.Clear()
	if old.cfg.BlockChars != x.cfg.BlockChars || old.cfg.Stride != x.cfg.Stride {
		return
	}
	moved := make([]indexEntry, 0, old.used)
	for i := range old.slots {
		e := old.slots[i]
		if e.rep == 0 || e.rep == tombRep {
			continue
		}
		if r := int(e.rep - 1); r < len(to) && to[r] >= 0 && to[r] < len(x.count) {
			e.rep = uint16(to[r] + 1)
			moved = append(moved, e)
		}
	}
	x.clock = old.clock
	// Oldest first, so that the budgets evict what they would have.
	slices.SortFunc(moved, func(a, b indexEntry) int {
		return int(int64(x.clock-b.stamp) - int64(x.clock-a.stamp))
	})
	for _, e := range moved {
		x.place(e)
	}
}
