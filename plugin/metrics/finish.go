package metrics

import (
	"math"
)

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
		a = Adapter{}
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
