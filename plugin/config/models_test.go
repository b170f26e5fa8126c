package config

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpuroute/gpuroute/plugin/openai"
	"github.com/gpuroute/gpuroute/scoring"
)

// mixedFleet is the example: a 70B model on H200s and MI300Xs, an
// 8B one on a second MI300X and on replicas that list no models (so serve
// every model), an adapter of the 8B.
const mixedFleet = `{"replicas":[` +
	`{"name":"h200-0","address":"10.0.0.1:8000","hardware":"h200","model_profile":"llama-3-70b","tensor_parallel":2,"models":["meta-llama/Llama-3.3-70B-Instruct"]},` +
	`{"name":"mi300x-0","address":"10.0.0.2:8000","hardware":"mi300x","model_profile":"llama-3-70b","models":["meta-llama/Llama-3.3-70B-Instruct"]},` +
	`{"name":"mi300x-1","address":"10.0.0.3:8000","hardware":"MI300X","models":["meta-llama/Llama-3.1-8B-Instruct","qwen"]},` +
	`{"name":"l4-0","address":"10.0.0.4:8000","hardware":"l4"}],` +
	`"adapters":{"sql-lora":"meta-llama/Llama-3.1-8B-Instruct"}}`

func TestParseModels(t *testing.T) {
	cfg, err := Parse([]byte(mixedFleet))
	if err != nil {
		t.Fatalf("Parse(mixedFleet) error %v", err)
	}
	m70, _ := scoring.LookupModelShape(scoring.ModelLlama3x70B)
	m8, _ := scoring.LookupModelShape(scoring.ReferenceModel)
	wantProfile := func(hw string, m scoring.ModelShape, tp int) scoring.Hardware {
		h, err := scoring.NewProfile(hw, m, tp)
		if err != nil {
			t.Fatalf("NewProfile(%q, %q, %d) error %v", hw, m.Name, tp, err)
		}
		return h
	}
	replicas := []struct {
		hardware, shape string
		tp              int
		profile         scoring.Hardware
	}{
		{"h200", scoring.ModelLlama3x70B, 2, wantProfile("h200", m70, 2)},
		{"mi300x", scoring.ModelLlama3x70B, 1, wantProfile("mi300x", m70, 1)},
		{"mi300x", scoring.ReferenceModel, 1, wantProfile("mi300x", m8, 1)},
		{"l4", scoring.ReferenceModel, 1, wantProfile("l4", m8, 1)},
	}
	for i, w := range replicas {
		r := cfg.Replicas[i]
		if r.Hardware != w.hardware || r.ModelProfile != w.shape || r.TensorParallel != w.tp || r.Profile != w.profile {
			t.Errorf("replica %d = %s %s tp %d profile %+v, want %s %s tp %d profile %+v", i, r.Hardware, r.ModelProfile,
				r.TensorParallel, r.Profile, w.hardware, w.shape, w.tp, w.profile)
		}
	}
	served := []struct {
		model string
		want  []bool
	}{
		{model: "meta-llama/Llama-3.3-70B-Instruct", want: []bool{true, true, false, true}},
		{model: "meta-llama/Llama-3.1-8B-Instruct", want: []bool{false, false, true, true}},
		{model: "qwen", want: []bool{false, false, true, true}},
		{model: "never-listed", want: []bool{false, false, false, true}},
	}
	for _, s := range served {
		if got := cfg.ServedBy(s.model); !slices.Equal(got, s.want) {
			t.Errorf("ServedBy(%q) = %v, want %v", s.model, got, s.want)
		}
	}
}

// TestServedByEvery: without model lists, or when every replica lists the
// model, ServedBy is nil (Pick's path for a fleet of one model); a model
// no replica lists is then served by none.
func TestServedByEvery(t *testing.T) {
	tests := []struct {
		name, in, model string
		want            []bool
	}{
		{name: "no lists", in: `{"replicas":[{"name":"a","address":"10.0.0.1:1"},{"name":"b","address":"10.0.0.2:1"}]}`, model: "m"},
		{name: "all list it", in: `{"replicas":[{"name":"a","address":"10.0.0.1:1","models":["m"]},{"name":"b","address":"10.0.0.2:1","models":["x","m"]}]}`,
			model: "m"},
		{name: "none serves it", in: `{"replicas":[{"name":"a","address":"10.0.0.1:1","models":["m"]},{"name":"b","address":"10.0.0.2:1","models":["m"]}]}`,
			model: "other", want: []bool{false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tt.in))
			if err != nil {
				t.Fatalf("Parse(%s) error %v", tt.in, err)
			}
			if got := cfg.ServedBy(tt.model); !slices.Equal(got, tt.want) || (got == nil) != (tt.want == nil) {
				t.Errorf("ServedBy(%q) = %v, want %v", tt.model, got, tt.want)
			}
		})
	}
}

func TestServedByAllocs(t *testing.T) {
	cfg, err := Parse([]byte(mixedFleet))
	if err != nil {
		t.Fatal(err)
	}
	model := []byte("qwen")
	if n := testing.AllocsPerRun(100, func() { _ = cfg.ServedBy(string(model)) }); n != 0 {
		t.Errorf("ServedBy allocates %v times, want 0", n)
	}
}

// TestParseModelProfiles: a shape of the configuration's own prices the
// replicas that name it, as the same shape built in would.
func TestParseModelProfiles(t *testing.T) {
	in := `{"model_profiles":{"my-34b":{"params_b":34.4,"num_hidden_layers":48,"hidden_size":8192,"num_attention_heads":64,` +
		`"num_key_value_heads":8,"head_dim":128},"my-moe":{"params_b":60,"active_params_b":6.5,"num_hidden_layers":40,"hidden_size":4096,` +
		`"num_attention_heads":32,"num_key_value_heads":4,"head_dim":128}},"replicas":[` +
		`{"name":"a","address":"10.0.0.1:1","hardware":"h100","model_profile":"my-34b","tensor_parallel":2},` +
		`{"name":"b","address":"10.0.0.2:1","hardware":"b200","model_profile":"my-moe"},` +
		`{"name":"c","address":"10.0.0.3:1","model_profile":"Llama-3-70B","tensor_parallel":4}]}`
	cfg, err := Parse([]byte(in))
	if err != nil {
		t.Fatalf("Parse error %v", err)
	}
	m34 := scoring.ModelShape{Name: "my-34b", ParamsB: 34.4, Layers: 48, HiddenSize: 8192, AttentionHeads: 64, KVHeads: 8, HeadDim: 128}
	moe := scoring.ModelShape{Name: "my-moe", ParamsB: 60, ActiveParamsB: 6.5, Layers: 40, HiddenSize: 4096, AttentionHeads: 32, KVHeads: 4, HeadDim: 128}
	m70, _ := scoring.LookupModelShape("llama-3-70b")
	for i, w := range []struct {
		hw string
		m  scoring.ModelShape
		tp int
	}{{"h100", m34, 2}, {"b200", moe, 1}, {"h100", m70, 4}} {
		want, err := scoring.NewProfile(w.hw, w.m, w.tp)
		if err != nil {
			t.Fatalf("NewProfile(%s) error %v", w.m.Name, err)
		}
		if r := cfg.Replicas[i]; r.Profile != want || r.ModelProfile != w.m.Name {
			t.Errorf("replica %d = %s %+v, want %s %+v", i, r.ModelProfile, r.Profile, w.m.Name, want)
		}
	}
}

func TestParseModelsRejects(t *testing.T) {
	one := func(fields string) string { return `{"replicas":[{"name":"x","address":"10.0.0.9:9"` + fields + `}]}` }
	shape := func(fields string) string {
		return `{"replicas":[{"name":"x","address":"10.0.0.9:9"}],"model_profiles":{"mine":{` + fields + `}}}`
	}
	const full = `"params_b":34,"num_hidden_layers":48,"hidden_size":8192,"num_attention_heads":64,"num_key_value_heads":8,"head_dim":128`
	tests := []struct {
		name, in, want string
	}{
		{name: "unknown gpu class", in: one(`,"hardware":"h999","models":["m"]`),
			want: `config: replicas[0].hardware "h999" is not a known GPU class (b200, mi300x, h200, h100, a100, l40s, l4)`},
		{name: "models not a list", in: one(`,"models":"m"`), want: `config: replicas[0].models must be an array of model names, got string`},
		{name: "models empty", in: one(`,"models":[]`), want: `config: replicas[0].models must list at least one model (leave it out to serve every model)`},
		{name: "model empty", in: one(`,"models":["m",""]`), want: `config: replicas[0].models[1] must not be empty`},
		{name: "model number", in: one(`,"models":[7]`), want: `config: replicas[0].models[0] must be a string, got number "7"`},
		{name: "model twice", in: one(`,"models":["m","n","m"]`), want: `config: replicas[0].models[2] "m" duplicates replicas[0].models[0]`},
		{name: "model too long", in: one(`,"models":["` + strings.Repeat("m", MaxModelBytes+1) + `"]`),
			want: `config: replicas[0].models[0] "` + strings.Repeat("m", 80) + `"... is 257 bytes, more than the limit of 256`},
		{name: "too many models", in: one(`,"models":[` + manyModels(MaxModelsPerReplica+1) + `]`),
			want: `config: replicas[0].models has more than 64 entries`},
		{name: "model is an adapter", in: `{"replicas":[{"name":"x","address":"10.0.0.9:9","models":["base","sql"]}],"adapters":{"sql":"base"}}`,
			want: `config: replicas[0].models[1] "sql" is an adapter: list its base model "base"`},
		{name: "adapter base served by none", in: `{"adapters":{"sql":"llama"},"replicas":[{"name":"x","address":"10.0.0.9:9","models":["qwen"]}]}`,
			want: `config: adapters entry "sql": no replica serves its base model "llama" (each replica lists its models)`},
		{name: "unknown shape", in: one(`,"model_profile":"llama-4"`),
			want: `config: replicas[0].model_profile "llama-4" is not a model shape (llama-3-8b, llama-3-70b, llama-3-405b, qwen3-32b, qwen3-30b-a3b, mixtral-8x7b)`},
		{name: "empty shape", in: one(`,"model_profile":""`), want: `config: replicas[0].model_profile must not be empty`},
		{name: "tp zero", in: one(`,"tensor_parallel":0`), want: `config: replicas[0].tensor_parallel must be in [1, 64], got 0`},
		{name: "tp string", in: one(`,"tensor_parallel":"4"`), want: `config: replicas[0].tensor_parallel must be a number, got string "4"`},
		{name: "weights do not fit", in: one(`,"hardware":"l40s","model_profile":"llama-3-70b"`),
			want: `config: replicas[0]: scoring: "llama-3-70b" (70.6B parameters, 141.2 GB in BF16) leaves no room for a KV cache on 1 × l40s (0.9 of 48 GB each)`},
		{name: "shapes not an object", in: `{"replicas":[{"name":"x","address":"10.0.0.9:9"}],"model_profiles":[]}`,
			want: `config: model_profiles must be an object of model shape name to shape, got array`},
		{name: "shape named like a built-in", in: `{"replicas":[{"name":"x","address":"10.0.0.9:9"}],"model_profiles":{"Llama-3-8B":{` + full + `}}}`,
			want: `config: model_profiles entry "Llama-3-8B" has the name of a built-in model shape`},
		{name: "shape key missing", in: shape(`"params_b":34`), want: `config: model_profiles.mine.num_hidden_layers is required`},
		{name: "shape key unknown", in: shape(full + `,"layers":48`), want: `config: model_profiles.mine: unknown key "layers"`},
		{name: "shape key twice", in: shape(full + `,"head_dim":64`), want: `config: model_profiles.mine: duplicate key "head_dim"`},
		{name: "params negative", in: shape(`"params_b":-3`), want: `config: model_profiles.mine.params_b must be in (0, 10000], got "-3"`},
		{name: "params string", in: shape(`"params_b":"34"`), want: `config: model_profiles.mine.params_b must be a number, got string "34"`},
		{name: "layers zero", in: shape(`"num_hidden_layers":0`), want: `config: model_profiles.mine.num_hidden_layers must be in [1, 1024], got 0`},
		{name: "active above total", in: shape(full + `,"active_params_b":40`),
			want: `config: model_profiles.mine.active_params_b 40 exceeds params_b 34`},
		{name: "shape name too long", in: `{"replicas":[{"name":"x","address":"10.0.0.9:9"}],"model_profiles":{"` + strings.Repeat("s", 65) + `":{` + full + `}}}`,
			want: `config: model_profiles entry "` + strings.Repeat("s", 65) + `" needs a name of 1 to 64 bytes`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tc.in))
			if err == nil {
				t.Fatalf("Parse(%.80s…) = %+v, want error %q", tc.in, cfg, tc.want)
			}
			if err.Error() != tc.want {
				t.Errorf("Parse(%.80s…) error = %q, want %q", tc.in, err, tc.want)
			}
		})
	}
}

// TestParseMaxModels: the replicas together list at most MaxModels
// distinct models.
func TestParseMaxModels(t *testing.T) {
	var reps []string
	for i := 0; i*MaxModelsPerReplica <= MaxModels; i++ {
		names := make([]string, MaxModelsPerReplica)
		for k := range names {
			names[k] = `"m` + itoa(i*MaxModelsPerReplica+k) + `"`
		}
		reps = append(reps, `{"name":"r`+itoa(i)+`","address":"10.0.0.`+itoa(i+1)+`:1","models":[`+strings.Join(names, ",")+`]}`)
	}
	in := `{"replicas":[` + strings.Join(reps, ",") + `]}`
	_, err := Parse([]byte(in))
	if want := "config: the replicas list more than 256 distinct models"; err == nil || err.Error() != want {
		t.Errorf("Parse(%d replicas of %d models) error = %v, want %q", len(reps), MaxModelsPerReplica, err, want)
	}
}

// manyModels returns n distinct quoted model names, comma-separated.
func manyModels(n int) string {
	names := make([]string, n)
	for i := range names {
		names[i] = `"m` + itoa(i) + `"`
	}
	return strings.Join(names, ",")
}

// TestMaxModelBytes: a model name the configuration accepts is one the
// request parser reads whole.
func TestMaxModelBytes(t *testing.T) {
	if MaxModelBytes != openai.MaxModelBytes {
		t.Errorf("MaxModelBytes = %d, want openai.MaxModelBytes %d", MaxModelBytes, openai.MaxModelBytes)
	}
}
