package jsonx

// Tape entries are offsets tagged in the top bits; offsets above tapeOff
// are not recorded (the plugin's bodies are far smaller than 1 GiB).
const (
	tapeStart = 1 << 31 // first content byte of a string
	tapeEnd   = 1 << 30 // its closing quote
	tapeOff   = tapeEnd - 1
	// tapeMinBytes is the shortest escape-free string worth recording.
	tapeMinBytes = 64
)

// Tape records, during one validating pass, where the escapes and the end of
// each long or escaped string are, so that a second pass over the same bytes
// copies runs between known escapes instead of scanning for them again (see
// Reader.RecordTape and Reader.UseTape). It lives in caller storage and never
// grows: when full it stops recording, and strings it lacks are scanned as
// usual. The zero value records nothing; call Reset.
type Tape struct {
	ent  []uint32
	full bool
	cur  int // find's starting guess: reads move forward
}

// Reset empties the tape and makes buf (its capacity) its storage.
func (t *Tape) Reset(buf []uint32) {
	t.ent, t.full, t.cur = buf[:0], false, 0
}

// Len returns the number of entries recorded.
func (t *Tape) Len() int { return len(t.ent) }

// open starts recording the string whose contents start at i; it returns
// the start entry's index, or -1 when not recording.
func (t *Tape) open(i int) int {
	if t.full || i > tapeOff {
		return -1
	}
	if len(t.ent) == cap(t.ent) {
		t.full = true
		return -1
	}
	t.ent = append(t.ent, uint32(i)|tapeStart)
	return len(t.ent) - 1
}

// escape records an escape at k and returns the new mark (-1 if the tape
// filled up and the string was dropped).
func (t *Tape) escape(mark, k int) int {
	if mark < 0 {
		return -1
	}
	if len(t.ent) == cap(t.ent) {
		t.ent, t.full = t.ent[:mark], true
		return -1
	}
	t.ent = append(t.ent, uint32(k))
	return mark
}

// close records the closing quote at k of the string opened at mark.
func (t *Tape) close(mark, start, k int) {
	if mark < 0 {
		return
	}
	switch {
	case len(t.ent) == mark+1 && k-start < tapeMinBytes:
		t.ent = t.ent[:mark] // short and plain: scanning it is as cheap
	case len(t.ent) == cap(t.ent):
		t.ent, t.full = t.ent[:mark], true
	default:
		t.ent = append(t.ent, uint32(k)|tapeEnd)
	}
}

// abort drops the string opened at mark (it failed or was cut).
func (t *Tape) abort(mark int) {
	if mark >= 0 {
		t.ent = t.ent[:mark]
	}
}

// find returns the index of the start entry for contents starting at i.
// Entries are in increasing offset order (one forward pass).
func (t *Tape) find(i int) (int, bool) {
	lo := min(t.cur, len(t.ent))
	if lo > 0 && int(t.ent[lo-1]&tapeOff) >= i {
		// Behind the cursor (a re-read): binary search.
		lo = 0
		hi := len(t.ent)
		for lo < hi {
			m := int(uint(lo+hi) >> 1)
			if int(t.ent[m]&tapeOff) < i {
				lo = m + 1
			} else {
				hi = m
			}
		}
	} else {
		// Reads move forward through the prompt: step from the cursor,
		// falling back to bisection after a few entries.
		for n := 0; lo < len(t.ent) && int(t.ent[lo]&tapeOff) < i; lo++ {
			if n++; n == 8 {
				hi := len(t.ent)
				for lo < hi {
					m := int(uint(lo+hi) >> 1)
					if int(t.ent[m]&tapeOff) < i {
						lo = m + 1
					} else {
						hi = m
					}
				}
				break
			}
		}
	}
	t.cur = lo
	// An escape entry can share no offset with a start entry, but an end
	// entry can (an empty string's quote is its content start).
	for ; lo < len(t.ent) && int(t.ent[lo]&tapeOff) == i; lo++ {
		if t.ent[lo]&tapeStart != 0 {
			return lo, true
		}
	}
	return 0, false
}

// end returns the closing quote's offset of the string whose start entry is
// at e, and whether it has escapes; -1 if the tape is inconsistent.
func (t *Tape) end(e int) (int, bool) {
	for j := e + 1; j < len(t.ent); j++ {
		if t.ent[j]&tapeEnd != 0 {
			return int(t.ent[j] & tapeOff), j > e+1
		}
		if t.ent[j]&tapeStart != 0 {
			break
		}
	}
	return -1, false
}
