package router

import (
	"bytes"
	"crypto/subtle"
	"strconv"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/gpuroute/gpuroute/plugin/proxy"
	"github.com/gpuroute/gpuroute/plugin/shared"
	"github.com/gpuroute/gpuroute/scoring"
)

// The gateway peer exchange (config.PeerExchange). Shared data ends at the
// Envoy process, so two gateway instances in front of one fleet each place a
// new prompt prefix on their own and split it: with 2 gateways × 4 workers
// the shared-prefix workload kept 0.50 of the prefix hit rate one worker
// gets (0.74), and the extra prefills tipped the fleet into overload. Each
// gateway therefore journals its placements in shared data (KeyJournal) and
// answers peer_path with the entries after a caller's cursor plus its
// in-flight work per replica (shared.PeerExport); every tick the scrape
// leader asks each configured peer, queues the placements for the shared
// prefix index (importBox) and publishes the peers' work for its workers
// (keyRemoteWork), who add it to Replica.PeerWork like a local worker's.
// Imported placements are never journaled again, so nothing echoes between
// gateways.

// HeaderPeerToken carries peer_token on peer requests.
const HeaderPeerToken = "x-gpuroute-peer-token"

// Peer query parameters: the caller's journal epoch and next sequence number.
const (
	queryEpoch = "epoch"
	querySince = "since"
)

const (
	// journalEntries bounds the journal: importers ask every tick, so it
	// needs a few ticks of dispatches (1024 at 1,000 requests/s is a second).
	journalEntries = 1024
	// journalBlocks is the checkpoints journaled per dispatch: 32 at stride
	// 16 cover a prompt's first 32k characters (~8k tokens), where shared
	// system prompts and conversation histories start.
	journalBlocks = 32
	// peerAnswerEntries bounds one answer; a caller further behind gets the
	// rest on its next ask.
	peerAnswerEntries = journalEntries
	// keyRemoteWork holds the leader's sum of the peers' in-flight work
	// (a shared.WorkRecord) for the other workers of this gateway.
	keyRemoteWork = "gpuroute/remote-work"
)

// peerRefusedBody is the 403 body: it says nothing about what the exchange
// holds.
var peerRefusedBody = []byte(`{"error":{"message":"forbidden","type":"forbidden","code":403}}`)

var peerHeaders = [][2]string{{"content-type", "application/octet-stream"}}

// peerLink is the leader's state for one configured peer.
type peerLink struct {
	epoch, next uint64      // cursor into the peer's journal
	asking      bool        // a call is outstanding
	self        bool        // the link reaches this gateway: never asked again
	failing     peerFailure // how the last call failed (logged when it changes)
	work        []scoring.Work
	rate        float64 // the peer's dispatch rate to the fleet, with work
	workNanos   int64   // when work was answered; 0: never
}

// setupPeers allocates the exchange's state for the configuration.
func (r *root) setupPeers() {
	pe := &r.cfg.PeerExchange
	if !pe.Serving() {
		return
	}
	n := len(r.replicas)
	r.peerToken = []byte(pe.Token)
	r.journal = shared.NewJournal(journalEntries, journalBlocks)
	r.journalAppend = r.journal.Append
	r.importBox = shared.NewOutbox(journalEntries, journalBlocks)
	r.importEntry = r.importPlacement
	r.exportWork = make([]scoring.Work, n)
	r.peerAddrs = make([]string, n)
	for i := range r.replicas {
		r.peerAddrs[i] = r.replicas[i].Addr
	}
	r.remote.ConfigID = r.configID
	r.remote.Work = make([]scoring.Work, n)
	r.remoteWork = make([]scoring.Work, n)
	r.peers = make([]peerLink, len(pe.Peers))
	r.peerDone = make([]func(numHeaders, bodySize, numTrailers int), len(pe.Peers))
	for i := range r.peers {
		r.peers[i].work = make([]scoring.Work, n)
		r.peerDone[i] = func(numHeaders, bodySize, _ int) { r.peerAnswered(i, numHeaders, bodySize) }
	}
}

// isPeerPath reports whether the request is for the exchange.
func (r *root) isPeerPath(path []byte) bool {
	return r.cfg.PeerExchange.Serving() && isStatusPath(path, r.cfg.PeerExchange.Path)
}

// servePeer answers another gateway's ask: this gateway's journal after the
// caller's cursor and its workers' in-flight work. Without the token it is
// a 403 that reveals nothing.
func (r *root) servePeer(path []byte) types.Action {
	tok, err := proxy.GetHeaderMapValue(proxy.MapTypeHttpRequestHeaders, HeaderPeerToken)
	if err != nil || subtle.ConstantTimeCompare(tok, r.peerToken) != 1 {
		r.stats.add(r.stats.peerRefused, 1)
		if err := proxy.SendLocalResponse(403, "gpuroute_peer_refused", peerRefusedBody, jsonHeaders, proxy.NoGrpcStatus); err != nil {
			r.log.error("cannot refuse a peer request: " + err.Error())
		}
		return types.ActionPause
	}
	now := proxy.NowNanos()
	if !r.loadJournal() {
		// Nothing journaled yet: create the journal, so the answer carries
		// an epoch by which this gateway recognises itself when its own
		// peer list names it (its work must not count twice).
		r.journal.Reset(r.epochNonce(now), r.configID)
		if buf, err := r.journal.AppendBinary(r.scratch[:0]); err == nil {
			r.scratch = buf
			_ = proxy.SetSharedData(shared.KeyJournal, buf, 0)
		}
		r.loadJournal() // a racing creator's journal wins: answer with it
	}
	rate := r.gatewayWork(now, r.exportWork)
	epoch, since := queryUint(path, queryEpoch), queryUint(path, querySince)
	status := uint32(200)
	buf, err := shared.AppendPeerExport(r.scratch[:0], r.journal, epoch, since, peerAnswerEntries, r.peerAddrs, r.exportWork, rate, now)
	if err != nil {
		r.log.error("cannot encode a peer answer: " + err.Error())
		status, buf = 500, nil
	} else {
		r.scratch = buf
	}
	r.stats.add(r.stats.peerServed, 1)
	if err := proxy.SendLocalResponse(status, "gpuroute_peer", buf, peerHeaders, proxy.NoGrpcStatus); err != nil {
		r.log.error("cannot answer a peer request: " + err.Error())
	}
	return types.ActionPause
}

// gatewayWork sets dst to this gateway's own in-flight work per replica,
// and returns its dispatch rate: this worker's ledger and the other
// workers' records, without the work imported from peers (exporting that
// would echo a peer's work back to it).
func (r *root) gatewayWork(now int64, dst []scoring.Work) (perSec float64) {
	clear(dst)
	if r.worker != 0 && len(r.registry.Workers) > 1 {
		r.refreshBoard()
		_, perSec = r.board.Sum(r.worker, now, r.peerWorkTTL(), dst)
	}
	for i := range dst {
		w := r.ledger.WorkOn(i, &r.replicas[i].Hardware, r.replicas[i].ScrapedNanos)
		dst[i].Add(&w)
	}
	return perSec + r.ledger.Rate(now)
}

// loadJournal decodes the gateway's journal into r.journal; false when
// there is none or it belongs to another replica list.
func (r *root) loadJournal() bool {
	v, _, err := proxy.GetSharedData(shared.KeyJournal)
	return err == nil && r.journal.Decode(v) == nil && r.journal.ConfigID == r.configID
}

// journalDispatches appends the outbox's dispatches to the shared journal
// (read, append, write with the read CAS; a lost race retries).
func (r *root) journalDispatches(now int64) {
	if r.journal == nil || r.outbox.Len() == 0 {
		return
	}
	for range 3 {
		v, cas, err := proxy.GetSharedData(shared.KeyJournal)
		switch {
		case err == proxy.ErrNotFound:
			cas = 0
			r.journal.Reset(r.epochNonce(now), r.configID)
		case err != nil:
			return
		case r.journal.Decode(v) != nil || r.journal.ConfigID != r.configID:
			// Garbage or another replica list: start a new epoch, which
			// tells importers to restart their cursors.
			r.journal.Reset(r.epochNonce(now), r.configID)
		}
		r.outbox.Each(r.journalAppend)
		buf, err := r.journal.AppendBinary(r.scratch[:0])
		if err != nil {
			return
		}
		r.scratch = buf
		if proxy.SetSharedData(shared.KeyJournal, buf, cas) != proxy.ErrCASMismatch {
			return
		}
	}
}

// ownEpoch returns the epoch of this gateway's journal as shared data holds
// it now (0: none), reading only its header.
func (r *root) ownEpoch() uint64 {
	v, _, err := proxy.GetSharedData(shared.KeyJournal)
	if err != nil {
		return 0
	}
	e, _ := shared.JournalEpoch(v)
	return e
}

// epochNonce returns a nonzero value unlikely to repeat across restarts.
func (r *root) epochNonce(now int64) uint64 {
	return (uint64(now)*0x9e3779b97f4a7c15 ^ r.worker<<32 ^ uint64(r.id)) | 1
}

// askPeers sends the leader's tick asks, one outstanding call per peer.
func (r *root) askPeers() {
	pe := &r.cfg.PeerExchange
	for i := range r.peers {
		l := &r.peers[i]
		if l.asking || l.self {
			continue
		}
		b := append(r.keyScratch[:0], pe.Path...)
		b = append(b, '?')
		b = append(b, queryEpoch...)
		b = append(b, '=')
		b = strconv.AppendUint(b, l.epoch, 10)
		b = append(b, '&')
		b = append(b, querySince...)
		b = append(b, '=')
		b = strconv.AppendUint(b, l.next, 10)
		r.keyScratch = b
		hdrs := [][2]string{{":method", "GET"}, {":path", string(b)}, {":authority", pe.Peers[i].Name},
			{HeaderPeerToken, pe.Token}}
		if _, err := proxy.DispatchHttpCall(pe.Peers[i].Cluster, hdrs, nil, nil, r.cfg.ScrapeTimeoutMillis, r.peerDone[i]); err != nil {
			r.peerFailed(i, peerUnreachable, "cannot call cluster "+pe.Peers[i].Cluster+": "+err.Error())
			continue
		}
		l.asking = true
	}
}

// peerAnswered merges one peer's answer: placements into importBox (the
// next merge records them in the shared index), work into the remote sum.
func (r *root) peerAnswered(i, numHeaders, bodySize int) {
	if i >= len(r.peers) {
		return
	}
	l := &r.peers[i]
	l.asking = false
	if numHeaders == 0 {
		r.peerFailed(i, peerTimeout, "no answer within "+strconv.FormatUint(uint64(r.cfg.ScrapeTimeoutMillis), 10)+" ms")
		return
	}
	status, _ := proxy.GetHeaderMapValue(proxy.MapTypeHttpCallResponseHeaders, ":status")
	if string(status) != "200" {
		r.peerFailed(i, peerStatus, "answered status "+string(status))
		return
	}
	body, err := proxy.GetBufferBytes(proxy.BufferTypeHttpCallResponseBody, 0, uint32(bodySize))
	if err == nil {
		err = r.peerExport.Decode(body)
	}
	if err != nil {
		r.peerFailed(i, peerGarbled, "unreadable answer: "+err.Error())
		return
	}
	x := &r.peerExport
	// A link's epoch changes only when its journal is recreated, so our
	// own (copied out of shared data whole) is read only then.
	if x.Epoch != 0 && x.Epoch != l.epoch && x.Epoch == r.ownEpoch() {
		// Our own journal: the peer list names this gateway, as it does
		// when every gateway gets the same list (one WasmPlugin for all
		// the gateway pods). Its work would count twice.
		l.self, l.failing = true, peerOK
		r.log.info("peer " + r.cfg.PeerExchange.Peers[i].Name + " is this gateway (its journal came back); not asking it again")
		return
	}
	r.mapPeerReplicas(x)
	l.epoch, l.next = x.Epoch, x.Next
	n0 := r.importBox.Len()
	x.Each(r.importEntry)
	r.stats.add(r.stats.peerImported, int64(r.importBox.Len()-n0))
	now := proxy.NowNanos()
	clear(l.work)
	for j, k := range r.peerMap {
		if k >= 0 && j < len(x.Work) {
			l.work[k] = x.Work[j]
		}
	}
	l.rate, l.workNanos = x.ArrivalPerSec, now
	if l.failing != peerOK {
		l.failing = peerOK
		r.log.info("peer " + r.cfg.PeerExchange.Peers[i].Name + " answers again")
	}
	r.publishRemoteWork(now)
}

// peerFailed counts a failed ask and logs it when the link was answering
// or failed differently before: once per episode, not once per tick.
func (r *root) peerFailed(i int, kind peerFailure, why string) {
	r.stats.add(r.stats.peerFailures, 1)
	if l := &r.peers[i]; l.failing != kind {
		l.failing = kind
		r.log.warn("peer " + r.cfg.PeerExchange.Peers[i].Name + ": " + why)
	}
}

// peerFailure is how a link's last ask ended.
type peerFailure uint8

const (
	peerOK peerFailure = iota
	peerUnreachable
	peerTimeout
	peerStatus
	peerGarbled
)

// mapPeerReplicas maps the peer's replica indices to ours by address (-1:
// a replica this gateway does not route to).
func (r *root) mapPeerReplicas(x *shared.PeerExport) {
	n := x.NumReplicas()
	if cap(r.peerMap) < n {
		r.peerMap = make([]int, n)
	}
	r.peerMap = r.peerMap[:n]
	for j := range r.peerMap {
		r.peerMap[j] = -1
		a := x.Addr(j)
		// The same order is the common case: try index j first.
		if j < len(r.peerAddrs) && string(a) == r.peerAddrs[j] {
			r.peerMap[j] = j
			continue
		}
		for k := range r.peerAddrs {
			if string(a) == r.peerAddrs[k] {
				r.peerMap[j] = k
				break
			}
		}
	}
}

// importPlacement queues one imported placement for the shared index.
func (r *root) importPlacement(replica int, chain []uint64) {
	if replica >= 0 && replica < len(r.peerMap) && r.peerMap[replica] >= 0 {
		r.importBox.Push(r.peerMap[replica], chain)
	}
}

// publishRemoteWork writes the sum of the peers' fresh work for this
// gateway's workers.
func (r *root) publishRemoteWork(now int64) {
	clear(r.remote.Work)
	r.remote.ArrivalPerSec = 0
	ttl := r.peerWorkTTL()
	for i := range r.peers {
		l := &r.peers[i]
		if l.workNanos == 0 || now-l.workNanos > ttl {
			continue
		}
		for k := range l.work {
			r.remote.Work[k].Add(&l.work[k])
		}
		r.remote.ArrivalPerSec += l.rate
	}
	r.remote.Worker, r.remote.WrittenNanos = r.worker, now
	r.remote.NextPublish()
	buf, err := r.remote.AppendBinary(r.scratch[:0])
	if err != nil {
		return
	}
	r.scratch = buf
	_ = proxy.SetSharedData(keyRemoteWork, buf, 0) // only the leader writes
	copy(r.remoteWork, r.remote.Work)
	r.remoteRate, r.remoteNanos = r.remote.ArrivalPerSec, now
	r.remoteGen++
}

// readRemoteWork takes the leader's sum of the peers' work (every tick, on
// every worker); a sum older than peerWorkTTL is dropped.
func (r *root) readRemoteWork(now int64) {
	if r.remoteWork == nil {
		return
	}
	if !r.leader {
		if v, cas, err := proxy.GetSharedData(keyRemoteWork); err == nil && cas != r.remoteCAS {
			r.remoteCAS = cas
			if r.remote.Decode(v) == nil && r.remote.ConfigID == r.configID {
				copy(r.remoteWork, r.remote.Work)
				r.remoteRate, r.remoteNanos = r.remote.ArrivalPerSec, r.remote.WrittenNanos
				r.remoteGen++
			}
		}
	}
	if r.remoteNanos != 0 && now-r.remoteNanos > r.peerWorkTTL() {
		clear(r.remoteWork)
		r.remoteRate, r.remoteNanos = 0, 0
		r.remoteGen++
	}
}

// peerWorkTTL is how long a worker's or a peer's published work counts: a
// few lease lifetimes, after which its writer is presumed gone.
func (r *root) peerWorkTTL() int64 {
	return 3 * int64(r.cfg.LeaseMillis) * int64(time.Millisecond)
}

// appendPeerStatus adds the exchange to the status endpoint's JSON: the age
// of the peers' work this worker counts, and on the leader (which asks) each
// link's state.
func (r *root) appendPeerStatus(b []byte, now int64) []byte {
	if !r.cfg.PeerExchange.Serving() {
		return b
	}
	b = append(b, `,"peer_work_age_ms":`...)
	if r.remoteNanos == 0 {
		b = append(b, `null`...)
	} else {
		b = strconv.AppendInt(b, max(now-r.remoteNanos, 0)/int64(time.Millisecond), 10)
	}
	if !r.leader {
		return b
	}
	b = append(b, `,"peers":[`...)
	for i := range r.peers {
		l := &r.peers[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = strconv.AppendQuote(b, r.cfg.PeerExchange.Peers[i].Name)
		b = append(b, `,"self":`...)
		b = strconv.AppendBool(b, l.self)
		b = append(b, `,"failing":`...)
		b = strconv.AppendBool(b, l.failing != peerOK)
		b = append(b, `,"cursor":`...)
		b = strconv.AppendUint(b, l.next, 10)
		b = append(b, `,"answer_age_ms":`...)
		if l.workNanos == 0 {
			b = append(b, `null`...)
		} else {
			b = strconv.AppendInt(b, max(now-l.workNanos, 0)/int64(time.Millisecond), 10)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

// queryUint returns the decimal value of name in the path's query (0 when
// absent or malformed: the exporter then answers from its journal's start).
func queryUint(path []byte, name string) uint64 {
	q := path
	if i := bytes.IndexByte(q, '?'); i >= 0 {
		q = q[i+1:]
	} else {
		return 0
	}
	for len(q) > 0 {
		kv := q
		if i := bytes.IndexByte(q, '&'); i >= 0 {
			kv, q = q[:i], q[i+1:]
		} else {
			q = nil
		}
		if len(kv) > len(name) && kv[len(name)] == '=' && string(kv[:len(name)]) == name {
			v, err := strconv.ParseUint(string(kv[len(name)+1:]), 10, 64)
			if err != nil {
				return 0
			}
			return v
		}
	}
	return 0
}
