package openai

import "github.com/gpuroute/gpuroute/plugin/jsonx"

// The jsonx walk of one event: what fastEvent declines (an escaped key, a
// syntax error) and the typed events of the Messages and Responses
// streams, told apart by their "type" (Anthropic's and OpenAI's names, as
// vLLM's vllm/entrypoints/anthropic and vllm/entrypoints/openai/responses
// emit them):
//
//	content_block_delta        one token when its delta has non-empty "text",
//	                           "thinking" or "partial_json"; delta.text is
//	                           the answer's, of block "index"; partial_json
//	                           (a tool call's input) ends it
//	content_block_start        a block other than text or thinking ends it
//	message_start              message.usage: the prompt's counts
//	message_delta              "usage"; delta.stop_reason: finished
//	message_stop               the end
//	response.output_text.delta one token when "delta" is not empty; it is
//	                           the answer's, of part "content_index"
//	response.output_item.added an item other than a message or reasoning ends it
//	response.*.delta           one token when "delta" is not empty; function
//	                           call arguments end the answer
//	response.completed, .incomplete, .failed   the end
//	response.*                 response.usage, response.id
//
// An event without a "type" is chat's or completions': "choices", "usage".

// Event types and members of the Messages and Responses streams.
const (
	evContentBlockDelta  = "content_block_delta"
	evContentBlockStart  = "content_block_start"
	evMessageStart       = "message_start"
	evMessageDelta       = "message_delta"
	evMessageStop        = "message_stop"
	evResponse           = "response."
	evDelta              = ".delta"
	evOutputTextDelta    = "response.output_text.delta"
	evFunctionCallDelta  = "response.function_call_arguments.delta"
	evOutputItemAdded    = "response.output_item.added"
	evResponseCompleted  = "response.completed"
	evResponseIncomplete = "response.incomplete"
	evResponseFailed     = "response.failed"

	FieldContentBlock = "content_block"
	FieldItem         = "item"
	FieldResponse     = "response"
	FieldOutputIndex  = "output_index"
	FieldContentIndex = "content_index"
	FieldThinking     = "thinking"
	FieldPartialJSON  = "partial_json"
	FieldStopReason   = "stop_reason"
)

// typedEvent is what the walk reads of a typed event, decided by its type
// once the event is read (its members come in any order).
type typedEvent struct {
	typ, partType jsonx.Value // "type"; content_block's or item's "type"
	// text: delta.text (Messages) or the delta string (Responses) is not
	// empty, textFrom and textTo its raw contents; other: delta.thinking or
	// delta.partial_json is not empty, json: the latter.
	text, other, json bool
	textFrom, textTo  int
	stopReason        bool
	index, output     int // "index"; "output_index" << 16 | "content_index"
	message, response usageFields
	hasMessageUsage   bool
	hasResponseUsage  bool
	idFrom, idTo      int
}

// walkEvent reads the data event l with the Reader. Each event is read as
// far as it is valid JSON: what was counted before a syntax error stays
// counted, as the servers never send broken events, but its text and id
// are not taken.
func (c *StreamCounter) walkEvent(l []byte, ev *eventCounts) {
	r := &c.rd
	r.Reset(l)
	if !r.Object() {
		return
	}
	var t typedEvent
	for r.Member() {
		switch string(r.Key()) {
		case FieldChoices:
			if r.Kind() != jsonx.Array {
				continue
			}
			r.Array()
			for r.Elem() {
				if r.Kind() == jsonx.Object {
					var ch choiceCounts
					walkChoice(r, &ch)
					ev.addChoice(&ch)
				}
			}
		case FieldUsage:
			var f usageFields
			if r.Kind() == jsonx.Object && usageObject(r, &f) {
				ev.addUsage(&f, false)
			}
		case FieldType:
			t.typ = r.Value()
		case FieldDelta:
			t.delta(r)
		case FieldIndex:
			t.index = smallInt(r.Value())
		case FieldOutputIndex:
			t.output |= smallInt(r.Value()) << 16
		case FieldContentIndex:
			t.output |= smallInt(r.Value())
		case FieldContentBlock, FieldItem:
			t.partType = typeMember(r)
		case FieldMessage:
			t.hasMessageUsage = t.usageOf(r, &t.message)
		case FieldResponse:
			t.hasResponseUsage = t.usageOf(r, &t.response)
		}
	}
	if t.typ.Kind == jsonx.String {
		t.decide(ev)
	}
	if r.Err() != nil {
		ev.textFrom, ev.textTo, ev.idFrom, ev.idTo = 0, 0, 0, 0
	}
}

// walkChoice reads one element of "choices" into ch, as fastChoice does.
func walkChoice(r *jsonx.Reader, ch *choiceCounts) {
	r.Object()
	for r.Member() {
		switch string(r.Key()) {
		case FieldDelta:
			if r.Kind() != jsonx.Object {
				continue
			}
			r.Object()
			for r.Member() {
				switch string(r.Key()) {
				case FieldContent, FieldReasoning, FieldReasoning2:
					content := string(r.Key()) == FieldContent
					if v := r.Value(); v.Kind == jsonx.String && len(v.Raw) > 0 {
						ch.hit = true
						if content {
							ch.setText(v.Off+1, v.Off+1+len(v.Raw), true)
						}
					}
				case FieldToolCalls:
					if r.Kind() == jsonx.Array {
						r.Array()
						if r.Elem() { // any element: a tool-call delta
							ch.hit, ch.tools = true, true
							for r.Elem() { // leave the array: the delta's members go on
							}
						}
					}
				}
			}
		case FieldText:
			if v := r.Value(); v.Kind == jsonx.String && len(v.Raw) > 0 {
				ch.hit = true
				ch.setText(v.Off+1, v.Off+1+len(v.Raw), true)
			}
		case FieldFinish:
			if k := r.Value().Kind; k != jsonx.Null && k != jsonx.None {
				ch.finished = true
			}
		case FieldIndex:
			v := r.Value()
			ch.other = v.Kind != jsonx.Number || string(v.Raw) != "0"
		}
	}
}

// delta reads a typed event's "delta": an object (Messages) or a string
// (Responses).
func (t *typedEvent) delta(r *jsonx.Reader) {
	switch r.Kind() {
	case jsonx.String:
		if v := r.Value(); len(v.Raw) > 0 {
			t.setText(v)
		}
	case jsonx.Object:
		r.Object()
		for r.Member() {
			switch string(r.Key()) {
			case FieldText:
				if v := r.Value(); v.Kind == jsonx.String && len(v.Raw) > 0 {
					t.setText(v)
				}
			case FieldThinking, FieldPartialJSON:
				json := string(r.Key()) == FieldPartialJSON
				if v := r.Value(); v.Kind == jsonx.String && len(v.Raw) > 0 {
					t.other = true
					t.json = t.json || json
				}
			case FieldStopReason:
				if k := r.Value().Kind; k != jsonx.Null && k != jsonx.None {
					t.stopReason = true
				}
			}
		}
	}
}

// setText records non-empty text v; a repeated member keeps the first.
func (t *typedEvent) setText(v jsonx.Value) {
	if !t.text {
		t.text, t.textFrom, t.textTo = true, v.Off+1, v.Off+1+len(v.Raw)
	}
}

// usageOf reads the object due next in r (a message or a response): its
// "usage" into f (reporting one), and a response's "id".
func (t *typedEvent) usageOf(r *jsonx.Reader, f *usageFields) (ok bool) {
	if r.Kind() != jsonx.Object {
		return false
	}
	r.Object()
	for r.Member() {
		switch string(r.Key()) {
		case FieldUsage:
			if r.Kind() == jsonx.Object {
				ok = usageObject(r, f)
			}
		case FieldID:
			if v := r.Value(); v.Kind == jsonx.String && t.idTo == 0 && len(v.Raw) > 0 {
				t.idFrom, t.idTo = v.Off+1, v.Off+1+len(v.Raw)
			}
		}
	}
	return ok
}

// typeMember reads the object due next in r and returns its "type".
func typeMember(r *jsonx.Reader) (typ jsonx.Value) {
	if r.Kind() != jsonx.Object {
		return typ
	}
	r.Object()
	for r.Member() {
		if string(r.Key()) == FieldType {
			typ = r.Value()
		}
	}
	return typ
}

// smallInt reads an index: a non-negative integer below 1<<16, else 0.
func smallInt(v jsonx.Value) int {
	if n, ok := usageCount(v); ok && n < 1<<16 {
		return int(n)
	}
	return 0
}

// decide counts the typed event t into ev (see the table above). It
// compares the raw type, never a string made of it: a conversion kept in a
// variable allocates past 32 bytes.
func (t *typedEvent) decide(ev *eventCounts) {
	typ := t.typ.Raw
	switch string(typ) {
	case evContentBlockDelta:
		if t.text || t.other {
			ev.deltas++
		}
		if t.text {
			ev.textFrom, ev.textTo, ev.block = t.textFrom, t.textTo, t.index
		}
		ev.stop = ev.stop || t.json
	case evContentBlockStart:
		switch string(t.partType.Raw) {
		case "", FieldText, blockThinking, blockRedactedThinking:
		default:
			ev.stop = true
		}
	case evMessageStart:
		if t.hasMessageUsage {
			ev.addUsage(&t.message, true)
		}
	case evMessageDelta:
		ev.finished = ev.finished || t.stopReason
	case evMessageStop:
		ev.end = true
	}
	if len(typ) <= len(evResponse) || !hasPrefix(typ, evResponse) {
		return
	}
	if t.hasResponseUsage {
		ev.addUsage(&t.response, false)
	}
	ev.idFrom, ev.idTo = t.idFrom, t.idTo
	switch string(typ) {
	case evOutputTextDelta:
		if t.text {
			ev.deltas++
			ev.textFrom, ev.textTo, ev.block = t.textFrom, t.textTo, t.output
		}
		return
	case evOutputItemAdded:
		switch string(t.partType.Raw) {
		case "", itemMessage, itemReasoning:
		default:
			ev.stop = true
		}
		return
	case evResponseCompleted, evResponseIncomplete, evResponseFailed:
		ev.end, ev.finished = true, true
		return
	}
	if len(typ) > len(evDelta) && string(typ[len(typ)-len(evDelta):]) == evDelta {
		if t.text {
			ev.deltas++
		}
		ev.stop = ev.stop || string(typ) == evFunctionCallDelta
	}
}
