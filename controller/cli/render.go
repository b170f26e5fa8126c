package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpuroute/gpuroute/controller/pool"
)

func renderCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(Name+" render", flag.ContinueOnError)
	var ff Fleet
	ff.register(fs)
	objects := fs.String("objects", "", "multi-document YAML (or a kubectl List) of the InferencePool or Service, its Pods or EndpointSlices, and their Nodes (- for stdin)")
	base := fs.String("base", "", "the rest of the plugin configuration: JSON, a gpuroute EnvoyFilter or an ECDS TypedExtensionConfig (default {})")
	fs.Usage = func() {
		io.WriteString(stderr, "usage: "+Name+" render --objects FILE.yaml [flags]\n\n"+
			"Prints the plugin configuration the controller would publish for these objects:\n"+
			"  kubectl get inferencepool,pods -n NS -o yaml > objects.yaml\n"+
			"  kubectl get nodes -o yaml >> objects.yaml   (for the GPU labels; optional)\n\n")
		fs.PrintDefaults()
	}
	if ok, status := parse(fs, args, stdout, stderr); !ok {
		return status
	}
	if *objects == "" || fs.NArg() != 0 {
		fs.Usage()
		return ExitUsage
	}
	opts, err := ff.Options()
	if err != nil {
		io.WriteString(stderr, Name+": "+err.Error()+"\n")
		return ExitUsage
	}
	var baseCfg []byte
	if *base != "" {
		data, err := os.ReadFile(*base)
		if err != nil {
			io.WriteString(stderr, Name+": "+err.Error()+"\n")
			return ExitUsage
		}
		cfgs, err := pluginConfigs(data)
		if err != nil || len(cfgs) != 1 {
			if err == nil {
				err = errors.New("holds " + strconv.Itoa(len(cfgs)) + " configurations; give one")
			}
			io.WriteString(stderr, *base+": "+err.Error()+"\n")
			return ExitRefused
		}
		baseCfg = cfgs[0].config
	}
	data, err := readInput(*objects, stdin)
	if err != nil {
		io.WriteString(stderr, Name+": "+err.Error()+"\n")
		return ExitUsage
	}
	objs, err := decodeObjects(data)
	if err != nil {
		io.WriteString(stderr, *objects+": "+err.Error()+"\n")
		return ExitRefused
	}
	res, err := objs.result(ff, opts)
	if err != nil {
		io.WriteString(stderr, *objects+": "+err.Error()+"\n")
		return ExitRefused
	}
	for _, p := range res.Excluded {
		io.WriteString(stderr, "left out: "+p.String()+"\n")
	}
	for _, p := range res.Warnings {
		io.WriteString(stderr, "note: "+p.String()+"\n")
	}
	if res.NotReady > 0 {
		io.WriteString(stderr, "not ready: "+strconv.Itoa(res.NotReady)+"\n")
	}
	cfg, err := pool.Merge(baseCfg, res.Replicas)
	if err != nil {
		io.WriteString(stderr, Name+": "+err.Error()+"\n")
		return ExitRefused
	}
	stdout.Write(cfg)
	return ExitOK
}

// objects are the Kubernetes objects of a file, by kind.
type objects struct {
	pools    []pool.Pool
	pods     []*corev1.Pod
	nodes    map[string]*corev1.Node
	slices   []*discoveryv1.EndpointSlice
	services []*corev1.Service
}

// decodeObjects reads the objects render uses from YAML documents, each an
// object or a List of them (kubectl get -o yaml); other kinds are skipped.
// Unknown fields of the kinds read are an error: a typo in a hand-written
// file must not quietly drop a Pod's status.
func decodeObjects(data []byte) (*objects, error) {
	docs, err := documents(data)
	if err != nil {
		return nil, err
	}
	o := &objects{nodes: map[string]*corev1.Node{}}
	for i, doc := range docs {
		var u unstructured.Unstructured
		if err := json.Unmarshal(doc, &u.Object); err != nil {
			return nil, errors.New("document " + strconv.Itoa(i+1) + ": " + err.Error())
		}
		items := []unstructured.Unstructured{u}
		if u.IsList() {
			list, err := u.ToList()
			if err != nil {
				return nil, errors.New("document " + strconv.Itoa(i+1) + ": " + err.Error())
			}
			items = list.Items
		}
		for j := range items {
			if err := o.add(&items[j]); err != nil {
				return nil, errors.New("document " + strconv.Itoa(i+1) + ": " + err.Error())
			}
		}
	}
	return o, nil
}

// add decodes one object into its kind's list.
func (o *objects) add(u *unstructured.Unstructured) error {
	if u.GetNamespace() == "" && u.GetKind() != "Node" {
		u.SetNamespace("default") // as kubectl applies a namespaced object without one
	}
	var into any
	switch u.GetAPIVersion() + " " + u.GetKind() {
	case "v1 Pod":
		p := &corev1.Pod{}
		o.pods, into = append(o.pods, p), p
	case "v1 Node":
		n := &corev1.Node{}
		o.nodes[u.GetName()], into = n, n
	case "v1 Service":
		s := &corev1.Service{}
		o.services, into = append(o.services, s), s
	case "discovery.k8s.io/v1 EndpointSlice":
		s := &discoveryv1.EndpointSlice{}
		o.slices, into = append(o.slices, s), s
	case pool.InferencePoolGVR.GroupVersion().String() + " " + pool.InferencePoolKind:
		p, err := pool.PoolFromUnstructured(u)
		if err != nil {
			return err
		}
		o.pools = append(o.pools, p)
		return nil
	default:
		return nil
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, into, true); err != nil {
		return errors.New(u.GetKind() + " " + strconv.Quote(u.GetNamespace()+"/"+u.GetName()) + ": " + err.Error())
	}
	return nil
}

// result picks the pool or Service the flags name (the file's only
// InferencePool when they name none) and lists its replicas.
func (o *objects) result(ff Fleet, opts pool.Options) (pool.Result, error) {
	nodes := func(name string) *corev1.Node { return o.nodes[name] }
	inNamespace := func(ns string) bool { return ff.Namespace == "" || ns == ff.Namespace }
	if ff.Service != "" {
		if ff.Pool != "" {
			return pool.Result{}, errors.New("give --pool or --service, not both")
		}
		var svc *pool.Service
		for _, s := range o.services {
			if s.Name == ff.Service && inNamespace(s.Namespace) {
				svc = &pool.Service{Namespace: s.Namespace, Name: s.Name, Annotations: s.Annotations}
			}
		}
		if svc == nil {
			// The slices name their Service; the Service object only
			// brings annotations.
			ns := ff.Namespace
			if ns == "" {
				ns = "default"
			}
			svc = &pool.Service{Namespace: ns, Name: ff.Service}
		}
		svc.Port = ff.Port
		pods := func(ns, name string) *corev1.Pod {
			i := slices.IndexFunc(o.pods, func(p *corev1.Pod) bool { return p.Namespace == ns && p.Name == name })
			if i < 0 {
				return nil
			}
			return o.pods[i]
		}
		return pool.FromEndpointSlices(*svc, o.slices, pods, nodes, opts), nil
	}
	if ff.Port != "" {
		return pool.Result{}, errors.New("--port is for --service; an InferencePool's targetPorts give its ports")
	}
	var matches []pool.Pool
	var names []string
	for _, p := range o.pools {
		names = append(names, p.Namespace+"/"+p.Name)
		if (ff.Pool == "" || p.Name == ff.Pool) && inNamespace(p.Namespace) {
			matches = append(matches, p)
		}
	}
	switch {
	case len(matches) == 1:
		return pool.FromInferencePool(matches[0], o.pods, nodes, opts), nil
	case len(o.pools) == 0:
		return pool.Result{}, errors.New("no InferencePool (inference.networking.k8s.io/v1); give one, or --service")
	case len(matches) == 0:
		return pool.Result{}, errors.New("no InferencePool " + strconv.Quote(ff.Pool) + " here; there are " + strings.Join(names, ", "))
	}
	return pool.Result{}, errors.New("several InferencePools (" + strings.Join(names, ", ") + "); name one with --pool (and --namespace)")
}
