package kube_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/jobplane/jobplane/internal/executor"
	"github.com/jobplane/jobplane/internal/executor/kube"
	"github.com/jobplane/jobplane/internal/kubetest"
	"github.com/jobplane/jobplane/internal/protocol"
)

// env is one control plane, one node and two namespaces, each served by a
// worker user bound to the shipped Role only.
type env struct {
	cluster *kubetest.Cluster
	node    *kubetest.Node
	admin   kubernetes.Interface
	image   string
	// supervisor is an image whose entrypoint is a static jobplane binary
	// (supervisorErr when it could not be built).
	supervisor    string
	supervisorErr error
	// clients of worker-a (namespace team-a) and worker-b (team-b).
	a, b kubernetes.Interface
}

func setup(t *testing.T) *env {
	t.Helper()
	kubetest.RequirePodman(t)
	c := kubetest.Start(t)
	e := &env{cluster: c, admin: c.Client(t, "admin")}
	e.node = c.StartNode(t, "node-1", 2, 2<<30)
	e.image = kubetest.BusyboxImage(t, fmt.Sprintf("localhost/jobplane-kubetest-busybox:%d", time.Now().UnixNano()))
	e.supervisor, e.supervisorErr = kubetest.SupervisorImage(t, fmt.Sprintf("localhost/jobplane-kubetest-supervisor:%d", time.Now().UnixNano()))
	ctx := kubetest.Ctx(t, time.Minute)
	worker := kubetest.Manifests(t, "worker.yaml")
	for ns, user := range map[string]string{"team-a": kubetest.Users[0], "team-b": kubetest.Users[1]} {
		if _, err := e.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Every shipped object is accepted by the real API server; the Role
		// is bound to the worker's user, which has no other rights.
		for _, obj := range worker {
			var err error
			switch o := obj.(type) {
			case *corev1.ServiceAccount:
				_, err = e.admin.CoreV1().ServiceAccounts(ns).Create(ctx, o, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			case *rbacv1.Role:
				_, err = e.admin.RbacV1().Roles(ns).Create(ctx, o, metav1.CreateOptions{})
			case *rbacv1.RoleBinding:
				o.Subjects = []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
				_, err = e.admin.RbacV1().RoleBindings(ns).Create(ctx, o, metav1.CreateOptions{})
			default:
				err = dryRun(ctx, e.admin, ns, obj)
			}
			if err != nil {
				t.Fatalf("apply deploy/kubernetes/worker.yaml to %s: %v", ns, err)
			}
		}
		// The namespace's default service account, which the Job's pods use
		// (with no token mounted), comes from the controller manager.
		waitFor(t, 60*time.Second, func() bool {
			_, err := e.admin.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
			return err == nil
		}, "default service account in "+ns)
	}
	for _, obj := range kubetest.Manifests(t, "server.yaml") {
		if err := dryRun(ctx, e.admin, "team-a", obj); err != nil {
			t.Fatalf("deploy/kubernetes/server.yaml: %v", err)
		}
	}
	e.a, e.b = c.Client(t, kubetest.Users[0]), c.Client(t, kubetest.Users[1])
	return e
}

// dryRun has the API server validate obj without keeping it.
func dryRun(ctx context.Context, c kubernetes.Interface, ns string, obj runtime.Object) error {
	opts := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	var err error
	switch o := obj.(type) {
	case *corev1.Service:
		_, err = c.CoreV1().Services(ns).Create(ctx, o, opts)
	case *corev1.ServiceAccount:
		_, err = c.CoreV1().ServiceAccounts(ns).Create(ctx, o, opts)
	case *appsv1.Deployment:
		_, err = c.AppsV1().Deployments(ns).Create(ctx, o, opts)
	default:
		err = fmt.Errorf("unexpected object %T", obj)
	}
	return err
}

func waitFor(t *testing.T, limit time.Duration, cond func() bool, what string) {
	t.Helper()
	end := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// output collects a job's lines.
type output struct {
	mu    sync.Mutex
	lines []string
}

func (o *output) add(_, line string) {
	o.mu.Lock()
	o.lines = append(o.lines, line)
	o.mu.Unlock()
}

func (o *output) get() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.lines)
}

// supervised is an executor whose pods run the supervisor.
func (e *env) supervised(t *testing.T) *kube.Executor {
	t.Helper()
	if e.supervisorErr != nil {
		t.Fatalf("supervisor image: %v", e.supervisorErr)
	}
	return e.executor(t, e.a, "team-a", func(c *kube.Config) { c.SupervisorImage = e.supervisor; c.LeasePoll = 200 * time.Millisecond })
}

func (e *env) executor(t *testing.T, client kubernetes.Interface, ns string, tune func(*kube.Config)) *kube.Executor {
	t.Helper()
	cfg := kube.Config{Client: client, Namespace: ns, Image: e.image, Poll: 200 * time.Millisecond}
	if tune != nil {
		tune(&cfg)
	}
	x, err := kube.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func spec(attempt string, out *output, cmd ...string) *executor.Spec {
	return &executor.Spec{
		Runner: "runner-1", Tenant: "acme", Run: "run-" + attempt, Attempt: attempt, Job: "build/Test job",
		AttemptNumber: 1, Command: cmd, Until: time.Now().Add(5 * time.Minute), Output: out.add,
	}
}

// gone waits until the attempt's Job, pods and Secret are gone.
func (e *env) gone(t *testing.T, ns, runner, attempt string) {
	t.Helper()
	ctx := context.Background()
	name := kube.ObjectName(runner, attempt)
	waitFor(t, 60*time.Second, func() bool {
		_, jerr := e.admin.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		_, serr := e.admin.CoreV1().Secrets(ns).Get(ctx, name+"-env", metav1.GetOptions{})
		pods, perr := e.admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + name})
		return apierrors.IsNotFound(jerr) && apierrors.IsNotFound(serr) && perr == nil && len(pods.Items) == 0
	}, "the Job, pods and Secret of "+attempt+" to be gone")
}

// running waits until the attempt's container runs.
func (e *env) running(t *testing.T, ns, runner, attempt string) {
	t.Helper()
	name := kube.ObjectName(runner, attempt)
	waitFor(t, 60*time.Second, func() bool {
		pods, err := e.admin.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "job-name=" + name})
		if err != nil || len(pods.Items) == 0 {
			return false
		}
		for _, cs := range pods.Items[0].Status.ContainerStatuses {
			if cs.State.Running != nil {
				return true
			}
		}
		return false
	}, attempt+" to run")
}

// leaseServer answers GET /v1/run/lease for one attempt as the jobplane
// server would (TestRunLease holds the real one to the same answers): the
// test moves the expiry, as a worker's renewals do, or ends the attempt.
type leaseServer struct {
	srv *httptest.Server

	mu      sync.Mutex
	expires time.Time
	ended   bool
}

func newLeaseServer(t *testing.T, attempt string, expires time.Time) *leaseServer {
	l := &leaseServer{expires: expires}
	l.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		defer l.mu.Unlock()
		problem := func(status int, code string) {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(protocol.Problem{Status: status, Code: code})
		}
		switch {
		case r.URL.Path != "/v1/run/lease" || r.Header.Get("Authorization") != "Bearer run.token."+attempt:
			problem(http.StatusUnauthorized, protocol.CodeUnauthorized)
		case r.URL.Query().Get("attempt") != attempt:
			problem(http.StatusForbidden, protocol.CodeForbidden)
		case l.ended || !time.Now().Before(l.expires):
			problem(http.StatusGone, protocol.CodeAttemptEnded)
		default:
			now := time.Now()
			_ = json.NewEncoder(w).Encode(protocol.RunLease{AttemptID: attempt, State: "leased", ExpiresAt: l.expires,
				ServerTime: now, RemainingMS: l.expires.Sub(now).Milliseconds(), TTLSeconds: 4})
		}
	}))
	t.Cleanup(l.srv.Close)
	return l
}

func (l *leaseServer) set(expires time.Time, ended bool) {
	l.mu.Lock()
	l.expires, l.ended = expires, ended
	l.mu.Unlock()
}

// env is the job's environment as the worker builds it, as far as the
// supervisor reads it.
func (l *leaseServer) env(attempt string) []string {
	return []string{"PATH=/bin", protocol.EnvAPI + "=" + l.srv.URL, protocol.EnvRunToken + "=run.token." + attempt, protocol.EnvAttemptID + "=" + attempt}
}

// uptime is the host's /proc/uptime, which a pod's container reads too
// (it is not namespaced): one clock for the test and the job.
func uptime(t *testing.T) float64 {
	t.Helper()
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		t.Fatal(err)
	}
	var up float64
	if _, err := fmt.Sscan(string(b), &up); err != nil {
		t.Fatal(err)
	}
	return up
}

func TestKubernetesExecutor(t *testing.T) {
	e := setup(t)
	xa := e.executor(t, e.a, "team-a", nil)
	ctx := kubetest.Ctx(t, 10*time.Minute)

	t.Run("success, logs in order, secrets not in the Job", func(t *testing.T) {
		t.Parallel()
		out := &output{}
		// stdout and stderr are separate pipes: lines written to both at
		// the same instant have no order (podman's conmon logs the stdout
		// ones first), so the lines are written a moment apart.
		s := spec("att-ok", out, "sh", "-c", `echo one; sleep 0.2; echo two >&2; sleep 0.2; echo "token=$JOBPLANE_RUN_TOKEN"; echo three; ls /var/run/secrets/kubernetes.io 2>&1 || true`)
		s.Env = []string{"JOBPLANE_RUN_TOKEN=tok-s3cret", "PATH=/bin"}
		s.Resources = executor.Resources{MilliCPU: 250, MemoryBytes: 64 << 20}
		j, err := xa.Start(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		name := kube.ObjectName("runner-1", "att-ok")
		kj, err := e.admin.BatchV1().Jobs("team-a").Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			raw, _ := json.Marshal(kj)
			if strings.Contains(string(raw), "tok-s3cret") {
				t.Error("the run token is in the Job object")
			}
			ps := kj.Spec.Template.Spec
			if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken {
				t.Error("the pod mounts a service account token")
			}
			if kj.Labels[kube.LabelTenant] != "acme" || kj.Annotations[kube.LabelJob] != "build/Test job" || kj.Labels[kube.LabelAttempt] != "att-ok" {
				t.Errorf("labels %v annotations %v", kj.Labels, kj.Annotations)
			}
			lim := ps.Containers[0].Resources.Limits
			if lim.Cpu().MilliValue() != 250 || lim.Memory().Value() != 64<<20 {
				t.Errorf("limits %v", lim)
			}
			sec, err := e.admin.CoreV1().Secrets("team-a").Get(ctx, name+"-env", metav1.GetOptions{})
			if err != nil || len(sec.OwnerReferences) != 1 || sec.OwnerReferences[0].UID != kj.UID {
				t.Errorf("secret %v: %v", sec, err)
			}
		}
		exit := j.Wait()
		if exit.Code != 0 {
			t.Fatalf("exit %+v, output %q\n%s", exit, out.get(), e.cluster.Logs())
		}
		lines := out.get()
		want := []string{"one", "two", "token=tok-s3cret", "three"}
		if len(lines) < 4 || !slices.Equal(lines[:4], want) {
			t.Errorf("lines %q, want %q first", lines, want)
		}
		if len(lines) > 4 && !strings.Contains(strings.Join(lines[4:], " "), "No such file") {
			t.Errorf("a service account directory is mounted: %q", lines[4:])
		}
		e.gone(t, "team-a", "runner-1", "att-ok")
	})

	t.Run("network none has a deny-all NetworkPolicy while it runs", func(t *testing.T) {
		// The node stand-in has no network plugin, so the policy is not
		// enforced here: this shows the policy the API server accepted,
		// that it selects the attempt's pod, and that it goes with it.
		t.Parallel()
		// The supervisor does not ask the server, which the policy denies
		// it: this one would answer that the attempt ended, and the job
		// would not start.
		x := e.supervised(t)
		l := newLeaseServer(t, "att-net/none", time.Now().Add(5*time.Minute))
		l.set(time.Now().Add(5*time.Minute), true)
		out := &output{}
		s := spec("att-net/none", out, "sh", "-c", "echo started; sleep 300")
		s.Env = l.env("att-net/none")
		s.Network = executor.NetworkNone
		j, err := x.Start(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		e.running(t, "team-a", "runner-1", "att-net/none")
		waitFor(t, time.Minute, func() bool { return slices.Contains(out.get(), "started") }, "the job to start")
		name := kube.ObjectName("runner-1", "att-net/none")
		np, err := e.admin.NetworkingV1().NetworkPolicies("team-a").Get(ctx, name+"-deny", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the NetworkPolicy of a running attempt of network none: %v", err)
		}
		kj, err := e.admin.BatchV1().Jobs("team-a").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(np.OwnerReferences) != 1 || np.OwnerReferences[0].UID != kj.UID {
			t.Errorf("owner references %+v, want the Job %s", np.OwnerReferences, kj.UID)
		}
		if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) ||
			len(np.Spec.Ingress) != 0 || len(np.Spec.Egress) != 0 {
			t.Errorf("spec %+v, want both policy types and no rule", np.Spec)
		}
		// The selector picks the attempt's pod and no other pod of the
		// namespace.
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil || sel.Empty() {
			t.Fatalf("selector %v: %v", sel, err)
		}
		pods, err := e.admin.CoreV1().Pods("team-a").List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil || len(pods.Items) != 1 || pods.Items[0].Labels["job-name"] != name {
			t.Errorf("the selector %s selects %v (%v), want the attempt's pod alone", sel, pods, err)
		}
		time.Sleep(time.Second) // five lease polls, were there any
		j.Stop(0)
		if exit := j.Wait(); strings.Contains(strings.Join(out.get(), "\n"), "lease") {
			t.Errorf("the supervisor followed the lease: %+v %q", exit, out.get())
		}
		e.gone(t, "team-a", "runner-1", "att-net/none")
		if _, err := e.admin.NetworkingV1().NetworkPolicies("team-a").Get(ctx, name+"-deny", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the NetworkPolicy after the attempt: %v, want not found", err)
		}
	})

	t.Run("a source or artifacts without the supervisor are refused", func(t *testing.T) {
		t.Parallel()
		for _, s := range []*executor.Spec{spec("att-nosup-src", &output{}, "true"), spec("att-nosup-art", &output{}, "true")} {
			if s.Attempt == "att-nosup-src" {
				s.Source = &executor.Source{Repo: "code", Commit: strings.Repeat("a", 40)}
			} else {
				s.Artifacts = []executor.Artifact{{Name: "out.txt", MaxBytes: 10}}
			}
			_, err := xa.Start(ctx, s)
			var se *executor.StartError
			if !errors.As(err, &se) || se.Reason != executor.ReasonStartFailed || !strings.Contains(err.Error(), "supervisor") {
				t.Errorf("%s: %v, want start_failed naming the supervisor", s.Attempt, err)
			}
			e.gone(t, "team-a", "runner-1", s.Attempt)
		}
	})

	t.Run("failure exit code", func(t *testing.T) {
		t.Parallel()
		out := &output{}
		j, err := xa.Start(ctx, spec("att-fail", out, "sh", "-c", "echo bad; exit 3"))
		if err != nil {
			t.Fatal(err)
		}
		if exit := j.Wait(); exit.Code != 3 || exit.Reason != "" {
			t.Fatalf("exit %+v", exit)
		}
		if got := out.get(); !slices.Equal(got, []string{"bad"}) {
			t.Errorf("lines %q", got)
		}
		e.gone(t, "team-a", "runner-1", "att-fail")
	})

	t.Run("cancel deletes the Job, its pod and Secret", func(t *testing.T) {
		t.Parallel()
		out := &output{}
		j, err := xa.Start(ctx, spec("att-cancel", out, "sh", "-c", "echo started; sleep 300"))
		if err != nil {
			t.Fatal(err)
		}
		e.running(t, "team-a", "runner-1", "att-cancel")
		start := time.Now()
		j.Stop(2 * time.Second)
		exit := j.Wait()
		if exit.Code == 0 {
			t.Fatalf("exit %+v", exit)
		}
		t.Logf("stopped in %v: %+v", time.Since(start), exit)
		e.gone(t, "team-a", "runner-1", "att-cancel")
	})

	t.Run("a job without renewals ends at its lease's end", func(t *testing.T) {
		// As when the worker is SIGKILLed: no Extend ever comes.
		t.Parallel()
		out := &output{}
		s := spec("att-lease", out, "sh", "-c", "echo started; sleep 300")
		until := time.Now().Add(8 * time.Second)
		s.Until = until
		j, err := xa.Start(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		exit := j.Wait()
		ended := time.Now()
		if exit.Code == 0 {
			t.Fatalf("exit %+v", exit)
		}
		// Wait returns once the Job is gone, hence its pod; the bound is
		// Until itself, with a few seconds of slack for a loaded machine.
		if late := ended.Sub(until); late > 5*time.Second {
			t.Errorf("the pod was gone %v after Until", late)
		}
		if !strings.Contains(exit.Summary, "deadline") {
			t.Errorf("summary %q does not name the deadline", exit.Summary)
		}
		t.Logf("gone %v after Until: %+v", ended.Sub(until), exit)
		e.gone(t, "team-a", "runner-1", "att-lease")
	})

	t.Run("the supervisor ends the job before the lease's expiry when the worker is gone", func(t *testing.T) {
		// The worker renews the lease (here the lease server moves it)
		// while the job runs, then dies: no Extend, no Stop, no delete;
		// the Job's own deadline is minutes away. The supervisor in the pod
		// learned each renewal and kills the job before the last expiry.
		t.Parallel()
		x := e.supervised(t)
		const ttl = 4 * time.Second
		l := newLeaseServer(t, "att-sup", time.Now().Add(ttl))
		out := &output{}
		s := spec("att-sup", out, "sh", "-c", `echo started; while true; do cat /proc/uptime >> ts; sleep 0.2; done`)
		s.Env = l.env("att-sup")
		began := time.Now()
		j, err := x.Start(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		ts := func() []float64 {
			var all []float64
			for _, d := range e.node.EmptyDirs("jobplane") {
				b, _ := os.ReadFile(filepath.Join(d, "workspace", "ts"))
				for _, line := range strings.Split(string(b), "\n") {
					var up, idle float64
					if n, _ := fmt.Sscan(line, &up, &idle); n == 2 {
						all = append(all, up)
					}
				}
			}
			return all
		}
		// Renew for longer than one lease while the job runs.
		for len(ts()) == 0 || time.Since(began) < 2*ttl {
			l.set(time.Now().Add(ttl), false)
			if time.Since(began) > 3*time.Minute {
				t.Fatalf("the job did not start: %q\n%s", out.get(), e.cluster.Logs())
			}
			time.Sleep(300 * time.Millisecond)
		}
		// The worker is SIGKILLed now: the lease is last renewed here.
		expiresUp := uptime(t) + ttl.Seconds() // no later than the expiry set next
		l.set(time.Now().Add(ttl), false)
		exit := j.Wait()
		if exit.Code != 137 {
			t.Errorf("exit %+v, want 137 (the supervisor's SIGKILL)", exit)
		}
		stamps := ts()
		if len(stamps) == 0 {
			t.Fatal("no timestamps")
		}
		last := stamps[len(stamps)-1]
		if last >= expiresUp {
			t.Errorf("the job wrote a timestamp %.2fs after the lease's expiry", last-expiresUp)
		}
		if ran := last - stamps[0]; ran < ttl.Seconds() {
			t.Errorf("the job ran %.2fs, less than one lease: the renewals were not followed", ran)
		}
		t.Logf("last timestamp %.2fs before the lease's expiry (margin %v); exit %+v", expiresUp-last, time.Second, exit)
		e.gone(t, "team-a", "runner-1", "att-sup")
	})

	t.Run("the supervisor kills the job of an ended attempt", func(t *testing.T) {
		t.Parallel()
		x := e.supervised(t)
		l := newLeaseServer(t, "att-sup-end", time.Now().Add(5*time.Minute))
		out := &output{}
		s := spec("att-sup-end", out, "sh", "-c", "echo started; sleep 300")
		s.Env = l.env("att-sup-end")
		j, err := x.Start(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		// The job runs (its container runs before the supervisor has
		// asked the server and started it).
		waitFor(t, 2*time.Minute, func() bool { return slices.Contains(out.get(), "started") }, "the job to start")
		l.set(time.Now().Add(5*time.Minute), true)
		exit := j.Wait()
		if exit.Code != 137 {
			t.Errorf("exit %+v", exit)
		}
		if got := strings.Join(out.get(), "\n"); !strings.Contains(got, "no longer holds its lease") {
			t.Errorf("output %q does not say why the job was killed", got)
		}
		e.gone(t, "team-a", "runner-1", "att-sup-end")
	})

	t.Run("a supervisor image that cannot be pulled", func(t *testing.T) {
		t.Parallel()
		x := e.executor(t, e.a, "team-a", func(c *kube.Config) {
			c.SupervisorImage, c.PullWait = "localhost/jobplane-no-such-supervisor:1", 3*time.Second
		})
		j, err := x.Start(ctx, spec("att-sup-pull", &output{}, "true"))
		if err != nil {
			t.Fatal(err)
		}
		if exit := j.Wait(); exit.Reason != executor.ReasonImageMissing || !strings.Contains(exit.Summary, "supervisor") {
			t.Fatalf("exit %+v", exit)
		}
		e.gone(t, "team-a", "runner-1", "att-sup-pull")
	})

	t.Run("extend moves the deadline", func(t *testing.T) {
		t.Parallel()
		out := &output{}
		s := spec("att-extend", out, "sh", "-c", "sleep 12; echo done")
		s.Until = time.Now().Add(8 * time.Second)
		j, err := xa.Start(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		j.Extend(time.Now().Add(2 * time.Minute))
		if exit := j.Wait(); exit.Code != 0 {
			t.Fatalf("exit %+v", exit)
		}
		if got := out.get(); !slices.Equal(got, []string{"done"}) {
			t.Errorf("lines %q", got)
		}
	})

	t.Run("out of memory", func(t *testing.T) {
		t.Parallel()
		out := &output{}
		s := spec("att-oom", out, "dd", "if=/dev/zero", "of=/dev/null", "bs=200M", "count=1")
		s.Resources = executor.Resources{MemoryBytes: 32 << 20}
		j, err := xa.Start(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if exit := j.Wait(); exit.Reason != executor.ReasonOOMKilled {
			t.Fatalf("exit %+v", exit)
		}
	})

	t.Run("unschedulable", func(t *testing.T) {
		t.Parallel()
		x := e.executor(t, e.a, "team-a", func(c *kube.Config) { c.ScheduleWait = 3 * time.Second })
		out := &output{}
		s := spec("att-unsched", out, "true")
		s.Resources = executor.Resources{MilliCPU: 64000}
		j, err := x.Start(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		exit := j.Wait()
		if exit.Reason != executor.ReasonUnschedulable || !strings.Contains(exit.Summary, "cpu") {
			t.Fatalf("exit %+v", exit)
		}
		e.gone(t, "team-a", "runner-1", "att-unsched")
	})

	t.Run("image missing", func(t *testing.T) {
		t.Parallel()
		x := e.executor(t, e.a, "team-a", func(c *kube.Config) { c.PullWait = 3 * time.Second })
		out := &output{}
		s := spec("att-image", out, "true")
		s.Image = "localhost/jobplane-no-such-image:1"
		j, err := x.Start(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		exit := j.Wait()
		if exit.Reason != executor.ReasonImageMissing || !strings.Contains(exit.Summary, "ImagePull") && !strings.Contains(exit.Summary, "ErrImagePull") {
			t.Fatalf("exit %+v", exit)
		}
		e.gone(t, "team-a", "runner-1", "att-image")
	})

	t.Run("a restarted worker sweeps attempts it no longer holds", func(t *testing.T) {
		t.Parallel()
		out := &output{}
		s1 := spec("att-old", out, "sleep", "300")
		s1.Runner = "runner-sweep"
		s1.Network = executor.NetworkNone
		s2 := spec("att-held", out, "sleep", "300")
		s2.Runner = "runner-sweep"
		if _, err := xa.Start(ctx, s1); err != nil {
			t.Fatal(err)
		}
		j2, err := xa.Start(ctx, s2)
		if err != nil {
			t.Fatal(err)
		}
		// A new executor, as in a restarted worker.
		x := e.executor(t, e.a, "team-a", nil)
		if err := x.Sweep(ctx, "runner-sweep", func(a string) bool { return a == "att-held" }); err != nil {
			t.Fatal(err)
		}
		e.gone(t, "team-a", "runner-sweep", "att-old")
		if _, err := e.admin.NetworkingV1().NetworkPolicies("team-a").Get(ctx, kube.ObjectName("runner-sweep", "att-old")+"-deny", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the swept attempt's NetworkPolicy: %v, want not found", err)
		}
		if _, err := e.admin.BatchV1().Jobs("team-a").Get(ctx, kube.ObjectName("runner-sweep", "att-held"), metav1.GetOptions{}); err != nil {
			t.Errorf("held attempt's Job: %v", err)
		}
		j2.Stop(0)
		j2.Wait()
		e.gone(t, "team-a", "runner-sweep", "att-held")
	})

	t.Run("namespaces do not see each other", func(t *testing.T) {
		t.Parallel()
		xb := e.executor(t, e.b, "team-b", nil)
		out := &output{}
		s := spec("att-b", out, "sleep", "300")
		s.Tenant = "other"
		s.Env = []string{"JOBPLANE_RUN_TOKEN=tok-b"}
		jb, err := xb.Start(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { jb.Stop(0); jb.Wait() }()
		name := kube.ObjectName("runner-1", "att-b")
		for _, c := range []struct {
			what string
			err  error
		}{
			{"worker-a reads team-b's Secret", func() error {
				_, err := e.a.CoreV1().Secrets("team-b").Get(ctx, name+"-env", metav1.GetOptions{})
				return err
			}()},
			{"worker-a lists team-b's Secrets", func() error {
				_, err := e.a.CoreV1().Secrets("team-b").List(ctx, metav1.ListOptions{})
				return err
			}()},
			{"worker-b reads its own Secret back", func() error {
				_, err := e.b.CoreV1().Secrets("team-b").Get(ctx, name+"-env", metav1.GetOptions{})
				return err
			}()},
			{"worker-a lists team-b's Jobs", func() error {
				_, err := e.a.BatchV1().Jobs("team-b").List(ctx, metav1.ListOptions{})
				return err
			}()},
			{"worker-a deletes team-b's Job", func() error {
				return e.a.BatchV1().Jobs("team-b").Delete(ctx, name, metav1.DeleteOptions{})
			}()},
			{"worker-a lists nodes", func() error {
				_, err := e.a.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
				return err
			}()},
		} {
			if !apierrors.IsForbidden(c.err) {
				t.Errorf("%s: %v, want Forbidden", c.what, c.err)
			}
		}
		// worker-a's executor cannot start in team-b.
		xab := e.executor(t, e.a, "team-b", nil)
		if _, err := xab.Start(ctx, spec("att-ab", out, "true")); err == nil {
			t.Error("worker-a started a job in team-b")
		}
	})

	t.Cleanup(func() {
		if left := e.node.Containers(t); len(left) > 0 && !t.Failed() {
			// The node removes them when it stops; here every attempt ended.
			t.Logf("containers still present at the end: %v", left)
		}
	})
}
