package scoring

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestAppendExplain(t *testing.T) {
	now := 10 * sec
	tests := []struct {
		name  string
		names []string // Replica.Name per replica
		want  string
	}{
		{name: "by address", names: []string{"", "", ""},
			want: "chosen=10.0.0.1:8000 reason=least-loaded; 10.0.0.1:8000 w=0 a=0 p=0.182 k=0; 10.0.0.2:8000 w=0.360 a=0 p=0.060 k=800; 10.0.0.3:8000 w=0.250 a=0 p=0.182 k=0 stale"},
		{name: "by name", names: []string{"vllm-0", "vllm-1", ""},
			want: "chosen=vllm-0 reason=least-loaded; vllm-0 w=0 a=0 p=0.182 k=0; vllm-1 w=0.360 a=0 p=0.060 k=800; 10.0.0.3:8000 w=0.250 a=0 p=0.182 k=0 stale"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs := fleet("h100", 3, now)
			for i := range rs {
				rs[i].Name = tc.names[i]
			}
			rs[1].WaitingRequests = 2
			rs[2].ScrapedNanos = 0
			p := DefaultParams()
			var d Decision
			Pick(&p, &Request{PromptTokens: 1000}, rs, []int{0, 800, 0}, nil, now, &d)
			if got := string(d.AppendExplain(nil, rs)); got != tc.want {
				t.Fatalf("AppendExplain(%q) =\n%s\nwant\n%s", tc.names, got, tc.want)
			}
			buf := make([]byte, 0, 512)
			if a := testing.AllocsPerRun(50, func() { buf = d.AppendExplain(buf[:0], rs) }); a != 0 {
				t.Fatalf("AppendExplain allocs = %v, want 0", a)
			}
		})
	}
}

// TestImportsStdlibOnly holds scoring and its subpackages to the standard
// library and each other: the decision core is pure, so the plugin, the
// simulator and the tests run the same code.
func TestImportsStdlibOnly(t *testing.T) {
	const own = "github.com/gpuroute/gpuroute/scoring/"
	banned := []string{"time.Now", "math/rand", "\"os\"", "\"fmt\"", "\"reflect\"", "encoding/json"}
	err := filepath.WalkDir(".", func(name string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return err
		}
		src, err := os.ReadFile(name)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") && !strings.HasPrefix(path, own) {
				t.Errorf("%s imports %q, want the standard library or scoring's own packages only", name, path)
			}
		}
		for _, b := range banned {
			if strings.Contains(string(src), b) {
				t.Errorf("%s uses %s, banned in scoring (pure, wasm-safe)", name, b)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
