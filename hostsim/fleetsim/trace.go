package fleetsim

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpuroute/gpuroute/scoring"
)

// MooncakeBlockTokens is the tokens per hash_id in Mooncake traces
// (kvcache-ai/Mooncake FAST25-release/traces README).
const MooncakeBlockTokens = 512

// LoadTrace reads a Mooncake JSONL (.jsonl) or Azure LLM inference CSV
// (.csv) trace; limit > 0 keeps the first limit requests.
func LoadTrace(path string, limit int) (*Workload, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, errors.New("fleetsim: trace: " + err.Error())
	}
	defer f.Close()
	name := filepath.Base(path)
	switch {
	case strings.HasSuffix(path, ".jsonl"):
		return ReadMooncake(f, name, limit)
	case strings.HasSuffix(path, ".csv"):
		return ReadAzure(f, name, limit)
	}
	return nil, errors.New("fleetsim: trace " + quote(path) + " must end in .jsonl (Mooncake) or .csv (Azure)")
}

type mooncakeLine struct {
	Timestamp    *float64 `json:"timestamp"`
	InputLength  int      `json:"input_length"`
	OutputLength int      `json:"output_length"`
	HashIDs      []uint64 `json:"hash_ids"`
}

// ReadMooncake parses a Mooncake trace: per line a timestamp (ms), the input
// and output lengths in tokens, and hash_ids, one per 512-token block, equal
// ids meaning equal prefixes. Each hash id becomes a text segment whose
// content is a function of the id, so requests sharing leading ids share
// their text prefix exactly (the last block is cut to the input length).
// max_tokens is the output length, as trace replays pin it (with ignore_eos).
func ReadMooncake(r io.Reader, name string, limit int) (*Workload, error) {
	w := &Workload{Name: "trace:" + name, Hardware: "h100:16",
		Source: "Mooncake FAST25 trace (kvcache-ai/Mooncake, Apache-2.0)"}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	line := 0
	for sc.Scan() && (limit <= 0 || len(w.Requests) < limit) {
		line++
		b := sc.Bytes()
		if len(strings.TrimSpace(string(b))) == 0 {
			continue
		}
		var m mooncakeLine
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, errors.New("fleetsim: mooncake line " + strconv.Itoa(line) + ": " + err.Error())
		}
		if m.Timestamp == nil || m.InputLength <= 0 || m.OutputLength < 0 {
			return nil, errors.New("fleetsim: mooncake line " + strconv.Itoa(line) +
				": needs timestamp, input_length > 0 and output_length >= 0, got " + quote(string(b[:min(len(b), 80)])))
		}
		segs := make([]Segment, 0, len(m.HashIDs)+1)
		left := m.InputLength
		for _, id := range m.HashIDs {
			if left <= 0 {
				break
			}
			n := min(left, MooncakeBlockTokens)
			segs = append(segs, Segment{Seed: mix64(id + 0x6d6f6f6e63616b65), Tokens: n})
			left -= n
		}
		if left > 0 {
			// More tokens than ids cover: a unique tail.
			segs = append(segs, Segment{Seed: mix64(uint64(line)<<32 | 0xa5a5), Tokens: left})
		}
		out := max(m.OutputLength, 1)
		at := time.Duration(*m.Timestamp * float64(time.Millisecond))
		w.Requests = append(w.Requests, NewRequest(0, at, DefaultModel, "", segs, out, out))
	}
	if err := sc.Err(); err != nil {
		return nil, errors.New("fleetsim: mooncake: " + err.Error())
	}
	if len(w.Requests) == 0 {
		return nil, errors.New("fleetsim: mooncake trace " + quote(name) + " has no requests")
	}
	return w.finish(), nil
}

// azureTimeLayout is the Azure LLM inference trace timestamp format
// ("2023-11-16 18:17:03.9799600").
const azureTimeLayout = "2006-01-02 15:04:05.9999999"

// ReadAzure parses an Azure LLM inference trace (Azure/AzurePublicDataset,
// AzureLLMInferenceTrace 2023; Patel et al., Splitwise, ISCA'24): TIMESTAMP,
// ContextTokens, GeneratedTokens. It has no prefix information, so every
// prompt is unique text.
func ReadAzure(r io.Reader, name string, limit int) (*Workload, error) {
	w := &Workload{Name: "trace:" + name, Hardware: "h100:4",
		Source: "Azure LLM inference trace 2023 (Azure/AzurePublicDataset, CC-BY-4.0; Splitwise, ISCA'24)"}
	cr := csv.NewReader(r)
	head, err := cr.Read()
	if err != nil {
		return nil, errors.New("fleetsim: azure: " + err.Error())
	}
	if len(head) < 3 || head[0] != "TIMESTAMP" {
		return nil, errors.New("fleetsim: azure header must be TIMESTAMP,ContextTokens,GeneratedTokens, got " + quote(strings.Join(head, ",")))
	}
	var t0 time.Time
	for line := 2; limit <= 0 || len(w.Requests) < limit; line++ {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, errors.New("fleetsim: azure: " + err.Error())
		}
		ts, err1 := time.Parse(azureTimeLayout, rec[0])
		in, err2 := strconv.Atoi(rec[1])
		out, err3 := strconv.Atoi(rec[2])
		if err := errors.Join(err1, err2, err3); err != nil || in <= 0 {
			return nil, errors.New("fleetsim: azure line " + strconv.Itoa(line) + ": bad record " + quote(strings.Join(rec, ",")))
		}
		if t0.IsZero() {
			t0 = ts
		}
		segs := []Segment{{Seed: mix64(uint64(line)*0x9e3779b97f4a7c15 + 0x617a), Tokens: in}}
		out = max(out, 1)
		w.Requests = append(w.Requests, NewRequest(0, ts.Sub(t0), DefaultModel, "", segs, out, out))
	}
	if len(w.Requests) == 0 {
		return nil, errors.New("fleetsim: azure trace " + quote(name) + " has no requests")
	}
	return w.finish(), nil
}

// UniformReplicas returns n replicas of the named hardware profile.
func UniformReplicas(n int, hardware string) []ReplicaConfig {
	h, ok := scoring.LookupHardware(hardware)
	if !ok {
		h = scoring.DefaultHardware()
	}
	out := make([]ReplicaConfig, n)
	for i := range out {
		out[i] = ReplicaConfig{Hardware: h}
	}
	return out
}

// ParseHardware reads a fleet spec: "h100" (with replicas giving the count),
// or "h100:4,a100:2,l4:2" (counts per profile; replicas, if > 0, must match
// the total or is filled by repeating the list). A part may name the model
// shape its replicas serve and their tensor-parallel degree,
// "[TPx]GPU[/SHAPE][:COUNT]": "4xh100/llama-3-70b:2" is two replicas of
// Llama-3-70B on four H100s each, serving Model70B (scoring.NewProfile
// prices them); without a shape a replica serves DefaultModel as the
// reference model on one GPU.
func ParseHardware(spec string, replicas int) ([]ReplicaConfig, error) {
	var out []ReplicaConfig
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, count, hasCount := strings.Cut(part, ":")
		rc, err := parseReplicaSpec(name)
		if err != nil {
			return nil, err
		}
		n := 1
		if hasCount {
			v, err := strconv.Atoi(count)
			if err != nil || v <= 0 {
				return nil, errors.New("fleetsim: hardware count in " + quote(part) + " must be a positive integer")
			}
			n = v
		} else if replicas > 0 && !strings.Contains(spec, ",") {
			n = replicas
		}
		for i := 0; i < n; i++ {
			out = append(out, rc)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("fleetsim: empty hardware spec " + quote(spec))
	}
	if replicas > 0 && len(out) != replicas {
		base := out
		out = make([]ReplicaConfig, replicas)
		for i := range out {
			out[i] = base[i%len(base)]
		}
	}
	return out, nil
}

// parseReplicaSpec reads "[TPx]GPU[/SHAPE]" (ParseHardware).
func parseReplicaSpec(spec string) (ReplicaConfig, error) {
	gpu, shapeName, hasShape := strings.Cut(spec, "/")
	tp := 1
	if k := strings.IndexByte(gpu, 'x'); k > 0 {
		if v, err := strconv.Atoi(gpu[:k]); err == nil {
			if v <= 0 {
				return ReplicaConfig{}, errors.New("fleetsim: tensor parallel degree in " + quote(spec) + " must be positive")
			}
			tp, gpu = v, gpu[k+1:]
		}
	}
	if _, ok := scoring.LookupHardware(gpu); !ok {
		return ReplicaConfig{}, errors.New("fleetsim: hardware " + quote(gpu) + " is not a profile (have " +
			strings.Join(scoring.HardwareNames(), ", ") + ")")
	}
	shape, model := scoring.ReferenceModel, DefaultModel
	if hasShape {
		shape, model = shapeName, shapeName
		if m, ok := shapeModels[shapeName]; ok {
			model = m
		}
	}
	m, ok := scoring.LookupModelShape(shape)
	if !ok {
		return ReplicaConfig{}, errors.New("fleetsim: model shape " + quote(shape) + " in " + quote(spec) + " is not one of " +
			strings.Join(scoring.ModelShapeNames(), ", "))
	}
	h, err := scoring.NewProfile(gpu, m, tp)
	if err != nil {
		return ReplicaConfig{}, errors.New("fleetsim: " + quote(spec) + ": " + err.Error())
	}
	return ReplicaConfig{Hardware: h, Model: model, Shape: m.Name, TensorParallel: tp}, nil
}
