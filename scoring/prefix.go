package scoring

import (
	"io"
	"math/bits"
)

// Prefix hashing defaults.
const (
	// DefaultBlockChars is the default characters per block: vLLM's 16-token
	// KV block × ~4 characters per token (DESIGN.md §2), also llm-d's
	// 64-character prefix block.
	DefaultBlockChars = 64
	// CharsPerToken converts characters to estimated tokens without a
	// tokenizer (OpenAI's rule of thumb for English text).
	CharsPerToken = 4
	// MaxBlockChars bounds the block size (the hasher buffers one block).
	MaxBlockChars = 4096
	// DefaultMaxBlocks bounds the chain (128k characters at 64-char blocks).
	DefaultMaxBlocks = 2048
)

// PrefixHasher cuts prompt text into fixed-size character blocks and hashes
// them as a chain: block i's hash covers blocks 0..i and the seed (model and
// adapter), so equal hashes at position i mean equal prefixes of i+1 blocks
// for the same model and adapter. Only full blocks count: a server caches
// whole KV blocks.
//
// The chain is computed in two steps so that the seed may come last: the
// text is hashed as an unseeded chain raw_i = hash(raw_{i-1}, block_i) from
// a fixed start, and each entry is keyed with the seed, key_i =
// fmix(raw_i ^ seed), as soon as the seed is known. A JSON body can name
// its model after the prompt (the OpenAI Python SDK sends "model" after
// "messages"), so a parser can stream the prompt in one pass (ResetDeferred)
// and key the chain afterwards (SetSeed) at O(blocks), not O(bytes). Keyed
// entries of different seeds differ, so a prefix cached for one adapter is
// still no hit for another.
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
type PrefixHasher struct {
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

var _ io.Writer = (*PrefixHasher)(nil)

// Init sets the block size (clamped to [8, MaxBlockChars]; 0 means
// DefaultBlockChars) and the maximum chain length (0 means
// DefaultMaxBlocks), allocates the chain, and resets for the base model "".
func (h *PrefixHasher) Init(blockChars, maxBlocks int) {
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
func (h *PrefixHasher) Reset(model, adapter string) {
	h.ResetDeferred()
	h.SetSeed(model, adapter)
}

// ResetDeferred starts a new prompt whose model and adapter are not known
// yet: Chain holds unseeded hashes until SetSeed keys them.
func (h *PrefixHasher) ResetDeferred() {
	if h.blockChars == 0 {
		h.Init(0, 0) // the zero value: default sizes
	}
	h.seed, h.seeded = 0, false
	h.prev = fmix(uint64(h.blockChars) * mixK0) // the unseeded chain's start
	h.chars, h.fill = 0, 0
	h.chain = h.chain[:0]
}

// SetSeed keys the chain with model and adapter: the blocks written so far
// at once (one mix each), later ones as they fill. Calling it again re-keys
// nothing: the first seed of a prompt stays.
func (h *PrefixHasher) SetSeed(model, adapter string) {
	if h.blockChars == 0 {
		h.ResetDeferred() // the zero value: default sizes, no seed yet
	}
	if h.seeded {
		return
	}
	h.seed = fmix(HashString(model) ^ bitsRot(HashString(adapter), 23) ^ uint64(h.blockChars))
	h.seeded = true
	c, s := h.chain, h.seed
	for i := range c {
		c[i] = fmix(c[i] ^ s)
	}
}

func bitsRot(x uint64, k uint) uint64 { return x<<k | x>>(64-k) }

// Write adds prompt text. It never fails.
func (h *PrefixHasher) Write(p []byte) (int, error) {
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
		h.blocks(p[:len(p)/bc*bc])
		p = p[len(p)/bc*bc:]
	}
	h.fill = copy(h.buf[:], p)
	return n, nil
}

// blocks hashes whole blocks straight from p (len(p) a multiple of the
// block size), with the chain state in locals: under wazero a call per
// block and the fields reloaded around it cost as much as the hashing.
func (h *PrefixHasher) blocks(p []byte) {
	bc := h.blockChars
	prev, chain, room := h.prev, h.chain, h.maxBlocks-len(h.chain)
	seed, seeded := h.seed, h.seeded
	for ; len(p) >= bc && room > 0; room-- {
		if bc == 64 {
			// hash64, inlined by hand (too big for the compiler's budget).
			b := p[:64:64]
			x := prev ^ uint64(bc)*mixK0
			a := bits.RotateLeft64((x^le64(b[0:8]))*mixK1, 31) * mixK2
			c := bits.RotateLeft64((le64(b[8:16])^mixK0)*mixK2, 29) * mixK1
			a = bits.RotateLeft64((a^le64(b[16:24]))*mixK1, 31) * mixK2
			c = bits.RotateLeft64((c^le64(b[24:32]))*mixK2, 29) * mixK1
			x = a ^ bits.RotateLeft64(c, 17)
			a = bits.RotateLeft64((x^le64(b[32:40]))*mixK1, 31) * mixK2
			c = bits.RotateLeft64((le64(b[40:48])^mixK0)*mixK2, 29) * mixK1
			a = bits.RotateLeft64((a^le64(b[48:56]))*mixK1, 31) * mixK2
			c = bits.RotateLeft64((c^le64(b[56:64]))*mixK2, 29) * mixK1
			prev = fmix(a ^ bits.RotateLeft64(c, 17))
		} else {
			prev = hashBytes(prev, p[:bc])
		}
		k := prev
		if seeded {
			k = fmix(k ^ seed)
		}
		chain = append(chain, k)
		p = p[bc:]
	}
	h.prev, h.chain = prev, chain
}

// WriteString adds prompt text without converting it to a byte slice.
func (h *PrefixHasher) WriteString(s string) (int, error) {
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
func (h *PrefixHasher) Chain() []uint64 { return h.chain }

// Chars returns the number of characters (bytes) written since Reset.
func (h *PrefixHasher) Chars() int64 { return h.chars }

// Tokens returns the estimated prompt tokens: characters / CharsPerToken,
// at least 1 when anything was written.
func (h *PrefixHasher) Tokens() int {
	t := int(h.chars / CharsPerToken)
	if t == 0 && h.chars > 0 {
		t = 1
	}
	return t
}

// BlockChars returns the block size in characters.
func (h *PrefixHasher) BlockChars() int { return h.blockChars }

// Seed returns the chain's seed (model and adapter): the rendezvous key
// of a prompt with no full block.
func (h *PrefixHasher) Seed() uint64 { return h.seed }
