package wasmimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// fakeModule is the smallest valid Wasm binary: magic and version 1.
var fakeModule = []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}

// extract reads the module back the way Istio's fetcher does for each variant
// (istio/istio pkg/wasm/imagefetcher.go: extractOCIStandardImage for compat,
// extractOCIArtifactImage for oci), returning an error where Istio would.
func extract(t *testing.T, img v1.Image, v Variant) []byte {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatalf("Layers() error: %v", err)
	}
	switch v {
	case Compat:
		if len(layers) != 1 {
			t.Fatalf("compat image has %d layers, want 1", len(layers))
		}
		if mt, _ := layers[0].MediaType(); mt != types.OCILayer {
			t.Fatalf("compat layer media type = %s, want %s", mt, types.OCILayer)
		}
		rc, err := layers[0].Compressed()
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		gz, err := gzip.NewReader(rc)
		if err != nil {
			t.Fatalf("compat layer is not gzip: %v", err)
		}
		tr := tar.NewReader(gz)
		for {
			h, err := tr.Next()
			if err != nil {
				t.Fatalf("compat layer has no %s: %v", CompatFileName, err)
			}
			if filepath.Base(h.Name) == CompatFileName {
				b, err := io.ReadAll(tr)
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
		}
	case OCI:
		if len(layers) != 2 {
			t.Fatalf("oci image has %d layers, want 2 (Istio rejects any other count)", len(layers))
		}
		var sawConfig bool
		var wasm []byte
		for _, l := range layers {
			mt, _ := l.MediaType()
			rc, err := l.Compressed()
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				t.Fatal(err)
			}
			switch mt {
			case MediaTypeWasmLayer:
				wasm = b
			case MediaTypeWasmConfig:
				sawConfig = true
				if !bytes.Contains(b, []byte(`"type":"envoy_proxy"`)) {
					t.Errorf("config layer = %s, want type envoy_proxy", b)
				}
			default:
				t.Errorf("unexpected layer media type %s", mt)
			}
		}
		if !sawConfig || wasm == nil {
			t.Fatalf("oci image: config layer %v, wasm layer %v; want both", sawConfig, wasm != nil)
		}
		return wasm
	}
	t.Fatalf("unknown variant %v", v)
	return nil
}

func TestWriteLayout(t *testing.T) {
	tests := []struct {
		name       string
		variant    Variant
		annotation string // manifest module.wasm.image/variant
	}{
		{name: "compat", variant: Compat, annotation: VariantCompat},
		{name: "oci", variant: OCI},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			img, err := Image(fakeModule, tc.variant)
			if err != nil {
				t.Fatalf("Image(fake, %v) error: %v", tc.variant, err)
			}
			dir := filepath.Join(t.TempDir(), "oci")
			if err := WriteLayout(dir, img, "gpuroute:test"); err != nil {
				t.Fatalf("WriteLayout error: %v", err)
			}
			// Writing again replaces the layout instead of appending a second manifest.
			if err := WriteLayout(dir, img, "gpuroute:test"); err != nil {
				t.Fatalf("second WriteLayout error: %v", err)
			}
			idx, err := layout.ImageIndexFromPath(dir)
			if err != nil {
				t.Fatalf("ImageIndexFromPath error: %v", err)
			}
			im, err := idx.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			if len(im.Manifests) != 1 {
				t.Fatalf("index.json has %d manifests, want 1", len(im.Manifests))
			}
			desc := im.Manifests[0]
			if got := desc.Annotations[RefNameAnnotation]; got != "gpuroute:test" {
				t.Errorf("ref name = %q, want %q", got, "gpuroute:test")
			}
			if desc.MediaType != types.OCIManifestSchema1 {
				t.Errorf("manifest media type = %s, want %s", desc.MediaType, types.OCIManifestSchema1)
			}
			got, err := idx.Image(desc.Digest)
			if err != nil {
				t.Fatalf("Image(%s) error: %v", desc.Digest, err)
			}
			m, err := got.Manifest()
			if err != nil {
				t.Fatal(err)
			}
			if m.Config.MediaType != types.OCIConfigJSON {
				t.Errorf("config media type = %s, want %s", m.Config.MediaType, types.OCIConfigJSON)
			}
			if a := m.Annotations[VariantAnnotation]; a != tc.annotation {
				t.Errorf("manifest annotation %s = %q, want %q", VariantAnnotation, a, tc.annotation)
			}
			if b := extract(t, got, tc.variant); !bytes.Equal(b, fakeModule) {
				t.Errorf("module read back = %x, want %x", b, fakeModule)
			}
			// Reproducible: the same module gives the same manifest digest.
			again, err := Image(fakeModule, tc.variant)
			if err != nil {
				t.Fatal(err)
			}
			d1, _ := img.Digest()
			d2, _ := again.Digest()
			if d1 != d2 || d1 != desc.Digest {
				t.Errorf("digests: built %s, rebuilt %s, in layout %s; want all equal", d1, d2, desc.Digest)
			}
		})
	}
}

func TestImageRefusesNonWasm(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
	}{
		{name: "empty", in: nil},
		{name: "text", in: []byte("not wasm at all")},
		{name: "short magic", in: []byte{0x00, 'a', 's'}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Image(tc.in, Compat); err == nil || !strings.HasPrefix(err.Error(), "wasmimage: ") {
				t.Errorf("Image(%q) error = %v, want a wasmimage: error", tc.in, err)
			}
		})
	}
}

func TestWriteLayoutRefusesOtherDir(t *testing.T) {
	dir := t.TempDir()
	keep := filepath.Join(dir, "keep.txt")
	if err := os.WriteFile(keep, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := Image(fakeModule, Compat)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteLayout(dir, img, ""); err == nil {
		t.Fatalf("WriteLayout(%q) = nil, want an error for a non-layout directory", dir)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("WriteLayout removed an unrelated file: %v", err)
	}
}

func TestParseVariant(t *testing.T) {
	tests := []struct {
		name, in string
		want     Variant
		wantErr  bool
	}{
		{name: "compat", in: "compat", want: Compat},
		{name: "oci", in: "oci", want: OCI},
		{name: "unknown", in: "docker", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseVariant(tc.in)
			if (err != nil) != tc.wantErr || (!tc.wantErr && got != tc.want) {
				t.Errorf("ParseVariant(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
			}
		})
	}
}
