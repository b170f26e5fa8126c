package prefix

import (
	"io"
	"math/bits"

	"github.com/gpuroute/gpuroute/scoring/le"
)

// Prefix hashing defaults.
const (
	// DefaultBlockChars is the default characters per block: vLLM's 16-token
	// KV block × ~4 characters per token (docs/design.md "Prefix
	// identity"), also llm-d's 64-character prefix block.
	DefaultBlockChars = 64
	// CharsPerToken converts characters to estimated tokens without a
	// tokenizer (OpenAI's rule of thumb for English text).
	CharsPerToken = 4
	// MaxBlockChars bounds the block size (the hasher buffers one block).
	MaxBlockChars = 4096
	// DefaultMaxBlocks bounds the chain (128k characters at 64-char blocks).
	DefaultMaxBlocks = 2048
)

// Hasher cuts prompt text into fixed-size character blocks and hashes
// them as a chain: block i's hash covers blocks 0..i and the seed (model and
// adapter), so equal hashes at position i mean equal prefixes of i+1 blocks
// for the same model and adapter. Only full blocks count: a server caches
// whole KV blocks.
//
// The chain is computed in two steps so that the seed may come last: the
// text is hashed as an unseeded chain raw_i = Finalize(raw_{i-1} ^
// blockHash(block_i)) from a fixed start, and each entry is keyed with the
// seed, key_i = Finalize(raw_i ^ seed), as soon as the seed is known. A JSON
// body can name its model after the prompt (the OpenAI Python SDK sends
// "model" after "messages"), so a parser can stream the prompt in one pass
// (ResetDeferred) and key the chain afterwards (SetSeed) at O(blocks), not
// O(bytes). Keyed entries of different seeds differ, so a prefix cached for
// one adapter is still no hit for another.
//
// blockHash does not depend on raw_{i-1}: only the combine step is serial.
// Feeding raw_{i-1} into a block's hash would make every block wait for
// the previous one's whole hash, a chain of dependent multiplies; with
// independent block hashes an out-of-order CPU overlaps the blocks and
// only the combine's fmix (two multiplies) is on the chain, so the hasher
// is bound by the multiplier's throughput (BenchmarkPrefixHash32KB).
//
// The values are compared across VMs and gateways of the same build only;
// a module swap that changes this function costs one round of cold prefixes
// (the index and peers' checkpoints hold the old values until they age out).
//
// It is an io.Writer so a JSON parser can stream unescaped text segments
// into it. Not safe for concurrent use. The zero value uses the defaults on
// first Reset or Write (Init allocates the chain). After the chain reaches
// its capacity, Write stops allocating and Reset keeps the buffer, so
// steady-state use allocates nothing.
type Hasher struct {
	blockChars int
	maxBlocks  int
	seed       uint64
	seeded     bool   // chain entries are keyed with seed
	prev       uint64 // unseeded hash of the last full block (or the start)
	chars      int64  // total characters written
	fill       int    // bytes in buf
	chain      []uint64
	buf        [MaxBlockChars]byte
}

var _ io.Writer = (*Hasher)(nil)

// Init sets the block size (clamped to [8, MaxBlockChars]; 0 means
// DefaultBlockChars) and the maximum chain length (0 means
// DefaultMaxBlocks), allocates the chain, and resets for the base model "".
func (h *Hasher) Init(blockChars, maxBlocks int) {
	if blockChars == 0 {
		blockChars = DefaultBlockChars
	}
	blockChars = min(max(blockChars, 8), MaxBlockChars)
	if maxBlocks <= 0 {
		maxBlocks = DefaultMaxBlocks
	}
	h.blockChars, h.maxBlocks = blockChars, maxBlocks
	if cap(h.chain) < maxBlocks {
		h.chain = make([]uint64, 0, maxBlocks)
	}
	h.Reset("", "")
}

// Reset starts a new prompt for model and adapter (the chain's seed: a
// prefix cached for one adapter is no hit for another).
func (h *Hasher) Reset(model, adapter string) {
	h.ResetDeferred()
	h.SetSeed(model, adapter)
}

// ResetDeferred starts a new prompt whose model and adapter are not known
// yet: Chain holds unseeded hashes until SetSeed keys them.
func (h *Hasher) ResetDeferred() {
	if h.blockChars == 0 {
		h.Init(0, 0) // the zero value: default sizes
	}
	h.seed, h.seeded = 0, false
	h.prev = Finalize(uint64(h.blockChars) * mixK0) // the unseeded chain's start
	h.chars, h.fill = 0, 0
	h.chain = h.chain[:0]
}

// SetSeed keys the chain with model and adapter: the blocks written so far
// at once (one mix each), later ones as they fill. Calling it again re-keys
// nothing: the first seed of a prompt stays.
func (h *Hasher) SetSeed(model, adapter string) {
	if h.blockChars == 0 {
		h.ResetDeferred() // the zero value: default sizes, no seed yet
	}
	if h.seeded {
		return
	}
	h.seed = Finalize(HashString(model) ^ bitsRot(HashString(adapter), 23) ^ uint64(h.blockChars))
	h.seeded = true
	c, s := h.chain, h.seed
	// Eight a step: on wasm each step of a loop is a jump
	// (docs/performance.md "Go on wasm"), and a long prompt has hundreds
	// of blocks.
	for len(c) >= 8 {
		q := c[:8:8]
		q[0], q[1], q[2], q[3] = Finalize(q[0]^s), Finalize(q[1]^s), Finalize(q[2]^s), Finalize(q[3]^s)
		q[4], q[5], q[6], q[7] = Finalize(q[4]^s), Finalize(q[5]^s), Finalize(q[6]^s), Finalize(q[7]^s)
		c = c[8:]
	}
	for i := range c {
		c[i] = Finalize(c[i] ^ s)
	}
}

func bitsRot(x uint64, k uint) uint64 { return x<<k | x>>(64-k) }

// Write adds prompt text. It never fails.
func (h *Hasher) Write(p []byte) (int, error) {
	if h.blockChars == 0 {
		h.Init(0, 0)
	}
	n := len(p)
	h.chars += int64(n)
	bc := h.blockChars
	if h.fill > 0 {
		c := copy(h.buf[h.fill:bc], p)
		h.fill += c
		p = p[c:]
		if h.fill < bc {
			return n, nil
		}
		h.blocks(h.buf[:bc])
		h.fill = 0
	}
	if len(p) >= bc {
		// Unsigned: Go's wasm backend calls runtime.wasmDiv for a signed
		// division (its MinInt64 / -1 case); both are non-negative.
		whole := len(p) - int(uint(len(p))%uint(bc))
		h.blocks(p[:whole])
		p = p[whole:]
	}
	h.fill = copy(h.buf[:], p)
	return n, nil
}

// blocks hashes whole blocks straight from p (len(p) a multiple of the
// block size), with the chain state in locals: a call per block and the
// fields reloaded around it would cost on wasm as much as the hashing.
//
// Each block's hash is computed without prev, so consecutive iterations
// overlap; the only serial step is raw = Finalize(prev ^ bh). That keeps
// distinct prefixes distinct: fmix is a bijection, so with equal prev a
// different block (bh' != bh) gives a different raw, and equal later
// blocks keep raws that differ different. Chains that already differ meet
// again only if prev ^ prev' equals bh ^ bh' exactly, and prev, an fmix
// output, bears no relation to the text, so that is a 2^-64 chance per
// block for text not built to collide. The nonlinear step also makes order
// count: with an order-free combine (prev ^ bh, prev + bh) two swapped
// blocks would collide for sure; here the swapped chains differ from the
// first swapped block on and meet only by the same 2^-64 chance.
//
// The 64-byte default is blockHash written out straight (TestPrefixHasherBlocks
// checks they agree): no loop back-edge or call per block, and the entry
// keyed by a select, not a branch on seeded, the shapes the wasm compiler
// runs fastest (docs/performance.md "Go on wasm", BenchmarkPrefixHash32KB).
func (h *Hasher) blocks(p []byte) {
	bc := h.blockChars
	start := len(h.chain)
	n := min(int(uint(len(p))/uint(bc)), h.maxBlocks-start, cap(h.chain)-start)
	if n <= 0 {
		return
	}
	chain := h.chain[start : start+n]
	prev, seed, seeded := h.prev, h.seed, h.seeded
	for i := range chain {
		var bh uint64
		if bc == 64 {
			b := p[:64:64]
			l0 := mixWord(mixWord(laneK0, le.Uint64(b, 0)), le.Uint64(b, 32))
			l1 := mixWord(mixWord(laneK1, le.Uint64(b, 8)), le.Uint64(b, 40))
			l2 := mixWord(mixWord(laneK2, le.Uint64(b, 16)), le.Uint64(b, 48))
			l3 := mixWord(mixWord(laneK3, le.Uint64(b, 24)), le.Uint64(b, 56))
			bh = joinLanes(l0, l1, l2, l3)
		} else {
			bh = blockHash(p[:bc])
		}
		prev = Finalize(prev ^ bh)
		k := Finalize(prev ^ seed)
		if !seeded {
			k = prev
		}
		chain[i] = k
		p = p[bc:]
	}
	h.prev, h.chain = prev, h.chain[:start+n]
}

// Lane starts of blockHash: the three mixing constants and their XOR. They
// only need to differ (they are XORed with words, not multiplied), so that
// the lanes are four different functions of their words.
const (
	laneK0 = mixK0
	laneK1 = mixK1
	laneK2 = mixK2
	laneK3 = mixK0 ^ mixK1 ^ mixK2
)

// mixWord absorbs word w into lane l: multiply, rotate the high bits
// down, multiply again, as hashBytes does per word.
func mixWord(l, w uint64) uint64 { return bits.RotateLeft64((l^w)*mixK1, 31) * mixK2 }

// joinLanes folds blockHash's four lanes into one word, each rotated
// differently so that lanes holding swapped values still differ.
func joinLanes(l0, l1, l2, l3 uint64) uint64 {
	return l0 ^ bits.RotateLeft64(l1, 16) ^ bits.RotateLeft64(l2, 32) ^ bits.RotateLeft64(l3, 48)
}

// blockHash hashes one block (8..MaxBlockChars bytes) independently of the
// chain, in four lanes over 32-byte stripes, so the lanes' multiplies run in
// parallel too. A short last stripe is padded with zeros: every block of a
// hasher has the same length, which the chain's start already covers, so
// padding is unambiguous. Within a lane each mixWord is a bijection of the
// lane for a fixed word and of the word for a fixed lane, so two blocks
// collide only when lanes' differences cancel, as in hashBytes.
func blockHash(b []byte) uint64 {
	l0, l1, l2, l3 := uint64(laneK0), uint64(laneK1), uint64(laneK2), uint64(laneK3)
	for len(b) >= 32 {
		l0 = mixWord(l0, le.Uint64(b, 0))
		l1 = mixWord(l1, le.Uint64(b, 8))
		l2 = mixWord(l2, le.Uint64(b, 16))
		l3 = mixWord(l3, le.Uint64(b, 24))
		b = b[32:]
	}
	if len(b) > 0 {
		var w [4]uint64
		for j, c := range b {
			w[j>>3&3] |= uint64(c) << (j & 7 * 8)
		}
		l0 = mixWord(l0, w[0])
		l1 = mixWord(l1, w[1])
		l2 = mixWord(l2, w[2])
		l3 = mixWord(l3, w[3])
	}
	return joinLanes(l0, l1, l2, l3)
}

// WriteString adds prompt text without converting it to a byte slice.
func (h *Hasher) WriteString(s string) (int, error) {
	n := len(s)
	for len(s) > 0 {
		var tmp [256]byte
		c := copy(tmp[:], s)
		h.Write(tmp[:c])
		s = s[c:]
	}
	return n, nil
}

// Chain returns the block chain so far (aliases internal storage: valid
// until the next Reset, Write or SetSeed). After ResetDeferred and before
// SetSeed its entries are unseeded.
func (h *Hasher) Chain() []uint64 { return h.chain }

// Chars returns the number of characters (bytes) written since Reset.
func (h *Hasher) Chars() int64 { return h.chars }

// Tokens returns the estimated prompt tokens: characters / CharsPerToken,
// at least 1 when anything was written.
func (h *Hasher) Tokens() int {
	t := int(h.chars / CharsPerToken)
	if t == 0 && h.chars > 0 {
		t = 1
	}
	return t
}

// BlockChars returns the block size in characters.
func (h *Hasher) BlockChars() int { return h.blockChars }

// Seed returns the chain's seed (model and adapter): the rendezvous key
// of a prompt with no full block.
func (h *Hasher) Seed() uint64 { return h.seed }
