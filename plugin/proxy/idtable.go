package proxy

// idTable maps the host's context ids to per-context state: open addressing
// over a power-of-two array with linear probing and backward-shift deletion,
// so that a lookup is a multiply and a few compares, where a Go map hashes
// the id through the runtime's map code (the exports look a stream up
// about ten times a request; docs/performance.md "Go on wasm"). Id 0 (the
// VM's context) is never stored. The zero idTable is empty and ready to
// use; it grows by doubling, never shrinks, and is not safe for concurrent
// use (one per VM).
type idTable[V any] struct {
	keys  []uint32 // 0: empty slot
	vals  []V
	n     int
	shift uint // 32 - log2(len(keys))
}

// home is id's first slot: Fibonacci hashing, which spreads the
// consecutive ids a host hands out.
func (t *idTable[V]) home(id uint32) int { return int((id * 0x9E3779B9) >> t.shift) }

// slot returns id's slot and whether id is present; when absent, the slot
// is the empty one where it would go. t must have slots.
func (t *idTable[V]) slot(id uint32) (int, bool) {
	mask := len(t.keys) - 1
	for i := t.home(id); ; i = (i + 1) & mask {
		switch t.keys[i] {
		case id:
			return i, true
		case 0:
			return i, false
		}
	}
}

// get returns id's value and whether it is present.
func (t *idTable[V]) get(id uint32) (V, bool) {
	if t.n > 0 && id != 0 {
		if i, ok := t.slot(id); ok {
			return t.vals[i], true
		}
	}
	var zero V
	return zero, false
}

// put sets id's value; id 0 is ignored.
func (t *idTable[V]) put(id uint32, v V) {
	if id == 0 {
		return
	}
	if (t.n+1)*4 > len(t.keys)*3 {
		t.grow()
	}
	i, ok := t.slot(id)
	if !ok {
		t.keys[i] = id
		t.n++
	}
	t.vals[i] = v
}

// del removes id and reports whether it was present, moving back the
// entries after it in its run that would otherwise be cut off from their
// home slot.
func (t *idTable[V]) del(id uint32) bool {
	if t.n == 0 || id == 0 {
		return false
	}
	hole, ok := t.slot(id)
	if !ok {
		return false
	}
	mask := len(t.keys) - 1
	for j := (hole + 1) & mask; t.keys[j] != 0; j = (j + 1) & mask {
		// The entry at j stays unless its home lies cyclically outside
		// (hole, j]: then the hole breaks its run and it moves there.
		if h := t.home(t.keys[j]); (j-h)&mask >= (j-hole)&mask {
			t.keys[hole], t.vals[hole] = t.keys[j], t.vals[j]
			hole = j
		}
	}
	var zero V
	t.keys[hole], t.vals[hole] = 0, zero
	t.n--
	return true
}

// grow doubles the slots (16 at first) and reinserts every entry.
func (t *idTable[V]) grow() {
	keys, vals := t.keys, t.vals
	n := max(2*len(keys), 16)
	t.keys, t.vals, t.n = make([]uint32, n), make([]V, n), 0
	t.shift = 32
	for m := n; m > 1; m >>= 1 {
		t.shift--
	}
	for i, id := range keys {
		if id != 0 {
			t.put(id, vals[i])
		}
	}
}
