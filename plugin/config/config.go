// Package config parses gpuroute's plugin configuration: a pure function from
// the JSON bytes Envoy hands to proxy_on_configure to a validated Config.
//
//	cfg, err := config.Parse([]byte(`{"replicas":[{"name":"vllm-0","address":"10.0.0.1:8000"}]}`))
//	if err != nil { /* refuse the configuration: log err, return false */ }
//	_ = cfg.Replicas[0].AddressText // "10.0.0.1:8000"
//
// It uses github.com/buger/jsonparser rather than encoding/json, which pulls
// reflect into the wasm module (ABI.md §1, STYLE.md 23). Unknown keys, duplicate
// keys and bad values are errors that quote the offending input, so a typo
// never silently falls back to a default. New keys are added in the key
// switches of parseTop and parseReplica, with a row in config_test.go.
package config

import (
	"errors"
	"net/netip"
	"strconv"

	"github.com/buger/jsonparser"
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
	_, vt, end, err := jsonparser.Get(data)
	if err != nil || vt != jsonparser.Object {
		return nil, errors.New("config: want a JSON object, got " + quote(data))
	}
	for _, c := range data[end:] {
		if !isSpace(c) {
			return nil, errors.New("config: trailing data after the object: " + quote(data[end:]))
		}
	}
	cfg := &Config{TickMillis: DefaultTickMillis}
	var seen seenKeys
	var perr error
	err = jsonparser.ObjectEach(data, func(key, value []byte, vt jsonparser.ValueType, _ int) error {
		if perr = seen.add("", key); perr != nil {
			return perr
		}
		switch string(key) {
		case KeyReplicas:
			perr = parseReplicas(cfg, value, vt)
		case KeyTickMillis:
			var v int64
			v, perr = intValue(KeyTickMillis, value, vt)
			if perr == nil && (v < 1 || v > MaxTickMillis) {
				perr = errors.New("config: " + KeyTickMillis + " must be in [1, " + strconv.Itoa(MaxTickMillis) + "], got " + strconv.FormatInt(v, 10))
			}
			cfg.TickMillis = uint32(v)
		default:
			perr = errors.New("config: unknown key " + quote(key))
		}
		return perr
	})
	if perr != nil {
		return nil, perr
	}
	if err != nil {
		return nil, errors.New("config: malformed JSON object: " + err.Error())
	}
	if len(cfg.Replicas) == 0 {
		return nil, errors.New("config: " + KeyReplicas + " must list at least one replica")
	}
	return cfg, nil
}

func parseReplicas(cfg *Config, value []byte, vt jsonparser.ValueType) error {
	if vt != jsonparser.Array {
		return errors.New("config: " + KeyReplicas + " must be an array, got " + vt.String())
	}
	cfg.Replicas = cfg.Replicas[:0]
	byName := map[string]int{}
	var perr error
	_, err := jsonparser.ArrayEachErr(value, func(elem []byte, vt jsonparser.ValueType, _ int, err error) error {
		i := len(cfg.Replicas)
		if err != nil {
			return err
		}
		if i >= MaxReplicas {
			perr = errors.New("config: " + KeyReplicas + " has more than " + strconv.Itoa(MaxReplicas) + " entries")
			return perr
		}
		r, e := parseReplica(i, elem, vt)
		if e != nil {
			perr = e
			return e
		}
		if j, dup := byName[r.Name]; dup {
			perr = errors.New("config: " + field(i, KeyName) + " " + strconv.Quote(r.Name) + " duplicates " + field(j, KeyName))
			return perr
		}
		byName[r.Name] = i
		cfg.Replicas = append(cfg.Replicas, r)
		return nil
	})
	if perr != nil {
		return perr
	}
	if err != nil {
		return errors.New("config: malformed " + KeyReplicas + " array: " + err.Error())
	}
	return nil
}

func parseReplica(i int, data []byte, vt jsonparser.ValueType) (Replica, error) {
	r := Replica{Engine: EngineVLLM, State: StateActive}
	if vt != jsonparser.Object {
		return r, errors.New("config: " + KeyReplicas + "[" + strconv.Itoa(i) + "] must be an object, got " + vt.String())
	}
	var seen seenKeys
	var perr error
	var stateText string
	err := jsonparser.ObjectEach(data, func(key, value []byte, vt jsonparser.ValueType, _ int) error {
		if perr = seen.add(KeyReplicas+"["+strconv.Itoa(i)+"]", key); perr != nil {
			return perr
		}
		k := string(key)
		switch k {
		case KeyName, KeyAddress, KeyMetricsCluster, KeyEngine, KeyHardware, KeyState:
			var s string
			if s, perr = stringValue(field(i, k), value, vt); perr != nil {
				return perr
			}
			perr = setReplicaString(&r, i, k, s)
			if k == KeyState {
				stateText = s
			}
		case KeyDrainDeadlineMs:
			var v int64
			if v, perr = intValue(field(i, k), value, vt); perr != nil {
				return perr
			}
			if v <= 0 {
				perr = errors.New("config: " + field(i, k) + " must be > 0, got " + strconv.FormatInt(v, 10))
			}
			r.DrainDeadlineUnixMillis = v
		default:
			perr = errors.New("config: " + KeyReplicas + "[" + strconv.Itoa(i) + "]: unknown key " + quote(key))
		}
		return perr
	})
	if perr != nil {
		return r, perr
	}
	if err != nil {
		return r, errors.New("config: malformed " + KeyReplicas + "[" + strconv.Itoa(i) + "]: " + err.Error())
	}
	if r.Name == "" {
		return r, errors.New("config: " + field(i, KeyName) + " is required")
	}
	if !r.Address.IsValid() {
		return r, errors.New("config: " + field(i, KeyAddress) + " is required")
	}
	if r.DrainDeadlineUnixMillis != 0 && r.State != StateDraining {
		return r, errors.New("config: " + field(i, KeyDrainDeadlineMs) + " is only allowed with state " +
			strconv.Quote(StateNameDraining) + ", got state " + strconv.Quote(stateText))
	}
	return r, nil
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

func (s *seenKeys) add(where string, key []byte) error {
	for _, k := range *s {
		if k == string(key) {
			if where != "" {
				where += ": "
			}
			return errors.New("config: " + where + "duplicate key " + quote(key))
		}
	}
	*s = append(*s, string(key))
	return nil
}

func field(i int, key string) string {
	return KeyReplicas + "[" + strconv.Itoa(i) + "]." + key
}

func stringValue(name string, value []byte, vt jsonparser.ValueType) (string, error) {
	if vt != jsonparser.String {
		return "", errors.New("config: " + name + " must be a string, got " + vt.String() + " " + quote(value))
	}
	s, err := jsonparser.ParseString(value)
	if err != nil {
		return "", errors.New("config: " + name + " is not a valid JSON string: " + quote(value))
	}
	return s, nil
}

func intValue(name string, value []byte, vt jsonparser.ValueType) (int64, error) {
	if vt != jsonparser.Number {
		return 0, errors.New("config: " + name + " must be a number, got " + vt.String() + " " + quote(value))
	}
	v, err := strconv.ParseInt(string(value), 10, 64)
	if err != nil {
		return 0, errors.New("config: " + name + " must be an integer, got " + quote(value))
	}
	return v, nil
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
