package router

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuroute/gpuroute/hostsim"
	"github.com/gpuroute/gpuroute/plugin/shared"
)

// Tests of the gateway peer exchange (peers.go): two hostsim Hosts are two
// Envoy instances, each reaching the other's listener through a cluster.

const (
	testPeerPath  = "/gpuroute/peer"
	testPeerToken = "test-peer-token-0123456789"
)

// peerConfig is the configuration fragment that makes a gateway ask peer.
func peerConfig(peer string) string {
	return `,"peer_path":"` + testPeerPath + `","peer_token":"` + testPeerToken +
		`","peers":[{"name":"` + peer + `","cluster":"peer-` + peer + `"}]`
}

// askGateway sends headers to one of f's workers the way Envoy's listener
// would and returns the local reply (nil: the request was routed upstream)
// and the destination it got.
func askGateway(t *testing.T, f *testFleet, w int, headers [][2]string) (*hostsim.LocalReply, string) {
	t.Helper()
	s, err := f.vms[w].Root(testRootID).NewStream()
	if err != nil {
		t.Fatalf("NewStream = %v", err)
	}
	if _, err := s.RequestHeaders(headers, true); err != nil {
		t.Fatalf("RequestHeaders = %v", err)
	}
	lr := s.LocalReply()
	dst, _ := s.RequestHeader(HeaderDestination)
	if err := s.Done(); err != nil {
		t.Fatalf("Done = %v", err)
	}
	return lr, dst
}

// linkGateways makes a and b peers of each other, or isolated ones with the
// same topology but the exchange off.
func linkGateways(t *testing.T, a, b *testFleet, exchange bool) {
	t.Helper()
	serve := func(f *testFleet) hostsim.ClusterFunc {
		n := 0
		return func(req *hostsim.CallRequest) hostsim.CallReply {
			n++
			lr, _ := askGateway(t, f, n%len(f.vms), req.Headers)
			if lr == nil {
				return hostsim.CallReply{Status: 404}
			}
			return hostsim.CallReply{Status: lr.Status, Body: append([]byte(nil), lr.Body...), Latency: time.Millisecond}
		}
	}
	a.h.AddCluster("peer-b", serve(b))
	b.h.AddCluster("peer-a", serve(a))
	if exchange {
		a.configure(a.config(peerConfig("b"), nil))
		b.configure(b.config(peerConfig("a"), nil))
	}
}

func advanceBoth(a, b *testFleet, d time.Duration) {
	for step := 50 * time.Millisecond; d > 0; d -= step {
		a.advance(step)
		b.advance(step)
	}
}

// TestPeersShareAffinity: a prefix that gateway a placed away from the
// rendezvous home (its own view of load pushed it there) is followed by
// gateway b once the exchange ran, and not without it.
func TestPeersShareAffinity(t *testing.T) {
	const replicas, prefixes = 8, 8
	run := func(exchange bool) (followed int) {
		a := newTestFleet(t, 2, replicas, "")
		b := newTestFleet(t, 2, replicas, "")
		linkGateways(t, a, b, exchange)
		// In a's view every replica but 10.0.0.6 is busy.
		for i, r := range a.replicas {
			if i != 5 {
				r.set(func(r *fakeReplica) { r.waiting, r.running = 20, 40 })
			}
		}
		advanceBoth(a, b, 300*time.Millisecond)
		for p := range prefixes {
			system := strings.Repeat("tenant "+strconv.Itoa(p)+" shared context. ", 300)
			if dst := a.route(p%2, system+"first"); dst != "10.0.0.6:8000" {
				t.Fatalf("gateway a sent prefix %d to %s, want the only idle replica 10.0.0.6:8000", p, dst)
			}
		}
		// Two ticks: a merges and journals, b's leader asks and merges.
		advanceBoth(a, b, 300*time.Millisecond)
		for p := range prefixes {
			system := strings.Repeat("tenant "+strconv.Itoa(p)+" shared context. ", 300)
			if b.route(p%2, system+"follow-up") == "10.0.0.6:8000" {
				followed++
			}
		}
		if exchange && a.metric(statPeerServed) == 0 {
			t.Errorf("%s on gateway a = 0, want b's asks answered", statPeerServed)
		}
		if exchange && b.metric(statPeerImported) < prefixes {
			t.Errorf("%s on gateway b = %d, want ≥ %d", statPeerImported, b.metric(statPeerImported), prefixes)
		}
		return followed
	}
	if got := run(true); got != prefixes {
		t.Errorf("with the exchange, gateway b followed %d of %d prefixes to a's placement, want all", got, prefixes)
	}
	if got := run(false); got == prefixes {
		t.Errorf("without the exchange gateway b still followed all %d prefixes: the test does not exercise the exchange", prefixes)
	}
}

// TestPeersShareWork: requests gateway a has in flight on a replica count
// as load in gateway b, whose own metrics and ledger show an idle fleet.
func TestPeersShareWork(t *testing.T) {
	const prompts = 8
	run := func(exchange bool) (avoided int) {
		// Flow control off: the long prompts queue over its hold bound.
		const flowOff = `,"flow_control":{"enabled":false}`
		a := newTestFleet(t, 1, 2, flowOff)
		b := newTestFleet(t, 1, 2, flowOff)
		linkGateways(t, a, b, exchange)
		if exchange {
			a.configure(a.config(peerConfig("b")+flowOff, nil))
			b.configure(b.config(peerConfig("a")+flowOff, nil))
		}
		a.replicas[1].set(func(r *fakeReplica) { r.waiting, r.running = 30, 50 })
		advanceBoth(a, b, 300*time.Millisecond)
		long := strings.Repeat("a long document to summarise. ", 2000)
		for i := range 6 {
			if _, dst := a.open(0, long+strconv.Itoa(i)); dst != "10.0.0.1:8000" {
				t.Fatalf("gateway a sent request %d to %s, want 10.0.0.1:8000 (10.0.0.2 reports 30 waiting)", i, dst)
			}
		}
		advanceBoth(a, b, 300*time.Millisecond)
		for i := range prompts {
			if b.route(0, "short question "+strconv.Itoa(i)) == "10.0.0.2:8000" {
				avoided++
			}
		}
		return avoided
	}
	if got := run(true); got != prompts {
		t.Errorf("with the exchange, gateway b avoided a's loaded replica for %d of %d requests, want all", got, prompts)
	}
	if got := run(false); got == prompts {
		t.Errorf("without the exchange gateway b still avoided 10.0.0.1 for all %d requests: the test does not exercise the exchange", prompts)
	}
}

// TestPeerEndpoint: the exchange answers only with the token, never routes
// the request upstream, and is off unless configured.
func TestPeerEndpoint(t *testing.T) {
	f := newTestFleet(t, 1, 2, `,"peer_path":"`+testPeerPath+`","peer_token":"`+testPeerToken+`"`)
	f.advance(200 * time.Millisecond)
	f.route(0, strings.Repeat("a prompt long enough to fill a few prefix blocks. ", 20))
	f.advance(200 * time.Millisecond)
	get := func(path string, extra ...[2]string) [][2]string {
		return append([][2]string{{":method", "GET"}, {":path", path}, {":authority", "gw"}}, extra...)
	}
	tests := []struct {
		name    string
		headers [][2]string
		status  int
	}{
		{"no token", get(testPeerPath), 403},
		{"wrong token", get(testPeerPath, [2]string{HeaderPeerToken, "test-peer-token-0123456780"}), 403},
		{"token prefix", get(testPeerPath, [2]string{HeaderPeerToken, testPeerToken[:16]}), 403},
		{"token", get(testPeerPath, [2]string{HeaderPeerToken, testPeerToken}), 200},
		{"token and cursor", get(testPeerPath+"?epoch=7&since=3", [2]string{HeaderPeerToken, testPeerToken}), 200},
		{"token and garbage query", get(testPeerPath+"?since=-1&epoch=x&&=", [2]string{HeaderPeerToken, testPeerToken}), 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lr, dst := askGateway(t, f, 0, tt.headers)
			if lr == nil || lr.Status != tt.status {
				t.Fatalf("GET %s: local reply %+v, want status %d", testPeerPath, lr, tt.status)
			}
			if dst != "" {
				t.Errorf("GET %s got destination %q, want none (answered locally)", testPeerPath, dst)
			}
			if tt.status != 200 {
				if strings.Contains(string(lr.Body), "10.0.0.") {
					t.Errorf("403 body %q reveals the fleet", lr.Body)
				}
				return
			}
			var x shared.PeerExport
			if err := x.Decode(lr.Body); err != nil {
				t.Fatalf("answer does not decode: %v", err)
			}
			if x.NumReplicas() != 2 || string(x.Addr(1)) != "10.0.0.2:8000" || x.Len() == 0 {
				t.Errorf("answer has %d replicas (second %q) and %d placements, want 2, 10.0.0.2:8000 and ≥ 1",
					x.NumReplicas(), x.Addr(min(1, x.NumReplicas()-1)), x.Len())
			}
		})
	}
	if got := f.metric(statPeerRefused); got != 3 {
		t.Errorf("%s = %d, want 3", statPeerRefused, got)
	}
	off := newTestFleet(t, 1, 2, "")
	if lr, dst := askGateway(t, off, 0, get(testPeerPath, [2]string{HeaderPeerToken, testPeerToken})); lr != nil || dst == "" {
		t.Errorf("without peer_path, GET %s = local reply %+v, destination %q; want it routed like any request", testPeerPath, lr, dst)
	}
}

// TestPeerFailures: a peer that is unreachable, times out, refuses the
// token or answers garbage costs nothing but its placements: every request
// is still routed, the failures are counted and logged once per episode,
// the status endpoint shows the link failing, and a recovered peer is used
// again.
func TestPeerFailures(t *testing.T) {
	tests := []struct {
		name  string
		reply hostsim.CallReply
	}{
		{"connection refused", hostsim.CallReply{Status: 503}},
		{"timeout", hostsim.CallReply{NoAnswer: true}},
		{"refused token", hostsim.CallReply{Status: 403, Body: peerRefusedBody}},
		{"garbage", hostsim.CallReply{Status: 200, Body: []byte("<html>not an answer</html>")}},
		{"truncated", hostsim.CallReply{Status: 200, Body: []byte("GRPX\x02\x01\x02")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newTestFleet(t, 2, 2, "")
			b := newTestFleet(t, 1, 2, `,"peer_path":"`+testPeerPath+`","peer_token":"`+testPeerToken+`"`)
			broken := true
			a.h.AddCluster("peer-b", hostsim.ClusterFunc(func(req *hostsim.CallRequest) hostsim.CallReply {
				if broken {
					return tt.reply
				}
				lr, _ := askGateway(t, b, 0, req.Headers)
				return hostsim.CallReply{Status: lr.Status, Body: append([]byte(nil), lr.Body...)}
			}))
			a.configure(a.config(peerConfig("b")+`,"scrape_timeout_ms":50,"status_path":"/status"`, nil))
			advanceBoth(a, b, time.Second)
			for i := range 20 {
				if dst := a.route(i%2, "question "+strconv.Itoa(i)); dst == "" {
					t.Fatalf("request %d was not routed while the peer fails", i)
				}
			}
			if n := a.metric(statPeerFailures); n < 5 {
				t.Errorf("%s = %d after 1 s of failing asks at 100 ms ticks, want ≥ 5", statPeerFailures, n)
			}
			if warnings := logsWith(a.h, "peer b:"); warnings != 1 {
				t.Errorf("%d warnings about peer b, want 1 per failure episode", warnings)
			}
			status := func() string {
				for w := range a.vms {
					lr, _ := askGateway(t, a, w, [][2]string{{":method", "GET"}, {":path", "/status"}, {":authority", "gw"}})
					if s := string(lr.Body); strings.Contains(s, `"peers":[`) {
						return s
					}
				}
				t.Fatal("no worker's status lists the peer links (the leader's should)")
				return ""
			}
			if s := status(); !strings.Contains(s, `"name":"b","self":false,"failing":true`) {
				t.Errorf("status while the peer fails = %s, want the link to b failing", s)
			}
			broken = false
			b.route(0, strings.Repeat("a prompt for gateway b to journal. ", 20))
			advanceBoth(a, b, 500*time.Millisecond)
			if s := status(); !strings.Contains(s, `"name":"b","self":false,"failing":false`) {
				t.Errorf("status after the peer recovered = %s, want the link to b answering", s)
			}
			if a.metric(statPeerImported) == 0 {
				t.Errorf("%s = 0 after the peer recovered, want its placement imported", statPeerImported)
			}
			for _, vm := range a.vms {
				if err := vm.Err(); err != nil {
					t.Errorf("VM failed: %v", err)
				}
			}
		})
	}
}

// TestPeerIsSelf: a peer list that names the gateway itself (as one list
// for every gateway does) is noticed when its own journal comes back; the
// link is not asked again, nothing is imported, and its work never counts
// twice.
func TestPeerIsSelf(t *testing.T) {
	a := newTestFleet(t, 1, 2, "")
	// The cluster cannot call back into the host making the call, so it
	// replays what the gateway answered when asked directly.
	var own []byte
	asks := 0
	a.h.AddCluster("peer-a", hostsim.ClusterFunc(func(*hostsim.CallRequest) hostsim.CallReply {
		asks++
		if own == nil {
			return hostsim.CallReply{Status: 503}
		}
		return hostsim.CallReply{Status: 200, Body: own}
	}))
	a.configure(a.config(peerConfig("a")+`,"status_path":"/status"`, nil))
	a.advance(200 * time.Millisecond)
	// Nothing routed yet, so no journal: answering creates one, whose
	// epoch identifies the gateway.
	lr, _ := askGateway(t, a, 0, [][2]string{{":method", "GET"}, {":path", testPeerPath}, {":authority", "a"}, {HeaderPeerToken, testPeerToken}})
	if lr == nil || lr.Status != 200 {
		t.Fatalf("asking the gateway directly: %+v, want a 200 answer", lr)
	}
	own = append([]byte(nil), lr.Body...)
	a.advance(200 * time.Millisecond)
	a.route(0, strings.Repeat("a prompt long enough to fill a few prefix blocks. ", 20))
	asked := asks
	a.advance(500 * time.Millisecond)
	if asks != asked {
		t.Errorf("the link to itself was asked %d more times after it was recognised, want 0", asks-asked)
	}
	if n := a.metric(statPeerImported); n != 0 {
		t.Errorf("%s = %d with the gateway as its own peer, want 0", statPeerImported, n)
	}
	if logsWith(a.h, "is this gateway") == 0 {
		t.Error("no log line that the peer list names this gateway")
	}
	st, _ := askGateway(t, a, 0, [][2]string{{":method", "GET"}, {":path", "/status"}, {":authority", "a"}})
	if st == nil || !strings.Contains(string(st.Body), `"name":"a","self":true`) {
		t.Errorf("status = %+v, want the link to a marked self", st)
	}
}
