package examples

import (
	"context"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	extensionsv1alpha1 "istio.io/api/extensions/v1alpha1"
	networkingv1 "istio.io/api/networking/v1"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	clientv1alpha1 "istio.io/client-go/pkg/apis/extensions/v1alpha1"
	istiofake "istio.io/client-go/pkg/clientset/versioned/fake"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	netv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"github.com/gpuroute/gpuroute/controller"
	"github.com/gpuroute/gpuroute/controller/cli"
	"github.com/gpuroute/gpuroute/controller/ecds"
	"github.com/gpuroute/gpuroute/controller/pool"
	"github.com/gpuroute/gpuroute/controller/wasmplugin"
	"github.com/gpuroute/gpuroute/examples/wasmimage"
	"github.com/gpuroute/gpuroute/plugin/config"
)

// kubernetesFiles are the manifests of examples/kubernetes.
var kubernetesFiles = []string{
	"fleet.yaml", "controller-rbac.yaml", "prometheus.yaml",
	"istio/controller.yaml", "istio/wasmplugin.yaml", "istio/mesh.yaml",
	"envoy/controller.yaml", "envoy/gateway.yaml",
}

// originalDstHeader is the header an ORIGINAL_DST cluster with
// use_http_header reads when it names none (Envoy original_dst.proto).
const originalDstHeader = "x-envoy-original-dst-host"

// inferencePoolV1 declares every field of an InferencePool's v1 spec
// (kubernetes-sigs/gateway-api-inference-extension api/v1), so a strict
// decode catches a field the API does not have.
type inferencePoolV1 struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		TargetPorts []struct {
			Number int32 `json:"number"`
		} `json:"targetPorts"`
		AppProtocol       string `json:"appProtocol,omitempty"`
		EndpointPickerRef struct {
			Group       string `json:"group,omitempty"`
			Kind        string `json:"kind,omitempty"`
			Name        string `json:"name"`
			PortNumber  int32  `json:"portNumber,omitempty"`
			FailureMode string `json:"failureMode,omitempty"`
		} `json:"endpointPickerRef"`
	} `json:"spec"`
}

// podMonitor declares the Prometheus Operator PodMonitor fields the
// examples use (monitoring.coreos.com/v1; its Go module would pull in
// controller-runtime), decoded strictly.
type podMonitor struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		Selector            metav1.LabelSelector `json:"selector"`
		PodMetricsEndpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

// manifests are the decoded objects of examples/kubernetes.
type manifests struct {
	kube        []runtime.Object
	pools       []*unstructured.Unstructured
	podMonitors []podMonitor
	istio       []istioManifest
}

type istioManifest struct {
	obj  istioObject
	spec proto.Message
	doc  []byte
}

// strictKube decodes Kubernetes objects with unknown and duplicate fields
// refused, as kubectl apply --validate=strict does.
var strictKube = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

func loadKubernetes(t *testing.T) *manifests {
	t.Helper()
	m := &manifests{}
	for _, file := range kubernetesFiles {
		raw, err := os.ReadFile(filepath.Join("kubernetes", filepath.FromSlash(file)))
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range splitDocs(raw) {
			where := file + "#" + strconv.Itoa(i)
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Namespace string `json:"namespace"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal(doc, &head); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			group := strings.SplitN(head.APIVersion, "/", 2)[0]
			switch {
			case head.APIVersion == pool.InferencePoolGVR.GroupVersion().String():
				var ip inferencePoolV1
				if err := yaml.UnmarshalStrict(doc, &ip); err != nil {
					t.Fatalf("%s: %v", where, err)
				}
				var u unstructured.Unstructured
				if err := yaml.Unmarshal(doc, &u.Object); err != nil {
					t.Fatal(err)
				}
				if _, err := pool.PoolFromUnstructured(&u); err != nil {
					t.Errorf("%s: %v", where, err)
				}
				m.pools = append(m.pools, &u)
			case head.APIVersion == "monitoring.coreos.com/v1" && head.Kind == "PodMonitor":
				var pm podMonitor
				if err := yaml.UnmarshalStrict(doc, &pm); err != nil {
					t.Fatalf("%s: %v", where, err)
				}
				m.podMonitors = append(m.podMonitors, pm)
			case strings.HasSuffix(group, ".istio.io"):
				obj, spec := istioDoc(t, where, doc)
				m.istio = append(m.istio, istioManifest{obj, spec, doc})
			default:
				obj, _, err := strictKube.Decode(doc, nil, nil)
				if err != nil {
					t.Fatalf("%s: %v", where, err)
				}
				m.kube = append(m.kube, obj)
			}
			if head.Kind != "Namespace" && !strings.HasPrefix(head.Kind, "Cluster") && head.Metadata.Namespace == "" {
				// kubectl apply -f would put it in whatever namespace is current.
				t.Errorf("%s: %s has no metadata.namespace", where, head.Kind)
			}
		}
	}
	return m
}

// find returns the object of a type with a namespace and name.
func find[T interface {
	runtime.Object
	GetNamespace() string
	GetName() string
}](t *testing.T, m *manifests, namespace, name string) T {
	t.Helper()
	for _, o := range m.kube {
		if v, ok := o.(T); ok && v.GetNamespace() == namespace && v.GetName() == name {
			return v
		}
	}
	var zero T
	t.Fatalf("no %T %s/%s in examples/kubernetes", zero, namespace, name)
	return zero
}

func istioSpecs[T proto.Message](m *manifests) map[string]T {
	out := map[string]T{}
	for _, im := range m.istio {
		if s, ok := im.spec.(T); ok {
			out[im.obj.Metadata.Namespace+"/"+im.obj.Metadata.Name] = s
		}
	}
	return out
}

// controllerArgs finds the controller Deployment that sets a flag and
// parses its arguments with the command's own parser.
func controllerArgs(t *testing.T, m *manifests, flag string) (*cli.RunArgs, *appsv1.Deployment) {
	t.Helper()
	for _, o := range m.kube {
		d, ok := o.(*appsv1.Deployment)
		if !ok || d.Name != "gpuroute-controller" || !slices.ContainsFunc(d.Spec.Template.Spec.Containers[0].Args, func(a string) bool {
			return strings.HasPrefix(a, "--"+flag+"=")
		}) {
			continue
		}
		args := d.Spec.Template.Spec.Containers[0].Args
		if len(args) == 0 || args[0] != "run" {
			t.Fatalf("controller Deployment args %v, want run …", args)
		}
		ra, err := cli.ParseRunArgs(args[1:], os.Stderr)
		if err != nil {
			t.Fatalf("controller Deployment args %v: %v", args, err)
		}
		return ra, d
	}
	t.Fatalf("no gpuroute-controller Deployment with --%s", flag)
	return nil, nil
}

// fleet returns Pods and Nodes as the fleet's Deployment would make them:
// ready, on H100 nodes labelled by GPU feature discovery.
func fleet(t *testing.T, m *manifests) ([]*corev1.Pod, []*corev1.Node) {
	t.Helper()
	d := find[*appsv1.Deployment](t, m, "llm", "vllm-llama")
	var pods []*corev1.Pod
	var nodes []*corev1.Node
	for i := range int(*d.Spec.Replicas) {
		n := "gpu-" + strconv.Itoa(i)
		nodes = append(nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{pool.LabelNVIDIAProduct: "NVIDIA-H100-80GB-HBM3"}}})
		pods = append(pods, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: d.Name + "-" + strconv.Itoa(i),
				Labels: d.Spec.Template.Labels, Annotations: d.Spec.Template.Annotations},
			Spec: corev1.PodSpec{NodeName: n, Containers: d.Spec.Template.Spec.Containers},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.0." + strconv.Itoa(10+i),
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		})
	}
	return pods, nodes
}

// endpointSlice is the slice the endpoints controller would make for a
// Service over the Pods.
func endpointSlice(t *testing.T, svc *corev1.Service, pods []*corev1.Pod) *discoveryv1.EndpointSlice {
	t.Helper()
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: svc.Namespace, Name: svc.Name + "-abcde", Labels: map[string]string{pool.LabelServiceName: svc.Name}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for _, sp := range svc.Spec.Ports {
		port := sp.TargetPort.IntVal
		for _, c := range pods[0].Spec.Containers {
			for _, cp := range c.Ports {
				if cp.Name == sp.TargetPort.StrVal {
					port = cp.ContainerPort
				}
			}
		}
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: &sp.Name, Port: &port})
	}
	ready := true
	for _, p := range pods {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{p.Status.PodIP}, NodeName: &p.Spec.NodeName,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name}})
	}
	return s
}

// signalled is a Publisher that reports its first successful publish.
type signalled struct {
	controller.Publisher
	once sync.Once
	done chan struct{}
}

func (s *signalled) Publish(ctx context.Context, rs []pool.Replica) error {
	err := s.Publisher.Publish(ctx, rs)
	if err == nil {
		s.once.Do(func() { close(s.done) })
	}
	return err
}

// wasmPluginObject returns the example WasmPlugin as the API server stores it.
func wasmPluginObject(t *testing.T, m *manifests) *clientv1alpha1.WasmPlugin {
	t.Helper()
	for _, im := range m.istio {
		if _, ok := im.spec.(*extensionsv1alpha1.WasmPlugin); ok {
			var wp clientv1alpha1.WasmPlugin
			if err := yaml.Unmarshal(im.doc, &wp); err != nil {
				t.Fatal(err)
			}
			return &wp
		}
	}
	t.Fatal("no WasmPlugin in examples/kubernetes")
	return nil
}

// runController runs the controller a Deployment describes against fake
// clients holding the example fleet until its first publish, and returns
// every request it made of the API.
func runController(t *testing.T, m *manifests, ra *cli.RunArgs, pub controller.Publisher, ic *istiofake.Clientset) []k8stesting.Action {
	t.Helper()
	pods, nodes := fleet(t, m)
	var objs []runtime.Object
	for _, p := range pods {
		objs = append(objs, p)
	}
	for _, n := range nodes {
		objs = append(objs, n)
	}
	if ra.Service != "" {
		svc := find[*corev1.Service](t, m, ra.Namespace, ra.Service)
		objs = append(objs, svc, endpointSlice(t, svc, pods))
	}
	var dynObjs []runtime.Object
	for _, p := range m.pools {
		dynObjs = append(dynObjs, p.DeepCopy())
	}
	kube := kubefake.NewClientset(objs...)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{pool.InferencePoolGVR: "InferencePoolList"}, dynObjs...)
	opts, err := ra.Options()
	if err != nil {
		t.Fatal(err)
	}
	sig := &signalled{Publisher: pub, done: make(chan struct{})}
	c, err := controller.New(kube, dyn, controller.Options{Namespace: ra.Namespace, Pool: ra.Pool, Service: ra.Service, Port: ra.Port,
		Replicas: opts, Publishers: []controller.Publisher{sig}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case <-sig.done:
	case err := <-done:
		t.Fatalf("controller stopped before publishing: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("controller published nothing")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	actions := append(kube.Actions(), dyn.Actions()...)
	if ic != nil {
		actions = append(actions, ic.Actions()...)
	}
	return actions
}

// rbacRules returns the rules granted to a ServiceAccount, by the
// namespace they hold in ("" for cluster-wide).
func rbacRules(m *manifests, namespace, name string) map[string][]rbacv1.PolicyRule {
	bound := func(subjects []rbacv1.Subject) bool {
		return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
			return s.Kind == "ServiceAccount" && s.Namespace == namespace && s.Name == name
		})
	}
	roles := map[string][]rbacv1.PolicyRule{}
	clusterRoles := map[string][]rbacv1.PolicyRule{}
	for _, o := range m.kube {
		switch r := o.(type) {
		case *rbacv1.Role:
			roles[r.Namespace+"/"+r.Name] = r.Rules
		case *rbacv1.ClusterRole:
			clusterRoles[r.Name] = r.Rules
		}
	}
	out := map[string][]rbacv1.PolicyRule{}
	for _, o := range m.kube {
		switch b := o.(type) {
		case *rbacv1.RoleBinding:
			if !bound(b.Subjects) {
				continue
			}
			if b.RoleRef.Kind == "ClusterRole" {
				out[b.Namespace] = append(out[b.Namespace], clusterRoles[b.RoleRef.Name]...)
			} else {
				out[b.Namespace] = append(out[b.Namespace], roles[b.Namespace+"/"+b.RoleRef.Name]...)
			}
		case *rbacv1.ClusterRoleBinding:
			if bound(b.Subjects) {
				out[""] = append(out[""], clusterRoles[b.RoleRef.Name]...)
			}
		}
	}
	return out
}

// permits reports whether a rule allows a request, with RBAC's rule for
// resourceNames: a list or watch is covered only when it selects the one
// name by field (metadata.name=NAME).
func permits(r rbacv1.PolicyRule, a k8stesting.Action) bool {
	gvr := a.GetResource()
	has := func(list []string, v string) bool { return slices.Contains(list, v) || slices.Contains(list, "*") }
	if !has(r.APIGroups, gvr.Group) || !has(r.Resources, gvr.Resource) || !has(r.Verbs, a.GetVerb()) {
		return false
	}
	if len(r.ResourceNames) == 0 {
		return true
	}
	var name string
	switch v := a.(type) {
	case interface{ GetName() string }: // get, patch
		name = v.GetName()
	case k8stesting.ListAction:
		name, _ = v.GetListRestrictions().Fields.RequiresExactMatch("metadata.name")
	case k8stesting.WatchAction:
		name, _ = v.GetWatchRestrictions().Fields.RequiresExactMatch("metadata.name")
	}
	return name != "" && slices.Contains(r.ResourceNames, name)
}

// checkRBAC holds every request the controller made to the rules the
// example RBAC grants its ServiceAccount.
func checkRBAC(t *testing.T, m *manifests, d *appsv1.Deployment, actions []k8stesting.Action) {
	t.Helper()
	rules := rbacRules(m, d.Namespace, d.Spec.Template.Spec.ServiceAccountName)
	for _, a := range actions {
		if len(rules) == 0 {
			t.Fatalf("nothing grants ServiceAccount %s/%s any rule", d.Namespace, d.Spec.Template.Spec.ServiceAccountName)
		}
		ok := slices.ContainsFunc(rules[""], func(r rbacv1.PolicyRule) bool { return permits(r, a) }) ||
			(a.GetNamespace() != "" && slices.ContainsFunc(rules[a.GetNamespace()], func(r rbacv1.PolicyRule) bool { return permits(r, a) }))
		if !ok {
			gvr := a.GetResource()
			t.Errorf("the example RBAC does not let the controller %s %s (group %q) in namespace %q", a.GetVerb(), gvr.Resource, gvr.Group, a.GetNamespace())
		}
	}
}

func TestKubernetesIstio(t *testing.T) {
	m := loadKubernetes(t)
	ra, d := controllerArgs(t, m, "wasmplugin")

	// The WasmPlugin the controller writes is the example's, and carries
	// every key but the replicas, which are the controller's.
	wp := wasmPluginObject(t, m)
	if ra.WasmPlugin != wp.Namespace+"/"+wp.Name {
		t.Errorf("--wasmplugin=%s, want the example's %s/%s", ra.WasmPlugin, wp.Namespace, wp.Name)
	}
	if _, set := wp.Spec.GetPluginConfig().GetFields()[config.KeyReplicas]; set {
		t.Errorf("WasmPlugin pluginConfig sets replicas, which the controller writes")
	}
	if wp.Spec.GetFailStrategy() != extensionsv1alpha1.FailStrategy_FAIL_CLOSE || !strings.HasPrefix(wp.Spec.GetUrl(), "oci://") {
		t.Errorf("WasmPlugin failStrategy %v url %q, want FAIL_CLOSE and an oci:// module", wp.Spec.GetFailStrategy(), wp.Spec.GetUrl())
	}

	// The controller, run as its Deployment says against the example
	// fleet, writes a list the plugin accepts, asking only what RBAC grants.
	ic := istiofake.NewSimpleClientset(wp)
	pub := &wasmplugin.Publisher{Client: ic, Namespace: wp.Namespace, Name: wp.Name}
	actions := runController(t, m, ra, pub, ic)
	checkRBAC(t, m, d, actions)
	got, err := ic.ExtensionsV1alpha1().WasmPlugins(wp.Namespace).Get(context.Background(), wp.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	js, err := protojson.Marshal(got.Spec.GetPluginConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(js)
	if err != nil {
		t.Fatalf("config.Parse(written pluginConfig %s) = %v", js, err)
	}
	if len(cfg.Replicas) != 2 || cfg.Replicas[0].Hardware != "h100" || cfg.Replicas[0].MetricsCluster != ra.MetricsCluster {
		t.Errorf("written replicas %+v, want the two fleet Pods on h100 scraped through %s", cfg.Replicas, ra.MetricsCluster)
	}

	// The clusters the configuration names are the ones the mesh builds:
	// outbound|port||host of a resolution NONE ServiceEntry, made to read
	// its header by the EnvoyFilter.
	entries := istioSpecs[*networkingv1.ServiceEntry](m)
	originalDst := map[string]bool{} // cluster names
	hostOf := map[string]string{}
	for _, se := range entries {
		for _, h := range se.GetHosts() {
			for _, p := range se.GetPorts() {
				name := "outbound|" + strconv.Itoa(int(p.GetNumber())) + "||" + h
				hostOf[name] = h
				if se.GetResolution() == networkingv1.ServiceEntry_NONE {
					originalDst[name] = true
				}
			}
		}
	}
	headerOf := map[string]string{}
	for _, ef := range istioSpecs[*networkingv1alpha3.EnvoyFilter](m) {
		for _, cp := range ef.GetConfigPatches() {
			js, err := protojson.Marshal(cp.GetPatch().GetValue())
			if err != nil {
				t.Fatal(err)
			}
			var c clusterv3.Cluster
			if err := strict.Unmarshal(js, &c); err != nil {
				t.Fatalf("EnvoyFilter patch %s is not an Envoy Cluster: %v", js, err)
			}
			od := c.GetOriginalDstLbConfig()
			if od.GetUseHttpHeader() && c.GetLbPolicy() == clusterv3.Cluster_CLUSTER_PROVIDED {
				header := od.GetHttpHeaderName()
				if header == "" {
					header = originalDstHeader
				}
				headerOf[cp.GetMatch().GetCluster().GetName()] = header
			}
		}
	}
	if !originalDst[ra.MetricsCluster] || headerOf[ra.MetricsCluster] != originalDstHeader {
		t.Errorf("--metrics-cluster=%s: want the ORIGINAL_DST cluster of a resolution NONE ServiceEntry reading %s, got header %q",
			ra.MetricsCluster, originalDstHeader, headerOf[ra.MetricsCluster])
	}
	routed := 0
	for _, vs := range istioSpecs[*networkingv1.VirtualService](m) {
		for _, h := range vs.GetHttp() {
			for _, r := range h.GetRoute() {
				name := "outbound|" + strconv.Itoa(int(r.GetDestination().GetPort().GetNumber())) + "||" + r.GetDestination().GetHost()
				if r.GetDestination().GetHost() == hostOf[ra.MetricsCluster] {
					t.Errorf("a VirtualService routes clients to the metrics host %s: they could reach any address", hostOf[ra.MetricsCluster])
				}
				if !originalDst[name] || headerOf[name] != destinationHeader {
					t.Errorf("route to %s: want an ORIGINAL_DST cluster reading %s", name, destinationHeader)
				}
				routed++
			}
		}
	}
	if routed == 0 {
		t.Error("no VirtualService route")
	}
}

func TestKubernetesEnvoy(t *testing.T) {
	m := loadKubernetes(t)
	ra, d := controllerArgs(t, m, "ecds-template")

	// The template is the ConfigMap the Deployment mounts where
	// --ecds-template points.
	tmplData := mounted(t, m, d, ra.ECDSTemplate)
	tmpl, err := ecds.ParseTemplate([]byte(tmplData))
	if err != nil {
		t.Fatal(err)
	}
	validateDeep(t, "filter template", tmpl)
	var w wasmfilterv3.Wasm
	if err := tmpl.GetTypedConfig().UnmarshalTo(&w); err != nil {
		t.Fatal(err)
	}
	gw := find[*appsv1.Deployment](t, m, "gpuroute", "gpuroute-gateway")
	module := w.GetConfig().GetVmConfig().GetCode().GetLocal().GetFilename()
	if got := imageVolumeFile(t, gw, module); got != wasmimage.CompatFileName {
		t.Errorf("filter module %s is %q of an image volume, want %q, the file of `make oci`'s compat image", module, got, wasmimage.CompatFileName)
	}
	if w.GetConfig().GetFailurePolicy() != wasmv3.FailurePolicy_FAIL_CLOSED || w.GetConfig().GetVmConfig().GetVmId() != vmID {
		t.Errorf("filter failure_policy %v vm_id %q, want FAIL_CLOSED and %q", w.GetConfig().GetFailurePolicy(), w.GetConfig().GetVmConfig().GetVmId(), vmID)
	}
	// The server turns it on anyway; the template says so to its reader.
	checkHeadersPause(t, "filter template", w.GetConfig())

	// The controller serves what the plugin accepts, asking only what RBAC
	// grants.
	srv, err := ecds.New(tmpl, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	checkRBAC(t, m, d, runController(t, m, ra, srv, nil))
	pods, nodes := fleet(t, m)
	svc := find[*corev1.Service](t, m, ra.Namespace, ra.Service)
	opts, err := ra.Options()
	if err != nil {
		t.Fatal(err)
	}
	byName := func(n string) *corev1.Node {
		if i := slices.IndexFunc(nodes, func(x *corev1.Node) bool { return x.Name == n }); i >= 0 {
			return nodes[i]
		}
		return nil
	}
	res := pool.FromEndpointSlices(pool.Service{Namespace: svc.Namespace, Name: svc.Name, Port: ra.Port},
		[]*discoveryv1.EndpointSlice{endpointSlice(t, svc, pods)}, nil, byName, opts)
	base, err := ecds.Configuration(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	merged, err := pool.Merge(base, res.Replicas)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(merged)
	if err != nil || len(cfg.Replicas) != len(pods) {
		t.Fatalf("served configuration: %v, %d replicas; want %d", err, len(cfg.Replicas), len(pods))
	}

	// The bootstrap: the gateway's filter subscribes to the template's
	// name at the controller's Service; the metrics cluster reads the
	// header the scrape sets and no route leads to it.
	var bs bootstrapv3.Bootstrap
	bsData := mounted(t, m, gw, gw.Spec.Template.Spec.Containers[0].Args[1])
	js, err := yaml.YAMLToJSON([]byte(bsData))
	if err != nil {
		t.Fatal(err)
	}
	if err := strict.Unmarshal(js, &bs); err != nil {
		t.Fatalf("gateway bootstrap: %v", err)
	}
	validateDeep(t, "gateway bootstrap", &bs)
	clusters := map[string]*clusterv3.Cluster{}
	for _, c := range bs.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = c
	}
	xds := find[*corev1.Service](t, m, d.Namespace, "gpuroute-controller-xds")
	_, listenPort, _ := strings.Cut(ra.ECDSListen, ":")
	if cp := containerPort(d, xds.Spec.Ports[0].TargetPort.StrVal); strconv.Itoa(int(cp)) != listenPort {
		t.Errorf("Service %s targets container port %d, the controller listens on %s", xds.Name, cp, ra.ECDSListen)
	}
	metrics := clusters[ra.MetricsCluster]
	od := metrics.GetOriginalDstLbConfig()
	if metrics.GetType() != clusterv3.Cluster_ORIGINAL_DST || !od.GetUseHttpHeader() || (od.GetHttpHeaderName() != "" && od.GetHttpHeaderName() != originalDstHeader) {
		t.Errorf("--metrics-cluster=%s: want an ORIGINAL_DST cluster of the bootstrap reading %s", ra.MetricsCluster, originalDstHeader)
	}
	var filters int
	eachHCM(t, "gateway bootstrap", &bs, func(l *listenerv3.Listener, hcm *hcmv3.HttpConnectionManager) {
		for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				target := r.GetRoute().GetCluster()
				if target == ra.MetricsCluster {
					t.Errorf("listener %s routes to the metrics cluster: clients could reach any address", l.GetName())
				}
				if c := clusters[target]; c.GetType() == clusterv3.Cluster_ORIGINAL_DST {
					checkDestination(t, envoyCase{name: "kubernetes", file: "kubernetes/envoy/gateway.yaml"}, c, cfg, 0)
				}
				if reachesAdmin(&bs, clusters[target]) && r.GetMatch().GetPath() != "/stats/prometheus" {
					t.Errorf("listener %s routes %v to the admin interface, want only the exact path /stats/prometheus", l.GetName(), r.GetMatch())
				}
			}
		}
		for _, h := range hcm.GetHttpFilters() {
			if h.GetName() != tmpl.GetName() {
				continue
			}
			filters++
			checkHeldTimeouts(t, "gateway bootstrap: listener "+l.GetName(), hcm, cfg)
			cd := h.GetConfigDiscovery()
			if !slices.Contains(cd.GetTypeUrls(), ecds.WasmTypeURL) {
				t.Errorf("filter %s: config_discovery type_urls %v lack %s", h.GetName(), cd.GetTypeUrls(), ecds.WasmTypeURL)
			}
			for _, g := range cd.GetConfigSource().GetApiConfigSource().GetGrpcServices() {
				sa := clusters[g.GetEnvoyGrpc().GetClusterName()].GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
				if want := xds.Name + "." + xds.Namespace + ".svc.cluster.local"; sa.GetAddress() != want || int32(sa.GetPortValue()) != xds.Spec.Ports[0].Port {
					t.Errorf("xDS cluster reaches %s:%d, want the controller's Service %s:%d", sa.GetAddress(), sa.GetPortValue(), want, xds.Spec.Ports[0].Port)
				}
			}
		}
	})
	if filters != 1 {
		t.Errorf("%d HTTP filters named %q (the template's name), want 1", filters, tmpl.GetName())
	}
	for _, r := range cfg.Replicas {
		if clusters[r.MetricsCluster] == nil {
			t.Errorf("replica %s: metrics_cluster %q is not a cluster of the bootstrap", r.Name, r.MetricsCluster)
		}
	}

	// Only the gateways reach the ECDS port.
	np := find[*netv1.NetworkPolicy](t, m, d.Namespace, "gpuroute-controller-xds")
	from := np.Spec.Ingress[0].From[0].PodSelector.MatchLabels
	for k, v := range from {
		if gw.Spec.Template.Labels[k] != v {
			t.Errorf("NetworkPolicy admits pods %v, which the gateway's %v are not", from, gw.Spec.Template.Labels)
		}
	}
}

// reachesAdmin reports whether a cluster's endpoints include the admin
// interface's address.
func reachesAdmin(bs *bootstrapv3.Bootstrap, c *clusterv3.Cluster) bool {
	admin := bs.GetAdmin().GetAddress().GetSocketAddress()
	for _, le := range c.GetLoadAssignment().GetEndpoints() {
		for _, ep := range le.GetLbEndpoints() {
			sa := ep.GetEndpoint().GetAddress().GetSocketAddress()
			if sa.GetAddress() == admin.GetAddress() && sa.GetPortValue() == admin.GetPortValue() {
				return true
			}
		}
	}
	return false
}

// mounted returns the ConfigMap key a container of the Deployment sees at
// file.
func mounted(t *testing.T, m *manifests, d *appsv1.Deployment, file string) string {
	t.Helper()
	dir, key := path.Split(file)
	for _, vm := range d.Spec.Template.Spec.Containers[0].VolumeMounts {
		if path.Clean(vm.MountPath) != path.Clean(dir) {
			continue
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == vm.Name && v.ConfigMap != nil {
				cm := find[*corev1.ConfigMap](t, m, d.Namespace, v.ConfigMap.Name)
				if data, ok := cm.Data[key]; ok {
					return data
				}
				t.Fatalf("ConfigMap %s has no key %s", cm.Name, key)
			}
		}
	}
	t.Fatalf("Deployment %s mounts no ConfigMap at %s", d.Name, dir)
	return ""
}

// imageVolumeFile returns the path of file inside the image volume a
// Deployment mounts above it, or "".
func imageVolumeFile(t *testing.T, d *appsv1.Deployment, file string) string {
	t.Helper()
	for _, vm := range d.Spec.Template.Spec.Containers[0].VolumeMounts {
		rel, ok := strings.CutPrefix(file, path.Clean(vm.MountPath)+"/")
		if !ok {
			continue
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == vm.Name && v.Image != nil {
				return rel
			}
		}
	}
	return ""
}

func containerPort(d *appsv1.Deployment, name string) int32 {
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return p.ContainerPort
			}
		}
	}
	return 0
}

// TestKubernetesPrometheus: each PodMonitor selects a gateway and scrapes
// a port it has, at the path its stats are served.
func TestKubernetesPrometheus(t *testing.T) {
	m := loadKubernetes(t)
	if len(m.podMonitors) != 2 {
		t.Fatalf("%d PodMonitors, want 2 (Envoy and Istio gateways)", len(m.podMonitors))
	}
	gw := find[*appsv1.Deployment](t, m, "gpuroute", "gpuroute-gateway")
	istioSelector := wasmPluginObject(t, m).Spec.GetSelector().GetMatchLabels()
	for _, pm := range m.podMonitors {
		sel := pm.Spec.Selector.MatchLabels
		ep := pm.Spec.PodMetricsEndpoints[0]
		switch {
		case pm.Metadata.Namespace == gw.Namespace:
			for k, v := range sel {
				if gw.Spec.Template.Labels[k] != v {
					t.Errorf("PodMonitor %s selects %v, not the gateway's pods %v", pm.Metadata.Name, sel, gw.Spec.Template.Labels)
				}
			}
			if containerPort(gw, ep.Port) == 0 {
				t.Errorf("PodMonitor %s scrapes port %q, which the gateway does not name", pm.Metadata.Name, ep.Port)
			}
		case !mapsEqual(sel, istioSelector):
			t.Errorf("PodMonitor %s selects %v, want the WasmPlugin's gateways %v", pm.Metadata.Name, sel, istioSelector)
		}
		if ep.Path != "/stats/prometheus" {
			t.Errorf("PodMonitor %s path %q, want Envoy's /stats/prometheus", pm.Metadata.Name, ep.Path)
		}
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
