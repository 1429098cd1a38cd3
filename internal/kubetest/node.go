package kubetest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"github.com/jobplane/jobplane/internal/containertest"
)

// podmanLabel marks every container a node stand-in starts, so that a test
// can check none is left.
const podmanLabel = "jobplane-kubetest"

// RequirePodman skips t (or fails it under JOBPLANE_TEST_REQUIRE_KUBE=1)
// when podman or runc is missing.
func RequirePodman(t testing.TB) {
	t.Helper()
	for _, b := range []string{"podman", "runc"} {
		if _, err := exec.LookPath(b); err != nil {
			Unavailable(t, b+" is not installed (Debian: apt-get install podman runc)")
		}
	}
}

func podman(ctx context.Context, args ...string) (string, error) {
	return podmanIn(ctx, "", args...)
}

// podmanIn runs podman in directory dir ("": the test's). It matters for
// "podman run": conmon before 2.1.13 creates an empty file "oom" in its
// working directory, inherited from podman, when a container is OOM-killed
// (containers/conmon#504); the node runs containers from its own temporary
// directory so that the file does not land in the test's package directory.
func podmanIn(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "podman", append([]string{"--runtime", "runc"}, args...)...)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("podman %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// BusyboxImage imports an image holding Debian's busybox-static (no
// registry is reachable here), the container executor tests' image, and
// returns its reference; it is removed when t ends.
func BusyboxImage(t testing.TB, ref string) string {
	t.Helper()
	RequirePodman(t)
	if _, err := exec.LookPath("busybox"); err != nil {
		Unavailable(t, "busybox is not installed (Debian: apt-get install busybox-static)")
	}
	return containertest.BusyboxImage(t, ref)
}

// podNetwork is the pods' network: the host's, which stands in for a
// cluster network in which a pod reaches the jobplane server (on the test's
// loopback) as it would reach a Service.
const podNetwork = "host"

// EmptyDirs lists the host directories of the emptyDir volumes named
// volume of the pods this node ran (they stay until the test ends).
func (n *Node) EmptyDirs(volume string) []string {
	m, _ := filepath.Glob(filepath.Join(n.dir, "*", volume))
	return m
}

// Node is the node stand-in: a Node object and the pods bound to it, run
// with podman.
type Node struct {
	Name   string
	client kubernetes.Interface
	dir    string
	id     string // this node's podman label value
	port   int
	srv    *http.Server
	// api is the API server's host and port, which a kubelet gives every
	// container as KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT (the
	// pods share the host's network, where the API server listens).
	apiHost, apiPort string
	stop             chan struct{}

	mu   sync.Mutex
	pods map[types.UID]*podRun
	byNS map[string]*podRun // namespace/name
	runs sync.WaitGroup
}

// podRun is one pod on the node.
type podRun struct {
	uid       types.UID
	ns, name  string
	deleting  chan struct{}
	grace     int64
	once      sync.Once
	mu        sync.Mutex
	container map[string]string // container name -> podman name, once created
	created   chan struct{}     // closed when the first container is created
	createdOk sync.Once
}

// StartNode registers a node named name with cpu cores and memory bytes of
// capacity and runs the pods bound to it until t ends, then removes every
// container it started.
func (c *Cluster) StartNode(t testing.TB, name string, cpu, memory int64) *Node {
	t.Helper()
	RequirePodman(t)
	n := &Node{Name: name, client: c.Client(t, "admin"), dir: t.TempDir(), id: randomHex()[:12],
		stop: make(chan struct{}), pods: map[types.UID]*podRun{}, byNS: map[string]*podRun{}}
	u, err := url.Parse(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	n.apiHost, n.apiPort = u.Hostname(), u.Port()
	cert, err := selfSigned()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n.port = l.Addr().(*net.TCPAddr).Port
	n.srv = &http.Server{Handler: http.HandlerFunc(n.serveLogs), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = n.srv.Serve(tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{cert}})) }()

	ctx := context.Background()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(cpu, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(memory, resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(50, resource.DecimalSI),
	}
	node, err := n.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: name, Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kubetest: register node: %v", err)
	}
	// The TaintNodesByCondition admission plugin taints a new node not-ready;
	// the node lifecycle controller (not run here) would lift it once the
	// node reports Ready.
	node.Spec.Taints = nil
	if node, err = n.client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	node.Status = corev1.NodeStatus{
		Capacity: capacity, Allocatable: capacity,
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: now, LastTransitionTime: now}},
		Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: name}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(n.port)}},
		NodeInfo:        corev1.NodeSystemInfo{OperatingSystem: "linux", Architecture: "amd64", KubeletVersion: "v1.34.4"},
	}
	if _, err := n.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	factory := informers.NewSharedInformerFactoryWithOptions(n.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName=" + name }))
	inf := factory.Core().V1().Pods().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { n.sync(obj.(*corev1.Pod)) },
		UpdateFunc: func(_, obj any) { n.sync(obj.(*corev1.Pod)) },
	})
	factory.Start(n.stop)
	t.Cleanup(func() {
		close(n.stop)
		factory.Shutdown()
		_ = n.srv.Close()
		n.mu.Lock()
		for _, p := range n.pods {
			p.delete(0)
		}
		n.mu.Unlock()
		n.runs.Wait()
		_, _ = podman(context.Background(), "rm", "-f", "-t", "0", "--filter", "label="+podmanLabel+"="+n.id)
	})
	return n
}

// Containers lists the podman containers this node has not removed.
func (n *Node) Containers(t testing.TB) []string {
	t.Helper()
	out, err := podman(context.Background(), "ps", "-a", "--filter", "label="+podmanLabel+"="+n.id, "--format", "{{.Names}}")
	if err != nil {
		t.Fatal(err)
	}
	if out == "" {
		return nil
	}
	return strings.Fields(out)
}

func (p *podRun) delete(grace int64) {
	p.once.Do(func() {
		p.grace = grace
		close(p.deleting)
	})
}

func (p *podRun) isDeleting() bool {
	select {
	case <-p.deleting:
		return true
	default:
		return false
	}
}

// sync reacts to a pod's new state: a new pod starts running, a pod being
// deleted stops.
func (n *Node) sync(pod *corev1.Pod) {
	select {
	case <-n.stop:
		return
	default:
	}
	n.mu.Lock()
	p, ok := n.pods[pod.UID]
	if !ok {
		p = &podRun{uid: pod.UID, ns: pod.Namespace, name: pod.Name, deleting: make(chan struct{}),
			container: map[string]string{}, created: make(chan struct{})}
		n.pods[pod.UID] = p
		n.byNS[pod.Namespace+"/"+pod.Name] = p
		n.runs.Add(1)
		go n.run(pod.DeepCopy(), p)
	}
	n.mu.Unlock()
	if pod.DeletionTimestamp != nil {
		grace := int64(30)
		if pod.DeletionGracePeriodSeconds != nil {
			grace = *pod.DeletionGracePeriodSeconds
		}
		p.delete(grace)
	}
}

// run takes a pod from start to removal.
func (n *Node) run(pod *corev1.Pod, p *podRun) {
	defer n.runs.Done()
	ctx := context.Background()
	if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed && pod.DeletionTimestamp == nil {
		n.runContainers(ctx, pod, p)
	}
	<-p.deleting
	p.mu.Lock()
	names := make([]string, 0, len(p.container))
	for _, c := range p.container {
		names = append(names, c)
	}
	p.mu.Unlock()
	for _, c := range names {
		_, _ = podman(ctx, "rm", "-f", "-t", "0", c)
	}
	select {
	case <-n.stop:
		return
	default:
	}
	zero := int64(0)
	err := n.client.CoreV1().Pods(p.ns).Delete(ctx, p.name, metav1.DeleteOptions{GracePeriodSeconds: &zero,
		Preconditions: &metav1.Preconditions{UID: &p.uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		fmt.Fprintf(os.Stderr, "kubetest: delete pod %s/%s: %v\n", p.ns, p.name, err)
	}
}

// runContainers runs the init containers one by one, then the containers,
// reporting each state, until they end or the pod is deleted.
func (n *Node) runContainers(ctx context.Context, pod *corev1.Pod, p *podRun) {
	status := corev1.PodStatus{Phase: corev1.PodPending}
	start := metav1.Now()
	status.StartTime = &start
	for _, c := range pod.Spec.InitContainers {
		status.InitContainerStatuses = append(status.InitContainerStatuses, waiting(c, "PodInitializing", ""))
	}
	for _, c := range pod.Spec.Containers {
		status.ContainerStatuses = append(status.ContainerStatuses, waiting(c, "ContainerCreating", ""))
	}
	n.report(ctx, p, &status)

	volumes, ok := n.volumes(ctx, pod, p, &status)
	if !ok {
		return
	}
	failed := false
	for i, c := range pod.Spec.InitContainers {
		name, ok := n.create(ctx, pod, p, c, volumes, &status, &status.InitContainerStatuses[i])
		if !ok {
			return
		}
		if code := n.wait(ctx, p, c, name, &status, &status.InitContainerStatuses[i]); code != 0 {
			failed = true
			break
		}
	}
	if !failed {
		names := make([]string, len(pod.Spec.Containers))
		for i, c := range pod.Spec.Containers {
			name, ok := n.create(ctx, pod, p, c, volumes, &status, &status.ContainerStatuses[i])
			if !ok {
				return
			}
			names[i] = name
		}
		status.Phase = corev1.PodRunning
		ready := func(ok bool) {
			st := corev1.ConditionFalse
			if ok {
				st = corev1.ConditionTrue
			}
			status.Conditions = []corev1.PodCondition{
				{Type: corev1.PodInitialized, Status: corev1.ConditionTrue},
				{Type: corev1.ContainersReady, Status: st},
				{Type: corev1.PodReady, Status: st},
			}
			for i := range status.ContainerStatuses {
				status.ContainerStatuses[i].Ready = ok
			}
			n.report(ctx, p, &status)
		}
		if n.probed(pod) {
			ready(false)
			if n.waitReady(ctx, p, pod, names) {
				ready(true)
			}
		} else {
			ready(true)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		for i, c := range pod.Spec.Containers {
			wg.Go(func() {
				cs := status.ContainerStatuses[i]
				code := n.wait(ctx, p, c, names[i], nil, &cs)
				mu.Lock()
				status.ContainerStatuses[i] = cs
				if code != 0 {
					failed = true
				}
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	status.Phase = corev1.PodSucceeded
	if failed {
		status.Phase = corev1.PodFailed
	}
	for i := range status.Conditions {
		if status.Conditions[i].Type != corev1.PodInitialized {
			status.Conditions[i].Status = corev1.ConditionFalse
		}
	}
	n.report(ctx, p, &status)
}

// probed tells whether a container of pod has an HTTP readiness probe.
func (n *Node) probed(pod *corev1.Pod) bool {
	for _, c := range pod.Spec.Containers {
		if c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil {
			return true
		}
	}
	return false
}

// waitReady runs the HTTP readiness probes of pod's containers (on the
// host's network: at 127.0.0.1 and the container's port) until each has
// answered 2xx or 3xx once; it returns false when the pod is deleted or a
// container ends first. A pod whose probe never passes stays not ready, as
// it would on a kubelet, and a Service sends it nothing.
func (n *Node) waitReady(ctx context.Context, p *podRun, pod *corev1.Pod, names []string) bool {
	hc := &http.Client{Timeout: time.Second}
	passed := map[string]bool{}
	for {
		all := true
		for i, c := range pod.Spec.Containers {
			if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || passed[c.Name] {
				continue
			}
			if running, err := podman(ctx, "inspect", "--format", "{{.State.Running}}", names[i]); err != nil || running != "true" {
				return false
			}
			g := c.ReadinessProbe.HTTPGet
			port := g.Port.IntValue()
			if g.Port.IntVal == 0 {
				for _, cp := range c.Ports {
					if cp.Name == g.Port.StrVal {
						port = int(cp.ContainerPort)
					}
				}
			}
			resp, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, g.Path))
			if err == nil {
				resp.Body.Close()
				passed[c.Name] = resp.StatusCode >= 200 && resp.StatusCode < 400
			}
			all = all && passed[c.Name]
		}
		if all {
			return true
		}
		select {
		case <-p.deleting:
			return false
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func waiting(c corev1.Container, reason, message string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: c.Name, Image: c.Image,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}}
}

// create creates and starts container c once its environment resolves and
// its image is present, reporting why it waits meanwhile; it returns false
// when the pod is deleted first.
func (n *Node) create(ctx context.Context, pod *corev1.Pod, p *podRun, c corev1.Container, volumes map[string]string,
	status *corev1.PodStatus, cs *corev1.ContainerStatus) (string, bool) {
	pulls := 0
	for {
		if p.isDeleting() {
			return "", false
		}
		reason, message := "", ""
		env, err := n.env(ctx, pod, c)
		if err != nil {
			reason, message = "CreateContainerConfigError", err.Error()
		} else if _, err := podman(ctx, "image", "exists", c.Image); err != nil {
			pulls++
			reason, message = "ErrImagePull", fmt.Sprintf("image %s is not present on the node", c.Image)
			if pulls > 1 {
				reason = "ImagePullBackOff"
			}
		}
		if reason == "" {
			name := fmt.Sprintf("kt-%s-%s", p.uid, c.Name)
			args := []string{"run", "-d", "--name", name, "--label", podmanLabel + "=" + n.id,
				"--log-driver", "k8s-file", "--network", podNetwork,
				"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"}
			if m := c.Resources.Limits.Memory(); m != nil && !m.IsZero() {
				args = append(args, "--memory", fmt.Sprint(m.Value()), "--memory-swap", fmt.Sprint(m.Value()))
			}
			if cpu := c.Resources.Limits.Cpu(); cpu != nil && !cpu.IsZero() {
				args = append(args, "--cpus", strconv.FormatFloat(float64(cpu.MilliValue())/1000, 'f', 3, 64))
			}
			for _, m := range c.VolumeMounts {
				if d, ok := volumes[m.Name]; ok {
					v := d + ":" + m.MountPath
					if m.ReadOnly {
						v += ":ro"
					}
					args = append(args, "-v", v)
				}
			}
			if c.TerminationMessagePath != "" {
				// As a kubelet does: a file of the node's, mounted at the
				// path, read when the container has ended.
				f := n.terminationFile(p, c)
				if err := os.WriteFile(f, nil, 0o666); err == nil {
					_ = os.Chmod(f, 0o666)
					args = append(args, "-v", f+":"+c.TerminationMessagePath)
				}
			}
			for _, e := range env {
				args = append(args, "-e", e)
			}
			if c.WorkingDir != "" {
				args = append(args, "-w", c.WorkingDir)
			}
			if len(c.Command) > 0 {
				ep, _ := json.Marshal(expand(c.Command, env))
				args = append(args, "--entrypoint", string(ep))
			}
			args = append(args, c.Image)
			args = append(args, expand(c.Args, env)...)
			id, err := podmanIn(ctx, n.dir, args...)
			if err != nil {
				reason, message = "CreateContainerError", err.Error()
				_, _ = podman(ctx, "rm", "-f", name)
			} else {
				p.mu.Lock()
				p.container[c.Name] = name
				p.mu.Unlock()
				p.createdOk.Do(func() { close(p.created) })
				started := metav1.Now()
				tr := true
				cs.ContainerID = "podman://" + id
				cs.Started = &tr
				cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}
				return name, true
			}
		}
		if cs.State.Waiting == nil || cs.State.Waiting.Reason != reason || cs.State.Waiting.Message != message {
			*cs = waiting(c, reason, message)
			n.report(ctx, p, status)
		}
		select {
		case <-p.deleting:
		case <-time.After(time.Second):
		}
	}
}

// wait waits for container name to end (stopping it within the pod's grace
// period once the pod is deleted), records its termination in cs and, with
// a non-nil status, reports it; it returns the exit code.
func (n *Node) wait(ctx context.Context, p *podRun, c corev1.Container, name string, status *corev1.PodStatus, cs *corev1.ContainerStatus) int {
	done := make(chan string, 1)
	go func() {
		out, _ := podman(ctx, "wait", name)
		done <- out
	}()
	stopped := false
	var out string
	select {
	case out = <-done:
	case <-p.deleting:
		stopped = true
		_, _ = podman(ctx, "stop", "-t", fmt.Sprint(p.grace), name)
		out = <-done
	}
	code, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		code = 137
	}
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	oom, _ := podman(ctx, "inspect", "--format", "{{.State.OOMKilled}}", name)
	limited := c.Resources.Limits.Memory() != nil && !c.Resources.Limits.Memory().IsZero()
	// podman under cgroup v1 hybrid does not always record the OOM kill; a
	// memory-limited container killed by SIGKILL that the node did not send
	// is taken for one, as a kubelet's runtime would report it.
	if oom == "true" || (code == 137 && limited && !stopped) {
		reason = "OOMKilled"
	}
	var message string
	if c.TerminationMessagePath != "" {
		// A kubelet reads at most 4096 bytes of the message.
		if f, err := os.Open(n.terminationFile(p, c)); err == nil {
			b, _ := io.ReadAll(io.LimitReader(f, 4096))
			f.Close()
			message = string(b)
		}
	}
	cs.Ready = false
	cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: int32(code), Reason: reason, Message: message, FinishedAt: metav1.Now(), ContainerID: cs.ContainerID}}
	if status != nil {
		n.report(ctx, p, status)
	}
	return code
}

// terminationFile is the node's file of container c's termination message.
func (n *Node) terminationFile(p *podRun, c corev1.Container) string {
	d := filepath.Join(n.dir, string(p.uid))
	_ = os.MkdirAll(d, 0o777)
	return filepath.Join(d, "termination-"+c.Name)
}

// report writes status to the pod, unless the pod is gone.
func (n *Node) report(ctx context.Context, p *podRun, status *corev1.PodStatus) {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod, err := n.client.CoreV1().Pods(p.ns).Get(ctx, p.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pod.UID != p.uid {
			return nil
		}
		conds := status.Conditions
		// Keep the scheduler's condition.
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled {
				conds = append([]corev1.PodCondition{c}, conds...)
			}
		}
		pod.Status = *status.DeepCopy()
		pod.Status.Conditions = conds
		_, err = n.client.CoreV1().Pods(p.ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		fmt.Fprintf(os.Stderr, "kubetest: pod %s/%s status: %v\n", p.ns, p.name, err)
	}
}

// env resolves a container's environment as a kubelet does: the API
// server's address (KUBERNETES_SERVICE_HOST and _PORT, given to every
// container), then literal values, Secret and ConfigMap keys and the pod's
// own fields.
func (n *Node) env(ctx context.Context, pod *corev1.Pod, c corev1.Container) ([]string, error) {
	ns := pod.Namespace
	env := []string{"KUBERNETES_SERVICE_HOST=" + n.apiHost, "KUBERNETES_SERVICE_PORT=" + n.apiPort}
	secrets := map[string]*corev1.Secret{}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env = append(env, e.Name+"="+expand([]string{e.Value}, env)[0])
			continue
		}
		switch {
		case e.ValueFrom.FieldRef != nil:
			v, err := podField(pod, e.ValueFrom.FieldRef.FieldPath)
			if err != nil {
				return nil, fmt.Errorf("env %s: %v", e.Name, err)
			}
			env = append(env, e.Name+"="+v)
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm, err := n.client.CoreV1().ConfigMaps(ns).Get(ctx, ref.Name, metav1.GetOptions{})
			if err != nil {
				if apierrors.IsNotFound(err) && ref.Optional != nil && *ref.Optional {
					continue
				}
				return nil, fmt.Errorf("configmap %q: %v", ref.Name, err)
			}
			v, ok := cm.Data[ref.Key]
			if !ok {
				if ref.Optional != nil && *ref.Optional {
					continue
				}
				return nil, fmt.Errorf("couldn't find key %s in ConfigMap %s/%s", ref.Key, ns, ref.Name)
			}
			env = append(env, e.Name+"="+v)
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			optional := ref.Optional != nil && *ref.Optional
			s, ok := secrets[ref.Name]
			if !ok {
				var err error
				s, err = n.client.CoreV1().Secrets(ns).Get(ctx, ref.Name, metav1.GetOptions{})
				if err != nil {
					if apierrors.IsNotFound(err) && optional {
						continue
					}
					return nil, fmt.Errorf("secret %q: %v", ref.Name, err)
				}
				secrets[ref.Name] = s
			}
			v, ok := s.Data[ref.Key]
			if !ok {
				if optional {
					continue
				}
				return nil, fmt.Errorf("couldn't find key %s in Secret %s/%s", ref.Key, ns, ref.Name)
			}
			env = append(env, e.Name+"="+string(v))
		default:
			return nil, fmt.Errorf("env %s: only fieldRef, configMapKeyRef and secretKeyRef are supported by this node", e.Name)
		}
	}
	return env, nil
}

// podField is the value of a downward API field of pod.
func podField(pod *corev1.Pod, path string) (string, error) {
	switch path {
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.name":
		return pod.Name, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	}
	return "", fmt.Errorf("field %s is not supported by this node", path)
}

// expand replaces the $(NAME) references of args with the values of env
// ("NAME=value", the last one wins), as a kubelet expands a container's
// command, arguments and environment; $$ is a literal $ and an unknown
// reference stays as written.
func expand(args []string, env []string) []string {
	vars := map[string]string{}
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		vars[k] = v
	}
	out := make([]string, len(args))
	for i, a := range args {
		var b strings.Builder
		for j := 0; j < len(a); j++ {
			if a[j] == '$' && j+1 < len(a) {
				if a[j+1] == '$' {
					b.WriteByte('$')
					j++
					continue
				}
				if a[j+1] == '(' {
					if end := strings.IndexByte(a[j+2:], ')'); end >= 0 {
						name := a[j+2 : j+2+end]
						if v, ok := vars[name]; ok {
							b.WriteString(v)
							j += end + 2
							continue
						}
					}
				}
			}
			b.WriteByte(a[j])
		}
		out[i] = b.String()
	}
	return out
}

// volumes prepares pod's volumes on the node and returns their host
// directories by name: emptyDir volumes, and projected volumes as a kubelet
// serves them, which is how a pod's service account token reaches it (the
// ServiceAccount admission plugin adds a projected volume of a bound
// token from the TokenRequest API, the kube-root-ca.crt ConfigMap and the
// pod's namespace, mounted at /var/run/secrets/kubernetes.io/serviceaccount).
// It retries while a source is missing and returns false when the pod is
// deleted first.
func (n *Node) volumes(ctx context.Context, pod *corev1.Pod, p *podRun, status *corev1.PodStatus) (map[string]string, bool) {
	for {
		volumes := map[string]string{}
		var err error
		for _, v := range pod.Spec.Volumes {
			d := filepath.Join(n.dir, string(p.uid), v.Name)
			switch {
			case v.EmptyDir != nil:
				_ = os.MkdirAll(d, 0o777)
				_ = os.Chmod(d, 0o777)
				volumes[v.Name] = d
			case v.HostPath != nil:
				volumes[v.Name] = v.HostPath.Path
			case v.Projected != nil:
				if err = n.project(ctx, pod, v.Projected, d); err != nil {
					err = fmt.Errorf("volume %s: %v", v.Name, err)
				}
				volumes[v.Name] = d
			}
			if err != nil {
				break
			}
		}
		if err == nil {
			return volumes, true
		}
		for i := range status.ContainerStatuses {
			status.ContainerStatuses[i].State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating", Message: err.Error()}
		}
		n.report(ctx, p, status)
		select {
		case <-p.deleting:
			return nil, false
		case <-time.After(time.Second):
		}
	}
}

// project writes the files of a projected volume into dir.
func (n *Node) project(ctx context.Context, pod *corev1.Pod, v *corev1.ProjectedVolumeSource, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	files := map[string][]byte{}
	for _, src := range v.Sources {
		switch {
		case src.ServiceAccountToken != nil:
			req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
				ExpirationSeconds: src.ServiceAccountToken.ExpirationSeconds,
				BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
			}}
			if src.ServiceAccountToken.Audience != "" {
				req.Spec.Audiences = []string{src.ServiceAccountToken.Audience}
			}
			tok, err := n.client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, pod.Spec.ServiceAccountName, req, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("token of service account %s: %v", pod.Spec.ServiceAccountName, err)
			}
			files[src.ServiceAccountToken.Path] = []byte(tok.Status.Token)
		case src.ConfigMap != nil:
			cm, err := n.client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, src.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("configmap %q: %v", src.ConfigMap.Name, err)
			}
			items := src.ConfigMap.Items
			if len(items) == 0 {
				for k := range cm.Data {
					items = append(items, corev1.KeyToPath{Key: k, Path: k})
				}
			}
			for _, it := range items {
				val, ok := cm.Data[it.Key]
				if !ok {
					return fmt.Errorf("couldn't find key %s in ConfigMap %s/%s", it.Key, pod.Namespace, cm.Name)
				}
				files[it.Path] = []byte(val)
			}
		case src.DownwardAPI != nil:
			for _, it := range src.DownwardAPI.Items {
				if it.FieldRef == nil {
					return fmt.Errorf("downwardAPI %s: only fieldRef is supported by this node", it.Path)
				}
				val, err := podField(pod, it.FieldRef.FieldPath)
				if err != nil {
					return err
				}
				files[it.Path] = []byte(val)
			}
		default:
			return fmt.Errorf("a projected source other than serviceAccountToken, configMap and downwardAPI")
		}
	}
	for name, data := range files {
		f := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(f, data, 0o644); err != nil {
			return err
		}
		_ = os.Chmod(f, 0o644)
	}
	return nil
}

// serveLogs is the kubelet's GET /containerLogs/NS/POD/CONTAINER[?follow=true].
func (n *Node) serveLogs(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/containerLogs/"), "/")
	if !strings.HasPrefix(r.URL.Path, "/containerLogs/") || len(parts) != 3 {
		http.NotFound(w, r)
		return
	}
	n.mu.Lock()
	p := n.byNS[parts[0]+"/"+parts[1]]
	n.mu.Unlock()
	if p == nil {
		http.Error(w, "pod not found", http.StatusNotFound)
		return
	}
	select {
	case <-p.created:
	case <-time.After(10 * time.Second):
		http.Error(w, "container not created", http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	name, ok := p.container[parts[2]]
	p.mu.Unlock()
	if !ok {
		http.Error(w, "container not found", http.StatusNotFound)
		return
	}
	// The container's k8s-file log is read here rather than through
	// "podman logs -f", which under concurrent podman commands can end early
	// and print its own errors into the stream.
	path, err := podman(r.Context(), "inspect", "--format", "{{.HostConfig.LogConfig.Path}}", name)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	f, err := os.Open(path)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer f.Close()
	follow := r.URL.Query().Get("follow") == "true"
	w.Header().Set("Content-Type", "text/plain")
	fw := &flushWriter{w: w}
	br := bufio.NewReader(f)
	var partial []byte
	exited := false
	for {
		b, err := br.ReadBytes('\n')
		partial = append(partial, b...)
		if err == nil {
			writeLogLine(fw, partial)
			partial = nil
			continue
		}
		if !follow || exited {
			return
		}
		// Once the container has ended, read what conmon wrote last, then
		// end the stream.
		if running, err := podman(r.Context(), "inspect", "--format", "{{.State.Running}}", name); err != nil || running != "true" {
			exited = true
			continue
		}
		select {
		case <-r.Context().Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// writeLogLine writes the content of one k8s-file log line ("TIME STREAM
// F|P CONTENT"): with its newline when full (F), without when partial (P).
func writeLogLine(w io.Writer, line []byte) {
	parts := bytes.SplitN(bytes.TrimSuffix(line, []byte("\n")), []byte(" "), 4)
	if len(parts) < 3 {
		return
	}
	var content []byte
	if len(parts) == 4 {
		content = parts[3]
	}
	if string(parts[2]) == "P" {
		_, _ = w.Write(content)
		return
	}
	_, _ = w.Write(append(content, '\n'))
}

// flushWriter sends each write at once, stdout and stderr through one lock.
type flushWriter struct {
	mu sync.Mutex
	w  http.ResponseWriter
}

func (f *flushWriter) Write(b []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, err := f.w.Write(b)
	if fl, ok := f.w.(http.Flusher); ok {
		fl.Flush()
	}
	return n, err
}

var _ io.Writer = (*flushWriter)(nil)
