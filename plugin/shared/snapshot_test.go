package shared

import (
	"bytes"
	"errors"
	"strconv"
	"testing"

	"github.com/gpuroute/gpuroute/plugin/metrics"
)

// testSnapshot builds a deterministic snapshot of n replicas with a adapters each.
func testSnapshot(n, a int) *Snapshot {
	s := &Snapshot{Generation: 7, WrittenNanos: 1_700_000_000_000_000_000, ConfigID: 0xfeedface}
	s.SetLen(n)
	for i := range s.Replicas {
		r := &s.Replicas[i]
		r.ScrapedNanos = int64(1e18) + int64(i)
		r.AttemptNanos = r.ScrapedNanos + 5
		r.Failures = uint32(i % 3)
		r.LastError = ScrapeError(i % 5)
		if r.LastError == ScrapeHTTPStatus {
			r.HTTPStatus = 503
		}
		r.Waiting, r.Running = int32(i), int32(2*i)
		r.KVUsage = float32(i%11) / 10
		r.KVCapacityTokens, r.BlockSizeTokens, r.MaxAdapters = 100000+int32(i), 16, int32(i%4)-1
		for j := 0; j < a; j++ {
			r.Adapters = append(r.Adapters, AdapterState{Name: "tenant-" + strconv.Itoa(i) + "-lora-" + strconv.Itoa(j), Waiting: j%2 == 1})
		}
	}
	return s
}

func snapEqual(a, b *Snapshot) bool {
	if a.Generation != b.Generation || a.WrittenNanos != b.WrittenNanos || a.ConfigID != b.ConfigID || len(a.Replicas) != len(b.Replicas) {
		return false
	}
	for i := range a.Replicas {
		x, y := a.Replicas[i], b.Replicas[i]
		xa, ya := x.Adapters, y.Adapters
		if figs(x) != figs(y) || len(xa) != len(ya) {
			return false
		}
		for j := range xa {
			if xa[j] != ya[j] {
				return false
			}
		}
	}
	return true
}

// replicaFigs is Replica without its slice, so tests can compare with ==.
type replicaFigs struct {
	scraped, attempt                         int64
	failures                                 uint32
	lastError                                ScrapeError
	status                                   uint16
	waiting, running, kvCap, block, maxAdapt int32
	kv                                       float32
}

func figs(r Replica) replicaFigs {
	return replicaFigs{r.ScrapedNanos, r.AttemptNanos, r.Failures, r.LastError, r.HTTPStatus,
		r.Waiting, r.Running, r.KVCapacityTokens, r.BlockSizeTokens, r.MaxAdapters, r.KVUsage}
}

func mustEncode(t testing.TB, s *Snapshot) []byte {
	t.Helper()
	b, err := s.AppendBinary(nil)
	if err != nil {
		t.Fatalf("AppendBinary: %v", err)
	}
	if len(b) != s.EncodedLen() {
		t.Fatalf("len(AppendBinary) = %d, want EncodedLen %d", len(b), s.EncodedLen())
	}
	return b
}

func TestSnapshotRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name     string
		replicas int
		adapters int
	}{
		{name: "empty", replicas: 0},
		{name: "one bare", replicas: 1},
		{name: "64x4", replicas: 64, adapters: 4},
		{name: "max adapters", replicas: 2, adapters: MaxAdapters},
		{name: "max replicas", replicas: MaxReplicas, adapters: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := testSnapshot(tc.replicas, tc.adapters)
			b := mustEncode(t, in)
			var out Snapshot
			if err := out.Decode(b); err != nil {
				t.Fatalf("Decode(AppendBinary(%s)) = %v", tc.name, err)
			}
			if !snapEqual(in, &out) {
				t.Fatalf("Decode(AppendBinary(x)) != x for %s", tc.name)
			}
			if b2 := mustEncode(t, &out); !bytes.Equal(b, b2) {
				t.Fatalf("re-encoding differs for %s", tc.name)
			}
		})
	}
}

func TestSnapshotDecodeReuse(t *testing.T) {
	// Shrinking then growing again keeps the decoded values right even though
	// slices and names are reused from earlier decodes.
	big, small := testSnapshot(8, 6), testSnapshot(3, 2)
	small.Replicas[1].Adapters[0], small.Replicas[1].Adapters[1] = small.Replicas[1].Adapters[1], small.Replicas[1].Adapters[0]
	var s Snapshot
	for _, want := range []*Snapshot{big, small, big, small} {
		if err := s.Decode(mustEncode(t, want)); err != nil {
			t.Fatal(err)
		}
		if !snapEqual(want, &s) {
			t.Fatalf("Decode after reuse: got %d replicas, want %d, values differ", len(s.Replicas), len(want.Replicas))
		}
	}
}

func TestSnapshotEncodeRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(s *Snapshot)
	}{
		{name: "kv usage above 1", mod: func(s *Snapshot) { s.Replicas[0].KVUsage = 1.5 }},
		{name: "kv usage NaN", mod: func(s *Snapshot) { z := float32(0); s.Replicas[0].KVUsage = z / z }},
		{name: "unknown error", mod: func(s *Snapshot) { s.Replicas[0].LastError = 9 }},
		{name: "max adapters -2", mod: func(s *Snapshot) { s.Replicas[0].MaxAdapters = -2 }},
		{name: "empty name", mod: func(s *Snapshot) { s.Replicas[0].Adapters[0].Name = "" }},
		{name: "long name", mod: func(s *Snapshot) { s.Replicas[0].Adapters[0].Name = string(make([]byte, MaxAdapterName+1)) }},
		{name: "too many adapters", mod: func(s *Snapshot) {
			s.Replicas[0].Adapters = make([]AdapterState, MaxAdapters+1)
			for i := range s.Replicas[0].Adapters {
				s.Replicas[0].Adapters[i].Name = "a"
			}
		}},
		{name: "too many replicas", mod: func(s *Snapshot) { s.SetLen(MaxReplicas + 1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testSnapshot(2, 2)
			tc.mod(s)
			b, err := s.AppendBinary([]byte("x"))
			if !errors.Is(err, ErrInvalid) || string(b) != "x" {
				t.Fatalf("AppendBinary(%s) = %q, %v; want unchanged buffer, ErrInvalid", tc.name, b, err)
			}
		})
	}
}

func TestSnapshotDecodeErrors(t *testing.T) {
	good := mustEncode(t, testSnapshot(3, 2))
	set := func(off int, v ...byte) []byte {
		b := bytes.Clone(good)
		copy(b[off:], v)
		return b
	}
	rep0 := snapHeaderLen
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{name: "empty", in: nil, want: ErrShort},
		{name: "magic only", in: []byte("GRFS"), want: ErrShort},
		{name: "bad magic", in: set(0, 'X'), want: ErrMagic},
		{name: "lease value", in: must(Lease{Holder: 1}.AppendBinary(nil)), want: ErrMagic},
		{name: "next version", in: set(4, Version+1), want: ErrVersion},
		{name: "version 0", in: set(4, 0), want: ErrVersion},
		{name: "header cut", in: good[:snapHeaderLen-1], want: ErrShort},
		{name: "count beyond bytes", in: set(snapHeaderLen-2, 200, 0), want: ErrShort},
		{name: "count above max", in: set(snapHeaderLen-2, 0xff, 0xff), want: ErrInvalid},
		{name: "bad last error", in: set(rep0+20, 7), want: ErrInvalid},
		{name: "kv usage NaN", in: set(rep0+31, 0x00, 0x00, 0xc0, 0x7f), want: ErrInvalid},
		{name: "kv usage 2", in: set(rep0+31, 0x00, 0x00, 0x00, 0x40), want: ErrInvalid},
		{name: "max adapters -2", in: set(rep0+43, 0xfe, 0xff, 0xff, 0xff), want: ErrInvalid},
		{name: "adapter count 65", in: set(rep0+47, 65), want: ErrInvalid},
		{name: "adapter flags", in: set(rep0+48, 2), want: ErrInvalid},
		{name: "adapter name length 0", in: set(rep0+49, 0), want: ErrInvalid},
		{name: "trailing byte", in: append(bytes.Clone(good), 0), want: ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testSnapshot(2, 1)
			before := testSnapshot(2, 1)
			err := s.Decode(tc.in)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Decode(%s) = %v, want %v", tc.name, err, tc.want)
			}
			if !snapEqual(s, before) {
				t.Fatalf("Decode(%s) changed the receiver on error", tc.name)
			}
			if err := s.Decode(good); err != nil { // still usable
				t.Fatalf("Decode(good) after error = %v", err)
			}
		})
	}
	// Every strict prefix of a valid value is an error, never a panic.
	for n := 0; n < len(good); n++ {
		var s Snapshot
		if err := s.Decode(good[:n]); err == nil {
			t.Fatalf("Decode(good[:%d]) = nil, want error", n)
		}
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// parse runs the vLLM parser over body.
func parse(t *testing.T, body string) *metrics.Sample {
	t.Helper()
	p, err := metrics.NewParser(metrics.EngineVLLM, metrics.DefaultNames(metrics.EngineVLLM))
	if err != nil {
		t.Fatal(err)
	}
	var s metrics.Sample
	_ = p.Parse([]byte(body), &s)
	return &s
}

const vllmBody = `vllm:num_requests_waiting{model_name="m"} 3
vllm:num_requests_running{model_name="m"} 5
vllm:kv_cache_usage_perc{model_name="m"} 0.25
vllm:cache_config_info{block_size="16",num_gpu_blocks="1000"} 1
vllm:lora_requests_info{max_lora="4",running_lora_adapters="a,b",waiting_lora_adapters="b,c"} 1.7e9
`

func TestApplySample(t *testing.T) {
	var r Replica
	r.Reset()
	if r.MaxAdapters != -1 || r.ScrapedNanos != 0 {
		t.Fatalf("Reset: MaxAdapters = %d, ScrapedNanos = %d; want -1, 0 (never scraped)", r.MaxAdapters, r.ScrapedNanos)
	}
	r.ApplySample(parse(t, vllmBody), 100)
	want := Replica{ScrapedNanos: 100, AttemptNanos: 100, Waiting: 3, Running: 5, KVUsage: 0.25,
		KVCapacityTokens: 16000, BlockSizeTokens: 16, MaxAdapters: 4}
	if figs(r) != figs(want) {
		t.Fatalf("ApplySample(vllm) = %+v, want %+v", r, want)
	}
	wantA := []AdapterState{{Name: "a"}, {Name: "b"}, {Name: "c", Waiting: true}}
	if len(r.Adapters) != len(wantA) {
		t.Fatalf("ApplySample adapters = %v, want %v", r.Adapters, wantA)
	}
	for i := range wantA {
		if r.Adapters[i] != wantA[i] {
			t.Fatalf("ApplySample adapters = %v, want %v", r.Adapters, wantA)
		}
	}

	// A failure keeps every figure and the scrape time.
	for i, f := range []struct {
		kind   ScrapeError
		status uint16
	}{{ScrapeTimeout, 0}, {ScrapeHTTPStatus, 503}, {ScrapeTruncated, 7}} {
		r.ApplyFailure(f.kind, f.status, int64(200+i))
		got := r
		w := want
		w.AttemptNanos, w.Failures, w.LastError = int64(200+i), uint32(i+1), f.kind
		if f.kind == ScrapeHTTPStatus {
			w.HTTPStatus = f.status
		}
		if figs(got) != figs(w) || len(r.Adapters) != 3 {
			t.Fatalf("ApplyFailure(%v, %d) = %+v, want %+v with 3 adapters", f.kind, f.status, got, w)
		}
	}

	// Garbage and truncated bodies count as failures, figures untouched.
	r.ApplySample(parse(t, "<html>oops</html>\n"), 300)
	if r.LastError != ScrapeGarbage || r.Failures != 4 || r.ScrapedNanos != 100 || r.Waiting != 3 {
		t.Fatalf("ApplySample(garbage) = %+v, want failure 4 (garbage) keeping figures", r)
	}
	r.ApplySample(parse(t, "vllm:num_requests_waiting 9\nvllm:num_requests_running 1"), 301)
	if r.LastError != ScrapeTruncated || r.Failures != 5 || r.Waiting != 3 {
		t.Fatalf("ApplySample(truncated) = %+v, want failure 5 (truncated) keeping figures", r)
	}

	// A partial sample (no KV, no adapters) overwrites only what it has.
	r.ApplySample(parse(t, "vllm:num_requests_waiting 9\n"), 400)
	if r.Waiting != 9 || r.Running != 5 || r.KVUsage != 0.25 || len(r.Adapters) != 3 || r.Failures != 0 || r.LastError != ScrapeOK || r.ScrapedNanos != 400 {
		t.Fatalf("ApplySample(partial) = %+v, want Waiting 9 and the rest kept", r)
	}

	// Adapters reorder without allocating new name strings.
	r.ApplySample(parse(t, `vllm:lora_requests_info{max_lora="4",running_lora_adapters="c,a",waiting_lora_adapters=""} 1`+"\n"), 500)
	if len(r.Adapters) != 2 || r.Adapters[0] != (AdapterState{Name: "c"}) || r.Adapters[1] != (AdapterState{Name: "a"}) {
		t.Fatalf("ApplySample(reordered) adapters = %v, want [c a]", r.Adapters)
	}
}

func TestApplySampleAllocs(t *testing.T) {
	s1 := parse(t, vllmBody)
	s2 := parse(t, `vllm:lora_requests_info{max_lora="4",running_lora_adapters="c,b,a",waiting_lora_adapters=""} 1`+"\n")
	var r Replica
	r.Reset()
	r.ApplySample(s1, 1)
	r.ApplySample(s2, 2)
	if n := testing.AllocsPerRun(100, func() { r.ApplySample(s1, 3); r.ApplySample(s2, 4) }); n != 0 {
		t.Fatalf("ApplySample allocs = %v, want 0", n)
	}
}

func TestScrapeErrorString(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   ScrapeError
		want string
	}{{"ok", ScrapeOK, "ok"}, {"http", ScrapeHTTPStatus, "http_status"}, {"unknown", 9, "scrape_error_9"}} {
		if got := tc.in.String(); got != tc.want {
			t.Errorf("ScrapeError(%d).String() = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestConfigIDOf(t *testing.T) {
	a, b := ConfigIDOf([]string{"ab", "c"}), ConfigIDOf([]string{"a", "bc"})
	if a == b || a == 0 || a != ConfigIDOf([]string{"ab", "c"}) {
		t.Fatalf("ConfigIDOf: [ab c] = %x, [a bc] = %x; want distinct, nonzero, stable", a, b)
	}
}
