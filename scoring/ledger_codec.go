package scoring

import (
	"errors"
	"math"
	"strconv"
)

// Ledger binary encoding, version 1, little-endian:
//
//	header  (32 bytes): version u8, 0 u8, maxReplicas u16, maxInFlight u32,
//	        promptMean f64, outputMean f64, clock u32,
//	        flights u16, adapters u16
//	flight  (43 bytes): slot u32, gen u32, first u8, replica u16,
//	        dispatched i64 (in [0, maxDispatchNanos)), prefill u32,
//	        maxTokens u32, expect u32, streamed u32, key u64
//	adapter (18 bytes): adapter u64, replica u16, until i64
//	estimators: count u8, then (24 bytes) key u64, mean f64, n u32, stamp u32
//
// Per-replica aggregates are not encoded: decoding recomputes them, so a
// decoded ledger is consistent by construction. Neither is the timing of
// queued prefills (prefillGroups): a decoded ledger counts them in full
// until their first tokens. Flight handles stay valid
// across an encode/decode round trip into a ledger of the same size.
const (
	ledgerVersion   = 1
	ledgerHeaderLen = 32
	ledgerFlightLen = 43
	ledgerAdaptLen  = 18
	ledgerEstLen    = 24
	// maxDispatchNanos bounds a decoded dispatch time (Unix nanoseconds,
	// the year 2116): a flight stamped further in the future would outlive
	// every Sweep and count as load forever.
	maxDispatchNanos = 1 << 62
)

// EncodedLen returns the length of the ledger's binary encoding.
func (l *Ledger) EncodedLen() int {
	return ledgerHeaderLen + ledgerFlightLen*l.InFlight() + ledgerAdaptLen*len(l.adapt) + 1 + ledgerEstLen*len(l.est)
}

// AppendBinary appends the ledger's versioned binary encoding to b, for
// sharing across worker VMs through proxy-wasm shared data.
func (l *Ledger) AppendBinary(b []byte) ([]byte, error) {
	b = append(b, ledgerVersion, 0)
	b = appendLE16(b, uint16(len(l.reps)))
	b = appendLE32(b, uint32(len(l.flights)))
	b = appendLE64(b, math.Float64bits(l.promptMean))
	b = appendLE64(b, math.Float64bits(l.outputMean))
	b = appendLE32(b, l.clock)
	b = appendLE16(b, uint16(l.InFlight()))
	b = appendLE16(b, uint16(len(l.adapt)))
	for i := range l.flights {
		f := &l.flights[i]
		if !f.used {
			continue
		}
		b = appendLE32(b, uint32(i))
		b = appendLE32(b, f.gen)
		first := byte(0)
		if f.first {
			first = 1
		}
		b = append(b, first)
		b = appendLE16(b, uint16(f.replica))
		b = appendLE64(b, uint64(f.dispatched))
		b = appendLE32(b, sat32(f.prefill))
		b = appendLE32(b, sat32(f.maxTokens))
		b = appendLE32(b, sat32(f.expect))
		b = appendLE32(b, sat32(f.streamed))
		b = appendLE64(b, f.key)
	}
	for _, a := range l.adapt {
		b = appendLE64(b, a.adapter)
		b = appendLE16(b, uint16(a.replica))
		b = appendLE64(b, uint64(a.until))
	}
	b = append(b, byte(len(l.est)))
	for _, e := range l.est {
		b = appendLE64(b, e.key)
		b = appendLE64(b, math.Float64bits(e.mean))
		b = appendLE32(b, e.n)
		b = appendLE32(b, e.stamp)
	}
	return b, nil
}

func sat32(x int64) uint32 { return uint32(min(max(x, 0), math.MaxUint32)) }

// UnmarshalBinary replaces the ledger's state with the encoded one. The
// ledger keeps its Params and must have the same replica and in-flight
// bounds as the encoder (NewLedger with the same sizes). On error the
// ledger is left empty (learned estimates included).
func (l *Ledger) UnmarshalBinary(b []byte) error {
	if err := l.decode(b); err != nil {
		l.Reset()
		l.est = l.est[:0]
		l.promptMean, l.outputMean, l.clock = 0, 0, 0
		return err
	}
	return nil
}

func ledgerErr(what string, got, want int) error {
	return errors.New("scoring: ledger encoding " + what + " must be " + strconv.Itoa(want) + ", got " + strconv.Itoa(got))
}

func (l *Ledger) decode(b []byte) error {
	if len(b) < ledgerHeaderLen+1 {
		return errors.New("scoring: ledger encoding too short: " + strconv.Itoa(len(b)) + " bytes")
	}
	if b[0] != ledgerVersion {
		return ledgerErr("version", int(b[0]), ledgerVersion)
	}
	if n := int(le16(b[2:])); n != len(l.reps) {
		return ledgerErr("max replicas", n, len(l.reps))
	}
	if n := int(le32(b[4:])); n != len(l.flights) {
		return ledgerErr("max in flight", n, len(l.flights))
	}
	pm, om := math.Float64frombits(le64(b[8:])), math.Float64frombits(le64(b[16:]))
	if !(pm >= 0 && pm < 1e9) || !(om >= 0 && om < 1e9) {
		return errors.New("scoring: ledger encoding means out of range: " + ftoa(pm) + ", " + ftoa(om))
	}
	clock := le32(b[24:])
	nf, na := int(le16(b[28:])), int(le16(b[30:]))
	if nf > len(l.flights) || na > ledgerAdapterSlots {
		return errors.New("scoring: ledger encoding holds " + strconv.Itoa(nf) + " flights and " + strconv.Itoa(na) + " adapters, over its bounds")
	}
	b = b[ledgerHeaderLen:]
	need := nf*ledgerFlightLen + na*ledgerAdaptLen + 1
	if len(b) < need {
		return ledgerErr("length", len(b)+ledgerHeaderLen, need+ledgerHeaderLen)
	}
	ne := int(b[need-1])
	if ne > ledgerEstimators || len(b) != need+ne*ledgerEstLen {
		return ledgerErr("length", len(b)+ledgerHeaderLen, need+ne*ledgerEstLen+ledgerHeaderLen)
	}

	l.Reset()
	l.promptMean, l.outputMean, l.clock = pm, om, clock
	l.free = l.free[:0]
	for i := 0; i < nf; i++ {
		e := b[i*ledgerFlightLen:]
		slot := int(le32(e))
		rep := int(le16(e[9:]))
		if slot >= len(l.flights) || l.flights[slot].used {
			return errors.New("scoring: ledger encoding flight slot " + strconv.Itoa(slot) + " out of range or repeated")
		}
		if rep >= len(l.reps) {
			return ledgerErr("flight replica bound", rep, len(l.reps)-1)
		}
		if d := int64(le64(e[11:])); d < 0 || d >= maxDispatchNanos {
			return errors.New("scoring: ledger encoding flight dispatch time " + strconv.FormatInt(d, 10) + " out of [0, 2^62)")
		}
		f := &l.flights[slot]
		*f = flight{
			gen:        le32(e[4:]),
			used:       true,
			first:      e[8] != 0,
			replica:    int32(rep),
			dispatched: int64(le64(e[11:])),
			prefill:    int64(le32(e[19:])),
			maxTokens:  int64(le32(e[23:])),
			expect:     int64(le32(e[27:])),
			streamed:   int64(le32(e[31:])),
			key:        le64(e[35:]),
		}
		f.remaining = remainingOf(f)
		f.at = int32(len(l.live))
		l.live = append(l.live, int32(slot))
		r := &l.reps[rep]
		if f.dispatched > r.syncedSnap { // syncedSnap is 0 after Reset
			r.UnseenN++
			r.UnseenTokens += f.prefill
		}
		if f.first {
			r.DecodeN++
			r.DecodeTokens += f.remaining
		} else {
			r.QueuedN++
			r.QueuedTokens += f.prefill
			// The encoding carries no prefill timing: every queued
			// flight joins one running group whose start is unknown,
			// so Pick counts it in full until its first tokens.
			g := &r.prefillGroups
			f.group = g.run
			g.runN++
			g.runTokens += f.prefill
			g.runSq += float64(f.prefill) * float64(f.prefill)
			g.runN0, g.runTok0, g.runSq0 = g.runN, g.runTokens, g.runSq
		}
	}
	for i := len(l.flights) - 1; i >= 0; i-- {
		if !l.flights[i].used {
			l.free = append(l.free, int32(i))
		}
	}
	// Unseen work was counted against snapshot time 0; Pick recomputes it
	// against each replica's real snapshot time.
	b = b[nf*ledgerFlightLen:]
	for i := 0; i < na; i++ {
		e := b[i*ledgerAdaptLen:]
		rep := int(le16(e[8:]))
		if rep >= len(l.reps) {
			return ledgerErr("adapter replica bound", rep, len(l.reps)-1)
		}
		l.adapt = append(l.adapt, adapterMem{adapter: le64(e), replica: int32(rep), until: int64(le64(e[10:]))})
	}
	b = b[na*ledgerAdaptLen+1:]
	l.est = l.est[:0]
	for i := 0; i < ne; i++ {
		e := b[i*ledgerEstLen:]
		m := math.Float64frombits(le64(e[8:]))
		if !(m >= 0 && m < 1e9) {
			return errors.New("scoring: ledger encoding estimate out of range: " + ftoa(m))
		}
		l.est = append(l.est, outputEst{key: le64(e), mean: m, n: le32(e[16:]), stamp: le32(e[20:])})
	}
	return nil
}
