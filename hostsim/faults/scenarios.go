package faults

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gpuroute/gpuroute/hostsim"
)

type scenario struct {
	name, what string
	run        func(o Options, res *Result)
}

var scenarios = []scenario{
	{"baseline", "no fault", runBaseline},
	{"metrics-timeout", "r0's metrics never answer", metricsFault(func(int) (hostsim.CallReply, bool) {
		return hostsim.CallReply{NoAnswer: true}, true
	})},
	{"metrics-5xx", "r0's metrics answer 503", metricsFault(func(int) (hostsim.CallReply, bool) {
		return hostsim.CallReply{Status: 503, Body: []byte("upstream connect error")}, true
	})},
	{"metrics-truncated", "r0's metrics body cut mid-line", metricsFault(func(int) (hostsim.CallReply, bool) {
		body := (&replica{waiting: 7, running: 3}).metricsBody()
		return hostsim.CallReply{Body: []byte(body[:len(body)/2])}, true
	})},
	{"metrics-garbage", "r0's metrics body is binary garbage", metricsFault(func(n int) (hostsim.CallReply, bool) {
		b := make([]byte, 512)
		for i := range b {
			b[i] = byte((i*131 + n*17) ^ 0x5a)
		}
		return hostsim.CallReply{Body: b}, true
	})},
	{"metrics-flapping", "r0's metrics alternate 5 good / 5 failed scrapes", metricsFault(func(n int) (hostsim.CallReply, bool) {
		if (n/5)%2 == 1 {
			return hostsim.CallReply{Status: 500}, true
		}
		return hostsim.CallReply{}, false
	})},
	{"stale-metrics", "r0's metrics stop answering, never ruled out (stale only)", runStale},
	{"replica-crash", "r0 crashes with streams open, fallbacks 0", func(o Options, res *Result) { runCrash(o, res, 0) }},
	{"replica-crash-fallback", "r0 crashes with streams open, fallbacks 1", func(o Options, res *Result) { runCrash(o, res, 1) }},
	{"all-down", "every replica crashes", runAllDown},
	{"drain-deadline", "r0 drained with a 500 ms deadline, streams open", runDrain},
	{"clock-jump", "virtual wall clock jumps forward (and back, if hostsim can)", runClockJump},
	{"leader-deleted", "the scraping VM is deleted mid-lease", runLeaderDeleted},
	{"contention-16", "16 worker VMs on one shared data store", runContention},
	{"bad-reconfigure", "a bad configuration arrives during load", runBadReconfigure},
	{"module-swap", "new VMs of a new module, same vm_id, during load", runModuleSwap},
	{"gc-pressure", "one VM, many requests, poll_oneoff=ENOSYS", runGCPressure},
	{"peer-down", "the peer gateway refuses, times out and answers garbage in turn", runPeerDown},
}

// withEnv starts an env and closes it after f.
func withEnv(o Options, res *Result, workers, replicas int, extra string, f func(e *env)) {
	e, err := newEnv(o, res, workers, replicas, extra)
	if err != nil {
		res.Err = err
		if errors.Is(err, hostsim.ErrVMFailed) {
			res.Trapped = true
		}
		return
	}
	defer e.close()
	f(e)
	if e.failed() {
		return
	}
	e.finishAll()
	if res.Lost > 0 && res.Err == nil && res.KnownGap == "" {
		res.Err = fmt.Errorf("faults: %s lost %d of %d requests", res.Name, res.Lost, res.Sent)
	}
}

func runBaseline(o Options, res *Result) {
	withEnv(o, res, 4, 4, "", func(e *env) {
		e.advance(200 * time.Millisecond)
		e.load(o.requests(), 0)
		hit := float64(e.metric(statPrefixHits)) / float64(max(e.metric(statPromptTokens), 1))
		res.Figures = fmt.Sprintf("%s; prefix-hit token share %.2f; scrapes %d", e.shares(), hit, e.metric(statScrapes))
	})
}

// metricsFault runs load while r0's metrics endpoint misbehaves as fault
// says (r0 itself keeps serving): traffic must keep flowing and r0's
// share is reported before and after the fault.
func metricsFault(fault func(n int) (hostsim.CallReply, bool)) func(o Options, res *Result) {
	return func(o Options, res *Result) {
		withEnv(o, res, 4, 4, "", func(e *env) {
			n := o.requests()
			e.advance(200 * time.Millisecond)
			e.load(n/2, 0)
			before := e.shares()
			e.resetServed()
			failsBefore := e.metric(statScrapeFails)
			e.reps[0].fault = fault
			t0 := e.h.Now()
			others0 := 0
			for _, r := range e.reps[1:] {
				others0 += r.scrapes
			}
			// Let the fault act for 3 s (30 ticks) before measuring traffic.
			e.advance(3 * time.Second)
			e.load(n-n/2, n/2)
			d := e.h.Now() - t0
			others := -others0
			for _, r := range e.reps[1:] {
				others += r.scrapes
			}
			res.Figures = fmt.Sprintf("before: %s; fault on for %v: %s; scrape failures %d; healthy replicas scraped %.1f/s each during the fault (10/s at tick 100 ms)",
				before, d.Round(time.Millisecond), e.shares(), e.metric(statScrapeFails)-failsBefore,
				float64(others)/3/d.Seconds())
		})
	}
}

// runStale: r0's metrics stop answering but the failure bound is out of
// reach, so r0 only turns stale. Traffic keeps flowing (20 requests a
// second while the metrics age past stale_after_ms, then the load): r0
// keeps answering 2xx, which is evidence it is alive, so it keeps its
// share instead of getting the stale penalty (plugin/router/health.go, present).
func runStale(o Options, res *Result) {
	withEnv(o, res, 4, 4, `,"unhealthy_after_failures":1000,"scrape_timeout_ms":50`, func(e *env) {
		n := o.requests()
		e.advance(200 * time.Millisecond)
		e.load(n/2, 0)
		before := e.shares()
		e.reps[0].fault = func(int) (hostsim.CallReply, bool) { return hostsim.CallReply{NoAnswer: true}, true }
		for i := range 60 { // 3 s, past stale_after_ms (2 s)
			e.advance(50 * time.Millisecond)
			e.request(i%len(e.vms), content(n+i))
		}
		e.resetServed()
		e.load(n-n/2, n/2)
		res.Figures = fmt.Sprintf("fresh: %s; r0's metrics silent > 3 s, r0 answering: %s", before, e.shares())
		if e.reps[0].served == 0 {
			res.Figures += " (stale r0 got nothing: penalised like an excluded replica)"
		}
	})
}

// runCrash: streams open on every replica, r0 crashes; its streams are
// reset and re-sent by the client; load goes on while the plugin learns
// that r0 is gone, from Envoy's 503s for the refused connections (passive
// health) before three failed scrapes tell it.
func runCrash(o Options, res *Result, fallbacks int) {
	extra := `,"scrape_timeout_ms":200`
	if fallbacks > 0 {
		extra += `,"fallbacks":` + strconv.Itoa(fallbacks)
	}
	withEnv(o, res, 4, 4, extra, func(e *env) {
		n := o.requests()
		e.advance(200 * time.Millisecond)
		e.openFlights(200, 0)
		e.advance(50 * time.Millisecond)
		reset := e.crash(e.reps[0])
		crashAt := e.h.Now()
		e.load(n-200, 200)
		e.finishAll()
		res.Figures = fmt.Sprintf("streams reset by the crash %d (re-sent); after the crash %s; r0 scrapes unanswered since %v; passive ejections %d",
			reset, e.shares(), crashAt, e.metric(statPassiveEjects))
	})
}

// runAllDown: every replica crashes; after the failure bound the plugin
// answers 503 with an OpenAI-style body instead of routing to dead hosts.
func runAllDown(o Options, res *Result) {
	e, err := newEnv(o, res, 4, 4, `,"scrape_timeout_ms":200`)
	if err != nil {
		res.Err = err
		return
	}
	defer e.close()
	e.advance(200 * time.Millisecond)
	e.load(100, 0)
	for _, r := range e.reps {
		r.down = true
	}
	crashAt := e.h.Now()
	firstLocal := time.Duration(-1)
	lostBefore := 0
	// At least 2.5 s of load after the crash, well past the time the
	// plugin takes to detect it.
	n := max(o.requests(), 1100)
	for i := range n - 100 {
		if e.failed() {
			break
		}
		if i%len(e.vms) == 0 {
			e.advance(10 * time.Millisecond)
		}
		locals := res.Local[503]
		lost := res.Lost
		e.request(i%len(e.vms), content(100+i))
		if res.Local[503] > locals && firstLocal < 0 {
			firstLocal = e.h.Now() - crashAt
		}
		if firstLocal < 0 {
			lostBefore += res.Lost - lost
		}
	}
	// A 503's body must say why, in the OpenAI error shape, echoing nothing.
	s, _, lr, err := e.dispatch(0, "SECRET-PROMPT")
	if err != nil {
		e.fail(err)
	} else {
		e.fail(s.Done())
	}
	body := ""
	if lr != nil {
		body = string(lr.Body)
	}
	res.Figures = fmt.Sprintf("first plugin 503 %v after the crash; %d requests failed upstream before it (Envoy 503, expected: nothing can serve); 503 body %s",
		firstLocal, lostBefore, body)
	switch {
	case lr == nil || lr.Status != 503:
		e.fail(errors.New("faults: all-down: no local 503 once every replica is ruled out"))
	case !strings.Contains(body, `"type":"service_unavailable"`) || strings.Contains(body, "SECRET"):
		e.fail(errors.New("faults: all-down: 503 body " + strconv.Quote(body) + " is not the OpenAI error shape or echoes the request"))
	}
	// Requests during the detection window can only fail (nothing can
	// serve them): they are unroutable, not lost by the plugin.
	res.Unroutable, res.Lost = lostBefore, res.Lost-lostBefore
}

// runDrain: r0 is drained with a deadline while streams are open on it;
// at the deadline the plugin resets them and the client re-sends them.
func runDrain(o Options, res *Result) {
	withEnv(o, res, 4, 4, "", func(e *env) {
		e.advance(200 * time.Millisecond)
		e.openFlights(200, 0)
		onR0 := 0
		for _, f := range e.open {
			if f.rep == e.reps[0] {
				onR0++
			}
		}
		deadline := start.Add(e.h.Now() + 500*time.Millisecond).UnixMilli()
		cfg := e.config("", map[int]string{0: `"state":"draining","drain_deadline_ms":` + strconv.FormatInt(deadline, 10)})
		if refused := e.reconfigure(cfg); refused > 0 {
			e.fail(fmt.Errorf("faults: drain configuration refused by %d VMs", refused))
			return
		}
		e.resetServed()
		e.load(o.requests()/2, 200)
		during := e.shares()
		e.advance(time.Second)
		e.reap()
		res.Figures = fmt.Sprintf("streams open on r0 %d; new traffic while draining %s; drain resets %d",
			onR0, during, e.metric(statDrainResets))
		if e.reps[0].served > 0 {
			e.fail(errors.New("faults: drain: r0 got new streams while draining"))
		}
	})
}

// wallStepper is the hostsim call a real clock jump needs (see
// runClockJump): Host.StepWallClock.
type wallStepper interface {
	StepWallClock(d time.Duration)
}

// runClockJump: the guest reads time through WASI clock_time_get(REALTIME),
// hostsim's virtual wall clock. Forward: an hour passes at once (every tick
// due in between fires, as after a long stall). Backward needs a wall-clock
// step that leaves the event schedule alone.
func runClockJump(o Options, res *Result) {
	withEnv(o, res, 4, 4, `,"tick_ms":1000`, func(e *env) {
		n := o.requests()
		e.advance(2 * time.Second)
		e.load(n/3, 0)
		e.openFlights(40, n/3)
		t0 := time.Now()
		e.advance(10 * time.Minute)
		perTick := time.Since(t0) / time.Duration(600*len(e.vms))
		e.load(n/3, n/3+40)
		figures := "forward 10 min in one Advance (every due tick fires, " + perTick.Round(time.Microsecond).String() + " real per tick): ok"
		if ws, ok := any(e.h).(wallStepper); ok {
			ws.StepWallClock(-10 * time.Minute)
			e.load(n-2*(n/3), 2*(n/3)+40)
			ws.StepWallClock(10 * time.Minute)
			figures += "; backward 10 min: ok"
		} else {
			figures += "; backward: not run (hostsim has no wall-clock step: needs Host.StepWallClock(d) offsetting clock_time_get(REALTIME) only)"
		}
		res.Figures = figures + "; " + e.shares()
	})
}

// leaderOf asks each VM's status endpoint which one holds the lease.
func leaderOf(e *env) int {
	for w, vm := range e.vms {
		root := vm.Root(rootName)
		if root == nil {
			continue
		}
		s, err := root.NewStream()
		if err != nil {
			e.fail(err)
			return -1
		}
		_, err = s.RequestHeaders([][2]string{{":method", "GET"}, {":path", "/gpuroute/status"}, {":authority", "gw"}}, true)
		e.fail(err)
		lr := s.LocalReply()
		e.fail(s.Done())
		if lr != nil && bytes.Contains(lr.Body, []byte(`"leader":true`)) {
			return w
		}
	}
	return -1
}

// runLeaderDeleted: the VM holding the scrape lease is deleted (Envoy
// removing a worker) while its streams are open; another VM must scrape
// within the lease lifetime and no request may be lost.
func runLeaderDeleted(o Options, res *Result) {
	withEnv(o, res, 4, 2, `,"status_path":"/gpuroute/status"`, func(e *env) {
		n := o.requests()
		e.advance(500 * time.Millisecond)
		e.load(n/2, 0)
		l := leaderOf(e)
		if l < 0 {
			e.fail(errors.New("faults: leader-deleted: no VM reports the lease"))
			return
		}
		e.openFlights(40, n/2)
		closedAt := e.h.Now()
		// Envoy abandons a removed worker's streams: the client re-sends them.
		keep := e.open[:0]
		for _, f := range e.open {
			if f.w == l {
				e.resend(f.w, f.content)
				continue
			}
			keep = append(keep, f)
		}
		e.open = keep
		e.fail(e.vms[l].Close())
		e.vms = append(e.vms[:l], e.vms[l+1:]...)
		for _, f := range e.open {
			if f.w > l {
				f.w--
			}
		}
		e.load(n-n/2-40, n/2+40)
		e.advance(3 * time.Second)
		gap := time.Duration(0)
		for _, r := range e.reps {
			prev := time.Duration(-1)
			for _, at := range r.scrapeAt {
				if prev >= 0 && at >= closedAt && at-prev > gap {
					gap = at - prev
				}
				prev = at
			}
		}
		res.Figures = fmt.Sprintf("leader was VM %d; longest scrape gap after its deletion %v (tick 100 ms, lease 1 s); lease changes %d; new leader VM %d (of the 3 left)",
			l, gap, e.metric(statLeaseChanges), leaderOf(e))
		if gap > 1500*time.Millisecond {
			e.fail(fmt.Errorf("faults: leader-deleted: scrapes stopped for %v", gap))
		}
	})
}

// runContention: 16 worker VMs share one store (lease, snapshot, worker
// records, prefix index, all with CAS); every VM routes.
func runContention(o Options, res *Result) {
	withEnv(o, res, 16, 8, "", func(e *env) {
		e.advance(300 * time.Millisecond)
		t0 := e.h.Now()
		s0 := 0
		for _, r := range e.reps {
			s0 += r.scrapes
		}
		e.load(o.requests(), 0)
		scr := 0
		for _, r := range e.reps {
			scr += r.scrapes
		}
		secs := (e.h.Now() - t0).Seconds()
		hit := float64(e.metric(statPrefixHits)) / float64(max(e.metric(statPromptTokens), 1))
		_, _, ok := e.h.SharedData(vmID, keyPrefixIndex)
		if !ok {
			e.fail(errors.New("no shared prefix index under " + keyPrefixIndex + " after the load"))
		}
		res.Figures = fmt.Sprintf("scrapes per replica per second %.1f (one leader at 10/s); lease changes %d; prefix-hit token share %.2f; shared prefix index present %v; %s",
			float64(scr-s0)/float64(len(e.reps))/secs, e.metric(statLeaseChanges), hit, ok, e.shares())
	})
}

// runBadReconfigure: a configuration with a bad value reaches every VM
// during load; each refuses it and the last good one keeps serving; a
// later good one (adding a replica) is taken.
func runBadReconfigure(o Options, res *Result) {
	withEnv(o, res, 4, 3, "", func(e *env) {
		n := o.requests()
		e.advance(200 * time.Millisecond)
		e.openFlights(40, 0)
		e.load(n/3, 40)
		bad := strings.Replace(e.config("", nil), `"address":"10.0.0.2:8000"`, `"address":"10.0.0.2"`, 1)
		refusedBad := e.reconfigure(bad)
		e.load(n/3, n/3+40)
		r := &replica{name: "r3", addr: "10.0.0.4:8000", cluster: "r3-metrics"}
		e.reps = append(e.reps, r)
		e.byAddr[r.addr] = r
		e.h.AddCluster(r.cluster, hostsim.ClusterFunc(r.handle))
		refusedGood := e.reconfigure(e.config("", nil))
		e.advance(300 * time.Millisecond)
		e.resetServed()
		e.load(n-2*(n/3)-40, 2*(n/3)+40)
		res.Figures = fmt.Sprintf("bad configuration refused by %d of %d VMs; good one refused by %d; after it %s",
			refusedBad, len(e.vms), refusedGood, e.shares())
		if refusedBad != len(e.vms) || refusedGood != 0 {
			e.fail(errors.New("faults: bad-reconfigure: want the bad configuration refused everywhere and the good one taken"))
		}
		if r.scrapes == 0 {
			e.fail(errors.New("faults: bad-reconfigure: the replica added by the good configuration was never scraped"))
		}
	})
}

// customSection appends a custom section named name to a module: new bytes
// (a new module id to wazero and to Envoy's ECDS), the same code.
func customSection(wasm []byte, name string) []byte {
	payload := append([]byte{byte(len(name))}, name...)
	payload = append(payload, 1) // wazero reads at least one content byte
	out := append([]byte(nil), wasm...)
	out = append(out, 0, byte(len(payload)))
	return append(out, payload...)
}

// runModuleSwap: a new module arrives (ECDS): new VMs of it with the same
// vm_id start next to the old ones, which finish their streams and close.
// Shared data (lease, snapshot, prefix index) outlives the swap.
func runModuleSwap(o Options, res *Result) {
	withEnv(o, res, 4, 4, "", func(e *env) {
		n := o.requests()
		e.advance(200 * time.Millisecond)
		e.load(n/2, 0)
		e.openFlights(40, n/2)
		mod2, err := e.h.Compile(context.Background(), customSection(e.opts.Wasm, "gpuroute-swap"))
		if err != nil {
			e.fail(err)
			return
		}
		_, prefixCAS, _ := e.h.SharedData(vmID, keyPrefixIndex)
		old := e.vms
		e.vms = nil
		if err := e.addVMs(mod2, 4); err != nil {
			e.fail(err)
			return
		}
		_, afterCAS, ok := e.h.SharedData(vmID, keyPrefixIndex)
		if !ok || afterCAS != prefixCAS {
			// New VMs read the index the old ones left; rewriting it
			// (or losing it) would cost the new module its affinity.
			e.fail(errors.New("shared prefix index not kept across the module swap (cas " +
				strconv.FormatUint(uint64(prefixCAS), 10) + " -> " + strconv.FormatUint(uint64(afterCAS), 10) + ")"))
		}
		// Old VMs finish their streams, then go.
		for _, f := range e.open {
			if err := e.finish(f.s, f.rep, true); err != nil {
				e.fail(err)
				res.Lost++
				continue
			}
			res.Completed++
		}
		e.open = e.open[:0]
		for _, vm := range old {
			e.fail(vm.Close())
		}
		hitsBefore, promptBefore := e.metric(statPrefixHits), e.metric(statPromptTokens)
		e.load(n-n/2-40, n/2+40)
		hit := float64(e.metric(statPrefixHits)-hitsBefore) / float64(max(e.metric(statPromptTokens)-promptBefore, 1))
		res.Figures = fmt.Sprintf("prefix index kept across the swap %v (cas %d→%d); prefix-hit token share on the new module %.2f; %s",
			ok, prefixCAS, afterCAS, hit, e.shares())
	})
}

// runGCPressure: one VM routes many requests with bodies under Envoy
// 1.33's ENOSYS poll_oneoff; the module's linear memory must stay flat
// after warm-up and the runtime must never poll.
func runGCPressure(o Options, res *Result) {
	h := hostsim.NewHost(hostsim.Options{Start: start, LogLevel: hostsim.LogWarn, Seed: 1})
	defer h.Close()
	mod, err := h.Compile(context.Background(), o.Wasm)
	if err != nil {
		res.Err = err
		return
	}
	e := &env{opts: o, res: res, h: h, mod: mod, byAddr: map[string]*replica{}}
	for i := range 4 {
		r := &replica{name: "r" + strconv.Itoa(i), addr: "10.0.0." + strconv.Itoa(i+1) + ":8000", cluster: "r" + strconv.Itoa(i) + "-metrics"}
		e.reps = append(e.reps, r)
		e.byAddr[r.addr] = r
		h.AddCluster(r.cluster, hostsim.ClusterFunc(r.handle))
	}
	if err := e.addVMs(mod, 1); err != nil {
		res.Err = err
		return
	}
	defer func() { res.ErrorLogs += e.errorLogs() }()
	n := o.gcRequests()
	warm := min(n/10, 10000)
	vm := e.vms[0]
	var afterStart, afterWarm uint32
	for i := range n {
		if e.failed() {
			break
		}
		if i == 1 {
			afterStart = vm.MemoryBytes()
		}
		if i == warm {
			afterWarm = vm.MemoryBytes()
		}
		if i%8 == 0 {
			e.advance(10 * time.Millisecond)
		}
		e.request(0, content(i))
	}
	final := vm.MemoryBytes()
	res.Figures = fmt.Sprintf("linear memory %d KiB after the first request, %d KiB after %d requests, %d KiB after %d; poll_oneoff calls %d",
		afterStart/1024, afterWarm/1024, warm, final/1024, n, h.PollCalls())
	if final > afterWarm {
		e.fail(fmt.Errorf("faults: gc-pressure: linear memory grew from %d to %d KiB after warm-up", afterWarm/1024, final/1024))
	}
	if h.PollCalls() != 0 {
		e.fail(fmt.Errorf("faults: gc-pressure: %d poll_oneoff calls, want 0", h.PollCalls()))
	}
}

// runPeerDown: the gateway's only peer never gives a usable answer (503,
// no answer within the timeout, garbage, in turn; the cluster is missing
// for the first asks). The exchange only adds placements, so routing must
// not notice: nothing lost, the failures counted.
func runPeerDown(o Options, res *Result) {
	const peers = `,"peer_path":"/gpuroute/peer","peer_token":"faults-peer-token-0123456789",` +
		`"peers":[{"name":"b","cluster":"peer-b"}],"scrape_timeout_ms":50`
	withEnv(o, res, 4, 4, peers, func(e *env) {
		e.advance(200 * time.Millisecond)
		asks := 0
		e.h.AddCluster("peer-b", hostsim.ClusterFunc(func(*hostsim.CallRequest) hostsim.CallReply {
			asks++
			switch asks % 3 {
			case 0:
				return hostsim.CallReply{Status: 503, Body: []byte("upstream connect error")}
			case 1:
				return hostsim.CallReply{NoAnswer: true}
			}
			return hostsim.CallReply{Status: 200, Body: []byte("GRPX\x02garbage")}
		}))
		e.load(o.requests(), 0)
		hit := float64(e.metric(statPrefixHits)) / float64(max(e.metric(statPromptTokens), 1))
		res.Figures = fmt.Sprintf("peer asks %d, failures counted %d; prefix-hit token share %.2f; %s",
			asks, e.metric(statPeerFailures), hit, e.shares())
	})
}
