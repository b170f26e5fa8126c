// Package envoyfilter writes the fleet's replica list into the gpuroute
// filter an Istio EnvoyFilter defines: the plugin configuration of the Wasm
// filter that its EXTENSION_CONFIG ADD patch carries. istiod sends the
// changed resource to the matching proxies through ECDS; Envoy keeps the
// plugin's VM and gives it a new root context, so the proxies follow the
// fleet without a restart.
//
//	p := &envoyfilter.Publisher{Client: istioClient, Namespace: "istio-system", Name: "gpuroute"}
//	err := p.Publish(ctx, replicas)
//
// An EnvoyFilter and not a WasmPlugin: gpuroute pauses the request headers
// until it has read the body, which Envoy allows only when the filter sets
// allow_on_headers_stop_iteration (Envoy 1.35 and later). The WasmPlugin API
// has no such field, and istiod applies EXTENSION_CONFIG patches only as
// ADD, so no EnvoyFilter can set it on a WasmPlugin's filter.
//
// The EnvoyFilter is the operator's: one JSON patch replaces the plugin
// configuration string, in which only the replicas key changes; every other
// key (tick_ms, adapters, …) and the rest of the object stay as applied.
package envoyfilter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	istioinformers "istio.io/client-go/pkg/informers/externalversions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuroute/gpuroute/controller/ecds"
	"github.com/gpuroute/gpuroute/controller/pool"
)

// stringValueType is the type of the Wasm filter's configuration: the
// plugin gets the string's bytes.
const stringValueType = "type.googleapis.com/google.protobuf.StringValue"

// Filter is the gpuroute filter an EnvoyFilter defines.
type Filter struct {
	// Extension is the ECDS resource the patch adds.
	Extension *corev3.TypedExtensionConfig
	// Configuration is its plugin configuration; nil if it has none.
	Configuration []byte
	// pointer is the JSON pointer of the configuration in the object.
	pointer string
}

// Find returns the gpuroute filter of an EnvoyFilter: its one
// EXTENSION_CONFIG patch that ADDs a Wasm filter (istiod applies no other
// operation to extension configs), or nil if it has none. The filter must
// set allow_on_headers_stop_iteration: without it Envoy withholds the body
// gpuroute routes on and every request hangs, so a list is never written
// into a filter that cannot use it (TestPublishRefused).
func Find(spec *networkingv1alpha3.EnvoyFilter) (*Filter, error) {
	f, err := find(spec)
	if err != nil {
		return nil, errors.New("envoyfilter: " + err.Error())
	}
	return f, nil
}

// find is Find with its errors unprefixed, for Publish to name the object.
func find(spec *networkingv1alpha3.EnvoyFilter) (*Filter, error) {
	var found *Filter
	for i, cp := range spec.GetConfigPatches() {
		v := cp.GetPatch().GetValue()
		tcKey, tc := member(v, "typed_config", "typedConfig")
		if cp.GetApplyTo() != networkingv1alpha3.EnvoyFilter_EXTENSION_CONFIG || cp.GetPatch().GetOperation() != networkingv1alpha3.EnvoyFilter_Patch_ADD ||
			tc.GetStructValue().GetFields()["@type"].GetStringValue() != ecds.WasmTypeURL {
			continue
		}
		where := "configPatches[" + strconv.Itoa(i) + "]"
		if found != nil {
			return nil, errors.New(where + " adds a second Wasm filter (" + strconv.Quote(v.GetFields()["name"].GetStringValue()) +
				" after " + strconv.Quote(found.Extension.GetName()) + "); keep the gpuroute filter in an EnvoyFilter of its own")
		}
		js, err := protojson.Marshal(v)
		if err != nil {
			return nil, errors.New(where + ": " + err.Error())
		}
		ext, err := ecds.ParseTemplate(js)
		if err != nil {
			return nil, errors.New(where + ": " + err.Error())
		}
		var w wasmfilterv3.Wasm
		if err := ext.GetTypedConfig().UnmarshalTo(&w); err != nil {
			return nil, errors.New(where + ": " + err.Error())
		}
		if !w.GetConfig().GetAllowOnHeadersStopIteration().GetValue() {
			return nil, errors.New(where + ": filter " + strconv.Quote(ext.GetName()) +
				" must set allow_on_headers_stop_iteration: true (without it Envoy withholds the request body gpuroute routes on, and every request hangs)")
		}
		cfg, err := ecds.Configuration(ext)
		if err != nil {
			return nil, errors.New(where + ": " + err.Error())
		}
		found = &Filter{Extension: ext, Configuration: cfg,
			pointer: "/spec/configPatches/" + strconv.Itoa(i) + "/patch/value/" + tcKey + "/config/configuration"}
	}
	return found, nil
}

// member returns the field of s under the first of names it has (protojson
// reads both spellings of a field), and the name it is under.
func member(s *structpb.Struct, names ...string) (string, *structpb.Value) {
	for _, n := range names {
		if v, ok := s.GetFields()[n]; ok {
			return n, v
		}
	}
	return "", nil
}

// Publisher keeps the replica list of one EnvoyFilter's gpuroute filter.
// The zero value is not usable; set every field but FieldManager. It is
// safe for concurrent use.
type Publisher struct {
	Client          istioclient.Interface
	Namespace, Name string
	// FieldManager names the writer in the object's managedFields.
	FieldManager string
}

// patchOp is one operation of a JSON patch (RFC 6902).
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// Publish writes rs as the filter's replica list, if it differs. The
// configuration that results is first checked with the plugin's parser, so
// a list the proxies would refuse is never written. The patch sets the
// resourceVersion read, which the API server holds it to: an edit made in
// between fails it with a conflict, and the next reconcile starts over
// from the new object (TestPublish).
func (p *Publisher) Publish(ctx context.Context, rs []pool.Replica) error {
	ef, err := p.Client.NetworkingV1alpha3().EnvoyFilters(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		return errors.New("envoyfilter: " + p.String() + ": " + err.Error())
	}
	f, err := find(&ef.Spec)
	if err != nil {
		return errors.New("envoyfilter: " + p.String() + ": " + err.Error())
	}
	if f == nil {
		return errors.New("envoyfilter: " + p.String() + " adds no Wasm filter (an EXTENSION_CONFIG ADD patch) to write the replica list into")
	}
	cfg, err := pool.Merge(f.Configuration, rs)
	if err != nil {
		return errors.New("envoyfilter: " + p.String() + ": " + err.Error())
	}
	if bytes.Equal(cfg, f.Configuration) {
		return nil
	}
	patch, err := json.Marshal([]patchOp{
		{Op: "replace", Path: "/metadata/resourceVersion", Value: ef.ResourceVersion},
		// add replaces the member when it is there (RFC 6902 4.1), and
		// creates it in a filter written without a configuration.
		{Op: "add", Path: f.pointer, Value: map[string]string{"@type": stringValueType, "value": string(cfg)}},
	})
	if err != nil {
		return errors.New("envoyfilter: " + err.Error())
	}
	_, err = p.Client.NetworkingV1alpha3().EnvoyFilters(p.Namespace).Patch(ctx, p.Name, types.JSONPatchType, patch,
		metav1.PatchOptions{FieldManager: p.FieldManager})
	if err != nil {
		return errors.New("envoyfilter: " + p.String() + ": " + err.Error())
	}
	return nil
}

// Watch calls changed whenever the EnvoyFilter changes (someone applied it
// again, perhaps with an old replica list) until ctx ends, so the list is
// put back; it returns once its cache has synced.
func (p *Publisher) Watch(ctx context.Context, changed func()) error {
	f := istioinformers.NewSharedInformerFactoryWithOptions(p.Client, 0, istioinformers.WithNamespace(p.Namespace),
		istioinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", p.Name).String()
		}))
	inf := f.Networking().V1alpha3().EnvoyFilters().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		UpdateFunc: func(any, any) { changed() },
		DeleteFunc: func(any) { changed() },
	}); err != nil {
		return errors.New("envoyfilter: " + err.Error())
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return errors.New("envoyfilter: " + p.String() + ": watch did not sync: " + context.Cause(ctx).Error())
	}
	return nil
}

// String names the destination in logs.
func (p *Publisher) String() string {
	return "EnvoyFilter " + strconv.Quote(p.Namespace+"/"+p.Name)
}
