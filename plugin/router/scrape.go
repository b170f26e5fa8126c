package router

import (
	"strconv"
	"time"

	"github.com/gpuroute/gpuroute/plugin/config"
	"github.com/gpuroute/gpuroute/plugin/metrics"
	"github.com/gpuroute/gpuroute/plugin/proxy"
	"github.com/gpuroute/gpuroute/plugin/shared"
	"github.com/gpuroute/gpuroute/scoring"
	"github.com/gpuroute/gpuroute/scoring/prefix"
)

// scraping is how the replicas' metrics reach every worker VM: one VM at a
// time holds the scrape lease (shared.KeyLease), calls each replica's
// metrics endpoint, and publishes the fleet snapshot (shared.KeySnapshot)
// that every VM reads back. It owns the lease, the metrics parsers and
// calls, the snapshot (the leader scrapes into it, the others decode into
// it) and the figures taken from it when it is applied. Health reads the
// snapshot's scrape times and failures; the view copies the figures into
// the table; the status endpoint shows both.
type scraping struct {
	cfg      *config.Config
	configID uint64
	stats    *stats
	log      logPrefix
	// applied is called after each snapshot is applied (the root's
	// snapshotApplied: health and the prefix index follow it).
	applied func(now int64)

	leader bool
	// handedOver: a newer root took this one's scraping over (adopt); the
	// answers to this one's calls are dropped.
	handedOver bool

	// One parser per replica (engines differ), the calls in flight.
	// roundOf[i] is the round whose call to replica i is outstanding (0:
	// none); calls counts the current round's outstanding calls; dirty
	// says answers are applied to snap but not yet published.
	parsers []*metrics.Parser
	done    []func(numHeaders, bodySize, numTrailers int) // per replica
	sample  metrics.Sample
	calls   int
	round   uint32
	roundOf []uint32
	dirty   bool

	snap    shared.Snapshot
	snapCAS uint32
	read    shared.Snapshot // readSnapshot's decoding scratch

	// figures are the decision's figures of each replica as of the last
	// applied snapshot; figuresGen counts the applications.
	figures    []figures
	figuresGen uint64

	buf []byte
}

// figures are one replica's scraped figures as the decision reads them.
type figures struct {
	waiting, running int
	kvUsage          float64
	kvCapacityTokens int // the configured capacity, else the reported one
	adapterSlots     int // the configured slots, else the reported ones
	adapters         []scoring.Adapter
}

func (s *scraping) setup(cfg *config.Config, configID uint64, log logPrefix, st *stats, applied func(now int64)) error {
	n := len(cfg.Replicas)
	s.cfg, s.configID, s.log, s.stats, s.applied = cfg, configID, log, st, applied
	s.parsers = make([]*metrics.Parser, n)
	s.done = make([]func(numHeaders, bodySize, numTrailers int), n)
	for i := range s.done {
		// Made once: a closure made per call would cost a heap allocation
		// per replica per tick (BenchmarkVMHeap).
		s.done[i] = func(numHeaders, bodySize, _ int) { s.scraped(i, numHeaders, bodySize) }
	}
	s.figures = make([]figures, n)
	for i := range s.figures {
		s.figures[i].adapterSlots = cfg.Replicas[i].AdapterSlots
	}
	s.snap.ConfigID = configID
	s.snap.SetLen(n)
	s.buf = make([]byte, 0, 4096)
	type parserKey struct {
		engine metrics.Engine
		names  metrics.Names
	}
	// One parser per engine and metric names, not per replica: a parser
	// keeps nothing from one page to the next.
	parsers := make(map[parserKey]*metrics.Parser)
	for i := range cfg.Replicas {
		c := &cfg.Replicas[i]
		if c.MetricsCluster == "" {
			continue
		}
		key := parserKey{c.Engine, c.MetricNames}
		p := parsers[key]
		if p == nil {
			var err error
			if p, err = metrics.NewParser(c.Engine, c.MetricNames); err != nil {
				return err
			}
			parsers[key] = p
		}
		s.parsers[i] = p
	}
	return nil
}

// holdLease runs one step of the leader lease (shared.LeaseStep) for
// worker (0: none yet). A lease created on a missing key is confirmed by a
// re-read, because that set ignores CAS and two workers may both have
// "created" it (TestLeaseHandover).
func (s *scraping) holdLease(now int64, worker uint64) {
	if worker == 0 {
		s.leader = false
		return
	}
	ttl := int64(s.cfg.LeaseMillis) * int64(time.Millisecond)
	v, cas, err := proxy.GetSharedData(shared.KeyLease)
	found := err == nil
	var cur shared.Lease
	if found && cur.Decode(v) != nil {
		found = false // garbage: claim it, with the CAS we read
	}
	if err != nil && err != proxy.ErrNotFound {
		s.leader = false
		return
	}
	next, write, leader := shared.LeaseStep(cur, found, worker, now, ttl)
	if write {
		buf, _ := next.AppendBinary(s.buf[:0])
		s.buf = buf
		if proxy.SetSharedData(shared.KeyLease, buf, cas) != nil {
			leader = false
		} else if cas == 0 {
			v, _, err := proxy.GetSharedData(shared.KeyLease)
			leader = err == nil && cur.Decode(v) == nil && cur.Holder == worker
		}
	}
	if leader != s.leader {
		s.stats.add(s.stats.leaseChanges, 1)
		if leader {
			s.log.info("took the scrape lease")
		}
	}
	s.leader = leader
}

// giveUpLease releases the lease worker holds, so another worker takes it
// at once instead of after its TTL.
func (s *scraping) giveUpLease(worker uint64) {
	if !s.leader {
		return
	}
	if v, cas, err := proxy.GetSharedData(shared.KeyLease); err == nil {
		var cur shared.Lease
		if cur.Decode(v) == nil && cur.Holder == worker {
			buf, _ := shared.Lease{}.AppendBinary(s.buf[:0])
			_ = proxy.SetSharedData(shared.KeyLease, buf, cas)
		}
	}
	s.leader = false
}

// holder says which kind of VM holds the scrape lease: "scraper" (a
// config.RoleScraper service), "worker", or "nobody" (none valid now), so
// an operator sees that a worker not leading is expected.
func holder(now int64) string {
	var l shared.Lease
	v, _, err := proxy.GetSharedData(shared.KeyLease)
	switch {
	case err != nil || l.Decode(v) != nil || l.Holder == 0 || l.ExpiresNanos <= now:
		return "nobody"
	case l.Holder&shared.ScraperBit != 0:
		return config.RoleScraper
	}
	return config.RoleWorker
}

// scrape calls the metrics endpoint (proxy_http_call to its Envoy
// cluster) of every replica whose previous call has answered or timed out:
// each replica runs on its own schedule, so one silent endpoint holds back
// only its own scrapes (at most one call per scrape_timeout_ms), never the
// others' (TestScrapePerReplica). The snapshot is published once this
// round's calls have all answered; answers to calls of an earlier round
// are published with the next one.
func (s *scraping) scrape(now int64) {
	n := len(s.cfg.Replicas)
	if len(s.roundOf) != n {
		s.roundOf = make([]uint32, n)
	}
	if s.dirty {
		// Answers of the last round's calls still unpublished (one of them
		// is late): publish them before the snapshot is read back.
		s.publish(now)
	}
	s.round++
	if s.round == 0 {
		s.round = 1 // 0 marks an idle replica
	}
	s.calls = 0
	for i := range s.cfg.Replicas {
		c := &s.cfg.Replicas[i]
		if c.MetricsCluster == "" || s.roundOf[i] != 0 {
			continue
		}
		hdrs := [][2]string{{":method", "GET"}, {":path", c.MetricsPath}, {":authority", c.AddressText}, {"accept", "text/plain"}}
		_, err := proxy.DispatchHttpCall(c.MetricsCluster, hdrs, nil, nil, s.cfg.ScrapeTimeoutMillis, s.done[i])
		if err != nil {
			s.stats.add(s.stats.scrapeFailures, 1)
			s.snap.Replicas[i].ApplyFailure(shared.ScrapeTimeout, 0, now)
			s.log.warn("cannot scrape " + c.Name + " through cluster " + c.MetricsCluster + ": " + err.Error())
			continue
		}
		s.roundOf[i] = s.round
		s.calls++
	}
	if s.calls == 0 {
		s.publish(now)
	}
}

// scraped handles one metrics response. Timeouts, 5xx, truncated or garbage
// bodies age the replica's figures and count a failure; they never blank
// the last good state (TestScrapeFailures).
func (s *scraping) scraped(i, numHeaders, bodySize int) {
	if s.handedOver {
		return
	}
	now := proxy.NowNanos()
	current := false
	if i < len(s.roundOf) {
		current = s.roundOf[i] == s.round
		s.roundOf[i] = 0
	}
	if current && s.calls > 0 {
		s.calls--
	}
	rep := &s.snap.Replicas[i]
	switch {
	case numHeaders == 0:
		s.failed(i, shared.ScrapeTimeout, 0, now, nil)
	default:
		status := 0
		if v, err := proxy.GetHeaderMapValue(proxy.MapTypeHttpCallResponseHeaders, ":status"); err == nil {
			status, _ = strconv.Atoi(string(v))
		}
		if status < 200 || status > 299 {
			s.failed(i, shared.ScrapeHTTPStatus, status, now, nil)
			break
		}
		body, err := proxy.GetBufferBytes(proxy.BufferTypeHttpCallResponseBody, 0, uint32(bodySize))
		if err != nil {
			s.failed(i, shared.ScrapeGarbage, status, now, err)
			break
		}
		// Bad lines are skipped and the rest used; a body without samples
		// or cut short counts as a failed scrape and changes no figure
		// (shared.Replica.ApplySample).
		err = s.parsers[i].Parse(body, &s.sample)
		rep.ApplySample(&s.sample, now)
		if rep.LastError != shared.ScrapeOK {
			s.stats.add(s.stats.scrapeFailures, 1)
			s.warnFailing(i, err)
		} else {
			s.stats.add(s.stats.scrapes, 1)
		}
	}
	// The round's last answer publishes them all; a late answer (a call of
	// an earlier round) publishes itself, since the next readSnapshot would
	// replace an unpublished figure with what was published.
	s.dirty = true
	if !current || s.calls == 0 {
		s.publish(now)
	}
}

func (s *scraping) failed(i int, kind shared.ScrapeError, status int, now int64, err error) {
	s.snap.Replicas[i].ApplyFailure(kind, uint16(min(max(status, 0), 999)), now)
	s.stats.add(s.stats.scrapeFailures, 1)
	s.warnFailing(i, err)
}

// warnFailing logs once, when a replica's failures reach the bound that
// rules it out.
func (s *scraping) warnFailing(i int, err error) {
	rep := &s.snap.Replicas[i]
	if rep.Failures != uint32(s.cfg.UnhealthyAfterFailures) {
		return
	}
	why := rep.LastError.String()
	if rep.LastError == shared.ScrapeHTTPStatus {
		why += " " + strconv.Itoa(int(rep.HTTPStatus))
	}
	if err != nil {
		why += ": " + err.Error()
	}
	s.log.warn("replica " + s.cfg.Replicas[i].Name + " ruled out after " +
		strconv.Itoa(s.cfg.UnhealthyAfterFailures) + " failed scrapes: " + why)
}

// publish writes the leader's snapshot for every worker. Only the lease
// holder writes, so the write is unconditional; at a lease hand-over two
// leaders may alternate for one tick, both with fresh figures.
func (s *scraping) publish(now int64) {
	s.dirty = false
	s.snap.Generation++
	s.snap.WrittenNanos = now
	s.snap.ConfigID = s.configID
	buf, err := s.snap.AppendBinary(s.buf[:0])
	if err != nil {
		s.log.error("cannot encode the fleet snapshot: " + err.Error())
		return
	}
	s.buf = buf
	if err := proxy.SetSharedData(shared.KeySnapshot, buf, 0); err != nil {
		s.log.warn("cannot publish the fleet snapshot: " + err.Error())
		return
	}
	s.apply()
}

// readSnapshot decodes the fleet snapshot when its CAS changed (values are
// copied on every read, so readers skip the decode when nothing changed).
// The leader applies its own scrapes as they arrive and reads back what it
// published like everyone else.
func (s *scraping) readSnapshot() {
	v, cas, err := proxy.GetSharedData(shared.KeySnapshot)
	if err != nil || cas == s.snapCAS {
		return
	}
	s.snapCAS = cas
	// Decoded aside: a snapshot that is unreadable or of another replica
	// list (the leader may still run another configuration, during a
	// reload) leaves the one applied as it was (TestReconfigureKeepsState).
	if err := s.read.Decode(v); err != nil || s.read.ConfigID != s.configID || len(s.read.Replicas) != len(s.figures) {
		if err != nil {
			s.log.warn("fleet snapshot unreadable: " + err.Error())
		}
		return
	}
	s.snap, s.read = s.read, s.snap
	s.apply()
}

// adopt takes from's lease, snapshot and figures over, the replicas that
// keep their name and address with theirs (engine maps from's replicas to
// s's; reconfig.go); a replica at a new address starts unscraped. The
// answers to from's calls in flight are dropped: the next tick scrapes.
func (s *scraping) adopt(from *scraping, engine []int) {
	from.handedOver = true
	s.leader, s.snapCAS = from.leader, from.snapCAS
	s.snap.Generation = from.snap.Generation
	for i, j := range engine {
		if j >= 0 {
			dst, src := &s.snap.Replicas[j], &from.snap.Replicas[i]
			adapters := dst.Adapters[:0]
			*dst = *src
			dst.Adapters = append(adapters, src.Adapters...)
		}
	}
}

// apply takes the decision's figures from the snapshot, then lets the
// root's parts follow it.
func (s *scraping) apply() {
	now := proxy.NowNanos()
	for i := range s.figures {
		rep := &s.snap.Replicas[i]
		c := &s.cfg.Replicas[i]
		f := &s.figures[i]
		f.waiting, f.running = int(rep.Waiting), int(rep.Running)
		f.kvUsage = float64(rep.KVUsage)
		f.kvCapacityTokens = c.KVCapacityTokens
		if f.kvCapacityTokens == 0 {
			f.kvCapacityTokens = int(rep.KVCapacityTokens)
		}
		f.adapterSlots = c.AdapterSlots
		if f.adapterSlots < 0 && rep.MaxAdapters >= 0 {
			f.adapterSlots = int(rep.MaxAdapters)
		}
		f.adapters = f.adapters[:0]
		for _, a := range rep.Adapters {
			// An adapter listed only as waiting has queued requests but no
			// GPU slot (vLLM lists an adapter as running once a request of
			// it runs): counting it as resident would price requests for
			// it at no load while they queue behind a full set of slots
			// (TestSnapshotAdapterTiers).
			tier := scoring.TierGPU
			if a.Waiting {
				tier = scoring.TierStorage
			}
			f.adapters = append(f.adapters, scoring.Adapter{Name: a.Name, Tier: tier, Active: true, Hash: prefix.HashString(a.Name)})
		}
	}
	s.figuresGen++
	s.applied(now)
}
