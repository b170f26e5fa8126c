package fleetsim

import (
	"errors"
	"sort"
	"strings"
	"sync"
	"time"
)

// Policy is a routing policy under test: it picks a replica for each request
// and hears what happens to it. The runner calls it from one goroutine, in
// virtual-time order: Start once, then for every event time t (arrivals,
// engine steps, drains) Advance(t) first, then any Pick and Observe calls at t.
type Policy interface {
	// Name returns the policy's registry name.
	Name() string
	// Start binds the policy to a fresh fleet before the first request.
	Start(f *Fleet) error
	// Advance tells the policy that virtual time is now; an external policy
	// (the wasm plugin in hostsim) runs its ticks and scrapes up to now.
	Advance(now time.Duration)
	// Pick chooses a replica for req at now (req.Arrival, or later for a
	// re-dispatch after a migration, crash or refusal; attempt counts from
	// 0), rejects it, or holds it at the router (Hold): a held request is
	// dispatched or answered later through Fleet.Release. Only the oracle
	// may look at the true output length.
	Pick(now time.Duration, req *Request, attempt int) Decision
	// Observe receives the request's life events (Dispatched, FirstToken,
	// Tokens, Completed, Cancelled). ev is valid only during the call.
	Observe(ev *Event)
}

// Decision is a policy's answer: a replica index, a rejection with an
// HTTP status (503: no replica can serve it; 429: shed; the client got an
// answer), or Held: the router keeps the request and decides later.
type Decision struct {
	Replica int
	Status  int
	Held    bool
}

// Route returns a Decision for replica i.
func Route(i int) Decision { return Decision{Replica: i} }

// Reject returns a rejecting Decision with status (503 or 429).
func Reject(status int) Decision { return Decision{Replica: -1, Status: status} }

// Hold returns the Decision that keeps the request at the router: the
// policy later calls Fleet.Release for it exactly once, with a Route or a
// Reject, at the virtual time the router decides.
func Hold() Decision { return Decision{Replica: -1, Held: true} }

// EventKind says what happened to a request.
type EventKind uint8

// Request life events, in order. A request may go through Dispatched ..
// Cancelled several times (re-dispatches) before Completed.
const (
	// Dispatched: the replica accepted the request.
	Dispatched EventKind = iota
	// FirstToken: the first output token reached the client at Event.At;
	// Event.CachedTokens prompt tokens were served from the prefix cache.
	FirstToken
	// Tokens: Event.Tokens more output tokens streamed (reported every
	// Config.StreamEvery tokens).
	Tokens
	// Completed: the request finished with Event.Tokens output tokens.
	Completed
	// Cancelled: the request ended on the replica without completing, for
	// Event.Reason; the runner re-dispatches it (a new Pick) unless the
	// reason is final.
	Cancelled
)

var eventKindNames = [...]string{"dispatched", "first_token", "tokens", "completed", "cancelled"}

// String returns the kind's lowercase name.
func (k EventKind) String() string {
	if int(k) < len(eventKindNames) {
		return eventKindNames[k]
	}
	return "unknown"
}

// CancelReason says why a request left a replica unfinished.
type CancelReason uint8

// Cancel reasons.
const (
	// Migrated: the replica's drain deadline passed; re-dispatched.
	Migrated CancelReason = iota + 1
	// Failed: the replica crashed; re-dispatched.
	Failed
	// Refused: the replica was closed (draining or down) when the request
	// reached it; re-dispatched. The request never ran there.
	Refused
)

// Event is one request life event delivered to Policy.Observe.
type Event struct {
	Kind         EventKind
	At           time.Duration
	Req          *Request
	Replica      int
	Attempt      int
	Tokens       int // Tokens: newly streamed; Completed: total output
	CachedTokens int // FirstToken: prompt tokens served from the prefix cache
	Reason       CancelReason
}

// PolicyOptions configure policy construction.
type PolicyOptions struct {
	// Seed drives the policy's own randomness (tie breaks).
	Seed int64
	// WasmPath is the gpuroute plugin module (for the wasm policy).
	WasmPath string
	// Workers and Gateways are the Envoy worker threads per gateway and the
	// gateway count the wasm policy emulates.
	Workers, Gateways int
	// IsolatedGateways turns the plugin's gateway peer exchange off, so
	// gateways share nothing (the configuration before peers existed).
	IsolatedGateways bool
}

// Factory builds a policy.
type Factory func(o PolicyOptions) (Policy, error)

var (
	registryMu sync.Mutex
	registry   = map[string]Factory{}
)

// Register adds a policy factory under name (the wasm policy registers
// itself as "gpuroute" with one call). It replaces an existing entry.
func Register(name string, f Factory) {
	registryMu.Lock()
	defer registryMu.Unlock()
	registry[name] = f
}

// Policies returns the registered policy names, sorted.
func Policies() []string {
	registryMu.Lock()
	defer registryMu.Unlock()
	out := make([]string, 0, len(registry))
	for k := range registry {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ErrUnknownPolicy is returned (wrapped) by NewPolicy for a name nobody
// registered.
var ErrUnknownPolicy = errors.New("fleetsim: unknown policy")

// NewPolicy builds the registered policy name.
func NewPolicy(name string, o PolicyOptions) (Policy, error) {
	registryMu.Lock()
	f, ok := registry[name]
	registryMu.Unlock()
	if !ok {
		return nil, errors.Join(ErrUnknownPolicy, errors.New("fleetsim: policy "+quote(name)+
			" is not registered (have "+strings.Join(Policies(), ", ")+")"))
	}
	return f(o)
}

// BaselineNames lists the built-in baselines in report order.
var BaselineNames = []string{"round-robin", "least-request", "least-tokens", "always-warm",
	"llm-d", "llm-d-322", "sglang", "vllm-prefixaware", "dynamo", "oracle"}

func init() {
	Register("round-robin", func(o PolicyOptions) (Policy, error) { return newRoundRobin(o), nil })
	Register("least-request", func(o PolicyOptions) (Policy, error) { return &leastRequest{}, nil })
	Register("least-tokens", func(o PolicyOptions) (Policy, error) { return &leastTokens{}, nil })
	Register("always-warm", func(o PolicyOptions) (Policy, error) { return newAlwaysWarm(o), nil })
	Register("llm-d", func(o PolicyOptions) (Policy, error) { return newLLMDSticky(o), nil })
	Register("llm-d-322", func(o PolicyOptions) (Policy, error) { return newLLMD322(o), nil })
	Register("sglang", func(o PolicyOptions) (Policy, error) { return newSGLang(o), nil })
	Register("vllm-prefixaware", func(o PolicyOptions) (Policy, error) { return newVLLMPrefixAware(o), nil })
	Register("dynamo", func(o PolicyOptions) (Policy, error) { return newDynamo(o), nil })
	Register("oracle", func(o PolicyOptions) (Policy, error) { return &oracle{}, nil })
}

func quote(s string) string { return `"` + s + `"` }
