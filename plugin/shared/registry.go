package shared

import "strconv"

// MaxWorkers bounds the Registry and the Board: Envoy runs one worker thread
// per core (--concurrency), far below it.
const MaxWorkers = 256

// Registry is the list of live worker ids in shared data (KeyRegistry), so
// readers know which WorkKeys to read. Ids are kept sorted ascending and
// unique, which makes the encoding canonical.
//
// Protocol: each tick a worker reads the registry; if its id is missing it
// Adds itself and writes with the CAS it read (0 when the key was missing;
// creation races like the lease's, and the loser simply finds itself missing
// on the next read and adds itself again). The leader removes ids whose work
// record has not been rewritten for a long bound (a dead VM never removes
// itself), writing with the CAS it read; on CAS_MISMATCH it retries next tick.
type Registry struct {
	Workers []uint64
}

// Registry encoding, version 1: "GRWR" version=1 u8, count u16, then the ids
// as u64, strictly ascending.
const registryHeaderLen = headerLen + 2

// Contains reports whether id is registered.
func (g *Registry) Contains(id uint64) bool { return containsID(g.Workers, id) }

func containsID(ids []uint64, id uint64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// Add inserts id in order. It returns false, changing nothing, when id is
// already present, is 0 (reserved: "nobody"), or the registry holds
// MaxWorkers ids.
func (g *Registry) Add(id uint64) bool {
	if id == 0 || len(g.Workers) >= MaxWorkers {
		return false
	}
	i := 0
	for i < len(g.Workers) && g.Workers[i] < id {
		i++
	}
	if i < len(g.Workers) && g.Workers[i] == id {
		return false
	}
	g.Workers = append(g.Workers, 0)
	copy(g.Workers[i+1:], g.Workers[i:])
	g.Workers[i] = id
	return true
}

// Remove deletes id and reports whether it was present.
func (g *Registry) Remove(id uint64) bool {
	for i, x := range g.Workers {
		if x == id {
			g.Workers = append(g.Workers[:i], g.Workers[i+1:]...)
			return true
		}
	}
	return false
}

// AppendBinary appends g's versioned encoding to b; it fails, returning b,
// when the ids are not strictly ascending, include 0, or exceed MaxWorkers.
func (g *Registry) AppendBinary(b []byte) ([]byte, error) {
	if err := checkIDs(g.Workers); err != nil {
		return b, err
	}
	b = appendHeader(b, magicRegistry)
	b = appendU16(b, uint16(len(g.Workers)))
	for _, id := range g.Workers {
		b = appendU64(b, id)
	}
	return b, nil
}

func checkIDs(ids []uint64) error {
	if len(ids) > MaxWorkers {
		return fail(ErrInvalid, "registry worker count", int64(len(ids)), "exceeds "+strconv.Itoa(MaxWorkers))
	}
	prev := uint64(0)
	for i, id := range ids {
		if id <= prev {
			return &codecError{msg: "shared: registry worker " + strconv.FormatUint(id, 16) + " at " + strconv.Itoa(i) + ": ids must be nonzero and strictly ascending", kind: ErrInvalid}
		}
		prev = id
	}
	return nil
}

// Decode replaces g with the registry encoded in b, reusing g.Workers'
// capacity; on error g is unchanged.
func (g *Registry) Decode(b []byte) error {
	r := reader{b: b}
	if err := r.header(magicRegistry, "registry"); err != nil {
		return err
	}
	n := int(r.u16())
	if r.short {
		return r.shortErr("registry header")
	}
	if n > MaxWorkers {
		return fail(ErrInvalid, "registry worker count", int64(n), "exceeds "+strconv.Itoa(MaxWorkers))
	}
	if r.left() != 8*n {
		if r.left() < 8*n {
			return fail(ErrShort, "registry worker count", int64(n), "needs more bytes than the value has")
		}
		return fail(ErrInvalid, "registry trailing bytes", int64(r.left()-8*n), "must be 0")
	}
	body := r
	prev := uint64(0)
	for i := 0; i < n; i++ {
		id := r.u64()
		if id <= prev {
			return &codecError{msg: "shared: registry worker " + strconv.FormatUint(id, 16) + " at " + strconv.Itoa(i) + ": ids must be nonzero and strictly ascending", kind: ErrInvalid}
		}
		prev = id
	}
	if n <= cap(g.Workers) {
		g.Workers = g.Workers[:n]
	} else {
		g.Workers = make([]uint64, n)
	}
	for i := range g.Workers {
		g.Workers[i] = body.u64()
	}
	return nil
}
