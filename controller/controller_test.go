package controller

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/gpuroute/gpuroute/controller/pool"
)

// recorder is a Publisher that hands each new list to the test as JSON
// (an unchanged list is no change, as for the real publishers); fail makes
// the next calls fail.
type recorder struct {
	lists chan string
	mu    sync.Mutex
	fail  int
	// ready, when set, is asked at every call; seen keeps the answers.
	ready func() bool
	seen  []bool
	last  string
}

func newRecorder() *recorder { return &recorder{lists: make(chan string, 64)} }

func (r *recorder) Publish(_ context.Context, rs []pool.Replica) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ready != nil {
		r.seen = append(r.seen, r.ready())
	}
	if r.fail > 0 {
		r.fail--
		return errors.New("recorder: refused")
	}
	b, err := json.Marshal(rs)
	if err != nil {
		return err
	}
	if string(b) != r.last {
		r.last = string(b)
		r.lists <- r.last
	}
	return nil
}

func (r *recorder) String() string { return "recorder" }

// next waits for the next published list. The wait is for the
// informers' goroutines; a healthy run answers within milliseconds.
func (r *recorder) next(t *testing.T) string {
	t.Helper()
	select {
	case l := <-r.lists:
		return l
	case <-time.After(30 * time.Second):
		t.Fatal("no list published")
		return ""
	}
}

func readyPod(name, ip, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "llm", Name: name, Labels: map[string]string{"app": "vllm"}},
		Spec:       corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{PodIP: ip, Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

func gpuNode(name, product string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{pool.LabelNVIDIAProduct: product}}}
}

func inferencePool(selector map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
		"metadata": map[string]any{"namespace": "llm", "name": "llama"},
		"spec": map[string]any{"selector": map[string]any{"matchLabels": selector},
			"targetPorts": []any{map[string]any{"number": int64(8000)}}, "endpointPickerRef": map[string]any{"name": "none"}},
	}}
}

func newDynamic(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{pool.InferencePoolGVR: "InferencePoolList"}, objs...)
}

// start runs a controller until the test ends.
func start(t *testing.T, c *Controller) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil after its context ends", err)
		}
	})
}

// TestFollowsInferencePool: the list follows Pods becoming ready, new Pods,
// Pods going away, a node's GPU label and the pool's selector; a fleet with
// no ready Pod publishes nothing.
func TestFollowsInferencePool(t *testing.T) {
	ctx := context.Background()
	kube := kubefake.NewClientset(readyPod("vllm-0", "10.0.0.1", "gpu-a"), readyPod("vllm-1", "10.0.0.2", "gpu-b"),
		gpuNode("gpu-a", "NVIDIA-H100-80GB-HBM3"), gpuNode("gpu-b", "NVIDIA-A100-SXM4-80GB"))
	dyn := newDynamic(inferencePool(map[string]any{"app": "vllm"}))
	rec := newRecorder()
	c, err := New(kube, dyn, Options{Namespace: "llm", Pool: "llama", Publishers: []Publisher{rec},
		Replicas: pool.Options{MetricsCluster: "gpuroute_metrics"}})
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	want := `[{"name":"vllm-0","address":"10.0.0.1:8000","hardware":"h100","metrics_address":"10.0.0.1:8000","metrics_cluster":"gpuroute_metrics"},` +
		`{"name":"vllm-1","address":"10.0.0.2:8000","hardware":"a100","metrics_address":"10.0.0.2:8000","metrics_cluster":"gpuroute_metrics"}]`
	if got := rec.next(t); got != want {
		t.Fatalf("first list =\n%s\nwant\n%s", got, want)
	}
	pods := kube.CoreV1().Pods("llm")
	steps := []struct {
		name   string
		change func() error
		want   string
	}{
		{name: "a pod becomes not ready", change: func() error {
			p := readyPod("vllm-1", "10.0.0.2", "gpu-b")
			p.Status.Conditions[0].Status = corev1.ConditionFalse
			_, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
			return err
		}, want: `["vllm-0 h100"]`},
		{name: "a new ready pod", change: func() error {
			_, err := pods.Create(ctx, readyPod("vllm-2", "10.0.0.3", "gpu-a"), metav1.CreateOptions{})
			return err
		}, want: `["vllm-0 h100","vllm-2 h100"]`},
		{name: "the node's GPU changes", change: func() error {
			_, err := kube.CoreV1().Nodes().Update(ctx, gpuNode("gpu-a", "NVIDIA-L40S"), metav1.UpdateOptions{})
			return err
		}, want: `["vllm-0 l40s","vllm-2 l40s"]`},
		{name: "pods go away; an empty fleet publishes nothing, the next pod does", change: func() error {
			for _, n := range []string{"vllm-0", "vllm-1", "vllm-2"} {
				if err := pods.Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
					return err
				}
			}
			_, err := pods.Create(ctx, readyPod("vllm-3", "10.0.0.4", "gpu-b"), metav1.CreateOptions{})
			return err
		}, want: `["vllm-3 a100"]`},
		{name: "the pool selects other pods", change: func() error {
			p := readyPod("sglang-0", "10.0.1.1", "")
			p.Labels = map[string]string{"app": "sglang"}
			if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
				return err
			}
			_, err := dyn.Resource(pool.InferencePoolGVR).Namespace("llm").Update(ctx, inferencePool(map[string]any{"app": "sglang"}), metav1.UpdateOptions{})
			return err
		}, want: `["sglang-0"]`},
	}
	for _, s := range steps {
		if err := s.change(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		// A step of several changes may be published on the way (a
		// list per change the informers deliver apart): the step's end
		// is what must come.
		var seen []string
		for got := ""; got != s.want; {
			select {
			case l := <-rec.lists:
				got = summary(t, l)
				seen = append(seen, got)
				if got == "null" {
					t.Errorf("%s: an empty fleet was published (lists so far %v)", s.name, seen)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("%s: lists %v, want one to be %s", s.name, seen, s.want)
			}
		}
	}
}

// summary shortens a list to "name hardware" per replica.
func summary(t *testing.T, list string) string {
	t.Helper()
	var rs []struct {
		Name     string `json:"name"`
		Hardware string `json:"hardware"`
	}
	if err := json.Unmarshal([]byte(list), &rs); err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, r := range rs {
		if r.Hardware != "" {
			r.Name += " " + r.Hardware
		}
		s = append(s, r.Name)
	}
	b, _ := json.Marshal(s)
	return string(b)
}

// TestFollowsService: without the Inference Extension, the ready endpoints
// of a Service's slices, with the Service's annotations as defaults.
func TestFollowsService(t *testing.T) {
	ctx := context.Background()
	ready, notReady := true, false
	port, name := int32(8000), "http"
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "llm", Name: "vllm-x1", Labels: map[string]string{pool.LabelServiceName: "vllm"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "llm", Name: "vllm-0"}},
			{Addresses: []string{"10.0.0.2"}, Conditions: discoveryv1.EndpointConditions{Ready: &notReady},
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "llm", Name: "vllm-1"}},
		},
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "llm", Name: "vllm",
		Annotations: map[string]string{pool.AnnotationEngine: "sglang"}}}
	kube := kubefake.NewClientset(slice, svc, readyPod("vllm-0", "10.0.0.1", ""))
	rec := newRecorder()
	c, err := New(kube, nil, Options{Namespace: "llm", Service: "vllm", Port: "http", Publishers: []Publisher{rec}})
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	if got, want := rec.next(t), `[{"name":"vllm-0","address":"10.0.0.1:8000","engine":"sglang"}]`; got != want {
		t.Fatalf("first list %s, want %s", got, want)
	}
	slice.Endpoints[1].Conditions.Ready = &ready
	if _, err := kube.DiscoveryV1().EndpointSlices("llm").Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, want := summary(t, rec.next(t)), `["vllm-0","vllm-1"]`; got != want {
		t.Errorf("after vllm-1 became ready: %s, want %s", got, want)
	}
}

// TestRetriesFailedPublish: a publisher that fails gets the list again, and
// the controller is not ready while publishing fails, ready once it worked.
func TestRetriesFailedPublish(t *testing.T) {
	kube := kubefake.NewClientset(readyPod("vllm-0", "10.0.0.1", ""))
	rec := newRecorder()
	rec.fail = 2
	c, err := New(kube, newDynamic(inferencePool(map[string]any{"app": "vllm"})),
		Options{Namespace: "llm", Pool: "llama", Publishers: []Publisher{rec}, RetryDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rec.ready = c.Ready
	start(t, c)
	if got := summary(t, rec.next(t)); got != `["vllm-0"]` {
		t.Errorf("list after two failures %s, want [\"vllm-0\"]", got)
	}
	if _, err := kube.CoreV1().Pods("llm").Create(context.Background(), readyPod("vllm-1", "10.0.0.2", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := summary(t, rec.next(t)); got != `["vllm-0","vllm-1"]` {
		t.Errorf("list after a new pod %s, want both", got)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	// Reconciles may come more often than changes (each informer event asks
	// for one), so the calls are: false through the failures and the retry
	// that worked, true from then on.
	first := slices.Index(rec.seen, true)
	if first < 3 || slices.Contains(rec.seen[first:], false) {
		t.Errorf("Ready() at each publish = %v, want false for the two failures and the retry, then true", rec.seen)
	}
}

func TestNewRefuses(t *testing.T) {
	kube := kubefake.NewClientset()
	rec := newRecorder()
	tests := []struct {
		name string
		o    Options
		want string
	}{
		{name: "neither", o: Options{Namespace: "llm", Publishers: []Publisher{rec}}, want: "controller: set exactly one of a pool and a service to follow"},
		{name: "both", o: Options{Namespace: "llm", Pool: "p", Service: "s", Publishers: []Publisher{rec}}, want: "controller: set exactly one of a pool and a service to follow"},
		{name: "port with a pool", o: Options{Namespace: "llm", Pool: "p", Port: "http", Publishers: []Publisher{rec}}, want: "controller: a port is chosen by the pool's targetPorts; --port is for a service"},
		{name: "no publisher", o: Options{Namespace: "llm", Pool: "p"}, want: "controller: no publisher: nothing would receive the replica list"},
		{name: "no namespace", o: Options{Pool: "p", Publishers: []Publisher{rec}}, want: "controller: namespace is empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(kube, newDynamic(), tc.o)
			if err == nil || err.Error() != tc.want {
				t.Errorf("New(%+v) = %v, want %q", tc.o, err, tc.want)
			}
		})
	}
}
