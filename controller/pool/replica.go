package pool

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuroute/gpuroute/plugin/config"
)

// Annotations read from a Pod, or from its InferencePool or Service as the
// default for every Pod behind it (a Pod's own annotation wins).
const (
	// AnnotationEngine is the replica's engine ("vllm", "sglang", "tgi",
	// "triton", "trtllm-serve"); without it the plugin assumes vllm.
	AnnotationEngine = "gpuroute.io/engine"
	// AnnotationHardware names the replica's cost profile, passed to the
	// plugin unchanged; it wins over the node's GPU label.
	AnnotationHardware = "gpuroute.io/hardware"
	// AnnotationMetricsPort is the port serving Prometheus metrics; without
	// it the serving port (vLLM, SGLang and TGI serve /metrics there).
	AnnotationMetricsPort = "gpuroute.io/metrics-port"
	// AnnotationMetricsPath is the metrics path; without it "/metrics".
	AnnotationMetricsPath = "gpuroute.io/metrics-path"
	// AnnotationReplica is a JSON object of further keys of the replica's
	// entry (adapter_slots, kv_capacity_tokens, metric_names, and whatever
	// the plugin's configuration gains), passed on unchanged.
	AnnotationReplica = "gpuroute.io/replica"
)

// owned are the keys of a replica entry that the controller alone writes.
var owned = []string{config.KeyName, config.KeyAddress, config.KeyMetricsCluster, config.KeyMetricsAddress}

// named are the keys that have an annotation of their own.
var named = []struct{ annotation, key string }{
	{AnnotationEngine, config.KeyEngine},
	{AnnotationHardware, config.KeyHardware},
	{AnnotationMetricsPath, config.KeyMetricsPath},
}

// Replica is one entry of the plugin's replica list.
type Replica struct {
	// Name is the Pod's name, with "-<port>" appended when its pool serves
	// several ports.
	Name    string
	Address netip.AddrPort
	// Fields are the entry's other keys with their JSON values.
	Fields map[string]json.RawMessage
}

// MarshalJSON writes the entry with name and address first, then the other
// keys in order: the output of equal replica lists is byte for byte equal,
// so an unchanged fleet never looks like a change to whoever pushes it.
func (r Replica) MarshalJSON() ([]byte, error) {
	keys := make([]string, 0, len(r.Fields))
	for k := range r.Fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b bytes.Buffer
	b.WriteString(`{"name":`)
	b.WriteString(strconv.Quote(r.Name))
	b.WriteString(`,"address":"`)
	b.WriteString(r.Address.String())
	b.WriteByte('"')
	for _, k := range keys {
		b.WriteByte(',')
		b.WriteString(strconv.Quote(k))
		b.WriteByte(':')
		if err := json.Compact(&b, r.Fields[k]); err != nil {
			return nil, errors.New("pool: replica " + strconv.Quote(r.Name) + " key " + strconv.Quote(k) + ": " + err.Error())
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// Problem is a Pod the controller could not list as it is, and why.
type Problem struct {
	// Pod is "namespace/name" (or the endpoint's address without a Pod).
	Pod string
	Err error
}

func (p Problem) String() string { return p.Pod + ": " + p.Err.Error() }

// Result is a fleet's replica list and what was left out of it.
type Result struct {
	// Replicas are sorted by name.
	Replicas []Replica
	// Excluded are ready Pods left out: a bad annotation, or an entry the
	// plugin would refuse.
	Excluded []Problem
	// Warnings are about replicas listed with a default, such as a GPU
	// label that names no profile this build knows.
	Warnings []Problem
	// NotReady counts the selected Pods or endpoints that are not ready,
	// are terminating or have no address yet.
	NotReady int
}

// Options are the controller's settings that shape every replica.
type Options struct {
	// MetricsCluster, when set, is the Envoy ORIGINAL_DST cluster every
	// replica is scraped through, each replica's entry naming its own
	// metrics_address; empty leaves replicas without metrics (routed on the
	// plugin's own accounting).
	MetricsCluster string
	// Hardware maps a node's GPU label to a profile; the zero value uses
	// DefaultHardware.
	Hardware HardwareMap
}

// source is what one replica is built from.
type source struct {
	name string
	addr netip.Addr
	port int32
	// pod may be nil (an endpoint without a Pod); node may be nil.
	pod  *corev1.Pod
	node *corev1.Node
	// defaults are the annotations of the pool or Service.
	defaults map[string]string
}

// build makes one replica, or says why it cannot.
func build(s source, o Options) (Replica, []error, error) {
	var podAnn map[string]string
	if s.pod != nil {
		podAnn = s.pod.Annotations
	}
	poolLevel, poolPort, err := level(s.defaults)
	if err != nil {
		return Replica{}, nil, errors.New("the pool's annotations: " + err.Error())
	}
	podLevel, podPort, err := level(podAnn)
	if err != nil {
		return Replica{}, nil, err
	}
	fields := poolLevel
	var warnings []error
	if _, set := podLevel[config.KeyHardware]; !set {
		hw, werr := o.Hardware.nodeProfile(s.node)
		if werr != nil {
			warnings = append(warnings, werr)
		}
		if hw != "" {
			fields[config.KeyHardware] = jsonString(hw)
		}
	}
	for k, v := range podLevel {
		fields[k] = v
	}
	metricsPort := s.port
	if podPort != 0 {
		metricsPort = podPort
	} else if poolPort != 0 {
		metricsPort = poolPort
	}
	if o.MetricsCluster != "" {
		fields[config.KeyMetricsCluster] = jsonString(o.MetricsCluster)
		fields[config.KeyMetricsAddress] = jsonString(netip.AddrPortFrom(s.addr, uint16(metricsPort)).String())
	}
	r := Replica{Name: s.name, Address: netip.AddrPortFrom(s.addr, uint16(s.port)), Fields: fields}
	// The plugin's parser is the judge: an entry it refuses is left out
	// here with its words, so the rest of the fleet still gets through.
	entry, err := r.MarshalJSON()
	if err != nil {
		return Replica{}, warnings, err
	}
	if _, err := config.Parse(append(append([]byte(`{"replicas":[`), entry...), "]}"...)); err != nil {
		return Replica{}, warnings, err
	}
	return r, warnings, nil
}

// level reads one level of annotations (a Pod's, or its pool's): the
// replica JSON object, then the keys with annotations of their own, and
// the metrics port (0 if not set). A key given both ways is an error: the
// two would have to be ordered, and neither order is obvious.
func level(ann map[string]string) (map[string]json.RawMessage, int32, error) {
	fields := map[string]json.RawMessage{}
	if js, ok := ann[AnnotationReplica]; ok {
		if err := json.Unmarshal([]byte(js), &fields); err != nil || fields == nil {
			return nil, 0, errors.New("annotation " + AnnotationReplica + " must be a JSON object of replica keys, got " + quote(js))
		}
		for _, k := range owned {
			if _, ok := fields[k]; ok {
				return nil, 0, errors.New("annotation " + AnnotationReplica + " sets " + strconv.Quote(k) + ", which the controller writes")
			}
		}
	}
	for _, n := range named {
		v, ok := ann[n.annotation]
		if !ok {
			continue
		}
		if _, dup := fields[n.key]; dup {
			return nil, 0, errors.New("annotation " + n.annotation + " and the " + strconv.Quote(n.key) + " key of " +
				AnnotationReplica + " both set " + n.key + "; keep one")
		}
		fields[n.key] = jsonString(v)
	}
	var port int32
	if v, ok := ann[AnnotationMetricsPort]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 65535 {
			return nil, 0, errors.New("annotation " + AnnotationMetricsPort + " must be a port number in [1, 65535], got " + quote(v))
		}
		port = int32(n)
	}
	return fields, port, nil
}

// podReady reports whether a Pod takes new requests: it has an IP, is not
// being deleted, and its Ready condition is true.
func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.PodIP == "" {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s) // a string always marshals
	return b
}

// maxQuoted bounds how much of a bad annotation an error repeats.
const maxQuoted = 80

func quote(s string) string {
	if len(s) > maxQuoted {
		return strconv.Quote(s[:maxQuoted]) + "..."
	}
	return strconv.Quote(s)
}
