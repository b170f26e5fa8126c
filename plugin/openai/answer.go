package openai

import (
	"io"

	"github.com/gpuroute/gpuroute/plugin/jsonx"
)

// The answer's text, for recording it: a conversation's next request quotes
// the answer as an assistant turn, and an engine that cached the answer's
// tokens holds that turn's prefix. The text is written framed as ParseText
// frames that turn, so that a prefix hasher continued from the prompt's
// chain (prefix.Continuation) holds the next request's blocks:
//
//	completions:                the text (the next prompt continues it)
//	chat, messages, responses:  "assistant" SepRole text SepMessage, the text
//	                            of several content blocks or parts joined
//	                            with SepPart
//
// Only the first choice (index 0) is recorded: a request with n > 1 has no
// single next turn. The text ends where a tool call begins (its JSON as the
// client will send it back is not in the stream) or at an oversized event,
// and then the closing SepMessage is not written; reasoning and thinking
// are left out, as ParseText leaves them out of earlier turns.

// answerScratch is the decoding scratch of a recorded text.
const answerScratch = 256

// answer states.
const (
	answerOff     uint8 = iota // no writer
	answerReady                // nothing written yet
	answerWriting              // the head is written
	answerEnded                // no more is written
)

// answer writes an answer's text into a writer (see above). It implements
// io.Writer itself, to count what the writer took and stop at its error.
type answer struct {
	w       io.Writer
	kind    Kind
	state   uint8
	block   int   // the block or part the text being written belongs to
	chars   int64 // bytes the writer took
	whole   bool  // the closing separator was written (completions: the text ended)
	rd      jsonx.Reader
	one     [1]byte
	scratch [answerScratch]byte
}

func (a *answer) reset(kind Kind, w io.Writer) {
	a.w, a.kind, a.block, a.chars, a.whole = w, kind, 0, 0, false
	a.state = answerOff
	if w != nil {
		a.state = answerReady
	}
}

// Write passes b to the writer; an error or a short write ends the answer.
func (a *answer) Write(b []byte) (int, error) {
	if a.state == answerEnded || a.state == answerOff {
		return len(b), nil
	}
	n, err := a.w.Write(b)
	if n < 0 || n > len(b) {
		n = 0
	}
	a.chars += int64(n)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		a.state = answerEnded
	}
	return len(b), nil
}

func (a *answer) writeByte(c byte) {
	a.one[0] = c
	a.Write(a.one[:])
}

// head writes the turn's head when nothing is written yet.
func (a *answer) head() {
	if a.state != answerReady {
		return
	}
	a.state = answerWriting
	if a.kind != Completion {
		n := copy(a.scratch[:], roleAssistant)
		a.scratch[n] = SepRole
		a.Write(a.scratch[:n+1])
	}
}

// text writes the decoded text of the string contents d[from:to], which are
// valid and whole (d[from-1] and d[to] are its quotes), of block.
func (a *answer) text(d []byte, from, to, block int) {
	if a.state == answerOff || a.state == answerEnded || to <= from {
		return
	}
	if a.state == answerWriting && block != a.block {
		a.writeByte(SepPart)
	}
	a.head()
	a.block = block
	a.rd.ResetAt(d[:to+1], from-1)
	a.rd.WriteString(a, a.scratch[:])
}

// stop ends the text where a part it cannot record begins.
func (a *answer) stop() {
	if a.state != answerOff {
		a.state = answerEnded
	}
}

// end closes the turn of an answer that ended whole.
func (a *answer) end() {
	if a.state != answerReady && a.state != answerWriting {
		return
	}
	a.head()
	if a.kind != Completion {
		a.writeByte(SepMessage)
	}
	a.whole = a.state == answerWriting
	a.state = answerEnded
}
