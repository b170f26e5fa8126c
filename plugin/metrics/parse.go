package metrics

import (
	"math"
	"math/bits"
	"strconv"

	"github.com/gpuroute/gpuroute/scoring/le"
)

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

const (
	lineSkip   = iota // blank, comment, or a family the parser does not read
	lineSample        // valid sample of a family it reads
	lineBad           // invalid
)

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
	// are read): the rest of such a line is not examined, since its
	// validity changes no figure (BenchmarkParseFullVLLM).
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
