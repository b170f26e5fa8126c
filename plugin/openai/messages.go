package openai

import "github.com/gpuroute/gpuroute/plugin/jsonx"

// The Anthropic Messages API (POST /v1/messages): "system" is a string or
// an array of text blocks, "messages" alternate user and assistant turns
// whose content is a string or an array of content blocks. Field and block
// names are Anthropic's, as vLLM's vllm/entrypoints/anthropic implements
// them. The prompt is framed as chat's, so a Messages request and the chat
// request vLLM converts it to write the same bytes where they mean the same.

// Roles written for prompts that name none.
const (
	roleSystem    = "system"
	roleUser      = "user"
	roleAssistant = "assistant"
	roleTool      = "tool"
)

// Content block types of the Messages API that are not text or media.
const (
	blockToolUse          = "tool_use"
	blockToolResult       = "tool_result"
	blockThinking         = "thinking"
	blockRedactedThinking = "redacted_thinking"
)

// billingHeader begins a system text block Claude Code sends with a hash
// that changes every request. vLLM leaves the block out of the prompt
// (vllm/entrypoints/anthropic/serving.py) so that the rest can be a cached
// prefix; the parser leaves it out too, or no two such requests would share
// a first block.
const billingHeader = "x-anthropic-billing-header"

// billing reports a system text block that is Claude Code's billing header,
// or a cut one that may be.
func billing(text jsonx.Value) bool {
	return hasPrefix(text.Raw, billingHeader) ||
		text.Partial && len(text.Raw) < len(billingHeader) && string(text.Raw) == billingHeader[:len(text.Raw)]
}

// writeSystem writes the system prompt due next in r as a system message:
// "system" SepRole text SepMessage, an array's blocks as content parts. An
// empty string writes nothing, as vLLM sends no system message for it.
func (p *Parser) writeSystem(r *jsonx.Reader) {
	switch r.Kind() {
	case jsonx.None, jsonx.Null:
		r.Skip()
		return
	case jsonx.String:
		if !p.nonEmptyString(r) {
			r.Skip()
			return
		}
		p.emitHead(roleSystem)
		p.emitString(r)
	case jsonx.Array:
		p.emitHead(roleSystem)
		p.inSystem = true
		p.parts(r, false)
		p.inSystem = false
	default:
		p.failText(CodeBadField, FieldSystem, ruleSystem, r.Value().Raw)
		return
	}
	if p.ok() && !r.Truncated() {
		p.emitByte(SepMessage)
	}
}

// toolBlock is what a Messages tool_use or tool_result block holds
// (Parser.tool, reset for each block).
type toolBlock struct {
	name, input, content jsonx.Value
}

// toolMember reads the member due next in r into t: "name" and "input" of a
// tool_use, "content" of a tool_result.
func (p *Parser) toolMember(r *jsonx.Reader, seen *members, t *toolBlock) {
	switch string(r.Key()) {
	case FieldName:
		p.onceValue(r, seen, seenName, FieldName, &t.name)
	case FieldInput:
		p.onceValue(r, seen, seenInput, FieldInput, &t.input)
	default: // FieldContent
		p.onceValue(r, seen, seenContent, FieldContent, &t.content)
	}
}

// block writes the Messages content blocks that are neither text nor media
// and reports whether typ was one of them:
//
//	thinking, redacted_thinking:  nothing (vLLM passes thinking on as
//	                              reasoning, which chat templates leave out
//	                              of earlier turns)
//	tool_use:                     SepToolCalls name SepToolCalls raw input JSON
//	tool_result:                  SepToolCalls content (a string, or its
//	                              blocks as parts, tool blocks among them as media)
//
// A cut tool_use writes only when its name was read whole, so that what it
// writes is a prefix of what the whole block writes. Inside a tool_result
// (nested) the tool blocks are media.
func (p *Parser) block(r *jsonx.Reader, typ jsonx.Value, t *toolBlock, nth *int, nested bool) bool {
	switch string(typ.Raw) {
	case blockThinking, blockRedactedThinking:
		return true
	case blockToolUse:
		if nested {
			return false
		}
		if r.Truncated() && (t.name.Kind != jsonx.String || t.name.Partial) {
			return true
		}
		p.nextPart(nth)
		p.emitByte(SepToolCalls)
		if t.name.Kind == jsonx.String {
			p.emitString(p.at(&p.sub2, t.name.Off))
		}
		p.emitByte(SepToolCalls)
		if t.input.Kind == jsonx.Object || t.input.Kind == jsonx.Array {
			p.emit(t.input.Raw) // a cut value is its reliable head
		}
		return true
	case blockToolResult:
		if nested {
			return false
		}
		p.nextPart(nth)
		p.emitByte(SepToolCalls)
		switch t.content.Kind {
		case jsonx.String:
			p.emitString(p.at(&p.sub2, t.content.Off))
		case jsonx.Array:
			p.parts(p.at(&p.sub3, t.content.Off), true)
		}
		return true
	}
	return false
}
