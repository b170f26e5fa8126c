package config

import (
	"errors"
	"net/netip"
	"strconv"
	"strings"

	"github.com/gpuroute/gpuroute/plugin/jsonx"
	"github.com/gpuroute/gpuroute/plugin/metrics"
	"github.com/gpuroute/gpuroute/scoring"
)

// parseReplicas reads the replica list into cfg and returns each replica's
// metric_names overrides, which Parse applies once the document is read.
func parseReplicas(cfg *Config, r *jsonx.Reader) ([]nameOverrides, error) {
	if k := r.Kind(); k != jsonx.Array {
		return nil, errors.New("config: " + KeyReplicas + " must be an array, got " + k.String())
	}
	cfg.Replicas = cfg.Replicas[:0]
	var names []nameOverrides
	byName := map[string]int{}
	r.Array()
	for i := 0; r.Elem(); i++ {
		if i >= MaxReplicas {
			return nil, errors.New("config: " + KeyReplicas + " has more than " + strconv.Itoa(MaxReplicas) + " entries")
		}
		rep, own, err := parseReplica(i, r)
		if err != nil {
			return nil, err
		}
		if j, dup := byName[rep.Name]; dup {
			return nil, errors.New("config: " + field(i, KeyName) + " " + quoteString(rep.Name) + " duplicates " + field(j, KeyName))
		}
		byName[rep.Name] = i
		cfg.Replicas = append(cfg.Replicas, rep)
		names = append(names, own)
	}
	return names, malformed(r)
}

// parseReplica reads one replica and its metric_names overrides; its
// MetricNames are left for Parse to settle.
func parseReplica(i int, r *jsonx.Reader) (Replica, nameOverrides, error) {
	rep := Replica{Engine: metrics.EngineVLLM, State: StateActive, MetricsPath: DefaultMetricsPath,
		Hardware: scoring.HardwareH100, ModelProfile: scoring.ReferenceModel, TensorParallel: 1, AdapterSlots: -1}
	where := KeyReplicas + "[" + strconv.Itoa(i) + "]"
	if k := r.Kind(); k != jsonx.Object {
		if err := malformed(r); err != nil {
			return rep, nil, err
		}
		r.Skip()
		if err := malformed(r); err != nil {
			return rep, nil, err
		}
		return rep, nil, errors.New("config: " + where + " must be an object, got " + k.String())
	}
	var seen seenKeys
	var stateText string
	var own nameOverrides
	r.Object()
	for r.Member() {
		key := string(r.Key())
		if err := seen.add(where, key); err != nil {
			return rep, nil, err
		}
		switch key {
		case KeyName, KeyAddress, KeyMetricsCluster, KeyMetricsAddress, KeyEngine, KeyHardware, KeyState, KeyMetricsPath, KeyModelProfile:
			s, err := stringValue(field(i, key), r.Value())
			if err != nil {
				return rep, nil, err
			}
			if key == KeyState {
				stateText = s
			}
			if err := setReplicaString(&rep, i, key, s); err != nil {
				return rep, nil, err
			}
		case KeyDrainDeadlineMs:
			v, err := intValue(field(i, key), r.Value())
			if err != nil {
				return rep, nil, err
			}
			if v <= 0 {
				return rep, nil, errors.New("config: " + field(i, key) + " must be > 0, got " + strconv.FormatInt(v, 10))
			}
			rep.DrainDeadlineUnixMillis = v
		case KeyAdapterSlots:
			v, err := boundedInt(field(i, key), r.Value(), -1, 1024)
			if err != nil {
				return rep, nil, err
			}
			rep.AdapterSlots = int(v)
		case KeyAdapterHostSlots:
			v, err := boundedInt(field(i, key), r.Value(), 0, 65536)
			if err != nil {
				return rep, nil, err
			}
			rep.AdapterHostSlots = int(v)
		case KeyMetricNames:
			var err error
			if own, err = parseMetricNames(field(i, key), r); err != nil {
				return rep, nil, err
			}
		case KeyKVCapacity:
			v, err := boundedInt(field(i, key), r.Value(), 0, 1<<40)
			if err != nil {
				return rep, nil, err
			}
			rep.KVCapacityTokens = int(v)
		case KeyTensorParallel:
			v, err := boundedInt(field(i, key), r.Value(), 1, scoring.MaxTensorParallel)
			if err != nil {
				return rep, nil, err
			}
			rep.TensorParallel = int(v)
		case KeyModels:
			var err error
			if rep.Models, err = parseModels(i, r); err != nil {
				return rep, nil, err
			}
		default:
			return rep, nil, errors.New("config: " + where + ": unknown key " + quoteString(key))
		}
	}
	if err := malformed(r); err != nil {
		return rep, nil, err
	}
	if rep.Name == "" {
		return rep, nil, errors.New("config: " + field(i, KeyName) + " is required")
	}
	if !rep.Address.IsValid() {
		return rep, nil, errors.New("config: " + field(i, KeyAddress) + " is required")
	}
	if rep.MetricsAddress.IsValid() && rep.MetricsCluster == "" {
		return rep, nil, errors.New("config: " + field(i, KeyMetricsAddress) + " needs " + KeyMetricsCluster +
			", the original-destination cluster that reaches it")
	}
	if rep.DrainDeadlineUnixMillis != 0 && rep.State != StateDraining {
		return rep, nil, errors.New("config: " + field(i, KeyDrainDeadlineMs) + " is only allowed with state " +
			strconv.Quote(StateNameDraining) + ", got state " + strconv.Quote(stateText))
	}
	return rep, own, nil
}

func setReplicaString(r *Replica, i int, key, s string) error {
	switch key {
	case KeyName:
		if s == "" {
			return errors.New("config: " + field(i, key) + " must not be empty")
		}
		if err := maxLen(field(i, key), s, MaxNameBytes); err != nil {
			return err
		}
		// A name goes into the decision header, log lines and stat names:
		// a control character would end or garble them.
		for _, c := range []byte(s) {
			if c < 0x20 || c == 0x7f {
				return errors.New("config: " + field(i, key) + " " + quoteString(s) + " must not contain control characters")
			}
		}
		r.Name = s
	case KeyAddress, KeyMetricsAddress:
		ap, err := addrPort(field(i, key), s)
		if err != nil {
			return err
		}
		if key == KeyAddress {
			r.Address, r.AddressText = ap, ap.String()
		} else {
			r.MetricsAddress, r.MetricsAddressText = ap, ap.String()
		}
	case KeyMetricsCluster:
		if s == "" {
			return errors.New("config: " + field(i, key) + " must not be empty")
		}
		if err := maxLen(field(i, key), s, MaxNameBytes); err != nil {
			return err
		}
		r.MetricsCluster = s
	case KeyMetricsPath:
		if s == "" || s[0] != '/' {
			return errors.New("config: " + field(i, key) + " " + quoteString(s) + " must start with /")
		}
		if err := maxLen(field(i, key), s, MaxPathBytes); err != nil {
			return err
		}
		r.MetricsPath = s
	case KeyEngine:
		e, err := metrics.ParseEngine(s)
		if err != nil {
			return errors.New("config: " + field(i, key) + " " + quoteString(s) + " is not one of vllm, sglang, tgi, triton, trtllm-serve")
		}
		r.Engine = e // Parse sets MetricNames when the document is read
	case KeyHardware:
		hw, ok := scoring.LookupHardware(s)
		if !ok {
			return errors.New("config: " + field(i, key) + " " + quoteString(s) + " is not a known GPU class (" +
				strings.Join(scoring.HardwareNames(), ", ") + ")")
		}
		r.Hardware = hw.Name // Parse makes the profile when the document is read
	case KeyModelProfile:
		if s == "" {
			return errors.New("config: " + field(i, key) + " must not be empty")
		}
		r.ModelProfile = s
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

// addrPort reads an ip:port that Envoy can connect to: a literal address
// (ORIGINAL_DST resolves nothing), neither port 0 nor 0.0.0.0 or [::].
func addrPort(name, s string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return ap, errors.New("config: " + name + " " + quoteString(s) + " is not ip:port")
	}
	if ap.Port() == 0 {
		return ap, errors.New("config: " + name + " " + quoteString(s) + " has port 0")
	}
	if ap.Addr().IsUnspecified() {
		return ap, errors.New("config: " + name + " " + quoteString(s) + " is an unspecified address")
	}
	return ap, nil
}
