package examples

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	overridehostv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/override_host/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	extensionsv1alpha1 "istio.io/api/extensions/v1alpha1"
	networkingv1 "istio.io/api/networking/v1"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	"sigs.k8s.io/yaml"

	// Typed configs the examples use, registered so protojson can resolve
	// their "@type" and the walker can unpack and validate them.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/least_request/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"github.com/gpuroute/gpuroute/plugin/config"
)

// Wire names the examples must agree on (docs/abi.md "Envoy behaviour").
const (
	destinationHeader = "x-gateway-destination-endpoint"
	vmID              = "gpuroute"
	runtimeV8         = "envoy.wasm.runtime.v8"
	modulePath        = "/etc/gpuroute/gpuroute.wasm"
	wasmTypeURL       = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"
	overrideHostName  = "envoy.load_balancing_policies.override_host"
)

// strict rejects unknown fields: a typo in an example must fail here, not be
// dropped silently (Envoy itself rejects unknown fields too).
var strict = protojson.UnmarshalOptions{DiscardUnknown: false}

// readJSON reads a YAML file and returns it as JSON.
func readJSON(t *testing.T, path string) []byte {
	t.Helper()
	y, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(y)
	if err != nil {
		t.Fatalf("YAMLToJSON(%s): %v", path, err)
	}
	return j
}

// validateDeep runs the protoc-gen-validate rules on m and on every message
// packed in an Any below it: ValidateAll stops at Any fields, and typed
// configs are where most of an Envoy configuration lives.
func validateDeep(t *testing.T, where string, m proto.Message) {
	t.Helper()
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			t.Errorf("%s: %T.ValidateAll() = %v, want nil", where, m, err)
		}
	}
	walkAny(t, where, m.ProtoReflect())
}

func walkAny(t *testing.T, where string, m protoreflect.Message) {
	t.Helper()
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			t.Errorf("%s: cannot unpack %s: %v", where, a.GetTypeUrl(), err)
			return
		}
		validateDeep(t, where+"/"+a.GetTypeUrl(), inner)
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				walkAny(t, where, l.Get(i).Message())
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				walkAny(t, where, mv.Message())
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			walkAny(t, where, v.Message())
		}
		return true
	})
}

// checkPlugin holds a Wasm PluginConfig to the examples' contract and returns
// the parsed gpuroute configuration.
func checkPlugin(t *testing.T, where string, pc *wasmv3.PluginConfig) *config.Config {
	t.Helper()
	vm := pc.GetVmConfig()
	if vm.GetVmId() != vmID || vm.GetRuntime() != runtimeV8 {
		t.Errorf("%s: vm_id %q runtime %q, want %q %q", where, vm.GetVmId(), vm.GetRuntime(), vmID, runtimeV8)
	}
	if f := vm.GetCode().GetLocal().GetFilename(); f != modulePath {
		t.Errorf("%s: module %q, want %q", where, f, modulePath)
	}
	if pc.GetFailurePolicy() != wasmv3.FailurePolicy_FAIL_CLOSED {
		t.Errorf("%s: failure_policy %v, want FAIL_CLOSED", where, pc.GetFailurePolicy())
	}
	var s wrapperspb.StringValue
	if err := pc.GetConfiguration().UnmarshalTo(&s); err != nil {
		t.Fatalf("%s: configuration is not a StringValue: %v", where, err)
	}
	cfg, err := config.Parse([]byte(s.GetValue()))
	if err != nil {
		t.Fatalf("%s: config.Parse(configuration) = %v, want nil", where, err)
	}
	return cfg
}

// envoyCase describes one Envoy example and what its routing must look like.
type envoyCase struct {
	name, file string
	// ecds names the TypedExtensionConfig file serving the filter, if any.
	ecds string
	// overrideHost: the route's cluster uses override_host (fallback lists)
	// instead of ORIGINAL_DST.
	overrideHost bool
	// singleton: a WasmService bootstrap extension shares the vm_id.
	singleton bool
}

var envoyCases = []envoyCase{
	{name: "original_dst", file: "bootstrap.yaml"},
	{name: "override_host", file: "override-host.yaml", overrideHost: true},
	{name: "ecds", file: "ecds.yaml", ecds: "gpuroute-filter.yaml"},
	{name: "singleton", file: "singleton.yaml", singleton: true},
	{name: "peers", file: "peers.yaml"},
}

// TestEveryExampleIsTested keeps new example files from escaping the tests.
func TestEveryExampleIsTested(t *testing.T) {
	known := map[string]bool{}
	for _, c := range envoyCases {
		known[filepath.Join("envoy", c.file)] = true
		if c.ecds != "" {
			known[filepath.Join("envoy", c.ecds)] = true
		}
	}
	for _, f := range istioFiles {
		known[filepath.Join("istio", f)] = true
	}
	for _, f := range kubernetesFiles {
		known[filepath.Join("kubernetes", filepath.FromSlash(f))] = true
	}
	for _, pattern := range []string{"envoy/*.yaml", "envoy/*.yml", "envoy/*.json", "istio/*.yaml", "istio/*.yml",
		"kubernetes/*.yaml", "kubernetes/*.yml", "kubernetes/*/*.yaml", "kubernetes/*/*.yml"} {
		files, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if !known[f] {
				t.Errorf("%s is not listed in examples_test.go, so nothing checks it", f)
			}
		}
	}
}

func TestEnvoyExamples(t *testing.T) {
	for _, tc := range envoyCases {
		t.Run(tc.name, func(t *testing.T) {
			var bs bootstrapv3.Bootstrap
			if err := strict.Unmarshal(readJSON(t, filepath.Join("envoy", tc.file)), &bs); err != nil {
				t.Fatalf("protojson.Unmarshal(%s) into Bootstrap: %v", tc.file, err)
			}
			validateDeep(t, tc.file, &bs)

			clusters := map[string]*clusterv3.Cluster{}
			for _, c := range bs.GetStaticResources().GetClusters() {
				clusters[c.GetName()] = c
			}
			var cfgs []*config.Config
			var routeClusters []string
			var retries uint32
			var filters int
			eachHCM(t, tc.file, &bs, func(_ *listenerv3.Listener, hcm *hcmv3.HttpConnectionManager) {
				for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
					for _, r := range vh.GetRoutes() {
						routeClusters = append(routeClusters, r.GetRoute().GetCluster())
						retries = max(retries, r.GetRoute().GetRetryPolicy().GetNumRetries().GetValue())
					}
				}
				hf := hcm.GetHttpFilters()
				if n := len(hf); n < 2 || hf[n-1].GetName() != "envoy.filters.http.router" {
					t.Errorf("%s: the router must be the last HTTP filter", tc.file)
				}
				for _, h := range hf {
					if h.GetName() != "gpuroute" {
						continue
					}
					filters++
					cfg := checkFilter(t, tc, h, clusters)
					if cfg.Scraper {
						t.Errorf("%s: the gpuroute HTTP filter has role %q, which routes without sharing its work", tc.file, config.RoleScraper)
					}
					checkHeldTimeouts(t, tc.file, hcm, cfg)
					cfgs = append(cfgs, cfg)
				}
			})
			if filters != 1 {
				t.Fatalf("%s: %d gpuroute HTTP filters, want 1", tc.file, filters)
			}
			var services int
			for _, ext := range bs.GetBootstrapExtensions() {
				var svc wasmv3.WasmService
				if err := ext.GetTypedConfig().UnmarshalTo(&svc); err != nil {
					continue
				}
				services++
				if !svc.GetSingleton() {
					t.Errorf("%s: WasmService %s is not a singleton", tc.file, ext.GetName())
				}
				cfg := checkPlugin(t, tc.file+": bootstrap extension "+ext.GetName(), svc.GetConfig())
				if !cfg.Scraper {
					// Without it the service is one more lease contender,
					// and scraping may land on a worker's thread.
					t.Errorf("%s: WasmService %s configuration lacks \"role\": %q", tc.file, ext.GetName(), config.RoleScraper)
				}
				cfgs = append(cfgs, cfg)
			}
			if want := map[bool]int{true: 1, false: 0}[tc.singleton]; services != want {
				t.Errorf("%s: %d WasmService extensions, want %d", tc.file, services, want)
			}

			if len(routeClusters) == 0 {
				t.Fatalf("%s: no route", tc.file)
			}
			for _, name := range routeClusters {
				c := clusters[name]
				if c == nil {
					t.Fatalf("%s: route cluster %q is not defined", tc.file, name)
				}
				for _, cfg := range cfgs {
					checkDestination(t, tc, c, cfg, retries)
				}
			}
			for _, cfg := range cfgs {
				for _, r := range cfg.Replicas {
					if r.MetricsCluster != "" && clusters[r.MetricsCluster] == nil {
						t.Errorf("%s: replica %s: metrics_cluster %q is not a cluster of the bootstrap", tc.file, r.Name, r.MetricsCluster)
					}
				}
				for _, p := range cfg.PeerExchange.Peers {
					if clusters[p.Cluster] == nil {
						t.Errorf("%s: peer %s: cluster %q is not a cluster of the bootstrap", tc.file, p.Name, p.Cluster)
					}
				}
			}
		})
	}
}

// eachHCM calls f with every HTTP connection manager of a bootstrap's
// listeners; a network filter that is not one fails the test.
func eachHCM(t *testing.T, file string, bs *bootstrapv3.Bootstrap, f func(*listenerv3.Listener, *hcmv3.HttpConnectionManager)) {
	t.Helper()
	for _, l := range bs.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, nf := range fc.GetFilters() {
				var hcm hcmv3.HttpConnectionManager
				if err := nf.GetTypedConfig().UnmarshalTo(&hcm); err != nil {
					t.Fatalf("%s: listener %s: filter %s is not an HttpConnectionManager: %v", file, l.GetName(), nf.GetName(), err)
				}
				f(l, &hcm)
			}
		}
	}
}

// checkFilter checks the gpuroute HTTP filter, inline or through ECDS, and
// returns its parsed plugin configuration.
func checkFilter(t *testing.T, tc envoyCase, h *hcmv3.HttpFilter, clusters map[string]*clusterv3.Cluster) *config.Config {
	t.Helper()
	var w wasmfilterv3.Wasm
	if tc.ecds == "" {
		if err := h.GetTypedConfig().UnmarshalTo(&w); err != nil {
			t.Fatalf("%s: filter gpuroute is not a Wasm filter: %v", tc.file, err)
		}
		return checkFilterPlugin(t, tc.file+": filter gpuroute", w.GetConfig())
	}
	cd := h.GetConfigDiscovery()
	if cd == nil {
		t.Fatalf("%s: filter gpuroute has no config_discovery", tc.file)
	}
	if !slices.Contains(cd.GetTypeUrls(), wasmTypeURL) {
		t.Errorf("%s: config_discovery type_urls %v lack %s", tc.file, cd.GetTypeUrls(), wasmTypeURL)
	}
	for _, g := range cd.GetConfigSource().GetApiConfigSource().GetGrpcServices() {
		if name := g.GetEnvoyGrpc().GetClusterName(); clusters[name] == nil {
			t.Errorf("%s: xDS cluster %q is not defined", tc.file, name)
		}
	}
	var ext corev3.TypedExtensionConfig
	if err := strict.Unmarshal(readJSON(t, filepath.Join("envoy", tc.ecds)), &ext); err != nil {
		t.Fatalf("protojson.Unmarshal(%s) into TypedExtensionConfig: %v", tc.ecds, err)
	}
	validateDeep(t, tc.ecds, &ext)
	if ext.GetName() != h.GetName() {
		t.Errorf("%s: resource name %q, want the filter's name %q", tc.ecds, ext.GetName(), h.GetName())
	}
	if err := ext.GetTypedConfig().UnmarshalTo(&w); err != nil {
		t.Fatalf("%s: typed_config is not a Wasm filter: %v", tc.ecds, err)
	}
	return checkFilterPlugin(t, tc.ecds, w.GetConfig())
}

// checkFilterPlugin is checkPlugin for the HTTP filter, which must also
// let the plugin pause the headers (checkHeadersPause).
func checkFilterPlugin(t *testing.T, where string, pc *wasmv3.PluginConfig) *config.Config {
	t.Helper()
	checkHeadersPause(t, where, pc)
	return checkPlugin(t, where, pc)
}

// checkHeadersPause: gpuroute reads the body before it routes, and without
// allow_on_headers_stop_iteration Envoy answers the headers' pause with
// StopAllIteration, which keeps the body from the plugin until it
// continues, so the request hangs.
func checkHeadersPause(t *testing.T, where string, pc *wasmv3.PluginConfig) {
	t.Helper()
	if a := pc.GetAllowOnHeadersStopIteration(); !a.GetValue() {
		t.Errorf("%s: allow_on_headers_stop_iteration = %v, want true (else Envoy withholds the body and every request hangs)", where, a)
	}
}

// Envoy's defaults for the timeouts a held request lives under
// (http_connection_manager.proto stream_idle_timeout; route_components.proto
// RouteAction.timeout).
const (
	defaultStreamIdleTimeout = 5 * time.Minute
	defaultRouteTimeout      = 15 * time.Second
)

// longestHold is how long flow control may hold one request of cfg: the
// longest max_queue_ms of its bands, 0 with flow control off.
func longestHold(cfg *config.Config) time.Duration {
	if !cfg.Flow.Enabled {
		return 0
	}
	var d time.Duration
	for _, b := range cfg.Flow.Bands {
		d = max(d, time.Duration(b.MaxQueueSec*float64(time.Second)))
	}
	return d
}

// checkHeldTimeouts holds the connection manager running gpuroute to the
// timeouts a held request lives under. Nothing moves on its stream while
// it is held, so stream_idle_timeout (and a route's idle_timeout, which
// overrides it) must outlast the longest hold, or Envoy answers 408. The
// route timeout starts when the router has the whole request, after the
// hold, and ends with the response: it must be set, since the 15 s default
// cuts streamed answers, to 0 (off) or to more than the longest hold.
func checkHeldTimeouts(t *testing.T, where string, hcm *hcmv3.HttpConnectionManager, cfg *config.Config) {
	t.Helper()
	hold := longestHold(cfg)
	tooShort := func(d time.Duration) bool { return d != 0 && d <= hold }
	idle := defaultStreamIdleTimeout
	if d := hcm.GetStreamIdleTimeout(); d != nil {
		idle = d.AsDuration()
	}
	if tooShort(idle) {
		t.Errorf("%s: stream_idle_timeout %v, want 0 or more than the longest hold %v (max_queue_ms)", where, idle, hold)
	}
	for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			ra := r.GetRoute()
			if ra.GetTimeout() == nil {
				t.Errorf("%s: route %v has no timeout, so Envoy's %v default ends streamed answers; want 0s or an explicit bound", where, r.GetMatch(), defaultRouteTimeout)
			} else if d := ra.GetTimeout().AsDuration(); tooShort(d) {
				t.Errorf("%s: route %v timeout %v, want 0 or more than the longest hold %v", where, r.GetMatch(), d, hold)
			}
			if it := ra.GetIdleTimeout(); it != nil && tooShort(it.AsDuration()) {
				t.Errorf("%s: route %v idle_timeout %v, want 0 or more than the longest hold %v", where, r.GetMatch(), it.AsDuration(), hold)
			}
		}
	}
}

// checkDestination holds the route's cluster to the way the plugin names the
// upstream: ORIGINAL_DST reading the header (one address, fallbacks 0), or
// override_host reading it as a list whose every address is a member.
func checkDestination(t *testing.T, tc envoyCase, c *clusterv3.Cluster, cfg *config.Config, retries uint32) {
	t.Helper()
	if !tc.overrideHost {
		od := c.GetOriginalDstLbConfig()
		if c.GetType() != clusterv3.Cluster_ORIGINAL_DST || c.GetLbPolicy() != clusterv3.Cluster_CLUSTER_PROVIDED ||
			!od.GetUseHttpHeader() || od.GetHttpHeaderName() != destinationHeader {
			t.Errorf("%s: cluster %s is not ORIGINAL_DST/CLUSTER_PROVIDED reading %s", tc.file, c.GetName(), destinationHeader)
		}
		if cfg.Fallbacks != 0 {
			t.Errorf("%s: fallbacks = %d with ORIGINAL_DST, want 0 (it reads one address)", tc.file, cfg.Fallbacks)
		}
		return
	}
	var oh overridehostv3.OverrideHost
	found := false
	for _, p := range c.GetLoadBalancingPolicy().GetPolicies() {
		if p.GetTypedExtensionConfig().GetName() == overrideHostName {
			if err := p.GetTypedExtensionConfig().GetTypedConfig().UnmarshalTo(&oh); err != nil {
				t.Fatalf("%s: %s: %v", tc.file, overrideHostName, err)
			}
			found = true
		}
	}
	if !found {
		t.Fatalf("%s: cluster %s has no %s policy", tc.file, c.GetName(), overrideHostName)
	}
	if src := oh.GetOverrideHostSources(); len(src) == 0 || src[0].GetHeader() != destinationHeader {
		t.Errorf("%s: override_host_sources = %v, want the %s header first", tc.file, src, destinationHeader)
	}
	if cfg.Fallbacks == 0 || retries < uint32(cfg.Fallbacks) {
		t.Errorf("%s: fallbacks = %d, retries = %d; want fallbacks > 0 and a retry for each", tc.file, cfg.Fallbacks, retries)
	}
	members := map[netip.AddrPort]bool{}
	for _, le := range c.GetLoadAssignment().GetEndpoints() {
		for _, ep := range le.GetLbEndpoints() {
			sa := ep.GetEndpoint().GetAddress().GetSocketAddress()
			a, err := netip.ParseAddr(sa.GetAddress())
			if err != nil {
				t.Fatalf("%s: endpoint address %q: %v", tc.file, sa.GetAddress(), err)
			}
			members[netip.AddrPortFrom(a, uint16(sa.GetPortValue()))] = true
		}
	}
	for _, r := range cfg.Replicas {
		if !members[r.Address] {
			t.Errorf("%s: replica %s (%s) is not an endpoint of %s: override_host skips it", tc.file, r.Name, r.Address, c.GetName())
		}
	}
}

// istioFiles are the Istio examples; each holds one or more YAML documents.
var istioFiles = []string{"envoyfilter-gpuroute-oci.yaml", "envoyfilter-gpuroute-file.yaml", "replicas.yaml",
	"envoyfilter-original-dst.yaml", "envoyfilter-stream-idle.yaml", "gateway-peers.yaml"}

// istioObject is one Kubernetes object; unknown top-level keys are an error.
type istioObject struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec map[string]any `json:"spec"`
}

// istioSpec returns the istio.io/api message for an object's spec.
func istioSpec(apiVersion, kind string) proto.Message {
	switch apiVersion + "/" + kind {
	case "extensions.istio.io/v1alpha1/WasmPlugin":
		return &extensionsv1alpha1.WasmPlugin{}
	case "networking.istio.io/v1/ServiceEntry":
		return &networkingv1.ServiceEntry{}
	case "networking.istio.io/v1/DestinationRule":
		return &networkingv1.DestinationRule{}
	case "networking.istio.io/v1/Gateway":
		return &networkingv1.Gateway{}
	case "networking.istio.io/v1/VirtualService":
		return &networkingv1.VirtualService{}
	case "networking.istio.io/v1alpha3/EnvoyFilter":
		// EnvoyFilter has no v1 version.
		return &networkingv1alpha3.EnvoyFilter{}
	}
	return nil
}

// splitDocs splits a multi-document YAML file.
func splitDocs(b []byte) [][]byte {
	var docs [][]byte
	for _, d := range bytes.Split(b, []byte("\n---\n")) {
		if len(bytes.TrimSpace(d)) > 0 {
			docs = append(docs, d)
		}
	}
	return docs
}

// istioDoc decodes one Istio object: its top-level keys strictly, its spec
// into the istio.io/api message with unknown fields rejected.
func istioDoc(t *testing.T, where string, doc []byte) (istioObject, proto.Message) {
	t.Helper()
	var obj istioObject
	if err := yaml.UnmarshalStrict(doc, &obj); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	if obj.Metadata.Name == "" {
		t.Errorf("%s: metadata.name is empty", where)
	}
	spec := istioSpec(obj.APIVersion, obj.Kind)
	if spec == nil {
		t.Fatalf("%s: unexpected %s %s", where, obj.APIVersion, obj.Kind)
	}
	var top map[string]json.RawMessage
	if err := yaml.Unmarshal(doc, &top); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	if err := strict.Unmarshal(top["spec"], spec); err != nil {
		t.Fatalf("%s: protojson.Unmarshal(spec) into %T: %v", where, spec, err)
	}
	return obj, spec
}

func TestIstioExamples(t *testing.T) {
	// Cluster names Istio builds for the ServiceEntries: outbound|port||host.
	istioClusters := map[string]bool{}
	type envoyFilter struct {
		where string
		spec  *networkingv1alpha3.EnvoyFilter
	}
	var filters []envoyFilter
	var routes []*networkingv1.HTTPRoute
	for _, file := range istioFiles {
		raw, err := os.ReadFile(filepath.Join("istio", file))
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range splitDocs(raw) {
			where := file + "#" + strconv.Itoa(i)
			_, spec := istioDoc(t, where, doc)
			switch s := spec.(type) {
			case *extensionsv1alpha1.WasmPlugin:
				t.Errorf("%s: a WasmPlugin cannot set allow_on_headers_stop_iteration, so its requests hang; define the filter with an EnvoyFilter", where)
			case *networkingv1alpha3.EnvoyFilter:
				filters = append(filters, envoyFilter{where, s})
			case *networkingv1.VirtualService:
				routes = append(routes, s.GetHttp()...)
			case *networkingv1.ServiceEntry:
				for _, h := range s.GetHosts() {
					for _, p := range s.GetPorts() {
						istioClusters["outbound|"+strconv.Itoa(int(p.GetNumber()))+"||"+h] = true
					}
				}
			}
		}
	}
	var cfgs []*config.Config
	var hcms []*hcmv3.HttpConnectionManager
	added, asked := map[string]bool{}, map[string]bool{}
	for _, f := range filters {
		for i, cp := range f.spec.GetConfigPatches() {
			where := f.where + ": patch " + strconv.Itoa(i) + " (" + cp.GetApplyTo().String() + ")"
			js, err := protojson.Marshal(cp.GetPatch().GetValue())
			if err != nil {
				t.Fatal(err)
			}
			switch cp.GetApplyTo() {
			case networkingv1alpha3.EnvoyFilter_CLUSTER:
				checkClusterPatch(t, cp, js, istioClusters)
			case networkingv1alpha3.EnvoyFilter_EXTENSION_CONFIG:
				name, cfg := checkExtensionPatch(t, where, cp, js)
				added[name] = true
				cfgs = append(cfgs, cfg)
			case networkingv1alpha3.EnvoyFilter_HTTP_FILTER:
				asked[checkHTTPFilterPatch(t, where, cp, js)] = true
			case networkingv1alpha3.EnvoyFilter_NETWORK_FILTER:
				hcms = append(hcms, checkHCMPatch(t, where, cp, js))
			default:
				t.Errorf("%s: unexpected applyTo", where)
			}
		}
	}
	if len(cfgs) != 2 {
		t.Fatalf("%d gpuroute extension configs, want 2 (oci and file)", len(cfgs))
	}
	if len(added) != 1 || !maps.Equal(added, asked) {
		t.Errorf("extension configs %v, HTTP filters asking for %v; want the one name both", slices.Sorted(maps.Keys(added)), slices.Sorted(maps.Keys(asked)))
	}
	if len(hcms) == 0 {
		t.Error("no EnvoyFilter sets the gateway's stream_idle_timeout")
	}
	if len(routes) == 0 {
		t.Error("no VirtualService route")
	}
	for _, cfg := range cfgs {
		if cfg.Fallbacks != 0 {
			t.Errorf("fallbacks %d with an ORIGINAL_DST cluster, want 0", cfg.Fallbacks)
		}
		for _, r := range cfg.Replicas {
			if !istioClusters[r.MetricsCluster] {
				t.Errorf("replica %s metrics_cluster %q is no cluster a ServiceEntry here creates", r.Name, r.MetricsCluster)
			}
		}
		for _, peer := range cfg.PeerExchange.Peers {
			if !istioClusters[peer.Cluster] {
				t.Errorf("peer %s cluster %q is no cluster a ServiceEntry here creates", peer.Name, peer.Cluster)
			}
		}
		for _, hcm := range hcms {
			checkHeldTimeouts(t, "EnvoyFilter HttpConnectionManager patch", hcm, cfg)
		}
		// Istio's route timeout is the VirtualService's (its default, 0,
		// is off); it must not cut a streamed answer.
		for _, r := range routes {
			if d := r.GetTimeout(); d == nil || (d.AsDuration() != 0 && d.AsDuration() <= longestHold(cfg)) {
				t.Errorf("VirtualService route %s timeout %v, want 0s, stated", r.GetName(), d)
			}
		}
	}
}

// checkClusterPatch: the patch value is an Envoy Cluster fragment that makes
// a cluster a ServiceEntry here creates read the destination header. A
// MERGE fragment lacks required fields such as name, so it is not
// validated as a whole cluster.
func checkClusterPatch(t *testing.T, cp *networkingv1alpha3.EnvoyFilter_EnvoyConfigObjectPatch, js []byte, istioClusters map[string]bool) {
	t.Helper()
	name := cp.GetMatch().GetCluster().GetName()
	if !istioClusters[name] {
		t.Errorf("EnvoyFilter patches cluster %q, which no ServiceEntry here creates", name)
	}
	var c clusterv3.Cluster
	if err := strict.Unmarshal(js, &c); err != nil {
		t.Fatalf("EnvoyFilter patch value %s is not an Envoy Cluster: %v", js, err)
	}
	od := c.GetOriginalDstLbConfig()
	if !od.GetUseHttpHeader() || od.GetHttpHeaderName() != destinationHeader || c.GetLbPolicy() != clusterv3.Cluster_CLUSTER_PROVIDED {
		t.Errorf("EnvoyFilter patch %s does not make the cluster read %s", js, destinationHeader)
	}
}

// checkExtensionPatch checks the gpuroute filter an EnvoyFilter ADDs as an
// ECDS resource (istiod applies no other operation to EXTENSION_CONFIG) and
// returns its name and parsed plugin configuration. The module is the local
// file of the Envoy examples or an oci:// image: istio-agent pulls that and
// hands Envoy the resource with the file it wrote instead (istio pkg/wasm),
// so that form is the one validated here; it never reaches Envoy with the
// remote source, which would need a sha256.
func checkExtensionPatch(t *testing.T, where string, cp *networkingv1alpha3.EnvoyFilter_EnvoyConfigObjectPatch, js []byte) (string, *config.Config) {
	t.Helper()
	if cp.GetPatch().GetOperation() != networkingv1alpha3.EnvoyFilter_Patch_ADD {
		t.Errorf("%s: operation %v, want ADD, the only one istiod applies to extension configs", where, cp.GetPatch().GetOperation())
	}
	var ext corev3.TypedExtensionConfig
	if err := strict.Unmarshal(js, &ext); err != nil {
		t.Fatalf("%s: value is not a TypedExtensionConfig: %v", where, err)
	}
	var w wasmfilterv3.Wasm
	if err := ext.GetTypedConfig().UnmarshalTo(&w); err != nil {
		t.Fatalf("%s: typed_config is not a Wasm filter: %v", where, err)
	}
	if remote := w.GetConfig().GetVmConfig().GetCode().GetRemote(); remote != nil {
		if uri := remote.GetHttpUri().GetUri(); !strings.HasPrefix(uri, "oci://") {
			t.Errorf("%s: module %q, want an oci:// image", where, uri)
		}
		w.GetConfig().GetVmConfig().Code = &corev3.AsyncDataSource{Specifier: &corev3.AsyncDataSource_Local{
			Local: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: modulePath}}}}
		var err error
		if ext.TypedConfig, err = anypb.New(&w); err != nil {
			t.Fatal(err)
		}
	}
	validateDeep(t, where, &ext)
	return ext.GetName(), checkFilterPlugin(t, where, w.GetConfig())
}

// checkHTTPFilterPatch checks the HTTP filter an EnvoyFilter inserts just
// before the gateway's router, asking ECDS (istiod, over ADS) for its
// configuration, and returns the name it asks for.
func checkHTTPFilterPatch(t *testing.T, where string, cp *networkingv1alpha3.EnvoyFilter_EnvoyConfigObjectPatch, js []byte) string {
	t.Helper()
	m := cp.GetMatch()
	if m.GetContext() != networkingv1alpha3.EnvoyFilter_GATEWAY || cp.GetPatch().GetOperation() != networkingv1alpha3.EnvoyFilter_Patch_INSERT_BEFORE ||
		m.GetListener().GetFilterChain().GetFilter().GetSubFilter().GetName() != "envoy.filters.http.router" {
		t.Errorf("%s: want INSERT_BEFORE the router of the GATEWAY's listeners", where)
	}
	var h hcmv3.HttpFilter
	if err := strict.Unmarshal(js, &h); err != nil {
		t.Fatalf("%s: value is not an HttpFilter: %v", where, err)
	}
	validateDeep(t, where, &h)
	cd := h.GetConfigDiscovery()
	if cd.GetConfigSource().GetAds() == nil || !slices.Contains(cd.GetTypeUrls(), wasmTypeURL) {
		t.Errorf("%s: config_discovery %v, want ADS and type %s", where, cd, wasmTypeURL)
	}
	return h.GetName()
}

// checkHCMPatch returns the HttpConnectionManager fragment an EnvoyFilter
// merges into the gateway's listeners.
func checkHCMPatch(t *testing.T, where string, cp *networkingv1alpha3.EnvoyFilter_EnvoyConfigObjectPatch, js []byte) *hcmv3.HttpConnectionManager {
	t.Helper()
	if cp.GetMatch().GetContext() != networkingv1alpha3.EnvoyFilter_GATEWAY || cp.GetPatch().GetOperation() != networkingv1alpha3.EnvoyFilter_Patch_MERGE {
		t.Errorf("%s: want a MERGE into the GATEWAY's listeners", where)
	}
	var nf listenerv3.Filter
	if err := strict.Unmarshal(js, &nf); err != nil {
		t.Fatalf("%s: value is not a network Filter: %v", where, err)
	}
	var hcm hcmv3.HttpConnectionManager
	if err := nf.GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatalf("%s: typed_config is not an HttpConnectionManager: %v", where, err)
	}
	return &hcm
}
