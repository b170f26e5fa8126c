package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	"k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/gpuroute/gpuroute/controller/ecds"
	"github.com/gpuroute/gpuroute/controller/envoyfilter"
	"github.com/gpuroute/gpuroute/plugin/config"
)

func validateCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(Name+" validate", flag.ContinueOnError)
	fs.Usage = func() {
		io.WriteString(stderr, "usage: "+Name+" validate FILE\n\n"+
			"FILE (- for stdin) is a plugin configuration (JSON), YAML holding EnvoyFilters\n"+
			"(the configuration of each one's gpuroute filter) or an ECDS TypedExtensionConfig.\n"+
			"Each is checked with the plugin's parser: exit 0, or the error and exit 1.\n")
	}
	if ok, status := parse(fs, args, stdout, stderr); !ok {
		return status
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return ExitUsage
	}
	path := fs.Arg(0)
	data, err := readInput(path, stdin)
	if err != nil {
		io.WriteString(stderr, Name+": "+err.Error()+"\n")
		return ExitUsage
	}
	cfgs, err := pluginConfigs(data)
	if err != nil {
		io.WriteString(stderr, path+": "+err.Error()+"\n")
		return ExitRefused
	}
	status := ExitOK
	for _, c := range cfgs {
		parsed, err := config.Parse(c.config)
		if err != nil {
			io.WriteString(stderr, path+c.where+": "+err.Error()+"\n")
			status = ExitRefused
			continue
		}
		io.WriteString(stdout, path+c.where+": ok, "+summary(parsed)+"\n")
	}
	return status
}

// summary counts a configuration's replicas by hardware profile.
func summary(c *config.Config) string {
	var order []string
	count := map[string]int{}
	for _, r := range c.Replicas {
		if count[r.Hardware] == 0 {
			order = append(order, r.Hardware)
		}
		count[r.Hardware]++
	}
	var parts []string
	for _, hw := range order {
		parts = append(parts, strconv.Itoa(count[hw])+" "+hw)
	}
	s := strconv.Itoa(len(c.Replicas)) + " replicas (" + strings.Join(parts, ", ") + ")"
	if len(c.Adapters) > 0 {
		s += ", " + strconv.Itoa(len(c.Adapters)) + " adapters"
	}
	return s
}

func readInput(path string, stdin io.Reader) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(stdin)
	}
	return os.ReadFile(path)
}

// found is one plugin configuration of a file; where says which part of
// the file ("" for the whole file, " EnvoyFilter ns/name" for a document).
type found struct {
	where  string
	config []byte
}

// pluginConfigs returns the plugin configurations a file holds: the file
// itself when it is a plain JSON plugin configuration (its bytes exactly as
// the plugin would get them), the configuration of each EnvoyFilter's
// gpuroute filter, or an ECDS resource's configuration. A WasmPlugin is
// refused: gpuroute cannot route behind one.
func pluginConfigs(data []byte) ([]found, error) {
	docs, err := documents(data)
	if err != nil {
		return nil, err
	}
	var out []found
	for i, doc := range docs {
		var top map[string]json.RawMessage
		if err := json.Unmarshal(doc, &top); err != nil {
			if len(docs) == 1 {
				// Not JSON the controller can read: the plugin's parser
				// says where it breaks.
				out = append(out, found{config: doc})
				continue
			}
			return nil, errors.New("document " + strconv.Itoa(i+1) + " is not an object: " + err.Error())
		}
		var kind string
		_ = json.Unmarshal(top["kind"], &kind) // absent or not a string: not a Kubernetes object
		switch {
		case top["typed_config"] != nil:
			tmpl, err := ecds.ParseTemplate(doc)
			if err != nil {
				return nil, err
			}
			cfg, err := ecds.Configuration(tmpl)
			if err != nil {
				return nil, err
			}
			out = append(out, found{where: " TypedExtensionConfig " + tmpl.GetName(), config: cfg})
		case kind == "EnvoyFilter":
			f, ok, err := envoyFilterConfig(doc)
			if err != nil {
				return nil, err
			}
			if ok {
				out = append(out, f)
			}
		case kind == "WasmPlugin":
			return nil, errors.New("document " + strconv.Itoa(i+1) + " is a WasmPlugin, which cannot set allow_on_headers_stop_iteration: " +
				"Envoy would withhold the request body gpuroute routes on, and every request hang; define the filter with an EnvoyFilter (examples/istio)")
		case kind == "" && len(docs) == 1:
			// A JSON file is its own only document, byte for byte.
			out = append(out, found{config: doc})
		}
	}
	if len(out) == 0 {
		return nil, errors.New("holds no plugin configuration, gpuroute EnvoyFilter or TypedExtensionConfig")
	}
	return out, nil
}

// envoyFilterConfig returns the configuration of the gpuroute filter an
// EnvoyFilter defines, or ok false if it defines none (it patches a
// cluster, say).
func envoyFilterConfig(doc []byte) (f found, ok bool, err error) {
	var ef struct {
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		Spec json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(doc, &ef); err != nil {
		return found{}, false, errors.New("EnvoyFilter: " + err.Error())
	}
	f.where = " EnvoyFilter " + ef.Metadata.Namespace + "/" + ef.Metadata.Name
	var spec networkingv1alpha3.EnvoyFilter
	if err := protojson.Unmarshal(ef.Spec, &spec); err != nil {
		return found{}, false, errors.New(f.where[1:] + ": spec: " + err.Error())
	}
	filter, err := envoyfilter.Find(&spec)
	if err != nil || filter == nil {
		return found{}, false, err
	}
	f.config = filter.Configuration
	return f, true, nil
}

// documents splits YAML (or JSON) into its documents, each as JSON. A
// file that is one JSON object stays as it is.
func documents(data []byte) ([][]byte, error) {
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' {
		return [][]byte{data}, nil
	}
	r := yaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if err == io.EOF {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) == 0 || isComment(doc) {
			continue
		}
		js, err := sigsyaml.YAMLToJSON(doc)
		if err != nil {
			return nil, errors.New("document " + strconv.Itoa(len(docs)+1) + ": " + err.Error())
		}
		if string(js) == "null" {
			continue
		}
		docs = append(docs, js)
	}
}

// isComment reports whether a document holds only comments.
func isComment(doc []byte) bool {
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if l := bytes.TrimSpace(line); len(l) > 0 && l[0] != '#' {
			return false
		}
	}
	return true
}
