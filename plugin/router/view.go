package router

import (
	"github.com/gpuroute/gpuroute/plugin/config"
	"github.com/gpuroute/gpuroute/scoring"
	"github.com/gpuroute/gpuroute/scoring/prefix"
)

// replicaView is Pick's input: the replica table, index-aligned with the
// configured replicas, and the request's lookups (prefix tokens cached on
// each replica, whether its adapter was sent there). It is the table's only
// writer. The parts own the figures: the configuration (addresses,
// hardware class, admission state), scraping (the snapshot's figures as
// last applied), health (eligibility and evidence age), calibration
// (prefill cost) and the work exchanges (the other workers' and gateways'
// in-flight work); sync copies what changed since the last call, so the
// table holds exactly their state. The stream's route builds it before
// Pick (forRequest), and the tick and the status endpoint read it after a
// sync; whatever else needs a replica's figures between two syncs asks the
// part that owns them.
type replicaView struct {
	replicas []scoring.Replica

	scrape   *scraping
	health   *health
	calib    *calibration
	work     *workShare
	peers    *peering
	members  *membership
	ledger   *scoring.Ledger
	index    *prefix.Index
	sessions *sessions

	// The parts' generations the table holds.
	figuresGen, healthGen uint64

	// What PeerWork holds was gathered (gatherPeerWork) with the board or
	// not, and with the peer gateways' sum of remoteGathered (a
	// peering.remoteGen): when either moves, every replica's is set again.
	peerWorkSet    bool
	localGathered  bool
	remoteGathered uint64

	// Per-request scratch: prefix tokens cached per replica, and where the
	// request's adapter was sent (the prefix index records adapters too).
	cached        []int
	adapterKey    [1]uint64
	adapterHeld   []int
	adapterRecent []bool
}

func (v *replicaView) setup(cfg *config.Config, r *root) {
	n := len(cfg.Replicas)
	v.scrape, v.health, v.calib = &r.scrape, &r.health, &r.calib
	v.work, v.peers, v.members = &r.work, &r.peers, &r.members
	v.ledger, v.index, v.sessions = r.ledger, r.index, &r.sessions
	v.replicas = make([]scoring.Replica, n)
	for i := range cfg.Replicas {
		c := &cfg.Replicas[i]
		rep := &v.replicas[i]
		*rep = scoring.Replica{
			Name:             c.Name,
			Addr:             c.AddressText,
			AddrHash:         prefix.HashString(c.AddressText),
			Engine:           c.Engine.String(),
			Hardware:         v.calib.hardware[i],
			AdapterSlots:     c.AdapterSlots,
			AdapterHostSlots: c.AdapterHostSlots,
			Healthy:          true,
		}
		rep.Drain, rep.DrainDeadlineNanos = drainOf(c)
	}
	v.cached = make([]int, n)
	v.adapterHeld = make([]int, n)
	v.adapterRecent = make([]bool, n)
}

// sync brings the table up to the parts' state and returns it.
func (v *replicaView) sync() []scoring.Replica {
	if g := v.scrape.figuresGen; g != v.figuresGen {
		v.figuresGen = g
		for i := range v.replicas {
			f := &v.scrape.figures[i]
			rep := &v.replicas[i]
			rep.WaitingRequests, rep.RunningRequests = f.waiting, f.running
			rep.KVUsage, rep.KVCapacityTokens = f.kvUsage, f.kvCapacityTokens
			rep.AdapterSlots = f.adapterSlots
			rep.Adapters = append(rep.Adapters[:0], f.adapters...)
		}
	}
	if g := v.health.gen; g != v.healthGen {
		v.healthGen = g
		for i := range v.replicas {
			h := &v.health.verdicts[i]
			v.replicas[i].Healthy, v.replicas[i].ScrapedNanos = h.healthy, h.evidenceNanos
		}
	}
	for _, i := range v.calib.changed {
		v.replicas[i].Hardware = v.calib.hardware[i]
	}
	v.calib.synced()
	return v.replicas
}

// forRequest builds Pick's input for stream s's req at now: the table
// synced, the prefix tokens of req's chain the index believes cached on
// each replica (the session's replica at least the session's: session.go),
// where req's adapter was sent (req.AdapterRecent), and the in-flight work
// of the other workers and gateways.
func (v *replicaView) forRequest(s *stream, req *scoring.Request, now int64) (replicas []scoring.Replica, cached []int) {
	if v.scrape.figuresGen != v.figuresGen || v.health.gen != v.healthGen || len(v.calib.changed) > 0 {
		v.sync()
	}
	for i := range v.cached {
		v.cached[i] = 0
	}
	if len(req.Chain) > 0 {
		v.index.Lookup(req.Chain, v.cached)
	}
	v.sessions.affinity(s, v.cached)
	// Each replica's cache room: its capacity less the contexts the index
	// holds there (scoring.Replica.CacheRoomTokens).
	per := v.index.TokensPerEntry()
	for i := range v.replicas {
		rep := &v.replicas[i]
		rep.CacheRoomTokens = max(rep.KVCapacity()-v.index.Resident(i)*per, 0)
	}
	req.AdapterRecent = nil
	if req.Adapter != "" {
		// The shared prefix index also records where each adapter was
		// sent (under a key of its own), so every worker knows what the
		// others sent, not only its own ledger.
		v.adapterKey[0] = adapterKey(req.Model, req.Adapter)
		v.index.Lookup(v.adapterKey[:], v.adapterHeld)
		for i, k := range v.adapterHeld {
			v.adapterRecent[i] = k > 0
		}
		req.AdapterRecent = v.adapterRecent
	}
	v.gatherPeerWork(now)
	return v.replicas, v.cached
}

// gatherPeerWork sets each replica's PeerWork to the other workers' work
// plus what the peer gateways reported, rewriting only the replicas whose
// sum moved since the last call (shared.Board.Gather) unless the peer
// gateways' sum or whether the board counts changed.
func (v *replicaView) gatherPeerWork(now int64) {
	m, p := v.members, v.peers
	local := m.worker != 0 && len(m.registry.Workers) > 1
	if !local && p.remoteNanos == 0 {
		v.peerWorkSet = false // what PeerWork holds is left as it was
		v.ledger.SetPeerRate(0)
		return
	}
	var sum []scoring.Work
	var changed []int
	all := !v.peerWorkSet || p.remoteGen != v.remoteGathered || local != v.localGathered
	rate := 0.0
	if p.remoteNanos != 0 {
		rate = p.remoteRate
	}
	if local {
		var every bool
		var workers float64
		v.work.readBoard()
		sum, changed, every, workers = v.work.board.Gather(m.worker, now, v.work.ttl, len(v.replicas))
		all = all || every
		rate += workers
	}
	v.ledger.SetPeerRate(rate)
	v.peerWorkSet, v.remoteGathered, v.localGathered = true, p.remoteGen, local
	if all {
		for i := range v.replicas {
			v.setPeerWork(i, sum)
		}
		return
	}
	for _, i := range changed {
		v.setPeerWork(i, sum)
	}
}

// setPeerWork sets replica i's PeerWork to the other workers' sum (nil:
// none counted) plus the peer gateways'.
func (v *replicaView) setPeerWork(i int, sum []scoring.Work) {
	w := &v.replicas[i].PeerWork
	*w = scoring.Work{}
	if sum != nil {
		*w = sum[i]
	}
	if v.peers.remoteNanos != 0 {
		w.Add(&v.peers.remoteWork[i])
	}
}

// replicaAt returns the index of the replica at addr, or -1.
func replicaAt[S string | []byte](replicas []scoring.Replica, addr S) int {
	for i := range replicas {
		if string(addr) == replicas[i].Addr {
			return i
		}
	}
	return -1
}
