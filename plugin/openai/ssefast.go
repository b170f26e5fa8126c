package openai

import (
	"github.com/gpuroute/gpuroute/plugin/jsonx"
)

// The fast event reader. fastEvent reads the grammar of one streamed event
// with index arithmetic (jsonx.SkipSpace, jsonx.SkipValue) instead of a
// jsonx.Reader call per field, for events that are well-formed and plain:
// no escapes in keys. On anything else (a syntax error included) it gives
// up before counting anything and line falls back to the jsonx walk, so the
// counts are the walk's on every input (FuzzSSEFastPath holds the two to
// that). The step past each member or element (space, then ',' or the
// closer) is written out at every level on purpose: as a helper it is too
// big to inline, and a call per separator costs more than the step on wasm
// (docs/performance.md, "Go on wasm"; BenchmarkStreamCounter).

// eventCounts is what one event adds to a StreamCounter.
type eventCounts struct {
	deltas   int
	finished bool
	hasUsage bool
	usageC   int64 // largest completion_tokens of the event's usage objects
	usageP   int64
	// textFrom and textTo delimit the raw contents of the first choice's
	// generated text (its delta's "content", or its "text") when it is
	// not empty; equal (0) otherwise.
	textFrom, textTo int
}

// fastEvent reads the data event d. ok is false when d is not a plain,
// well-formed event (then nothing may be concluded from ev).
func fastEvent(d []byte) (ev eventCounts, ok bool) {
	i := jsonx.SkipSpace(d, 0)
	if i >= len(d) || d[i] != '{' {
		return ev, false
	}
	i = jsonx.SkipSpace(d, i+1)
	if i < len(d) && d[i] == '}' {
		return ev, true
	}
	for {
		key, v := fastKey(d, i)
		if v < 0 {
			return ev, false
		}
		i = v
		switch string(key) {
		case FieldChoices:
			if d[i] == '[' {
				i = jsonx.SkipSpace(d, i+1)
				if i < len(d) && d[i] == ']' {
					i++
					break
				}
				for first := true; ; first = false {
					if i >= len(d) {
						return ev, false
					}
					if d[i] == '{' {
						var hit, fin bool
						text := &ev // where the first choice's text span goes
						if !first {
							text = nil
						}
						if i, hit, fin = fastChoice(d, i, text); i < 0 {
							return ev, false
						}
						if hit {
							ev.deltas++
						}
						ev.finished = ev.finished || fin
					} else if i = jsonx.SkipValue(d, i, 2); i < 0 {
						return ev, false
					}
					if i = jsonx.SkipSpace(d, i); i >= len(d) {
						return ev, false
					}
					if d[i] == ']' {
						i++
						break
					}
					if d[i] != ',' {
						return ev, false
					}
					i = jsonx.SkipSpace(d, i+1)
				}
			} else if i = jsonx.SkipValue(d, i, 1); i < 0 {
				return ev, false
			}
		case FieldUsage:
			if d[i] == '{' {
				var u Usage
				var got bool
				if i, u, got = fastUsage(d, i); i < 0 {
					return ev, false
				}
				if got {
					ev.hasUsage = true
					ev.usageC = max(ev.usageC, u.CompletionTokens)
					ev.usageP = max(ev.usageP, u.PromptTokens)
				}
			} else if i = jsonx.SkipValue(d, i, 1); i < 0 {
				return ev, false
			}
		default:
			if i = jsonx.SkipValue(d, i, 1); i < 0 {
				return ev, false
			}
		}
		if i = jsonx.SkipSpace(d, i); i >= len(d) {
			return ev, false
		}
		switch d[i] {
		case '}':
			return ev, true // what follows the object is not read, as in the jsonx walk
		case ',':
			i = jsonx.SkipSpace(d, i+1)
		default:
			return ev, false
		}
	}
}

// fastKey reads a member's key at d[i] and the ':' after it: the key's
// raw contents and the offset of the value, which is not past the end. It
// gives up (v < 0) on a key with an escape: jsonx decodes those, and no
// server sends them.
func fastKey(d []byte, i int) (key []byte, v int) {
	if i >= len(d) || d[i] != '"' {
		return nil, -1
	}
	q, esc := jsonx.StringEnd(d, i+1)
	if q < 0 || esc {
		return nil, -1
	}
	j := q + 1
	if j < len(d) && d[j] != ':' {
		j = jsonx.SkipSpace(d, j)
	}
	if j >= len(d) || d[j] != ':' {
		return nil, -1
	}
	if j = jsonx.SkipSpace(d, j+1); j >= len(d) {
		return nil, -1
	}
	return d[i+1 : q], j
}

// fastChoice reads the choice object at d[i]: the offset after it, whether
// it carried generated text, and whether it had a non-null finish_reason.
// With text not nil (the first choice) it records there the span of its
// "content" or "text" (setText).
func fastChoice(d []byte, i int, text *eventCounts) (end int, hit, finished bool) {
	i = jsonx.SkipSpace(d, i+1)
	if i < len(d) && d[i] == '}' {
		return i + 1, false, false
	}
	for {
		key, v := fastKey(d, i)
		if v < 0 {
			return -1, false, false
		}
		i = v
		switch string(key) {
		case FieldDelta:
			if d[i] != '{' {
				if i = jsonx.SkipValue(d, i, 3); i < 0 {
					return -1, false, false
				}
				break
			}
			i = jsonx.SkipSpace(d, i+1)
			if i < len(d) && d[i] == '}' {
				i++
				break
			}
			for {
				key, v := fastKey(d, i)
				if v < 0 {
					return -1, false, false
				}
				i = v
				switch string(key) {
				case FieldContent, FieldReasoning, FieldReasoning2:
					start := i
					var some bool
					if i, some = textValue(d, i, 4); i < 0 {
						return -1, false, false
					}
					hit = hit || some
					if string(key) == FieldContent {
						text.setText(start+1, i-1, some)
					}
				case FieldToolCalls:
					if d[i] == '[' {
						if j := jsonx.SkipSpace(d, i+1); j < len(d) && d[j] != ']' {
							hit = true // any element: a tool-call delta
						}
					}
					if i = jsonx.SkipValue(d, i, 4); i < 0 {
						return -1, false, false
					}
				default:
					if i = jsonx.SkipValue(d, i, 4); i < 0 {
						return -1, false, false
					}
				}
				if i = jsonx.SkipSpace(d, i); i >= len(d) {
					return -1, false, false
				}
				if d[i] == '}' {
					i++
					break
				}
				if d[i] != ',' {
					return -1, false, false
				}
				i = jsonx.SkipSpace(d, i+1)
			}
		case FieldText:
			start := i
			var some bool
			if i, some = textValue(d, i, 3); i < 0 {
				return -1, false, false
			}
			hit = hit || some
			text.setText(start+1, i-1, some)
		case FieldFinish:
			if d[i] != 'n' { // a valid value starting with 'n' is null
				finished = true
			}
			if i = jsonx.SkipValue(d, i, 3); i < 0 {
				return -1, false, false
			}
		default:
			if i = jsonx.SkipValue(d, i, 3); i < 0 {
				return -1, false, false
			}
		}
		if i = jsonx.SkipSpace(d, i); i >= len(d) {
			return -1, false, false
		}
		if d[i] == '}' {
			return i + 1, hit, finished
		}
		if d[i] != ',' {
			return -1, false, false
		}
		i = jsonx.SkipSpace(d, i+1)
	}
}

// fastUsage reads the usage object at d[i] as usageObject does.
func fastUsage(d []byte, i int) (end int, u Usage, ok bool) {
	i = jsonx.SkipSpace(d, i+1)
	if i < len(d) && d[i] == '}' {
		return i + 1, u, false
	}
	for {
		key, v := fastKey(d, i)
		if v < 0 {
			return -1, Usage{}, false
		}
		i = v
		start := i
		if i = jsonx.SkipValue(d, i, 2); i < 0 {
			return -1, Usage{}, false
		}
		if c := d[start]; c == '-' || c >= '0' && c <= '9' {
			if n, good := jsonx.ParseInt(d[start:i]); good && n >= 0 {
				switch string(key) {
				case FieldCompleteTok:
					u.CompletionTokens, ok = n, true
				case FieldPromptTok:
					u.PromptTokens = n
				}
			}
		}
		if i = jsonx.SkipSpace(d, i); i >= len(d) {
			return -1, Usage{}, false
		}
		if d[i] == '}' {
			return i + 1, u, ok
		}
		if d[i] != ',' {
			return -1, Usage{}, false
		}
		i = jsonx.SkipSpace(d, i+1)
	}
}

// setText records the span of the first choice's text: ev is nil for the
// other choices, some false for an empty or null text, and a repeated key
// keeps the first span.
func (ev *eventCounts) setText(from, to int, some bool) {
	if ev != nil && some && ev.textTo == 0 {
		ev.textFrom, ev.textTo = from, to
	}
}

// textValue reads the value of a text field at d[i] (depth containers
// deep): the offset after it, or -1, and whether it is a non-empty string,
// which is generated text.
func textValue(d []byte, i, depth int) (end int, text bool) {
	if d[i] != '"' {
		return jsonx.SkipValue(d, i, depth), false
	}
	q, _ := jsonx.StringEnd(d, i+1)
	if q < 0 {
		return -1, false
	}
	return q + 1, q > i+1
}
