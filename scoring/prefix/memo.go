package prefix

import "github.com/gpuroute/gpuroute/scoring/le"

// Memo remembers what writing a few long texts did to a Hasher,
// keyed by each text's source (the encoded form it was decoded from, such
// as a JSON string's raw contents) and by the hasher's state before it, so
// that the same source met again from the same state is applied without
// decoding and hashing it again. The traffic a prefix-aware router exists
// for repeats long texts: a shared system prompt, an agent's tool manifest,
// a RAG document, every earlier turn of a conversation. Decoding and
// hashing those is most of a long request's parse; comparing the source
// with the remembered copy costs a fraction of it, and applying the step
// is O(blocks) (BenchmarkMemoReplay32KB).
//
// A replay is exact: it leaves the hasher as writing the text would, or it
// does nothing. It needs the source bytes equal (compared in full, not by
// a hash, so no crafted body can pose as another), the same block size, the
// same unseeded chain value and the same partial block before the text, and
// room in the chain for every block the text completes.
//
// The memo holds at most its byte budget of sources; the least recently
// used step goes first. Steps are recorded only while the hasher's chain is
// unseeded (ResetDeferred, as the router parses), because the chain's keyed
// entries do not give back the unseeded values a replay under another seed
// needs. Not safe for concurrent use; the zero value is off until Init.
type Memo struct {
	h        *Hasher
	steps    []memoStep
	budget   int // source bytes held at most (the slots' capacity)
	held     int // source bytes held
	minBytes int // shorter sources are not worth a step
	clock    uint64
	replays  uint64

	// Set by Begin, read by End.
	began      bool
	fromPrev   uint64
	fromChars  int64
	fromBlocks int
	fromTail   []byte
}

// memoStep is one remembered write: from (prev, tail) with src's text to
// (toPrev, toTail), appending raws (unseeded) and chars characters.
type memoStep struct {
	src        []byte
	blockChars int
	fromPrev   uint64
	fromTail   []byte
	toPrev     uint64
	toTail     []byte
	chars      int64
	raws       []uint64
	used       uint64 // clock of the last record or replay; 0: empty
	stamp      uint64 // clock of the record: Match's tokens name it
}

// Memo sizing defaults.
const (
	// DefaultMemoSteps is how many texts a memo remembers: a few system
	// prompts and the long turns of the conversations in flight.
	DefaultMemoSteps = 16
	// DefaultMemoBudgetBytes bounds the sources held (512 KiB per VM;
	// their block hashes add an eighth at 64-character blocks).
	DefaultMemoBudgetBytes = 512 << 10
	// maxMemoSteps bounds the slots: a Match token holds the slot in a byte.
	maxMemoSteps = 255
	// DefaultMemoMinBytes is the shortest source worth remembering: below
	// a few KB decoding costs about what the memo's own checks and copies do.
	DefaultMemoMinBytes = 4 << 10
)

// Init attaches the memo to h and sizes it: steps slots (0:
// DefaultMemoSteps), budgetBytes of sources (0: DefaultMemoBudgetBytes),
// sources shorter than minBytes (0: DefaultMemoMinBytes) not remembered. It
// forgets everything.
func (m *Memo) Init(h *Hasher, steps, budgetBytes, minBytes int) {
	if steps <= 0 {
		steps = DefaultMemoSteps
	}
	steps = min(steps, maxMemoSteps)
	if budgetBytes <= 0 {
		budgetBytes = DefaultMemoBudgetBytes
	}
	if minBytes <= 0 {
		minBytes = DefaultMemoMinBytes
	}
	m.h, m.steps = h, make([]memoStep, steps)
	m.budget, m.held, m.minBytes, m.clock, m.began = budgetBytes, 0, minBytes, 0, false
}

// Write writes text to the hasher: the memo is the hasher's writer for a
// parser that offers it long strings (plugin/openai's Memo).
func (m *Memo) Write(p []byte) (int, error) { return m.h.Write(p) }

// MemoMinBytes returns the shortest source the memo remembers (0 when off).
func (m *Memo) MemoMinBytes() int {
	if len(m.steps) == 0 {
		return 0
	}
	return m.minBytes
}

// Begin notes the hasher's state before a text whose source End may
// remember.
func (m *Memo) Begin() {
	h := m.h
	m.began = len(m.steps) > 0 && !h.seeded && h.blockChars > 0
	if !m.began {
		return
	}
	m.fromPrev, m.fromChars, m.fromBlocks = h.prev, h.chars, len(h.chain)
	m.fromTail = append(m.fromTail[:0], h.buf[:h.fill]...)
}

// End remembers the step the hasher took since Begin as the text of src.
// It records nothing for a short or over-budget source, when the hasher was
// seeded meanwhile, or when its chain hit its bound (the step would not be
// exact).
func (m *Memo) End(src []byte) {
	if !m.began {
		return
	}
	h := m.h
	m.began = false
	chars := h.chars - m.fromChars
	added := len(h.chain) - m.fromBlocks
	if len(src) < m.minBytes || len(src) > m.budget || h.seeded || added < 0 ||
		int64(added) != (int64(len(m.fromTail))+chars)/int64(h.blockChars) {
		return
	}
	s := m.victim(len(src))
	m.clock++
	s.stamp = m.clock
	s.src = append(s.src[:0], src...)
	s.blockChars, s.fromPrev, s.toPrev, s.chars, s.used = h.blockChars, m.fromPrev, h.prev, chars, m.clock
	s.fromTail = append(s.fromTail[:0], m.fromTail...)
	s.toTail = append(s.toTail[:0], h.buf[:h.fill]...)
	s.raws = append(s.raws[:0], h.chain[m.fromBlocks:]...)
}

// victim returns the slot a new source of n bytes goes in, the least
// recently used (an empty one first), after emptying the next least recently
// used until n fits the budget. The budget counts the slots' capacity, not
// their length, so that it bounds the memory held: a slot keeps its array
// for the next source that fits it, and one that is too small is replaced.
func (m *Memo) victim(n int) *memoStep {
	s := m.oldest(nil)
	if cap(s.src) < n {
		m.held -= cap(s.src)
		s.src = nil
	}
	for s.src == nil && m.held+n > m.budget {
		old := m.oldest(s)
		if old == nil {
			break
		}
		m.held -= cap(old.src)
		old.src, old.used = nil, 0
	}
	if s.src == nil {
		s.src = make([]byte, 0, n)
		m.held += n
	}
	return s
}

// oldest returns the least recently used slot other than not, among those
// holding an array when not is given (nil when there is none).
func (m *Memo) oldest(not *memoStep) *memoStep {
	var o *memoStep
	for i := range m.steps {
		s := &m.steps[i]
		if s == not || not != nil && s.src == nil {
			continue
		}
		if o == nil || s.used < o.used {
			o = s
		}
	}
	return o
}

// Recall applies to the hasher the remembered step whose source rest begins
// with, followed by the byte end (a JSON string's closing quote: a source is
// whole contents, so the byte after it ends it). It returns the source's
// length and the characters written, or ok false having changed nothing.
// A token from Match for these very bytes (the same place of the same
// input, nothing recorded since) stands for their comparison, which is not
// made again; 0 is no token.
func (m *Memo) Recall(rest []byte, end byte, token uint64) (srcLen, chars int, ok bool) {
	h := m.h
	if len(m.steps) == 0 || len(rest) < m.minBytes || h.blockChars == 0 {
		return 0, 0, false
	}
	for i := range m.steps {
		s := &m.steps[i]
		n := len(s.src)
		matched := token != 0 && token == s.token(i)
		if s.used == 0 || n >= len(rest) || rest[n] != end || s.fromPrev != h.prev ||
			s.blockChars != h.blockChars || len(s.fromTail) != h.fill ||
			len(h.chain)+len(s.raws) > min(h.maxBlocks, cap(h.chain)) ||
			!SameBytes(s.fromTail, h.buf[:h.fill]) || !matched && !sameSource(s.src, rest[:n]) {
			continue
		}
		m.clock++
		m.replays++
		s.used = m.clock
		start := len(h.chain)
		h.chain = append(h.chain, s.raws...)
		if h.seeded {
			for j, c := start, h.chain; j < len(c); j++ {
				c[j] = Finalize(c[j] ^ h.seed)
			}
		}
		h.prev, h.chars = s.toPrev, h.chars+s.chars
		h.fill = copy(h.buf[:], s.toTail)
		return n, int(s.chars), true
	}
	return 0, 0, false
}

// Replays returns how many texts Recall has replayed.
func (m *Memo) Replays() uint64 { return m.replays }

// Match reports whether rest begins with a remembered source followed by
// end, whatever the hasher's state, and returns the source's length and a
// token for Recall. A parser that meets a text before it can write what
// precedes it (a chat message's content before its role) passes over the
// text with Match and replays it later with the token, without comparing
// the text twice.
func (m *Memo) Match(rest []byte, end byte) (srcLen int, token uint64, ok bool) {
	if len(m.steps) == 0 || len(rest) < m.minBytes {
		return 0, 0, false
	}
	for i := range m.steps {
		s := &m.steps[i]
		if n := len(s.src); s.used != 0 && n < len(rest) && rest[n] == end && sameSource(s.src, rest[:n]) {
			return n, s.token(i), true
		}
	}
	return 0, 0, false
}

// token names step s, slot i, as recorded: a later record in the slot
// makes it another step.
func (s *memoStep) token(i int) uint64 { return s.stamp<<8 | uint64(i+1) }

// sameSource reports whether a remembered source src equals text. The
// texts a memo holds are often one template (a system prompt that ends
// with the user's name, the date or a retrieved passage, often of one
// length), so it tries a few words spread over them, then the last KB,
// before comparing the rest from the start: comparing each from the start
// to a difference near its end would make a miss among a memo of such
// texts cost more than decoding one (BenchmarkMemoMissTemplated). A
// template that varies only in the middle still costs a comparison up to
// the difference for each text it matches that far.
func sameSource(src, text []byte) bool {
	n := len(src)
	if n != len(text) {
		return false
	}
	if n >= 64 {
		for _, at := range [...]int{n - 8, n / 2 &^ 7, n / 4 &^ 7, n * 3 / 4 &^ 7} {
			if le.Uint64(src, at) != le.Uint64(text, at) {
				return false
			}
		}
	}
	tail := max(n-1024, 0)
	return SameBytes(src[tail:], text[tail:]) && SameBytes(src[:tail], text[:tail])
}

// SameBytes reports whether a and b are equal, 128 bytes a step: on wasm
// bytes.Equal (and comparing strings) runs Go's byte-at-a-time memequal
// (internal/bytealg's equal_wasm.s), and each step of a loop is a jump
// (docs/performance.md "Go on wasm", BenchmarkSameBytes). The plugin
// compares prompt and event bytes with it.
func SameBytes(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for len(a) >= 128 {
		x, y := a[:128:128], b[:128:128]
		d := (le.Uint64(x, 0) ^ le.Uint64(y, 0)) | (le.Uint64(x, 8) ^ le.Uint64(y, 8)) |
			(le.Uint64(x, 16) ^ le.Uint64(y, 16)) | (le.Uint64(x, 24) ^ le.Uint64(y, 24)) |
			(le.Uint64(x, 32) ^ le.Uint64(y, 32)) | (le.Uint64(x, 40) ^ le.Uint64(y, 40)) |
			(le.Uint64(x, 48) ^ le.Uint64(y, 48)) | (le.Uint64(x, 56) ^ le.Uint64(y, 56)) |
			(le.Uint64(x, 64) ^ le.Uint64(y, 64)) | (le.Uint64(x, 72) ^ le.Uint64(y, 72)) |
			(le.Uint64(x, 80) ^ le.Uint64(y, 80)) | (le.Uint64(x, 88) ^ le.Uint64(y, 88)) |
			(le.Uint64(x, 96) ^ le.Uint64(y, 96)) | (le.Uint64(x, 104) ^ le.Uint64(y, 104)) |
			(le.Uint64(x, 112) ^ le.Uint64(y, 112)) | (le.Uint64(x, 120) ^ le.Uint64(y, 120))
		if d != 0 {
			return false
		}
		a, b = a[128:], b[128:]
	}
	// The rest by words, the last one overlapping what was compared, not
	// by bytes: a streamed token event compared with its template is
	// mostly rest (BenchmarkSameBytes/150).
	if n := len(a); n >= 8 {
		for i := 0; i < n-8; i += 8 {
			if le.Uint64(a, i) != le.Uint64(b, i) {
				return false
			}
		}
		return le.Uint64(a, n-8) == le.Uint64(b, n-8)
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
