package kubetest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

// Manifests decodes the objects of a file of deploy/kubernetes.
func Manifests(t testing.TB, name string) []runtime.Object {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(filepath.Dir(strings.TrimSpace(string(out))), "deploy", "kubernetes", name)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var objs []runtime.Object
	for i, doc := range strings.Split(string(data), "\n---\n") {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("deploy/kubernetes/%s, document %d: %v", name, i+1, err)
		}
		objs = append(objs, obj)
	}
	return objs
}

// WorkerNamespace creates namespace ns and applies the shipped worker
// Role of deploy/kubernetes/worker.yaml to it, bound to user (a name of
// Users) instead of the manifest's service account: user then has exactly
// the Role's rights in ns and none elsewhere. It waits for the
// namespace's default service account, which the Jobs' pods use.
func (c *Cluster) WorkerNamespace(t testing.TB, ns, user string) {
	t.Helper()
	admin := c.Client(t, "admin")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, obj := range Manifests(t, "worker.yaml") {
		var err error
		switch o := obj.(type) {
		case *rbacv1.Role:
			_, err = admin.RbacV1().Roles(ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			o.Subjects = []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
			_, err = admin.RbacV1().RoleBindings(ns).Create(ctx, o, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatalf("apply deploy/kubernetes/worker.yaml to %s: %v", ns, err)
		}
	}
	for {
		if _, err := admin.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no default service account in %s: %v\n%s", ns, ctx.Err(), c.Logs())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Leftovers lists the Jobs, pods and Secrets in ns (as "kind/name").
func (c *Cluster) Leftovers(t testing.TB, ns string) []string {
	t.Helper()
	admin := c.Client(t, "admin")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []string
	jobs, err := admin.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs.Items {
		out = append(out, "job/"+j.Name)
	}
	pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		out = append(out, "pod/"+p.Name)
	}
	secrets, err := admin.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		if s.Type != corev1.SecretTypeServiceAccountToken {
			out = append(out, fmt.Sprintf("secret/%s", s.Name))
		}
	}
	return out
}

// Apply creates objs in namespace ns for real, as `kubectl apply` does in
// a namespace that has none of them yet.
func (c *Cluster) Apply(t testing.TB, ns string, objs ...runtime.Object) {
	t.Helper()
	admin := c.Client(t, "admin")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := metav1.CreateOptions{}
	for _, obj := range objs {
		var err error
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			_, err = admin.CoreV1().ServiceAccounts(ns).Create(ctx, o, opts)
		case *corev1.Secret:
			_, err = admin.CoreV1().Secrets(ns).Create(ctx, o, opts)
		case *corev1.ConfigMap:
			_, err = admin.CoreV1().ConfigMaps(ns).Create(ctx, o, opts)
		case *corev1.Service:
			_, err = admin.CoreV1().Services(ns).Create(ctx, o, opts)
		case *rbacv1.Role:
			_, err = admin.RbacV1().Roles(ns).Create(ctx, o, opts)
		case *rbacv1.RoleBinding:
			_, err = admin.RbacV1().RoleBindings(ns).Create(ctx, o, opts)
		case *appsv1.Deployment:
			_, err = admin.AppsV1().Deployments(ns).Create(ctx, o, opts)
		default:
			err = fmt.Errorf("unexpected object %T", obj)
		}
		if err != nil {
			t.Fatalf("kubetest: apply to %s: %v", ns, err)
		}
	}
}

// SetArg replaces the argument --name=VALUE (or appends it) in args, as an
// operator edits a shipped manifest's container arguments.
func SetArg(args []string, name, value string) []string {
	for i, a := range args {
		if strings.HasPrefix(a, name+"=") {
			args[i] = name + "=" + value
			return args
		}
	}
	return append(args, name+"="+value)
}
