package shared

import (
	"strconv"

	"github.com/gpuroute/gpuroute/scoring"
)

// AdapterKeyPrefix starts each worker's AdapterRecord key, followed by the
// worker id as 16 lowercase hex digits (AppendAdapterKey).
const AdapterKeyPrefix = "gpuroute/adapters/"

// MaxPlacements bounds an AdapterRecord (a Ledger remembers 256).
const MaxPlacements = 1024

// AppendAdapterKey appends worker's adapter-record key to dst.
func AppendAdapterKey(dst []byte, worker uint64) []byte {
	return appendWorkerKey(dst, AdapterKeyPrefix, worker)
}

// AdapterRecord is one worker VM's LoRA adapter placements (where it sent
// which adapter, and until when that counts as GPU-resident), published each
// tick so the other workers price adapters by all placements
// (scoring.Ledger.MergeAdapterPlacement), not only their own.
type AdapterRecord struct {
	Worker     uint64
	ConfigID   uint64
	Placements []scoring.AdapterPlacement
}

// AdapterRecord encoding: "GRAD" version u8, worker u64, configID u64,
// count u16, then per placement adapter u64, replica u16, until i64.
const (
	adaptersHeaderLen = headerLen + 8 + 8 + 2
	placementLen      = 8 + 2 + 8
)

// AppendBinary appends a's versioned encoding to b; it fails, returning b,
// with more than MaxPlacements placements or a replica outside [0, 65535].
func (a *AdapterRecord) AppendBinary(b []byte) ([]byte, error) {
	if len(a.Placements) > MaxPlacements {
		return b, fail(ErrInvalid, "adapter placement count", int64(len(a.Placements)), "exceeds "+strconv.Itoa(MaxPlacements))
	}
	for _, p := range a.Placements {
		if p.Replica < 0 || p.Replica > 0xFFFF {
			return b, fail(ErrInvalid, "adapter placement replica", int64(p.Replica), "must be in [0, 65535]")
		}
	}
	b = appendHeader(b, magicAdapters)
	b = appendU64(b, a.Worker)
	b = appendU64(b, a.ConfigID)
	b = appendU16(b, uint16(len(a.Placements)))
	for _, p := range a.Placements {
		b = appendU64(b, p.Adapter)
		b = appendU16(b, uint16(p.Replica))
		b = appendU64(b, uint64(p.UntilNanos))
	}
	return b, nil
}

// Decode replaces a with the record encoded in b, reusing a.Placements'
// capacity. On error a is unchanged.
func (a *AdapterRecord) Decode(b []byte) error {
	r := reader{b: b}
	if err := r.header(magicAdapters, "adapters"); err != nil {
		return err
	}
	worker, cfg, n := r.u64(), r.u64(), int(r.u16())
	if r.short {
		return r.shortErr("adapters header")
	}
	if n > MaxPlacements {
		return fail(ErrInvalid, "adapter placement count", int64(n), "exceeds "+strconv.Itoa(MaxPlacements))
	}
	if r.left() != n*placementLen {
		if r.left() < n*placementLen {
			return fail(ErrShort, "adapter placement count", int64(n), "needs more bytes than the value has")
		}
		return fail(ErrInvalid, "adapters trailing bytes", int64(r.left()-n*placementLen), "must be 0")
	}
	a.Worker, a.ConfigID = worker, cfg
	a.Placements = a.Placements[:0]
	for range n {
		a.Placements = append(a.Placements, scoring.AdapterPlacement{
			Adapter: r.u64(), Replica: int(r.u16()), UntilNanos: int64(r.u64()),
		})
	}
	return nil
}
