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
	end      bool // the stream's last event (message_stop, response.completed, ...)
	stop     bool // a tool call begins: the answer's text ends
	// usage is the largest of each count the event's usage objects gave;
	// hasCompletion and hasPrompt report those counts (HasCached its own).
	usage                    Usage
	hasCompletion, hasPrompt bool
	// textFrom and textTo delimit the raw contents of the answer's text the
	// event carries (choice 0's delta "content" or "text", a Messages
	// text_delta, a Responses output_text delta) when it is not empty;
	// equal (0) otherwise. block is the content block or part it is of.
	textFrom, textTo, block int
	// idFrom and idTo delimit a Responses response "id".
	idFrom, idTo int
	// more reports any of finished, usage, id, stop or end (seal sets it).
	more bool
}

// seal sets ev.more once the event is read.
func (ev *eventCounts) seal() {
	ev.more = ev.finished || ev.hasCompletion || ev.hasPrompt || ev.usage.HasCached || ev.idTo > ev.idFrom || ev.stop || ev.end
}

// addUsage merges a usage object's counts into ev. promptOnly takes the
// prompt's counts alone (a Messages message_start: its output count is not
// the answer's).
func (ev *eventCounts) addUsage(f *usageFields, promptOnly bool) {
	u, completion, prompt := f.usage()
	if completion && !promptOnly {
		ev.hasCompletion = true
		ev.usage.CompletionTokens = max(ev.usage.CompletionTokens, u.CompletionTokens)
	}
	if prompt {
		ev.hasPrompt = true
		ev.usage.PromptTokens = max(ev.usage.PromptTokens, u.PromptTokens)
	}
	if u.HasCached {
		ev.usage.HasCached = true
		ev.usage.CachedTokens = max(ev.usage.CachedTokens, u.CachedTokens)
	}
}

// choiceCounts is what one element of "choices" carried.
type choiceCounts struct {
	hit, finished bool
	tools         bool // a tool-call delta
	other         bool // "index" is not 0: not the recorded choice
	// textFrom and textTo delimit its first non-empty "content" or "text".
	textFrom, textTo int
}

// addChoice counts choice ch into ev: choice 0's first text is the
// answer's, and its tool calls end the answer.
func (ev *eventCounts) addChoice(ch *choiceCounts) {
	if ch.hit {
		ev.deltas++
	}
	ev.finished = ev.finished || ch.finished
	if ch.other {
		return
	}
	if ev.textTo == 0 && ch.textTo > ch.textFrom {
		ev.textFrom, ev.textTo = ch.textFrom, ch.textTo
	}
	ev.stop = ev.stop || ch.tools
}

// setText records the span of a choice's first non-empty text.
func (ch *choiceCounts) setText(from, to int, some bool) {
	if some && ch.textTo == 0 {
		ch.textFrom, ch.textTo = from, to
	}
}

// fastEvent reads the data event d into ev. ok is false when d is not a
// plain, well-formed event (then nothing may be concluded from ev).
func fastEvent(d []byte, ev *eventCounts) (ok bool) {
	i := jsonx.SkipSpace(d, 0)
	if i >= len(d) || d[i] != '{' {
		return false
	}
	i = jsonx.SkipSpace(d, i+1)
	if i < len(d) && d[i] == '}' {
		return true
	}
	for {
		key, v := fastKey(d, i)
		if v < 0 {
			return false
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
				for {
					if i >= len(d) {
						return false
					}
					if d[i] == '{' {
						var ch choiceCounts
						if i = fastChoice(d, i, &ch); i < 0 {
							return false
						}
						ev.addChoice(&ch)
					} else if i = jsonx.SkipValue(d, i, 2); i < 0 {
						return false
					}
					if i = jsonx.SkipSpace(d, i); i >= len(d) {
						return false
					}
					if d[i] == ']' {
						i++
						break
					}
					if d[i] != ',' {
						return false
					}
					i = jsonx.SkipSpace(d, i+1)
				}
			} else if i = jsonx.SkipValue(d, i, 1); i < 0 {
				return false
			}
		case FieldUsage:
			if d[i] == '{' {
				var f usageFields
				if i = fastUsage(d, i, &f); i < 0 {
					return false
				}
				ev.addUsage(&f, false)
			} else if i = jsonx.SkipValue(d, i, 1); i < 0 {
				return false
			}
		case FieldType:
			return false // a Messages or Responses event: the walk reads those
		default:
			if i = jsonx.SkipValue(d, i, 1); i < 0 {
				return false
			}
		}
		if i = jsonx.SkipSpace(d, i); i >= len(d) {
			return false
		}
		switch d[i] {
		case '}':
			return true // what follows the object is not read, as in the jsonx walk
		case ',':
			i = jsonx.SkipSpace(d, i+1)
		default:
			return false
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

// fastChoice reads the choice object at d[i] into ch and returns the
// offset after it, or -1.
func fastChoice(d []byte, i int, ch *choiceCounts) int {
	i = jsonx.SkipSpace(d, i+1)
	if i < len(d) && d[i] == '}' {
		return i + 1
	}
	for {
		key, v := fastKey(d, i)
		if v < 0 {
			return -1
		}
		i = v
		switch string(key) {
		case FieldDelta:
			if d[i] != '{' {
				if i = jsonx.SkipValue(d, i, 3); i < 0 {
					return -1
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
					return -1
				}
				i = v
				switch string(key) {
				case FieldContent, FieldReasoning, FieldReasoning2:
					start := i
					var some bool
					if i, some = textValue(d, i, 4); i < 0 {
						return -1
					}
					ch.hit = ch.hit || some
					if string(key) == FieldContent {
						ch.setText(start+1, i-1, some)
					}
				case FieldToolCalls:
					if d[i] == '[' {
						if j := jsonx.SkipSpace(d, i+1); j < len(d) && d[j] != ']' {
							ch.hit, ch.tools = true, true // any element: a tool-call delta
						}
					}
					if i = jsonx.SkipValue(d, i, 4); i < 0 {
						return -1
					}
				default:
					if i = jsonx.SkipValue(d, i, 4); i < 0 {
						return -1
					}
				}
				if i = jsonx.SkipSpace(d, i); i >= len(d) {
					return -1
				}
				if d[i] == '}' {
					i++
					break
				}
				if d[i] != ',' {
					return -1
				}
				i = jsonx.SkipSpace(d, i+1)
			}
		case FieldText:
			start := i
			var some bool
			if i, some = textValue(d, i, 3); i < 0 {
				return -1
			}
			ch.hit = ch.hit || some
			ch.setText(start+1, i-1, some)
		case FieldFinish:
			if d[i] != 'n' { // a valid value starting with 'n' is null
				ch.finished = true
			}
			if i = jsonx.SkipValue(d, i, 3); i < 0 {
				return -1
			}
		case FieldIndex:
			start := i
			if i = jsonx.SkipValue(d, i, 3); i < 0 {
				return -1
			}
			ch.other = i != start+1 || d[start] != '0'
		default:
			if i = jsonx.SkipValue(d, i, 3); i < 0 {
				return -1
			}
		}
		if i = jsonx.SkipSpace(d, i); i >= len(d) {
			return -1
		}
		if d[i] == '}' {
			return i + 1
		}
		if d[i] != ',' {
			return -1
		}
		i = jsonx.SkipSpace(d, i+1)
	}
}

// fastUsage reads the usage object at d[i] into f as usageObject does and
// returns the offset after it, or -1.
func fastUsage(d []byte, i int, f *usageFields) int {
	i = jsonx.SkipSpace(d, i+1)
	if i < len(d) && d[i] == '}' {
		return i + 1
	}
	for {
		key, v := fastKey(d, i)
		if v < 0 {
			return -1
		}
		i = v
		if d[i] == '{' && details(key) {
			if i = fastDetails(d, i, f); i < 0 {
				return -1
			}
		} else {
			start := i
			if i = jsonx.SkipValue(d, i, 2); i < 0 {
				return -1
			}
			if n, ok := tokenCount(d[start:i]); ok {
				f.set(key, n)
			}
		}
		if i = jsonx.SkipSpace(d, i); i >= len(d) {
			return -1
		}
		if d[i] == '}' {
			return i + 1
		}
		if d[i] != ',' {
			return -1
		}
		i = jsonx.SkipSpace(d, i+1)
	}
}

// fastDetails reads a usage object's *_tokens_details object at d[i] into
// f and returns the offset after it, or -1.
func fastDetails(d []byte, i int, f *usageFields) int {
	i = jsonx.SkipSpace(d, i+1)
	if i < len(d) && d[i] == '}' {
		return i + 1
	}
	for {
		key, v := fastKey(d, i)
		if v < 0 {
			return -1
		}
		start := v
		if i = jsonx.SkipValue(d, v, 3); i < 0 {
			return -1
		}
		if n, ok := tokenCount(d[start:i]); ok {
			f.setDetail(key, n)
		}
		if i = jsonx.SkipSpace(d, i); i >= len(d) {
			return -1
		}
		if d[i] == '}' {
			return i + 1
		}
		if d[i] != ',' {
			return -1
		}
		i = jsonx.SkipSpace(d, i+1)
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
