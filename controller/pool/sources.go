package pool

import (
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Nodes returns the node of a name, or nil.
type Nodes func(name string) *corev1.Node

// Pods returns the Pod of a namespace and name, or nil.
type Pods func(namespace, name string) *corev1.Pod

// FromInferencePool lists a replica for every ready Pod the pool selects
// and every port it serves: podIP:targetPort, named by the Pod (with
// "-<port>" when the pool has several ports). pods may hold any Pods; those
// outside the pool's namespace or selector are ignored. nodes may be nil.
func FromInferencePool(p Pool, pods []*corev1.Pod, nodes Nodes, o Options) Result {
	sel := labels.SelectorFromSet(p.Selector)
	var res Result
	var srcs []source
	for _, pod := range pods {
		if pod.Namespace != p.Namespace || !sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		if !podReady(pod) {
			res.NotReady++
			continue
		}
		addr, err := netip.ParseAddr(pod.Status.PodIP)
		if err != nil {
			res.Excluded = append(res.Excluded, Problem{Pod: podKey(pod), Err: errors.New("status.podIP " + quote(pod.Status.PodIP) + " is not an IP address")})
			continue
		}
		for _, port := range p.TargetPorts {
			name := pod.Name
			if len(p.TargetPorts) > 1 {
				name += "-" + strconv.Itoa(int(port))
			}
			srcs = append(srcs, source{name: name, addr: addr, port: port, pod: pod, node: nodes.get(pod.Spec.NodeName), defaults: p.Annotations})
		}
	}
	res.add(srcs, o)
	return res
}

// Service is a Kubernetes Service whose EndpointSlices list the fleet, for
// clusters without the Inference Extension.
type Service struct {
	Namespace, Name string
	// Annotations give the defaults of its Pods' annotations.
	Annotations map[string]string
	// Port picks the slices' port: its name, or its number (the Pods'
	// port, not the Service's). Empty: the slices must have one port.
	Port string
}

// LabelServiceName is the label that ties an EndpointSlice to its Service.
const LabelServiceName = discoveryv1.LabelServiceName

// FromEndpointSlices lists a replica for every ready endpoint of the
// Service's slices: address:port, named by its Pod. slices may hold any
// slices; those of other Services are ignored. An endpoint in several slices
// (a dual-stack Service lists each Pod once per family) is listed once, by
// its IPv4 address if it has one. pods and nodes may be nil.
func FromEndpointSlices(svc Service, eps []*discoveryv1.EndpointSlice, pods Pods, nodes Nodes, o Options) Result {
	var res Result
	ordered := make([]*discoveryv1.EndpointSlice, 0, len(eps))
	for _, s := range eps {
		if s.Namespace == svc.Namespace && s.Labels[LabelServiceName] == svc.Name &&
			(s.AddressType == discoveryv1.AddressTypeIPv4 || s.AddressType == discoveryv1.AddressTypeIPv6) {
			ordered = append(ordered, s)
		}
	}
	// IPv4 slices first, then by name, so the same objects give the same
	// list whatever order the informer returns them in.
	slices.SortFunc(ordered, func(a, b *discoveryv1.EndpointSlice) int {
		if a.AddressType != b.AddressType {
			return strings.Compare(string(a.AddressType), string(b.AddressType))
		}
		return strings.Compare(a.Name, b.Name)
	})
	var srcs []source
	seen := map[string]bool{}
	for _, s := range ordered {
		port, err := slicePort(s, svc.Port)
		if err != nil {
			res.Excluded = append(res.Excluded, Problem{Pod: svc.Namespace + "/" + svc.Name, Err: err})
			continue
		}
		for _, ep := range s.Endpoints {
			if len(ep.Addresses) == 0 {
				continue
			}
			if (ep.Conditions.Ready != nil && !*ep.Conditions.Ready) || (ep.Conditions.Terminating != nil && *ep.Conditions.Terminating) {
				res.NotReady++
				continue
			}
			src := source{name: ep.Addresses[0], port: port, defaults: svc.Annotations}
			if ep.TargetRef != nil && ep.TargetRef.Kind == "Pod" {
				src.name = ep.TargetRef.Name
				src.pod = pods.get(s.Namespace, ep.TargetRef.Name)
			} else if ep.Hostname != nil {
				src.name = *ep.Hostname
			}
			if seen[src.name] {
				continue
			}
			seen[src.name] = true
			addr, err := netip.ParseAddr(ep.Addresses[0])
			if err != nil {
				res.Excluded = append(res.Excluded, Problem{Pod: s.Namespace + "/" + src.name, Err: errors.New("address " + quote(ep.Addresses[0]) + " is not an IP address")})
				continue
			}
			src.addr = addr
			if ep.NodeName != nil {
				src.node = nodes.get(*ep.NodeName)
			}
			srcs = append(srcs, src)
		}
	}
	res.add(srcs, o)
	return res
}

// slicePort picks the port of a slice.
func slicePort(s *discoveryv1.EndpointSlice, want string) (int32, error) {
	where := "EndpointSlice " + s.Name
	if want == "" {
		if len(s.Ports) != 1 || s.Ports[0].Port == nil {
			return 0, errors.New(where + " has " + strconv.Itoa(len(s.Ports)) + " ports; name the one to route to (--port)")
		}
		return *s.Ports[0].Port, nil
	}
	for _, p := range s.Ports {
		if p.Port == nil {
			continue
		}
		if (p.Name != nil && *p.Name == want) || strconv.Itoa(int(*p.Port)) == want {
			return *p.Port, nil
		}
	}
	return 0, errors.New(where + " has no port named or numbered " + strconv.Quote(want))
}

// add builds the sources, whose names are unique, into replicas sorted by
// name.
func (res *Result) add(srcs []source, o Options) {
	slices.SortFunc(srcs, func(a, b source) int { return strings.Compare(a.name, b.name) })
	for _, s := range srcs {
		key := s.name
		if s.pod != nil {
			key = podKey(s.pod)
		}
		r, warnings, err := build(s, o)
		for _, w := range warnings {
			res.Warnings = append(res.Warnings, Problem{Pod: key, Err: w})
		}
		if err != nil {
			res.Excluded = append(res.Excluded, Problem{Pod: key, Err: err})
			continue
		}
		res.Replicas = append(res.Replicas, r)
	}
}

func podKey(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

func (n Nodes) get(name string) *corev1.Node {
	if n == nil || name == "" {
		return nil
	}
	return n(name)
}

func (p Pods) get(namespace, name string) *corev1.Pod {
	if p == nil {
		return nil
	}
	return p(namespace, name)
}
