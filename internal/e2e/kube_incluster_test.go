package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/executor/kube"
	"github.com/jobplane/jobplane/internal/kubetest"
)

// TestKubernetesWorkerInCluster applies deploy/kubernetes/server.yaml and
// deploy/kubernetes/worker.yaml for real, with the shipped image and the
// edits an operator makes (image, URLs, jobs' image; for the server, what
// the host's network needs), the secrets in the Secrets the manifests read:
//
//   - the server's pod runs on PostgreSQL and is ready by its probe;
//   - the controller manager makes the worker's pod from its Deployment and
//     the node stand-in runs it with the service account's bound token, the
//     cluster's CA and the namespace projected at
//     /var/run/secrets/kubernetes.io/serviceaccount: the worker finds the
//     API server through in-cluster configuration only (no --kubeconfig);
//   - a run requested on the server's pod runs as a Kubernetes Job of that
//     worker and succeeds, and nothing of it is left;
//   - the service account has the Role's rights and no other, and once its
//     RoleBinding is deleted the worker's next Job is refused.
func TestKubernetesWorkerInCluster(t *testing.T) {
	c := kubetest.Start(t)
	node := c.StartNode(t, "node-1", 2, 2<<30)
	image := kubetest.BusyboxImage(t, "localhost/jobplane-e2e-kube-busybox:"+randHex(4))
	// The shipped image (deploy/build-image.sh, deploy/Containerfile: the
	// static binary on an empty base, user 65532) runs the server and the
	// worker, and is the jobs' supervisor image, as the manifests say.
	workerImage := shippedImage(t, "localhost/jobplane-e2e-kube:"+randHex(4))
	admin := c.Client(t, "admin")
	const ns = "jobs"
	ctx := kubetest.Ctx(t, 10*time.Minute)
	_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)

	e := newEnv(t, func(string) []job {
		return []job{{name: "hello", script: `echo "hello from the pod, namespace file: $(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace 2>&1)"; sleep 2`}}
	})
	s := serverPod(t, c, workerImage, backends[1].dsn(t), e.defs)

	objs := []runtime.Object{&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "jobplane-worker"},
		StringData: map[string]string{"registration-token": s.registrationToken()}}}
	var deployment *appsv1.Deployment
	for _, obj := range kubetest.Manifests(t, "worker.yaml") {
		if d, ok := obj.(*appsv1.Deployment); ok {
			deployment = d
			w := &d.Spec.Template.Spec.Containers[0]
			w.Image = workerImage
			w.Args = kubetest.SetArg(w.Args, "--server", s.url)
			w.Args = kubetest.SetArg(w.Args, "--kube-image", image)
			w.Args = kubetest.SetArg(w.Args, "--kube-supervisor-image", workerImage)
			require.NotContains(t, strings.Join(w.Args, " "), "--kubeconfig")
		}
		objs = append(objs, obj)
	}
	require.NotNil(t, deployment, "deploy/kubernetes/worker.yaml has a Deployment")
	c.Apply(t, ns, objs...)

	workerPod := func() *corev1.Pod {
		pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=worker"})
		require.NoError(t, err)
		if len(pods.Items) == 0 {
			return nil
		}
		// A pod whose worker exited is replaced by the ReplicaSet: the
		// oldest one tells why.
		return &pods.Items[0]
	}
	podLog := func() string {
		p := workerPod()
		if p == nil {
			return "(no worker pod)"
		}
		b, err := admin.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: "worker"}).DoRaw(ctx)
		if err != nil {
			return err.Error()
		}
		return string(b)
	}
	var runnerID string
	eventually(t, 3*time.Minute, "the worker's pod registers (runner/runner.json in its state volume)", func() (bool, string) {
		p := workerPod()
		if p == nil {
			return false, "no worker pod yet\n" + c.Logs()
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			require.FailNowf(t, "worker pod ended", "%s: %+v\n%s", p.Status.Phase, p.Status.ContainerStatuses, podLog())
		}
		for _, d := range node.EmptyDirs("state") {
			if id, err := readRunnerID(filepath.Join(d, "runner")); err == nil {
				runnerID = id
				return true, ""
			}
		}
		return false, string(p.Status.Phase) + " " + podLog()
	})
	p := workerPod()
	require.Equal(t, "jobplane-worker", p.Spec.ServiceAccountName)
	mounted := false
	for _, m := range p.Spec.Containers[0].VolumeMounts {
		mounted = mounted || m.MountPath == "/var/run/secrets/kubernetes.io/serviceaccount"
	}
	require.True(t, mounted, "the service account's token volume is mounted: %+v", p.Spec.Containers[0].VolumeMounts)

	// The service account has the Role's rights in its namespace and no
	// others (the API server's own answer, as for any request of the pod).
	sa := "system:serviceaccount:" + ns + ":jobplane-worker"
	for _, c := range []struct {
		ns, verb, group, resource string
		allowed                   bool
	}{
		{ns, "create", "batch", "jobs", true},
		{ns, "get", "", "pods/log", true},
		{ns, "create", "", "secrets", true},
		{ns, "get", "", "secrets", false},
		{ns, "list", "", "secrets", false},
		{ns, "create", "networking.k8s.io", "networkpolicies", true},
		{ns, "delete", "networking.k8s.io", "networkpolicies", true},
		{ns, "get", "networking.k8s.io", "networkpolicies", false},
		{ns, "list", "networking.k8s.io", "networkpolicies", false},
		{ns, "patch", "networking.k8s.io", "networkpolicies", false},
		{"default", "create", "networking.k8s.io", "networkpolicies", false},
		{ns, "create", "apps", "deployments", false},
		{"default", "create", "batch", "jobs", false},
		{"default", "delete", "", "secrets", false},
	} {
		require.Equal(t, c.allowed, can(t, ctx, admin, sa, c.ns, c.verb, c.group, c.resource), "%s %s %s/%s in %s", sa, c.verb, c.group, c.resource, c.ns)
	}

	// Watch for the attempt's Job, which only the in-cluster worker creates.
	var mu sync.Mutex
	seen := map[string]bool{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			jobs, err := admin.BatchV1().Jobs(ns).List(context.Background(), metav1.ListOptions{})
			if err != nil {
				continue
			}
			mu.Lock()
			for _, j := range jobs.Items {
				seen[j.Name] = true
			}
			mu.Unlock()
		}
	})
	defer func() { close(stop); wg.Wait() }()

	r := s.waitState(s.createRun("hello").ID, 3*time.Minute, "succeeded", "failed", "cancelled", "timed_out")
	var lines []string
	for _, l := range s.allLogs(r.ID) {
		lines = append(lines, l.Stream+": "+l.Text)
	}
	log := strings.Join(lines, "\n")
	require.Equal(t, "succeeded", r.State, "%s\n%s\nworker pod:\n%s\n%s", runSummary(r), log, podLog(), c.Logs())
	require.Equal(t, runnerID, r.Attempts[0].Runner, "the in-cluster worker ran the attempt")
	serverLog := s.podLog()
	require.Contains(t, serverLog, `"msg":"api: request"`, "the server's pod served the requests")
	require.Contains(t, serverLog, `"db":"postgres"`, "on the PostgreSQL DSN of its Secret")
	// The job's own pod has no service account token (the executor asks
	// for none), unlike the worker's.
	require.Contains(t, log, "stdout: hello from the pod, namespace file: cat: can't open '/var/run/secrets/kubernetes.io/serviceaccount/namespace'")
	mu.Lock()
	require.True(t, seen[kube.ObjectName(runnerID, r.Attempts[0].ID)], "the attempt ran as the Job %s; seen: %v",
		kube.ObjectName(runnerID, r.Attempts[0].ID), seen)
	mu.Unlock()
	eventually(t, time.Minute, "the attempt's Job and Secret are gone", func() (bool, string) {
		var left []string
		for _, l := range c.Leftovers(t, ns) {
			if strings.HasPrefix(l, "job/") || (strings.HasPrefix(l, "secret/") && l != "secret/jobplane-worker") {
				left = append(left, l)
			}
		}
		return len(left) == 0, strings.Join(left, " ")
	})

	// Without the RoleBinding, the same worker's next attempt is refused by
	// the API server: the worker acts as its service account, with the
	// Role's rights and nothing else.
	require.NoError(t, admin.RbacV1().RoleBindings(ns).Delete(ctx, "jobplane-worker", metav1.DeleteOptions{}))
	eventually(t, time.Minute, "the service account has lost the Role", func() (bool, string) {
		return !can(t, ctx, admin, sa, ns, "create", "batch", "jobs"), ""
	})
	r = s.waitState(s.createRun("hello").ID, 3*time.Minute, "succeeded", "failed", "cancelled", "timed_out")
	require.Equal(t, "failed", r.State, runSummary(r))
	require.Equal(t, runnerID, r.Attempts[0].Runner)
	require.Contains(t, string(r.Attempts[0].Result), `User \"system:serviceaccount:jobs:jobplane-worker\" cannot create resource \"jobs\"`, runSummary(r))
}

// can asks the API server whether user may verb group/resource in ns.
func can(t *testing.T, ctx context.Context, admin kubernetes.Interface, user, ns, verb, group, resource string) bool {
	t.Helper()
	res, sub, _ := strings.Cut(resource, "/")
	saNS := strings.Split(user, ":")[2] // system:serviceaccount:NS:NAME
	r, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               user,
		Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + saNS, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group, Resource: res, Subresource: sub},
	}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return r.Status.Allowed
}

// podServer is a jobplane server run by the node stand-in from the
// Deployment of deploy/kubernetes/server.yaml.
type podServer struct {
	*server
	podLog func() string
}

// serverPod applies deploy/kubernetes/server.yaml to the namespace
// jobplane, as its comment says an operator does: the Secret
// jobplane-server with the DSN, the server key and the bootstrap admin's
// token, and the Deployment edited for this node (its image, one replica:
// the pods share the host's network, so each needs its own port; the
// definitions repository from a hostPath volume) and waits for the
// server's /readyz.
func serverPod(t *testing.T, c *kubetest.Cluster, image, dsn, defs string) *podServer {
	t.Helper()
	admin := c.Client(t, "admin")
	const ns = "jobplane"
	ctx := kubetest.Ctx(t, 10*time.Minute)
	_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	// The image's user is not the test's: the definitions it reads through
	// the hostPath volume must be readable by others.
	require.NoError(t, os.Chmod(filepath.Dir(filepath.Dir(defs)), 0o755))
	require.NoError(t, filepath.Walk(filepath.Dir(defs), func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chmod(p, fi.Mode().Perm()|0o055)
	}))
	addr := freeAddr(t)
	s := &server{t: t, addr: addr, url: "http://" + addr, db: dsn, defs: defs, adminToken: "jpt_e2e_kube_admin_" + randHex(8)}
	s.admin = &apiclient.Client{BaseURL: s.url, Token: s.adminToken, HTTP: checkedHTTP(t, 30*time.Second)}
	objs := []runtime.Object{&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "jobplane-server"},
		StringData: map[string]string{"dsn": dsn, "secret-key": randHex(32), "admin-token": s.adminToken}}}
	for _, obj := range kubetest.Manifests(t, "server.yaml") {
		if d, ok := obj.(*appsv1.Deployment); ok {
			one := int32(1)
			d.Spec.Replicas = &one
			spec := &d.Spec.Template.Spec
			spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "definitions",
				VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: defs}}})
			w := &spec.Containers[0]
			w.Image = image
			w.VolumeMounts = append(w.VolumeMounts, corev1.VolumeMount{Name: "definitions", MountPath: "/defs", ReadOnly: true})
			w.Args = kubetest.SetArg(w.Args, "--listen", addr)
			_, port, _ := net.SplitHostPort(addr)
			n, _ := strconv.Atoi(port)
			w.Ports[0].ContainerPort = int32(n) // the readiness probe's port "http"
			w.Args = kubetest.SetArg(w.Args, "--public-url", s.url)
			w.Args = kubetest.SetArg(w.Args, "--definitions", "/defs")
			w.Args = kubetest.SetArg(w.Args, "--log-level", "debug")
		}
		objs = append(objs, obj)
	}
	c.Apply(t, ns, objs...)
	ps := &podServer{server: s, podLog: func() string {
		pods, err := admin.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=server"})
		if err != nil || len(pods.Items) != 1 {
			return fmt.Sprintf("(server pods: %v)", err)
		}
		b, err := admin.CoreV1().Pods(ns).GetLogs(pods.Items[0].Name, &corev1.PodLogOptions{Container: "server"}).DoRaw(context.Background())
		if err != nil {
			return err.Error()
		}
		return string(b)
	}}
	hc := checkedHTTP(t, time.Second)
	eventually(t, 3*time.Minute, "the server's pod answers /readyz", func() (bool, string) {
		resp, err := hc.Get(s.url + "/readyz")
		if err != nil {
			return false, err.Error() + "\n" + ps.podLog()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	// The node ran the Deployment's readiness probe (GET /healthz on the
	// port named http) and reports the pod ready.
	eventually(t, time.Minute, "the server's pod is ready", func() (bool, string) {
		pods, err := admin.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=server"})
		if err != nil || len(pods.Items) != 1 {
			return false, fmt.Sprint(err)
		}
		for _, c := range pods.Items[0].Status.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status == corev1.ConditionTrue, string(c.Status)
			}
		}
		return false, "no Ready condition"
	})
	return ps
}

// shippedImage builds the shipped image with deploy/build-image.sh as ref;
// it is removed when t ends.
func shippedImage(t *testing.T, ref string) string {
	t.Helper()
	bin := podman(t)
	root, err := moduleRoot()
	require.NoError(t, err)
	build := exec.Command(filepath.Join(root, "deploy", "build-image.sh"), ref)
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, "deploy/build-image.sh: %s", out)
	t.Cleanup(func() { _ = exec.Command(bin, "rmi", "--force", ref).Run() })
	return ref
}
