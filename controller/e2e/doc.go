// Package e2e runs gpuroute-controller against a real kube-apiserver, built
// from the k8s.io/kubernetes module with its RBAC authorizer on, and an etcd
// embedded from go.etcd.io/etcd/server: the example manifests of
// examples/kubernetes are applied as they are, and the controller runs as
// the ServiceAccount they create, so the API server itself judges their
// RBAC.
//
//	make e2e-kube   # or: cd controller/e2e && go test -count=1 .
//
// It is its own module, so that building a kube-apiserver (tens of minutes
// of CPU on a cold cache) stays out of the main module and of make test.
package e2e
