package openai

import "github.com/gpuroute/gpuroute/plugin/jsonx"

// The OpenAI Responses API (POST /v1/responses): "instructions" is the
// system prompt; "input" is a string (one user message) or a list of input
// items: messages (a role, content as a string or input_text, input_image,
// output_text, refusal parts), function_call, function_call_output,
// reasoning and others, told apart by "type". Field names are OpenAI's, as
// vLLM's vllm/entrypoints/openai/responses implements them. The prompt is
// framed as chat's: instructions as a system message, then the input.

// Input item types that are not messages.
const (
	itemMessage            = "message"
	itemFunctionCall       = "function_call"
	itemFunctionCallOutput = "function_call_output"
	itemReasoning          = "reasoning"
)

// maxIDBytes bounds a response id (vLLM's and OpenAI's are under 64 bytes).
const maxIDBytes = 256

// writeInstructions writes the instructions due next in r as a system
// message: "system" SepRole text SepMessage; an empty string writes nothing.
func (p *Parser) writeInstructions(r *jsonx.Reader) {
	switch r.Kind() {
	case jsonx.None, jsonx.Null:
		r.Skip()
	case jsonx.String:
		if !p.nonEmptyString(r) {
			r.Skip()
			return
		}
		p.emitHead(roleSystem)
		p.emitString(r)
		if p.ok() && !r.Truncated() {
			p.emitByte(SepMessage)
		}
	default:
		p.failText(CodeBadField, FieldInstructions, ruleString, r.Value().Raw)
	}
}

// writeInput writes the input due next in r: a string as a user message
// ("user" SepRole text SepMessage), a list item by item.
func (p *Parser) writeInput(r *jsonx.Reader) {
	switch r.Kind() {
	case jsonx.None, jsonx.Null:
		r.Skip()
	case jsonx.String:
		p.emitHead(roleUser)
		p.emitString(r)
		if p.ok() && !r.Truncated() {
			p.emitByte(SepMessage)
		}
	case jsonx.Array:
		p.writeMessages(r)
	default:
		p.failText(CodeBadField, FieldInput, ruleInput, r.Value().Raw)
	}
}

// item holds the members of a Responses input item that message reads
// besides a message's (Parser.item, reset for each item).
type item struct {
	typ, name, arguments, output jsonx.Value
}

// typed reports an item of a type other than message, which has no role.
func (it *item) typed() bool {
	return it.typ.Kind == jsonx.String && !it.typ.Partial && string(it.typ.Raw) != itemMessage
}

// itemMember reads the member due next in r into it.
func (p *Parser) itemMember(r *jsonx.Reader, seen *members, it *item) {
	switch string(r.Key()) {
	case FieldType:
		p.onceValue(r, seen, seenType, FieldType, &it.typ)
	case FieldName:
		p.onceValue(r, seen, seenName, FieldName, &it.name)
	case FieldArguments:
		p.onceValue(r, seen, seenArguments, FieldArguments, &it.arguments)
	default: // FieldOutput
		p.onceValue(r, seen, seenOutput, FieldOutput, &it.output)
	}
}

// writeItem writes a whole input item that is not a message, raw its
// JSON, as the chat message it stands for:
//
//	function_call:         "assistant" SepRole SepToolCalls name SepToolCalls
//	                       arguments SepMessage (as a Messages tool_use)
//	function_call_output:  "tool" SepRole output SepMessage (a string, or
//	                       its parts)
//	reasoning:             nothing (as chat's reasoning_content)
//	any other type:        the media placeholder of the whole item, SepMessage
func (p *Parser) writeItem(it *item, raw []byte) {
	switch string(it.typ.Raw) {
	case itemReasoning:
		return
	case itemFunctionCall:
		p.emitHead(roleAssistant)
		p.emitByte(SepToolCalls)
		p.emitStringValue(it.name)
		p.emitByte(SepToolCalls)
		p.emitStringValue(it.arguments)
	case itemFunctionCallOutput:
		p.emitHead(roleTool)
		switch it.output.Kind {
		case jsonx.None, jsonx.Null:
		case jsonx.String:
			p.emitString(p.at(&p.sub, it.output.Off))
		case jsonx.Array:
			p.parts(p.at(&p.sub, it.output.Off), false)
		default:
			p.failText(CodeBadField, FieldOutput, ruleContent, it.output.Raw)
			return
		}
	default:
		p.media(it.typ, raw)
	}
	p.emitByte(SepMessage)
}

// emitStringValue writes the decoded text of v when it is a string.
func (p *Parser) emitStringValue(v jsonx.Value) {
	if v.Kind == jsonx.String {
		p.emitString(p.at(&p.sub, v.Off))
	}
}

// previousResponse reads "previous_response_id" (see
// Request.PreviousResponseID). A cut id reads as absent.
func (p *Parser) previousResponse(v jsonx.Value) {
	switch {
	case v.Kind == jsonx.None, v.Kind == jsonx.Null, v.Partial:
	case v.Kind != jsonx.String:
		p.fail(CodeBadField, FieldPreviousResponseID, ruleString, v.Raw)
	case len(v.Raw) > maxIDBytes:
		p.fail(CodeBadField, FieldPreviousResponseID, ruleIDLen, v.Raw)
	default:
		p.out.PreviousResponseID, p.out.HasPreviousResponse = idHash(v.Raw), true
	}
}

// idHash is FNV-1a 64 of the decoded id whose raw string contents are raw
// (at most maxIDBytes long): two spellings of one id hash alike.
func idHash(raw []byte) uint64 {
	var buf [maxIDBytes]byte
	return fnv64(jsonx.AppendUnescape(buf[:0], raw[:min(len(raw), maxIDBytes)]))
}
