package metrics

import (
	"errors"
	"math"
	"math/bits"
	"slices"
	"strconv"
)

// Internal field indices, one per Names Source.
const (
	fWaiting = iota
	fRunning
	fMaxRunning
	fKVUsage
	fKVUsedTokens
	fKVCapacityTokens
	fKVBlocks
	fKVUsedBlocks
	fBlockSize
	fPrefixQueries
	fPrefixHits
	fPrefixMisses
	fCacheHitRate
	fPromptTokens
	fGenerationTokens
	fPreemptions
	fBatchMaxTokens
	fContextTokens
	numFields
)

// How several matching series combine into one figure.
const (
	aggSum  = iota // counts and counters: data-parallel engines add up
	aggMean        // ratios: the replica-wide fraction
	aggMax         // configuration (block size): all equal in practice
)

var fieldAgg = [numFields]uint8{fKVUsage: aggMean, fCacheHitRate: aggMean, fBlockSize: aggMax}

// fieldBit maps an internal index to its Field bit (0: derived-only, no bit).
var fieldBit = [numFields]Field{
	fWaiting: FieldWaiting, fRunning: FieldRunning, fMaxRunning: FieldMaxRunning,
	fKVUsage: FieldKVUsage, fKVUsedTokens: FieldKVUsedTokens,
	fKVCapacityTokens: FieldKVCapacityTokens, fKVBlocks: FieldKVBlocks,
	fKVUsedBlocks: FieldKVUsedBlocks, fBlockSize: FieldBlockSizeTokens,
	fPrefixQueries: FieldPrefixQueries, fPrefixHits: FieldPrefixHits,
	fCacheHitRate: FieldCacheHitRate, fPromptTokens: FieldPromptTokens,
	fGenerationTokens: FieldGenerationTokens, fPreemptions: FieldPreemptions,
	fBatchMaxTokens: FieldBatchMaxTokens, fContextTokens: FieldContextTokens,
}

// maxCount caps integer figures at 2^53, beyond which float64 sums are no
// longer exact; no real replica comes near it.
const maxCount = 1 << 53

// maxDupCheckLabels bounds the duplicate-label-name check (expfmt rejects
// duplicates); lines with more labels than this skip the check.
const maxDupCheckLabels = 16

// slot is one compiled (metric name, label selector) → field binding.
type slot struct {
	metric string
	label  string
	value  string
	field  uint8
	alt    bool
}

type accum struct {
	sum, max float64
	n        int32
}

// span is a byte range of the body; esc records whether it holds escapes.
type span struct {
	start, end int32
	esc, ok    bool
}

// Parser reads scrapes of one engine into Samples. Build it once per
// configuration (NewParser) and reuse it: Parse keeps all its scratch state
// inside the Parser and allocates nothing. A Parser is not safe for concurrent
// use; proxy-wasm calls each VM from one thread, so keep one per root context.
type Parser struct {
	engine Engine
	names  Names
	slots  [2 * numFields]slot
	nslots int
	// unlabeled has bit k set when slot k selects no label: a line of its
	// metric feeds it whatever its labels. The per-line loops visit the
	// bits of a line's slots, not every slot (docs/performance.md "Go on
	// wasm").
	unlabeled uint64
	// byLength[n] has bit k set when slot k's metric name is n bytes
	// long, and readsCfg / readsLoRA for the info metrics' names.
	byLength [128]uint64
	// heads are the distinct first 8 bytes (fewer, masked, for a shorter
	// name) of the names read, as little-endian words: mayRead.
	heads []nameHead

	// per-parse state
	acc [numFields][2]accum

	cfgBlocks, cfgTokens float64 // vLLM cache_config_info: Σ num_gpu_blocks, Σ blocks×block_size
	cfgBlockSize         int64
	cfgHasBlocks         bool

	loraOK                    bool
	loraBest                  float64
	loraRun, loraWait, loraMx span

	err ParseError
}

// NewParser returns a Parser for engine e reading the metrics in names
// (usually DefaultNames(e) with configuration overrides applied).
func NewParser(e Engine, names Names) (*Parser, error) {
	if e == EngineUnknown || e >= numEngines {
		return nil, errors.New("metrics: parser needs a known engine, got " + strconv.Quote(e.String()))
	}
	if err := names.Validate(); err != nil {
		return nil, err
	}
	p := &Parser{engine: e, names: names}
	for f, src := range p.names.sources() {
		if src.Metric == "" {
			continue
		}
		p.slots[p.nslots] = slot{metric: src.Metric, label: src.Label, value: src.Value, field: uint8(f)}
		p.nslots++
		if src.Alt != "" {
			p.slots[p.nslots] = slot{metric: src.Alt, label: src.Label, value: src.Value, field: uint8(f), alt: true}
			p.nslots++
		}
	}
	for k := range p.nslots {
		p.readsName(p.slots[k].metric, 1<<uint(k))
		if p.slots[k].label == "" {
			p.unlabeled |= 1 << uint(k)
		}
	}
	p.readsName(p.names.CacheConfigInfo, readsCfg)
	p.readsName(p.names.LoRAInfo, readsLoRA)
	return p, nil
}

// nameHead is the start of a metric name read: word&mask of a line's first
// 8 bytes equals word when the line may start with that name.
type nameHead struct{ word, mask uint64 }

// mayRead reports whether a line whose first 8 bytes are x (little-endian)
// may start with a name the parser reads.
func (p *Parser) mayRead(x uint64) bool {
	for _, h := range p.heads {
		if x&h.mask == h.word {
			return true
		}
	}
	return false
}

// readsName sets bit in byLength for name's length (a longer name is
// compared with every slot anyway: reads).
func (p *Parser) readsName(name string, bit uint64) {
	if name == "" {
		return
	}
	if len(name) < len(p.byLength) {
		p.byLength[len(name)] |= bit
	}
	var h nameHead
	for i := range min(len(name), 8) {
		h.word |= uint64(name[i]) << (8 * i)
		h.mask |= 0xff << (8 * i)
	}
	if !slices.Contains(p.heads, h) {
		p.heads = append(p.heads, h)
	}
}

// Engine returns the engine p was built for.
func (p *Parser) Engine() Engine { return p.engine }

// Names returns the metric names p reads.
func (p *Parser) Names() Names { return p.names }

// Bits of Parser.byLength besides the slots'.
const (
	readsCfg  = 1 << 62
	readsLoRA = 1 << 63
)

// reads returns the slots the metric name feeds, and whether it is the
// cache-config or the LoRA info metric. Only names of the same length are
// compared (an escaped name's raw length is not its length: all are).
func (p *Parser) reads(b []byte, name span) (match uint64, isCfg, isLoRA bool) {
	cand := uint64(math.MaxUint64)
	if n := int(name.end - name.start); !name.esc && n < len(p.byLength) {
		cand = p.byLength[n]
	}
	if cand == 0 {
		return 0, false, false
	}
	for m := cand &^ (readsCfg | readsLoRA); m != 0; m &= m - 1 {
		if k := bits.TrailingZeros64(m); k < p.nslots && rawEqual(b, name, p.slots[k].metric) {
			match |= 1 << uint(k)
		}
	}
	isCfg = cand&readsCfg != 0 && p.names.CacheConfigInfo != "" && rawEqual(b, name, p.names.CacheConfigInfo)
	isLoRA = cand&readsLoRA != 0 && p.names.LoRAInfo != "" && rawEqual(b, name, p.names.LoRAInfo)
	return match, isCfg, isLoRA
}
