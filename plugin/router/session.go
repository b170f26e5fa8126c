package router

import (
	"github.com/gpuroute/gpuroute/plugin/proxy"
	"github.com/gpuroute/gpuroute/scoring"
	"github.com/gpuroute/gpuroute/scoring/prefix"
)

// Bounds of the session table.
const (
	// sessionSlots is how many sessions a worker remembers (a power of
	// two); past it the least recently served in a key's probe window
	// gives way.
	sessionSlots = 4096
	// sessionProbe is how many slots from its home a key may take.
	sessionProbe = 8
	// maxSessionTokens bounds what a session entry claims cached.
	maxSessionTokens = 1 << 30
)

// Kinds of session key, mixed into the key so that a header value and a
// response id never name each other's session.
const (
	sessionByHeader   = 1
	sessionByResponse = 2
)

// sessions is the worker's soft session affinity: which replica served a
// session's last request and how much of the session's context it
// computed. A session is keyed by the configured session header's value
// (session_header) or, for the Responses API, by the response a request
// continues (previous_response_id names the response id the stream
// reported). The replica is treated as holding that context, as if the
// prefix index had it: the decision still weighs its queue and may send
// the request elsewhere (TestSessionAffinity), so a client naming a
// session never picks an upstream. Keys mix in the request's tenant: one
// tenant's session ids say nothing of another's.
type sessions struct {
	slots []sessionEntry
	clock uint32
}

type sessionEntry struct {
	key     uint64 // 0: empty
	tokens  int32
	replica int32
	stamp   uint32 // clock of the last remember
}

// streamSession is a stream's part: the keys its response teaches
// (header: the session's; the continued response's resolves at dispatch)
// and the affinity resolved for the request (replica -1: none).
type streamSession struct {
	key          uint64
	replica      int
	tokens       int
	promptTokens int
}

// setup empties the table. Its slots are allocated at the first session
// remembered, once: a fleet that uses neither session headers nor the
// Responses API keeps a live heap without them (the gc-pressure fault
// scenario holds the module's memory flat after its warm-up).
func (t *sessions) setup() {
	t.slots, t.clock = nil, 0
}

// adopt takes from's sessions over for a new configuration (engine maps
// from's replicas to the same engines in it, -1: none): a session on a
// replica that is no longer the same engine (removed, or re-addressed: a
// cold cache, and no stored response to continue) is forgotten
// (TestSessionAffinity, across a reconfiguration). from keeps none.
func (t *sessions) adopt(from *sessions, engine []int) {
	t.slots, t.clock, from.slots = from.slots, from.clock, nil
	for i := range t.slots {
		e := &t.slots[i]
		if e.key == 0 {
			continue
		}
		if r := remap(engine, int(e.replica)); r >= 0 {
			e.replica = int32(r)
		} else {
			*e = sessionEntry{} // find looks at the whole probe window: no tombstone
		}
	}
}

// sessionKey mixes a key's kind, its tenant and its value's hash into a
// table key (never 0).
func sessionKey(kind, tenant, h uint64) uint64 {
	return prefix.Finalize(h^prefix.Finalize(tenant+kind)) | 1
}

// headerKey hashes a session header value (FNV-1a 64, allocation-free).
func headerKey(v []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range v {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return h
}

func (t *sessions) find(key uint64) *sessionEntry {
	if t.slots == nil {
		return nil
	}
	home := int(key>>32) & (sessionSlots - 1)
	for j := range sessionProbe {
		if e := &t.slots[(home+j)&(sessionSlots-1)]; e.key == key {
			return e
		}
	}
	return nil
}

// remember records that replica served key's session, tokens of it.
func (t *sessions) remember(key uint64, replica, tokens int) {
	if t.slots == nil {
		t.slots = make([]sessionEntry, sessionSlots)
	}
	t.clock++
	home := int(key>>32) & (sessionSlots - 1)
	at := -1
	for j := range sessionProbe {
		i := (home + j) & (sessionSlots - 1)
		e := &t.slots[i]
		if e.key == key || e.key == 0 {
			at = i
			break
		}
		if at < 0 || int32(e.stamp-t.slots[at].stamp) < 0 {
			at = i
		}
	}
	t.slots[at] = sessionEntry{key: key, tokens: int32(min(tokens, maxSessionTokens)), replica: int32(replica), stamp: t.clock}
}

// begin reads the request's session header (in the request headers'
// callback, after the tenant is known).
func (t *sessions) begin(s *stream, header string) {
	s.session = streamSession{replica: -1}
	if header == "" {
		return
	}
	if v, err := proxy.GetHeaderMapValue(proxy.MapTypeHttpRequestHeaders, header); err == nil && len(v) > 0 {
		s.session.key = sessionKey(sessionByHeader, s.tenant, headerKey(v))
	}
}

// resolve finds the request's session: the response it continues first
// (the engine prefills that response's whole conversation, which the
// request's body does not carry: its tokens join the prompt), else its
// header's session.
func (t *sessions) resolve(s *stream, req *scoring.Request, continues bool, responseID uint64) {
	ss := &s.session
	if continues {
		if e := t.find(sessionKey(sessionByResponse, s.tenant, responseID)); e != nil {
			ss.replica, ss.tokens = int(e.replica), int(e.tokens)
			req.PromptTokens += ss.tokens
			return
		}
	}
	if ss.key != 0 {
		if e := t.find(ss.key); e != nil {
			ss.replica, ss.tokens = int(e.replica), min(int(e.tokens), req.PromptTokens)
		}
	}
}

// affinity raises the session's replica's cached tokens to the session's.
func (t *sessions) affinity(s *stream, cached []int) {
	if i := s.session.replica; i >= 0 && i < len(cached) {
		cached[i] = max(cached[i], s.session.tokens)
	}
}

// dispatched records the session's new replica as the request leaves.
func (t *sessions) dispatched(s *stream, replica int, promptTokens int) {
	s.session.promptTokens = promptTokens
	if s.session.key != 0 {
		t.remember(s.session.key, replica, promptTokens)
	}
}

// responded records, at a response's end, the context the replica that
// answered now holds: the prompt and the answer, under the session's key
// and the response's id.
func (t *sessions) responded(s *stream, replica int) {
	c := s.counter
	tokens := s.session.promptTokens + int(max(c.UsageCompletionTokens, c.Tokens()))
	if s.session.key != 0 {
		t.remember(s.session.key, replica, tokens)
	}
	if c.HasResponseID {
		t.remember(sessionKey(sessionByResponse, s.tenant, c.ResponseID), replica, tokens)
	}
}
