package openai

import "github.com/gpuroute/gpuroute/plugin/jsonx"

// Reply is what a complete, non-streamed response body says.
type Reply struct {
	// Usage is the body's first usage object's (see Usage), HasUsage
	// whether it had a completion count.
	Usage    Usage
	HasUsage bool
	// ResponseID is FNV-1a 64 of a Responses API response's decoded "id",
	// HasResponseID whether there was one: the value a later request's
	// Request.PreviousResponseID names it by.
	ResponseID    uint64
	HasResponseID bool
}

// Reply reads a complete non-streamed response body of the endpoint Record
// named (none: its usage alone): its usage (as ParseUsage), a Responses
// response's id, and, when Record gave a writer, it writes there the
// answer's text framed as for a stream (chat: choice 0's message.content;
// completions: choice 0's text; messages: the text blocks of "content";
// responses: the output_text and refusal parts of the first message of
// "output"); Answer then reports it. A body that is not valid JSON writes
// nothing and reports what was read before the error.
func (c *StreamCounter) Reply(body []byte) Reply {
	var rp Reply
	a := &c.ans
	r := &c.rd
	r.Reset(body)
	if !r.Object() {
		return rp
	}
	at, usageRead := -1, false
	for r.Member() {
		switch string(r.Key()) {
		case FieldUsage:
			var f usageFields
			if r.Kind() == jsonx.Object && !usageRead && usageObject(r, &f) {
				rp.Usage, rp.HasUsage, _ = f.usage()
				usageRead = true
			}
		case FieldID:
			if v := r.Value(); a.kind == Responses && v.Kind == jsonx.String && !rp.HasResponseID {
				rp.ResponseID, rp.HasResponseID = idHash(v.Raw), true
			}
		case FieldChoices, FieldContent, FieldOutput:
			if answer := string(r.Key()) == answerField(a.kind); at < 0 && answer {
				if v := r.Value(); v.Kind == jsonx.Array {
					at = v.Off
				}
			}
		default:
			r.Skip()
		}
	}
	if r.End() == nil && at >= 0 && a.state != answerOff {
		c.writeReply(body, at)
	}
	return rp
}

// answerField is the member of a non-streamed body that holds kind's answer.
func answerField(kind Kind) string {
	switch kind {
	case Messages:
		return FieldContent
	case Responses:
		return FieldOutput
	}
	return FieldChoices
}

// writeReply writes the answer held by the array at offset at of body,
// valid JSON.
func (c *StreamCounter) writeReply(body []byte, at int) {
	r := &c.rd
	r.ResetAt(body, at)
	r.Array()
	for part := 0; r.Elem() && c.ans.state != answerEnded; part++ {
		if r.Kind() != jsonx.Object {
			r.Skip()
			continue
		}
		switch c.ans.kind {
		case Completion, Chat:
			c.replyChoice(body)
		case Messages:
			c.replyBlock(body, part)
		case Responses:
			c.replyItem(body)
		}
	}
	c.ans.end()
}

// replyChoice reads a choice of a chat or completions body: choice 0's
// message.content or text is the answer, and its tool calls end it.
func (c *StreamCounter) replyChoice(body []byte) {
	r := &c.rd
	var text jsonx.Value
	first, tools := true, false
	r.Object()
	for r.Member() {
		switch string(r.Key()) {
		case FieldIndex:
			v := r.Value()
			first = v.Kind == jsonx.Number && string(v.Raw) == "0"
		case FieldText:
			text = r.Value()
		case FieldMessage:
			if r.Kind() != jsonx.Object {
				continue
			}
			r.Object()
			for r.Member() {
				switch string(r.Key()) {
				case FieldContent:
					text = r.Value()
				case FieldToolCalls:
					v := r.Value()
					tools = v.Kind == jsonx.Array && len(v.Raw) > 2
				}
			}
		}
	}
	if !first {
		return
	}
	if text.Kind == jsonx.String {
		c.ans.text(body, text.Off+1, text.Off+1+len(text.Raw), 0)
	}
	if tools {
		c.ans.stop()
		return
	}
	c.ans.end()
}

// replyBlock reads content block number part of a Messages body: text
// blocks are the answer, thinking is left out, any other block ends it.
func (c *StreamCounter) replyBlock(body []byte, part int) {
	typ, text := typeAndText(&c.rd)
	switch string(typ) {
	case FieldText:
		if text.Kind == jsonx.String {
			c.ans.text(body, text.Off+1, text.Off+1+len(text.Raw), part)
		}
	case blockThinking, blockRedactedThinking:
	default:
		c.ans.stop()
	}
}

// replyItem reads an output item of a Responses body: the first message's
// output_text and refusal parts are the answer, reasoning is left out, any
// other item (a function call) ends it.
func (c *StreamCounter) replyItem(body []byte) {
	r := &c.rd
	var typ, content jsonx.Value
	r.Object()
	for r.Member() {
		switch string(r.Key()) {
		case FieldType:
			typ = r.Value()
		case FieldContent:
			content = r.Value()
		}
	}
	switch {
	case string(typ.Raw) == itemReasoning:
		return
	case string(typ.Raw) != itemMessage || content.Kind != jsonx.Array:
		c.ans.stop()
		return
	}
	parts := &c.parts
	parts.ResetAt(body, content.Off)
	parts.Array()
	for part := 0; parts.Elem() && c.ans.state != answerEnded; part++ {
		if parts.Kind() != jsonx.Object {
			parts.Skip()
			continue
		}
		typ, text := typeAndText(parts)
		if string(typ) != "output_text" && string(typ) != FieldRefusal || text.Kind != jsonx.String {
			c.ans.stop()
			return
		}
		c.ans.text(body, text.Off+1, text.Off+1+len(text.Raw), part)
	}
	c.ans.end()
}

// typeAndText reads the content block or part due next in r and returns
// its raw "type" and its text: "refusal" for a refusal part, else "text".
func typeAndText(r *jsonx.Reader) ([]byte, jsonx.Value) {
	var typ, text, refusal jsonx.Value
	r.Object()
	for r.Member() {
		switch string(r.Key()) {
		case FieldType:
			typ = r.Value()
		case FieldText:
			text = r.Value()
		case FieldRefusal:
			refusal = r.Value()
		}
	}
	if string(typ.Raw) == FieldRefusal {
		return typ.Raw, refusal
	}
	return typ.Raw, text
}
