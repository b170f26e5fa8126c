package fleetsim

import (
	"math/rand/v2"
	"time"
)

// Request classes of the flow-control workloads, and what their clients
// send in the router's priority and tenant headers.
const (
	ClassCritical  = "critical"
	ClassSheddable = "sheddable"
	ClassHeavy     = "heavy"
	ClassLight     = "light"
)

// flowShape is the request shape of the flow-control workloads: chat
// requests over a few system prompts that fit on every replica, so
// affinity matters little and the fleet's capacity decides.
type flowShape struct {
	systems, sysTokens, qTokens, outTokens int
}

var flowRequests = flowShape{systems: 8, sysTokens: 2000, qTokens: 500, outTokens: 300}

// flowCapacity is the request rate, per second, that 4 H100 replicas
// sustain for flowRequests: above it every router's queues grow without
// bound (TestFlowCapacity holds it within 15%).
const flowCapacity = 34

// priorityWorkload is a fleet at 130% of its capacity for 90 s, 30% of
// the load critical and 70% sheddable (the client's priority header says
// which): a router that holds work and serves bands in order keeps the
// critical class's time to first token as if the fleet were at 30%.
func priorityWorkload(o WorkloadOptions) *Workload {
	rng := rand.New(rand.NewPCG(uint64(o.Seed), 5))
	sys := flowRequests.systemPrompts(rng)
	w := &Workload{Name: "priority", Hardware: "h100:4",
		Source: "synthetic: 130% of capacity, 30% critical, 70% sheddable; 8 system prompts of 2,000 tokens, 500-token questions, 300 output tokens"}
	for _, at := range arrivals(rng, []Stage{{1.3 * flowCapacity, 90 * time.Second}}, o) {
		r := flowRequests.request(rng, sys, at)
		r.Class, r.Priority = ClassSheddable, ClassSheddable
		if rng.Float64() < 0.3 {
			r.Class, r.Priority = ClassCritical, ClassCritical
		}
		w.Requests = append(w.Requests, r)
	}
	return w
}

// fairnessWorkload is two tenants above the fleet's capacity together
// (120%), heavy sending ten times the rate of light, in one band: a router
// that shares capacity fairly between tenants serves light as if alone.
func fairnessWorkload(o WorkloadOptions) *Workload {
	rng := rand.New(rand.NewPCG(uint64(o.Seed), 6))
	sys := flowRequests.systemPrompts(rng)
	w := &Workload{Name: "fairness", Hardware: "h100:4",
		Source: "synthetic: tenants heavy and light at 10:1, 120% of capacity together; 8 system prompts of 2,000 tokens, 500-token questions, 300 output tokens"}
	for _, at := range arrivals(rng, []Stage{{1.2 * flowCapacity, 90 * time.Second}}, o) {
		r := flowRequests.request(rng, sys, at)
		r.Class, r.Tenant = ClassHeavy, ClassHeavy
		if rng.IntN(11) == 0 {
			r.Class, r.Tenant = ClassLight, ClassLight
		}
		w.Requests = append(w.Requests, r)
	}
	return w
}

func (s flowShape) request(rng *rand.Rand, sys []Segment, at time.Duration) *Request {
	g := rng.IntN(len(sys))
	return NewRequest(0, at, DefaultModel, "", []Segment{sys[g], seg(rng, s.qTokens)}, s.outTokens, s.outTokens)
}

func (s flowShape) systemPrompts(rng *rand.Rand) []Segment {
	sys := make([]Segment, s.systems)
	for i := range sys {
		sys[i] = seg(rng, s.sysTokens)
	}
	return sys
}
