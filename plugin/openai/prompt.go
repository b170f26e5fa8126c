package openai

import (
	"io"

	"github.com/gpuroute/gpuroute/plugin/jsonx"
)

func (p *Parser) ok() bool { return p.werr == nil && !p.stop }

// failText records a prompt of the wrong shape and stops writing it.
func (p *Parser) failText(code Code, field, rule string, v []byte) {
	p.stop = true
	p.fail(code, field, rule, v)
}

// emit adds b to the output: copied into p.pending when it fits, else
// after flushing p.pending, straight to the writer when it is long. What the writer
// sees is the same byte stream in fewer pieces; flush ends it.
func (p *Parser) emit(b []byte) {
	if len(b) <= outBytes-p.pendingLen {
		p.pendingLen += copy(p.pending[p.pendingLen:], b)
		return
	}
	p.flush()
	if len(b) < outBytes/2 {
		p.pendingLen = copy(p.pending[:], b)
		return
	}
	p.write(b)
}

// flush writes the pending output.
func (p *Parser) flush() {
	if p.pendingLen > 0 {
		n := p.pendingLen
		p.pendingLen = 0
		p.write(p.pending[:n])
	}
}

func (p *Parser) write(b []byte) {
	if p.werr != nil || len(b) == 0 {
		return
	}
	n, err := p.w.Write(b)
	if n < 0 || n > len(b) {
		n = 0
	}
	p.n += n
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	p.werr = err
}

// emitHead writes a message head for a role the body does not spell out:
// role SepRole.
func (p *Parser) emitHead(role string) {
	if len(role)+1 > outBytes-p.pendingLen {
		p.flush()
	}
	p.pendingLen += copy(p.pending[p.pendingLen:], role)
	p.emitByte(SepRole)
}

// nonEmptyString reports whether the value due next in r is a string known
// not to be empty: a string cut just after its opening quote may be.
func (p *Parser) nonEmptyString(r *jsonx.Reader) bool {
	i := r.Offset()
	return i+1 < len(p.doc) && p.doc[i] == '"' && p.doc[i+1] != '"'
}

// hasPrefix reports whether b begins with s.
func hasPrefix(b []byte, s string) bool { return len(b) >= len(s) && string(b[:len(s)]) == s }

func (p *Parser) emitByte(c byte) {
	p.one[0] = c
	p.emit(p.one[:])
}

// emitString decodes the string value due next in r, or has the writer
// replay it when it is long and the writer is a Memo.
func (p *Parser) emitString(r *jsonx.Reader) { p.emitText(r, 0) }

// emitText is emitString for a value memoMatch passed over with token (0:
// none), which stands for comparing it again.
func (p *Parser) emitText(r *jsonx.Reader, token uint64) {
	if p.memo == nil || !p.memoString(r, token) {
		r.WriteString(&p.sink, p.scratch[:])
	}
}

func (p *Parser) writePrompt(r *jsonx.Reader) {
	switch r.Kind() {
	case jsonx.Null:
	case jsonx.String:
		p.emitString(r)
	case jsonx.Array:
		r.Array()
		elem := jsonx.None
		for i := 0; r.Elem() && p.ok(); i++ {
			vk := r.Kind()
			if vk == jsonx.None {
				break // cut
			}
			if i == 0 {
				elem = vk
			} else if vk != elem {
				p.failText(CodeBadField, FieldPrompt, rulePrompt, r.Value().Raw)
				return
			}
			switch vk {
			case jsonx.String:
				if i > 0 {
					p.emitByte(SepMessage)
				}
				p.emitString(r)
			case jsonx.Number:
				p.emitToken(r.Value())
			case jsonx.Array:
				if i > 0 {
					p.emit(tokenSep[:])
				}
				r.Array()
				for r.Elem() && p.ok() {
					t := r.Value()
					switch t.Kind {
					case jsonx.None:
					case jsonx.Number:
						p.emitToken(t)
					default:
						p.failText(CodeBadField, FieldPrompt, rulePrompt, t.Raw)
					}
				}
			default:
				p.failText(CodeBadField, FieldPrompt, rulePrompt, r.Value().Raw)
			}
		}
	default:
		if v := r.Value(); v.Kind != jsonx.None { // None: a number or literal cut at the end
			p.failText(CodeBadField, FieldPrompt, rulePrompt, v.Raw)
		}
	}
}

var tokenSep = [4]byte{0xff, 0xff, 0xff, 0xff}

func (p *Parser) emitToken(v jsonx.Value) {
	if v.Kind == jsonx.None {
		return // cut: the number may continue
	}
	id, ok := jsonx.ParseInt(v.Raw)
	if !ok || id < 0 || id > 0xffffffff {
		p.failText(CodeBadField, FieldPrompt, ruleTokenID, v.Raw)
		return
	}
	// Little-endian by hand: encoding/binary is kept out of the module.
	p.scratch[0], p.scratch[1], p.scratch[2], p.scratch[3] = byte(id), byte(id>>8), byte(id>>16), byte(id>>24)
	p.emit(p.scratch[:4])
	p.tokens++
}
