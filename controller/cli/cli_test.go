package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuroute/gpuroute/controller/pool"
	"github.com/gpuroute/gpuroute/plugin/config"
	"github.com/gpuroute/gpuroute/plugin/version"
)

// call runs the command line and returns its exit status and output.
func call(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errs bytes.Buffer
	status := Main(args, strings.NewReader(stdin), &out, &errs)
	return status, out.String(), errs.String()
}

// file writes content to a file in the test's directory.
func file(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// mixed is a fleet of mixed hardware with LoRA adapters, in today's
// profile names.
const mixed = `{
  "tick_ms": 100,
  "replicas": [
    {"name": "vllm-h100-0", "address": "10.0.0.1:8000", "metrics_cluster": "gpuroute_metrics", "metrics_address": "10.0.0.1:8000", "hardware": "h100"},
    {"name": "vllm-h100-1", "address": "10.0.0.2:8000", "metrics_cluster": "gpuroute_metrics", "metrics_address": "10.0.0.2:8000", "hardware": "h100"},
    {"name": "vllm-a100-0", "address": "10.0.1.1:8000", "hardware": "a100", "adapter_slots": 4},
    {"name": "sglang-l40s-0", "address": "10.0.2.1:30000", "engine": "sglang", "hardware": "l40s"}
  ],
  "adapters": {"sql-lora": "meta-llama/Llama-3.1-8B-Instruct"}
}`

const wasmPlugins = `# two WasmPlugins, the second with a typo
apiVersion: extensions.istio.io/v1alpha1
kind: WasmPlugin
metadata: {name: gpuroute, namespace: istio-system}
spec:
  url: oci://registry.example.com/gpuroute:0.2.0
  pluginConfig:
    tick_ms: 100
    max_body_bytes: 1048576
    replicas:
    - {name: vllm-0, address: 10.0.0.1:8000, hardware: a100}
---
apiVersion: extensions.istio.io/v1alpha1
kind: WasmPlugin
metadata: {name: gpuroute-canary, namespace: istio-system}
spec:
  pluginConfig:
    replicas:
    - {name: vllm-0, address: 10.0.0.1:8000, hardwre: a100}
`

// mixedModels is a fleet of two GPU classes serving two models: Llama 3.1
// 70B on four H200s per replica, 8B on one MI300X.
const mixedModels = `{
  "replicas": [
    {"name": "h200-70b-0", "address": "10.0.0.1:8000", "hardware": "h200", "model_profile": "llama-3-70b", "tensor_parallel": 4,
     "models": ["meta-llama/Llama-3.1-70B-Instruct"]},
    {"name": "h200-70b-1", "address": "10.0.0.2:8000", "hardware": "h200", "model_profile": "llama-3-70b", "tensor_parallel": 4,
     "models": ["meta-llama/Llama-3.1-70B-Instruct"]},
    {"name": "mi300x-8b-0", "address": "10.0.1.1:8000", "hardware": "mi300x", "models": ["meta-llama/Llama-3.1-8B-Instruct"]}
  ],
  "adapters": {"sql-lora": "meta-llama/Llama-3.1-8B-Instruct"}
}`

func TestValidate(t *testing.T) {
	h999 := strings.Replace(mixed, `"hardware": "a100"`, `"hardware": "h999"`, 1)
	tests := []struct {
		name       string
		args       []string
		stdin      string
		status     int
		out, errs  string // wanted in stdout, stderr ("" wants it empty)
		exactPaths bool
	}{
		{name: "mixed fleet with adapters", args: []string{"validate", file(t, "mixed.json", mixed)},
			status: ExitOK, out: "mixed.json: ok, 4 replicas (2 h100, 1 a100, 1 l40s), 1 adapters\n"},
		{name: "unknown hardware named", args: []string{"validate", file(t, "h999.json", h999)},
			status: ExitRefused, errs: `h999.json: config: replicas[2].hardware "h999" is not a known GPU class (b200, mi300x, h200, h100, a100, l40s, l4)` + "\n"},
		{name: "H200 and MI300X serving two models", args: []string{"validate", file(t, "models.json", mixedModels)},
			status: ExitOK, out: "models.json: ok, 3 replicas (2 h200, 1 mi300x), 1 adapters\n"},
		{name: "stdin", args: []string{"validate", "-"}, stdin: mixed,
			status: ExitOK, out: "-: ok, 4 replicas (2 h100, 1 a100, 1 l40s), 1 adapters\n"},
		{name: "WasmPlugins, each on its own", args: []string{"validate", file(t, "wp.yaml", wasmPlugins)},
			status: ExitRefused, out: "wp.yaml WasmPlugin istio-system/gpuroute: ok, 1 replicas (1 a100)\n",
			errs: `wp.yaml WasmPlugin istio-system/gpuroute-canary: config: replicas[0]: unknown key "hardwre"` + "\n"},
		{name: "an ECDS template of the examples", args: []string{"validate", filepath.Join("..", "..", "examples", "envoy", "gpuroute-filter.yaml")},
			status: ExitOK, out: "gpuroute-filter.yaml TypedExtensionConfig gpuroute: ok, 2 replicas (2 h100)\n"},
		{name: "malformed JSON", args: []string{"validate", file(t, "bad.json", `{"replicas": [}`)},
			status: ExitRefused, errs: "bad.json: config: malformed JSON at offset 14"},
		{name: "no configuration in it", args: []string{"validate", file(t, "pod.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: vllm-0}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: vllm-1}\n")},
			status: ExitRefused, errs: "pod.yaml: holds no plugin configuration, WasmPlugin or TypedExtensionConfig\n"},
		{name: "no file", args: []string{"validate"}, status: ExitUsage, errs: "usage: gpuroute-controller validate FILE"},
		{name: "missing file", args: []string{"validate", filepath.Join(t.TempDir(), "none.json")}, status: ExitUsage, errs: "no such file or directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, out, errs := call(t, tc.stdin, tc.args...)
			// Paths of temporary files: compare from the file's base name.
			out, errs = trimDirs(out), trimDirs(errs)
			if status != tc.status || !contains(out, tc.out) || !contains(errs, tc.errs) {
				t.Errorf("%v = %d\nstdout %q\nstderr %q\nwant %d, stdout with %q, stderr with %q", tc.args, status, out, errs, tc.status, tc.out, tc.errs)
			}
		})
	}
}

// contains reports whether s holds want, or both are empty.
func contains(s, want string) bool {
	if want == "" {
		return s == ""
	}
	return strings.Contains(s, want)
}

// trimDirs drops the directories of the paths that open output lines.
func trimDirs(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if j := strings.Index(l, ": "); j > 0 && strings.Contains(l[:j], string(filepath.Separator)) {
			head, rest := l[:j], l[j:]
			if k := strings.Index(head, " "); k > 0 {
				lines[i] = filepath.Base(head[:k]) + head[k:] + rest
			} else {
				lines[i] = filepath.Base(head) + rest
			}
		}
	}
	return strings.Join(lines, "\n")
}

// fleet is what `kubectl get inferencepool,pods,nodes -o yaml` shows of a
// small mixed fleet: one pool, three Pods (one not ready), two nodes.
const fleet = `apiVersion: v1
kind: List
items:
- apiVersion: inference.networking.k8s.io/v1
  kind: InferencePool
  metadata: {name: llama, namespace: llm, annotations: {gpuroute.io/engine: vllm}}
  spec:
    selector: {matchLabels: {app: vllm-llama}}
    targetPorts: [{number: 8000}]
    endpointPickerRef: {name: unused}
- apiVersion: v1
  kind: Pod
  metadata: {name: vllm-llama-0, namespace: llm, labels: {app: vllm-llama}}
  spec: {nodeName: gpu-h100-a, containers: [{name: vllm, image: vllm/vllm-openai}]}
  status:
    phase: Running
    podIP: 10.0.0.1
    conditions: [{type: Ready, status: "True"}]
- apiVersion: v1
  kind: Pod
  metadata: {name: vllm-llama-1, namespace: llm, labels: {app: vllm-llama}, annotations: {gpuroute.io/metrics-port: "9090"}}
  spec: {nodeName: gpu-a100-a, containers: [{name: vllm, image: vllm/vllm-openai}]}
  status:
    phase: Running
    podIP: 10.0.0.2
    conditions: [{type: Ready, status: "True"}]
- apiVersion: v1
  kind: Pod
  metadata: {name: vllm-llama-2, namespace: llm, labels: {app: vllm-llama}}
  spec: {nodeName: gpu-a100-a, containers: [{name: vllm, image: vllm/vllm-openai}]}
  status:
    phase: Running
    podIP: 10.0.0.3
    conditions: [{type: Ready, status: "False"}]
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: vllm-llama, namespace: llm}
- apiVersion: v1
  kind: Node
  metadata: {name: gpu-h100-a, labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}
- apiVersion: v1
  kind: Node
  metadata: {name: gpu-a100-a, labels: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}}
`

const wantFleet = `{
  "replicas": [
    {
      "name": "vllm-llama-0",
      "address": "10.0.0.1:8000",
      "engine": "vllm",
      "hardware": "h100",
      "metrics_address": "10.0.0.1:8000",
      "metrics_cluster": "gpuroute_metrics"
    },
    {
      "name": "vllm-llama-1",
      "address": "10.0.0.2:8000",
      "engine": "vllm",
      "hardware": "a100",
      "metrics_address": "10.0.0.2:9090",
      "metrics_cluster": "gpuroute_metrics"
    }
  ]
}
`

func TestRender(t *testing.T) {
	objects := file(t, "objects.yaml", fleet)
	base := file(t, "wp.yaml", strings.SplitN(wasmPlugins, "---", 2)[0])
	twoPools := file(t, "two.yaml", fleet+`- apiVersion: inference.networking.k8s.io/v1
  kind: InferencePool
  metadata: {name: qwen, namespace: llm}
  spec: {selector: {matchLabels: {app: qwen}}, targetPorts: [{number: 8000}], endpointPickerRef: {name: unused}}
`)
	typo := file(t, "typo.yaml", strings.Replace(fleet, "podIP: 10.0.0.1", "podIp: 10.0.0.1", 1))
	noneReady := file(t, "none.yaml", strings.ReplaceAll(fleet, `status: "True"`, `status: "False"`))
	slices := file(t, "slices.yaml", `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: vllm-abc, namespace: llm, labels: {kubernetes.io/service-name: vllm}}
addressType: IPv4
ports: [{name: http, port: 8000}, {name: metrics, port: 9000}]
endpoints:
- {addresses: [10.0.0.1], conditions: {ready: true}, targetRef: {kind: Pod, namespace: llm, name: vllm-0}}
- {addresses: [10.0.0.2], conditions: {ready: false}, targetRef: {kind: Pod, namespace: llm, name: vllm-1}}
---
apiVersion: v1
kind: Service
metadata: {name: vllm, namespace: llm, annotations: {gpuroute.io/hardware: l4}}
`)
	tests := []struct {
		name      string
		args      []string
		status    int
		out, errs string
	}{
		{name: "exactly the ready pods", args: []string{"render", "--objects", objects, "--metrics-cluster", "gpuroute_metrics"},
			status: ExitOK, out: wantFleet, errs: "not ready: 1\n"},
		{name: "on a WasmPlugin's configuration", args: []string{"render", "--objects", objects, "--base", base},
			status: ExitOK, out: `"max_body_bytes": 1048576,`, errs: "not ready: 1\n"},
		{name: "several pools need --pool", args: []string{"render", "--objects", twoPools},
			status: ExitRefused, errs: "several InferencePools (llm/llama, llm/qwen); name one with --pool (and --namespace)"},
		{name: "the pool named", args: []string{"render", "--objects", twoPools, "--pool", "qwen"},
			status: ExitRefused, errs: "pool: the plugin would refuse the configuration: config: replicas must list at least one replica"},
		{name: "a pool not there", args: []string{"render", "--objects", objects, "--pool", "mistral"},
			status: ExitRefused, errs: `no InferencePool "mistral" here; there are llm/llama`},
		{name: "a typo in an object", args: []string{"render", "--objects", typo},
			status: ExitRefused, errs: `unknown field "status.podIp"`},
		{name: "no ready pod", args: []string{"render", "--objects", noneReady},
			status: ExitRefused, errs: "not ready: 3\ngpuroute-controller: pool: the plugin would refuse the configuration: config: replicas must list at least one replica\n"},
		{name: "a service's endpoint slices", args: []string{"render", "--objects", slices, "--service", "vllm", "--namespace", "llm", "--port", "http"},
			status: ExitOK, out: `"hardware": "l4"`, errs: "not ready: 1\n"},
		{name: "port without service", args: []string{"render", "--objects", objects, "--port", "http"},
			status: ExitRefused, errs: "--port is for --service"},
		{name: "bad hardware map", args: []string{"render", "--objects", objects, "--hardware-map", "T4"},
			status: ExitUsage, errs: `--hardware-map must be PRODUCT=PROFILE, got "T4"`},
		{name: "no objects", args: []string{"render"}, status: ExitUsage, errs: "usage: gpuroute-controller render --objects FILE.yaml"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, out, errs := call(t, "", tc.args...)
			if status != tc.status || !contains(out, tc.out) || !contains(errs, tc.errs) {
				t.Errorf("%v = %d\nstdout %q\nstderr %q\nwant %d, stdout with %q, stderr with %q", tc.args, status, out, errs, tc.status, tc.out, tc.errs)
			}
			if status == ExitOK {
				if _, err := config.Parse([]byte(out)); err != nil {
					t.Errorf("%v printed a configuration the plugin refuses: %v", tc.args, err)
				}
			}
		})
	}
}

func TestRunUsage(t *testing.T) {
	kubeconfig := file(t, "kubeconfig", `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: llm}}]
current-context: x
`)
	tests := []struct {
		name string
		args []string
		errs string
	}{
		{name: "nowhere to publish", args: []string{"--pool", "llama"}, errs: "nowhere to publish: give --wasmplugin, --ecds-listen or --file"},
		{name: "ecds without template", args: []string{"--pool", "llama", "--ecds-listen", ":0"}, errs: "--ecds-listen and --ecds-template go together"},
		{name: "base without file", args: []string{"--pool", "llama", "--wasmplugin", "a/b", "--base", "x.json"}, errs: "--base is for --file"},
		{name: "neither pool nor service", args: []string{"--file", "out.json"}, errs: "controller: set exactly one of a pool and a service to follow"},
		{name: "wasmplugin without namespace", args: []string{"--pool", "llama", "--wasmplugin", "gpuroute"}, errs: `--wasmplugin must be NAMESPACE/NAME, got "gpuroute"`},
		{name: "log level", args: []string{"--pool", "llama", "--file", "x", "--log-level", "loud"}, errs: `invalid value "loud" for flag -log-level`},
		{name: "unknown flag", args: []string{"--pool", "llama", "--file", "x", "--replicas", "3"}, errs: "flag provided but not defined: -replicas"},
		{name: "argument", args: []string{"llama"}, errs: `run takes flags only, got "llama"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"run", "--kubeconfig", kubeconfig, "--health-listen", ""}, tc.args...)
			status, _, errs := call(t, "", args...)
			if status != ExitUsage || !strings.Contains(errs, tc.errs) {
				t.Errorf("%v = %d, stderr %q; want %d and %q", args, status, errs, ExitUsage, tc.errs)
			}
		})
	}
}

func TestVersionAndUsage(t *testing.T) {
	if status, out, _ := call(t, "", "version"); status != ExitOK || out != "gpuroute-controller "+version.Release+"\n" {
		t.Errorf("version = %d %q, want 0 and the release", status, out)
	}
	if status, _, errs := call(t, ""); status != ExitUsage || !strings.Contains(errs, "usage: gpuroute-controller COMMAND") {
		t.Errorf("no command = %d %q, want the usage", status, errs)
	}
	if status, _, errs := call(t, "", "serve"); status != ExitUsage || !strings.Contains(errs, `unknown command "serve"`) {
		t.Errorf("unknown command = %d %q, want it named", status, errs)
	}
}

// FuzzFiles: whatever a file holds, reading it for validate or render
// gives an error or configurations and objects, never a panic; every
// configuration found is one the plugin's parser then judges.
func FuzzFiles(f *testing.F) {
	f.Add([]byte(mixed))
	f.Add([]byte(wasmPlugins))
	f.Add([]byte(fleet))
	f.Add([]byte("name: gpuroute\ntyped_config: {\"@type\": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm, config: {}}"))
	f.Add([]byte("---\n---\n# only a comment\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if cfgs, err := pluginConfigs(data); err == nil {
			for _, c := range cfgs {
				_, _ = config.Parse(c.config)
			}
		}
		if objs, err := decodeObjects(data); err == nil {
			_, _ = objs.result(Fleet{}, pool.Options{})
		}
	})
}
