// Package wasmplugin writes the fleet's replica list into an Istio
// WasmPlugin's pluginConfig. istiod hands every matching proxy the new
// configuration through ECDS; Envoy keeps the plugin's VM and gives it a new
// root context, so the proxies follow the fleet without a restart.
//
//	p := &wasmplugin.Publisher{Client: istioClient, Namespace: "istio-system", Name: "gpuroute"}
//	err := p.Publish(ctx, replicas)
//
// The WasmPlugin is the operator's: only spec.pluginConfig.replicas is
// written, every other key (tick_ms, adapters, …) and the rest of the
// object stay as they were applied.
package wasmplugin

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"

	"google.golang.org/protobuf/encoding/protojson"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	istioinformers "istio.io/client-go/pkg/informers/externalversions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuroute/gpuroute/controller/pool"
	"github.com/gpuroute/gpuroute/plugin/config"
)

// Publisher keeps one WasmPlugin's replica list. The zero value is not
// usable; set every field. It is safe for concurrent use.
type Publisher struct {
	Client          istioclient.Interface
	Namespace, Name string
	// FieldManager names the writer in the object's managedFields.
	FieldManager string
}

// Publish writes rs as the WasmPlugin's replica list, if it differs. The
// configuration that results is first checked with the plugin's parser, as
// istiod serializes it (protojson of the Struct), so a list the proxies would
// refuse is never written. The patch carries the resourceVersion read: an
// edit made in between fails it with a conflict, and the next reconcile
// starts over from the new object.
func (p *Publisher) Publish(ctx context.Context, rs []pool.Replica) error {
	wp, err := p.Client.ExtensionsV1alpha1().WasmPlugins(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		return errors.New("wasmplugin: " + p.String() + ": " + err.Error())
	}
	current := []byte("{}")
	if pc := wp.Spec.GetPluginConfig(); pc != nil {
		if current, err = protojson.Marshal(pc); err != nil {
			return errors.New("wasmplugin: " + p.String() + ": spec.pluginConfig: " + err.Error())
		}
	}
	if _, err := pool.Merge(current, rs); err != nil {
		return errors.New("wasmplugin: " + p.String() + ": " + err.Error())
	}
	list, err := json.Marshal(rs)
	if err != nil {
		return errors.New("wasmplugin: " + err.Error())
	}
	if same, err := sameReplicas(current, list); err != nil || same {
		return err
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": wp.ResourceVersion},
		"spec":     map[string]any{"pluginConfig": map[string]json.RawMessage{config.KeyReplicas: list}},
	})
	if err != nil {
		return errors.New("wasmplugin: " + err.Error())
	}
	_, err = p.Client.ExtensionsV1alpha1().WasmPlugins(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: p.FieldManager})
	if err != nil {
		return errors.New("wasmplugin: " + p.String() + ": " + err.Error())
	}
	return nil
}

// sameReplicas compares the replica list of a plugin configuration with
// list as JSON values: a Struct holds every number as a double, so the
// bytes may differ where the values do not.
func sameReplicas(cfg, list []byte) (bool, error) {
	var have struct {
		Replicas any `json:"replicas"`
	}
	var want any
	if err := json.Unmarshal(cfg, &have); err != nil {
		return false, errors.New("wasmplugin: " + err.Error())
	}
	if err := json.Unmarshal(list, &want); err != nil {
		return false, errors.New("wasmplugin: " + err.Error())
	}
	return reflect.DeepEqual(have.Replicas, want), nil
}

// Watch calls changed whenever the WasmPlugin changes (someone applied it
// again, perhaps with an old replica list) until ctx ends, so the list is
// put back; it returns once its cache has synced.
func (p *Publisher) Watch(ctx context.Context, changed func()) error {
	f := istioinformers.NewSharedInformerFactoryWithOptions(p.Client, 0, istioinformers.WithNamespace(p.Namespace),
		istioinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", p.Name).String()
		}))
	inf := f.Extensions().V1alpha1().WasmPlugins().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		UpdateFunc: func(any, any) { changed() },
		DeleteFunc: func(any) { changed() },
	}); err != nil {
		return errors.New("wasmplugin: " + err.Error())
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return errors.New("wasmplugin: " + p.String() + ": watch did not sync: " + context.Cause(ctx).Error())
	}
	return nil
}

// String names the destination in logs.
func (p *Publisher) String() string {
	return "WasmPlugin " + strconv.Quote(p.Namespace+"/"+p.Name)
}
