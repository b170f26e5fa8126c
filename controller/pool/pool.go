// Package pool turns the Kubernetes objects of a model-server fleet into
// gpuroute's replica list: one replica per ready Pod and port, its address
// the Pod's IP, its hardware from the node's GPU label or an annotation, its
// engine and metrics port from annotations. It is pure (objects in, JSON
// out), so the controller's watch loop and `gpuroute-controller render` give
// the same answer for the same objects.
//
//	res := pool.FromInferencePool(p, pods, nodes, pool.Options{MetricsCluster: "gpuroute_metrics"})
//	cfg, err := pool.Merge(base, res.Replicas) // base: the rest of the plugin configuration
//
// Every replica is checked with the plugin's own parser (plugin/config)
// before it is listed, so one Pod with a bad annotation is left out with the
// parser's error instead of making the whole list one the plugin refuses.
package pool

import (
	"errors"
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// InferencePoolGVR is the resource the controller watches: the Gateway API
// Inference Extension's InferencePool at its v1 version. Its Go module is
// not on the module proxy, so the fields read are declared here
// (kubernetes-sigs/gateway-api-inference-extension api/v1/inferencepool_types.go).
var InferencePoolGVR = schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}

// InferencePoolKind is the kind of an InferencePool object.
const InferencePoolKind = "InferencePool"

// MaxTargetPorts is the API's bound on spec.targetPorts.
const MaxTargetPorts = 8

// Pool is what the controller reads of an InferencePool: the Pods it
// selects (spec.selector.matchLabels, in its own namespace) and the ports
// each of them serves (spec.targetPorts). Its annotations give the
// defaults of its Pods' annotations.
type Pool struct {
	Namespace, Name string
	Annotations     map[string]string
	Selector        map[string]string
	TargetPorts     []int32
}

// inferencePool declares the InferencePool fields the controller reads.
type inferencePool struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		TargetPorts []struct {
			Number int32 `json:"number"`
		} `json:"targetPorts"`
	} `json:"spec"`
}

// PoolFromUnstructured reads an InferencePool object. It refuses a pool
// that selects nothing by label (that would be every Pod of the namespace)
// and ports outside the API's rules, which the API server enforces too but
// a file given to render does not.
func PoolFromUnstructured(u *unstructured.Unstructured) (Pool, error) {
	var ip inferencePool
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &ip); err != nil {
		return Pool{}, errors.New("pool: InferencePool " + strconv.Quote(u.GetName()) + ": " + err.Error())
	}
	where := "pool: InferencePool " + strconv.Quote(ip.Metadata.Namespace+"/"+ip.Metadata.Name)
	if gv := InferencePoolGVR.GroupVersion().String(); ip.APIVersion != gv || ip.Kind != InferencePoolKind {
		return Pool{}, errors.New(where + ": want apiVersion " + gv + " kind " + InferencePoolKind + ", got " +
			strconv.Quote(ip.APIVersion) + " " + strconv.Quote(ip.Kind))
	}
	if len(ip.Spec.Selector.MatchLabels) == 0 {
		return Pool{}, errors.New(where + ": spec.selector.matchLabels is empty, which would select every Pod of the namespace")
	}
	n := len(ip.Spec.TargetPorts)
	if n == 0 || n > MaxTargetPorts {
		return Pool{}, errors.New(where + ": spec.targetPorts must list 1 to " + strconv.Itoa(MaxTargetPorts) + " ports, got " + strconv.Itoa(n))
	}
	p := Pool{Namespace: ip.Metadata.Namespace, Name: ip.Metadata.Name, Annotations: ip.Metadata.Annotations,
		Selector: ip.Spec.Selector.MatchLabels}
	for i, tp := range ip.Spec.TargetPorts {
		if tp.Number < 1 || tp.Number > 65535 {
			return Pool{}, errors.New(where + ": spec.targetPorts[" + strconv.Itoa(i) + "].number must be in [1, 65535], got " +
				strconv.Itoa(int(tp.Number)))
		}
		for _, q := range p.TargetPorts {
			if q == tp.Number {
				return Pool{}, errors.New(where + ": spec.targetPorts lists port " + strconv.Itoa(int(q)) + " twice")
			}
		}
		p.TargetPorts = append(p.TargetPorts, tp.Number)
	}
	return p, nil
}
