package shared

import (
	"strconv"

	"github.com/gpuroute/gpuroute/scoring/le"
)

// KeyPrefixShare is the shared-data key of the PrefixShare. It names the
// encoding's version, and is not the key under which earlier builds shared
// the whole index encoding, so that during a module update the old and new
// VMs each keep their own instead of clearing each other's as unreadable
// (a writer that cannot read the value replaces it with a new base).
const KeyPrefixShare = "gpuroute/prefix-share/6"

// PrefixShare is the prefix index as the worker VMs of one Envoy share it:
// a base (a prefix.Index encoding) and a tail of the placements
// recorded since, in the order the workers appended them. A worker that
// already holds the base applies only the tail it has not seen; one whose
// generation differs decodes the base and the whole tail. A writer appends
// its placements to a copy of the value it read (one memory copy, then a
// few hundred bytes per dispatch), and only when the tail has outgrown the
// base does a worker encode its whole index as a new base of a new
// generation. That base continues the generation the writer read (Prev):
// it holds that base, its whole tail (PrevTail bytes) and the writer's new
// placements, and the new tail repeats the old one from byte PrevFrom (where
// the writer's previous merge left it: every worker that merged since is
// past it) before those placements. A worker that had applied the old tail
// up to a byte in [PrevFrom, PrevTail] keeps its own index and goes on at
// the same entry of the new tail rather than decoding the base; only a
// worker that fell behind (or joined) decodes it: decoding or encoding a
// base stalls a worker's event loop far longer than applying a tail
// (TestWorkersKeepIndexAcrossRebases), and with more workers the tail, and
// so the rebases, grow faster.
//
// Replica numbers (in the base and the tail) index the replica list that
// ConfigID names: a worker on another list (during a reload) neither
// applies the share nor appends to it.
//
// Encoding: "GRPX" version u8, generation u64, configuration id u64,
// previous generation u64,
// previous tail's repeated start u32 and length u32, base length u32, the
// base, then per tail entry replica u16, checkpoint count u16 (>= 1) and
// the checkpoints u64 (prefix.Index.AppendCheckpoints), to the end
// of the value.
type PrefixShare struct {
	// Gen identifies the base: a writer that replaces it picks a new one.
	Gen uint64
	// ConfigID is ConfigIDOf the replica list the replica numbers index.
	ConfigID uint64
	// Prev is the generation whose base and whole tail, PrevTail bytes,
	// this base holds (0: none); Tail begins with that tail's bytes from
	// PrevFrom on.
	Prev               uint64
	PrevFrom, PrevTail int
	// Base is the prefix index encoding; Tail the entries' encoding. Both
	// alias the decoded value.
	Base, Tail []byte
}

const (
	magicPrefixShare = "GRPX"
	// PrefixShareHeaderLen is the length of the fixed header before the base.
	PrefixShareHeaderLen = headerLen + 8 + 8 + 8 + 4 + 4 + 4
	offShareBaseLen      = headerLen + 8 + 8 + 8 + 4 + 4
)

// AppendPrefixShareHeader appends the header of a share of generation gen,
// numbered by the replica list configID names, with an empty base, continuing generation prev whose tail was prevTail
// bytes, repeated from byte prevFrom (prev 0: none; figures that are not
// 0 <= prevFrom <= prevTail < 2^32 make it none). Append the base's
// encoding next, then call SetPrefixShareBase, then the tail's entries:
// first the previous tail's from prevFrom on.
func AppendPrefixShareHeader(b []byte, gen, configID, prev uint64, prevFrom, prevTail int) []byte {
	if prev == 0 || prevFrom < 0 || prevFrom > prevTail || uint64(prevTail) > 1<<32-1 {
		prev, prevFrom, prevTail = 0, 0, 0
	}
	b = appendHeader(b, magicPrefixShare)
	b = appendU64(b, gen)
	b = appendU64(b, configID)
	b = appendU64(b, prev)
	b = appendU32(b, uint32(prevFrom))
	b = appendU32(b, uint32(prevTail))
	return appendU32(b, 0)
}

// SetPrefixShareBase declares everything after the header of the share
// that b starts with as its base (so it has no tail yet). It reports false
// when b is shorter than a header or the base longer than a u32 can say.
func SetPrefixShareBase(b []byte) bool {
	n := len(b) - PrefixShareHeaderLen
	if n < 0 || uint64(n) > 1<<32-1 {
		return false
	}
	b[offShareBaseLen] = byte(n)
	b[offShareBaseLen+1] = byte(n >> 8)
	b[offShareBaseLen+2] = byte(n >> 16)
	b[offShareBaseLen+3] = byte(n >> 24)
	return true
}

// AppendPrefixShareEntry appends one tail entry, a dispatch of checkpoints
// to replica, to b (a share, or a copy of one). An empty list or a replica
// outside [0, 65535] appends nothing; a list longer than 65535 keeps its
// first 65535 (each checkpoint covers the prompt up to it, so a prefix of
// the list is still a valid, shorter one).
func AppendPrefixShareEntry(b []byte, replica int, checkpoints []uint64) []byte {
	if len(checkpoints) == 0 || replica < 0 || replica > 0xFFFF {
		return b
	}
	if len(checkpoints) > 0xFFFF {
		checkpoints = checkpoints[:0xFFFF]
	}
	return appendChain(b, replica, checkpoints)
}

// Grown returns how many bytes of the tail were appended since the base was
// written: the tail less what it repeats of the previous generation's.
func (s *PrefixShare) Grown() int {
	if s.Prev == 0 {
		return len(s.Tail)
	}
	return max(len(s.Tail)-(s.PrevTail-s.PrevFrom), 0)
}

// Decode reads the header of the share encoded in b and checks that the
// base fits; Each checks the tail entries as it walks them. s aliases b.
func (s *PrefixShare) Decode(b []byte) error {
	r := reader{b: b}
	if err := r.header(magicPrefixShare, "prefix share"); err != nil {
		return err
	}
	gen, configID, prev := r.u64(), r.u64(), r.u64()
	prevFrom, prevTail, baseLen := r.u32(), r.u32(), r.u32()
	if r.short {
		return r.shortErr("prefix share header")
	}
	if prevFrom > prevTail {
		return fail(ErrInvalid, "prefix share previous tail start", int64(prevFrom), "exceeds its length "+strconv.FormatUint(uint64(prevTail), 10))
	}
	if prev == 0 && prevTail != 0 {
		return fail(ErrInvalid, "prefix share previous tail length", int64(prevTail), "must be 0 without a previous generation")
	}
	base := r.take(int(baseLen))
	if base == nil {
		return fail(ErrShort, "prefix share base length", int64(baseLen), "needs more bytes than the value has")
	}
	*s = PrefixShare{Gen: gen, ConfigID: configID, Prev: prev, PrevFrom: int(prevFrom), PrevTail: int(prevTail), Base: base, Tail: b[r.off:]}
	return nil
}

// Each calls fn for the tail entries after the first skip bytes of Tail (an
// offset a previous Each returned), oldest first, and returns the offset
// after the last one. The checkpoints passed to fn are decoded into
// scratch and valid only during the call; an entry with more checkpoints
// than scratch holds passes its first len(scratch). On a malformed entry
// Each stops and returns the offset of the entries it applied with the
// error.
func (s *PrefixShare) Each(skip int, scratch []uint64, fn func(replica int, checkpoints []uint64)) (int, error) {
	if skip < 0 || skip > len(s.Tail) {
		return 0, fail(ErrInvalid, "prefix share tail offset", int64(skip),
			"outside the tail of "+strconv.Itoa(len(s.Tail))+" bytes")
	}
	r := reader{b: s.Tail, off: skip}
	for r.left() > 0 {
		at := r.off
		replica, blocks, err := readChainHead(&r, "prefix share")
		if err != nil {
			return at, err
		}
		cps := scratch[:min(len(blocks)/8, len(scratch))]
		for k := range cps {
			cps[k] = le.Uint64(blocks, 8*k)
		}
		fn(replica, cps)
	}
	return r.off, nil
}
