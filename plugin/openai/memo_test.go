package openai

import (
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/gpuroute/gpuroute/scoring/prefix"
)

var _ Memo = (*prefix.Memo)(nil)

// hashed is what the router takes from a parse: the chain keyed with the
// model, the characters hashed and the parse's outcome.
type hashed struct {
	chain       []uint64
	chars       int64
	promptChars int
	promptBad   bool
	model       string
	err         string
}

// parseHashed parses body into h through w (h itself, or a memo over it)
// as the router does, and returns what the router keeps. mode bit 0:
// completions, bit 1: truncated.
func parseHashed(p *Parser, h *prefix.Hasher, w io.Writer, body []byte, mode uint8) hashed {
	kind := Chat
	if mode&1 == 1 {
		kind = Completion
	}
	var req Request
	h.ResetDeferred()
	err := p.ParseText(kind, body, mode&2 == 2, w, &req)
	h.SetSeed(string(req.Model), "")
	out := hashed{chain: slices.Clone(h.Chain()), chars: h.Chars(), promptChars: req.PromptChars,
		promptBad: req.PromptBad, model: string(req.Model)}
	if err != nil {
		out.err = err.Error()
	}
	return out
}

func (a hashed) equal(b hashed) bool {
	return slices.Equal(a.chain, b.chain) && a.chars == b.chars && a.promptChars == b.promptChars &&
		a.promptBad == b.promptBad && a.model == b.model && a.err == b.err
}

// memoCompare parses first, then each of then, through a memo (remembering
// strings of at least minBytes), and fails unless every parse of then
// gives what a parse straight into a hasher gives. It returns the replays.
func memoCompare(t testing.TB, first string, then []string, mode uint8, minBytes int) uint64 {
	t.Helper()
	var mp, pp Parser
	var mh, ph prefix.Hasher
	mh.Init(0, 1024)
	ph.Init(0, 1024)
	var m prefix.Memo
	m.Init(&mh, 4, 1<<16, minBytes)
	parseHashed(&mp, &mh, &m, []byte(first), mode)
	for i, body := range then {
		got := parseHashed(&mp, &mh, &m, []byte(body), mode)
		want := parseHashed(&pp, &ph, &ph, []byte(body), mode)
		if !got.equal(want) {
			t.Fatalf("mode %d: body %d %.80q through the memo = %d blocks, %d chars, %d prompt chars, bad %v, %q, %q;"+
				" straight = %d blocks, %d chars, %d prompt chars, bad %v, %q, %q (chains equal: %v)", mode, i, body,
				len(got.chain), got.chars, got.promptChars, got.promptBad, got.model, got.err,
				len(want.chain), want.chars, want.promptChars, want.promptBad, want.model, want.err,
				slices.Equal(got.chain, want.chain))
		}
	}
	return m.Replays()
}

// TestParseTextMemo: a long string met again is replayed, in every place a
// prompt string can be, and the result is what decoding it gives; a string
// that differs, or meets another state (another role before it), or is cut,
// is decoded.
func TestParseTextMemo(t *testing.T) {
	sys := strings.Repeat(`Follow the \"policy\" below.\nAnswer in SQL \u00e9\ud83d\ude00. `, 100) // ~6.5 KB raw
	other := strings.Replace(sys, "SQL", "SQX", 1)
	chat := func(role, content, q string) string {
		return `{"model":"m","messages":[{"role":"` + role + `","content":"` + content +
			`"},{"role":"user","content":"` + q + `"}]}`
	}
	sorted := func(role, content, q string) string { // encoding/json's order for a map
		return `{"messages":[{"content":"` + content + `","role":"` + role +
			`"},{"content":"` + q + `","role":"user"}],"model":"m"}`
	}
	parts := func(content string) string {
		return `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"` + content +
			`"},{"type":"image_url","image_url":{"url":"x"}}]}]}`
	}
	full := chat("system", sys, "q2")
	// Bodies cut just after an escaped quote deep in the system message:
	// what was read is no whole string, though it ends with a quote.
	cutQuote := func(body string) string {
		i := strings.Index(body[5000:], `\"`)
		return body[:5000+i+2]
	}
	tests := []struct {
		name    string
		first   string
		then    []string
		mode    uint8
		replays uint64
	}{
		{name: "role first", first: chat("system", sys, "q1"), then: []string{chat("system", sys, "q2"), chat("system", sys, "q3")}, replays: 2},
		{name: "content first", first: sorted("system", sys, "q1"), then: []string{sorted("system", sys, "q2")}, replays: 1},
		{name: "order swapped", first: chat("system", sys, "q1"), then: []string{sorted("system", sys, "q2")}, replays: 1},
		{name: "another model", first: chat("system", sys, "q1"), then: []string{strings.Replace(chat("system", sys, "q2"), `"m"`, `"n"`, 1)}, replays: 1},
		{name: "another role", first: chat("system", sys, "q1"), then: []string{chat("developer", sys, "q2")}},
		{name: "another role, content first", first: sorted("system", sys, "q1"), then: []string{sorted("developer", sys, "q2")}},
		{name: "content twice, the second a field error", first: sorted("system", sys, "q1"),
			then: []string{`{"messages":[{"content":"` + sys + `","role":"system","content":"B"}],"model":"m"}`}, replays: 1},
		{name: "content differs", first: chat("system", sys, "q1"), then: []string{chat("system", other, "q2")}},
		{name: "cut inside", first: chat("system", sys, "q1"), then: []string{full[:len(full)/2]}, mode: 2},
		{name: "cut after an escaped quote", first: cutQuote(full), then: []string{full, cutQuote(full)}, mode: 2},
		{name: "cut after an escaped quote, content first", first: cutQuote(sorted("system", sys, "q1")), then: []string{sorted("system", sys, "q1")}, mode: 2},
		{name: "cut after", first: chat("system", sys, "q1"), then: []string{full[:len(full)-20]}, mode: 2, replays: 1},
		{name: "content parts", first: parts(sys), then: []string{parts(sys)}, replays: 1},
		{name: "prompt string", first: `{"model":"m","prompt":"` + sys + `"}`, then: []string{`{"prompt":"` + sys + `","model":"m"}`}, mode: 1, replays: 1},
		{name: "prompt array", first: `{"model":"m","prompt":["` + sys + `","a"]}`, then: []string{`{"model":"m","prompt":["` + sys + `","b"]}`}, mode: 1, replays: 1},
		{name: "prompt array, second", first: `{"model":"m","prompt":["a","` + sys + `"]}`, then: []string{`{"model":"m","prompt":["b","` + sys + `"]}`}, mode: 1},
		{name: "bad body after", first: chat("system", sys, "q1"), then: []string{chat("system", sys, "q2") + "x"}, replays: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := memoCompare(t, tt.first, tt.then, tt.mode, 4096); got != tt.replays {
				t.Errorf("replays = %d, want %d", got, tt.replays)
			}
		})
	}
}

// FuzzParseTextMemo: whatever was parsed before, a body parsed through the
// memo gives what parsing it straight gives, in every mode. The memo
// remembers strings of 8 bytes and more here, so that short inputs reach
// it.
func FuzzParseTextMemo(f *testing.F) {
	long := `a \"b\" \u00e9\ud83d\ude00\n`
	for _, s := range [][2]string{
		{`{"model":"m","messages":[{"role":"user","content":"` + long + `"}]}`, `{"model":"m","messages":[{"role":"user","content":"` + long + `"},{"role":"user","content":"x"}]}`},
		{`{"messages":[{"content":"` + long + `","role":"user"}],"model":"m"}`, `{"messages":[{"content":"` + long + `","role":"user"}],"model":"m"}`},
		{`{"messages":[{"content":"` + long + `","role":"user"}],"model":"m"}`, `{"messages":[{"content":"` + long + `","role":"tool"}],"model":"m"}`},
		{`{"messages":[{"content":"` + long + `","role":"user"}],"model":"m"}`, `{"messages":[{"content":"` + long + `","role":"user","content":"b"}],"model":"m"}`},
		{`{"model":"m","prompt":["` + long + `","` + long + `"]}`, `{"model":"m","prompt":["` + long + `"]}`},
		{`{"model":"m","prompt":"` + long + `"}`, `{"model":"m","prompt":"` + long},
		{`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"` + long + `"}]}]}`, `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"` + long + `"},{"type":"text","text":"` + long + `"}]}]}`},
	} {
		for _, mode := range []uint8{0, 1, 2} {
			f.Add(s[0], s[1], mode)
		}
	}
	f.Fuzz(func(t *testing.T, first, then string, mode uint8) {
		memoCompare(t, first, []string{then, then, first}, mode&3, 8)
	})
}

// countingMemo counts the Match calls made of the memo it wraps.
type countingMemo struct {
	*prefix.Memo
	matches int
}

func (c *countingMemo) Match(rest []byte, end byte) (int, uint64, bool) {
	c.matches++
	return c.Memo.Match(rest, end)
}

// TestMemoMatchOnce: a remembered content before its role is compared once
// per parse, though both the fast path (which declines the message for it)
// and the general walk (which replays it) ask about it.
func TestMemoMatchOnce(t *testing.T) {
	sys := strings.Repeat(`Follow the \"policy\" below.\n`, 200) // ~6 KB raw
	body := []byte(`{"messages":[{"content":"` + sys + `","role":"system"},{"content":"q","role":"user"}],"model":"m"}`)
	var h prefix.Hasher
	h.Init(0, 1024)
	var pm prefix.Memo
	pm.Init(&h, 4, 1<<16, 4096)
	m := &countingMemo{Memo: &pm}
	var p Parser
	var req Request
	for i := range 2 {
		h.ResetDeferred()
		m.matches = 0
		if err := p.ParseText(Chat, body, false, m, &req); err != nil {
			t.Fatalf("parse %d: %v", i, err)
		}
		if m.matches != 1 {
			t.Errorf("parse %d: Match called %d times, want 1", i, m.matches)
		}
	}
	if pm.Replays() != 1 {
		t.Errorf("replays = %d, want 1 (the second parse)", pm.Replays())
	}
}
