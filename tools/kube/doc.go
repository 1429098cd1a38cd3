// Package kube pins the Kubernetes control plane the Kubernetes executor's
// tests run against: kube-apiserver, kube-controller-manager and
// kube-scheduler from k8s.io/kubernetes v1.34.4 (every k8s.io staging module
// pinned to v0.34.4 by replace, as Kubernetes' own go.mod points them at its
// staging directory), and etcd v3.6.16. It is a module of its own so that
// its many dependencies stay out of jobplane's.
//
//	d="$HOME/.cache/jobplane/kube-$(cat go.mod go.sum | sha256sum | cut -c1-16)"
//	go build -trimpath -o "$d/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
//	    k8s.io/kubernetes/cmd/kube-scheduler go.etcd.io/etcd/server/v3
//	JOBPLANE_TEST_KUBE_DIR="$d" go test ./internal/executor/kube
//
// .ci/run builds it once into that cache directory (internal/kubetest
// computes the same path) and sets JOBPLANE_TEST_KUBE_DIR and
// JOBPLANE_TEST_REQUIRE_KUBE=1.
package kube
