// Package kubetest starts a real Kubernetes control plane for tests: etcd,
// kube-apiserver (static token authentication, RBAC authorization),
// kube-controller-manager (the Job, Deployment, ReplicaSet,
// garbage-collector, namespace, service-account and root CA publisher
// controllers) and kube-scheduler, built once from the
// tools module tools/kube, plus a node stand-in that runs pods' containers
// with podman.
//
// The binaries come from a cache directory keyed by tools/kube's go.mod and
// go.sum, as .ci/run computes it:
//
//	d="${XDG_CACHE_HOME:-$HOME/.cache}/jobplane/kube-$(cat tools/kube/go.mod tools/kube/go.sum | sha256sum | cut -c1-16)"
//	(cd tools/kube && GOWORK=off go build -trimpath -o "$d/" k8s.io/kubernetes/cmd/kube-apiserver \
//	    k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler go.etcd.io/etcd/server/v3)
//
// (JOBPLANE_TEST_KUBE_DIR names another directory.) A test without them, or
// without podman and runc, skips, unless JOBPLANE_TEST_REQUIRE_KUBE=1 makes
// that a failure.
//
// # The node stand-in
//
// There is no kubelet here. Node registers a Node object and, for every pod
// the scheduler binds to it, does what a kubelet does for the parts the
// jobplane executor and the shipped worker's Deployment use: resolves the
// containers' environment (literal values, Secret and ConfigMap keys, the
// pod's own fields, KUBERNETES_SERVICE_HOST and _PORT naming the API
// server) and the $(VAR) references of their arguments, serves projected
// volumes (a service account token from the TokenRequest API bound to the
// pod, the kube-root-ca.crt ConfigMap, the namespace: what in-cluster
// configuration reads), runs init containers and then the containers with
// podman (runc, k8s-file logs, nofile/nproc limits 1024:1024, memory limits,
// emptyDir and hostPath volumes, the host's network standing in for the
// cluster's; a securityContext is not applied: containers run as podman's
// user; only HTTP readiness probes are run, a pod without one is ready
// once started), reports the pod's
// phase and its containers'
// states (ErrImagePull for an image that is not present, OOMKilled, the
// termination message read from the file at terminationMessagePath), stops
// the containers of a pod being deleted within its grace period and then
// removes the pod, and serves /containerLogs over HTTPS so that pods/log
// works through the API server as in a real cluster. Images come from the
// local podman store only (BusyboxImage builds one; SupervisorImage one
// whose entrypoint is a static jobplane binary, as the worker's image is).
package kubetest
