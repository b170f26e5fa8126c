package metrics

import (
	"bytes"
	"errors"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/gpuroute/gpuroute/scoring/le"
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
	// bits of a line's slots, not every slot: a loop iteration is a jump
	// through the function's block dispatch on wasm (see quoted).
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

// Parse reads one scrape body into s, replacing its contents (adapter slices
// are reused). It returns nil for a clean scrape, or a *ParseError matching
// ErrNoSamples (nothing usable), ErrTruncated (last line cut: treat as stale)
// or ErrBadLine (invalid lines skipped, the rest used); s.Problems has every
// problem seen. The error is owned by p and valid until the next Parse.
func (p *Parser) Parse(body []byte, s *Sample) error {
	s.reset()
	p.acc = [numFields][2]accum{}
	p.cfgBlocks, p.cfgTokens, p.cfgBlockSize, p.cfgHasBlocks = 0, 0, 0, false
	p.loraOK, p.loraBest = false, 0
	p.err = ParseError{BodyBytes: len(body)}

	if len(body) > math.MaxInt32 {
		// Spans are int32; a 2 GiB scrape is not a metrics page.
		s.Problems |= ProblemNoSamples
		p.err.set(ProblemNoSamples, 0, nil)
		return &p.err
	}

	var samples int32
	var lineNo int32
	var truncLine []byte
	var truncNo int32
	for pos := 0; pos < len(body); {
		lineNo++
		end := indexNL(body, pos)
		if end < 0 {
			// No newline: the scrape may have been cut mid-line.
			if !blankOnly(body[pos:]) {
				s.Problems |= ProblemTruncated
				truncLine, truncNo = body[pos:], lineNo
			}
			break
		}
		next := end + 1
		if end > pos && body[end-1] == '\r' {
			end-- // CRLF: servers behind Windows-style proxies
		}
		switch p.line(body, pos, end) {
		case lineSample:
			samples++
		case lineBad:
			s.Problems |= ProblemBadLine
			s.BadLines++
			if s.FirstBadLine == 0 {
				s.FirstBadLine = lineNo
				p.err.set(ProblemBadLine, lineNo, body[pos:end])
			}
		}
		pos = next
	}
	p.finish(body, s)

	p.err.BadLines = s.BadLines
	switch {
	case samples == 0:
		s.Problems |= ProblemNoSamples
		p.err.kind = ProblemNoSamples
		return &p.err
	case s.Problems&ProblemTruncated != 0:
		p.err.set(ProblemTruncated, truncNo, truncLine)
		return &p.err
	case s.Problems&ProblemBadLine != 0:
		p.err.kind = ProblemBadLine
		return &p.err
	}
	return nil
}

// indexNL returns the index of the first newline in b at or after from, or
// -1. bytes.IndexByte is internal/bytealg's assembly on wasm too: 5.5x
// faster under wazero than a Go loop over the bytes (a 66 KB page's lines:
// 30 against 168 µs).
func indexNL(b []byte, from int) int {
	if i := bytes.IndexByte(b[from:], '\n'); i >= 0 {
		return from + i
	}
	return -1
}

func blankOnly(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\r' {
			return false
		}
	}
	return true
}

const (
	lineSkip   = iota // blank, comment, or a family the parser does not read
	lineSample        // valid sample of a family it reads
	lineBad           // invalid
)

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

func isNameStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == ':'
}

// nameBytes marks the bytes of a bare metric name: one load per byte of
// the names that start most lines, rather than four range tests.
var nameBytes = func() (t [256]bool) {
	for c := range 256 {
		t[c] = isNameStart(byte(c)) || c >= '0' && c <= '9'
	}
	return t
}()

func isLabelStart(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' }

func isLabelByte(c byte) bool { return isLabelStart(c) || c >= '0' && c <= '9' }

// quoted scans a double-quoted string starting at b[i] == '"' and ending before
// end; it returns the span of the contents and the index after the closing
// quote, or ok=false on a missing quote, an escape other than \\ \" \n (the
// only ones the text format defines), or invalid UTF-8.
func quoted(b []byte, i, end int) (sp span, next int, ok bool) {
	i++
	start := i
	esc := false
	var high uint64 // the bytes seen, ORed: UTF-8 is checked only past ASCII
	for i < end {
		// Eight bytes a step to the next quote or backslash: a label
		// value is a model name or a path, and a loop iteration per byte
		// is a jump through the function's block dispatch on wasm.
		for i+8 <= end {
			x := le.Uint64(b, i)
			high |= x
			if m := quoteOrBackslash(x); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		if i >= end {
			break
		}
		switch b[i] {
		case '"':
			if high&msb != 0 && !utf8.Valid(b[start:i]) {
				return span{}, 0, false
			}
			return span{start: int32(start), end: int32(i), esc: esc, ok: true}, i + 1, true
		case '\\':
			if i+1 >= end {
				return span{}, 0, false
			}
			switch b[i+1] {
			case '\\', '"', 'n':
			default:
				return span{}, 0, false
			}
			esc = true
			i += 2
		default:
			high |= uint64(b[i])
			i++
		}
	}
	return span{}, 0, false
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// quoteOrBackslash returns a word whose lowest set bit is the high bit of
// the first byte lane of x holding '"' or '\\', or 0 when none does (lanes
// above the first match may be set too: a borrow carries past it).
func quoteOrBackslash(x uint64) uint64 {
	q, s := x^(lsb*'"'), x^(lsb*'\\')
	return ((q-lsb)&^q | (s-lsb)&^s) & msb
}

// rawEqual reports whether the (possibly escaped) bytes of sp decode to want.
func rawEqual(b []byte, sp span, want string) bool {
	raw := b[sp.start:sp.end]
	if !sp.esc {
		return sameString(raw, want)
	}
	j := 0
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c == '\\' && i+1 < len(raw) {
			i++
			c = unescape(raw[i])
		}
		if j >= len(want) || want[j] != c {
			return false
		}
		j++
	}
	return j == len(want)
}

// sameString reports whether raw holds want's bytes, eight a step: on wasm
// comparing strings runs the runtime's byte loop (internal/bytealg's
// equal_wasm.s), and a matched line compares its name and labels with the
// names read.
func sameString(raw []byte, want string) bool {
	n := len(want)
	if len(raw) != n {
		return false
	}
	if n < 8 {
		return string(raw) == want
	}
	// By words, the last one overlapping what was compared.
	for i := 0; i < n-8; i += 8 {
		if le.Uint64(raw, i) != le.StringUint64(want, i) {
			return false
		}
	}
	return le.Uint64(raw, n-8) == le.StringUint64(want, n-8)
}

func unescape(c byte) byte {
	if c == 'n' {
		return '\n'
	}
	return c // '\\' and '"' stand for themselves
}

// line parses body[start:end] (no newline) and, for a valid sample whose name
// p reads, folds its value into the accumulators.
func (p *Parser) line(b []byte, start, end int) int {
	i := start
	for i < end && isBlank(b[i]) {
		i++
	}
	if i == end {
		return lineSkip
	}
	if b[i] == '#' {
		return lineSkip // HELP, TYPE and comments carry nothing we extract
	}
	if i+8 <= end && isNameStart(b[i]) && !p.mayRead(le.Uint64(b, i)) {
		// A bare name that is none of those read, told by its first bytes
		// before it is scanned: most lines of a real page (see reads).
		return lineSkip
	}

	// Metric name: bare, or quoted as the first item inside braces (the
	// UTF-8 form Prometheus 3 and expfmt's UTF8Validation accept).
	var name span
	inBraces := false
	if b[i] == '{' {
		j := i + 1
		for j < end && isBlank(b[j]) {
			j++
		}
		if j < end && b[j] == '"' {
			sp, k, ok := quoted(b, j, end)
			if !ok || sp.start == sp.end {
				return lineBad
			}
			for k < end && isBlank(b[k]) {
				k++
			}
			if k < end && (b[k] == ',' || b[k] == '}') {
				name = sp
				inBraces = true
				i = k // at ',' or '}'
			}
		}
		if !inBraces {
			return lineBad
		}
	} else if b[i] == '"' {
		// A quoted name before the braces, which expfmt also accepts.
		sp, k, ok := quoted(b, i, end)
		if !ok || sp.start == sp.end {
			return lineBad
		}
		name, i = sp, k
		for i < end && isBlank(b[i]) {
			i++
		}
	} else {
		if !isNameStart(b[i]) {
			return lineBad
		}
		j := i + 1
		for j < end && nameBytes[b[j]] {
			j++
		}
		name = span{start: int32(i), end: int32(j), ok: true}
		i = j
		for i < end && isBlank(b[i]) {
			i++
		}
	}

	// Which slots and info metrics does this name feed? None, for most of
	// a real page (the request histograms, the HTTP server's and the
	// process's metrics: a vLLM page is tens of KB of which a few lines
	// are read): the rest of such a line is not examined. Validating it
	// cost ~20 ns a byte under wazero, over a millisecond per replica and
	// tick, for lines whose validity changes no figure.
	match, isCfg, isLoRA := p.reads(b, name)
	if match == 0 && !isCfg && !isLoRA {
		return lineSkip
	}
	// selected: slots whose label selector has been seen with the wanted value.
	selected := match & p.unlabeled
	var cfgBlocks, cfgBS, run, wait, mx span

	// Label set.
	if inBraces || i < end && b[i] == '{' {
		if !inBraces {
			i++ // past '{'
		} else if b[i] == ',' {
			i++
		}
		var seen [maxDupCheckLabels]span
		nseen := 0
		for {
			for i < end && isBlank(b[i]) {
				i++
			}
			if i >= end {
				return lineBad
			}
			if b[i] == '}' {
				i++
				break
			}
			// Label name.
			var ln span
			if b[i] == '"' {
				sp, k, ok := quoted(b, i, end)
				if !ok || sp.start == sp.end {
					return lineBad
				}
				ln, i = sp, k
			} else {
				if !isLabelStart(b[i]) {
					return lineBad
				}
				j := i + 1
				for j < end && isLabelByte(b[j]) {
					j++
				}
				ln = span{start: int32(i), end: int32(j), ok: true}
				i = j
			}
			if rawEqual(b, ln, "__name__") {
				return lineBad // reserved (expfmt: "label name __name__ is reserved")
			}
			if nseen < maxDupCheckLabels {
				for k := 0; k < nseen; k++ {
					if spanEqual(b, seen[k], ln) {
						return lineBad
					}
				}
				seen[nseen] = ln
				nseen++
			}
			for i < end && isBlank(b[i]) {
				i++
			}
			if i >= end || b[i] != '=' {
				return lineBad
			}
			i++
			for i < end && isBlank(b[i]) {
				i++
			}
			if i >= end || b[i] != '"' {
				return lineBad
			}
			val, k, ok := quoted(b, i, end)
			if !ok {
				return lineBad
			}
			i = k
			for m := match &^ p.unlabeled; m != 0; m &= m - 1 {
				k := bits.TrailingZeros64(m)
				if sl := &p.slots[k]; rawEqual(b, ln, sl.label) && rawEqual(b, val, sl.value) {
					selected |= 1 << uint(k)
				}
			}
			if isCfg {
				switch {
				case rawEqual(b, ln, LabelNumGPUBlocks):
					cfgBlocks = val
				case rawEqual(b, ln, LabelBlockSize):
					cfgBS = val
				}
			}
			if isLoRA {
				switch {
				case rawEqual(b, ln, LabelRunningAdapters):
					run = val
				case rawEqual(b, ln, LabelWaitingAdapters):
					wait = val
				case rawEqual(b, ln, LabelMaxLoRA):
					mx = val
				}
			}
			for i < end && isBlank(b[i]) {
				i++
			}
			if i >= end {
				return lineBad
			}
			if b[i] == ',' {
				i++
				continue
			}
			if b[i] != '}' {
				return lineBad
			}
			i++
			break
		}
		for i < end && isBlank(b[i]) {
			i++
		}
	}

	// Value, then an optional integer timestamp (milliseconds; ignored).
	j := i
	for j < end && !isBlank(b[j]) {
		j++
	}
	if j == i {
		return lineBad
	}
	v, ok := parseValue(b[i:j])
	if !ok {
		return lineBad
	}
	i = j
	if i < end {
		// A blank after the value announces a timestamp (expfmt rejects a
		// bare trailing blank, and so do we, to agree on validity).
		for i < end && isBlank(b[i]) {
			i++
		}
		if i == end {
			return lineBad
		}
		j = i
		for j < end && !isBlank(b[j]) {
			j++
		}
		if _, err := strconv.ParseInt(string(b[i:j]), 10, 64); err != nil {
			return lineBad
		}
		if j < end {
			return lineBad // expfmt: "spurious string after timestamp", blanks included
		}
	}

	// Fold the value in. Non-finite values (NaN, ±Inf) say nothing usable
	// about load and are skipped rather than poisoning a sum.
	finite := !math.IsNaN(v) && !math.IsInf(v, 0)
	if finite {
		for m := selected; m != 0; m &= m - 1 {
			sl := &p.slots[bits.TrailingZeros64(m)]
			a := &p.acc[sl.field][b2i(sl.alt)]
			if a.n == 0 || v > a.max {
				a.max = v
			}
			a.sum += v
			a.n++
		}
	}
	if isCfg {
		bs, okBS := spanInt(b, cfgBS)
		if okBS && bs > 0 {
			if bs > p.cfgBlockSize {
				p.cfgBlockSize = bs
			}
			if blocks, okB := spanInt(b, cfgBlocks); okB {
				p.cfgBlocks += float64(blocks)
				p.cfgTokens += float64(blocks) * float64(bs)
				p.cfgHasBlocks = true
			}
		}
	}
	if isLoRA && !math.IsNaN(v) && (!p.loraOK || v > p.loraBest) {
		// The value is the time the series was last set; the newest is current.
		p.loraOK, p.loraBest = true, v
		p.loraRun, p.loraWait, p.loraMx = run, wait, mx
	}
	return lineSample
}

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

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func spanEqual(b []byte, x, y span) bool {
	return string(b[x.start:x.end]) == string(b[y.start:y.end])
}

// parseValue parses a sample value as expfmt does: strconv.ParseFloat, minus
// hex floats and digit separators, which the text format does not allow.
func parseValue(t []byte) (float64, bool) {
	for _, c := range t {
		if c == 'p' || c == 'P' || c == '_' {
			return 0, false
		}
	}
	v, err := strconv.ParseFloat(string(t), 64)
	return v, err == nil
}

// spanInt parses a label value holding a non-negative decimal integer.
func spanInt(b []byte, sp span) (int64, bool) {
	if !sp.ok || sp.esc || sp.end == sp.start || sp.end-sp.start > 15 {
		return 0, false
	}
	var n int64
	for _, c := range b[sp.start:sp.end] {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// finish turns the accumulators into s's fields and derives the figures a
// server exposes only indirectly.
func (p *Parser) finish(b []byte, s *Sample) {
	var val [numFields]float64
	var has [numFields]bool
	for f := 0; f < numFields; f++ {
		a := p.acc[f][0]
		if a.n == 0 {
			a = p.acc[f][1] // older name, only when the current one is absent
		}
		if a.n == 0 {
			continue
		}
		has[f] = true
		switch fieldAgg[f] {
		case aggMean:
			val[f] = a.sum / float64(a.n)
		case aggMax:
			val[f] = a.max
		default:
			val[f] = a.sum
		}
	}

	// vLLM's cache_config_info carries blocks and block size as labels.
	if !has[fBlockSize] && p.cfgBlockSize > 0 {
		has[fBlockSize], val[fBlockSize] = true, float64(p.cfgBlockSize)
	}
	if !has[fKVBlocks] && p.cfgHasBlocks {
		has[fKVBlocks], val[fKVBlocks] = true, p.cfgBlocks
	}
	if !has[fKVCapacityTokens] {
		switch {
		case p.cfgHasBlocks:
			has[fKVCapacityTokens], val[fKVCapacityTokens] = true, p.cfgTokens
		case has[fKVBlocks] && has[fBlockSize]:
			has[fKVCapacityTokens] = true
			val[fKVCapacityTokens] = math.Round(val[fKVBlocks]) * math.Round(val[fBlockSize])
		}
	}
	if !has[fKVUsage] {
		switch {
		case has[fKVUsedBlocks] && has[fKVBlocks] && val[fKVBlocks] > 0:
			has[fKVUsage], val[fKVUsage] = true, val[fKVUsedBlocks]/val[fKVBlocks]
		case has[fKVUsedTokens] && has[fKVCapacityTokens] && val[fKVCapacityTokens] > 0:
			has[fKVUsage], val[fKVUsage] = true, val[fKVUsedTokens]/val[fKVCapacityTokens]
		}
	}
	if !has[fPrefixQueries] && has[fPrefixHits] && has[fPrefixMisses] {
		has[fPrefixQueries], val[fPrefixQueries] = true, val[fPrefixHits]+val[fPrefixMisses]
	}

	for f := 0; f < numFields; f++ {
		if has[f] {
			s.Present |= fieldBit[f]
		}
	}
	s.Waiting = toCount(val[fWaiting])
	s.Running = toCount(val[fRunning])
	s.MaxRunning = toCount(val[fMaxRunning])
	s.KVUsage = clamp01(val[fKVUsage])
	s.KVUsedTokens = toCount(val[fKVUsedTokens])
	s.KVCapacityTokens = toCount(val[fKVCapacityTokens])
	s.KVBlocks = toCount(val[fKVBlocks])
	s.KVUsedBlocks = toCount(val[fKVUsedBlocks])
	s.BlockSizeTokens = toCount(val[fBlockSize])
	s.PrefixQueries = nonNeg(val[fPrefixQueries])
	s.PrefixHits = nonNeg(val[fPrefixHits])
	s.CacheHitRate = clamp01(val[fCacheHitRate])
	s.PromptTokensTotal = nonNeg(val[fPromptTokens])
	s.GenerationTokensTotal = nonNeg(val[fGenerationTokens])
	s.PreemptionsTotal = nonNeg(val[fPreemptions])
	s.BatchMaxTokens = toCount(val[fBatchMaxTokens])
	s.ContextTokens = toCount(val[fContextTokens])

	if p.loraOK {
		s.Present |= FieldAdapters
		if !appendAdapters(&s.RunningAdapters, b, p.loraRun) || !appendAdapters(&s.WaitingAdapters, b, p.loraWait) {
			s.Problems |= ProblemAdapterOverflow
		}
		if n, ok := spanInt(b, p.loraMx); ok {
			s.Present |= FieldMaxAdapters
			s.MaxAdapters = n
		}
	}
}

// toCount rounds a gauge to a whole count in [0, 2^53].
func toCount(v float64) int64 {
	switch {
	case !(v > 0): // also NaN
		return 0
	case v >= maxCount:
		return maxCount
	}
	return int64(math.Round(v))
}

func clamp01(v float64) float64 {
	switch {
	case !(v > 0):
		return 0
	case v > 1:
		return 1
	}
	return v
}

func nonNeg(v float64) float64 {
	if !(v > 0) {
		return 0
	}
	return v
}

// appendAdapters decodes a comma-separated adapter list (a label value, maybe
// escaped) into *dst. It reports false if the list or a name was cut short.
func appendAdapters(dst *[]Adapter, b []byte, sp span) bool {
	if !sp.ok || sp.start == sp.end {
		return true
	}
	raw := b[sp.start:sp.end]
	clean := true
	var a Adapter
	a.Hash = fnvOffset64
	n := 0 // decoded bytes of the current name
	flush := func() {
		if n == 0 {
			return
		}
		if len(*dst) >= MaxAdapterList {
			clean = false
		} else {
			*dst = append(*dst, a)
		}
		a = Adapter{Hash: fnvOffset64}
		n = 0
	}
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c == ',' {
			flush()
			continue
		}
		if c == '\\' && i+1 < len(raw) {
			i++
			c = unescape(raw[i])
		}
		a.Hash = (a.Hash ^ uint64(c)) * fnvPrime64
		if int(a.n) < AdapterNameCap {
			a.b[a.n] = c
			a.n++
		} else if !a.cut {
			a.cut = true
			clean = false
		}
		n++
	}
	flush()
	return clean
}
