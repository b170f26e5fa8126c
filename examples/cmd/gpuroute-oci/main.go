// Command gpuroute-oci packages build/gpuroute.wasm as an OCI image layout
// (build/oci) that Istio's WasmPlugin can pull once pushed to a registry:
//
//	go run ./examples/cmd/gpuroute-oci -wasm build/gpuroute.wasm -out build/oci -ref gpuroute:dev
//	crane push build/oci registry.example.com/gpuroute/gpuroute:0.1.0   # or: oras cp --from-oci-layout
//
// The image shape is the Wasm image specification's compat variant by default
// (-variant oci for the two-layer custom-media-type variant); see package
// examples/wasmimage.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/gpuroute/gpuroute/examples/wasmimage"
)

func main() {
	wasmPath := flag.String("wasm", "build/gpuroute.wasm", "module to package")
	out := flag.String("out", "build/oci", "OCI image layout directory to (re)create")
	ref := flag.String("ref", "gpuroute:dev", "org.opencontainers.image.ref.name of the manifest")
	variant := flag.String("variant", "compat", "image shape: compat (one tar+gzip layer) or oci (wasm + config layers)")
	flag.Parse()
	if err := run(*wasmPath, *out, *ref, *variant); err != nil {
		fmt.Fprintln(os.Stderr, "gpuroute-oci:", err)
		os.Exit(1)
	}
}

func run(wasmPath, out, ref, variant string) error {
	v, err := wasmimage.ParseVariant(variant)
	if err != nil {
		return err
	}
	wasm, err := os.ReadFile(wasmPath)
	if err != nil {
		return err
	}
	img, err := wasmimage.Image(wasm, v)
	if err != nil {
		return err
	}
	if err := wasmimage.WriteLayout(out, img, ref); err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s (%s variant, %d-byte module) manifest %s\n", out, v, len(wasm), d)
	return nil
}
