// Package wasmimage packages a Wasm module as an OCI image layout that Istio's
// WasmPlugin can pull (after `crane push` / `oras cp` to a registry), built with
// go-containerregistry rather than hand-assembled blobs.
//
//	img, err := wasmimage.Image(wasm, wasmimage.Compat)
//	if err != nil { /* ... */ }
//	err = wasmimage.WriteLayout("build/oci", img, "gpuroute:dev")
//
// Istio's fetcher (istio/istio pkg/wasm/imagefetcher.go, PrepareFetch) accepts
// the two variants of the Wasm image specification (solo-io/wasm
// spec/spec-compat.md and spec/spec.md) and tries them in this order:
//   - Compat: exactly one layer of media type
//     application/vnd.oci.image.layer.v1.tar+gzip, a tarball holding
//     plugin.wasm; the manifest carries the annotation
//     module.wasm.image/variant=compat. Any registry stores it.
//   - OCI: exactly two layers, one of media type
//     application/vnd.module.wasm.content.layer.v1+wasm (the raw module) and
//     one application/vnd.module.wasm.config.v1+json (runtime metadata).
//     Istio rejects this variant with any other layer count, so a single
//     wasm-typed layer alone is not pullable. Some registries refuse custom
//     layer media types.
//
// This package is a build tool: nothing here is linked into the module.
package wasmimage

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Media types, file names and annotations of the Wasm image specification
// (solo-io/wasm spec/spec.md "Format", spec/spec-compat.md "Specification").
const (
	MediaTypeWasmLayer  types.MediaType = "application/vnd.module.wasm.content.layer.v1+wasm"
	MediaTypeWasmConfig types.MediaType = "application/vnd.module.wasm.config.v1+json"
	// CompatFileName is the module's name inside the compat layer's tarball.
	CompatFileName = "plugin.wasm"
	// VariantAnnotation marks a compat image whose layer is an OCI tar+gzip.
	VariantAnnotation = "module.wasm.image/variant"
	VariantCompat     = "compat"
	// RefNameAnnotation tags a manifest in an OCI layout's index.json
	// (OCI image-spec annotations.md).
	RefNameAnnotation = "org.opencontainers.image.ref.name"
	// TitleAnnotation names a layer's file (OCI image-spec annotations.md).
	TitleAnnotation = "org.opencontainers.image.title"
)

// Variant selects the image shape.
type Variant int

// The variants Istio accepts.
const (
	Compat Variant = iota
	OCI
)

// String returns the variant's name as the gpuroute-oci -variant flag spells it.
func (v Variant) String() string {
	switch v {
	case Compat:
		return "compat"
	case OCI:
		return "oci"
	}
	return "variant(" + strconv.Itoa(int(v)) + ")"
}

// ParseVariant is the inverse of Variant.String.
func ParseVariant(s string) (Variant, error) {
	switch s {
	case "compat":
		return Compat, nil
	case "oci":
		return OCI, nil
	}
	return 0, errors.New("wasmimage: variant " + strconv.Quote(s) + " is not compat or oci")
}

// runtimeConfig is the OCI variant's config layer: the runtime is Envoy and
// the ABI proxy-wasm 0.2.1 (spec/spec.md "Envoy WASM Filter Specification").
// gpuroute registers no named root_id, so the list is empty.
const runtimeConfig = `{"type":"envoy_proxy","abiVersions":["v0.2.1"],"config":{"root_ids":[]}}`

// wasmMagic is the first four bytes of every Wasm binary (Wasm core spec 5.5.16).
var wasmMagic = []byte{0x00, 'a', 's', 'm'}

// Image builds the image for a module. It refuses bytes that are not a Wasm
// binary. The result is reproducible: no timestamps, so the same module gives
// the same digest.
func Image(wasm []byte, v Variant) (v1.Image, error) {
	if !bytes.HasPrefix(wasm, wasmMagic) {
		n := min(len(wasm), 8)
		return nil, errors.New("wasmimage: module does not start with the Wasm magic \\0asm, got " + strconv.Quote(string(wasm[:n])))
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	switch v {
	case Compat:
		tarBytes, err := tarOf(CompatFileName, wasm)
		if err != nil {
			return nil, err
		}
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(tarBytes)), nil
		}, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, errors.New("wasmimage: compat layer: " + err.Error())
		}
		img, err := mutate.Append(base, mutate.Addendum{Layer: layer})
		if err != nil {
			return nil, errors.New("wasmimage: append layer: " + err.Error())
		}
		return mutate.Annotations(img, map[string]string{VariantAnnotation: VariantCompat}).(v1.Image), nil
	case OCI:
		img, err := mutate.Append(base,
			mutate.Addendum{Layer: static.NewLayer([]byte(runtimeConfig), MediaTypeWasmConfig),
				Annotations: map[string]string{TitleAnnotation: "runtime-config.json"}},
			mutate.Addendum{Layer: static.NewLayer(wasm, MediaTypeWasmLayer),
				Annotations: map[string]string{TitleAnnotation: "plugin.wasm"}})
		if err != nil {
			return nil, errors.New("wasmimage: append layers: " + err.Error())
		}
		return img, nil
	}
	return nil, errors.New("wasmimage: unknown " + v.String())
}

// tarOf returns a tarball holding one regular file, with zero timestamps.
func tarOf(name string, data []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg, Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, errors.New("wasmimage: tar header: " + err.Error())
	}
	if _, err := tw.Write(data); err != nil {
		return nil, errors.New("wasmimage: tar body: " + err.Error())
	}
	if err := tw.Close(); err != nil {
		return nil, errors.New("wasmimage: tar close: " + err.Error())
	}
	return buf.Bytes(), nil
}

// WriteLayout writes img as the only manifest of a fresh OCI image layout in
// dir, tagged ref (the index's org.opencontainers.image.ref.name). An existing
// dir is replaced only if it already is an OCI layout (has an oci-layout
// file), so a mistyped path never deletes unrelated files.
func WriteLayout(dir string, img v1.Image, ref string) error {
	if _, err := os.Stat(dir); err == nil {
		if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
			return errors.New("wasmimage: " + strconv.Quote(dir) + " exists and is not an OCI layout; refusing to replace it")
		}
		if err := os.RemoveAll(dir); err != nil {
			return errors.New("wasmimage: " + err.Error())
		}
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return errors.New("wasmimage: " + err.Error())
	}
	var opts []layout.Option
	if ref != "" {
		opts = append(opts, layout.WithAnnotations(map[string]string{RefNameAnnotation: ref}))
	}
	if err := p.AppendImage(img, opts...); err != nil {
		return errors.New("wasmimage: " + err.Error())
	}
	return nil
}
