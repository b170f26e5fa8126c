package config

import (
	"errors"
	"strconv"

	"github.com/gpuroute/gpuroute/plugin/jsonx"
	"github.com/gpuroute/gpuroute/scoring/flow"
)

// Keys of "flow_control": requests held at the router while no replica
// can start them soon (docs/design.md "Flow control").
const (
	KeyFlowControl    = "flow_control"
	KeyFlowEnabled    = "enabled"
	KeyHoldWaitMs     = "hold_wait_ms"
	KeyMaxQueueMs     = "max_queue_ms"
	KeyMaxHeld        = "max_held"
	KeyPriorityHeader = "priority_header"
	KeyTenantHeader   = "tenant_header"
	KeyDefaultBand    = "default_band"
	KeyBands          = "bands"
	KeyModelBands     = "model_bands"
	KeyBandSheddable  = "sheddable"
	KeyBandFromHeader = "from_header"
)

// Defaults and bounds of flow control.
const (
	// DefaultHoldWaitMillis holds a request when even its best replica's
	// expected wait before its prefill starts is longer than this.
	DefaultHoldWaitMillis = 3000
	// DefaultMaxQueueMillis is how long a request may be held before it
	// gets a 429 (Envoy's stream idle timeout, 5 minutes by default, and
	// the client's timeout must be longer).
	DefaultMaxQueueMillis = 30_000
	// DefaultMaxHeld bounds the requests one worker VM holds.
	DefaultMaxHeld = 1024
	// DefaultPriorityHeader names the band a client asks for.
	DefaultPriorityHeader = "x-gpuroute-priority"
	// DefaultBandName is the one band of a configuration that lists none.
	DefaultBandName = "standard"
	// MaxHeaderNameBytes bounds the header names flow control reads.
	MaxHeaderNameBytes = 128
)

// FlowControl configures requests held at the router. The zero value is off.
type FlowControl struct {
	// Enabled turns holding on (default on).
	Enabled bool
	// HoldWaitSec: a request is held while its best replica's expected
	// wait W exceeds it (with the replica's KV and batch-slot waits
	// counted in W).
	HoldWaitSec float64
	// MaxHeld bounds the requests one worker VM holds in all bands.
	MaxHeld int
	// PriorityHeader names the request header a client chooses its band
	// with, among the bands marked FromHeader; TenantHeader, when set,
	// names the header whose value is the request's fairness key.
	PriorityHeader, TenantHeader string
	// Bands, highest priority first; DefaultBand is the index of the band
	// of a request that asks for none and whose model has none.
	Bands       []Band
	DefaultBand int
	// ModelBands maps an OpenAI "model" value (a base model or an
	// adapter) to its band: the band of its requests when the client asks
	// for none it may choose.
	ModelBands map[string]int
}

// Band is one priority class of held requests.
type Band struct {
	Name string
	// MaxHeld bounds the requests of the band one worker VM holds (0: only
	// FlowControl.MaxHeld); MaxQueueSec how long one is held before a 429.
	MaxHeld     int
	MaxQueueSec float64
	// Sheddable requests are never held: when they would be, they get a
	// 429 at once (as the Gateway API Inference Extension sheds its
	// sheddable criticality when the pool is saturated).
	Sheddable bool
	// FromHeader lets a client choose this band with PriorityHeader; a
	// request never gets a band the configuration does not let it ask for.
	FromHeader bool
	// HoldWaitSec is the band's own hold_wait_ms (0: the flow control's):
	// a lower band with a shorter one leaves the replicas' queues short
	// for the bands above it.
	HoldWaitSec float64
}

// QueueConfig returns the held-request queue configuration of f.
func (f *FlowControl) QueueConfig() flow.Config {
	c := flow.Config{MaxHeld: f.MaxHeld, Bands: make([]flow.Band, len(f.Bands))}
	for i, b := range f.Bands {
		c.Bands[i] = flow.Band{MaxHeld: b.MaxHeld, MaxWaitNanos: int64(b.MaxQueueSec * 1e9)}
	}
	return c
}

// BandNamed returns the index of the band called name, or -1.
func (f *FlowControl) BandNamed(name []byte) int {
	for i := range f.Bands {
		if f.Bands[i].Name == string(name) {
			return i
		}
	}
	return -1
}

// defaultFlowControl is flow control as a configuration without
// "flow_control" gets it: on, one band, no tenants.
func defaultFlowControl() FlowControl {
	return FlowControl{
		Enabled:        true,
		HoldWaitSec:    DefaultHoldWaitMillis / 1000.0,
		MaxHeld:        DefaultMaxHeld,
		PriorityHeader: DefaultPriorityHeader,
		Bands:          []Band{{Name: DefaultBandName, MaxQueueSec: DefaultMaxQueueMillis / 1000.0, HoldWaitSec: DefaultHoldWaitMillis / 1000.0}},
	}
}

// defaultBands is the band list of a "flow_control" without "bands": its
// max_queue_ms applies to it like to a listed band without its own.
func defaultBands() []Band { return []Band{{Name: DefaultBandName}} }

// parseFlowControl reads the "flow_control" object.
func parseFlowControl(cfg *Config, r *jsonx.Reader) error {
	if k := r.Kind(); k != jsonx.Object {
		r.Skip()
		return errors.New("config: " + KeyFlowControl + " must be an object, got " + k.String())
	}
	f := defaultFlowControl()
	maxQueue := float64(DefaultMaxQueueMillis) / 1000
	var defaultBand string
	var modelBands map[string]string
	var bands []Band
	var seen seenKeys
	r.Object()
	for r.Member() {
		key := string(r.Key())
		where := KeyFlowControl + "." + key
		if err := seen.add(KeyFlowControl, key); err != nil {
			return err
		}
		var err error
		switch key {
		case KeyBands:
			bands, err = parseBands(r)
		case KeyModelBands:
			modelBands, err = parseModelBands(r)
		default:
			v := r.Value()
			var n int64
			switch key {
			case KeyFlowEnabled:
				if v.Kind != jsonx.Bool {
					return errors.New("config: " + where + " must be true or false, got " + v.Kind.String() + " " + shown(v))
				}
				f.Enabled = v.Raw[0] == 't'
			case KeyHoldWaitMs:
				n, err = boundedInt(where, v, 0, 3_600_000)
				f.HoldWaitSec = float64(n) / 1000
			case KeyMaxQueueMs:
				n, err = boundedInt(where, v, 1, 3_600_000)
				maxQueue = float64(n) / 1000
			case KeyMaxHeld:
				n, err = boundedInt(where, v, 1, 1<<16)
				f.MaxHeld = int(n)
			case KeyPriorityHeader, KeyTenantHeader:
				var s string
				if s, err = headerName(where, v); err == nil {
					if key == KeyPriorityHeader {
						f.PriorityHeader = s
					} else {
						f.TenantHeader = s
					}
				}
			case KeyDefaultBand:
				defaultBand, err = stringValue(where, v)
			default:
				return errors.New("config: " + KeyFlowControl + ": unknown key " + quoteString(key))
			}
		}
		if err != nil {
			return err
		}
	}
	if err := malformed(r); err != nil {
		return err
	}
	f.Bands = bands
	if f.Bands == nil {
		f.Bands = defaultBands()
	}
	for i := range f.Bands {
		if f.Bands[i].MaxQueueSec == 0 {
			f.Bands[i].MaxQueueSec = maxQueue
		}
		if f.Bands[i].HoldWaitSec == 0 {
			f.Bands[i].HoldWaitSec = f.HoldWaitSec
		}
		if f.Bands[i].MaxHeld > f.MaxHeld {
			return errors.New("config: " + KeyFlowControl + ".bands[" + strconv.Itoa(i) + "]." + KeyMaxHeld + " " +
				strconv.Itoa(f.Bands[i].MaxHeld) + " exceeds " + KeyFlowControl + "." + KeyMaxHeld + " " + strconv.Itoa(f.MaxHeld))
		}
	}
	// The default band is named, never guessed from the list's order.
	switch {
	case defaultBand != "":
		if f.DefaultBand = f.BandNamed([]byte(defaultBand)); f.DefaultBand < 0 {
			return errors.New("config: " + KeyFlowControl + "." + KeyDefaultBand + " " + quoteString(defaultBand) + " names no band")
		}
	case len(f.Bands) == 1:
		f.DefaultBand = 0
	default:
		if f.DefaultBand = f.BandNamed([]byte(DefaultBandName)); f.DefaultBand < 0 {
			return errors.New("config: " + KeyFlowControl + " lists several bands and none named " + quoteString(DefaultBandName) +
				": set " + KeyDefaultBand)
		}
	}
	if len(modelBands) > 0 {
		f.ModelBands = make(map[string]int, len(modelBands))
		for model, name := range modelBands {
			b := f.BandNamed([]byte(name))
			if b < 0 {
				return errors.New("config: " + KeyFlowControl + "." + KeyModelBands + "." + model + ": " + quoteString(name) + " names no band")
			}
			f.ModelBands[model] = b
		}
	}
	if err := f.validateQueue(); err != nil {
		return err
	}
	cfg.Flow = f
	return nil
}

// validateQueue checks what the held-request queue checks of its own.
func (f *FlowControl) validateQueue() error {
	qc := f.QueueConfig()
	if err := qc.Validate(); err != nil {
		return errors.New("config: " + KeyFlowControl + ": " + err.Error())
	}
	return nil
}

// parseBands reads [{"name": "critical", "max_held": 100, "max_queue_ms":
// 60000, "sheddable": false, "from_header": true}, ...], highest first.
func parseBands(r *jsonx.Reader) ([]Band, error) {
	where := KeyFlowControl + "." + KeyBands
	if k := r.Kind(); k != jsonx.Array {
		r.Skip()
		return nil, errors.New("config: " + where + " must be an array of band objects, highest priority first, got " + k.String())
	}
	var bands []Band
	r.Array()
	for i := 0; r.Elem(); i++ {
		at := where + "[" + strconv.Itoa(i) + "]"
		if i >= flow.MaxBands {
			return nil, errors.New("config: " + where + " has more than " + strconv.Itoa(flow.MaxBands) + " bands")
		}
		if k := r.Kind(); k != jsonx.Object {
			r.Skip()
			return nil, errors.New("config: " + at + " must be an object, got " + k.String())
		}
		var b Band
		var seen seenKeys
		r.Object()
		for r.Member() {
			key := string(r.Key())
			if err := seen.add(at, key); err != nil {
				return nil, err
			}
			v := r.Value()
			var err error
			var n int64
			switch key {
			case KeyName:
				b.Name, err = stringValue(at+"."+key, v)
			case KeyMaxHeld:
				n, err = boundedInt(at+"."+key, v, 0, 1<<16)
				b.MaxHeld = int(n)
			case KeyMaxQueueMs:
				n, err = boundedInt(at+"."+key, v, 1, 3_600_000)
				b.MaxQueueSec = float64(n) / 1000
			case KeyHoldWaitMs:
				n, err = boundedInt(at+"."+key, v, 1, 3_600_000)
				b.HoldWaitSec = float64(n) / 1000
			case KeyBandSheddable, KeyBandFromHeader:
				if v.Kind != jsonx.Bool {
					return nil, errors.New("config: " + at + "." + key + " must be true or false, got " + v.Kind.String() + " " + shown(v))
				}
				if key == KeyBandSheddable {
					b.Sheddable = v.Raw[0] == 't'
				} else {
					b.FromHeader = v.Raw[0] == 't'
				}
			default:
				return nil, errors.New("config: " + at + ": unknown key " + quoteString(key))
			}
			if err != nil {
				return nil, err
			}
		}
		if b.Name == "" || len(b.Name) > 64 {
			return nil, errors.New("config: " + at + " needs a " + KeyName + " of 1 to 64 bytes")
		}
		for _, o := range bands {
			if o.Name == b.Name {
				return nil, errors.New("config: " + at + ": duplicate band name " + quoteString(b.Name))
			}
		}
		bands = append(bands, b)
	}
	if err := malformed(r); err != nil {
		return nil, err
	}
	if len(bands) == 0 {
		return nil, errors.New("config: " + where + " must list at least one band")
	}
	return bands, nil
}

// parseModelBands reads {"model or adapter": "band name", ...}.
func parseModelBands(r *jsonx.Reader) (map[string]string, error) {
	where := KeyFlowControl + "." + KeyModelBands
	if k := r.Kind(); k != jsonx.Object {
		r.Skip()
		return nil, errors.New("config: " + where + " must be an object of model name to band name, got " + k.String())
	}
	m := map[string]string{}
	r.Object()
	for r.Member() {
		model := string(r.Key())
		if _, dup := m[model]; dup {
			return nil, errors.New("config: " + where + ": duplicate key " + quoteString(model))
		}
		if len(m) >= MaxAdapters {
			return nil, errors.New("config: " + where + " has more than " + strconv.Itoa(MaxAdapters) + " entries")
		}
		band, err := stringValue(where+"."+model, r.Value())
		if err != nil {
			return nil, err
		}
		if model == "" || len(model) > 256 {
			return nil, errors.New("config: " + where + " key " + quoteString(model) + " must be a model name of 1 to 256 bytes")
		}
		m[model] = band
	}
	return m, malformed(r)
}

// headerName reads a request header name: lowercase (Envoy hands the
// plugin lowercased names), a token of RFC 9110's characters, not a
// pseudo-header.
func headerName(where string, v jsonx.Value) (string, error) {
	s, err := stringValue(where, v)
	if err != nil {
		return "", err
	}
	if s == "" || len(s) > MaxHeaderNameBytes {
		return "", errors.New("config: " + where + " " + quoteString(s) + " must be a header name of 1 to " + strconv.Itoa(MaxHeaderNameBytes) + " bytes")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return "", errors.New("config: " + where + " " + quoteString(s) + " must be a lowercase header name (a-z, 0-9, '-', '_', '.')")
		}
	}
	return s, nil
}
