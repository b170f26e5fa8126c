package shared

// Seen is a set of placements (replica, checkpoint hash) of fixed capacity,
// for appending each placement of a batch once: a tick's dispatches to one
// replica repeat the checkpoints of its shared prompt prefixes in every
// entry, and the workers reading the batch would record each of them again
// (Outbox entries carry every checkpoint of their chain). A placement the
// batch already holds adds nothing a reader's index does not get from the
// first one but a later recency stamp within the same tick.
//
// Once half its slots are used, Seen admits everything as new: dropping a
// placement on a hash collision only costs a prefix-cache hint, and a full
// set would cost probes. The zero Seen has no capacity and admits
// everything. Not safe for concurrent use (one per VM).
type Seen struct {
	keys  []uint64 // 0: empty slot
	used  []int32  // slots holding a key, cleared by Reset
	shift uint     // 64 - log2(len(keys))
}

// NewSeen returns a set of slots slots (rounded up to a power of two, at
// least 16), holding up to half as many placements.
func NewSeen(slots int) *Seen {
	n, bits := 16, uint(4)
	for n < slots {
		n, bits = n*2, bits+1
	}
	return &Seen{keys: make([]uint64, n), used: make([]int32, 0, n/2), shift: 64 - bits}
}

// Reset empties the set, clearing only the slots in use.
func (s *Seen) Reset() {
	for _, i := range s.used {
		s.keys[i] = 0
	}
	s.used = s.used[:0]
}

// AppendNew appends to dst the hashes of checkpoints not yet in the set for
// replica, in order, and adds them.
func (s *Seen) AppendNew(dst []uint64, replica int, checkpoints []uint64) []uint64 {
	for _, h := range checkpoints {
		if s.add(replica, h) {
			dst = append(dst, h)
		}
	}
	return dst
}

// add reports whether (replica, h) was not in the set, adding it.
func (s *Seen) add(replica int, h uint64) bool {
	if len(s.used) >= cap(s.used) {
		return true
	}
	// The replica scrambled into the hash (Fibonacci hashing): the same
	// checkpoint on two replicas is two placements.
	k := h ^ (uint64(replica)+1)*0x9E3779B97F4A7C15
	if k == 0 { // the empty key stands for one placement (a collision's price)
		k = 1
	}
	mask := uint64(len(s.keys) - 1)
	for i := (k * 0x9E3779B97F4A7C15) >> s.shift; ; i = (i + 1) & mask {
		switch s.keys[i] {
		case k:
			return false
		case 0:
			s.keys[i] = k
			s.used = append(s.used, int32(i))
			return true
		}
	}
}
