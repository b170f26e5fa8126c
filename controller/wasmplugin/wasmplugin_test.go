package wasmplugin

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	extensionsv1alpha1 "istio.io/api/extensions/v1alpha1"
	clientv1alpha1 "istio.io/client-go/pkg/apis/extensions/v1alpha1"
	istiofake "istio.io/client-go/pkg/clientset/versioned/fake"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpuroute/gpuroute/controller/pool"
	"github.com/gpuroute/gpuroute/plugin/config"
)

func wasmPlugin(t *testing.T, pluginConfig map[string]any) *clientv1alpha1.WasmPlugin {
	t.Helper()
	s, err := structpb.NewStruct(pluginConfig)
	if err != nil {
		t.Fatal(err)
	}
	return &clientv1alpha1.WasmPlugin{
		ObjectMeta: metav1.ObjectMeta{Namespace: "istio-system", Name: "gpuroute", ResourceVersion: "7"},
		Spec: extensionsv1alpha1.WasmPlugin{Url: "oci://registry.example.com/gpuroute:0.2.0", PluginConfig: s,
			FailStrategy: extensionsv1alpha1.FailStrategy_FAIL_CLOSE},
	}
}

func replicas(addrs ...string) []pool.Replica {
	var rs []pool.Replica
	for i, a := range addrs {
		rs = append(rs, pool.Replica{Name: "vllm-" + string(rune('a'+i)), Address: netip.MustParseAddrPort(a)})
	}
	return rs
}

// served is the plugin configuration istiod would hand the proxies.
func served(t *testing.T, c *istiofake.Clientset) *config.Config {
	t.Helper()
	wp, err := c.ExtensionsV1alpha1().WasmPlugins("istio-system").Get(context.Background(), "gpuroute", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if wp.Spec.GetUrl() != "oci://registry.example.com/gpuroute:0.2.0" || wp.Spec.GetFailStrategy() != extensionsv1alpha1.FailStrategy_FAIL_CLOSE {
		t.Errorf("WasmPlugin spec lost its other fields: %v", &wp.Spec)
	}
	js, err := protojson.Marshal(wp.Spec.GetPluginConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(js)
	if err != nil {
		t.Fatalf("config.Parse(pluginConfig %s) = %v", js, err)
	}
	return cfg
}

func patches(c *istiofake.Clientset) int {
	n := 0
	for _, a := range c.Actions() {
		if a.GetVerb() == "patch" {
			n++
		}
	}
	return n
}

// TestPublish: the replica list replaces the old one, the other keys of
// pluginConfig and of the spec stay, an unchanged list is not written
// again, and the patch names the resourceVersion it read.
func TestPublish(t *testing.T) {
	c := istiofake.NewSimpleClientset(wasmPlugin(t, map[string]any{
		"tick_ms": 100, "max_wait_ms": 30000,
		"replicas": []any{map[string]any{"name": "old", "address": "10.9.9.9:8000"}},
	}))
	p := &Publisher{Client: c, Namespace: "istio-system", Name: "gpuroute", FieldManager: "gpuroute-controller"}
	ctx := context.Background()
	if err := p.Publish(ctx, replicas("10.0.0.1:8000", "10.0.0.2:8000")); err != nil {
		t.Fatal(err)
	}
	cfg := served(t, c)
	if len(cfg.Replicas) != 2 || cfg.Replicas[1].AddressText != "10.0.0.2:8000" || cfg.TickMillis != 100 || cfg.MaxWaitSec != 30 {
		t.Errorf("after Publish: %d replicas, tick %d, max wait %v; want the two new replicas and the old keys", len(cfg.Replicas), cfg.TickMillis, cfg.MaxWaitSec)
	}
	for _, a := range c.Actions() {
		if pa, ok := a.(k8stesting.PatchAction); ok && !strings.Contains(string(pa.GetPatch()), `"resourceVersion":"7"`) {
			t.Errorf("patch %s does not carry the resourceVersion read", pa.GetPatch())
		}
	}
	if err := p.Publish(ctx, replicas("10.0.0.1:8000", "10.0.0.2:8000")); err != nil {
		t.Fatal(err)
	}
	if n := patches(c); n != 1 {
		t.Errorf("Publish of an unchanged list: %d patches in all, want 1", n)
	}
}

// TestPublishRefused: nothing is written that the plugin would refuse, and
// the error says why; a missing WasmPlugin is the operator's to create.
func TestPublishRefused(t *testing.T) {
	tests := []struct {
		name   string
		plugin map[string]any // nil: no WasmPlugin
		rs     []pool.Replica
		want   string
	}{
		{name: "no replicas", plugin: map[string]any{"tick_ms": 100}, rs: nil,
			want: `wasmplugin: WasmPlugin "istio-system/gpuroute": pool: the plugin would refuse the configuration: config: replicas must list at least one replica`},
		{name: "a bad key of the operator's", plugin: map[string]any{"tick": 100}, rs: replicas("10.0.0.1:8000"),
			want: `wasmplugin: WasmPlugin "istio-system/gpuroute": pool: the plugin would refuse the configuration: config: unknown key "tick"`},
		{name: "no WasmPlugin", rs: replicas("10.0.0.1:8000"),
			want: `wasmplugin: WasmPlugin "istio-system/gpuroute": wasmplugins.extensions.istio.io "gpuroute" not found`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := istiofake.NewSimpleClientset()
			if tc.plugin != nil {
				c = istiofake.NewSimpleClientset(wasmPlugin(t, tc.plugin))
			}
			p := &Publisher{Client: c, Namespace: "istio-system", Name: "gpuroute"}
			err := p.Publish(context.Background(), tc.rs)
			if err == nil || err.Error() != tc.want {
				t.Errorf("Publish = %v, want %q", err, tc.want)
			}
			if n := patches(c); n != 0 {
				t.Errorf("Publish refused with %d patches, want 0", n)
			}
		})
	}
}
