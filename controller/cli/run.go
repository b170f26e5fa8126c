package cli

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	istioclient "istio.io/client-go/pkg/clientset/versioned"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/gpuroute/gpuroute/controller"
	"github.com/gpuroute/gpuroute/controller/ecds"
	"github.com/gpuroute/gpuroute/controller/envoyfilter"
	"github.com/gpuroute/gpuroute/plugin/version"
)

// RunArgs are run's settings, as its flags give them.
type RunArgs struct {
	Fleet
	Kubeconfig string
	// EnvoyFilter is NAMESPACE/NAME.
	EnvoyFilter              string
	ECDSListen, ECDSTemplate string
	File, Base               string
	HealthListen             string
	LogLevel                 slog.Level
	Debounce                 time.Duration
}

func (f *RunArgs) register(fs *flag.FlagSet) {
	f.Fleet.register(fs)
	fs.StringVar(&f.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: in the cluster, the service account; outside, $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&f.EnvoyFilter, "envoyfilter", "", "NAMESPACE/NAME of the Istio EnvoyFilter whose gpuroute filter (its EXTENSION_CONFIG ADD) gets the replica list")
	fs.StringVar(&f.ECDSListen, "ecds-listen", "", "address to serve ECDS (gRPC) on for plain Envoy, e.g. :18000; needs --ecds-template")
	fs.StringVar(&f.ECDSTemplate, "ecds-template", "", "TypedExtensionConfig (YAML) of the gpuroute filter whose replica list ECDS fills in")
	fs.StringVar(&f.File, "file", "", "file to write the whole plugin configuration to (the local gateway's --plugin-config)")
	fs.StringVar(&f.Base, "base", "", "with --file: the rest of the plugin configuration (JSON; default {})")
	fs.StringVar(&f.HealthListen, "health-listen", ":8081", `address of /healthz and /readyz ("" for none)`)
	fs.TextVar(&f.LogLevel, "log-level", slog.LevelInfo, "debug, info, warn or error")
	fs.DurationVar(&f.Debounce, "debounce", 500*time.Millisecond, "how long a change waits for others to join it before the list is published")
}

// ParseRunArgs reads run's flags and checks what can be checked before
// connecting: the combinations, and that there is somewhere to publish.
// Flag errors are printed to stderr as they happen; -h gives flag.ErrHelp.
func ParseRunArgs(args []string, stderr io.Writer) (*RunArgs, error) {
	fs := flag.NewFlagSet(Name+" run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f RunArgs
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		return nil, printed{err}
	}
	if fs.NArg() != 0 {
		return nil, errors.New("run takes flags only, got " + quote(fs.Arg(0)))
	}
	if _, err := f.Options(); err != nil {
		return nil, err
	}
	switch {
	case f.Base != "" && f.File == "":
		return nil, errors.New("--base is for --file")
	case (f.ECDSListen == "") != (f.ECDSTemplate == ""):
		return nil, errors.New("--ecds-listen and --ecds-template go together")
	case f.EnvoyFilter == "" && f.ECDSListen == "" && f.File == "":
		return nil, errors.New("nowhere to publish: give --envoyfilter, --ecds-listen or --file")
	}
	if f.EnvoyFilter != "" {
		if ns, name, ok := strings.Cut(f.EnvoyFilter, "/"); !ok || ns == "" || name == "" {
			return nil, errors.New("--envoyfilter must be NAMESPACE/NAME, got " + quote(f.EnvoyFilter))
		}
	}
	return &f, nil
}

func runCommand(args []string, _ io.Reader, _, stderr io.Writer) int {
	f, err := ParseRunArgs(args, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return ExitOK
	case err != nil:
		var p printed
		if !errors.As(err, &p) {
			io.WriteString(stderr, Name+": "+err.Error()+"\n")
		}
		return ExitUsage
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: f.LogLevel}))
	klog.SetSlogLogger(log) // client-go's own lines go the same way
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, f, log); err != nil {
		log.Error("stopped", "error", err.Error())
		var u usageError
		if errors.As(err, &u) {
			return ExitUsage
		}
		return ExitRefused
	}
	return ExitOK
}

// printed is an error the flag package has shown already.
type printed struct{ error }

func (p printed) Unwrap() error { return p.error }

// usageError is a setting run cannot work with.
type usageError struct{ error }

// run connects, builds the publishers, and runs the controller until ctx
// ends.
func run(ctx context.Context, f *RunArgs, log *slog.Logger) error {
	opts, err := f.Options()
	if err != nil {
		return usageError{err}
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: f.Kubeconfig, Precedence: clientcmd.NewDefaultClientConfigLoadingRules().Precedence},
		&clientcmd.ConfigOverrides{})
	rc, err := cc.ClientConfig()
	if err != nil {
		return errors.New("kubeconfig: " + err.Error())
	}
	rc = rest.CopyConfig(rc)
	rc.UserAgent = Name + "/" + version.Release
	namespace := f.Namespace
	if namespace == "" {
		if namespace, _, err = cc.Namespace(); err != nil {
			return errors.New("kubeconfig: " + err.Error())
		}
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return err
	}
	var pubs []controller.Publisher
	if f.EnvoyFilter != "" {
		ns, name, _ := strings.Cut(f.EnvoyFilter, "/")
		ic, err := istioclient.NewForConfig(rc)
		if err != nil {
			return err
		}
		pubs = append(pubs, &envoyfilter.Publisher{Client: ic, Namespace: ns, Name: name, FieldManager: Name})
	}
	var srv *ecds.Server
	if f.ECDSListen != "" {
		if srv, err = ecdsServer(f.ECDSTemplate, log); err != nil {
			return err
		}
		pubs = append(pubs, srv)
	}
	if f.File != "" {
		fp := &controller.File{Path: f.File}
		if f.Base != "" {
			if fp.Base, err = os.ReadFile(f.Base); err != nil {
				return err
			}
		}
		pubs = append(pubs, fp)
	}
	c, err := controller.New(kube, dyn, controller.Options{Namespace: namespace, Pool: f.Pool, Service: f.Service, Port: f.Port,
		Replicas: opts, Publishers: pubs, Debounce: f.Debounce, Log: log})
	if err != nil {
		return usageError{err}
	}
	if srv != nil {
		lis, err := net.Listen("tcp", f.ECDSListen)
		if err != nil {
			return err
		}
		go func() {
			if err := srv.Serve(lis); err != nil {
				log.Error("ECDS server stopped", "error", err.Error())
			}
		}()
		defer srv.Stop()
		log.Info("serving ECDS", "address", lis.Addr().String())
	}
	if f.HealthListen != "" {
		if err := serveHealth(ctx, f.HealthListen, c.Ready, log); err != nil {
			return err
		}
	}
	log.Info("starting", "release", version.Release, "namespace", namespace, "pool", f.Pool, "service", f.Service)
	return c.Run(ctx)
}

func ecdsServer(path string, log *slog.Logger) (*ecds.Server, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	tmpl, err := ecds.ParseTemplate(data)
	if err != nil {
		return nil, err
	}
	return ecds.New(tmpl, log)
}

// serveHealth answers /healthz (the process runs) and /readyz (the caches
// synced and the last list was published) until ctx ends.
func serveHealth(ctx context.Context, addr string, ready func() bool, log *slog.Logger) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "not ready: caches syncing or the last publish failed", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("health server stopped", "error", err.Error())
		}
	}()
	return nil
}
