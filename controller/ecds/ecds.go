// Package ecds serves gpuroute's Wasm filter to plain Envoy through the
// Extension Config Discovery Service, so a new replica list reaches every
// proxy without a restart or a listener change. Envoy subscribes with the
// HTTP filter's config_discovery (type URL
// type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm); the
// server answers with a TypedExtensionConfig named like the filter: the
// template the operator wrote, its plugin configuration's replica list
// replaced by the fleet's and allow_on_headers_stop_iteration on (without
// it Envoy never hands gpuroute the request body it routes on).
//
//	srv, err := ecds.New(template, logger) // template: a TypedExtensionConfig (YAML or JSON)
//	go srv.Serve(listener)                  // gRPC, ExtensionConfigDiscoveryService
//	err = srv.Publish(ctx, replicas)         // every subscribed Envoy gets it
//
// It is built on go-control-plane's linear cache, which serves one set of
// resources to every node alike, as a fleet's gateways want.
package ecds

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	extensionv3 "github.com/envoyproxy/go-control-plane/envoy/service/extension/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"sigs.k8s.io/yaml"

	"github.com/gpuroute/gpuroute/controller/pool"
)

// TypeURL is the resource type Envoy's config_discovery asks the server
// for: the filter arrives wrapped in a TypedExtensionConfig.
const TypeURL = resource.ExtensionConfigType

// WasmTypeURL is the type the template's typed_config must have, and the
// one the filter's config_discovery.type_urls must list.
const WasmTypeURL = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"

// Server is an ECDS server of one gpuroute filter. It is safe for
// concurrent use.
type Server struct {
	log      *slog.Logger
	template *corev3.TypedExtensionConfig
	base     []byte // the template's plugin configuration
	cache    *cache.LinearCache
	grpc     *grpc.Server

	mu   sync.Mutex
	last []byte // the plugin configuration last published

	// published closes at the first Publish.
	published chan struct{}
	once      sync.Once

	rejections atomic.Int64
}

// ParseTemplate reads a TypedExtensionConfig (YAML or JSON, Envoy's field
// names) wrapping a gpuroute Wasm filter, as examples/envoy's
// gpuroute-filter.yaml. Its plugin configuration (a StringValue, or none)
// is the base the replica list is merged into.
func ParseTemplate(data []byte) (*corev3.TypedExtensionConfig, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, errors.New("ecds: template: " + err.Error())
	}
	var ext corev3.TypedExtensionConfig
	if err := protojson.Unmarshal(js, &ext); err != nil {
		return nil, errors.New("ecds: template is not a TypedExtensionConfig: " + err.Error())
	}
	if ext.GetName() == "" {
		return nil, errors.New("ecds: template has no name (the HTTP filter's name, which Envoy subscribes to)")
	}
	if got := ext.GetTypedConfig().GetTypeUrl(); got != WasmTypeURL {
		return nil, errors.New("ecds: template typed_config is " + strconv.Quote(got) + ", want " + WasmTypeURL)
	}
	if _, err := Configuration(&ext); err != nil {
		return nil, err
	}
	return &ext, nil
}

// Configuration returns the plugin configuration of a template: the
// filter's StringValue, or nil if it has none.
func Configuration(ext *corev3.TypedExtensionConfig) ([]byte, error) {
	w, err := wasmFilter(ext)
	if err != nil {
		return nil, err
	}
	c := w.GetConfig().GetConfiguration()
	if c == nil {
		return nil, nil
	}
	var s wrapperspb.StringValue
	if err := c.UnmarshalTo(&s); err != nil {
		return nil, errors.New("ecds: template's plugin configuration must be a google.protobuf.StringValue, got " + c.GetTypeUrl())
	}
	return []byte(s.GetValue()), nil
}

// New returns a server of template that serves nothing until the first
// Publish: Envoy's listener waits for it rather than serving unrouted. A
// nil log discards the server's lines.
func New(template *corev3.TypedExtensionConfig, log *slog.Logger) (*Server, error) {
	base, err := Configuration(template)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{log: log, template: template, base: base, cache: cache.NewLinearCache(TypeURL),
		published: make(chan struct{})}
	cb := server.CallbackFuncs{StreamOpenFunc: s.open, StreamRequestFunc: s.request}
	s.grpc = grpc.NewServer()
	extensionv3.RegisterExtensionConfigDiscoveryServiceServer(s.grpc, server.NewServer(context.Background(), s.cache, cb))
	return s, nil
}

// open holds a new stream until the first Publish. Before it the cache
// would answer with no resource, which Envoy refuses (FilterConfigSubscription::
// onConfigUpdate in source/common/filter/config_discovery_impl.cc: "Unexpected
// number of resources"), some releases after ending the listener's warming,
// so it would serve with the filter unconfigured. Held, the listener keeps
// warming, or keeps its last configuration across a controller restart
// (TestServe subscribes before the first Publish).
func (s *Server) open(ctx context.Context, _ int64, _ string) error {
	select {
	case <-s.published:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// request logs an Envoy's refusal of what it was sent: ECDS's negative
// acknowledgement carries the error (the plugin returning false from
// proxy_on_configure shows up here), and that Envoy keeps its last
// configuration. The count moves after the log line is written (TestServe
// reads both).
func (s *Server) request(_ int64, req *discoveryv3.DiscoveryRequest) error {
	if d := req.GetErrorDetail(); d != nil {
		s.log.Warn("envoy refused the gpuroute filter", "node", req.GetNode().GetId(),
			"kept_version", req.GetVersionInfo(), "error", d.GetMessage())
		s.rejections.Add(1) // after the line, so a counted refusal is already logged
	}
	return nil
}

// Rejections counts the refusals Envoys reported since the server started.
func (s *Server) Rejections() int64 { return s.rejections.Load() }

// Serve answers ECDS streams on lis until Stop.
func (s *Server) Serve(lis net.Listener) error { return s.grpc.Serve(lis) }

// Stop ends the streams and Serve.
func (s *Server) Stop() { s.grpc.Stop() }

// Publish serves the template with rs as its replica list. An unchanged
// configuration is not sent again; one the plugin would refuse is not sent
// at all, and the error says why.
func (s *Server) Publish(_ context.Context, rs []pool.Replica) error {
	cfg, err := pool.Merge(s.base, rs)
	if err != nil {
		return errors.New("ecds: " + err.Error())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if string(cfg) == string(s.last) {
		return nil
	}
	ext, err := s.resource(cfg)
	if err != nil {
		return err
	}
	if err := s.cache.UpdateResource(ext.GetName(), ext); err != nil {
		return errors.New("ecds: " + err.Error())
	}
	s.last = cfg
	s.once.Do(func() { close(s.published) })
	return nil
}

// resource is the template with cfg as its plugin configuration and
// allow_on_headers_stop_iteration on, which a template need not spell out
// (TestServe serves a template without it).
func (s *Server) resource(cfg []byte) (*corev3.TypedExtensionConfig, error) {
	ext := proto.Clone(s.template).(*corev3.TypedExtensionConfig)
	w, err := wasmFilter(ext)
	if err != nil {
		return nil, err
	}
	c, err := anypb.New(wrapperspb.String(string(cfg)))
	if err != nil {
		return nil, errors.New("ecds: " + err.Error())
	}
	w.Config.Configuration = c
	w.Config.AllowOnHeadersStopIteration = wrapperspb.Bool(true)
	if ext.TypedConfig, err = anypb.New(w); err != nil {
		return nil, errors.New("ecds: " + err.Error())
	}
	return ext, nil
}

// wasmFilter unpacks a template's Wasm filter. gpuroute pauses the request
// headers until it has read the body; Envoy turns that pause into
// StopAllIteration, which withholds the body from the plugin, unless the
// filter sets allow_on_headers_stop_iteration (Envoy 1.35 and later), so a
// template that turns it off is refused rather than served to hang every
// request (TestParseTemplate).
func wasmFilter(ext *corev3.TypedExtensionConfig) (*wasmfilterv3.Wasm, error) {
	var w wasmfilterv3.Wasm
	if err := ext.GetTypedConfig().UnmarshalTo(&w); err != nil {
		return nil, errors.New("ecds: template typed_config: " + err.Error())
	}
	if w.GetConfig() == nil {
		return nil, errors.New("ecds: template's Wasm filter has no config (vm_config, configuration)")
	}
	if a := w.GetConfig().GetAllowOnHeadersStopIteration(); a != nil && !a.GetValue() {
		return nil, errors.New("ecds: template's allow_on_headers_stop_iteration is false; gpuroute needs it true " +
			"(without it Envoy withholds the request body the plugin routes on)")
	}
	return &w, nil
}

// String names the destination in logs.
func (s *Server) String() string { return "ECDS resource " + strconv.Quote(s.template.GetName()) }
