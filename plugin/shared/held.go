package shared

import "strconv"

// The messages the worker VMs' flow control sends each other on their wake
// queues (proxy shared queues, one per worker, named WakeQueue): a notice of
// what the sender holds, and a wake asking the receiver to release.
const (
	magicHeld = "GRHN"
	magicWake = "GRWU"
	// WakeQueuePrefix starts each worker's wake queue name, followed by its
	// id in 16 lowercase hex digits.
	WakeQueuePrefix = "gpuroute/wake/"
	// NoBand is HeldNotice.TopBand when the sender holds nothing.
	NoBand = -1
	// maxBand bounds a notice's band (the flow package's MaxBands).
	maxBand = 255
)

// WakeQueue returns worker's wake queue name; it allocates, so call it
// once per worker.
func WakeQueue(worker uint64) string {
	return string(appendWorkerKey(make([]byte, 0, len(WakeQueuePrefix)+16), WakeQueuePrefix, worker))
}

// HeldNotice says how many requests a worker holds for capacity, the
// highest band among them and when the oldest of that band was held.
type HeldNotice struct {
	Worker      uint64
	Held        uint32
	TopBand     int   // NoBand when Held is 0
	OldestNanos int64 // the writer's clock
}

// AppendBinary appends n's encoding to b ("GRHN" version u8, worker u64,
// held u32, top band u8 (0xff: none), oldest i64 (>= 0)); it fails, returning b, when the
// band and the count disagree or the band or time are out of range.
func (n *HeldNotice) AppendBinary(b []byte) ([]byte, error) {
	if (n.Held == 0) != (n.TopBand == NoBand) || n.TopBand < NoBand || n.TopBand >= maxBand || n.OldestNanos < 0 {
		return b, fail(ErrInvalid, "held notice band", int64(n.TopBand), "must be "+strconv.Itoa(NoBand)+
			" exactly when nothing is held, else in [0, "+strconv.Itoa(maxBand)+"), with a time >= 0")
	}
	b = appendHeader(b, magicHeld)
	b = appendU64(b, n.Worker)
	b = appendU32(b, n.Held)
	band := byte(0xff)
	if n.TopBand != NoBand {
		band = byte(n.TopBand)
	}
	b = append(b, band)
	return appendU64(b, uint64(n.OldestNanos)), nil
}

// Decode replaces n with the notice in b; on error n is unchanged.
func (n *HeldNotice) Decode(b []byte) error {
	r := reader{b: b}
	if err := r.header(magicHeld, "held notice"); err != nil {
		return err
	}
	worker, held, band, oldest := r.u64(), r.u32(), r.u8(), int64(r.u64())
	if r.short {
		return r.shortErr("held notice")
	}
	if err := r.end("held notice"); err != nil {
		return err
	}
	top := int(band)
	if band == 0xff {
		top = NoBand
	}
	if (held == 0) != (top == NoBand) || oldest < 0 {
		return fail(ErrInvalid, "held notice count", int64(held), "disagrees with its band "+strconv.Itoa(top)+" or time")
	}
	*n = HeldNotice{Worker: worker, Held: held, TopBand: top, OldestNanos: oldest}
	return nil
}

// AppendWake appends a wake from worker to b (encoding: "GRWU" version u8,
// sender worker u64).
func AppendWake(b []byte, worker uint64) []byte {
	return appendU64(appendHeader(b, magicWake), worker)
}

// IsWake reports whether b is a wake message.
func IsWake(b []byte) bool {
	r := reader{b: b}
	if r.header(magicWake, "wake") != nil {
		return false
	}
	r.u64()
	return !r.short && r.left() == 0
}
