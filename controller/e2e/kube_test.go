package e2e

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	clientv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
	"sigs.k8s.io/yaml"

	"github.com/gpuroute/gpuroute/controller"
	"github.com/gpuroute/gpuroute/controller/cli"
	"github.com/gpuroute/gpuroute/controller/envoyfilter"
	"github.com/gpuroute/gpuroute/controller/pool"
	"github.com/gpuroute/gpuroute/plugin/config"
)

// examples is examples/kubernetes, from this module's directory.
var examples = filepath.Join("..", "..", "examples", "kubernetes")

// wait bounds every wait on the API server: a healthy run takes seconds.
const wait = 2 * time.Minute

// startEtcd starts an etcd in the process, listening on a Unix socket, and
// returns its client URL.
func startEtcd(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cfg := embed.NewConfig()
	cfg.Dir = filepath.Join(dir, "data")
	cfg.LogLevel = "error"
	sock := url.URL{Scheme: "unix", Host: filepath.Join(dir, "etcd.sock")}
	cfg.ListenClientUrls = []url.URL{sock}
	cfg.AdvertiseClientUrls = []url.URL{sock}
	peer := url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(freePort(t))}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatal(err)
	case <-time.After(wait):
		t.Fatal("etcd did not start")
	}
	// Not sock.String(), which escapes the path: etcd's client takes the
	// socket's path as it is.
	return "unix://" + sock.Host
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// crd declares a CustomResourceDefinition that keeps whatever its objects
// hold: the API server only has to store and serve them. A group under
// k8s.io needs the API-review annotation; the Inference Extension's CRDs
// carry this one (api/v1/inferencepool_types.go).
func crd(group, version, kind, plural string) *apiextensionsv1.CustomResourceDefinition {
	keep := true
	var ann map[string]string
	if strings.HasSuffix(group, ".k8s.io") {
		ann = map[string]string{"api-approved.kubernetes.io": "https://github.com/kubernetes-sigs/gateway-api-inference-extension/pull/1173"}
	}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group, Annotations: ann},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Kind: kind, ListKind: kind + "List"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: &keep}}}},
		},
	}
}

// envoyFilterGVR is Istio's EnvoyFilter resource.
var envoyFilterGVR = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1alpha3", Resource: "envoyfilters"}

// objects returns the objects of a multi-document YAML file of the examples.
func objects(t *testing.T, file string) []*unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(examples, filepath.FromSlash(file)))
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, doc := range bytes.Split(raw, []byte("\n---\n")) {
		var u unstructured.Unstructured
		if err := yaml.Unmarshal(doc, &u.Object); err == nil && u.Object != nil {
			out = append(out, &u)
		}
	}
	return out
}

// readObject returns the one object of a file of the examples.
func readObject(t *testing.T, file string) *unstructured.Unstructured {
	t.Helper()
	objs := objects(t, file)
	if len(objs) != 1 {
		t.Fatalf("%s holds %d objects, want 1", file, len(objs))
	}
	return objs[0]
}

// apply creates every object of a multi-document YAML file.
func apply(t *testing.T, ctx context.Context, dyn dynamic.Interface, mapper meta.RESTMapper, file string) {
	t.Helper()
	for _, u := range objects(t, file) {
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %s: %v", file, gvk, err)
		}
		var r dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			r = dyn.Resource(m.Resource).Namespace(u.GetNamespace())
		}
		if _, err := r.Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("%s: create %s %s/%s: %v", file, gvk.Kind, u.GetNamespace(), u.GetName(), err)
		}
	}
}

// controllerArgs reads the arguments of a file's gpuroute-controller
// Deployment with the command's own parser.
func controllerArgs(t *testing.T, file string) *cli.RunArgs {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(examples, filepath.FromSlash(file)))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range bytes.Split(raw, []byte("\n---\n")) {
		var d struct {
			Kind string `json:"kind"`
			Spec struct {
				Template struct {
					Spec corev1.PodSpec `json:"spec"`
				} `json:"template"`
			} `json:"spec"`
		}
		if yaml.Unmarshal(doc, &d) != nil || d.Kind != "Deployment" {
			continue
		}
		args := d.Spec.Template.Spec.Containers[0].Args
		ra, err := cli.ParseRunArgs(args[1:], os.Stderr)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		return ra
	}
	t.Fatalf("%s has no Deployment", file)
	return nil
}

// pod creates a Pod of the example fleet on a node, ready or not.
func pod(t *testing.T, ctx context.Context, kube kubernetes.Interface, name, ip, node string, ready bool) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "llm", Name: name, Labels: map[string]string{"app": "vllm-llama"}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai"}}},
	}
	created, err := kube.CoreV1().Pods("llm").Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setReady(t, ctx, kube, created, ip, ready)
}

func setReady(t *testing.T, ctx context.Context, kube kubernetes.Interface, p *corev1.Pod, ip string, ready bool) {
	t.Helper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}}
	if _, err := kube.CoreV1().Pods("llm").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestControllerOnAPIServer: with the example manifests applied, the
// controller, running as the example ServiceAccount, writes exactly the
// ready Pods into the example EnvoyFilter's gpuroute filter and follows a
// Pod becoming ready, puts the list back when the EnvoyFilter is applied
// again,
// and, following the Service instead, writes its ready endpoints to a file.
func TestControllerOnAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*wait)
	defer cancel()
	storage := storagebackend.NewDefaultConfig("/registry", nil)
	storage.Transport.ServerList = []string{startEtcd(t)}
	// No controller-manager runs: nothing would create the namespaces'
	// default ServiceAccounts that the ServiceAccount admission plugin
	// wants for every Pod.
	server := kubeapiservertesting.StartTestServerOrDie(t, nil,
		[]string{"--authorization-mode=RBAC", "--disable-admission-plugins=ServiceAccount"}, storage)
	t.Cleanup(server.TearDownFn)
	admin := server.ClientConfig
	kube := kubernetes.NewForConfigOrDie(admin)
	dyn := dynamic.NewForConfigOrDie(admin)

	exts := apiextensionsclient.NewForConfigOrDie(admin)
	for _, c := range []*apiextensionsv1.CustomResourceDefinition{
		crd(pool.InferencePoolGVR.Group, pool.InferencePoolGVR.Version, pool.InferencePoolKind, pool.InferencePoolGVR.Resource),
		crd("networking.istio.io", "v1alpha3", "EnvoyFilter", "envoyfilters"),
	} {
		if _, err := exts.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		established(t, ctx, exts, c.Name)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kube.Discovery()))
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"fleet.yaml", "controller-rbac.yaml", "istio/controller.yaml", "istio/envoyfilter-gpuroute.yaml"} {
		apply(t, ctx, dyn, mapper, f)
	}
	for i, product := range []string{"NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-" + strconv.Itoa(i), Labels: map[string]string{pool.LabelNVIDIAProduct: product}}}
		if _, err := kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod(t, ctx, kube, "vllm-llama-0", "10.1.0.10", "gpu-0", true)
	pod(t, ctx, kube, "vllm-llama-1", "10.1.0.11", "gpu-1", true)
	pod(t, ctx, kube, "vllm-llama-2", "10.1.0.12", "gpu-1", false)

	// The controller's identity: the example ServiceAccount, its rights
	// exactly what the example RBAC grants.
	as := rest.CopyConfig(admin)
	as.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:gpuroute:gpuroute-controller",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:gpuroute", "system:authenticated"}}
	asKube := kubernetes.NewForConfigOrDie(as)
	if _, err := asKube.CoreV1().Secrets("llm").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the controller's ServiceAccount lists Secrets: %v; want it forbidden (is the impersonation in effect?)", err)
	}
	ra := controllerArgs(t, "istio/controller.yaml")
	opts, err := ra.Options()
	if err != nil {
		t.Fatal(err)
	}
	ic := istioclient.NewForConfigOrDie(as)
	efNamespace, efName, _ := strings.Cut(ra.EnvoyFilter, "/")
	pub := &envoyfilter.Publisher{Client: ic, Namespace: efNamespace, Name: efName, FieldManager: cli.Name}
	log := slog.New(slog.NewTextHandler(testLog{t}, nil))
	c, err := controller.New(asKube, dynamic.NewForConfigOrDie(as), controller.Options{Namespace: ra.Namespace, Pool: ra.Pool,
		Replicas: opts, Publishers: []controller.Publisher{pub}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()

	adminIstio := istioclient.NewForConfigOrDie(admin)
	waitReplicas(t, ctx, adminIstio, []string{"vllm-llama-0 h100 10.1.0.10:8000", "vllm-llama-1 a100 10.1.0.11:8000"}, ra.MetricsCluster)
	p, err := kube.CoreV1().Pods("llm").Get(ctx, "vllm-llama-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setReady(t, ctx, kube, p, "10.1.0.12", true)
	three := []string{"vllm-llama-0 h100 10.1.0.10:8000", "vllm-llama-1 a100 10.1.0.11:8000", "vllm-llama-2 a100 10.1.0.12:8000"}
	written := waitReplicas(t, ctx, adminIstio, three, ra.MetricsCluster)

	// The operator applies the file again, its configuration without
	// replicas: the controller puts the list back.
	efs := dyn.Resource(envoyFilterGVR).Namespace(efNamespace)
	current, err := efs.Get(ctx, efName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	current.Object["spec"] = readObject(t, "istio/envoyfilter-gpuroute.yaml").Object["spec"]
	if _, err := efs.Update(ctx, current, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The API server holds a JSON patch like the publisher's to the
	// resourceVersion it sets: one read before that change is refused.
	stale := `[{"op":"replace","path":"/metadata/resourceVersion","value":"` + written.ResourceVersion + `"},` +
		`{"op":"add","path":"/metadata/labels","value":{"stale":"true"}}]`
	if _, err := efs.Patch(ctx, efName, types.JSONPatchType, []byte(stale), metav1.PatchOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("a JSON patch at the resourceVersion before a change = %v, want a conflict", err)
	}
	waitReplicas(t, ctx, adminIstio, three, ra.MetricsCluster)
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// The Service instead, through EndpointSlices (no endpoint controller
	// runs here, so the test writes the slice).
	ready, notReady := true, false
	port, name := int32(8000), "http"
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "llm", Name: "vllm-llama-x", Labels: map[string]string{pool.LabelServiceName: "vllm-llama"}},
		AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.1.0.10"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "llm", Name: "vllm-llama-0"}},
			{Addresses: []string{"10.1.0.11"}, Conditions: discoveryv1.EndpointConditions{Ready: &notReady},
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "llm", Name: "vllm-llama-1"}},
		},
	}
	if _, err := kube.DiscoveryV1().EndpointSlices("llm").Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	file := &notify{File: controller.File{Path: filepath.Join(t.TempDir(), "plugin.json")}, done: make(chan struct{})}
	era := controllerArgs(t, "envoy/controller.yaml")
	sc, err := controller.New(asKube, nil, controller.Options{Namespace: era.Namespace, Service: era.Service, Port: era.Port,
		Publishers: []controller.Publisher{file}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop = context.WithCancel(ctx)
	go func() { done <- sc.Run(runCtx) }()
	select {
	case <-file.done:
	case err := <-done:
		t.Fatalf("the Service's controller stopped: %v", err)
	case <-ctx.Done():
		t.Fatal("the Service's controller wrote no file")
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file.Path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(b)
	if err != nil || len(cfg.Replicas) != 1 || cfg.Replicas[0].Name != "vllm-llama-0" || cfg.Replicas[0].Hardware != "h100" {
		t.Errorf("file from the Service: %v %s; want the one ready endpoint, vllm-llama-0 on h100", err, b)
	}
}

// testLog puts the controller's log lines into the test's output, where a
// refused API request shows up as it happens.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// notify is a File publisher that reports its first write.
type notify struct {
	controller.File
	done chan struct{}
}

func (n *notify) Publish(ctx context.Context, rs []pool.Replica) error {
	err := n.File.Publish(ctx, rs)
	if err == nil && n.done != nil {
		close(n.done)
		n.done = nil
	}
	return err
}

// established waits for a CRD to be served.
func established(t *testing.T, ctx context.Context, c apiextensionsclient.Interface, name string) {
	t.Helper()
	lw := &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
			return c.ApiextensionsV1().CustomResourceDefinitions().List(ctx, o)
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
			return c.ApiextensionsV1().CustomResourceDefinitions().Watch(ctx, o)
		},
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	_, err := watchtools.UntilWithSync(wctx, lw, &apiextensionsv1.CustomResourceDefinition{}, nil, func(e watch.Event) (bool, error) {
		d, ok := e.Object.(*apiextensionsv1.CustomResourceDefinition)
		if !ok {
			return false, nil
		}
		for _, cond := range d.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("CRD %s not established: %v", name, err)
	}
}

// waitReplicas watches the gpuroute EnvoyFilter until the configuration of
// its filter, which istiod hands the proxies, lists want ("name hardware
// address"), each scraped through metricsCluster, and returns the object.
func waitReplicas(t *testing.T, ctx context.Context, ic istioclient.Interface, want []string, metricsCluster string) *clientv1alpha3.EnvoyFilter {
	t.Helper()
	efs := ic.NetworkingV1alpha3().EnvoyFilters("istio-system")
	lw := &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) { return efs.List(ctx, o) },
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			return efs.Watch(ctx, o)
		},
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var last string
	e, err := watchtools.UntilWithSync(wctx, lw, &clientv1alpha3.EnvoyFilter{}, nil, func(e watch.Event) (bool, error) {
		ef, ok := e.Object.(*clientv1alpha3.EnvoyFilter)
		if !ok || ef.Name != "gpuroute" {
			return false, nil
		}
		f, err := envoyfilter.Find(&ef.Spec)
		if err != nil || f == nil {
			return false, err
		}
		last = string(f.Configuration)
		cfg, err := config.Parse(f.Configuration)
		if err != nil {
			return false, nil // no replica yet: the operator's EnvoyFilter as applied
		}
		var got []string
		for _, r := range cfg.Replicas {
			if r.MetricsCluster != metricsCluster {
				return false, nil
			}
			got = append(got, r.Name+" "+r.Hardware+" "+r.AddressText)
		}
		return slices.Equal(got, want), nil
	})
	if err != nil {
		t.Fatalf("the gpuroute EnvoyFilter never listed %v (last configuration %s): %v", want, last, err)
	}
	return e.Object.(*clientv1alpha3.EnvoyFilter)
}
