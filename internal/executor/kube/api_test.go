package kube

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/jobplane/jobplane/internal/executor"
)

// fakeAPI is a loopback server that answers the executor's requests as
// the Kubernetes API server does, for the paths the tests need: the
// handler of a path the test does not set fails the test.
type fakeAPI struct {
	t   *testing.T
	srv *httptest.Server
	// quit ends the handlers still waiting, so that the server can close.
	quit chan struct{}

	mu     sync.Mutex
	routes map[string]http.HandlerFunc // "METHOD path"
}

func newFakeAPI(t *testing.T) *fakeAPI {
	f := &fakeAPI{t: t, quit: make(chan struct{}), routes: map[string]http.HandlerFunc{}}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		h := f.routes[r.Method+" "+r.URL.Path]
		f.mu.Unlock()
		if h == nil {
			t.Errorf("unexpected request %s %s", r.Method, r.URL)
			status(w, http.StatusNotFound, metav1.StatusReasonNotFound, "no route")
			return
		}
		h(w, r)
	}))
	t.Cleanup(f.srv.Close)
	t.Cleanup(func() { close(f.quit) }) // before Close
	return f
}

func (f *fakeAPI) handle(method, path string, h http.HandlerFunc) {
	f.mu.Lock()
	f.routes[method+" "+path] = h
	f.mu.Unlock()
}

func (f *fakeAPI) client() kubernetes.Interface {
	// JSON: client-go would send protobuf, which the real server speaks too.
	c, err := kubernetes.NewForConfig(&rest.Config{Host: f.srv.URL,
		ContentConfig: rest.ContentConfig{ContentType: "application/json", AcceptContentTypes: "application/json"}})
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// hang answers nothing until the request's context ends (the client gave
// up) and reports that on ended.
func (f *fakeAPI) hang(ended chan<- string) http.HandlerFunc {
	return func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			ended <- r.Method + " " + r.URL.Path
		case <-f.quit:
		}
	}
}

func status(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Code: int32(code), Reason: reason, Message: msg})
}

func object(w http.ResponseWriter, code int, obj any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(obj)
}

// createJob answers a Job's creation with the Job and a UID.
func createJob(w http.ResponseWriter, r *http.Request) {
	var kj batchv1.Job
	if err := json.NewDecoder(r.Body).Decode(&kj); err != nil {
		status(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
		return
	}
	kj.APIVersion, kj.Kind = "batch/v1", "Job"
	kj.UID = "uid-1"
	object(w, http.StatusCreated, &kj)
}

func testSpec(attempt string, emit func(string)) *executor.Spec {
	return &executor.Spec{Runner: "runner-1", Tenant: "acme", Run: "run-1", Attempt: attempt, Job: "build",
		AttemptNumber: 1, Command: []string{"true"}, Image: "busybox", Until: time.Now().Add(5 * time.Minute),
		Output: func(_, line string) { emit(line) }}
}

const testNS = "team-a"

// An API server that stops answering after a failed start does not hold
// Start: the clean-up is bounded, and Start reports the failure.
func TestStartCleanupBounded(t *testing.T) {
	f := newFakeAPI(t)
	name := ObjectName("runner-1", "att-hang")
	ended := make(chan string, 8)
	f.handle("POST", "/apis/batch/v1/namespaces/"+testNS+"/jobs", createJob)
	f.handle("POST", "/api/v1/namespaces/"+testNS+"/secrets", func(w http.ResponseWriter, _ *http.Request) {
		status(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, "etcdserver: request timed out")
	})
	f.handle("GET", "/api/v1/namespaces/"+testNS+"/pods", f.hang(ended))
	f.handle("DELETE", "/apis/batch/v1/namespaces/"+testNS+"/jobs/"+name, f.hang(ended))
	f.handle("DELETE", "/api/v1/namespaces/"+testNS+"/secrets/"+name+"-env", f.hang(ended))
	x, err := New(Config{Client: f.client(), Namespace: testNS})
	if err != nil {
		t.Fatal(err)
	}
	x.removeWait = 300 * time.Millisecond

	type result struct {
		j   executor.Job
		err error
	}
	res := make(chan result, 1)
	began := time.Now()
	go func() {
		j, err := x.Start(context.Background(), testSpec("att-hang", func(string) {}))
		res <- result{j, err}
	}()
	var r result
	select {
	case r = <-res:
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not return within 10 s of a failed Secret create while the API server hangs")
	}
	took := time.Since(began)
	var se *executor.StartError
	if r.j != nil || !errors.As(r.err, &se) || se.Reason != executor.ReasonStartFailed ||
		!strings.Contains(r.err.Error(), "create Kubernetes Secret") || !strings.Contains(r.err.Error(), "etcdserver: request timed out") {
		t.Fatalf("Start = %v, %v; want the Secret's start_failed", r.j, r.err)
	}
	if took < x.removeWait {
		t.Errorf("Start returned after %v, before the clean-up's bound: it did not try", took)
	}
	// The clean-up did reach the API server, and gave up.
	select {
	case what := <-ended:
		t.Logf("%s abandoned; Start took %v", what, took)
	case <-time.After(5 * time.Second):
		t.Error("no clean-up request reached the API server")
	}
}

// No output is delivered after Wait has returned, even from a log stream
// that the API server keeps open after the Job is gone.
func TestNoOutputAfterWait(t *testing.T) {
	f := newFakeAPI(t)
	name := ObjectName("runner-1", "att-log")
	pod := name + "-abcde"
	var deleted atomic.Bool
	logOpen := make(chan struct{})  // the log request arrived
	release := make(chan struct{})  // write the late line
	logEnded := make(chan struct{}) // the client closed the log request

	f.handle("POST", "/apis/batch/v1/namespaces/"+testNS+"/jobs", createJob)
	f.handle("POST", "/api/v1/namespaces/"+testNS+"/secrets", func(w http.ResponseWriter, r *http.Request) {
		var s corev1.Secret
		_ = json.NewDecoder(r.Body).Decode(&s)
		s.APIVersion, s.Kind = "v1", "Secret"
		object(w, http.StatusCreated, &s)
	})
	job := &batchv1.Job{TypeMeta: metav1.TypeMeta{Kind: "Job", APIVersion: "batch/v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, UID: "uid-1"}}
	f.handle("PATCH", "/apis/batch/v1/namespaces/"+testNS+"/jobs/"+name, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		object(w, http.StatusOK, job)
	})
	f.handle("GET", "/apis/batch/v1/namespaces/"+testNS+"/jobs/"+name, func(w http.ResponseWriter, _ *http.Request) {
		if deleted.Load() {
			status(w, http.StatusNotFound, metav1.StatusReasonNotFound, `jobs.batch "`+name+`" not found`)
			return
		}
		object(w, http.StatusOK, job)
	})
	f.handle("GET", "/api/v1/namespaces/"+testNS+"/pods", func(w http.ResponseWriter, _ *http.Request) {
		list := corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}}
		if !deleted.Load() {
			list.Items = []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: testNS, CreationTimestamp: metav1.Now()},
				Status: corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{
					Name: containerName, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}}}}}}
		}
		object(w, http.StatusOK, &list)
	})
	// The log request stays open after its first line, past the Job's
	// deletion, as a stream the kubelet did not end would.
	f.handle("GET", "/api/v1/namespaces/"+testNS+"/pods/"+pod+"/log", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("follow") != "true" || r.URL.Query().Get("container") != containerName {
			t.Errorf("log request %s", r.URL)
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "one\n")
		w.(http.Flusher).Flush()
		close(logOpen)
		select {
		case <-release:
			if _, err := io.WriteString(w, "late\n"); err == nil {
				w.(http.Flusher).Flush()
			}
		case <-r.Context().Done():
		case <-f.quit:
			return
		}
		select {
		case <-r.Context().Done():
			close(logEnded)
		case <-f.quit:
		}
	})
	// The Job's deletion answers once the log is open, so that the stream
	// has begun before Wait can return.
	f.handle("DELETE", "/apis/batch/v1/namespaces/"+testNS+"/jobs/"+name, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-logOpen:
		case <-r.Context().Done():
			return
		}
		deleted.Store(true)
		object(w, http.StatusOK, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess})
	})
	f.handle("DELETE", "/api/v1/namespaces/"+testNS+"/secrets/"+name+"-env", func(w http.ResponseWriter, _ *http.Request) {
		object(w, http.StatusOK, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess})
	})

	x, err := New(Config{Client: f.client(), Namespace: testNS, Poll: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	x.logWait = 200 * time.Millisecond
	var waited atomic.Bool
	late := make(chan string, 8)
	emit := func(line string) {
		if waited.Load() {
			late <- line
		}
	}
	j, err := x.Start(context.Background(), testSpec("att-log", emit))
	if err != nil {
		t.Fatal(err)
	}
	exit := j.Wait()
	waited.Store(true)
	if exit.Code != 0 {
		t.Errorf("exit %+v", exit)
	}
	close(release)
	select {
	case line := <-late:
		t.Fatalf("the line %q was delivered after Wait returned", line)
	case <-logEnded:
	case <-time.After(10 * time.Second):
		t.Fatal("the log stream neither ended nor delivered its late line")
	}
	select {
	case line := <-late:
		t.Fatalf("the line %q was delivered after Wait returned", line)
	default:
	}
}

// A relative workdir that climbs out of the workspace is refused before
// anything is created, as the container executor refuses it.
func TestStartRefusesAWorkdirOutsideTheWorkspace(t *testing.T) {
	f := newFakeAPI(t) // any request fails the test
	x, err := New(Config{Client: f.client(), Namespace: testNS})
	if err != nil {
		t.Fatal(err)
	}
	spec := testSpec("att-workdir", func(string) {})
	spec.Workdir = "../../etc"
	j, err := x.Start(context.Background(), spec)
	var se *executor.StartError
	if j != nil || !errors.As(err, &se) || se.Reason != executor.ReasonStartFailed || !strings.Contains(err.Error(), `workdir "../../etc" leaves the workspace`) {
		t.Fatalf("Start = %v, %v; want start_failed for the workdir", j, err)
	}
}

// netFake is a fake API server for one attempt of run.network: none: it
// records the order of the requests that matter and the NetworkPolicy it
// was sent; policy answers the NetworkPolicy's create.
type netFake struct {
	*fakeAPI
	name    string
	deleted atomic.Bool // the Job

	mu     sync.Mutex
	events []string
	policy *networkingv1.NetworkPolicy
}

func (n *netFake) event(e string) {
	n.mu.Lock()
	n.events = append(n.events, e)
	n.mu.Unlock()
}

func (n *netFake) log() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.events)
}

func newNetFake(t *testing.T, attempt string, policy func(w http.ResponseWriter, np *networkingv1.NetworkPolicy)) *netFake {
	n := &netFake{fakeAPI: newFakeAPI(t), name: ObjectName("runner-1", attempt)}
	name := n.name
	ok := func(w http.ResponseWriter) {
		object(w, http.StatusOK, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess})
	}
	n.handle("POST", "/apis/batch/v1/namespaces/"+testNS+"/jobs", func(w http.ResponseWriter, r *http.Request) {
		n.event("create Job")
		createJob(w, r)
	})
	n.handle("POST", "/api/v1/namespaces/"+testNS+"/secrets", func(w http.ResponseWriter, r *http.Request) {
		n.event("create Secret")
		var s corev1.Secret
		_ = json.NewDecoder(r.Body).Decode(&s)
		s.APIVersion, s.Kind = "v1", "Secret"
		object(w, http.StatusCreated, &s)
	})
	n.handle("POST", "/apis/networking.k8s.io/v1/namespaces/"+testNS+"/networkpolicies", func(w http.ResponseWriter, r *http.Request) {
		n.event("create NetworkPolicy")
		var np networkingv1.NetworkPolicy
		if err := json.NewDecoder(r.Body).Decode(&np); err != nil {
			t.Error(err)
		}
		n.mu.Lock()
		n.policy = &np
		n.mu.Unlock()
		policy(w, &np)
	})
	job := &batchv1.Job{TypeMeta: metav1.TypeMeta{Kind: "Job", APIVersion: "batch/v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, UID: "uid-1"}}
	n.handle("PATCH", "/apis/batch/v1/namespaces/"+testNS+"/jobs/"+name, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if !n.deleted.Load() {
			n.event("patch Job")
		}
		object(w, http.StatusOK, job)
	})
	n.handle("GET", "/apis/batch/v1/namespaces/"+testNS+"/jobs/"+name, func(w http.ResponseWriter, _ *http.Request) {
		if n.deleted.Load() {
			status(w, http.StatusNotFound, metav1.StatusReasonNotFound, `jobs.batch "`+name+`" not found`)
			return
		}
		object(w, http.StatusOK, job)
	})
	n.handle("GET", "/api/v1/namespaces/"+testNS+"/pods", func(w http.ResponseWriter, _ *http.Request) {
		list := corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}}
		if !n.deleted.Load() && slices.Contains(n.log(), "patch Job") {
			list.Items = []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: name + "-abcde", Namespace: testNS, CreationTimestamp: metav1.Now()},
				Status: corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{
					Name: containerName, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}}}}}}
		}
		object(w, http.StatusOK, &list)
	})
	n.handle("GET", "/api/v1/namespaces/"+testNS+"/pods/"+name+"-abcde/log", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "done\n")
	})
	n.handle("DELETE", "/apis/batch/v1/namespaces/"+testNS+"/jobs/"+name, func(w http.ResponseWriter, _ *http.Request) {
		n.event("delete Job")
		n.deleted.Store(true)
		ok(w)
	})
	n.handle("DELETE", "/api/v1/namespaces/"+testNS+"/secrets/"+name+"-env", func(w http.ResponseWriter, _ *http.Request) {
		n.event("delete Secret")
		ok(w)
	})
	n.handle("DELETE", "/apis/networking.k8s.io/v1/namespaces/"+testNS+"/networkpolicies/"+name+"-deny", func(w http.ResponseWriter, _ *http.Request) {
		if !n.deleted.Load() {
			t.Error("the NetworkPolicy was deleted before the Job was gone")
		}
		n.event("delete NetworkPolicy")
		ok(w)
	})
	return n
}

// An attempt of run.network: none has a deny-all NetworkPolicy for its pod
// alone, owned by its Job, before the Job is resumed; it is deleted once
// the Job is gone.
func TestNetworkNonePolicy(t *testing.T) {
	// An attempt ID that is no label value: the selector has the hashed
	// value the pod carries.
	const attempt = "att/net none"
	n := newNetFake(t, attempt, func(w http.ResponseWriter, np *networkingv1.NetworkPolicy) {
		np.APIVersion, np.Kind = "networking.k8s.io/v1", "NetworkPolicy"
		object(w, http.StatusCreated, np)
	})
	var jobBody batchv1.Job
	n.handle("POST", "/apis/batch/v1/namespaces/"+testNS+"/jobs", func(w http.ResponseWriter, r *http.Request) {
		n.event("create Job")
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &jobBody)
		r.Body = io.NopCloser(strings.NewReader(string(b)))
		createJob(w, r)
	})
	x, err := New(Config{Client: n.client(), Namespace: testNS, Poll: 50 * time.Millisecond, SupervisorImage: "localhost/jobplane:test"})
	if err != nil {
		t.Fatal(err)
	}
	x.logWait = 200 * time.Millisecond
	spec := testSpec(attempt, func(string) {})
	spec.Network = executor.NetworkNone
	j, err := x.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if exit := j.Wait(); exit.Code != 0 {
		t.Errorf("exit %+v", exit)
	}
	want := []string{"create Job", "create Secret", "create NetworkPolicy", "patch Job", "delete Job", "delete Secret", "delete NetworkPolicy"}
	if got := n.log(); !slices.Equal(got, want) {
		t.Errorf("requests %q, want %q", got, want)
	}
	np := n.policy
	if np == nil {
		t.Fatal("no NetworkPolicy")
	}
	if np.Name != n.name+"-deny" || np.Namespace != testNS {
		t.Errorf("NetworkPolicy %s/%s", np.Namespace, np.Name)
	}
	if len(np.OwnerReferences) != 1 || np.OwnerReferences[0].UID != "uid-1" || np.OwnerReferences[0].Kind != "Job" ||
		np.OwnerReferences[0].APIVersion != "batch/v1" || np.OwnerReferences[0].Name != n.name {
		t.Errorf("owner references %+v", np.OwnerReferences)
	}
	if jobBody.Annotations[AnnotationNetwork] != "none" || jobBody.Spec.Template.Annotations[AnnotationNetwork] != "" {
		t.Errorf("Job annotations %v, pod annotations %v: want %s=none on the Job alone", jobBody.Annotations, jobBody.Spec.Template.Annotations, AnnotationNetwork)
	}
	sel := np.Spec.PodSelector
	podLabels := jobBody.Spec.Template.Labels
	if len(sel.MatchExpressions) != 0 || len(sel.MatchLabels) == 0 || sel.MatchLabels[LabelAttempt] != LabelValue(attempt) ||
		sel.MatchLabels[LabelAttempt] == attempt {
		t.Errorf("pod selector %+v", sel)
	}
	for k, v := range sel.MatchLabels {
		if podLabels[k] != v {
			t.Errorf("the selector's %s=%s is not on the pod (%v)", k, v, podLabels)
		}
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) {
		t.Errorf("policy types %v", np.Spec.PolicyTypes)
	}
	if len(np.Spec.Ingress) != 0 || len(np.Spec.Egress) != 0 {
		t.Errorf("rules: ingress %+v egress %+v", np.Spec.Ingress, np.Spec.Egress)
	}
	// The supervisor cannot reach the server: it does not poll the lease
	// nor bound the job by the first trust window, which renewals would
	// not move; the Job's deadline falls before Until, as without it.
	cmd := strings.Join(jobBody.Spec.Template.Spec.Containers[0].Command, " ")
	if !strings.Contains(cmd, "supervise") || strings.Contains(cmd, "-lease-poll") || !strings.Contains(cmd, "-until-ms=-1") {
		t.Errorf("command %q, want the supervisor without lease polls or a bound", cmd)
	}
	if ads := jobBody.Spec.ActiveDeadlineSeconds; ads == nil || time.Duration(*ads)*time.Second > time.Until(spec.Until)-deadlineLead+time.Second {
		t.Errorf("activeDeadlineSeconds %v, want before Until (%v away)", ads, time.Until(spec.Until))
	}
}

// A NetworkPolicy that cannot be created fails the start: the Job is never
// resumed, and what was created is removed.
func TestNetworkNonePolicyRefused(t *testing.T) {
	n := newNetFake(t, "att-net-403", func(w http.ResponseWriter, _ *networkingv1.NetworkPolicy) {
		status(w, http.StatusForbidden, metav1.StatusReasonForbidden,
			`networkpolicies.networking.k8s.io is forbidden: User "worker" cannot create resource "networkpolicies"`)
	})
	x, err := New(Config{Client: n.client(), Namespace: testNS, Poll: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	spec := testSpec("att-net-403", func(string) {})
	spec.Network = executor.NetworkNone
	j, err := x.Start(context.Background(), spec)
	var se *executor.StartError
	if j != nil || !errors.As(err, &se) || se.Reason != executor.ReasonStartFailed ||
		!strings.Contains(err.Error(), "create NetworkPolicy") || !strings.Contains(err.Error(), "run.network: none") ||
		!strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("Start = %v, %v; want start_failed for the NetworkPolicy", j, err)
	}
	want := []string{"create Job", "create Secret", "create NetworkPolicy", "delete Job", "delete Secret", "delete NetworkPolicy"}
	if got := n.log(); !slices.Equal(got, want) {
		t.Errorf("requests %q, want %q", got, want)
	}
}

// A job of run.network: none with a source or artifacts is refused before
// anything is created: the supervisor would need the network to carry
// them.
func TestNetworkNoneRefusesFiles(t *testing.T) {
	f := newFakeAPI(t) // any request fails the test
	x, err := New(Config{Client: f.client(), Namespace: testNS, SupervisorImage: "localhost/jobplane:test"})
	if err != nil {
		t.Fatal(err)
	}
	spec := testSpec("att-net-src", func(string) {})
	spec.Network = executor.NetworkNone
	spec.Source = &executor.Source{Repo: "code", Commit: strings.Repeat("a", 40)}
	j, err := x.Start(context.Background(), spec)
	var se *executor.StartError
	if j != nil || !errors.As(err, &se) || se.Reason != executor.ReasonStartFailed || !strings.Contains(err.Error(), "run.network: none") {
		t.Fatalf("Start = %v, %v; want start_failed naming run.network: none", j, err)
	}
}
