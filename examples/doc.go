// Package examples holds gpuroute's Envoy, Istio and Kubernetes
// configurations (envoy/, istio/, kubernetes/) and the tests that keep them
// honest: every file must parse into the real API types, pass their
// validation, and carry a plugin configuration that plugin/config accepts.
//
//	go test ./examples/...
//
// It has no code of its own; nothing here is linked into the Wasm module.
package examples
