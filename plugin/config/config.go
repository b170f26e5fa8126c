// Package config parses gpuroute's plugin configuration: a pure function from
// the JSON bytes Envoy hands to proxy_on_configure to a validated Config.
//
//	cfg, err := config.Parse([]byte(`{"replicas":[{"name":"vllm-0","address":"10.0.0.1:8000"}]}`))
//	if err != nil { /* refuse the configuration: log err, return false */ }
//	_ = cfg.Replicas[0].AddressText // "10.0.0.1:8000"
//
// It reads JSON with plugin/jsonx rather than encoding/json (reflect) or
// github.com/buger/jsonparser (imports fmt, hence os), keeping the wasm module
// free of both (docs/abi.md "proxy-wasm ABI v0.2.1"). Unknown keys, duplicate
// keys and bad values are errors that quote the offending input, so a typo
// never silently falls back to a default. New keys are added in the key
// switches of parseTop and parseReplica, with a row in config_test.go.
package config

import (
	"errors"
	"net/netip"
	"strconv"
	"unicode/utf8"

	"github.com/gpuroute/gpuroute/plugin/jsonx"
	"github.com/gpuroute/gpuroute/plugin/metrics"
	"github.com/gpuroute/gpuroute/scoring"
	"github.com/gpuroute/gpuroute/scoring/prefix"
)

// Configuration keys (wire names).
const (
	KeyReplicas         = "replicas"
	KeyTickMillis       = "tick_ms"
	KeyName             = "name"
	KeyAddress          = "address"
	KeyMetricsCluster   = "metrics_cluster"
	KeyMetricsAddress   = "metrics_address"
	KeyEngine           = "engine"
	KeyHardware         = "hardware"
	KeyState            = "state"
	KeyDrainDeadlineMs  = "drain_deadline_ms"
	KeyMetricsPath      = "metrics_path"
	KeyAdapterSlots     = "adapter_slots"
	KeyAdapterHostSlots = "adapter_host_slots"
	KeyKVCapacity       = "kv_capacity_tokens"

	KeyAdapters           = "adapters"
	KeyBlockChars         = "block_chars"
	KeyMaxBodyBytes       = "max_body_bytes"
	KeyScrapeTimeoutMs    = "scrape_timeout_ms"
	KeyLeaseMs            = "lease_ms"
	KeyUnhealthyAfter     = "unhealthy_after_failures"
	KeyDecisionHeader     = "decision_header"
	KeyStatusPath         = "status_path"
	KeyMaxWaitMs          = "max_wait_ms"
	KeyFallbacks          = "fallbacks"
	KeyStaleAfterMs       = "stale_after_ms"
	KeyStalePenaltyMs     = "stale_penalty_ms"
	KeyAdapterMemoryMs    = "adapter_memory_ms"
	KeyAdapterHostMemMs   = "adapter_host_memory_ms"
	KeyAdapterTolerance   = "adapter_tolerance_ms"
	KeyTieEpsilonMs       = "tie_epsilon_ms"
	KeyPrefillChunkTokens = "prefill_chunk_tokens"
	KeyPassiveFailures    = "passive_failures"
	KeyPassiveBackoffMs   = "passive_backoff_ms"
	KeyRemovedDrainMs     = "removed_drain_ms"
	KeyRole               = "role"
	KeyLearnKVCapacity    = "learn_kv_capacity"
	KeyRecordAnswers      = "record_answers"
	KeySessionHeader      = "session_header"
)

// Roles (the values of "role").
const (
	// RoleWorker routes requests and, holding the scrape lease, scrapes.
	RoleWorker = "worker"
	// RoleScraper only scrapes and shares what the workers need: the
	// configuration of an Envoy bootstrap service (envoy.bootstrap.wasm,
	// singleton: true, the filter's vm_id), which runs on the main thread.
	// It takes the scrape lease from any worker and keeps it while it
	// lives, so the workers' threads never scrape; a worker takes over
	// when its lease lapses.
	RoleScraper = "scraper"
)

// Bounds and defaults.
const (
	// MaxReplicas bounds the replica list: the table is copied into every worker
	// VM and scanned per request.
	MaxReplicas = 4096
	// DefaultTickMillis is the tick period when tick_ms is absent.
	DefaultTickMillis = 1000
	// MaxTickMillis is one hour; a longer period means stale metrics.
	MaxTickMillis = 3_600_000
	// maxQuoted bounds how much of a bad value an error message repeats.
	maxQuoted = 80

	// DefaultMaxBodyBytes is how much of a request body the plugin buffers
	// before routing on what it read; MaxBodyBytes bounds it below Envoy's
	// default per-connection buffer limit (1 MiB) so buffering never turns
	// into a 413.
	DefaultMaxBodyBytes = 256 << 10
	MaxBodyBytes        = 1 << 20
	// DefaultScrapeTimeoutMillis bounds one metrics call.
	DefaultScrapeTimeoutMillis = 1000
	// DefaultUnhealthyAfter is how many consecutive failed scrapes rule a
	// replica out (one failure only ages its figures).
	DefaultUnhealthyAfter = 3
	// MaxAdapters bounds the adapter map (it is copied into every VM).
	MaxAdapters = 4096
	// MaxFallbacks bounds the override_host fallback list.
	MaxFallbacks = 8
	// DefaultMetricsPath is where vLLM, SGLang and TGI serve Prometheus text.
	DefaultMetricsPath = "/metrics"
	// MaxNameBytes bounds a replica's name and metrics cluster: both are
	// DNS-like names in practice (a Kubernetes pod or Envoy cluster name),
	// and a DNS name is at most 253 bytes (RFC 1035 §2.3.4). Both are
	// copied into every worker VM, logs and the status endpoint.
	MaxNameBytes = 253
	// MaxPathBytes bounds metrics_path, sent on every scrape.
	MaxPathBytes = 1024
	// MaxConfigBytes bounds the whole configuration: 4096 replicas of a
	// few hundred bytes each fit, and a larger document is a generator bug
	// that would be parsed and copied into every worker VM.
	MaxConfigBytes = 4 << 20
	// DefaultPassiveFailures is how many consecutive failed routed requests
	// (Envoy could not reach the replica) eject it; 0 disables passive
	// health checking.
	DefaultPassiveFailures = 3
	// DefaultPassiveBackoffMillis is the first ejection's length; each
	// further ejection without a success in between doubles it, up to
	// MaxPassiveBackoffMillis (Envoy's outlier detection also lengthens
	// repeated ejections, base_ejection_time × ejection count).
	DefaultPassiveBackoffMillis = 2000
	MaxPassiveBackoffMillis     = 30_000
	// DefaultRemovedDrainMillis is how long the streams on a replica that
	// a configuration change removed may go on before the plugin resets
	// them: longer than Kubernetes' default termination grace period (30 s),
	// so that the router does not cut what the pod would still finish; a
	// pod that ends sooner ends its streams itself.
	DefaultRemovedDrainMillis = 60_000
	MaxRemovedDrainMillis     = 3_600_000
)

// State is a replica's admission state.
type State uint8

// Replica states. Draining and drained replicas get no new requests; in-flight
// ones on a draining replica continue until its deadline (docs/design.md
// "Health and drains").
const (
	StateActive State = iota
	StateDraining
	StateDrained
)

// Wire names of the states.
const (
	StateNameActive   = "active"
	StateNameDraining = "draining"
	StateNameDrained  = "drained"
)

// String returns the wire name.
func (s State) String() string {
	switch s {
	case StateActive:
		return StateNameActive
	case StateDraining:
		return StateNameDraining
	case StateDrained:
		return StateNameDrained
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// Replica is one model-server endpoint.
type Replica struct {
	// Name is unique within the configuration.
	Name string
	// Address is where Envoy's ORIGINAL_DST cluster sends the request.
	Address netip.AddrPort
	// AddressText is Address in canonical form, precomputed because it is the
	// x-gateway-destination-endpoint value written on every request.
	AddressText string
	// MetricsCluster is the Envoy cluster that serves the replica's /metrics
	// (optional: without it the replica is routed on the router's own
	// accounting of what it sent).
	MetricsCluster string
	// MetricsAddress, when valid, is the ip:port the scrape reaches through
	// MetricsCluster, an ORIGINAL_DST cluster shared by every replica that
	// reads the destination from the call's x-envoy-original-dst-host
	// header: one cluster for a fleet that changes, instead of one per
	// replica. MetricsAddressText is its canonical form, the header value.
	MetricsAddress     netip.AddrPort
	MetricsAddressText string
	// MetricsPath is the metrics endpoint's path (default "/metrics";
	// trtllm-serve uses "/prometheus/metrics").
	MetricsPath string
	// Engine selects the metric names; default vLLM.
	Engine metrics.Engine
	// MetricNames are the engine's default metric names with the top-level
	// metric_names overrides applied, then the replica's own.
	MetricNames metrics.Names
	// Hardware names the GPU class (scoring.HardwareNames; default
	// "h100"), ModelProfile the model shape that prices the replica (a
	// built-in scoring.ModelShapeNames one or one of the configuration's
	// ModelProfiles; default scoring.ReferenceModel) and TensorParallel the
	// GPUs one replica spans (default 1); Profile is the cost profile the
	// three make (scoring.NewProfile).
	Hardware       string
	ModelProfile   string
	TensorParallel int
	Profile        scoring.Hardware
	// Models lists the base models the replica serves (OpenAI "model"
	// values; an adapter's requests go where its base model is served);
	// nil: every model. Config.ServedBy has each model's replicas.
	Models []string
	// AdapterSlots is the replica's LoRA slot count (vLLM max_loras); -1
	// (default) takes it from metrics, 0 means the replica serves no adapters.
	AdapterSlots int
	// AdapterHostSlots is the replica's host-memory LoRA cache size (vLLM
	// --max-cpu-loras); 0 (default) means AdapterSlots, vLLM's default.
	AdapterHostSlots int
	// KVCapacityTokens overrides the KV cache size the metrics report (0: use
	// metrics, then the hardware profile).
	KVCapacityTokens int
	// State is the admission state; default StateActive.
	State State
	// DrainDeadlineUnixMillis is when a draining replica's remaining requests
	// are ended, as Unix time in milliseconds (absolute, so every worker VM
	// agrees); 0 means no deadline. Only allowed with state "draining".
	DrainDeadlineUnixMillis int64
}

// Config is the validated plugin configuration. The zero value is not valid;
// obtain one from Parse.
type Config struct {
	Replicas   []Replica
	TickMillis uint32
	// Adapters maps an OpenAI "model" value that names a LoRA adapter to the
	// adapter (configured as "adapters": {"name": "base model"}); any other
	// model value is a base model.
	Adapters map[string]Adapter
	// ModelProfiles are the configuration's own model shapes, by name
	// ("model_profiles"), for replicas' model_profile.
	ModelProfiles map[string]scoring.ModelShape
	// BlockChars is the prefix block size in characters (default 64: vLLM's
	// 16-token block at about 4 characters per token).
	BlockChars int
	// MaxBodyBytes is how much of a request body is buffered before routing.
	MaxBodyBytes int
	// ScrapeTimeoutMillis bounds one metrics call; LeaseMillis is the scrape
	// lease's lifetime (default 3 ticks, at least 1 s).
	ScrapeTimeoutMillis uint32
	LeaseMillis         uint32
	// UnhealthyAfterFailures consecutive failed scrapes rule a replica out.
	UnhealthyAfterFailures int
	// DecisionHeader adds x-gpuroute-decision to responses (off by default).
	DecisionHeader bool
	// LearnKVCapacity bounds each replica's prefix index by the cache size
	// the engine feedback learns instead of the configured or scraped KV
	// capacity (off by default: the eviction corrections run either way).
	LearnKVCapacity bool
	// RecordAnswers hashes each streamed answer after its prompt and
	// records it for the replica that answered, so a conversation's next
	// turn finds its previous answer cached there (on by default; the
	// trade-off it makes across loads: docs/design.md "Engine feedback").
	RecordAnswers bool
	// SessionHeader, when set, names the request header whose value keys
	// a session: the replica that served the session's last request is
	// treated as holding its prefix, a soft affinity the decision can
	// overrule ("": off).
	SessionHeader string
	// StatusPath, when set, is answered locally with the fleet state as JSON
	// (off by default).
	StatusPath string
	// MaxWaitSec sheds load: when even the best replica's queue W exceeds it,
	// the request gets a 429 (0: never).
	MaxWaitSec float64
	// Fallbacks is how many next-best replicas follow the chosen one in the
	// destination header, for Envoy's override_host policy (0: one value,
	// which ORIGINAL_DST requires).
	Fallbacks int
	// PassiveFailures consecutive routed requests that Envoy could not
	// deliver to a replica eject it for PassiveBackoffMillis (doubling on
	// each further ejection up to MaxPassiveBackoffMillis); 0 disables.
	PassiveFailures      int
	PassiveBackoffMillis uint32
	// RemovedDrainMillis is how long a replica that a configuration change
	// removed, or gave a new address, drains: its streams go on, closed to
	// new work, and are reset when it ends (0: at the next tick).
	RemovedDrainMillis uint32
	// PeerExchange shares placements and in-flight work with other
	// gateway instances (off by default).
	PeerExchange PeerExchange
	// Scraper is role "scraper" (RoleScraper); false is RoleWorker.
	Scraper bool
	// Flow configures requests held at the router (on by default).
	Flow FlowControl
	// Params are the decision's tunables.
	Params scoring.Params

	// servedBy maps each model a replica lists to its mask (ServedBy), nil
	// for a model every replica serves; unlisted is the mask of the other
	// models. servedBy is nil when no replica lists models.
	servedBy map[string][]bool
	unlisted []bool
}

// Adapter is a LoRA adapter served under its own OpenAI "model" name.
type Adapter struct {
	Name, Base string
}

// LookupAdapter returns the adapter named by an OpenAI "model" value, if
// it is one. It does not allocate (the compiler elides string(model) in a
// map index).
func (c *Config) LookupAdapter(model []byte) (Adapter, bool) {
	a, ok := c.Adapters[string(model)]
	return a, ok
}

// Parse parses and validates a configuration. It never panics; on error the
// message starts with "config: " and quotes the offending key or value.
func Parse(data []byte) (*Config, error) {
	if len(data) > MaxConfigBytes {
		return nil, errors.New("config: configuration is " + strconv.Itoa(len(data)) + " bytes, more than the limit of " +
			strconv.Itoa(MaxConfigBytes) + ": " + quote(data))
	}
	var r jsonx.Reader
	r.Reset(data)
	if r.Kind() != jsonx.Object {
		return nil, errors.New("config: want a JSON object, got " + quote(data))
	}
	cfg := &Config{
		TickMillis:             DefaultTickMillis,
		BlockChars:             prefix.DefaultBlockChars,
		MaxBodyBytes:           DefaultMaxBodyBytes,
		ScrapeTimeoutMillis:    DefaultScrapeTimeoutMillis,
		UnhealthyAfterFailures: DefaultUnhealthyAfter,
		RemovedDrainMillis:     DefaultRemovedDrainMillis,
		PassiveFailures:        DefaultPassiveFailures,
		PassiveBackoffMillis:   DefaultPassiveBackoffMillis,
		Params:                 scoring.DefaultParams(),
		Flow:                   defaultFlowControl(),
		RecordAnswers:          true,
	}
	var seen seenKeys
	var topNames nameOverrides   // metric_names
	var repNames []nameOverrides // replicas[i].metric_names
	r.Object()
	for r.Member() {
		key := string(r.Key())
		if err := seen.add("", key); err != nil {
			return nil, err
		}
		var err error
		switch key {
		case KeyReplicas:
			repNames, err = parseReplicas(cfg, &r)
		case KeyMetricNames:
			topNames, err = parseMetricNames(KeyMetricNames, &r)
		case KeyTickMillis:
			var v int64
			if v, err = intValue(KeyTickMillis, r.Value()); err == nil && (v < 1 || v > MaxTickMillis) {
				err = errors.New("config: " + KeyTickMillis + " must be in [1, " + strconv.Itoa(MaxTickMillis) + "], got " + strconv.FormatInt(v, 10))
			}
			if err == nil {
				cfg.TickMillis = uint32(v)
			}
		default:
			err = parseRouting(cfg, key, &r)
		}
		if err != nil {
			if jerr := malformed(&r); jerr != nil {
				return nil, jerr // a value that failed to read is a syntax error
			}
			return nil, err
		}
	}
	if err := malformed(&r); err != nil {
		return nil, err
	}
	for _, c := range data[r.Offset():] {
		if !isSpace(c) {
			return nil, errors.New("config: trailing data after the object: " + quote(data[r.Offset():]))
		}
	}
	if len(cfg.Replicas) == 0 {
		return nil, errors.New("config: " + KeyReplicas + " must list at least one replica")
	}
	// Names are settled only now: a replica's engine may follow its
	// metric_names, and the top-level metric_names may follow the replicas.
	for i := range cfg.Replicas {
		rep := &cfg.Replicas[i]
		rep.MetricNames = metrics.DefaultNames(rep.Engine)
		topNames.apply(&rep.MetricNames)
		repNames[i].apply(&rep.MetricNames)
		if err := rep.MetricNames.Validate(); err != nil {
			return nil, errors.New("config: " + field(i, KeyMetricNames) + ": " + err.Error())
		}
	}
	// Profiles and model masks too: a replica's model_profile may name
	// one of model_profiles, and the adapters may follow the replicas.
	if err := settleModels(cfg); err != nil {
		return nil, err
	}
	if cfg.LeaseMillis == 0 {
		cfg.LeaseMillis = max(3*cfg.TickMillis, 1000)
	}
	if err := validatePeers(cfg); err != nil {
		return nil, err
	}
	if err := cfg.Params.Validate(); err != nil {
		return nil, errors.New("config: " + err.Error())
	}
	// A scrape that may take longer than the staleness bound turns every
	// replica behind a slow endpoint stale before its answer can arrive,
	// and holds that replica's next call back as long (scrape.go).
	if stale := cfg.Params.StaleAfter.Milliseconds(); int64(cfg.ScrapeTimeoutMillis) >= stale {
		return nil, errors.New("config: " + KeyScrapeTimeoutMs + " must be less than " + KeyStaleAfterMs + ", got " +
			KeyScrapeTimeoutMs + " " + strconv.FormatUint(uint64(cfg.ScrapeTimeoutMillis), 10) + " and " +
			KeyStaleAfterMs + " " + strconv.FormatInt(stale, 10))
	}
	return cfg, nil
}

// malformed returns the reader's syntax error in the package's wording.
func malformed(r *jsonx.Reader) error {
	if err := r.Err(); err != nil {
		e := err.(*jsonx.Error)
		return errors.New("config: malformed JSON at offset " + strconv.Itoa(e.Offset) + ": " + e.Detail())
	}
	return nil
}

// seenKeys rejects a key given twice in one object: JSON leaves the meaning
// open and a config generator's merge bug should not pick a winner silently.
type seenKeys []string

func (s *seenKeys) add(where, key string) error {
	for _, k := range *s {
		if k == key {
			if where != "" {
				where += ": "
			}
			return errors.New("config: " + where + "duplicate key " + quoteString(key))
		}
	}
	*s = append(*s, key)
	return nil
}

// maxLen refuses a string longer than limit bytes, quoting its beginning.
func maxLen(name, s string, limit int) error {
	if len(s) <= limit {
		return nil
	}
	return errors.New("config: " + name + " " + quoteString(s) + " is " + strconv.Itoa(len(s)) +
		" bytes, more than the limit of " + strconv.Itoa(limit))
}

func field(i int, key string) string {
	return KeyReplicas + "[" + strconv.Itoa(i) + "]." + key
}

// shown renders a value for an error message: strings decoded, others raw.
func shown(v jsonx.Value) string {
	if v.Kind == jsonx.String {
		return quote(jsonx.AppendUnescape(nil, v.Raw))
	}
	return quote(v.Raw)
}

// boolValue decodes true or false.
func boolValue(name string, v jsonx.Value) (bool, error) {
	if v.Kind != jsonx.Bool {
		return false, errors.New("config: " + name + " must be true or false, got " + v.Kind.String() + " " + shown(v))
	}
	return v.Raw[0] == 't', nil
}

// stringValue decodes a string value. Replica names, addresses and the like
// must be text, so invalid UTF-8 (which JSON readers pass through) is refused.
func stringValue(name string, v jsonx.Value) (string, error) {
	if v.Kind != jsonx.String {
		return "", errors.New("config: " + name + " must be a string, got " + v.Kind.String() + " " + shown(v))
	}
	s := v.Raw
	if v.Escaped {
		s = jsonx.AppendUnescape(nil, v.Raw)
	}
	if !utf8.Valid(s) {
		return "", errors.New("config: " + name + " must be valid UTF-8, got " + quote(s))
	}
	return string(s), nil
}

func intValue(name string, v jsonx.Value) (int64, error) {
	if v.Kind != jsonx.Number {
		return 0, errors.New("config: " + name + " must be a number, got " + v.Kind.String() + " " + shown(v))
	}
	n, ok := jsonx.ParseInt(v.Raw)
	if !ok {
		return 0, errors.New("config: " + name + " must be an integer, got " + quote(v.Raw))
	}
	return n, nil
}

func quote(b []byte) string { return quoteString(string(b)) }

// quoteString quotes s for an error message, truncated to maxQuoted bytes.
func quoteString(s string) string {
	if len(s) > maxQuoted {
		return strconv.Quote(s[:maxQuoted]) + "..."
	}
	return strconv.Quote(s)
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
