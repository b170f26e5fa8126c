package fleetsim

import (
	"testing"
	"time"
)

// holdPolicy holds every request and releases the oldest one whenever the
// fleet is idle, on its own clock (Advance) or on a completion; with
// twice it releases each request a second time, with never not at all.
type holdPolicy struct {
	f            *Fleet
	held         []*Request
	twice, never bool
	rejectEvery  int
	releasedAt   map[int]time.Duration
}

func (p *holdPolicy) Name() string { return "hold" }
func (p *holdPolicy) Start(f *Fleet) error {
	p.f, p.releasedAt = f, map[int]time.Duration{}
	return nil
}
func (p *holdPolicy) Pick(now time.Duration, req *Request, _ int) Decision {
	p.held = append(p.held, req)
	return Hold()
}
func (p *holdPolicy) Advance(now time.Duration) { p.release(now) }
func (p *holdPolicy) Observe(ev *Event) {
	if ev.Kind == Completed {
		p.release(ev.At)
	}
}

func (p *holdPolicy) release(now time.Duration) {
	if p.never || len(p.held) == 0 || p.f.Replica(0).Running()+p.f.Replica(0).Waiting() > 0 {
		return
	}
	r := p.held[0]
	if _, done := p.releasedAt[r.ID]; done {
		return // already handed over, not yet running
	}
	p.held = p.held[1:]
	p.releasedAt[r.ID] = now
	d := Route(0)
	if p.rejectEvery > 0 && r.ID%p.rejectEvery == 0 {
		d = Reject(429)
	}
	p.f.Release(r, d)
	if p.twice {
		p.f.Release(r, d)
	}
}

func holdWorkload(n int) *Workload {
	w := &Workload{Name: "hold"}
	for i := range n {
		r := NewRequest(i, time.Duration(i)*10*time.Millisecond, DefaultModel, "", []Segment{{Seed: uint64(i + 1), Tokens: 64}}, 4, 4)
		r.Class = []string{"even", "odd"}[i%2]
		w.Requests = append(w.Requests, r)
	}
	return w.finish()
}

// TestHeldRequests: a policy that holds requests and releases them one at
// a time gets them served in release order, each after its release, with
// the time held counted and nothing lost; a 429 release answers the request.
func TestHeldRequests(t *testing.T) {
	p := &holdPolicy{rejectEvery: 5}
	res, err := Run(Config{Replicas: UniformReplicas(1, "h100")}, holdWorkload(20), p)
	if err != nil {
		t.Fatal(err)
	}
	s := res.Summary
	if s.Lost != 0 || s.Completed != 16 || s.Shed != 4 || s.Failed != 4 {
		t.Fatalf("completed %d, failed %d, shed %d, lost %d; want 16, 4, 4, 0", s.Completed, s.Failed, s.Shed, s.Lost)
	}
	if !(s.HeldMeanSec > 0) {
		t.Fatalf("HeldMeanSec = %v, want > 0: every request was held", s.HeldMeanSec)
	}
	// Requests 0, 5, 10 and 15 are shed: two of each class.
	if len(s.Classes) != 2 || s.Classes["even"].Shed != 2 || s.Classes["odd"].Shed != 2 || s.Classes["odd"].Completed != 8 {
		t.Fatalf("classes even %+v odd %+v, want 2 shed and 8 completed each", *s.Classes["even"], *s.Classes["odd"])
	}
}

// TestLostRequests: a request released twice, or never, is lost.
func TestLostRequests(t *testing.T) {
	for _, tc := range []struct {
		name         string
		twice, never bool
		wantLost     int
	}{
		{name: "released twice", twice: true, wantLost: 6},
		{name: "never released", never: true, wantLost: 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &holdPolicy{twice: tc.twice, never: tc.never}
			res, err := Run(Config{Replicas: UniformReplicas(1, "h100")}, holdWorkload(6), p)
			if err != nil {
				t.Fatal(err)
			}
			if res.Summary.Lost != tc.wantLost {
				t.Fatalf("Lost = %d, want %d", res.Summary.Lost, tc.wantLost)
			}
		})
	}
}

// TestPoolClasses: pooling runs pools each class's figures too.
func TestPoolClasses(t *testing.T) {
	var runs []*Result
	for range 2 {
		res, err := Run(Config{Replicas: UniformReplicas(1, "h100")}, holdWorkload(10), &holdPolicy{rejectEvery: 3})
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, res)
	}
	p := Pool(runs).Summary
	one := runs[0].Summary
	if p.Classes["even"].Completed != 2*one.Classes["even"].Completed || p.Classes["odd"].Shed != 2*one.Classes["odd"].Shed || p.Shed != 2*one.Shed {
		t.Fatalf("pooled classes %+v / %+v, want twice one run's %+v / %+v", p.Classes["even"], p.Classes["odd"], one.Classes["even"], one.Classes["odd"])
	}
}
