package shared

// KeySuspects holds the passive health state of the replicas (Suspect),
// which every worker VM reads when a stream starts and updates with CAS.
const KeySuspects = "gpuroute/suspect"

// Suspect is one replica's passive health state: what routed requests'
// responses said about it. The zero value is a replica with nothing
// against it.
type Suspect struct {
	// Failures counts consecutive failed requests since the last success
	// or ejection.
	Failures uint16
	// Ejections counts ejections since the last success (the backoff
	// doubles with each).
	Ejections uint8
	// BadNanos is the time of the latest failure or interruption: newer
	// than every good scrape and success, it makes the replica uncertain.
	BadNanos int64
	// UntilNanos is when the current ejection ends (0: none).
	UntilNanos int64
}

// Suspects encoding: version u8 (suspectsVersion), configuration id u64,
// count u32, then per non-zero entry: index u32, failures u16, ejections
// u8, bad time i64, ejected-until time i64. It has no magic: it predates
// the other records' header, and only this key holds it.
const (
	suspectsVersion     = 1
	suspectsHeaderBytes = 1 + 8 + 4
	suspectEntryBytes   = 4 + 2 + 1 + 8 + 8
)

// AppendSuspects appends the encoding of entries (index-aligned with the
// replica list configID names) to b; only the non-zero entries are
// stored, so the value is a few bytes in steady state.
func AppendSuspects(b []byte, configID uint64, entries []Suspect) []byte {
	b = append(b, suspectsVersion)
	b = appendU64(b, configID)
	at := len(b)
	b = appendU32(b, 0)
	n := uint32(0)
	for i := range entries {
		e := &entries[i]
		if *e == (Suspect{}) {
			continue
		}
		b = appendU32(b, uint32(i))
		b = appendU16(b, e.Failures)
		b = append(b, e.Ejections)
		b = appendU64(b, uint64(e.BadNanos))
		b = appendU64(b, uint64(e.UntilNanos))
		n++
	}
	putLE32(b[at:], n)
	return b
}

// DecodeSuspects fills entries (zeroed first) from v. A value of another
// version or configuration, or malformed, leaves them all zero and
// reports false; entries naming an index out of range are skipped.
func DecodeSuspects(v []byte, configID uint64, entries []Suspect) bool {
	clear(entries)
	r := reader{b: v}
	version, cfg, n := r.u8(), r.u64(), r.u32()
	if r.short || version != suspectsVersion || cfg != configID || uint64(r.left()) != uint64(n)*suspectEntryBytes {
		return false
	}
	for range n {
		i := r.u32()
		e := Suspect{Failures: r.u16(), Ejections: r.u8(), BadNanos: int64(r.u64()), UntilNanos: int64(r.u64())}
		if uint64(i) < uint64(len(entries)) {
			entries[i] = e
		}
	}
	return true
}
