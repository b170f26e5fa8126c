package router

import (
	"errors"
	"slices"

	"github.com/gpuroute/gpuroute/scoring/prefix"
)

// Bounds of what one stream keeps for the feedback.
const (
	// maxStreamCheckpoints bounds the prompt checkpoints a stream keeps to
	// re-record and correct at its response's end: the beginning the
	// shared index carries too (outboxHashes).
	maxStreamCheckpoints = outboxHashes
	// maxAnswerBlocks bounds the answer's blocks recorded (256K characters
	// at 64-character blocks); past it the answer is recorded up to there.
	maxAnswerBlocks = 4096
	// answerFlushBytes is the answer text a stream gathers before it feeds
	// the VM's answer hasher: one resume and save of the stream's
	// continuation per flush, not per streamed chunk.
	answerFlushBytes = 4 << 10
	// learnShare is the weight of one correction in a replica's learned
	// capacity (an exponentially weighted mean over about that many).
	learnShare = 8
	// minLearnedEntries is the least capacity a replica is learned to
	// have, in index entries: one correction must not empty a replica.
	minLearnedEntries = 4
)

// feedback corrects the prefix index with what the engines report: the
// prefix index records what the router sent, and engines evict. A response's
// usage says how many of the prompt's tokens the replica had cached
// (prompt_tokens_details.cached_tokens, or the Messages API's
// cache_read_input_tokens); it is compared with what the index predicted
// for the replica when the request was dispatched:
//
//   - a shortfall beyond one index entry, of a prefix the replica had
//     computed (recorded by a dispatch whose first token came back since),
//     shows the engine evicted it: an engine evicts the least recently used
//     blocks first, so the replica's entries recorded before the missing
//     one are dropped, and what is left is a sample of the replica's
//     effective cache size;
//   - with learn_kv_capacity, the evictions' samples, weighted (the first
//     against the configured size), are the replica's capacity in the
//     index, in place of the configured or scraped KV size, and a surplus
//     (the index forgot what the replica still holds) raises it to the
//     entries held plus the surplus (TestFeedbackLearnedCapacity). Off by
//     default: in the simulator's agentic runs it gained nothing over the
//     configured size (docs/design.md, "Engine feedback").
//
// At the response's end the prompt's chain is recorded again, with
// record_answers the answer's blocks after it (the stream's
// prefix.Continuation, fed by the answer text the StreamCounter writes into
// the stream's answerText), as the engine releases them together: the
// conversation's next turn, which quotes the answer, finds it cached there
// (TestSecondTurnHitsAnswer). The corrections stay in this
// worker's index: the shared index carries placements, not removals, and a
// worker's next new base carries what its corrections left.
type feedback struct {
	index    *prefix.Index
	prefixes *prefixShare
	stats    *stats
	// learning turns the learned capacity on (learn_kv_capacity),
	// recording the answers' record (record_answers).
	learning, recording bool
	// configured is each replica's KV capacity in tokens as configured or
	// scraped (0: unknown); learned its capacity in index entries learned
	// from corrections (0: none yet).
	configured []int
	learned    []int
	// settled is, per replica, the index clock of the dispatch whose first
	// token came back latest, or of the last response's record: the engine
	// has computed what was recorded before it (engines prefill in arrival
	// order), so a shortfall of those is an eviction, not a prefill still
	// running.
	settled []uint32
	// answer is the VM's answer hasher: each stream resumes it from its
	// own continuation around each flush of its answerText.
	answer prefix.Hasher
	// record is scratch for the checkpoints recorded at a response's end.
	record []uint64
}

// streamFeedback is one stream's part of the feedback; its buffers are kept
// across the stream object's reuse.
type streamFeedback struct {
	// predicted is the tokens the index gave the chosen replica (the
	// decision's CachedTokens), promptTokens the prompt's estimate in the
	// same unit; clock the index clock before the dispatch recorded the
	// chain, settled the replica's settled clock then.
	predicted, promptTokens int
	clock, settled          uint32
	// checkpoints are those the index stores of the prompt's first blocks
	// (at most maxStreamCheckpoints), stamps their stamps before the
	// dispatch (0 with held false: not held).
	blocks      int
	checkpoints []uint64
	stamps      []uint32
	held        []bool
	// recording: the answer is hashed into cont's chain, its blocks in
	// answer (chain positions from cont's Blocks at the start); text
	// gathers what the counter wrote since the last flush.
	recording  bool
	answerFrom int
	cont       prefix.Continuation
	answer     []uint64
	text       answerText
	tracked    bool // dispatched with a chain: the response is compared
}

// recycle returns f emptied for a new stream, keeping its buffers.
func (f *streamFeedback) recycle() streamFeedback {
	return streamFeedback{checkpoints: f.checkpoints[:0], stamps: f.stamps[:0], held: f.held[:0],
		cont: f.cont, answer: f.answer[:0], text: answerText{buf: f.text.buf[:0]}}
}

// answerText is the writer a stream's counter records its answer's text
// into: it gathers up to answerFlushBytes, then feeds them to the answer
// hasher of the root serving the stream (feedback.flush), which a
// reconfiguration during the answer replaces (TestSecondTurnHitsAnswer).
// A write that fails ends the answer's text there (the counter stops
// writing; what was flushed stays).
type answerText struct {
	s   *stream
	buf []byte
}

func (w *answerText) Write(p []byte) (int, error) {
	n := len(p)
	if len(w.buf)+n > answerFlushBytes {
		f := &w.s.root.feedback
		ok := f.flush(w.s, w.buf)
		w.buf = w.buf[:0]
		if ok && n > answerFlushBytes {
			ok, p = f.flush(w.s, p), nil
		}
		if !ok {
			return 0, errAnswerEnded
		}
	}
	if w.buf == nil {
		w.buf = make([]byte, 0, answerFlushBytes)
	}
	w.buf = append(w.buf, p...)
	return n, nil
}

// errAnswerEnded stops the counter's writing of an answer that cannot be
// recorded further.
var errAnswerEnded = errors.New("the answer's record ended")

func (f *feedback) setup(index *prefix.Index, prefixes *prefixShare, st *stats, replicas, blockChars int, learning, recording bool) {
	f.index, f.prefixes, f.stats, f.learning, f.recording = index, prefixes, st, learning, recording
	f.configured = make([]int, replicas)
	f.learned = make([]int, replicas)
	f.settled = make([]uint32, replicas)
	f.answer.Init(blockChars, maxChainBytes/blockChars)
	f.record = make([]uint64, 0, 2*maxStreamCheckpoints)
}

// adopt takes over, for a new configuration, what from learned of the
// engines it keeps (engine maps from's replicas to the new ones, -1:
// none): each one's learned cache size, which bounds its index at once,
// and settled clock (the index, with its clock, is adopted alike).
func (f *feedback) adopt(from *feedback, engine []int) {
	for i, j := range engine {
		if j >= 0 && j < len(f.learned) && i < len(from.learned) {
			f.learned[j], f.settled[j] = from.learned[i], from.settled[i]
			f.apply(j)
		}
	}
}

// capacity sets replica's configured or scraped KV capacity in tokens; the
// learned one, when there is one, bounds the index instead.
func (f *feedback) capacity(replica, kvTokens int) {
	if replica < 0 || replica >= len(f.configured) {
		return
	}
	f.configured[replica] = kvTokens
	f.apply(replica)
}

// apply bounds replica's index entries by its learned capacity, within half
// and twice the configured one, else by the configured one: an engine under
// load holds less of its cache for reuse than it will once its running
// requests end, and an index that forgets a session the engine still
// holds sends it to a cold replica.
func (f *feedback) apply(replica int) {
	tokens, per := f.configured[replica], f.index.TokensPerEntry()
	if l := f.learned[replica]; l > 0 {
		learned := l * per
		if tokens > 0 {
			learned = min(max(learned, tokens/2), 2*tokens)
		}
		tokens = learned
	}
	f.index.SetCapacityTokens(replica, tokens)
}

// learn adds a sample of replica's effective cache size, in index
// entries, from an eviction: the entries the replica was left with. The
// first sample is weighed against the configured size, not taken whole.
func (f *feedback) learn(replica, entries int) {
	if !f.learning {
		return
	}
	entries = max(entries, minLearnedEntries)
	l := f.learned[replica]
	if l == 0 {
		l = max(f.configured[replica]/f.index.TokensPerEntry(), entries)
	}
	f.learned[replica] = l + (entries-l)/learnShare
	f.apply(replica)
}

// atLeast raises replica's learned capacity to entries: a surplus shows the
// replica holds at least what the index does and the surplus. Without an
// eviction seen, the configured size stands (a surplus early in a run,
// with the index still filling, says nothing of the cache's size).
func (f *feedback) atLeast(replica, entries int) {
	if l := f.learned[replica]; l > 0 && entries > l {
		f.learned[replica] = entries
		f.apply(replica)
	}
}

// begin saves the prompt's chain at its end for the answer to continue,
// and makes the stream's counter write the answer's text (req is the
// request's features, the features' hasher still holding its prompt).
func (f *feedback) begin(s *stream, h *prefix.Hasher, chain []uint64) {
	if !f.recording || len(chain) == 0 || !s.inference {
		return
	}
	h.Save(&s.fb.cont)
	s.fb.recording, s.fb.answerFrom = true, s.fb.cont.Blocks()
	s.fb.text.s = s
	s.counter.Record(s.kind, &s.fb.text)
}

// dispatching notes, before the dispatch records chain for replica, what
// the index predicted there and the chain's checkpoints, and returns the
// stream's stamps and held, for the record to fill with the checkpoints'
// stamps before it (prefixShare.dispatched).
func (f *feedback) dispatching(s *stream, replica int, chain []uint64, predicted, promptTokens int) (stamps []uint32, held []bool) {
	fb := &s.fb
	if len(chain) == 0 || replica < 0 || replica >= len(f.settled) {
		return nil, nil
	}
	fb.tracked = true
	fb.predicted, fb.promptTokens = predicted, promptTokens
	fb.clock, fb.settled = f.index.Clock(), f.settled[replica]
	fb.blocks = min(len(chain), maxStreamCheckpoints*indexStride)
	fb.checkpoints = f.index.AppendCheckpoints(fb.checkpoints[:0], chain[:fb.blocks])
	n := len(fb.checkpoints)
	fb.stamps, fb.held = slices.Grow(fb.stamps[:0], n)[:n], slices.Grow(fb.held[:0], n)[:n]
	return fb.stamps, fb.held
}

// firstToken notes that replica computed what the stream's dispatch and the
// ones before it recorded.
func (f *feedback) firstToken(s *stream, replica int) {
	if !s.fb.tracked || replica < 0 || replica >= len(f.settled) {
		return
	}
	if at := s.fb.clock + 1; int32(at-f.settled[replica]) > 0 {
		f.settled[replica] = at
	}
}

// reply reads a whole response body into the stream's counter: its usage,
// and the answer's text into the stream's answerText.
func (f *feedback) reply(s *stream, body []byte) {
	rp := s.counter.Reply(body)
	c := s.counter
	if rp.HasUsage {
		c.UsageCompletionTokens, c.HasUsage = rp.Usage.CompletionTokens, true
	}
	c.UsagePromptTokens = rp.Usage.PromptTokens
	c.UsageCachedTokens, c.HasCached = rp.Usage.CachedTokens, rp.Usage.HasCached
	c.ResponseID, c.HasResponseID = rp.ResponseID, rp.HasResponseID
}

// flush continues the stream's answer chain with text, and reports whether
// its record goes on: not once the chain cannot be resumed or reaches
// maxAnswerBlocks (the blocks up to the bound are kept).
func (f *feedback) flush(s *stream, text []byte) bool {
	fb := &s.fb
	if !fb.recording || len(text) == 0 {
		return fb.recording
	}
	if !f.answer.Resume(&fb.cont) {
		fb.recording = false
		return false
	}
	from := fb.cont.Blocks()
	_, _ = f.answer.Write(text)
	added := f.answer.Chain()[from:]
	room := maxAnswerBlocks - len(fb.answer)
	fb.answer = append(fb.answer, added[:min(len(added), room)]...)
	if len(added) >= room {
		fb.recording = false
		return false
	}
	f.answer.Save(&fb.cont)
	return true
}

// responded learns from a response that ended whole from replica: the
// correction, then the chain recorded again with the answer's blocks.
func (f *feedback) responded(s *stream, replica int) {
	fb := &s.fb
	if !fb.tracked || replica < 0 || replica >= len(f.settled) {
		return
	}
	if replica == s.replica {
		f.correct(s, replica)
	}
	f.flush(s, fb.text.buf)
	fb.text.buf = fb.text.buf[:0]
	f.record = append(f.record[:0], fb.checkpoints...)
	if len(fb.answer) > 0 && fb.blocks == fb.answerFrom {
		f.record = f.index.AppendCheckpointsAt(f.record, fb.answerFrom, fb.answer)
	}
	f.prefixes.placed(replica, f.record)
	// What the response leaves cached was computed: its stamps settle too.
	// A request of another stream still in prefill there may have recorded
	// before it; its shortfall then reads as an eviction, which costs the
	// older entries only.
	f.settled[replica] = f.index.Clock()
}

// correct compares the cached tokens the engine reported with the
// prediction (see feedback).
func (f *feedback) correct(s *stream, replica int) {
	fb, c := &s.fb, s.counter
	if !c.HasCached || fb.promptTokens <= 0 {
		return
	}
	reported := int(min(c.UsageCachedTokens, 1<<40))
	if p := c.UsagePromptTokens; p > 0 {
		// The engine counts its tokenizer's tokens, the index estimated
		// ones: the share of the prompt cached is what compares.
		reported = int(min(c.UsageCachedTokens, p) * int64(fb.promptTokens) / p)
	}
	f.stats.tally(f.stats.cachePredicted, int64(fb.predicted))
	f.stats.tally(f.stats.cacheReported, int64(reported))
	per := f.index.TokensPerEntry()
	switch {
	case reported+per <= fb.predicted:
		at, ok := f.missingStamp(fb, reported)
		if !ok || int32(at-fb.settled) > 0 {
			return // not computed yet when the engine looked: no eviction shown
		}
		f.stats.add(f.stats.correctionsShort, 1)
		f.learn(replica, f.index.DropOlder(replica, at))
	case reported >= fb.predicted+per:
		f.stats.add(f.stats.correctionsLong, 1)
		f.atLeast(replica, f.index.Resident(replica)+(reported-fb.predicted)/per)
	}
}

// missingStamp returns the latest stamp, before the dispatch, of the
// prompt's checkpoints the index held but the engine did not (those at or
// past the reported tokens).
func (f *feedback) missingStamp(fb *streamFeedback, reported int) (uint32, bool) {
	blockTokens := max(f.index.Config().BlockChars/prefix.CharsPerToken, 1)
	from := reported / blockTokens // the first block the engine lacked
	var at uint32
	found := false
	for j := range fb.checkpoints {
		pos := (j+1)*indexStride - 1
		if pos >= fb.blocks {
			pos = fb.blocks - 1 // the last block's checkpoint
		}
		if pos < from || !fb.held[j] {
			continue
		}
		if !found || int32(fb.stamps[j]-at) > 0 {
			at, found = fb.stamps[j], true
		}
	}
	return at, found
}
