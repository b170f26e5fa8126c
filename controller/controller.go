// Package controller keeps gpuroute's replica list in step with a
// Kubernetes fleet: it watches an InferencePool and the Pods it selects (or
// a Service's EndpointSlices), the nodes they run on, and hands every change
// of the list to its publishers (an Istio EnvoyFilter, an ECDS server for
// plain Envoy, a file for the local gateway).
//
//	c, err := controller.New(kube, dyn, controller.Options{Namespace: "llm", Pool: "llama",
//		Publishers: []controller.Publisher{filePublisher}})
//	err = c.Run(ctx) // until ctx ends
//
// Events are coalesced: a scale-out of fifty Pods is one new list, not
// fifty, after Options.Debounce. A list the plugin would refuse, or an
// empty one (the plugin needs a replica), is never published: the proxies
// keep the last good list and the log says why.
package controller

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/gpuroute/gpuroute/controller/pool"
)

// Publisher puts a replica list where the proxies read it.
type Publisher interface {
	// Publish makes rs the list; it does nothing if it already is.
	Publish(ctx context.Context, rs []pool.Replica) error
	// String names the destination in logs.
	String() string
}

// Watcher is a Publisher whose destination can change under it (a
// EnvoyFilter someone applies again): Watch calls changed on every change
// until ctx ends, and returns once it is watching.
type Watcher interface {
	Watch(ctx context.Context, changed func()) error
}

// Options say what to watch and where to publish.
type Options struct {
	// Namespace holds the pool or Service and its Pods.
	Namespace string
	// Pool names an InferencePool; Service names a Service whose
	// EndpointSlices list the fleet, with Port picking their port. Set one.
	Pool, Service, Port string
	// Replicas shapes every replica.
	Replicas pool.Options
	// Publishers get every new list, in order.
	Publishers []Publisher
	// Debounce is how long a change waits for others to join it.
	Debounce time.Duration
	// RetryDelay is the first wait after a failed publish; it doubles up
	// to a minute while publishing fails. 0 is half a second.
	RetryDelay time.Duration
	// Log gets the controller's lines; nil discards them.
	Log *slog.Logger
}

// Controller is the watch loop. Create it with New.
type Controller struct {
	o     Options
	kube  kubernetes.Interface
	dyn   dynamic.Interface
	queue workqueue.TypedRateLimitingInterface[string]
	log   *slog.Logger

	pods     cache.SharedIndexInformer
	nodes    cache.SharedIndexInformer
	pools    cache.SharedIndexInformer // pool mode
	slices   cache.SharedIndexInformer // service mode
	services cache.SharedIndexInformer // service mode
	synced   []cache.InformerSynced
	start    []func(stop <-chan struct{})

	ready    atomic.Bool
	mu       sync.Mutex
	reported map[string]bool // problems already logged
}

// key is the queue's one item: every event asks for the same reconcile.
const key = "fleet"

// New returns a controller over the clients; dyn is only used in pool mode.
func New(kube kubernetes.Interface, dyn dynamic.Interface, o Options) (*Controller, error) {
	if (o.Pool == "") == (o.Service == "") {
		return nil, errors.New("controller: set exactly one of a pool and a service to follow")
	}
	if o.Pool != "" && o.Port != "" {
		return nil, errors.New("controller: a port is chosen by the pool's targetPorts; --port is for a service")
	}
	if o.Namespace == "" {
		return nil, errors.New("controller: namespace is empty")
	}
	if len(o.Publishers) == 0 {
		return nil, errors.New("controller: no publisher: nothing would receive the replica list")
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if o.RetryDelay == 0 {
		o.RetryDelay = 500 * time.Millisecond
	}
	c := &Controller{o: o, kube: kube, dyn: dyn, log: log, reported: map[string]bool{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](o.RetryDelay, time.Minute),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "gpuroute-controller"})}
	inNamespace := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(o.Namespace),
		informers.WithTransform(stripManagedFields))
	cluster := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithTransform(stripManagedFields))
	c.pods = inNamespace.Core().V1().Pods().Informer()
	c.nodes = cluster.Core().V1().Nodes().Informer()
	c.watch(c.pods, c.nodes)
	c.start = append(c.start, inNamespace.Start, cluster.Start)
	byName := func(name string) func(*metav1.ListOptions) {
		return func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}
	}
	if o.Pool != "" {
		if dyn == nil {
			return nil, errors.New("controller: following an InferencePool needs a dynamic client")
		}
		f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, o.Namespace, byName(o.Pool))
		c.pools = f.ForResource(pool.InferencePoolGVR).Informer()
		c.watch(c.pools)
		c.start = append(c.start, f.Start)
	} else {
		sliceFactory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(o.Namespace),
			informers.WithTransform(stripManagedFields), informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
				lo.LabelSelector = labels.SelectorFromSet(labels.Set{pool.LabelServiceName: o.Service}).String()
			}))
		svcFactory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(o.Namespace),
			informers.WithTransform(stripManagedFields), informers.WithTweakListOptions(byName(o.Service)))
		c.slices = sliceFactory.Discovery().V1().EndpointSlices().Informer()
		c.services = svcFactory.Core().V1().Services().Informer()
		c.watch(c.slices, c.services)
		c.start = append(c.start, sliceFactory.Start, svcFactory.Start)
	}
	return c, nil
}

// watch has every event of the informers ask for a reconcile.
func (c *Controller) watch(infs ...cache.SharedIndexInformer) {
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.changed() },
		UpdateFunc: func(any, any) { c.changed() },
		DeleteFunc: func(any) { c.changed() },
	}
	for _, inf := range infs {
		_, _ = inf.AddEventHandler(h) // fails only on a stopped informer, and none has started
		c.synced = append(c.synced, inf.HasSynced)
	}
}

// changed schedules a reconcile after the debounce; events meanwhile join
// it, since the queue holds one item.
func (c *Controller) changed() { c.queue.AddAfter(key, c.o.Debounce) }

// stripManagedFields drops what the controller never reads, which is most
// of a cached object's memory.
func stripManagedFields(obj any) (any, error) {
	if a, err := meta.Accessor(obj); err == nil {
		a.SetManagedFields(nil)
	}
	return obj, nil
}

// Ready reports whether the caches have synced and the last reconcile
// published to every publisher.
func (c *Controller) Ready() bool { return c.ready.Load() }

// Run watches and publishes until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer c.queue.ShutDown()
	for _, s := range c.start {
		s(ctx.Done())
	}
	for _, p := range c.o.Publishers {
		if w, ok := p.(Watcher); ok {
			if err := w.Watch(ctx, c.changed); err != nil {
				return err
			}
		}
	}
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return errors.New("controller: caches did not sync: " + context.Cause(ctx).Error())
	}
	c.log.Info("watching", "namespace", c.o.Namespace, "pool", c.o.Pool, "service", c.o.Service)
	c.queue.Add(key)
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	for {
		item, shutdown := c.queue.Get()
		if shutdown {
			return nil
		}
		if err := c.reconcile(ctx); err != nil && ctx.Err() == nil {
			c.ready.Store(false)
			c.log.Error("publish failed; retrying", "error", err)
			c.queue.AddRateLimited(item)
		} else {
			c.queue.Forget(item)
		}
		c.queue.Done(item)
	}
}

// reconcile computes the list from the caches and publishes it.
func (c *Controller) reconcile(ctx context.Context) error {
	res, err := c.result()
	if err != nil {
		return err
	}
	c.report(res)
	if len(res.Replicas) == 0 {
		// The plugin refuses an empty list; the proxies keep the last one,
		// whose replicas their health checks rule out if they are gone.
		c.log.Warn("no ready replica; the proxies keep the last list", "not_ready", res.NotReady, "excluded", len(res.Excluded))
		c.ready.Store(true)
		return nil
	}
	var errs []error
	for _, p := range c.o.Publishers {
		if err := p.Publish(ctx, res.Replicas); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	c.ready.Store(true)
	c.log.Debug("published", "replicas", len(res.Replicas), "not_ready", res.NotReady)
	return nil
}

// result builds the list from the caches.
func (c *Controller) result() (pool.Result, error) {
	nodes := func(name string) *corev1.Node {
		obj, ok, _ := c.nodes.GetStore().GetByKey(name)
		if !ok {
			return nil
		}
		return obj.(*corev1.Node)
	}
	if c.o.Pool != "" {
		obj, ok, _ := c.pools.GetStore().GetByKey(c.o.Namespace + "/" + c.o.Pool)
		if !ok {
			return pool.Result{}, errors.New("controller: InferencePool " + c.o.Namespace + "/" + c.o.Pool + " not found")
		}
		p, err := pool.PoolFromUnstructured(obj.(*unstructured.Unstructured))
		if err != nil {
			return pool.Result{}, err
		}
		return pool.FromInferencePool(p, typed[corev1.Pod](c.pods), nodes, c.o.Replicas), nil
	}
	svc := pool.Service{Namespace: c.o.Namespace, Name: c.o.Service, Port: c.o.Port}
	if obj, ok, _ := c.services.GetStore().GetByKey(c.o.Namespace + "/" + c.o.Service); ok {
		svc.Annotations = obj.(*corev1.Service).Annotations
	}
	pods := func(namespace, name string) *corev1.Pod {
		obj, ok, _ := c.pods.GetStore().GetByKey(namespace + "/" + name)
		if !ok {
			return nil
		}
		return obj.(*corev1.Pod)
	}
	return pool.FromEndpointSlices(svc, typed[discoveryv1.EndpointSlice](c.slices), pods, nodes, c.o.Replicas), nil
}

// report logs each problem once, and again only after it went away.
func (c *Controller) report(res pool.Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := map[string]bool{}
	log := func(level slog.Level, msg string, ps []pool.Problem) {
		for _, p := range ps {
			s := p.String()
			now[s] = true
			if !c.reported[s] {
				c.log.Log(context.Background(), level, msg, "pod", p.Pod, "error", p.Err.Error())
			}
		}
	}
	log(slog.LevelWarn, "pod left out of the replica list", res.Excluded)
	log(slog.LevelInfo, "pod listed with a default", res.Warnings)
	c.reported = now
}

// typed returns an informer's objects, sorted by key so a list built from
// them does not depend on the store's order.
func typed[T any](inf cache.SharedIndexInformer) []*T {
	keys := inf.GetStore().ListKeys()
	slices.SortFunc(keys, strings.Compare)
	out := make([]*T, 0, len(keys))
	for _, k := range keys {
		if obj, ok, _ := inf.GetStore().GetByKey(k); ok {
			if t, ok := obj.(*T); ok {
				out = append(out, t)
			}
		}
	}
	return out
}
