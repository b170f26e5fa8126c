package scoring

import (
	"math"
	"testing"
)

// progressEvent is one step of a TestPrefillProgress scenario on replica
// 0 of a one-replica fleet.
type progressEvent struct {
	atSec  float64
	send   int  // dispatch a request of this many tokens (after a Pick)
	peerQ  int  // PeerWork.QueuedN from here on
	first  int  // 1-based dispatch number whose first token comes back
	timed  bool // FirstTokenAt (else FirstToken, time unknown)
	doneOf int  // 1-based dispatch number that completes
}

// TestPrefillProgress: W(r) counts what is left of the router's prefill in
// progress (prefillGroups), its later prefills in full, and falls back to
// the full count when the start is unknown or the estimate was exceeded.
func TestPrefillProgress(t *testing.T) {
	h := DefaultHardware()
	full := h.PrefillFixedSec + 1000*h.PrefillSecPerToken // what W counts for a queued 1000-token prompt
	dur := full + 1000*1000*h.PrefillSecPerToken2         // its prefill time
	// One request decoding: half a step in flight and its share of the
	// new prefill's step (TestWaitModel).
	decoding := h.DecodeStepSec/2 + h.DecodeStepSecPerSeq
	tests := []struct {
		name   string
		events []progressEvent
		atSec  float64
		want   float64
	}{
		{name: "just started", events: []progressEvent{{atSec: 0, send: 1000}},
			atSec: 0.05, want: dur - 0.05},
		{name: "not started yet counts in full", events: []progressEvent{{atSec: 0, send: 1000}},
			atSec: 0, want: full},
		{name: "estimate exceeded", events: []progressEvent{{atSec: 0, send: 1000}},
			atSec: dur + 0.01, want: full},
		{name: "later prefill waits in full", events: []progressEvent{{atSec: 0, send: 1000}, {atSec: 0.05, send: 1000}},
			atSec: 0.1, want: dur - 0.1 + full},
		{name: "first token starts the pending group", events: []progressEvent{
			{atSec: 0, send: 1000}, {atSec: 0.05, send: 1000}, {atSec: 0.18, first: 1, timed: true}},
			atSec: 0.25, want: dur - 0.07 + decoding},
		{name: "first token without time", events: []progressEvent{
			{atSec: 0, send: 1000}, {atSec: 0.05, send: 1000}, {atSec: 0.18, first: 1}},
			atSec: 0.25, want: full + decoding},
		{name: "cancelled head", events: []progressEvent{
			{atSec: 0, send: 1000}, {atSec: 0.05, send: 1000}, {atSec: 0.1, doneOf: 1}},
			atSec: 0.12, want: full},
		{name: "foreign queued ahead at dispatch", events: []progressEvent{
			{atSec: 0, send: 1000, peerQ: 1}, {atSec: 0.01, peerQ: 0}},
			atSec: 0.05, want: full},
		{name: "foreign queued behind", events: []progressEvent{
			{atSec: 0, send: 1000}, {atSec: 0.01, peerQ: 1}},
			atSec: 0.05, want: dur - 0.05},
		{name: "observed slower: early, counts in full", events: []progressEvent{
			{atSec: 0, send: 1000}, {atSec: 2 * dur, first: 1, timed: true}, {atSec: 1, send: 1000}},
			atSec: 1.1, want: full + decoding},
		{name: "observed slower: late, what is left at that rate", events: []progressEvent{
			{atSec: 0, send: 1000}, {atSec: 2 * dur, first: 1, timed: true}, {atSec: 1, send: 1000}},
			atSec: 1.3, want: 2*dur - 0.3 + decoding},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := exactParams()
			p.ExternalityWeight = 0
			base := 100 * sec
			ns := func(s float64) int64 { return base + int64(s*1e9) }
			rs := fleet("h100", 1, base)
			l := NewLedger(p, 1, 16)
			var d Decision
			var sent []Flight
			for _, ev := range tt.events {
				rs[0].PeerWork.QueuedN = int64(ev.peerQ)
				rs[0].PeerWork.QueuedTokens = int64(ev.peerQ) * 1000
				switch {
				case ev.send > 0:
					req := Request{PromptTokens: ev.send}
					Pick(&p, &req, rs, nil, l, ns(ev.atSec), &d)
					sent = append(sent, l.Dispatch(0, &req, ev.send, ns(ev.atSec), startOf(&d, 0)))
				case ev.first > 0 && ev.timed:
					l.FirstTokenAt(sent[ev.first-1], ns(ev.atSec))
				case ev.first > 0:
					l.FirstToken(sent[ev.first-1])
				case ev.doneOf > 0:
					l.Cancel(sent[ev.doneOf-1])
				}
			}
			// A peer's request still queued counts in full.
			peer := rs[0].PeerWork.QueuedN
			Pick(&p, &Request{PromptTokens: 1000}, rs, nil, l, ns(tt.atSec), &d)
			want := tt.want + float64(peer)*full
			if got := waitOf(&d, 0); math.Abs(got-want) > 1e-9 {
				t.Fatalf("W(%s at %v s) = %v, want %v", tt.name, tt.atSec, got, want)
			}
		})
	}
}

// TestPickPrefersPrefillNearEnd: with every replica prefilling one request,
// the next one goes where the prefill started first (it frees first),
// whichever replica that is, and whichever router sent the prefills: this
// one, or another worker whose Work reaches this one through AddAt, as
// plugin/shared's Board.Sum adds it. Counting each prefill in full made them
// tie, and the tie-break ignores load; a peer's work added without its
// window (Add) still does.
func TestPickPrefersPrefillNearEnd(t *testing.T) {
	for _, sender := range []string{"self", "peer", "peer without window"} {
		picks := map[int]int{}
		for _, early := range []int{0, 1} {
			p := DefaultParams()
			now := 100 * sec
			rs := fleet("h100", 2, now)
			self, other := NewLedger(p, 2, 16), NewLedger(p, 2, 16)
			l := self
			if sender != "self" {
				l = other
			}
			var d Decision
			req := Request{PromptTokens: 1000, Chain: []uint64{7}}
			at := []int64{now, now + 100e6}
			for k, i := range []int{early, 1 - early} {
				Pick(&p, &req, rs, nil, l, at[k], &d)
				l.Dispatch(i, &req, req.PromptTokens, at[k], startOf(&d, i))
			}
			decide := now + 150e6
			for i := range rs {
				w := other.WorkOn(i, &rs[i].Hardware, rs[i].ScrapedNanos)
				rs[i].PeerWork = Work{}
				if sender == "peer without window" {
					rs[i].PeerWork.Add(&w)
				} else {
					rs[i].PeerWork.AddAt(&w, decide)
				}
			}
			Pick(&p, &req, rs, nil, self, decide, &d)
			picks[early] = d.Index
			if d.Index != early && sender != "peer without window" {
				t.Fatalf("Pick(both busy by %s, replica %d started 100 ms earlier) = %d, want %d (W %v vs %v)",
					sender, early, d.Index, early, waitOf(&d, early), waitOf(&d, 1-early))
			}
		}
		if sender == "peer without window" && picks[0] != picks[1] {
			t.Fatalf("Pick(both busy by a peer, no window) = %v: followed the earlier start without knowing it", picks)
		}
	}
}

// TestStartBehindPeerGroup: a request sent while another worker's prefill
// group is in progress, and nothing else queued, starts when that group
// ends (Work.ClearNanos), so its own progress is credited from then; sent
// behind work without a window, its start stays unknown and it counts in
// full.
func TestStartBehindPeerGroup(t *testing.T) {
	h := DefaultHardware()
	full := h.PrefillFixedSec + 1000*h.PrefillSecPerToken
	dur := full + 1000*1000*h.PrefillSecPerToken2
	decoding := h.DecodeStepSec/2 + h.DecodeStepSecPerSeq // the peer's request, decoding by then
	for _, tc := range []struct {
		name   string
		window bool
		want   float64
	}{
		{name: "peer window known", window: true, want: dur - 0.05 + decoding},
		{name: "no window", window: false, want: full + decoding},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := exactParams()
			p.ExternalityWeight = 0
			base := 100 * sec
			rs := fleet("h100", 1, base)
			self, other := NewLedger(p, 1, 16), NewLedger(p, 1, 16)
			share := func(now int64) {
				w := other.WorkOn(0, &rs[0].Hardware, rs[0].ScrapedNanos)
				rs[0].PeerWork = Work{}
				if tc.window {
					rs[0].PeerWork.AddAt(&w, now)
				} else {
					rs[0].PeerWork.Add(&w)
				}
			}
			var d Decision
			req := Request{PromptTokens: 1000}
			Pick(&p, &req, rs, nil, other, base, &d)
			peerFlight := other.Dispatch(0, &req, 1000, base, startOf(&d, 0))
			sent := base + 50e6
			share(sent)
			Pick(&p, &req, rs, nil, self, sent, &d)
			self.Dispatch(0, &req, 1000, sent, startOf(&d, 0))
			peerEnd := base + int64(dur*1e9)
			other.FirstTokenAt(peerFlight, peerEnd)
			at := peerEnd + 50e6
			share(at)
			Pick(&p, &Request{PromptTokens: 1000}, rs, nil, self, at, &d)
			if got := waitOf(&d, 0); math.Abs(got-tc.want) > 1e-6 {
				t.Fatalf("W(%s, 50 ms after the peer's group ended) = %v, want %v", tc.name, got, tc.want)
			}
		})
	}
}
