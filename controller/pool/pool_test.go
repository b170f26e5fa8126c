package pool

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// pod returns a ready Pod of namespace "llm" labelled app=vllm on node,
// with the given annotations; change makes it otherwise.
func pod(name, ip, node string, ann map[string]string, change ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "llm", Name: name, Labels: map[string]string{"app": "vllm"}, Annotations: ann},
		Spec:       corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	for _, c := range change {
		c(p)
	}
	return p
}

func notReady(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }
func deleting(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} }
func noIP(p *corev1.Pod)     { p.Status.PodIP = "" }
func elsewhere(p *corev1.Pod) {
	p.Namespace = "other"
}
func unlabelled(p *corev1.Pod) { p.Labels = map[string]string{"app": "sglang"} }

// gpuNodes are nodes labelled the way GPU feature discovery, AMD's node
// labeller and GKE label them.
var gpuNodes = map[string]*corev1.Node{
	"h100":   node("h100", LabelNVIDIAProduct, "NVIDIA-H100-80GB-HBM3"),
	"a100":   node("a100", LabelNVIDIAProduct, "NVIDIA-A100-SXM4-80GB"),
	"l40s":   node("l40s", LabelNVIDIAProduct, "NVIDIA-L40S"),
	"mig":    node("mig", LabelNVIDIAProduct, "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb"),
	"shared": node("shared", LabelNVIDIAProduct, "NVIDIA-H100-80GB-HBM3-SHARED"),
	"h200":   node("h200", LabelNVIDIAProduct, "NVIDIA-H200"),
	"mi300x": node("mi300x", LabelAMDProduct, "AMD_Instinct_MI300X_OAM"),
	"gke-l4": node("gke-l4", LabelGKEAccelerator, "nvidia-l4"),
	"t4":     node("t4", LabelNVIDIAProduct, "Tesla-T4"),
	"cpu":    node("cpu", "kubernetes.io/arch", "amd64"),
}

func node(name, label, value string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{label: value}}}
}

func nodes(name string) *corev1.Node { return gpuNodes[name] }

var llama = Pool{Namespace: "llm", Name: "llama", Selector: map[string]string{"app": "vllm"}, TargetPorts: []int32{8000}}

// listed renders replicas as the plugin configuration lists them.
func listed(t *testing.T, rs []Replica) string {
	t.Helper()
	b, err := json.Marshal(rs)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func problems(ps []Problem) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.String())
	}
	return strings.Join(s, "\n")
}

// checkResult compares a result with the replicas (JSON), excluded Pods and
// warnings (lines) and not-ready count wanted.
func checkResult(t *testing.T, fn string, res Result, replicas, excluded, warnings string, notReady int) {
	t.Helper()
	if got := listed(t, res.Replicas); got != replicas {
		t.Errorf("%s replicas =\n%s\nwant\n%s", fn, got, replicas)
	}
	if got := problems(res.Excluded); got != excluded {
		t.Errorf("%s excluded =\n%s\nwant\n%s", fn, got, excluded)
	}
	if got := problems(res.Warnings); got != warnings {
		t.Errorf("%s warnings =\n%s\nwant\n%s", fn, got, warnings)
	}
	if res.NotReady != notReady {
		t.Errorf("%s not ready = %d, want %d", fn, res.NotReady, notReady)
	}
}

func TestFromInferencePool(t *testing.T) {
	withPorts := llama
	withPorts.TargetPorts = []int32{8000, 8001}
	sglangPool := llama
	sglangPool.Annotations = map[string]string{AnnotationEngine: "sglang", AnnotationMetricsPort: "9000"}
	tests := []struct {
		name     string
		pool     Pool
		pods     []*corev1.Pod
		opts     Options
		want     string // the replicas as JSON
		excluded string
		warnings string
		notReady int
	}{
		{name: "exactly the ready pods",
			pods: []*corev1.Pod{
				pod("vllm-a", "10.0.0.1", "", nil), pod("vllm-b", "10.0.0.2", "", nil, notReady),
				pod("vllm-c", "10.0.0.3", "", nil, deleting), pod("vllm-d", "", "", nil, noIP),
				pod("vllm-e", "10.0.0.5", "", nil, elsewhere), pod("vllm-f", "10.0.0.6", "", nil, unlabelled),
				pod("vllm-g", "10.0.0.7", "", nil),
			},
			want:     `[{"name":"vllm-a","address":"10.0.0.1:8000"},{"name":"vllm-g","address":"10.0.0.7:8000"}]`,
			notReady: 3},
		{name: "hardware from the node's GPU label",
			pods: []*corev1.Pod{pod("p1", "10.0.0.1", "h100", nil), pod("p2", "10.0.0.2", "a100", nil),
				pod("p3", "10.0.0.3", "l40s", nil), pod("p4", "10.0.0.4", "gke-l4", nil), pod("p5", "10.0.0.5", "cpu", nil),
				pod("p6", "10.0.0.6", "gone", nil)},
			want: `[{"name":"p1","address":"10.0.0.1:8000","hardware":"h100"},{"name":"p2","address":"10.0.0.2:8000","hardware":"a100"},` +
				`{"name":"p3","address":"10.0.0.3:8000","hardware":"l40s"},{"name":"p4","address":"10.0.0.4:8000","hardware":"l4"},` +
				`{"name":"p5","address":"10.0.0.5:8000"},{"name":"p6","address":"10.0.0.6:8000"}]`},
		{name: "H200 and MI300X have profiles; other GPU labels keep the default, with a warning",
			pods: []*corev1.Pod{pod("p1", "10.0.0.1", "mig", nil), pod("p2", "10.0.0.2", "h200", nil),
				pod("p3", "10.0.0.3", "mi300x", nil), pod("p4", "10.0.0.4", "t4", nil), pod("p5", "10.0.0.5", "shared", nil)},
			want: `[{"name":"p1","address":"10.0.0.1:8000"},{"name":"p2","address":"10.0.0.2:8000","hardware":"h200"},{"name":"p3","address":"10.0.0.3:8000","hardware":"mi300x"},` +
				`{"name":"p4","address":"10.0.0.4:8000"},{"name":"p5","address":"10.0.0.5:8000"}]`,
			warnings: `llm/p1: node mig label nvidia.com/gpu.product="NVIDIA-A100-SXM4-80GB-MIG-3g.40gb": a fraction of a GPU (MIG) has no profile; the plugin's default profile applies` + "\n" +
				`llm/p4: node t4 label nvidia.com/gpu.product="Tesla-T4": no profile for this GPU (give one with --hardware-map or the gpuroute.io/hardware annotation); the plugin's default profile applies` + "\n" +
				`llm/p5: node shared label nvidia.com/gpu.product="NVIDIA-H100-80GB-HBM3-SHARED": a fraction of a GPU (SHARED) has no profile; the plugin's default profile applies`},
		{name: "an exact product mapping wins and passes through",
			pods: []*corev1.Pod{pod("p1", "10.0.0.1", "t4", nil), pod("p2", "10.0.0.2", "h100", nil)},
			opts: Options{Hardware: HardwareMap{Products: map[string]string{"Tesla-T4": "l4", "NVIDIA-H100-80GB-HBM3": "a100"}}},
			want: `[{"name":"p1","address":"10.0.0.1:8000","hardware":"l4"},{"name":"p2","address":"10.0.0.2:8000","hardware":"a100"}]`},
		{name: "the hardware annotation wins over the node and passes through",
			pods: []*corev1.Pod{pod("p1", "10.0.0.1", "h100", map[string]string{AnnotationHardware: "L40S"})},
			want: `[{"name":"p1","address":"10.0.0.1:8000","hardware":"L40S"}]`},
		{name: "an unknown hardware annotation leaves that pod out with the plugin's words",
			pods:     []*corev1.Pod{pod("p1", "10.0.0.1", "h100", map[string]string{AnnotationHardware: "h999"}), pod("p2", "10.0.0.2", "a100", nil)},
			want:     `[{"name":"p2","address":"10.0.0.2:8000","hardware":"a100"}]`,
			excluded: `llm/p1: config: replicas[0].hardware "h999" is not a known GPU class (b200, mi300x, h200, h100, a100, l40s, l4)`},
		{name: "engine and metrics port from the pool, a pod's own annotation wins",
			pool: sglangPool,
			pods: []*corev1.Pod{pod("p1", "10.0.0.1", "", nil), pod("p2", "10.0.0.2", "", map[string]string{AnnotationEngine: "vllm", AnnotationMetricsPort: "8000", AnnotationMetricsPath: "/prometheus/metrics"})},
			opts: Options{MetricsCluster: "gpuroute_metrics"},
			want: `[{"name":"p1","address":"10.0.0.1:8000","engine":"sglang","metrics_address":"10.0.0.1:9000","metrics_cluster":"gpuroute_metrics"},` +
				`{"name":"p2","address":"10.0.0.2:8000","engine":"vllm","metrics_address":"10.0.0.2:8000","metrics_cluster":"gpuroute_metrics","metrics_path":"/prometheus/metrics"}]`},
		{name: "the node's label wins over the pool's hardware, the pod's over both",
			pool: Pool{Namespace: "llm", Name: "llama", Selector: map[string]string{"app": "vllm"}, TargetPorts: []int32{8000},
				Annotations: map[string]string{AnnotationHardware: "l4"}},
			pods:     []*corev1.Pod{pod("p1", "10.0.0.1", "a100", nil), pod("p2", "10.0.0.2", "t4", nil), pod("p3", "10.0.0.3", "a100", map[string]string{AnnotationHardware: "h100"})},
			want:     `[{"name":"p1","address":"10.0.0.1:8000","hardware":"a100"},{"name":"p2","address":"10.0.0.2:8000","hardware":"l4"},{"name":"p3","address":"10.0.0.3:8000","hardware":"h100"}]`,
			warnings: `llm/p2: node t4 label nvidia.com/gpu.product="Tesla-T4": no profile for this GPU (give one with --hardware-map or the gpuroute.io/hardware annotation); the plugin's default profile applies`},
		{name: "metrics through the shared cluster on the serving port by default",
			pods: []*corev1.Pod{pod("p1", "fd00::1", "", nil)}, opts: Options{MetricsCluster: "gpuroute_metrics"},
			want: `[{"name":"p1","address":"[fd00::1]:8000","metrics_address":"[fd00::1]:8000","metrics_cluster":"gpuroute_metrics"}]`},
		{name: "a replica per pod and port",
			pool: withPorts, pods: []*corev1.Pod{pod("p1", "10.0.0.1", "", nil)},
			want: `[{"name":"p1-8000","address":"10.0.0.1:8000"},{"name":"p1-8001","address":"10.0.0.1:8001"}]`},
		{name: "further replica keys pass through unchanged",
			pods: []*corev1.Pod{pod("p1", "10.0.0.1", "", map[string]string{AnnotationReplica: `{"adapter_slots": 4, "kv_capacity_tokens": 400000, "metric_names": {"waiting": "w"}}`})},
			want: `[{"name":"p1","address":"10.0.0.1:8000","adapter_slots":4,"kv_capacity_tokens":400000,"metric_names":{"waiting":"w"}}]`},
		{name: "bad annotations leave their pod out",
			pods: []*corev1.Pod{
				pod("p1", "10.0.0.1", "", map[string]string{AnnotationReplica: `{"address": "10.9.9.9:1"}`}),
				pod("p2", "10.0.0.2", "", map[string]string{AnnotationReplica: `[1]`}),
				pod("p3", "10.0.0.3", "", map[string]string{AnnotationReplica: `{"hardware": "a100"}`, AnnotationHardware: "h100"}),
				pod("p4", "10.0.0.4", "", map[string]string{AnnotationMetricsPort: "http"}),
				pod("p5", "10.0.0.5", "", map[string]string{AnnotationEngine: "ollama"}),
				pod("p6", "10.0.0.6", "", map[string]string{AnnotationReplica: `{"adapter_slots": "4"}`}),
				pod("p7", "not-an-ip", "", nil),
				pod("p8", "10.0.0.8", "", nil),
			},
			want: `[{"name":"p8","address":"10.0.0.8:8000"}]`,
			excluded: `llm/p7: status.podIP "not-an-ip" is not an IP address` + "\n" +
				`llm/p1: annotation gpuroute.io/replica sets "address", which the controller writes` + "\n" +
				`llm/p2: annotation gpuroute.io/replica must be a JSON object of replica keys, got "[1]"` + "\n" +
				`llm/p3: annotation gpuroute.io/hardware and the "hardware" key of gpuroute.io/replica both set hardware; keep one` + "\n" +
				`llm/p4: annotation gpuroute.io/metrics-port must be a port number in [1, 65535], got "http"` + "\n" +
				`llm/p5: config: replicas[0].engine "ollama" is not one of vllm, sglang, tgi, triton, trtllm-serve` + "\n" +
				`llm/p6: config: replicas[0].adapter_slots must be a number, got string "4"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.pool
			if p.Name == "" {
				p = llama
			}
			res := FromInferencePool(p, tc.pods, nodes, tc.opts)
			checkResult(t, "FromInferencePool", res, tc.want, tc.excluded, tc.warnings, tc.notReady)
		})
	}
}

func TestPoolFromUnstructured(t *testing.T) {
	const head = "apiVersion: inference.networking.k8s.io/v1\nkind: InferencePool\nmetadata: {name: llama, namespace: llm}\n"
	tests := []struct {
		name string
		in   string
		want string // error, or "" for the pool below
	}{
		{name: "valid", in: head + "spec:\n  selector: {matchLabels: {app: vllm}}\n  targetPorts: [{number: 8000}]\n  endpointPickerRef: {name: epp}\n"},
		{name: "alpha version", in: "apiVersion: inference.networking.x-k8s.io/v1alpha2\nkind: InferencePool\nmetadata: {name: llama, namespace: llm}\nspec: {}\n",
			want: `pool: InferencePool "llm/llama": want apiVersion inference.networking.k8s.io/v1 kind InferencePool, got "inference.networking.x-k8s.io/v1alpha2" "InferencePool"`},
		{name: "no selector", in: head + "spec:\n  targetPorts: [{number: 8000}]\n",
			want: `pool: InferencePool "llm/llama": spec.selector.matchLabels is empty, which would select every Pod of the namespace`},
		{name: "no port", in: head + "spec:\n  selector: {matchLabels: {app: vllm}}\n",
			want: `pool: InferencePool "llm/llama": spec.targetPorts must list 1 to 8 ports, got 0`},
		{name: "nine ports", in: head + "spec:\n  selector: {matchLabels: {app: vllm}}\n  targetPorts: [{number: 1},{number: 2},{number: 3},{number: 4},{number: 5},{number: 6},{number: 7},{number: 8},{number: 9}]\n",
			want: `pool: InferencePool "llm/llama": spec.targetPorts must list 1 to 8 ports, got 9`},
		{name: "port zero", in: head + "spec:\n  selector: {matchLabels: {app: vllm}}\n  targetPorts: [{number: 0}]\n",
			want: `pool: InferencePool "llm/llama": spec.targetPorts[0].number must be in [1, 65535], got 0`},
		{name: "port twice", in: head + "spec:\n  selector: {matchLabels: {app: vllm}}\n  targetPorts: [{number: 8000}, {number: 8000}]\n",
			want: `pool: InferencePool "llm/llama": spec.targetPorts lists port 8000 twice`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var u unstructured.Unstructured
			if err := yaml.Unmarshal([]byte(tc.in), &u.Object); err != nil {
				t.Fatal(err)
			}
			p, err := PoolFromUnstructured(&u)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Fatalf("PoolFromUnstructured(%s) error = %q, want %q", tc.name, got, tc.want)
			}
			if err == nil && (p.Namespace != "llm" || p.Name != "llama" || p.Selector["app"] != "vllm" || len(p.TargetPorts) != 1 || p.TargetPorts[0] != 8000) {
				t.Errorf("PoolFromUnstructured(%s) = %+v, want llm/llama app=vllm port 8000", tc.name, p)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func mustAddr(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// slice returns an EndpointSlice of Service "vllm" in "llm".
func slice(name string, family discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "llm", Name: name, Labels: map[string]string{LabelServiceName: "vllm"}},
		AddressType: family, Ports: ports, Endpoints: eps,
	}
}

func endpoint(addr, podName, nodeName string, ready *bool) discoveryv1.Endpoint {
	ep := discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
	if podName != "" {
		ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: "llm", Name: podName}
	}
	if nodeName != "" {
		ep.NodeName = ptr(nodeName)
	}
	return ep
}

func TestFromEndpointSlices(t *testing.T) {
	http := []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8000))}}
	two := []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8000))}, {Name: ptr("metrics"), Port: ptr(int32(9000))}}
	annotated := map[string]*corev1.Pod{"p2": pod("p2", "10.0.0.2", "", map[string]string{AnnotationEngine: "tgi"})}
	pods := func(ns, name string) *corev1.Pod { return annotated[name] }
	other := slice("other-abc", discoveryv1.AddressTypeIPv4, http, endpoint("10.9.0.1", "x", "", nil))
	other.Labels[LabelServiceName] = "other"
	tests := []struct {
		name     string
		svc      Service
		slices   []*discoveryv1.EndpointSlice
		want     string
		excluded string
		notReady int
	}{
		{name: "ready endpoints, nil meaning ready",
			slices: []*discoveryv1.EndpointSlice{slice("vllm-abc", discoveryv1.AddressTypeIPv4, http,
				endpoint("10.0.0.1", "p1", "h100", nil), endpoint("10.0.0.2", "p2", "", ptr(true)),
				endpoint("10.0.0.3", "p3", "", ptr(false))), other},
			want:     `[{"name":"p1","address":"10.0.0.1:8000","hardware":"h100"},{"name":"p2","address":"10.0.0.2:8000","engine":"tgi"}]`,
			notReady: 1},
		{name: "terminating endpoints are out even if ready",
			slices: []*discoveryv1.EndpointSlice{slice("vllm-abc", discoveryv1.AddressTypeIPv4, http,
				func() discoveryv1.Endpoint {
					ep := endpoint("10.0.0.1", "p1", "", ptr(true))
					ep.Conditions.Terminating = ptr(true)
					return ep
				}(), endpoint("10.0.0.4", "", "", nil))},
			want:     `[{"name":"10.0.0.4","address":"10.0.0.4:8000"}]`,
			notReady: 1},
		{name: "dual stack lists each pod once, by IPv4",
			slices: []*discoveryv1.EndpointSlice{
				slice("vllm-v6", discoveryv1.AddressTypeIPv6, http, endpoint("fd00::1", "p1", "", nil), endpoint("fd00::5", "p5", "", nil)),
				slice("vllm-v4", discoveryv1.AddressTypeIPv4, http, endpoint("10.0.0.1", "p1", "", nil)),
			},
			want: `[{"name":"p1","address":"10.0.0.1:8000"},{"name":"p5","address":"[fd00::5]:8000"}]`},
		{name: "a port by name", svc: Service{Port: "http"},
			slices: []*discoveryv1.EndpointSlice{slice("vllm-abc", discoveryv1.AddressTypeIPv4, two, endpoint("10.0.0.1", "p1", "", nil))},
			want:   `[{"name":"p1","address":"10.0.0.1:8000"}]`},
		{name: "a port by number", svc: Service{Port: "9000"},
			slices: []*discoveryv1.EndpointSlice{slice("vllm-abc", discoveryv1.AddressTypeIPv4, two, endpoint("10.0.0.1", "p1", "", nil))},
			want:   `[{"name":"p1","address":"10.0.0.1:9000"}]`},
		{name: "several ports and none named",
			slices:   []*discoveryv1.EndpointSlice{slice("vllm-abc", discoveryv1.AddressTypeIPv4, two, endpoint("10.0.0.1", "p1", "", nil))},
			want:     `null`,
			excluded: `llm/vllm: EndpointSlice vllm-abc has 2 ports; name the one to route to (--port)`},
		{name: "a port it does not have", svc: Service{Port: "grpc"},
			slices:   []*discoveryv1.EndpointSlice{slice("vllm-abc", discoveryv1.AddressTypeIPv4, two, endpoint("10.0.0.1", "p1", "", nil))},
			want:     `null`,
			excluded: `llm/vllm: EndpointSlice vllm-abc has no port named or numbered "grpc"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			svc := tc.svc
			svc.Namespace, svc.Name = "llm", "vllm"
			res := FromEndpointSlices(svc, tc.slices, pods, nodes, Options{})
			checkResult(t, "FromEndpointSlices", res, tc.want, tc.excluded, "", tc.notReady)
		})
	}
}

func TestMerge(t *testing.T) {
	rs := []Replica{{Name: "p1", Address: mustAddr("10.0.0.1:8000"), Fields: map[string]json.RawMessage{"hardware": json.RawMessage(`"a100"`)}}}
	tests := []struct {
		name string
		base string
		rs   []Replica
		want string // the merged configuration, or the error
	}{
		{name: "empty base", base: "", rs: rs,
			want: "{\n  \"replicas\": [\n    {\n      \"name\": \"p1\",\n      \"address\": \"10.0.0.1:8000\",\n      \"hardware\": \"a100\"\n    }\n  ]\n}\n"},
		{name: "replicas replaced in place, other keys kept in order",
			base: `{"tick_ms": 100, "replicas": [{"name": "old", "address": "10.9.9.9:1"}], "adapters": {"sql": "llama"}}`, rs: rs,
			want: "{\n  \"tick_ms\": 100,\n  \"replicas\": [\n    {\n      \"name\": \"p1\",\n      \"address\": \"10.0.0.1:8000\",\n      \"hardware\": \"a100\"\n    }\n  ],\n  \"adapters\": {\n    \"sql\": \"llama\"\n  }\n}\n"},
		{name: "replicas appended", base: `{"status_path": "/s"}`, rs: rs[:0:0],
			want: `pool: the plugin would refuse the configuration: config: replicas must list at least one replica`},
		{name: "a base the plugin refuses", base: `{"tick_ms": 0}`, rs: rs,
			want: `pool: the plugin would refuse the configuration: config: tick_ms must be in [1, 3600000], got 0`},
		{name: "duplicate key", base: `{"tick_ms": 1, "tick_ms": 2}`, rs: rs,
			want: `pool: the base configuration has key "tick_ms" twice`},
		{name: "not an object", base: `[1]`, rs: rs,
			want: `pool: the base configuration must be a JSON object, got "[1]"`},
		{name: "trailing data", base: `{} {}`, rs: rs,
			want: `pool: the base configuration has data after its object`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Merge([]byte(tc.base), tc.rs)
			got := string(out)
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("Merge(%s) =\n%s\nwant\n%s", tc.base, got, tc.want)
			}
		})
	}
}

func FuzzMerge(f *testing.F) {
	f.Add([]byte(`{"tick_ms": 100, "replicas": []}`))
	f.Add([]byte(`{"a":`))
	f.Add([]byte(`{"tick_ms": 1, "tick_ms": 2}`))
	f.Add([]byte(` {} `))
	rs := []Replica{{Name: "p1", Address: mustAddr("10.0.0.1:8000")}}
	f.Fuzz(func(t *testing.T, base []byte) {
		out, err := Merge(base, rs)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "pool: ") {
				t.Fatalf("Merge(%q) error %q lacks the pool: prefix", base, err)
			}
			return
		}
		// What Merge accepts, it accepts again unchanged.
		again, err := Merge(out, rs)
		if err != nil || string(again) != string(out) {
			t.Fatalf("Merge(Merge(%q)) = %q, %v; want %q", base, again, err, out)
		}
	})
}

// FuzzAnnotations: whatever a Pod's annotations say, a replica is either
// left out with an error or listed as an entry the plugin accepts.
func FuzzAnnotations(f *testing.F) {
	f.Add(`{"adapter_slots": 4}`, "h100", "9000", "vllm")
	f.Add(`{"name": "x"}`, "", "", "")
	f.Add(`null`, "h999", "0", "sglang")
	f.Add(`{"metric_names": {"waiting": null}}`, "a100", "65536", "")
	f.Fuzz(func(t *testing.T, replica, hardware, port, engine string) {
		ann := map[string]string{AnnotationReplica: replica, AnnotationHardware: hardware, AnnotationMetricsPort: port, AnnotationEngine: engine}
		res := FromInferencePool(llama, []*corev1.Pod{pod("p1", "10.0.0.1", "h100", ann)}, nodes, Options{MetricsCluster: "m"})
		if len(res.Replicas)+len(res.Excluded) != 1 {
			t.Fatalf("annotations %q: %d replicas and %d excluded, want one of them", ann, len(res.Replicas), len(res.Excluded))
		}
		if len(res.Replicas) == 1 {
			if _, err := Merge(nil, res.Replicas); err != nil {
				t.Fatalf("annotations %q: listed a replica the plugin refuses: %v", ann, err)
			}
		}
	})
}
