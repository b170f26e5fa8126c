package envoyfilter

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	clientv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	istiofake "istio.io/client-go/pkg/clientset/versioned/fake"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"github.com/gpuroute/gpuroute/controller/pool"
	"github.com/gpuroute/gpuroute/plugin/config"
)

// gpurouteFilter is an EnvoyFilter in the shape of examples/istio's: a
// cluster patch first, so the filter's patch is not the first, then the
// ECDS resource and the HTTP filter asking for it. TYPED_CONFIG, FLAGS and
// CONFIGURATION are replaced per test.
const gpurouteFilter = `apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: gpuroute, namespace: istio-system, resourceVersion: "7"}
spec:
  workloadSelector: {labels: {istio: ingressgateway}}
  configPatches:
  - applyTo: CLUSTER
    match: {context: GATEWAY, cluster: {name: "outbound|9090||metrics.gpuroute.internal"}}
    patch: {operation: MERGE, value: {lb_policy: CLUSTER_PROVIDED, original_dst_lb_config: {use_http_header: true}}}
  - applyTo: EXTENSION_CONFIG
    patch:
      operation: ADD
      value:
        name: gpuroute
        TYPED_CONFIG:
          "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
          config:
            name: gpuroute
            vm_config: {vm_id: gpuroute, runtime: envoy.wasm.runtime.v8, code: {local: {filename: /etc/gpuroute/gpuroute.wasm}}}
            failure_policy: FAIL_CLOSED
            FLAGS
            CONFIGURATION
  - applyTo: HTTP_FILTER
    match: {context: GATEWAY, listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager, subFilter: {name: envoy.filters.http.router}}}}}
    patch:
      operation: INSERT_BEFORE
      value: {name: gpuroute, config_discovery: {config_source: {ads: {}}, type_urls: [type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm]}}
`

// withConfiguration is the filter's configuration line for a plugin JSON.
func withConfiguration(js string) string {
	return `configuration: {"@type": type.googleapis.com/google.protobuf.StringValue, value: '` + js + `'}`
}

// envoyFilter returns the object of a YAML document, as the API server
// would hand it to the typed client.
func envoyFilter(t *testing.T, doc string) *clientv1alpha3.EnvoyFilter {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	var ef clientv1alpha3.EnvoyFilter
	if err := yaml.Unmarshal(js, &ef); err != nil {
		t.Fatalf("EnvoyFilter %s: %v", js, err)
	}
	return &ef
}

// filterDoc fills in gpurouteFilter.
func filterDoc(typedConfigKey, flags, configuration string) string {
	return strings.NewReplacer("TYPED_CONFIG", typedConfigKey, "FLAGS", flags, "CONFIGURATION", configuration).Replace(gpurouteFilter)
}

const allow = "allow_on_headers_stop_iteration: true"

func replicas(addrs ...string) []pool.Replica {
	var rs []pool.Replica
	for i, a := range addrs {
		rs = append(rs, pool.Replica{Name: "vllm-" + string(rune('a'+i)), Address: netip.MustParseAddrPort(a)})
	}
	return rs
}

func patches(c *istiofake.Clientset) []k8stesting.PatchAction {
	var out []k8stesting.PatchAction
	for _, a := range c.Actions() {
		if pa, ok := a.(k8stesting.PatchAction); ok {
			out = append(out, pa)
		}
	}
	return out
}

// TestPublish: the replica list replaces the old one, the other keys of
// the configuration and every other part of the object stay, an unchanged
// list is not written again, and the one JSON patch sets the
// resourceVersion read (the API server refuses it with a conflict when the
// object changed since).
func TestPublish(t *testing.T) {
	tests := []struct {
		name, typedConfigKey, configuration string
		wantTick                            uint32
	}{
		{name: "replaces the old list", typedConfigKey: "typed_config",
			configuration: withConfiguration(`{"tick_ms": 100, "max_wait_ms": 30000, "replicas": [{"name": "old", "address": "10.9.9.9:8000"}]}`), wantTick: 100},
		{name: "camelCase typedConfig", typedConfigKey: "typedConfig",
			configuration: withConfiguration(`{"tick_ms": 200}`), wantTick: 200},
		{name: "no configuration yet", typedConfigKey: "typed_config", wantTick: config.DefaultTickMillis},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := envoyFilter(t, filterDoc(tc.typedConfigKey, allow, tc.configuration))
			c := istiofake.NewSimpleClientset(before.DeepCopy())
			p := &Publisher{Client: c, Namespace: "istio-system", Name: "gpuroute", FieldManager: "gpuroute-controller"}
			ctx := context.Background()
			if err := p.Publish(ctx, replicas("10.0.0.1:8000", "10.0.0.2:8000")); err != nil {
				t.Fatal(err)
			}
			after, err := c.NetworkingV1alpha3().EnvoyFilters("istio-system").Get(ctx, "gpuroute", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			f, err := Find(&after.Spec)
			if err != nil || f == nil {
				t.Fatalf("Find(published EnvoyFilter) = %v, %v", f, err)
			}
			cfg, err := config.Parse(f.Configuration)
			if err != nil {
				t.Fatalf("config.Parse(published configuration %s) = %v", f.Configuration, err)
			}
			if len(cfg.Replicas) != 2 || cfg.Replicas[1].AddressText != "10.0.0.2:8000" || cfg.TickMillis != tc.wantTick {
				t.Errorf("published: %d replicas, tick %d; want the two new replicas and tick %d", len(cfg.Replicas), cfg.TickMillis, tc.wantTick)
			}
			clearConfiguration(t, before)
			clearConfiguration(t, after)
			if !proto.Equal(&before.Spec, &after.Spec) {
				t.Errorf("the rest of the EnvoyFilter changed:\nbefore %v\nafter  %v", &before.Spec, &after.Spec)
			}
			ps := patches(c)
			if len(ps) != 1 || ps[0].GetPatchType() != types.JSONPatchType ||
				!strings.Contains(string(ps[0].GetPatch()), `{"op":"replace","path":"/metadata/resourceVersion","value":"7"}`) {
				t.Fatalf("patches %v, want one JSON patch setting the resourceVersion read, 7", ps)
			}
			if err := p.Publish(ctx, replicas("10.0.0.1:8000", "10.0.0.2:8000")); err != nil {
				t.Fatal(err)
			}
			if n := len(patches(c)); n != 1 {
				t.Errorf("Publish of an unchanged list: %d patches in all, want 1", n)
			}
		})
	}
}

// clearConfiguration drops the gpuroute filter's configuration from an
// EnvoyFilter, leaving what the publisher must not touch.
func clearConfiguration(t *testing.T, ef *clientv1alpha3.EnvoyFilter) {
	t.Helper()
	for _, cp := range ef.Spec.GetConfigPatches() {
		_, tc := member(cp.GetPatch().GetValue(), "typed_config", "typedConfig")
		if c := tc.GetStructValue().GetFields()["config"].GetStructValue(); c != nil {
			delete(c.GetFields(), "configuration")
		}
	}
}

// TestPublishRefused: nothing is written that the plugin would refuse or
// could not use, and the error says why; a missing EnvoyFilter is the
// operator's to create.
func TestPublishRefused(t *testing.T) {
	const prefix = `envoyfilter: EnvoyFilter "istio-system/gpuroute": `
	ok := withConfiguration(`{"tick_ms": 100}`)
	secondFilter := strings.Replace(filterDoc("typed_config", allow, ok), "  - applyTo: HTTP_FILTER",
		`  - applyTo: EXTENSION_CONFIG
    patch: {operation: ADD, value: {name: other, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm, config: {}}}}
  - applyTo: HTTP_FILTER`, 1)
	merged := strings.Replace(filterDoc("typed_config", allow, ok), "operation: ADD", "operation: MERGE", 1)
	tests := []struct {
		name string
		doc  string // "": no EnvoyFilter
		rs   []pool.Replica
		want string
	}{
		{name: "no replicas", doc: filterDoc("typed_config", allow, ok), rs: nil,
			want: prefix + "pool: the plugin would refuse the configuration: config: replicas must list at least one replica"},
		{name: "a bad key of the operator's", doc: filterDoc("typed_config", allow, withConfiguration(`{"tick": 100}`)), rs: replicas("10.0.0.1:8000"),
			want: prefix + `pool: the plugin would refuse the configuration: config: unknown key "tick"`},
		{name: "no allow_on_headers_stop_iteration", doc: filterDoc("typed_config", "", ok), rs: replicas("10.0.0.1:8000"),
			want: prefix + `configPatches[1]: filter "gpuroute" must set allow_on_headers_stop_iteration: true (without it Envoy withholds the request body gpuroute routes on, and every request hangs)`},
		{name: "allow_on_headers_stop_iteration off", doc: filterDoc("typed_config", "allow_on_headers_stop_iteration: false", ok), rs: replicas("10.0.0.1:8000"),
			want: prefix + `configPatches[1]: ecds: template's allow_on_headers_stop_iteration is false; gpuroute needs it true (without it Envoy withholds the request body the plugin routes on)`},
		{name: "a configuration that is not a string", doc: filterDoc("typed_config", allow, `configuration: {"@type": type.googleapis.com/google.protobuf.Struct, value: {tick_ms: 100}}`),
			rs: replicas("10.0.0.1:8000"), want: prefix + "configPatches[1]: ecds: template's plugin configuration must be a google.protobuf.StringValue, got type.googleapis.com/google.protobuf.Struct"},
		{name: "two Wasm filters", doc: secondFilter, rs: replicas("10.0.0.1:8000"),
			want: prefix + `configPatches[2] adds a second Wasm filter ("other" after "gpuroute"); keep the gpuroute filter in an EnvoyFilter of its own`},
		{name: "a MERGE istiod would not apply", doc: merged, rs: replicas("10.0.0.1:8000"),
			want: prefix[:len(prefix)-2] + " adds no Wasm filter (an EXTENSION_CONFIG ADD patch) to write the replica list into"},
		{name: "no EnvoyFilter", rs: replicas("10.0.0.1:8000"),
			want: prefix + `envoyfilters.networking.istio.io "gpuroute" not found`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := istiofake.NewSimpleClientset()
			if tc.doc != "" {
				c = istiofake.NewSimpleClientset(envoyFilter(t, tc.doc))
			}
			p := &Publisher{Client: c, Namespace: "istio-system", Name: "gpuroute"}
			err := p.Publish(context.Background(), tc.rs)
			if err == nil || err.Error() != tc.want {
				t.Errorf("Publish = %v\nwant %q", err, tc.want)
			}
			if n := len(patches(c)); n != 0 {
				t.Errorf("Publish refused with %d patches, want 0", n)
			}
		})
	}
}

// TestFind: an EnvoyFilter without a Wasm EXTENSION_CONFIG ADD has no
// gpuroute filter, which is not an error (validate skips it); one with it
// gives the resource and its configuration.
func TestFind(t *testing.T) {
	f, err := Find(&envoyFilter(t, filterDoc("typed_config", allow, withConfiguration(`{"tick_ms": 100}`))).Spec)
	if err != nil || f == nil || f.Extension.GetName() != "gpuroute" || string(f.Configuration) != `{"tick_ms": 100}` {
		t.Errorf("Find(the gpuroute filter) = %+v, %v; want the resource gpuroute and its configuration", f, err)
	}
	clusterOnly := &envoyFilter(t, filterDoc("typed_config", allow, "")).Spec
	clusterOnly.ConfigPatches = clusterOnly.ConfigPatches[:1]
	if f, err := Find(clusterOnly); f != nil || err != nil {
		t.Errorf("Find(cluster patches only) = %+v, %v; want nil, nil", f, err)
	}
	var empty structpb.Struct
	clusterOnly.ConfigPatches[0].Patch.Value = &empty
	if f, err := Find(clusterOnly); f != nil || err != nil {
		t.Errorf("Find(an empty patch value) = %+v, %v; want nil, nil", f, err)
	}
}
