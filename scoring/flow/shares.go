package flow

// Shares counts each tenant's requests in flight (sent to a replica and not
// finished), so that flow control holds a tenant above its fair share of
// the fleet sooner than one below it. The engines' queues are shared and
// first come, first served: the fair order among held requests helps only
// if the tenant sending most cannot keep those queues full by itself
// (TestShareBound). Standard library only, allocation-free after NewShares.
type Shares struct {
	keys   []uint64
	counts []int32
	active int // tenants with requests in flight
	total  int // requests in flight
}

// DefaultShareTenants is the tenants a router's Shares tracks at once.
const DefaultShareTenants = 64

// NewShares tracks up to max tenants at once; requests of further tenants
// are not counted, and are never held sooner. A nil *Shares counts nothing
// and keeps every hold wait: a router without tenants needs none.
func NewShares(max int) *Shares {
	return &Shares{keys: make([]uint64, max), counts: make([]int32, max)}
}

// slot returns tenant's index, or the first free one (-1: full).
func (s *Shares) slot(tenant uint64) (int, bool) {
	free := -1
	for i, k := range s.keys {
		if s.counts[i] > 0 && k == tenant {
			return i, true
		}
		if free < 0 && s.counts[i] == 0 {
			free = i
		}
	}
	return free, false
}

// Add counts delta requests (+1 sent, −1 finished) for tenant.
func (s *Shares) Add(tenant uint64, delta int) {
	if s == nil {
		return
	}
	i, found := s.slot(tenant)
	if i < 0 || !found && delta <= 0 {
		return
	}
	was := s.counts[i]
	s.keys[i] = tenant
	s.counts[i] = max(was+int32(delta), 0)
	s.total += int(s.counts[i] - was)
	switch {
	case was == 0 && s.counts[i] > 0:
		s.active++
	case was > 0 && s.counts[i] == 0:
		s.active--
	}
}

// Bound scales a band's hold wait for a request of tenant by the square of
// r, its fair share of the requests in flight with this one over its own
// count, when r is below 1: once for its part of the queue the engines
// hold now, once for its part of what arrives there while it waits (its
// rate is in the same ratio). A lone tenant, or one at or below its share,
// keeps holdSec; one sending ten times another's rate waits for a much
// shorter queue (the fairness workload: docs/simulator.md "Results").
func (s *Shares) Bound(tenant uint64, holdSec float64) float64 {
	if s == nil {
		return holdSec
	}
	mine, active := 1, s.active
	if i, found := s.slot(tenant); found {
		mine += int(s.counts[i])
	} else {
		active++
	}
	fair := float64(s.total+1) / float64(active)
	if fair < float64(mine) {
		r := fair / float64(mine)
		return holdSec * r * r
	}
	return holdSec
}
