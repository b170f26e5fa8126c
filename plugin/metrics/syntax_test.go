package metrics

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// syntaxCases exercise the exposition-format corners on small vLLM bodies.
// crlf marks bodies expfmt rejects on purpose (CRLF leniency) and so are left
// out of the expfmt cross-check.
var syntaxCases = []struct {
	name    string
	body    string
	want    view
	wantErr error
	crlf    bool
}{
	{
		name: "escaped label values",
		body: "vllm:num_requests_waiting{model_name=\"a\\\"b\\\\c\\nd\"} 3\n",
		want: view{Present: FieldWaiting, Waiting: 3},
	},
	{
		name: "created companion ignored",
		body: "# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total 5\nvllm:prompt_tokens_created 1.7e+09\n",
		want: view{Present: FieldPromptTokens, PromptTokensTotal: 5},
	},
	{
		name: "timestamp after value",
		body: "vllm:num_requests_waiting 4 1700000000000\nvllm:num_requests_running{a=\"b\"} 2 -5\n",
		want: view{Present: FieldWaiting | FieldRunning, Waiting: 4, Running: 2},
	},
	{
		name: "bad timestamp", wantErr: ErrBadLine,
		body: "vllm:num_requests_waiting 4 soon\nvllm:num_requests_running 2\n",
		want: view{Present: FieldRunning, Running: 2, Problems: ProblemBadLine, BadLines: 1, FirstBadLine: 1},
	},
	{
		name: "NaN and Inf skipped",
		body: "vllm:kv_cache_usage_perc{engine=\"0\"} NaN\nvllm:kv_cache_usage_perc{engine=\"1\"} 0.5\nvllm:num_requests_waiting +Inf\n",
		want: view{Present: FieldKVUsage, KVUsage: 0.5},
	},
	{
		name: "scientific notation",
		body: "vllm:num_requests_waiting 1.2e1\nvllm:num_requests_running 3E0\n",
		want: view{Present: FieldWaiting | FieldRunning, Waiting: 12, Running: 3},
	},
	{
		name: "CRLF", crlf: true,
		body: "# HELP x y\r\nvllm:num_requests_waiting 6\r\n\r\nvllm:num_requests_running{a=\"b\"} 1 123\r\n",
		want: view{Present: FieldWaiting | FieldRunning, Waiting: 6, Running: 1},
	},
	{
		name: "blank lines and indentation",
		body: "\n\n   \t\n  vllm:num_requests_waiting 2\n\t# comment\n",
		want: view{Present: FieldWaiting, Waiting: 2},
	},
	{
		name: "truncated last line", wantErr: ErrTruncated,
		body: "vllm:num_requests_waiting 12\nvllm:num_requests_running 3",
		want: view{Present: FieldWaiting, Waiting: 12, Problems: ProblemTruncated},
	},
	{
		name: "truncated inside labels", wantErr: ErrTruncated,
		body: "vllm:num_requests_waiting 12\nvllm:num_requests_running{model_name=\"ab",
		want: view{Present: FieldWaiting, Waiting: 12, Problems: ProblemTruncated},
	},
	{
		name: "html error page", wantErr: ErrNoSamples,
		body: "<html><body>502 Bad Gateway</body></html>\n",
		want: view{Problems: ProblemBadLine | ProblemNoSamples, BadLines: 1, FirstBadLine: 1},
	},
	{
		name: "empty", wantErr: ErrNoSamples,
		body: "",
		want: view{Problems: ProblemNoSamples},
	},
	{
		name: "hex float rejected", wantErr: ErrBadLine,
		body: "vllm:num_requests_waiting 0x1p3\nvllm:num_requests_running 1\n",
		want: view{Present: FieldRunning, Running: 1, Problems: ProblemBadLine, BadLines: 1, FirstBadLine: 1},
	},
	{
		name: "v1 name wins over v0",
		body: "vllm:gpu_cache_usage_perc 0.9\nvllm:kv_cache_usage_perc 0.25\n",
		want: view{Present: FieldKVUsage, KVUsage: 0.25},
	},
	{
		name: "data-parallel engines add up, usage averages",
		body: "vllm:num_requests_waiting{engine=\"0\"} 3\nvllm:num_requests_waiting{engine=\"1\"} 4\n" +
			"vllm:kv_cache_usage_perc{engine=\"0\"} 0.25\nvllm:kv_cache_usage_perc{engine=\"1\"} 0.75\n",
		want: view{Present: FieldWaiting | FieldKVUsage, Waiting: 7, KVUsage: 0.5},
	},
	{
		name: "quoted UTF-8 metric name",
		body: "{\"vllm:num_requests_waiting\", engine=\"0\"} 5\n{\"vllm:num_requests_running\"} 2\n",
		want: view{Present: FieldWaiting | FieldRunning, Waiting: 5, Running: 2},
	},
	{
		name: "usage clamped, negative count floored",
		body: "vllm:kv_cache_usage_perc 1.5\nvllm:num_requests_waiting -3\n",
		want: view{Present: FieldKVUsage | FieldWaiting, KVUsage: 1},
	},
	{
		name: "lora escaped names and tie keeps first",
		body: "vllm:lora_requests_info{max_lora=\"4\",running_lora_adapters=\"x\\\\y,z\\\"q\",waiting_lora_adapters=\"\"} 5\n" +
			"vllm:lora_requests_info{max_lora=\"4\",running_lora_adapters=\"other\",waiting_lora_adapters=\"w\"} 5\n",
		want: view{Present: FieldAdapters | FieldMaxAdapters, MaxAdapters: 4,
			RunningAdapters: []string{`x\y`, `z"q`}},
	},
	{
		name: "cache config without blocks",
		body: "vllm:cache_config_info{block_size=\"32\",num_gpu_blocks=\"None\"} 1.0\n",
		want: view{Present: FieldBlockSizeTokens, BlockSizeTokens: 32},
	},
	{
		name: "cache config summed over engines",
		body: "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"1000\",engine=\"0\"} 1\n" +
			"vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"1000\",engine=\"1\"} 1\n",
		want: view{Present: FieldBlockSizeTokens | FieldKVBlocks | FieldKVCapacityTokens,
			BlockSizeTokens: 16, KVBlocks: 2000, KVCapacityTokens: 32000},
	},
	{
		name: "trailing comma and spaces in labels",
		body: "vllm:num_requests_waiting { model_name = \"m\" , } 9\n",
		want: view{Present: FieldWaiting, Waiting: 9},
	},
	{
		name: "duplicate label rejected", wantErr: ErrBadLine,
		body: "vllm:num_requests_waiting{a=\"1\",a=\"2\"} 9\nvllm:num_requests_running 1\n",
		want: view{Present: FieldRunning, Running: 1, Problems: ProblemBadLine, BadLines: 1, FirstBadLine: 1},
	},
	{
		name: "invalid escape rejected", wantErr: ErrBadLine,
		body: "vllm:num_requests_waiting{a=\"\\t\"} 9\nvllm:num_requests_running 1\n",
		want: view{Present: FieldRunning, Running: 1, Problems: ProblemBadLine, BadLines: 1, FirstBadLine: 1},
	},
	{
		name: "missing value rejected", wantErr: ErrBadLine,
		body: "vllm:num_requests_waiting{a=\"1\"}\nvllm:num_requests_running 1\n",
		want: view{Present: FieldRunning, Running: 1, Problems: ProblemBadLine, BadLines: 1, FirstBadLine: 1},
	},
}

func TestParseSyntax(t *testing.T) {
	p := mustParser(t, EngineVLLM)
	var s Sample // reused on purpose: no state may leak between parses
	for _, tc := range syntaxCases {
		t.Run(tc.name, func(t *testing.T) {
			err := p.Parse([]byte(tc.body), &s)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Errorf("Parse(%q) error = %v, want %v", tc.body, err, tc.wantErr)
			}
			if got := viewOf(&s); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Parse(%q) =\n%+v\nwant\n%+v", tc.body, got, tc.want)
			}
		})
	}
}

func TestParseLongLine(t *testing.T) {
	long := strings.Repeat("x", 1<<20)
	body := "vllm:num_requests_waiting{model_name=\"" + long + "\"} 3\n" +
		"vllm:lora_requests_info{running_lora_adapters=\"" + long + "\",max_lora=\"2\"} 1\n"
	p := mustParser(t, EngineVLLM)
	var s Sample
	if err := p.Parse([]byte(body), &s); err != nil {
		t.Fatalf("Parse(1 MiB label) error = %v", err)
	}
	if s.Waiting != 3 || len(s.RunningAdapters) != 1 {
		t.Fatalf("Parse(1 MiB label): waiting %d adapters %d, want 3 and 1", s.Waiting, len(s.RunningAdapters))
	}
	a := &s.RunningAdapters[0]
	if !a.Truncated() || string(a.Name()) != long[:AdapterNameCap] {
		t.Errorf("long adapter: truncated %v name %q, want true %q", a.Truncated(), a.Name(), long[:AdapterNameCap])
	}
	if s.Problems&ProblemAdapterOverflow == 0 {
		t.Errorf("long adapter: Problems = %b, want ProblemAdapterOverflow", s.Problems)
	}
}

func TestParseAdapterOverflow(t *testing.T) {
	var list []string
	for i := 0; i < MaxAdapterList+6; i++ {
		list = append(list, "a"+strings.Repeat("b", i%5)+string(rune('A'+i%26)))
	}
	body := "vllm:lora_requests_info{running_lora_adapters=\"" + strings.Join(list, ",") + "\"} 1\n"
	p := mustParser(t, EngineVLLM)
	var s Sample
	_ = p.Parse([]byte(body), &s)
	if len(s.RunningAdapters) != MaxAdapterList || s.Problems&ProblemAdapterOverflow == 0 {
		t.Errorf("Parse(%d adapters): kept %d, problems %b; want %d and overflow",
			len(list), len(s.RunningAdapters), s.Problems, MaxAdapterList)
	}
}

func TestFixtureWaitingAdapters(t *testing.T) {
	p := mustParser(t, EngineVLLM)
	var s Sample
	_ = p.Parse(readFixture(t, fxVLLMSim), &s)
	for i, want := range []string{"lora5", "lora6"} {
		if got := s.WaitingAdapters[i].String(); got != want {
			t.Errorf("Parse(%s).WaitingAdapters[%d] = %q, want %q", fxVLLMSim, i, got, want)
		}
	}
}

func TestParseErrorMessage(t *testing.T) {
	p := mustParser(t, EngineVLLM)
	var s Sample
	tests := []struct {
		name, body, want string
	}{
		{"bad line", "vllm:num_requests_running 1\nvllm:num_requests_waiting{x=\"1\"}\n",
			`metrics: 1 invalid line(s) skipped, first is line 2: "vllm:num_requests_waiting{x=\"1\"}"`},
		{"truncated", "vllm:num_requests_running 1\nvllm:num_req",
			`metrics: body truncated, last line 2 has no newline and was ignored: "vllm:num_req"`},
		{"garbage", "<html>\n",
			`metrics: no valid sample of a metric read in 7-byte body, first bad line 1: "<html>"`},
		{"another engine's page", "tgi_queue_size 3\ntgi_batch_current_size 8\n",
			`metrics: no valid sample of a metric read in 42-byte body`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := p.Parse([]byte(tc.body), &s)
			if err == nil || err.Error() != tc.want {
				t.Errorf("Parse(%q) error = %v, want %s", tc.body, err, tc.want)
			}
		})
	}
}

func TestParseEngine(t *testing.T) {
	tests := []struct {
		name, in string
		want     Engine
		wantErr  bool
	}{
		{"vllm", "vllm", EngineVLLM, false},
		{"vllm v0 alias", "vLLM-V0", EngineVLLM, false},
		{"sglang", " SGLang ", EngineSGLang, false},
		{"tgi", "text-generation-inference", EngineTGI, false},
		{"triton", "triton", EngineTriton, false},
		{"trtllm-serve", "trtllm-serve", EngineTRTLLM, false},
		{"unknown", "ollama", EngineUnknown, true},
		{"empty", "", EngineUnknown, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseEngine(tc.in)
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Errorf("ParseEngine(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
			}
			if err == nil {
				if back, _ := ParseEngine(got.String()); back != got {
					t.Errorf("ParseEngine(%q.String()) = %v, want %v", got, back, got)
				}
			}
		})
	}
}

func TestNewParserRejects(t *testing.T) {
	bad := DefaultNames(EngineVLLM)
	bad.Waiting = Source{Label: "request_type", Value: "waiting"}
	tests := []struct {
		name  string
		e     Engine
		names Names
	}{
		{"unknown engine", EngineUnknown, DefaultNames(EngineVLLM)},
		{"label without metric", EngineVLLM, bad},
		{"invalid utf8", EngineVLLM, Names{Waiting: Source{Metric: "\xff"}}},
		{"value without label", EngineVLLM, Names{Waiting: Source{Metric: "m", Value: "v"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewParser(tc.e, tc.names); err == nil {
				t.Errorf("NewParser(%v, %+v) = nil error, want one", tc.e, tc.names)
			}
		})
	}
}

// TestNamesOverride shows configuration renaming a metric: Dynamo re-exports
// trtllm-serve's gauges with a "trtllm:" prefix. A name shorter than the 8
// bytes unread lines are told apart by is read too, on lines long enough
// to be checked that way and on shorter ones.
func TestNamesOverride(t *testing.T) {
	tests := []struct {
		name, waiting string
		engine        Engine
		bodies        []string
	}{
		{name: "dynamo prefix", waiting: "trtllm:num_requests_waiting", engine: EngineTRTLLM,
			bodies: []string{"trtllm:num_requests_waiting 5\ntrtllm_num_requests_waiting 9\n"}},
		{name: "short name", waiting: "wait", engine: EngineVLLM,
			bodies: []string{"wait{model_name=\"m\"} 5\n", "wait 5\n", "waiting_other 9\nwait 5\n"}},
	}
	for _, tt := range tests {
		n := DefaultNames(tt.engine)
		n.Waiting.Metric = tt.waiting
		p, err := NewParser(tt.engine, n)
		if err != nil {
			t.Fatalf("%s: NewParser = %v", tt.name, err)
		}
		for _, body := range tt.bodies {
			var s Sample
			_ = p.Parse([]byte(body), &s)
			if !s.Has(FieldWaiting) || s.Waiting != 5 {
				t.Errorf("%s: Parse(%q): waiting = %d (present %v), want 5", tt.name, body, s.Waiting, s.Has(FieldWaiting))
			}
		}
	}
}

// quotedBytewise is quoted as a byte loop: the reference for its
// eight-bytes-a-step scan.
func quotedBytewise(b []byte, i, end int) (sp span, next int, ok bool) {
	i++
	start, esc := i, false
	for i < end {
		switch b[i] {
		case '"':
			if !utf8.Valid(b[start:i]) {
				return span{}, 0, false
			}
			return span{start: int32(start), end: int32(i), esc: esc, ok: true}, i + 1, true
		case '\\':
			if i+1 >= end || (b[i+1] != '\\' && b[i+1] != '"' && b[i+1] != 'n') {
				return span{}, 0, false
			}
			esc = true
			i += 2
		default:
			i++
		}
	}
	return span{}, 0, false
}

// TestQuotedMatchesBytewise runs quoted over strings whose quote, escapes,
// non-ASCII and invalid UTF-8 bytes fall at every offset of the words it
// reads, and over ends cut at every length.
func TestQuotedMatchesBytewise(t *testing.T) {
	pieces := []string{"a", "model-7b", `\"`, `\\`, `\n`, `\t`, "é", "\xff", "\xe2\x82", "€", `"`, "\x01", "/"}
	for n := 0; n < 4000; n++ {
		// A deterministic mix: n's digits in base len(pieces) pick the pieces.
		body := []byte{'"'}
		for k := n; ; k /= len(pieces) {
			body = append(body, pieces[k%len(pieces)]...)
			if k < len(pieces) {
				break
			}
		}
		body = append(body, "pad\"} 1"...)
		for end := 1; end <= len(body); end++ {
			gotSp, gotNext, gotOK := quoted(body, 0, end)
			wantSp, wantNext, wantOK := quotedBytewise(body, 0, end)
			if gotSp != wantSp || gotNext != wantNext || gotOK != wantOK {
				t.Fatalf("quoted(%q, 0, %d) = %+v, %d, %v, want %+v, %d, %v",
					body, end, gotSp, gotNext, gotOK, wantSp, wantNext, wantOK)
			}
		}
	}
}

// TestSameString compares sameString with == on every length up to 24 and
// a difference at every position.
func TestSameString(t *testing.T) {
	const text = "vllm:num_requests_waiting"
	for n := 0; n <= 24; n++ {
		want := text[:n]
		if !sameString([]byte(want), want) {
			t.Errorf("sameString(%q, %q) = false, want true", want, want)
		}
		for i := 0; i < n; i++ {
			raw := []byte(want)
			raw[i] ^= 0x20
			if sameString(raw, want) {
				t.Errorf("sameString(%q, %q) = true, want false", raw, want)
			}
		}
		if n > 0 && sameString([]byte(want[:n-1]), want) {
			t.Errorf("sameString(%q, %q) = true, want false", want[:n-1], want)
		}
	}
}
