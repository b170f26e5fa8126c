package scoring

// Flight is a handle to one dispatched request, returned by Dispatch and
// kept on the plugin's HTTP context. The zero Flight is invalid.
type Flight uint64

// inFlight is the ledger's record of the requests it dispatched and has not
// seen finish, and their work summed per replica: the prompt tokens still
// to prefill of those without a first token, the remaining output of the
// others, and the part of both that a replica's latest snapshot has not
// seen. Slots are reused; a Flight names a slot and its generation, so a
// stale handle finds nothing.
type inFlight struct {
	flights []flight
	free    []int32
	// live lists the used slots of flights (flight.at is each one's
	// position), so that recounting the unseen work walks the requests in
	// flight, not the capacity (TestLedgerLiveList).
	live []int32
	reps []replicaWork
}

type flight struct {
	gen        uint32
	used       bool
	first      bool // first token seen: prefill is done
	replica    int32
	group      uint32 // prefill group (prefillGroups.run or run+1) while queued
	at         int32  // index in inFlight.live while used
	dispatched int64  // nowNanos at dispatch
	prefill    int64  // uncached prompt tokens still to prefill
	maxTokens  int64  // 0: none given
	expect     int64  // output estimate at dispatch
	streamed   int64  // output tokens streamed back so far
	remaining  int64  // current remaining-output estimate, as counted in reps
	key        uint64 // outputKey of the request's model and adapter
}

// replicaWork is the ledger's in-flight work on one replica.
type replicaWork struct {
	Work
	syncedSnap int64 // the ScrapedNanos Unseen* refer to
	resync     bool  // Unseen* are being recounted (recountUnseen)
}

func newInFlight(maxReplicas, maxInFlight int) inFlight {
	t := inFlight{
		flights: make([]flight, maxInFlight),
		free:    make([]int32, 0, maxInFlight),
		live:    make([]int32, 0, maxInFlight),
		reps:    make([]replicaWork, maxReplicas),
	}
	for i := maxInFlight - 1; i >= 0; i-- {
		t.free = append(t.free, int32(i))
	}
	return t
}

// reset forgets every request; handles given out before stay invalid.
func (t *inFlight) reset() {
	t.free = t.free[:0]
	t.live = t.live[:0]
	for i := len(t.flights) - 1; i >= 0; i-- {
		gen := t.flights[i].gen + 1
		t.flights[i] = flight{gen: gen}
		t.free = append(t.free, int32(i))
	}
	clear(t.reps)
}

// count returns the number of requests in flight.
func (t *inFlight) count() int { return len(t.flights) - len(t.free) }

// add records a request dispatched as f describes (its replica, time,
// tokens, output estimate and key), queued for its prefill, and returns
// its record and handle; nil and 0 when every slot is taken.
func (t *inFlight) add(f flight) (*flight, Flight) {
	if len(t.free) == 0 {
		return nil, 0
	}
	slot := t.free[len(t.free)-1]
	t.free = t.free[:len(t.free)-1]
	s := &t.flights[slot]
	f.gen = s.gen + 1
	if f.gen == 0 {
		f.gen = 1
	}
	f.used = true
	f.at = int32(len(t.live))
	*s = f
	s.remaining = remainingOf(s)
	t.live = append(t.live, slot)
	r := &t.reps[f.replica]
	r.QueuedN++
	r.QueuedTokens += s.prefill
	if s.dispatched > r.syncedSnap {
		r.UnseenN++
		r.UnseenTokens += s.prefill
	}
	return s, Flight(uint64(f.gen)<<32 | uint64(slot))
}

// lookup returns the record h names, or nil when h is stale or invalid.
func (t *inFlight) lookup(h Flight) *flight {
	if h == 0 {
		return nil
	}
	slot := int(uint32(h))
	if slot >= len(t.flights) {
		return nil
	}
	f := &t.flights[slot]
	if !f.used || f.gen != uint32(h>>32) {
		return nil
	}
	return f
}

// firstToken moves queued f's work from prefill to decode.
func (t *inFlight) firstToken(f *flight) {
	r := &t.reps[f.replica]
	r.QueuedN--
	r.QueuedTokens -= f.prefill
	f.first = true
	r.DecodeN++
	r.DecodeTokens += f.remaining
}

// stream counts tokens more output tokens of decoding f.
func (t *inFlight) stream(f *flight, tokens int) {
	f.streamed += int64(tokens)
	old := f.remaining
	f.remaining = remainingOf(f)
	t.reps[f.replica].DecodeTokens += f.remaining - old
}

// remainingOf returns f's remaining-output estimate after its streamed
// tokens: the expectation minus what came back; once a request outlives
// its expectation, half again what it produced so far (a long-running
// generation tends to run longer), never beyond max_tokens
// (TestRemainingOutputEstimate).
func remainingOf(f *flight) int64 {
	if f.streamed < f.expect {
		return f.expect - f.streamed
	}
	r := max(f.streamed/2, 1)
	if f.maxTokens > 0 {
		r = min(r, max(f.maxTokens-f.streamed, 0))
	}
	return r
}

// remove forgets f, in slot, and its work.
func (t *inFlight) remove(f *flight, slot int32) {
	r := &t.reps[f.replica]
	if f.first {
		r.DecodeN--
		r.DecodeTokens -= f.remaining
	} else {
		r.QueuedN--
		r.QueuedTokens -= f.prefill
	}
	if f.dispatched > r.syncedSnap {
		r.UnseenN--
		r.UnseenTokens -= f.prefill
	}
	last := len(t.live) - 1
	if at := int(f.at); at >= 0 && at <= last && t.live[at] == slot {
		moved := t.live[last]
		t.live[at] = moved
		t.flights[moved].at = int32(at)
		t.live = t.live[:last]
	}
	gen := f.gen
	*f = flight{gen: gen}
	t.free = append(t.free, slot)
}

// syncSnapshots recounts the unseen work of every replica whose snapshot
// moved, in one pass over the requests in flight (TestSyncSnapshotsMatchesSync).
func (t *inFlight) syncSnapshots(replicas []Replica) {
	stale := false
	for i := range min(len(replicas), len(t.reps)) {
		if t.reps[i].syncedSnap != replicas[i].ScrapedNanos {
			t.resync(i, replicas[i].ScrapedNanos)
			stale = true
		}
	}
	if stale {
		t.recountUnseen()
	}
}

// sync recounts replica's unseen work against a new snapshot time: the
// requests dispatched before the scrape are now in the reported counts.
// O(in flight).
func (t *inFlight) sync(replica int, snapNanos int64) {
	t.resync(replica, snapNanos)
	t.recountUnseen()
}

// resync marks replica's unseen work for recounting against a snapshot
// taken at snapNanos.
func (t *inFlight) resync(replica int, snapNanos int64) {
	r := &t.reps[replica]
	r.syncedSnap, r.UnseenN, r.UnseenTokens, r.resync = snapNanos, 0, 0, true
}

// recountUnseen counts, in one pass over the requests in flight, the unseen
// work of the replicas marked by resync: the requests dispatched after
// their snapshot.
func (t *inFlight) recountUnseen() {
	for _, slot := range t.live {
		f := &t.flights[slot]
		if i := int(f.replica); i >= 0 && i < len(t.reps) {
			if r := &t.reps[i]; r.resync && f.dispatched > r.syncedSnap {
				r.UnseenN++
				r.UnseenTokens += f.prefill
			}
		}
	}
	for i := range t.reps {
		t.reps[i].resync = false
	}
}
