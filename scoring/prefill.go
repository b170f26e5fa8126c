package scoring

// prefillGroups follows the progress of the router's queued prefills on
// one replica, so that W(r) counts what is left of the one in progress
// rather than all of it however long ago it started (TestPrefillProgress).
//
// A continuous-batching engine admits its waiting requests at a step
// boundary, all that fit the token budget, in arrival order (vLLM V1's
// scheduler; hostsim/fleetsim/replica.go startStep models it). The router's
// queued requests on a replica therefore form two groups: the running one,
// whose prefill started when the first of them was dispatched with nothing
// queued ahead (Candidate.StartNanos), or when the previous group's first
// token came back (that step boundary admitted everything then waiting),
// and the pending one, dispatched while the running group was in flight,
// which starts when the running group's first token arrives. Each queued
// flight carries its group's number (run or run+1), so first tokens,
// completions and cancellations update the sums in O(1), in any order.
type prefillGroups struct {
	run             uint32 // the running group's number; pending is run+1
	runN, runTokens int64  // queued flights and prefill tokens in the running group
	pendN, pendTok  int64  // the same for the pending group
	// runSq and pendSq sum the squares of the groups' prefill tokens
	// (attention cost grows with each prompt's square, not the sum's).
	runSq, pendSq  float64
	runN0, runTok0 int64   // the running group's size when it started (for learning)
	runSq0         float64 // and its sum of squares
	runStartNanos  int64   // when it started; 0: unknown (nothing is credited)
	// EWMAs of the observed durations of completed groups and of their
	// sizes (count, tokens, squares), and how many were observed.
	obsSec, obsN, obsTok, obsSq float64
	obsSamples                  uint32
}

// join adds a request dispatched with prefill tokens to prefill and returns
// its group: the running one, started at startNanos (0: unknown), when
// nothing of the router's is queued on the replica, else the pending one.
func (g *prefillGroups) join(prefill, startNanos int64) uint32 {
	sq := float64(prefill) * float64(prefill)
	if g.runN == 0 {
		g.run++
		g.runN, g.runTokens, g.runSq = 1, prefill, sq
		g.runN0, g.runTok0, g.runSq0 = 1, prefill, sq
		g.runStartNanos = startNanos
		return g.run
	}
	g.pendN++
	g.pendTok += prefill
	g.pendSq += sq
	return g.run + 1
}

// leave takes a queued request of prefill tokens out of group; firstToken
// says its first token came back at nowNanos (0: unknown) rather than it
// being dropped. When the running group empties, the pending one becomes
// the running one, started now if this was a first token at a known time,
// and a group that ended with a timed first token teaches how long a group
// of its size takes here (window uses it).
func (g *prefillGroups) leave(group uint32, prefill, nowNanos int64, firstToken bool) {
	sq := float64(prefill) * float64(prefill)
	switch group {
	case g.run:
		g.runN--
		g.runTokens -= prefill
		g.runSq -= sq
	case g.run + 1:
		g.pendN--
		g.pendTok -= prefill
		g.pendSq -= sq
	default:
		return
	}
	if g.runN > 0 {
		return
	}
	known := firstToken && nowNanos > 0
	if known && g.runStartNanos > 0 && nowNanos >= g.runStartNanos && group == g.run {
		g.obsSec = ewma(g.obsSec, float64(nowNanos-g.runStartNanos)/1e9)
		g.obsN = ewma(g.obsN, float64(g.runN0))
		g.obsTok = ewma(g.obsTok, float64(max(g.runTok0, 1)))
		g.obsSq = ewma(g.obsSq, max(g.runSq0, 1))
		g.obsSamples++
	}
	g.runN, g.runTokens, g.runSq = 0, 0, 0
	if g.pendN <= 0 {
		g.pendN, g.pendTok, g.pendSq = 0, 0, 0
		return
	}
	g.run++
	g.runN, g.runTokens, g.runSq = g.pendN, g.pendTok, max(g.pendSq, 0)
	g.runN0, g.runTok0, g.runSq0 = g.runN, g.runTokens, g.runSq
	g.pendN, g.pendTok, g.pendSq = 0, 0, 0
	g.runStartNanos = 0
	if known {
		g.runStartNanos = nowNanos
	}
}

// window returns when the running group, priced with h, is expected to
// have left of its prefill less than the work W(r) counts for it (from) and
// to end with its first token (until); zeros when there is no running group
// or its start is unknown. Between the two, the time since from is prefill
// already done.
//
// The duration is the profile's prefill time of its prompts, attention's
// quadratic part included (without it a long prefill would look nearly done
// long before its end), or, where groups of this router were observed to
// take longer here (co-batched foreign work, a slower engine than the
// profile), that rate applied to this group. The work counted is its fixed
// and linear parts, so done work is duration minus remaining time, never
// more than the count. Once the duration has passed without a first token
// the estimate failed, and the group counts in full again.
func (g *prefillGroups) window(h *Hardware) (fromNanos, untilNanos int64) {
	if g.runN <= 0 || g.runStartNanos <= 0 {
		return 0, 0
	}
	full := float64(g.runN)*h.PrefillFixedSec + float64(g.runTokens)*h.PrefillSecPerToken
	dur := full + g.runSq*h.PrefillSecPerToken2
	if g.obsSamples > 0 {
		est := g.obsN*h.PrefillFixedSec + g.obsTok*h.PrefillSecPerToken + g.obsSq*h.PrefillSecPerToken2
		if est > 0 && g.obsSec > est {
			dur *= g.obsSec / est
		}
	}
	// Out-of-range durations (a corrupt profile) give no window rather
	// than an overflowed one.
	if !(dur > 0 && dur < 1e6 && full >= 0 && full <= dur) {
		return 0, 0
	}
	untilNanos = g.runStartNanos + int64(dur*1e9)
	return untilNanos - int64(full*1e9), untilNanos
}

// doneSec is the running group's prefill done by nowNanos (window).
func (g *prefillGroups) doneSec(h *Hardware, nowNanos int64) float64 {
	from, until := g.window(h)
	return doneIn(from, until, nowNanos)
}
