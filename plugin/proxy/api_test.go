package proxy

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestAPIIdenticalOnBothBuilds holds the wasip1 and the native build to the same
// exported functions and signatures: plugin code compiles against one API.
func TestAPIIdenticalOnBothBuilds(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	api := map[string][]string{} // build tag → "Name(sig)" lines
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		tag := "common"
		switch {
		case bytes.Contains(src, []byte("//go:build !wasip1")):
			tag = "native"
		case bytes.Contains(src, []byte("//go:build wasip1")):
			tag = "wasm"
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || !fd.Name.IsExported() {
				continue
			}
			var sig bytes.Buffer
			_ = printer.Fprint(&sig, fset, fd.Type)
			api[tag] = append(api[tag], fd.Name.Name+" "+sig.String())
		}
	}
	slices.Sort(api["wasm"])
	slices.Sort(api["native"])
	if !slices.Equal(api["wasm"], api["native"]) {
		t.Errorf("exported API differs between builds:\nwasm:   %q\nnative: %q", api["wasm"], api["native"])
	}
	if len(api["wasm"]) < 30 {
		t.Errorf("wasm build exports %d functions, want the full host-call surface", len(api["wasm"]))
	}
}
