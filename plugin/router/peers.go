package router

import (
	"bytes"
	"crypto/subtle"
	"strconv"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/gpuroute/gpuroute/plugin/config"
	"github.com/gpuroute/gpuroute/plugin/proxy"
	"github.com/gpuroute/gpuroute/plugin/shared"
	"github.com/gpuroute/gpuroute/scoring"
)

// HeaderPeerToken carries peer_token on peer requests.
const HeaderPeerToken = "x-gpuroute-peer-token"

// Peer query parameters: the caller's journal epoch and next sequence number.
const (
	queryEpoch = "epoch"
	querySince = "since"
)

const (
	// journalEntries bounds the journal: importers ask every tick, so it
	// needs a few ticks of dispatches.
	journalEntries = 1024
	// journalBlocks is the checkpoints journaled per dispatch: at stride
	// 16 they cover the start of a prompt, where shared system prompts and
	// conversation histories are.
	journalBlocks = 32
	// peerAnswerEntries bounds one answer; a caller further behind gets the
	// rest on its next ask.
	peerAnswerEntries = journalEntries
)

// peerRefusedBody is the 403 body: it says nothing about what the exchange
// holds.
var peerRefusedBody = []byte(`{"error":{"message":"forbidden","type":"forbidden","code":403}}`)

var peerHeaders = [][2]string{{"content-type", "application/octet-stream"}}

// peering is the exchange between gateway instances in front of one fleet
// (config.PeerExchange). Shared data ends at the Envoy process, so two
// gateways would each place a new prompt prefix on their own and split it.
// Each gateway therefore journals its placements in shared data
// (shared.KeyJournal) and answers peer_path with the entries after a
// caller's cursor plus its in-flight work per replica (shared.PeerExport);
// every tick the scrape leader asks each configured peer, queues the
// placements for the shared prefix index (imports, which prefixShare
// merges) and publishes the peers' work for its workers
// (shared.KeyRemoteWork), who add it to PeerWork like a local worker's
// (the view's gather). Imported placements are never journaled again, so
// nothing echoes between gateways (TestPeersShareAffinity,
// TestPeersShareWork). It owns the journal, the imports, the links to the
// peers and the peers' summed work.
type peering struct {
	cfg                 *config.PeerExchange
	configID            uint64
	scrapeTimeoutMillis uint32
	ttl                 int64
	members             *membership
	work                *workShare
	stats               *stats
	log                 logPrefix

	token         []byte
	journal       *shared.Journal
	journalAppend func(replica int, chain []uint64)
	imports       *shared.Outbox // nil without the exchange
	importEntry   func(replica int, chain []uint64)
	addrs         []string // this gateway's replica addresses, by index
	peerMap       []int    // the answering peer's replica index → ours
	exportWork    []scoring.Work
	links         []peerLink
	done          []func(numHeaders, bodySize, numTrailers int)
	export        shared.PeerExport

	// remoteWork is the peers' summed work this worker counts, as of
	// remoteNanos (0: none), with their dispatch rate; remoteGen counts its
	// changes (the view sets every PeerWork again when it moves).
	remote      shared.WorkRecord
	remoteWork  []scoring.Work
	remoteRate  float64
	remoteNanos int64
	remoteGen   uint64
	remoteCAS   uint32

	buf  []byte
	path []byte
	// handedOver: a newer root took the exchange over (adopt); answers to
	// this one's asks are dropped.
	handedOver bool
}

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

// peerFailure is how a link's last ask ended.
type peerFailure uint8

const (
	peerOK peerFailure = iota
	peerUnreachable
	peerTimeout
	peerStatus
	peerGarbled
)

func (p *peering) setup(cfg *config.Config, configID uint64, ttl int64, m *membership, w *workShare, log logPrefix, st *stats) {
	pe := &cfg.PeerExchange
	p.cfg, p.configID, p.scrapeTimeoutMillis, p.ttl = pe, configID, cfg.ScrapeTimeoutMillis, ttl
	p.members, p.work, p.log, p.stats = m, w, log, st
	if !pe.Serving() {
		return
	}
	n := len(cfg.Replicas)
	p.token = []byte(pe.Token)
	p.journal = shared.NewJournal(journalEntries, journalBlocks)
	p.journalAppend = p.journal.Append
	p.imports = shared.NewOutbox(journalEntries, journalBlocks)
	p.importEntry = p.importPlacement
	p.exportWork = make([]scoring.Work, n)
	p.addrs = make([]string, n)
	for i := range cfg.Replicas {
		p.addrs[i] = cfg.Replicas[i].AddressText
	}
	p.remote.ConfigID = configID
	p.remote.Work = make([]scoring.Work, n)
	p.remoteWork = make([]scoring.Work, n)
	p.links = make([]peerLink, len(pe.Peers))
	p.done = make([]func(numHeaders, bodySize, numTrailers int), len(pe.Peers))
	for i := range p.links {
		p.links[i].work = make([]scoring.Work, n)
		p.done[i] = func(numHeaders, bodySize, _ int) { p.answered(i, numHeaders, bodySize) }
	}
}

// isPeerPath reports whether the request is for the exchange.
func (p *peering) isPeerPath(path []byte) bool {
	return p.cfg.Serving() && isPath(path, p.cfg.Path)
}

// serve answers another gateway's ask: this gateway's journal after the
// caller's cursor and its workers' in-flight work. Without the token it is
// a 403 that reveals nothing (TestPeerEndpoint).
func (p *peering) serve(path []byte) types.Action {
	tok, err := proxy.GetHeaderMapValue(proxy.MapTypeHttpRequestHeaders, HeaderPeerToken)
	if err != nil || subtle.ConstantTimeCompare(tok, p.token) != 1 {
		p.stats.add(p.stats.peerRefused, 1)
		if err := proxy.SendLocalResponse(403, "gpuroute_peer_refused", peerRefusedBody, jsonHeaders, proxy.NoGrpcStatus); err != nil {
			p.log.error("cannot refuse a peer request: " + err.Error())
		}
		return types.ActionPause
	}
	now := proxy.NowNanos()
	if !p.loadJournal() {
		// Nothing journaled yet: create the journal, so the answer carries
		// an epoch by which this gateway recognises itself when its own
		// peer list names it (its work must not count twice).
		p.journal.Reset(p.members.nonce(now), p.configID)
		if buf, err := p.journal.AppendBinary(p.buf[:0]); err == nil {
			p.buf = buf
			_ = proxy.SetSharedData(shared.KeyJournal, buf, 0)
		}
		p.loadJournal() // a racing creator's journal wins: answer with it
	}
	rate := p.work.gatewayWork(now, p.exportWork)
	epoch, since := queryUint(path, queryEpoch), queryUint(path, querySince)
	status := uint32(200)
	buf, err := shared.AppendPeerExport(p.buf[:0], p.journal, epoch, since, peerAnswerEntries, p.addrs, p.exportWork, rate, now)
	if err != nil {
		p.log.error("cannot encode a peer answer: " + err.Error())
		status, buf = 500, nil
	} else {
		p.buf = buf
	}
	p.stats.add(p.stats.peerServed, 1)
	if err := proxy.SendLocalResponse(status, "gpuroute_peer", buf, peerHeaders, proxy.NoGrpcStatus); err != nil {
		p.log.error("cannot answer a peer request: " + err.Error())
	}
	return types.ActionPause
}

// loadJournal decodes the gateway's journal into p.journal; false when
// there is none or it belongs to another replica list.
func (p *peering) loadJournal() bool {
	v, _, err := proxy.GetSharedData(shared.KeyJournal)
	return err == nil && p.journal.Decode(v) == nil && p.journal.ConfigID == p.configID
}

// journalDispatches appends the outbox's dispatches to the shared journal
// (read, append, write with the read CAS; a lost race retries).
func (p *peering) journalDispatches(now int64, outbox *shared.Outbox) {
	if p.journal == nil || outbox.Len() == 0 {
		return
	}
	for range 3 {
		v, cas, err := proxy.GetSharedData(shared.KeyJournal)
		switch {
		case err == proxy.ErrNotFound:
			cas = 0
			p.journal.Reset(p.members.nonce(now), p.configID)
		case err != nil:
			return
		case p.journal.Decode(v) != nil || p.journal.ConfigID != p.configID:
			// Garbage or another replica list: start a new epoch, which
			// tells importers to restart their cursors.
			p.journal.Reset(p.members.nonce(now), p.configID)
		}
		outbox.Each(p.journalAppend)
		buf, err := p.journal.AppendBinary(p.buf[:0])
		if err != nil {
			return
		}
		p.buf = buf
		if proxy.SetSharedData(shared.KeyJournal, buf, cas) != proxy.ErrCASMismatch {
			return
		}
	}
}

// ownEpoch returns the epoch of this gateway's journal as shared data holds
// it now (0: none), reading only its header.
func ownEpoch() uint64 {
	v, _, err := proxy.GetSharedData(shared.KeyJournal)
	if err != nil {
		return 0
	}
	e, _ := shared.JournalEpoch(v)
	return e
}

// ask sends the leader's tick asks, one outstanding call per peer.
func (p *peering) ask() {
	for i := range p.links {
		l := &p.links[i]
		if l.asking || l.self {
			continue
		}
		b := append(p.path[:0], p.cfg.Path...)
		b = append(b, '?')
		b = append(b, queryEpoch...)
		b = append(b, '=')
		b = strconv.AppendUint(b, l.epoch, 10)
		b = append(b, '&')
		b = append(b, querySince...)
		b = append(b, '=')
		b = strconv.AppendUint(b, l.next, 10)
		p.path = b
		peer := &p.cfg.Peers[i]
		hdrs := [][2]string{{":method", "GET"}, {":path", string(b)}, {":authority", peer.Name},
			{HeaderPeerToken, p.cfg.Token}}
		if _, err := proxy.DispatchHttpCall(peer.Cluster, hdrs, nil, nil, p.scrapeTimeoutMillis, p.done[i]); err != nil {
			p.failed(i, peerUnreachable, "cannot call cluster "+peer.Cluster+": "+err.Error())
			continue
		}
		l.asking = true
	}
}

// answered merges one peer's answer: placements into imports (the next
// merge records them in the shared index), work into the remote sum.
func (p *peering) answered(i, numHeaders, bodySize int) {
	if i >= len(p.links) || p.handedOver {
		return
	}
	l := &p.links[i]
	l.asking = false
	if numHeaders == 0 {
		p.failed(i, peerTimeout, "no answer within "+strconv.FormatUint(uint64(p.scrapeTimeoutMillis), 10)+" ms")
		return
	}
	status, _ := proxy.GetHeaderMapValue(proxy.MapTypeHttpCallResponseHeaders, ":status")
	if string(status) != "200" {
		p.failed(i, peerStatus, "answered status "+string(status))
		return
	}
	body, err := proxy.GetBufferBytes(proxy.BufferTypeHttpCallResponseBody, 0, uint32(bodySize))
	if err == nil {
		err = p.export.Decode(body)
	}
	if err != nil {
		p.failed(i, peerGarbled, "unreadable answer: "+err.Error())
		return
	}
	x := &p.export
	// A link's epoch changes only when its journal is recreated, so our
	// own (copied out of shared data whole) is read only then.
	if x.Epoch != 0 && x.Epoch != l.epoch && x.Epoch == ownEpoch() {
		// Our own journal: the peer list names this gateway, as it does
		// when every gateway gets the same list (one WasmPlugin for all
		// the gateway pods). Its work would count twice (TestPeerIsSelf).
		l.self, l.failing = true, peerOK
		p.log.info("peer " + p.cfg.Peers[i].Name + " is this gateway (its journal came back); not asking it again")
		return
	}
	p.mapReplicas(x)
	l.epoch, l.next = x.Epoch, x.Next
	n0 := p.imports.Len()
	x.Each(p.importEntry)
	p.stats.add(p.stats.peerImported, int64(p.imports.Len()-n0))
	now := proxy.NowNanos()
	clear(l.work)
	for j, k := range p.peerMap {
		if k >= 0 && j < len(x.Work) {
			l.work[k] = x.Work[j]
		}
	}
	l.rate, l.workNanos = x.ArrivalPerSec, now
	if l.failing != peerOK {
		l.failing = peerOK
		p.log.info("peer " + p.cfg.Peers[i].Name + " answers again")
	}
	p.publishRemoteWork(now)
}

// failed counts a failed ask and logs it when the link was answering or
// failed differently before: once per episode, not once per tick
// (TestPeerFailures).
func (p *peering) failed(i int, kind peerFailure, why string) {
	p.stats.add(p.stats.peerFailures, 1)
	if l := &p.links[i]; l.failing != kind {
		l.failing = kind
		p.log.warn("peer " + p.cfg.Peers[i].Name + ": " + why)
	}
}

// mapReplicas maps the peer's replica indices to ours by address (-1: a
// replica this gateway does not route to).
func (p *peering) mapReplicas(x *shared.PeerExport) {
	n := x.NumReplicas()
	if cap(p.peerMap) < n {
		p.peerMap = make([]int, n)
	}
	p.peerMap = p.peerMap[:n]
	for j := range p.peerMap {
		p.peerMap[j] = -1
		a := x.Addr(j)
		// The same order is the common case: try index j first.
		if j < len(p.addrs) && string(a) == p.addrs[j] {
			p.peerMap[j] = j
			continue
		}
		for k := range p.addrs {
			if string(a) == p.addrs[k] {
				p.peerMap[j] = k
				break
			}
		}
	}
}

// importPlacement queues one imported placement for the shared index.
func (p *peering) importPlacement(replica int, chain []uint64) {
	if replica >= 0 && replica < len(p.peerMap) && p.peerMap[replica] >= 0 {
		p.imports.Push(p.peerMap[replica], chain)
	}
}

// publishRemoteWork writes the sum of the peers' fresh work for this
// gateway's workers.
func (p *peering) publishRemoteWork(now int64) {
	clear(p.remote.Work)
	p.remote.ArrivalPerSec = 0
	for i := range p.links {
		l := &p.links[i]
		if l.workNanos == 0 || now-l.workNanos > p.ttl {
			continue
		}
		for k := range l.work {
			p.remote.Work[k].Add(&l.work[k])
		}
		p.remote.ArrivalPerSec += l.rate
	}
	p.remote.Worker, p.remote.WrittenNanos = p.members.worker, now
	p.remote.NextPublish()
	buf, err := p.remote.AppendBinary(p.buf[:0])
	if err != nil {
		return
	}
	p.buf = buf
	_ = proxy.SetSharedData(shared.KeyRemoteWork, buf, 0) // only the leader writes
	copy(p.remoteWork, p.remote.Work)
	p.remoteRate, p.remoteNanos = p.remote.ArrivalPerSec, now
	p.remoteGen++
}

// readRemoteWork takes the leader's sum of the peers' work (every tick, on
// every worker but the leader, which wrote it); a sum older than the TTL
// is dropped.
func (p *peering) readRemoteWork(now int64, leader bool) {
	if p.remoteWork == nil {
		return
	}
	if !leader {
		if v, cas, err := proxy.GetSharedData(shared.KeyRemoteWork); err == nil && cas != p.remoteCAS {
			p.remoteCAS = cas
			if p.remote.Decode(v) == nil && p.remote.ConfigID == p.configID {
				copy(p.remoteWork, p.remote.Work)
				p.remoteRate, p.remoteNanos = p.remote.ArrivalPerSec, p.remote.WrittenNanos
				p.remoteGen++
			}
		}
	}
	if p.remoteNanos != 0 && now-p.remoteNanos > p.ttl {
		clear(p.remoteWork)
		p.remoteRate, p.remoteNanos = 0, 0
		p.remoteGen++
	}
}

// appendStatus adds the exchange to the status endpoint's JSON: the age
// of the peers' work this worker counts, and on the leader (which asks)
// each link's state.
func (p *peering) appendStatus(b []byte, now int64, leader bool) []byte {
	if !p.cfg.Serving() {
		return b
	}
	b = append(b, `,"peer_work_age_ms":`...)
	b = appendAgeMillis(b, now, p.remoteNanos)
	if !leader {
		return b
	}
	b = append(b, `,"peers":[`...)
	for i := range p.links {
		l := &p.links[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = strconv.AppendQuote(b, p.cfg.Peers[i].Name)
		b = append(b, `,"self":`...)
		b = strconv.AppendBool(b, l.self)
		b = append(b, `,"failing":`...)
		b = strconv.AppendBool(b, l.failing != peerOK)
		b = append(b, `,"cursor":`...)
		b = strconv.AppendUint(b, l.next, 10)
		b = append(b, `,"answer_age_ms":`...)
		b = appendAgeMillis(b, now, l.workNanos)
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

// adopt takes from's links (by peer name), the peers' work and the
// placements imported but not yet merged over, renumbered (engine maps
// from's replicas to p's, which the peers' answers map by address;
// reconfig.go). The answers to from's asks in flight are dropped.
func (p *peering) adopt(from *peering, engine []int) {
	from.handedOver = true
	if p.remoteWork == nil || from.remoteWork == nil {
		return
	}
	for i := range p.links {
		for k := range from.links {
			if from.cfg.Peers[k].Name != p.cfg.Peers[i].Name {
				continue
			}
			l, o := &p.links[i], &from.links[k]
			l.epoch, l.next, l.self, l.failing = o.epoch, o.next, o.self, o.failing
			l.rate, l.workNanos = o.rate, o.workNanos
			renumberWork(l.work, o.work, engine)
		}
	}
	renumberWork(p.remoteWork, from.remoteWork, engine)
	p.remoteRate, p.remoteNanos, p.remoteCAS = from.remoteRate, from.remoteNanos, from.remoteCAS
	p.remoteGen++
	from.imports.Each(func(replica int, chain []uint64) {
		if j := remap(engine, replica); j >= 0 {
			p.imports.Push(j, chain)
		}
	})
}

// renumberWork sets dst[engine[i]] to src[i], and the rest of dst to zero.
func renumberWork(dst, src []scoring.Work, engine []int) {
	clear(dst)
	for i, j := range engine {
		if j >= 0 && j < len(dst) && i < len(src) {
			dst[j] = src[i]
		}
	}
}
