package scoring

import (
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestAppendExplain(t *testing.T) {
	now := 10 * sec
	rs := fleet("h100", 3, now)
	rs[1].WaitingRequests = 2
	rs[2].ScrapedNanos = 0
	p := DefaultParams()
	var d Decision
	Pick(&p, &Request{PromptTokens: 1000}, rs, []int{0, 800, 0}, nil, now, &d)
	got := string(d.AppendExplain(nil, rs))
	want := "chosen=10.0.0.1:8000 reason=least-loaded; 10.0.0.1:8000 w=0 a=0 p=0.182 k=0; 10.0.0.2:8000 w=0.360 a=0 p=0.060 k=800; 10.0.0.3:8000 w=0.250 a=0 p=0.182 k=0 stale"
	if got != want {
		t.Fatalf("AppendExplain() =\n%s\nwant\n%s", got, want)
	}
	buf := make([]byte, 0, 512)
	if a := testing.AllocsPerRun(50, func() { buf = d.AppendExplain(buf[:0], rs) }); a != 0 {
		t.Fatalf("AppendExplain allocs = %v, want 0", a)
	}
}

// TestImportsStdlibOnly holds scoring to the standard library (STYLE.md 1).
func TestImportsStdlibOnly(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	banned := []string{"time.Now", "math/rand", "\"os\"", "\"fmt\"", "\"reflect\"", "encoding/json"}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") {
				t.Errorf("%s imports %q, want standard library only", name, path)
			}
		}
		for _, b := range banned {
			if strings.Contains(string(src), b) {
				t.Errorf("%s uses %s, banned in scoring (pure, wasm-safe)", name, b)
			}
		}
	}
}
