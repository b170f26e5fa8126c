package openai

import "github.com/gpuroute/gpuroute/plugin/jsonx"

// writeMessages writes an array of messages (Chat, Messages) or of input
// items (Responses), in order.
func (p *Parser) writeMessages(r *jsonx.Reader) {
	field, rule := FieldMessages, ruleMessages
	if p.kind == Responses {
		field, rule = FieldInput, ruleItems
	}
	switch r.Kind() {
	case jsonx.Null:
		return
	case jsonx.Array:
	default:
		if v := r.Value(); v.Kind != jsonx.None { // None: a number or literal cut at the end
			p.failText(CodeBadField, field, rule, v.Raw)
		}
		return
	}
	r.Array()
	for r.Elem() && p.ok() {
		if !p.slow && p.fastMessages(r) {
			continue
		}
		switch r.Kind() {
		case jsonx.None: // cut
		case jsonx.Object:
			p.message(r)
		default:
			p.failText(CodeBadField, field, rule, r.Value().Raw)
		}
	}
}

// message writes one chat message: role SepRole content [SepToolCalls
// tool_calls] SepMessage. Members come in any order; the role is written
// first, so content is streamed straight from the reader when the role has
// already been read (every SDK sends it first) and re-read from its offset
// otherwise. A Responses input item without a role is written by its type
// (item).
func (p *Parser) message(r *jsonx.Reader) {
	start := r.Offset()
	var role, content, toolCalls jsonx.Value
	it := &p.item // Responses: the members of a typed item
	if p.kind == Responses {
		*it = item{}
	}
	// A content read before the role is held: decoded into p.held (its
	// raw contents heldRaw, when read whole), or, when the writer
	// remembers it, passed over and replayed from heldAt with token.
	var heldRaw []byte
	heldAt, token := -1, uint64(0)
	roleOK, headDone, held := false, false, false
	var seen members
	r.Object()
	for r.Member() {
		switch string(r.Key()) {
		case FieldRole:
			if !p.once(r, &seen, seenRole, FieldRole) {
				continue
			}
			v := r.Value()
			switch v.Kind {
			case jsonx.String:
				role, roleOK = v, true
			case jsonx.Null:
				role, roleOK = jsonx.Value{}, false
			case jsonx.None:
			default:
				p.failText(CodeBadField, FieldRole, ruleString, v.Raw)
			}
		case FieldContent:
			if !p.once(r, &seen, seenContent, FieldContent) {
				continue
			}
			if roleOK && !role.Partial && !headDone && p.ok() && r.Kind() == jsonx.String {
				p.head(role)
				headDone = true
				p.emitString(r)
				content = jsonx.Value{}
				continue
			}
			if !headDone && p.ok() && r.Kind() == jsonx.String {
				// Content before role (encoding/json sorts map keys so;
				// SDKs send role first): a string the writer remembers is
				// passed over and replayed once the role is written;
				// another is decoded now, in this pass, and written then.
				held, content, heldRaw = true, jsonx.Value{}, nil
				var matched bool
				if heldAt, token, matched = p.memoMatch(r); matched {
					continue
				}
				from := r.Offset() + 1
				p.held = r.AppendString(p.held[:0])
				if to := r.Offset() - 1; !r.Truncated() && r.Err() == nil && to >= from && p.doc[to] == '"' {
					heldRaw = p.doc[from:to]
				}
				continue
			}
			held, content = false, r.Value()
		case FieldToolCalls:
			p.onceValue(r, &seen, seenToolCalls, FieldToolCalls, &toolCalls)
		case FieldType, FieldName, FieldArguments, FieldOutput:
			if p.kind != Responses {
				r.Skip()
				continue
			}
			p.itemMember(r, &seen, it)
		default:
			r.Skip()
		}
	}
	if !p.ok() {
		return
	}
	cut := r.Truncated()
	if p.kind == Responses && !roleOK && it.typed() {
		if !cut { // a cut item would write what the whole one never does
			p.writeItem(it, p.doc[start:r.Offset()])
		}
		return
	}
	if !headDone {
		if roleOK && role.Partial || !roleOK && cut {
			// Cut inside the role, or before a role that may still follow:
			// nothing of this message is a reliable prefix.
			return
		}
		p.head(role)
	}
	switch {
	case held && heldAt >= 0:
		p.emitText(p.at(&p.sub, heldAt), token)
	case held:
		p.emitHeld(heldRaw)
	}
	switch content.Kind {
	case jsonx.None, jsonx.Null:
	case jsonx.String:
		p.emitString(p.at(&p.sub, content.Off))
	case jsonx.Array:
		p.inSystem = p.kind == Messages && string(role.Raw) == roleSystem
		p.parts(p.at(&p.sub, content.Off), false)
		p.inSystem = false
	default:
		p.failText(CodeBadField, FieldContent, ruleContent, content.Raw)
		return
	}
	if toolCalls.Kind == jsonx.Array || toolCalls.Kind == jsonx.Object {
		p.emitByte(SepToolCalls)
		p.emit(toolCalls.Raw) // a cut value is its reliable head
	}
	if !cut {
		p.emitByte(SepMessage)
	}
}

// members is the set of an object's members read so far, a bit each.
type members uint16

// Members a message, input item or content part may give once.
const (
	seenRole members = 1 << iota
	seenContent
	seenToolCalls
	seenType
	seenText
	seenRefusal
	seenName
	seenArguments
	seenOutput
	seenInput
)

// once reports whether the member due next in r, field, is the first of its
// kind in the object (seen holds those met). A repeat is a field error and
// is passed over: JSON decoders keep the last, but what the first wrote
// cannot be unwritten, and keeping the first keeps the text of a cut body a
// prefix of the whole body's (FuzzParseRequest).
func (p *Parser) once(r *jsonx.Reader, seen *members, m members, field string) bool {
	if *seen&m != 0 {
		p.repeated(r, field)
		return false
	}
	*seen |= m
	return true
}

// repeated records a repeated member, field, due next in r.
func (p *Parser) repeated(r *jsonx.Reader, field string) {
	p.fail(CodeBadField, field, ruleOnce, r.Value().Raw)
}

// onceValue reads the member due next in r, field, into v when it is the
// first of its kind (see once).
func (p *Parser) onceValue(r *jsonx.Reader, seen *members, m members, field string, v *jsonx.Value) {
	if p.once(r, seen, m, field) {
		*v = r.Value()
	}
}

// head writes a message's role and SepRole.
func (p *Parser) head(role jsonx.Value) {
	switch {
	case role.Kind != jsonx.String:
	case !role.Escaped && !role.Partial:
		// Already the decoded text: no sub-reader reset and re-read.
		p.emit(role.Raw)
	default:
		p.emitString(p.at(&p.sub, role.Off))
	}
	p.emitByte(SepRole)
}

// parts writes an array of content parts, joined with SepPart. nested is
// set for the parts of a Messages tool_result, whose own tool blocks are
// written as media.
func (p *Parser) parts(r *jsonx.Reader, nested bool) {
	r.Array()
	nth := 0
	for r.Elem() && p.ok() {
		switch r.Kind() {
		case jsonx.None:
		case jsonx.Object:
			p.part(r, &nth, nested)
		default:
			p.failText(CodeBadField, FieldContent, rulePart, r.Value().Raw)
		}
	}
}

func (p *Parser) part(r *jsonx.Reader, nth *int, nested bool) {
	start := r.Offset()
	var typ, text, refusal jsonx.Value
	tool := &p.tool // Messages tool_use and tool_result
	if p.kind == Messages {
		*tool = toolBlock{}
	}
	var seen members
	r.Object()
	for r.Member() {
		switch string(r.Key()) {
		case FieldType:
			if !p.once(r, &seen, seenType, FieldType) {
				continue
			}
			if v := r.Value(); v.Kind == jsonx.String {
				typ = v
			}
		case FieldText:
			p.onceValue(r, &seen, seenText, FieldText, &text)
		case FieldRefusal:
			p.onceValue(r, &seen, seenRefusal, FieldRefusal, &refusal)
		case FieldName, FieldInput, FieldContent:
			if p.kind != Messages || nested {
				r.Skip()
				continue
			}
			p.toolMember(r, &seen, tool)
		default:
			r.Skip()
		}
	}
	if typ.Partial {
		return
	}
	if p.kind == Messages && p.block(r, typ, tool, nth, nested) {
		return
	}
	switch string(typ.Raw) { // raw: an escaped spelling is not a text type
	case FieldRefusal:
		text = refusal
		fallthrough
	case FieldText, "input_text", "output_text":
		if text.Kind != jsonx.String {
			if text.Kind == jsonx.None || text.Kind == jsonx.Null {
				return // vLLM skips text parts without text
			}
			p.failText(CodeBadField, FieldText, ruleString, text.Raw)
			return
		}
		if p.inSystem && billing(text) {
			return
		}
		p.nextPart(nth)
		p.emitString(p.at(&p.sub2, text.Off))
	default:
		if r.Truncated() {
			return // a cut-off media part would hash to a value the full body never gives
		}
		p.nextPart(nth)
		p.media(typ, p.doc[start:r.Offset()])
	}
}

// nextPart writes SepPart before every part but the first of its array.
func (p *Parser) nextPart(nth *int) {
	if *nth > 0 {
		p.emitByte(SepPart)
	}
	*nth++
}

// media writes the placeholder of a part or item that is not text: SepMedia
// type ':' 16 hex digits of FNV-1a 64 over its raw JSON SepMedia.
func (p *Parser) media(typ jsonx.Value, raw []byte) {
	p.emitByte(SepMedia)
	if typ.Kind == jsonx.String {
		p.emitString(p.at(&p.sub2, typ.Off))
	}
	h := fnv64(raw)
	p.hexbuf[0] = ':'
	for i := 0; i < 16; i++ {
		p.hexbuf[1+i] = "0123456789abcdef"[(h>>(60-4*uint(i)))&0xf]
	}
	p.hexbuf[17] = SepMedia
	p.emit(p.hexbuf[:])
}

// fnv64 is FNV-1a 64 (http://www.isthe.com/chongo/tech/comp/fnv/), inlined
// so that hashing a media part allocates nothing.
func fnv64(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}
