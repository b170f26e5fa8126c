// Package config parses gpuroute's plugin configuration: a pure function from
// the JSON bytes Envoy hands to proxy_on_configure to a validated Config.
//
//	cfg, err := config.Parse([]byte(`{"replicas":[{"name":"vllm-0","address":"10.0.0.1:8000"}]}`))
//	if err != nil { /* refuse the configuration: log err, return false */ }
//	_ = cfg.Replicas[0].AddressText // "10.0.0.1:8000"
//
// It reads JSON with plugin/jsonx rather than encoding/json (reflect) or
// github.com/buger/jsonparser (imports fmt, hence os), keeping the wasm module
// free of both (ABI.md §1.5, STYLE.md 23). Unknown keys, duplicate
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
)

// Configuration keys (wire names).
const (
	KeyReplicas        = "replicas"
	KeyTickMillis      = "tick_ms"
	KeyName            = "name"
	KeyAddress         = "address"
	KeyMetricsCluster  = "metrics_cluster"
	KeyEngine          = "engine"
	KeyHardware        = "hardware"
	KeyState           = "state"
	KeyDrainDeadlineMs = "drain_deadline_ms"
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
)

// State is a replica's admission state.
type State uint8

// Replica states. Draining and drained replicas get no new requests; in-flight
// ones on a draining replica continue until its deadline (DESIGN.md §3).
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

// Engines the plugin knows how to scrape (DESIGN.md, data/metrics/).
const (
	EngineVLLM   = "vllm"
	EngineSGLang = "sglang"
	EngineTGI    = "tgi"
	EngineTriton = "triton"
)

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
	// (optional until scraping lands).
	MetricsCluster string
	// Engine is one of the Engine* names; default EngineVLLM.
	Engine string
	// Hardware names a hardware profile (e.g. "h100"); free-form here, checked
	// by the scoring integration.
	Hardware string
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
}

// Parse parses and validates a configuration. It never panics; on error the
// message starts with "config: " and quotes the offending key or value.
func Parse(data []byte) (*Config, error) {
	var r jsonx.Reader
	r.Reset(data)
	if r.Kind() != jsonx.Object {
		return nil, errors.New("config: want a JSON object, got " + quote(data))
	}
	cfg := &Config{TickMillis: DefaultTickMillis}
	var seen seenKeys
	r.Object()
	for r.Member() {
		key := string(r.Key())
		if err := seen.add("", key); err != nil {
			return nil, err
		}
		var err error
		switch key {
		case KeyReplicas:
			err = parseReplicas(cfg, &r)
		case KeyTickMillis:
			var v int64
			if v, err = intValue(KeyTickMillis, r.Value()); err == nil && (v < 1 || v > MaxTickMillis) {
				err = errors.New("config: " + KeyTickMillis + " must be in [1, " + strconv.Itoa(MaxTickMillis) + "], got " + strconv.FormatInt(v, 10))
			}
			if err == nil {
				cfg.TickMillis = uint32(v)
			}
		default:
			err = errors.New("config: unknown key " + quoteString(key))
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

func parseReplicas(cfg *Config, r *jsonx.Reader) error {
	if k := r.Kind(); k != jsonx.Array {
		return errors.New("config: " + KeyReplicas + " must be an array, got " + k.String())
	}
	cfg.Replicas = cfg.Replicas[:0]
	byName := map[string]int{}
	r.Array()
	for i := 0; r.Elem(); i++ {
		if i >= MaxReplicas {
			return errors.New("config: " + KeyReplicas + " has more than " + strconv.Itoa(MaxReplicas) + " entries")
		}
		rep, err := parseReplica(i, r)
		if err != nil {
			return err
		}
		if j, dup := byName[rep.Name]; dup {
			return errors.New("config: " + field(i, KeyName) + " " + quoteString(rep.Name) + " duplicates " + field(j, KeyName))
		}
		byName[rep.Name] = i
		cfg.Replicas = append(cfg.Replicas, rep)
	}
	return malformed(r)
}

func parseReplica(i int, r *jsonx.Reader) (Replica, error) {
	rep := Replica{Engine: EngineVLLM, State: StateActive}
	where := KeyReplicas + "[" + strconv.Itoa(i) + "]"
	if k := r.Kind(); k != jsonx.Object {
		if err := malformed(r); err != nil {
			return rep, err
		}
		r.Skip()
		if err := malformed(r); err != nil {
			return rep, err
		}
		return rep, errors.New("config: " + where + " must be an object, got " + k.String())
	}
	var seen seenKeys
	var stateText string
	r.Object()
	for r.Member() {
		key := string(r.Key())
		if err := seen.add(where, key); err != nil {
			return rep, err
		}
		switch key {
		case KeyName, KeyAddress, KeyMetricsCluster, KeyEngine, KeyHardware, KeyState:
			s, err := stringValue(field(i, key), r.Value())
			if err != nil {
				return rep, err
			}
			if key == KeyState {
				stateText = s
			}
			if err := setReplicaString(&rep, i, key, s); err != nil {
				return rep, err
			}
		case KeyDrainDeadlineMs:
			v, err := intValue(field(i, key), r.Value())
			if err != nil {
				return rep, err
			}
			if v <= 0 {
				return rep, errors.New("config: " + field(i, key) + " must be > 0, got " + strconv.FormatInt(v, 10))
			}
			rep.DrainDeadlineUnixMillis = v
		default:
			return rep, errors.New("config: " + where + ": unknown key " + quoteString(key))
		}
	}
	if err := malformed(r); err != nil {
		return rep, err
	}
	if rep.Name == "" {
		return rep, errors.New("config: " + field(i, KeyName) + " is required")
	}
	if !rep.Address.IsValid() {
		return rep, errors.New("config: " + field(i, KeyAddress) + " is required")
	}
	if rep.DrainDeadlineUnixMillis != 0 && rep.State != StateDraining {
		return rep, errors.New("config: " + field(i, KeyDrainDeadlineMs) + " is only allowed with state " +
			strconv.Quote(StateNameDraining) + ", got state " + strconv.Quote(stateText))
	}
	return rep, nil
}

func setReplicaString(r *Replica, i int, key, s string) error {
	switch key {
	case KeyName:
		if s == "" {
			return errors.New("config: " + field(i, key) + " must not be empty")
		}
		r.Name = s
	case KeyAddress:
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return errors.New("config: " + field(i, key) + " " + quoteString(s) + " is not ip:port")
		}
		if ap.Port() == 0 {
			return errors.New("config: " + field(i, key) + " " + quoteString(s) + " has port 0")
		}
		if ap.Addr().IsUnspecified() {
			return errors.New("config: " + field(i, key) + " " + quoteString(s) + " is an unspecified address")
		}
		r.Address = ap
		r.AddressText = ap.String()
	case KeyMetricsCluster:
		if s == "" {
			return errors.New("config: " + field(i, key) + " must not be empty")
		}
		r.MetricsCluster = s
	case KeyEngine:
		switch s {
		case EngineVLLM, EngineSGLang, EngineTGI, EngineTriton:
			r.Engine = s
		default:
			return errors.New("config: " + field(i, key) + " " + quoteString(s) + " is not one of vllm, sglang, tgi, triton")
		}
	case KeyHardware:
		r.Hardware = s
	case KeyState:
		switch s {
		case StateNameActive:
			r.State = StateActive
		case StateNameDraining:
			r.State = StateDraining
		case StateNameDrained:
			r.State = StateDrained
		default:
			return errors.New("config: " + field(i, key) + " " + quoteString(s) + " is not one of active, draining, drained")
		}
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

// stringValue decodes a string value. Replica names, addresses and the like
// must be text, so invalid UTF-8 (which JSON readers pass through) is refused.
func stringValue(name string, v jsonx.Value) (string, error) {
	if v.Kind != jsonx.String {
		return "", errors.New("config: " + name + " must be a string, got " + v.Kind.String() + " " + shown(v))
	}
	s := jsonx.AppendUnescape(nil, v.Raw)
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
