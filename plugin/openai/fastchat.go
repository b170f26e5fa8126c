package openai

import "github.com/gpuroute/gpuroute/plugin/jsonx"

// fastRoom is the output buffer space fastMessage decodes a message into;
// when less is free the buffer is flushed first. A longer message is
// declined (after decoding up to fastRoom bytes of it, wasted) and read by
// message, which streams it: a decline costs far less than decoding such a
// message (BenchmarkParseTextShapes).
const fastRoom = 2048

// fastMessages writes the run of chat messages starting with the one due
// next in r while they have the shapes clients send for plain turns, tool
// calls and tool results, and moves r past them: a "role" that is a string
// without escapes, members with keys without escapes, among them at most
// one "content" (a string or null, before the role or after it) and one
// "tool_calls", whitespace allowed between tokens. It writes what message
// writes for them, without the Reader's calls per member and value, most of
// a short message's cost (BenchmarkParseTextMessages). It returns false,
// having written nothing, when the first message has another shape (no
// role, a content array, an escaped key or role, a repeated member, a
// message over fastRoom bytes, an error or a cut): message reads it.
// FuzzMessagesFastPath holds the two to the same output.
func (p *Parser) fastMessages(r *jsonx.Reader) bool {
	d := p.doc
	i, end := r.Offset(), -1
	depth := r.Depth() + 1 // containers open around a message's members
	for p.werr == nil {
		if outBytes-p.pendingLen < fastRoom+64 {
			p.flush()
		}
		e := p.fastMessage(d, i, depth)
		if e < 0 {
			break
		}
		end = e
		if i = jsonx.SkipSpace(d, e); i >= len(d) || d[i] != ',' {
			break
		}
		if i = jsonx.SkipSpace(d, i+1); i >= len(d) || d[i] != '{' {
			break
		}
	}
	return end >= 0 && r.SkipTo(end)
}

// fastMessage appends to p.pending the text of the message object at d[i]
// when it has fastMessages' shape and fits in fastRoom bytes, and returns
// the offset after its '}'; else -1, with p.pending unchanged. Other
// members' values, depth containers deep, are validated by jsonx.SkipValue,
// which declines what the Reader would fail on. A content before the role
// (encoding/json sorts a map's keys so) is decoded first and moved behind
// the role once it is read.
func (p *Parser) fastMessage(d []byte, i, depth int) int {
	if i >= len(d) || d[i] != '{' {
		return -1
	}
	n0 := p.pendingLen
	buf := p.pending[:n0:min(n0+fastRoom, outBytes)]
	role, content, tools := false, false, false
	tc, tcEnd := 0, 0 // the raw tool_calls JSON, when an array or object
	e := i + 1
	for first := true; ; first = false {
		if i = jsonx.SkipSpace(d, e); i >= len(d) {
			return -1
		}
		if d[i] == '}' {
			break
		}
		if !first {
			if d[i] != ',' {
				return -1
			}
			if i = jsonx.SkipSpace(d, i+1); i >= len(d) {
				return -1
			}
		}
		if d[i] != '"' {
			return -1
		}
		q, esc := jsonx.StringEnd(d, i+1)
		if q < 0 || esc {
			return -1
		}
		key := d[i+1 : q]
		if i = jsonx.SkipSpace(d, q+1); i >= len(d) || d[i] != ':' {
			return -1
		}
		if i = jsonx.SkipSpace(d, i+1); i >= len(d) {
			return -1
		}
		switch string(key) {
		case FieldRole:
			if role || d[i] != '"' {
				return -1
			}
			role = true
			var esc bool
			if e, esc = jsonx.StringEnd(d, i+1); e < 0 || esc || e-i > 64 {
				return -1
			}
			// The role and SepRole go before whatever content was
			// decoded already.
			n := e - i
			if cap(buf)-len(buf) < n {
				return -1
			}
			buf = buf[:len(buf)+n]
			copy(buf[n0+n:], buf[n0:len(buf)-n])
			copy(buf[n0:], d[i+1:e])
			buf[n0+n-1] = SepRole
			e++
		case FieldContent:
			if content {
				return -1
			}
			content = true
			switch d[i] {
			case '"':
				// A remembered content before its role (a long system
				// prompt, in encoding/json's order) is message's to
				// replay: declined now, not after decoding fastRoom
				// bytes of it.
				if !role && p.remembered(i) {
					return -1
				}
				var ok bool
				if buf, e, ok = jsonx.DecodeString(buf, d, i+1); !ok {
					return -1
				}
				e++
			case 'n':
				e = jsonx.SkipValue(d, i, depth)
			default:
				return -1 // parts, or a wrong kind
			}
		case FieldToolCalls:
			if tools {
				return -1
			}
			tools = true
			e = jsonx.SkipValue(d, i, depth)
			if d[i] == '[' || d[i] == '{' {
				tc, tcEnd = i, e
			}
		default:
			e = jsonx.SkipValue(d, i, depth)
		}
		if e < 0 {
			return -1
		}
	}
	if !role {
		return -1
	}
	if tcEnd > tc {
		if cap(buf)-len(buf) < 2+tcEnd-tc {
			return -1
		}
		buf = append(buf, SepToolCalls)
		buf = append(buf, d[tc:tcEnd]...)
	}
	if len(buf) == cap(buf) {
		return -1
	}
	p.pendingLen = len(append(buf, SepMessage))
	return i + 1
}
