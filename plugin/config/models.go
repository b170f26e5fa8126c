package config

import (
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/gpuroute/gpuroute/plugin/jsonx"
	"github.com/gpuroute/gpuroute/scoring"
)

// What a replica serves and what prices it: the base models it serves
// ("models"), the model shape and tensor-parallel degree that, with its GPU
// class, make its cost profile ("model_profile", "tensor_parallel"), and
// the configuration's own shapes for models the built-in ones do not
// cover ("model_profiles").
const (
	KeyModels         = "models"
	KeyModelProfile   = "model_profile"
	KeyTensorParallel = "tensor_parallel"
	KeyModelProfiles  = "model_profiles"

	// Keys of a model_profiles entry: the parameter counts in billions,
	// and the sizes under their names in a Hugging Face config.json.
	KeyParamsB        = "params_b"
	KeyActiveParamsB  = "active_params_b"
	KeyHiddenLayers   = "num_hidden_layers"
	KeyHiddenSize     = "hidden_size"
	KeyAttentionHeads = "num_attention_heads"
	KeyKeyValueHeads  = "num_key_value_heads"
	KeyHeadDim        = "head_dim"
)

// Bounds of the model keys.
const (
	// MaxModelBytes bounds a model name, as the request parser bounds the
	// "model" value it reads (openai.MaxModelBytes).
	MaxModelBytes = 256
	// MaxModelsPerReplica bounds one replica's "models".
	MaxModelsPerReplica = 64
	// MaxModels bounds the distinct models the replicas list: each has a
	// mask over the replicas in every worker VM.
	MaxModels = 256
	// MaxModelProfiles bounds "model_profiles", and maxShapeNameBytes
	// the name of one.
	MaxModelProfiles  = 64
	maxShapeNameBytes = 64
)

// ServedBy returns which replicas (by index) serve the base model named
// model, for scoring.Request.ServedBy: nil when every replica does (no
// replica lists "models", or all that do list it), else a mask with no
// true entry when none does. The mask is the configuration's: read it,
// never write it. It does not allocate.
func (c *Config) ServedBy(model string) []bool {
	if c.servedBy == nil {
		return nil
	}
	if m, ok := c.servedBy[model]; ok {
		return m
	}
	return c.unlisted
}

// parseModels reads replica i's "models": a non-empty array of distinct
// model names.
func parseModels(i int, r *jsonx.Reader) ([]string, error) {
	where := field(i, KeyModels)
	if k := r.Kind(); k != jsonx.Array {
		r.Skip()
		return nil, errors.New("config: " + where + " must be an array of model names, got " + k.String())
	}
	var out []string
	r.Array()
	for j := 0; r.Elem(); j++ {
		at := where + "[" + strconv.Itoa(j) + "]"
		if j >= MaxModelsPerReplica {
			return nil, errors.New("config: " + where + " has more than " + strconv.Itoa(MaxModelsPerReplica) + " entries")
		}
		s, err := stringValue(at, r.Value())
		if err != nil {
			return nil, err
		}
		if s == "" {
			return nil, errors.New("config: " + at + " must not be empty")
		}
		if err := maxLen(at, s, MaxModelBytes); err != nil {
			return nil, err
		}
		for k, prev := range out {
			if prev == s {
				return nil, errors.New("config: " + at + " " + quoteString(s) + " duplicates " + where + "[" + strconv.Itoa(k) + "]")
			}
		}
		out = append(out, s)
	}
	if err := malformed(r); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("config: " + where + " must list at least one model (leave it out to serve every model)")
	}
	return out, nil
}

// parseModelProfiles reads "model_profiles": {"name": {shape keys}, ...}.
func parseModelProfiles(cfg *Config, r *jsonx.Reader) error {
	if k := r.Kind(); k != jsonx.Object {
		r.Skip()
		return errors.New("config: " + KeyModelProfiles + " must be an object of model shape name to shape, got " + k.String())
	}
	cfg.ModelProfiles = map[string]scoring.ModelShape{}
	r.Object()
	for r.Member() {
		name := string(r.Key())
		where := KeyModelProfiles + "." + name
		if _, dup := cfg.ModelProfiles[name]; dup {
			return errors.New("config: " + KeyModelProfiles + ": duplicate key " + quoteString(name))
		}
		if len(cfg.ModelProfiles) >= MaxModelProfiles {
			return errors.New("config: " + KeyModelProfiles + " has more than " + strconv.Itoa(MaxModelProfiles) + " entries")
		}
		if name == "" || len(name) > maxShapeNameBytes {
			return errors.New("config: " + KeyModelProfiles + " entry " + quoteString(name) + " needs a name of 1 to " +
				strconv.Itoa(maxShapeNameBytes) + " bytes")
		}
		if _, builtin := scoring.LookupModelShape(name); builtin {
			return errors.New("config: " + KeyModelProfiles + " entry " + quoteString(name) + " has the name of a built-in model shape")
		}
		m, err := parseModelShape(where, r)
		if err != nil {
			return err
		}
		m.Name = name
		if err := m.Validate(); err != nil {
			return errors.New("config: " + where + ": " + err.Error())
		}
		cfg.ModelProfiles[name] = m
	}
	return malformed(r)
}

// parseModelShape reads one model_profiles entry; every key but
// active_params_b is required.
func parseModelShape(where string, r *jsonx.Reader) (scoring.ModelShape, error) {
	var m scoring.ModelShape
	if k := r.Kind(); k != jsonx.Object {
		r.Skip()
		return m, errors.New("config: " + where + " must be an object, got " + k.String())
	}
	var seen seenKeys
	r.Object()
	for r.Member() {
		key := string(r.Key())
		if err := seen.add(where, key); err != nil {
			return m, err
		}
		at := where + "." + key
		v := r.Value()
		var n int64
		var err error
		switch key {
		case KeyParamsB:
			m.ParamsB, err = boundedFloat(at, v, scoring.MaxModelParamsB)
		case KeyActiveParamsB:
			m.ActiveParamsB, err = boundedFloat(at, v, scoring.MaxModelParamsB)
		case KeyHiddenLayers:
			n, err = boundedInt(at, v, 1, scoring.MaxModelLayers)
			m.Layers = int(n)
		case KeyHiddenSize:
			n, err = boundedInt(at, v, 1, scoring.MaxModelWidth)
			m.HiddenSize = int(n)
		case KeyAttentionHeads:
			n, err = boundedInt(at, v, 1, scoring.MaxModelWidth)
			m.AttentionHeads = int(n)
		case KeyKeyValueHeads:
			n, err = boundedInt(at, v, 1, scoring.MaxModelWidth)
			m.KVHeads = int(n)
		case KeyHeadDim:
			n, err = boundedInt(at, v, 1, scoring.MaxModelWidth)
			m.HeadDim = int(n)
		default:
			return m, errors.New("config: " + where + ": unknown key " + quoteString(key))
		}
		if err != nil {
			return m, err
		}
	}
	if err := malformed(r); err != nil {
		return m, err
	}
	for _, k := range seenShapeKeys {
		if !seen.has(k) {
			return m, errors.New("config: " + where + "." + k + " is required")
		}
	}
	if m.ActiveParamsB > m.ParamsB {
		return m, errors.New("config: " + where + "." + KeyActiveParamsB + " " + strconv.FormatFloat(m.ActiveParamsB, 'g', -1, 64) +
			" exceeds " + KeyParamsB + " " + strconv.FormatFloat(m.ParamsB, 'g', -1, 64))
	}
	return m, nil
}

// seenShapeKeys are the required keys of a model_profiles entry.
var seenShapeKeys = [...]string{KeyParamsB, KeyHiddenLayers, KeyHiddenSize, KeyAttentionHeads, KeyKeyValueHeads, KeyHeadDim}

// boundedFloat reads a number in (0, hi].
func boundedFloat(name string, v jsonx.Value, hi float64) (float64, error) {
	if v.Kind != jsonx.Number {
		return 0, errors.New("config: " + name + " must be a number, got " + v.Kind.String() + " " + shown(v))
	}
	f, err := strconv.ParseFloat(string(v.Raw), 64)
	if err != nil || !(f > 0 && f <= hi) {
		return 0, errors.New("config: " + name + " must be in (0, " + strconv.FormatFloat(hi, 'g', -1, 64) + "], got " + quote(v.Raw))
	}
	return f, nil
}

// settleModels, once the document is read, gives every replica its cost
// profile (its GPU class, model shape and tensor-parallel degree) and
// builds the model masks ServedBy returns, refusing a replica whose
// weights leave no KV cache room, a model list that names an adapter, and
// an adapter whose base model no replica serves.
func settleModels(cfg *Config) error {
	for i := range cfg.Replicas {
		rep := &cfg.Replicas[i]
		m, ok := cfg.modelShape(rep.ModelProfile)
		if !ok {
			names := append(scoring.ModelShapeNames(), sortedKeys(cfg.ModelProfiles)...)
			return errors.New("config: " + field(i, KeyModelProfile) + " " + quoteString(rep.ModelProfile) +
				" is not a model shape (" + strings.Join(names, ", ") + ")")
		}
		h, err := scoring.NewProfile(rep.Hardware, m, rep.TensorParallel)
		if err != nil {
			return errors.New("config: replicas[" + strconv.Itoa(i) + "]: " + err.Error())
		}
		rep.ModelProfile, rep.Profile = m.Name, h
		for j, name := range rep.Models {
			if a, ok := cfg.Adapters[name]; ok {
				return errors.New("config: " + field(i, KeyModels) + "[" + strconv.Itoa(j) + "] " + quoteString(name) +
					" is an adapter: list its base model " + quoteString(a.Base))
			}
		}
	}
	if err := buildServedBy(cfg); err != nil {
		return err
	}
	for _, name := range sortedKeys(cfg.Adapters) { // the same error for the same document
		a := cfg.Adapters[name]
		if m := cfg.ServedBy(a.Base); m != nil && !anyTrue(m) {
			return errors.New("config: " + KeyAdapters + " entry " + quoteString(name) + ": no replica serves its base model " +
				quoteString(a.Base) + " (each replica lists its " + KeyModels + ")")
		}
	}
	return nil
}

// modelShape returns the shape named name: one of model_profiles, else a
// built-in one.
func (c *Config) modelShape(name string) (scoring.ModelShape, bool) {
	if m, ok := c.ModelProfiles[name]; ok {
		return m, true
	}
	return scoring.LookupModelShape(name)
}

// buildServedBy computes the mask of each model a replica lists, and of
// the models none lists (the replicas without "models"); a mask of every
// replica is left nil, so that a fleet where all replicas serve a model
// routes its requests as one without model lists.
func buildServedBy(cfg *Config) error {
	n := len(cfg.Replicas)
	var unlisted []bool
	every := true
	for i := range cfg.Replicas {
		if cfg.Replicas[i].Models != nil {
			every = false
			continue
		}
		if unlisted == nil {
			unlisted = make([]bool, n)
		}
		unlisted[i] = true
	}
	if every {
		return nil
	}
	if unlisted == nil {
		unlisted = make([]bool, n)
	}
	cfg.servedBy = map[string][]bool{}
	for i := range cfg.Replicas {
		for _, name := range cfg.Replicas[i].Models {
			m, ok := cfg.servedBy[name]
			if !ok {
				if len(cfg.servedBy) >= MaxModels {
					return errors.New("config: the replicas list more than " + strconv.Itoa(MaxModels) + " distinct " + KeyModels)
				}
				m = append([]bool(nil), unlisted...)
				cfg.servedBy[name] = m
			}
			m[i] = true
		}
	}
	for name, m := range cfg.servedBy {
		if allTrue(m) {
			cfg.servedBy[name] = nil
		}
	}
	cfg.unlisted = unlisted
	return nil
}

func anyTrue(m []bool) bool {
	for _, b := range m {
		if b {
			return true
		}
	}
	return false
}

func allTrue(m []bool) bool {
	for _, b := range m {
		if !b {
			return false
		}
	}
	return true
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// has reports whether key was seen.
func (s seenKeys) has(key string) bool { return slices.Contains(s, key) }
