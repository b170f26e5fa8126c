package ecds

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	extensionv3 "github.com/envoyproxy/go-control-plane/envoy/service/extension/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gpuroute/gpuroute/controller/pool"
	"github.com/gpuroute/gpuroute/plugin/config"
)

const template = `
name: gpuroute
typed_config:
  "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
  config:
    name: gpuroute
    vm_config:
      vm_id: gpuroute
      runtime: envoy.wasm.runtime.v8
      code: {local: {filename: /etc/gpuroute/gpuroute.wasm}}
    failure_policy: FAIL_CLOSED
    configuration:
      "@type": type.googleapis.com/google.protobuf.StringValue
      value: '{"tick_ms": 100, "status_path": "/gpuroute/status"}'
`

func replicas(addrs ...string) []pool.Replica {
	var rs []pool.Replica
	for i, a := range addrs {
		rs = append(rs, pool.Replica{Name: "vllm-" + string(rune('a'+i)), Address: netip.MustParseAddrPort(a)})
	}
	return rs
}

// envoy is one ECDS subscription, as Envoy's config_discovery opens it.
type envoy struct {
	t      *testing.T
	stream extensionv3.ExtensionConfigDiscoveryService_StreamExtensionConfigsClient
}

func subscribe(t *testing.T, addr string) *envoy {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	stream, err := extensionv3.NewExtensionConfigDiscoveryServiceClient(conn).StreamExtensionConfigs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e := &envoy{t: t, stream: stream}
	e.send("", "", nil)
	return e
}

func (e *envoy) send(version, nonce string, nack *statuspb.Status) {
	e.t.Helper()
	err := e.stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "gateway-0"}, TypeUrl: TypeURL,
		ResourceNames: []string{"gpuroute"}, VersionInfo: version, ResponseNonce: nonce, ErrorDetail: nack})
	if err != nil {
		e.t.Fatal(err)
	}
}

// receive waits for the next response and returns the plugin configuration
// it carries, checked by the plugin's parser, with its version and nonce.
func (e *envoy) receive() (*config.Config, string, string) {
	e.t.Helper()
	resp, err := e.stream.Recv()
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.GetTypeUrl() != TypeURL || len(resp.GetResources()) != 1 {
		e.t.Fatalf("response type %s with %d resources, want %s with 1", resp.GetTypeUrl(), len(resp.GetResources()), TypeURL)
	}
	var ext corev3.TypedExtensionConfig
	if err := resp.GetResources()[0].UnmarshalTo(&ext); err != nil {
		e.t.Fatal(err)
	}
	var w wasmfilterv3.Wasm
	var s wrapperspb.StringValue
	if err := ext.GetTypedConfig().UnmarshalTo(&w); err != nil {
		e.t.Fatal(err)
	}
	if err := w.GetConfig().GetConfiguration().UnmarshalTo(&s); err != nil {
		e.t.Fatal(err)
	}
	if ext.GetName() != "gpuroute" || w.GetConfig().GetVmConfig().GetVmId() != "gpuroute" {
		e.t.Errorf("resource %q vm_id %q, want the template's gpuroute and gpuroute", ext.GetName(), w.GetConfig().GetVmConfig().GetVmId())
	}
	// The template leaves it out; the plugin cannot route without it.
	if a := w.GetConfig().GetAllowOnHeadersStopIteration(); !a.GetValue() {
		e.t.Errorf("served allow_on_headers_stop_iteration = %v, want true", a)
	}
	cfg, err := config.Parse([]byte(s.GetValue()))
	if err != nil {
		e.t.Fatalf("config.Parse(served configuration) = %v\n%s", err, s.GetValue())
	}
	return cfg, resp.GetVersionInfo(), resp.GetNonce()
}

func addresses(cfg *config.Config) string {
	var s []string
	for _, r := range cfg.Replicas {
		s = append(s, r.AddressText)
	}
	return strings.Join(s, ",")
}

// TestServe: an Envoy subscribed before the first publish gets it, then
// every change, each on the template's other keys; an unchanged list is not
// resent; a refusal is counted and logged; a later subscriber gets the
// current list at once.
func TestServe(t *testing.T) {
	tmpl, err := ParseTemplate([]byte(template))
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	srv, err := New(tmpl, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()
	ctx := context.Background()

	first := subscribe(t, lis.Addr().String())
	if err := srv.Publish(ctx, replicas("10.0.0.1:8000", "10.0.0.2:8000")); err != nil {
		t.Fatal(err)
	}
	cfg, v1, nonce := first.receive()
	if got := addresses(cfg); got != "10.0.0.1:8000,10.0.0.2:8000" || cfg.TickMillis != 100 || cfg.StatusPath != "/gpuroute/status" {
		t.Errorf("first push: replicas %s tick %d status %q, want both replicas on the template's keys", got, cfg.TickMillis, cfg.StatusPath)
	}
	first.send(v1, nonce, nil)

	// The same list again pushes nothing; the next change does.
	if err := srv.Publish(ctx, replicas("10.0.0.1:8000", "10.0.0.2:8000")); err != nil {
		t.Fatal(err)
	}
	if err := srv.Publish(ctx, replicas("10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000")); err != nil {
		t.Fatal(err)
	}
	cfg, v2, nonce := first.receive()
	if got := addresses(cfg); got != "10.0.0.1:8000,10.0.0.2:8000,10.0.0.3:8000" || v2 == v1 {
		t.Errorf("second push: replicas %s version %q after %q, want three replicas and a new version", got, v2, v1)
	}
	first.send(v1, nonce, &statuspb.Status{Message: "config: replicas[2].hardware \"h999\" is not a known profile"})

	late := subscribe(t, lis.Addr().String())
	if cfg, v, _ := late.receive(); addresses(cfg) != "10.0.0.1:8000,10.0.0.2:8000,10.0.0.3:8000" || v != v2 {
		t.Errorf("late subscriber: replicas %s version %q, want the current three at %q", addresses(cfg), v, v2)
	}
	// The refusal arrives on the first stream, which the server may read
	// after the late subscriber's push: wait for it, with a bound.
	for deadline := time.Now().Add(5 * time.Second); srv.Rejections() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if srv.Rejections() != 1 || !strings.Contains(logs.String(), `error="config: replicas[2].hardware \"h999\" is not a known profile"`) {
		t.Errorf("after a refusal: %d rejections, log %q; want 1 and the refusal logged", srv.Rejections(), logs.String())
	}
}

// lockedBuffer is a log sink the server's stream goroutines write while the
// test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestPublishRefused: a list the plugin would refuse is never served.
func TestPublishRefused(t *testing.T) {
	tmpl, err := ParseTemplate([]byte(template))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(tmpl, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	err = srv.Publish(context.Background(), nil)
	if want := "ecds: pool: the plugin would refuse the configuration: config: replicas must list at least one replica"; err == nil || err.Error() != want {
		t.Errorf("Publish(no replicas) = %v, want %q", err, want)
	}
	if n := len(srv.cache.GetResources()); n != 0 {
		t.Errorf("after a refused Publish the cache holds %d resources, want 0", n)
	}
}

func TestParseTemplate(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{name: "no name", in: "typed_config: {\"@type\": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm, config: {}}",
			want: "ecds: template has no name (the HTTP filter's name, which Envoy subscribes to)"},
		{name: "not wasm", in: "name: gpuroute\ntyped_config: {\"@type\": type.googleapis.com/google.protobuf.StringValue, value: x}",
			want: `ecds: template typed_config is "type.googleapis.com/google.protobuf.StringValue", want type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm`},
		{name: "no filter config", in: "name: gpuroute\ntyped_config: {\"@type\": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm}",
			want: "ecds: template's Wasm filter has no config (vm_config, configuration)"},
		{name: "configuration not a string", in: "name: gpuroute\ntyped_config: {\"@type\": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm, config: {configuration: {\"@type\": type.googleapis.com/google.protobuf.Int64Value, value: 5}}}",
			want: "ecds: template's plugin configuration must be a google.protobuf.StringValue, got type.googleapis.com/google.protobuf.Int64Value"},
		{name: "headers stop iteration off", in: "name: gpuroute\ntyped_config: {\"@type\": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm, config: {allow_on_headers_stop_iteration: false}}",
			want: "ecds: template's allow_on_headers_stop_iteration is false; gpuroute needs it true (without it Envoy withholds the request body the plugin routes on)"},
		{name: "unknown field", in: "name: gpuroute\nconfig: {}",
			want: "ecds: template is not a TypedExtensionConfig: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTemplate([]byte(tc.in))
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("ParseTemplate(%s) = %v, want %q", tc.in, err, tc.want)
			}
		})
	}
}
