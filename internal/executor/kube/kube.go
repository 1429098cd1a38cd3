package kube

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/executor"
	"github.com/jobplane/jobplane/internal/executor/supervise"
	"github.com/jobplane/jobplane/internal/protocol"
)

// Labels and annotations on every Job, pod and Secret the executor creates.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "jobplane"
	LabelRunner    = "jobplane.dev/runner"
	LabelTenant    = "jobplane.dev/tenant"
	LabelRun       = "jobplane.dev/run"
	LabelJob       = "jobplane.dev/job"
	LabelAttempt   = "jobplane.dev/attempt"
	// AnnotationAttemptNumber carries the attempt's number; the other
	// annotations carry the full IDs and names the labels may abbreviate.
	AnnotationAttemptNumber = "jobplane.dev/attempt-number"
	// AnnotationNetwork on a Job says "none" when the attempt has a
	// NetworkPolicy to remove with it.
	AnnotationNetwork = "jobplane.dev/network"
)

// containerName is the job's container in the pod; supervisorContainer is
// the init container that installs the supervisor.
const (
	containerName       = "job"
	supervisorContainer = "supervisor"
)

// terminationGrace is the pod's grace period in seconds when the Job
// controller or the garbage collector deletes it (a Stop passes its own).
const terminationGrace = 2

// deadlineLead is how long before Spec.Until the Job's deadline falls: the
// pod's grace period and a second for the Job controller to act, so that
// the pod is gone by Until.
const deadlineLead = (terminationGrace + 1) * time.Second

// Config configures the executor.
type Config struct {
	// Client talks to the API server with the worker's own credentials.
	Client kubernetes.Interface
	// Namespace is where the Jobs and Secrets are created.
	Namespace string
	// Image runs jobs whose definition names no run.image; empty refuses them.
	Image string
	// ScheduleWait is how long a pod may stay unschedulable before the
	// attempt ends with ReasonUnschedulable (default 2 minutes).
	ScheduleWait time.Duration
	// PullWait is how long a pod's image may fail to pull before the
	// attempt ends with ReasonImageMissing (default 1 minute).
	PullWait time.Duration
	// Poll is how often a job's pod is checked (default 500 ms).
	Poll time.Duration
	// Clock is the worker's clock (default clock.Real).
	Clock clock.Clock
	// SupervisorImage is an image whose entrypoint is the jobplane binary
	// (the worker's own image): an init container copies the binary into
	// the pod, and it supervises the job there, bounding it by the lease it
	// learns from GET /v1/run/lease. Empty: the job runs without it, bounded
	// by the Job's activeDeadlineSeconds alone.
	SupervisorImage string
	// LeasePoll is the supervisor's pause between lease polls (0: a quarter
	// of the lease's TTL, between 500 ms and 10 s).
	LeasePoll time.Duration
}

// supervisorDir is where the job's container finds the supervisor.
const supervisorDir = "/.jobplane-supervisor"

// terminationLog is the container's termination message file: the
// supervisor writes its report there (the stored artifacts' IDs), and the
// kubelet hands it to the worker in the container's terminated state.
const terminationLog = "/dev/termination-log"

// Executor runs attempts as Kubernetes Jobs.
type Executor struct {
	cfg Config
	// removeWait bounds the deletion of an attempt's objects by Stop and
	// after a failed start: an API server that stops answering must not
	// hold the worker's slot.
	removeWait time.Duration
	// logWait is how long a job that ended waits for the end of its log
	// before the Job is deleted.
	logWait time.Duration
}

var _ executor.Executor = (*Executor)(nil)

// New returns a Kubernetes executor.
func New(cfg Config) (*Executor, error) {
	if cfg.Client == nil {
		return nil, errors.New("kubernetes executor: no client")
	}
	if cfg.Namespace == "" {
		return nil, errors.New("kubernetes executor: no namespace")
	}
	if cfg.ScheduleWait <= 0 {
		cfg.ScheduleWait = 2 * time.Minute
	}
	if cfg.PullWait <= 0 {
		cfg.PullWait = time.Minute
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 500 * time.Millisecond
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	return &Executor{cfg: cfg, removeWait: 30 * time.Second, logWait: 10 * time.Second}, nil
}

// Name implements executor.Executor.
func (*Executor) Name() string { return "kubernetes" }

// Capabilities implements executor.Executor: jobs run in their image, in
// pods that cannot reach the worker's pod's files or processes; the pod's
// supervisor fetches the source and uploads the artifacts.
func (*Executor) Capabilities() executor.Capabilities {
	return executor.Capabilities{Images: true, Isolated: true, OwnFiles: true}
}

// Layout implements executor.Executor: the job's files live in an emptyDir
// mounted at /jobplane.
func (*Executor) Layout(executor.Layout) executor.Layout {
	return executor.Layout{
		Root: "/jobplane", Workspace: "/jobplane/workspace", Artifacts: "/jobplane/artifacts",
		ParamsFile: "/jobplane/params.json", Home: "/jobplane/home", Tmp: "/jobplane/tmp",
	}
}

// ObjectName is the name of the Job (and, with "-env", the Secret; with
// "-deny", the NetworkPolicy) of runner's attempt: a hash, since IDs need
// not be DNS labels.
func ObjectName(runner, attempt string) string {
	h := sha256.Sum256([]byte(runner + "\x00" + attempt))
	return "jobplane-" + hex.EncodeToString(h[:])[:20]
}

var labelValueRE = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)

// LabelValue is v if it is a valid label value, else "h" and a hash of it
// (the full value is in the annotation of the same key).
func LabelValue(v string) string {
	if v == "" || (len(v) <= 63 && labelValueRE.MatchString(v)) {
		return v
	}
	h := sha256.Sum256([]byte(v))
	return "h" + hex.EncodeToString(h[:])[:40]
}

func (e *Executor) meta(spec *executor.Spec) (labels, annotations map[string]string) {
	labels = map[string]string{LabelManagedBy: managedBy}
	annotations = map[string]string{AnnotationAttemptNumber: strconv.Itoa(spec.AttemptNumber)}
	for k, v := range map[string]string{LabelRunner: spec.Runner, LabelTenant: spec.Tenant, LabelRun: spec.Run,
		LabelJob: spec.Job, LabelAttempt: spec.Attempt} {
		labels[k] = LabelValue(v)
		annotations[k] = v
	}
	return labels, annotations
}

// backstopLag is how long after Spec.Until the Job's deadline falls when
// the supervisor runs in the pod: the supervisor ends the job at the lease
// bound it learns from the server, and the Job's deadline only backs it
// up. Placed before Until, as without a supervisor, it would race every
// renewal of a short lease (TTL/3 after a renewal, the next one must have
// moved a deadline that falls TTL - margin - 3 s after it).
const backstopLag = 5 * time.Second

// deadline is the activeDeadlineSeconds of a Job started at from whose
// attempt's trust window ends at until; polls says the pod's supervisor
// follows the lease through the server.
func deadline(from, until time.Time, polls bool) int64 {
	if polls {
		return max(int64(math.Ceil(until.Sub(from).Seconds()+backstopLag.Seconds())), 1)
	}
	return deadlineSeconds(from, until)
}

// deadlineSeconds is the activeDeadlineSeconds of a Job started at from
// whose pod must be gone by until: deadlineLead earlier, rounded down, at
// least 1.
func deadlineSeconds(from, until time.Time) int64 {
	s := int64(math.Floor(until.Sub(from).Seconds() - deadlineLead.Seconds()))
	return max(s, 1)
}

// Start implements executor.Executor.
func (e *Executor) Start(ctx context.Context, spec *executor.Spec) (executor.Job, error) {
	if len(spec.Command) == 0 || spec.Command[0] == "" {
		return nil, &executor.StartError{Reason: executor.ReasonStartFailed, Err: executor.ErrNoCommand}
	}
	// The pod's workspace is an emptyDir: the supervisor fills it and
	// uploads what the job leaves, and the job must not run without them.
	if (spec.Source != nil || len(spec.Artifacts) > 0) && e.cfg.SupervisorImage == "" {
		return nil, &executor.StartError{Reason: executor.ReasonStartFailed,
			Err: errors.New("the job has a source or artifacts, which the kubernetes executor carries only with its supervisor (--kube-supervisor-image)")}
	}
	// run.network: none denies the pod the jobplane server too: the
	// supervisor can neither carry files nor learn the lease there, so the
	// Job's deadline, moved by Extend, is the lease's bound.
	deny := spec.Network == executor.NetworkNone
	if (spec.Source != nil || len(spec.Artifacts) > 0) && deny {
		return nil, &executor.StartError{Reason: executor.ReasonStartFailed,
			Err: errors.New("the job has a source or artifacts, which the kubernetes executor's supervisor fetches and uploads through the jobplane server, and run.network: none denies its pod all network")}
	}
	polls := e.cfg.SupervisorImage != "" && !deny
	image := spec.Image
	if image == "" {
		image = e.cfg.Image
	}
	if image == "" {
		return nil, &executor.StartError{Reason: executor.ReasonStartFailed,
			Err: errors.New("the job names no run.image and the worker has no --kube-image")}
	}
	layout := e.Layout(spec.Layout)
	workdir, err := executor.Workdir(layout.Workspace, spec.Workdir)
	if err != nil {
		return nil, &executor.StartError{Reason: executor.ReasonStartFailed, Err: err}
	}
	name := ObjectName(spec.Runner, spec.Attempt)
	labels, annotations := e.meta(spec)
	secretName := name + "-env"

	var env []corev1.EnvVar
	data := map[string][]byte{}
	for i, kv := range spec.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		key := "e" + strconv.Itoa(i)
		data[key] = []byte(v)
		env = append(env, corev1.EnvVar{Name: k, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: secretName}, Key: key}}})
	}
	// The parameters file the worker wrote on its side goes to the pod in
	// the Secret; the supervisor writes it where JOBPLANE_PARAMS_FILE says.
	var paramsFile string
	if e.cfg.SupervisorImage != "" && spec.Layout.ParamsFile != "" {
		if b, err := os.ReadFile(spec.Layout.ParamsFile); err == nil {
			data["params"] = b
			env = append(env, corev1.EnvVar{Name: supervise.EnvParams, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: secretName}, Key: "params"}}})
			paramsFile = layout.ParamsFile
		}
	}
	resources := corev1.ResourceRequirements{}
	if spec.Resources.MilliCPU > 0 || spec.Resources.MemoryBytes > 0 {
		rl := corev1.ResourceList{}
		if spec.Resources.MilliCPU > 0 {
			rl[corev1.ResourceCPU] = *resource.NewMilliQuantity(spec.Resources.MilliCPU, resource.DecimalSI)
		}
		if spec.Resources.MemoryBytes > 0 {
			rl[corev1.ResourceMemory] = *resource.NewQuantity(spec.Resources.MemoryBytes, resource.BinarySI)
		}
		resources.Requests, resources.Limits = rl, rl.DeepCopy()
	}
	no, yes := false, true
	zero, one := int32(0), int32(1)
	grace := int64(terminationGrace)
	now := e.cfg.Clock.Now()
	ads := deadline(now, spec.Until, polls)
	command := spec.Command
	volumes := []corev1.Volume{{Name: "jobplane", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	mounts := []corev1.VolumeMount{{Name: "jobplane", MountPath: layout.Root}}
	var initContainers []corev1.Container
	if e.cfg.SupervisorImage != "" {
		// The supervisor's first bound is the worker's; it asks the server
		// before the job starts and follows the lease from then on. Without
		// the network, it only writes the parameters file: a fixed bound
		// would not follow the renewals, the Job's deadline does.
		untilMS := max(spec.Until.Sub(now).Milliseconds(), 0)
		o := supervise.Options{
			ControlFD: -1, StatusFD: -1, UntilMS: untilMS, LeasePoll: true, LeasePollMS: e.cfg.LeasePoll.Milliseconds(),
			Dir: workdir, Workspace: layout.Workspace, ArtifactsDir: layout.Artifacts, Report: terminationLog,
			ParamsFile: paramsFile,
		}
		if !polls {
			o.UntilMS, o.LeasePoll, o.LeasePollMS = -1, false, 0
		}
		if spec.Source != nil {
			o.SourceCommit = spec.Source.Commit
		}
		if len(spec.Artifacts) > 0 {
			decl := make([]protocol.ArtifactSpec, 0, len(spec.Artifacts))
			for _, a := range spec.Artifacts {
				decl = append(decl, protocol.ArtifactSpec{Name: a.Name, Role: a.Role, MaxBytes: a.MaxBytes})
			}
			b, _ := json.Marshal(decl)
			o.Artifacts = string(b)
		}
		command = append([]string{supervisorDir + "/jobplane", "supervise"}, supervise.Args(o, spec.Command)...)
		volumes = append(volumes, corev1.Volume{Name: "jobplane-supervisor", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "jobplane-supervisor", MountPath: supervisorDir, ReadOnly: true})
		initContainers = []corev1.Container{{
			Name: supervisorContainer, Image: e.cfg.SupervisorImage, ImagePullPolicy: corev1.PullIfNotPresent,
			Args:         []string{"supervise", "-install", supervisorDir + "/jobplane"},
			VolumeMounts: []corev1.VolumeMount{{Name: "jobplane-supervisor", MountPath: supervisorDir}},
		}}
	}
	jobAnnotations := annotations
	if deny {
		jobAnnotations = maps.Clone(annotations)
		jobAnnotations[AnnotationNetwork] = executor.NetworkNone
	}
	kj := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.cfg.Namespace, Labels: labels, Annotations: jobAnnotations},
		Spec: batchv1.JobSpec{
			Suspend: &yes, BackoffLimit: &zero, Parallelism: &one, Completions: &one,
			ActiveDeadlineSeconds: &ads,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
				Spec: corev1.PodSpec{
					RestartPolicy:                 corev1.RestartPolicyNever,
					AutomountServiceAccountToken:  &no,
					EnableServiceLinks:            &no,
					TerminationGracePeriodSeconds: &grace,
					Volumes:                       volumes,
					InitContainers:                initContainers,
					Containers: []corev1.Container{{
						Name: containerName, Image: image, Command: command, Env: env, WorkingDir: workdir,
						Resources:                resources,
						TerminationMessagePath:   terminationLog,
						TerminationMessagePolicy: corev1.TerminationMessageReadFile,
						VolumeMounts:             mounts,
						ImagePullPolicy:          corev1.PullIfNotPresent,
					}},
				},
			},
		},
	}
	jobs := e.cfg.Client.BatchV1().Jobs(e.cfg.Namespace)
	created, err := jobs.Create(ctx, kj, metav1.CreateOptions{})
	if err != nil {
		return nil, &executor.StartError{Reason: executor.ReasonStartFailed, Err: fmt.Errorf("create Kubernetes Job %s/%s: %w", e.cfg.Namespace, name, err)}
	}
	denied := false // the NetworkPolicy's create was sent
	fail := func(err error) (executor.Job, error) {
		// Not ctx: the Job is removed also when the start was cancelled.
		ctx, cancel := context.WithTimeout(context.Background(), e.removeWait)
		defer cancel()
		e.remove(ctx, name, 0)
		if denied {
			e.removeDeny(ctx, name)
		}
		return nil, &executor.StartError{Reason: executor.ReasonStartFailed, Err: err}
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secretName, Namespace: e.cfg.Namespace, Labels: labels, Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: name, UID: created.UID}}},
		Type: corev1.SecretTypeOpaque, Data: data,
	}
	if _, err := e.cfg.Client.CoreV1().Secrets(e.cfg.Namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		return fail(fmt.Errorf("create Kubernetes Secret %s/%s: %w", e.cfg.Namespace, secretName, err))
	}
	if deny {
		// Before the resume: the pod never runs without it. A create that
		// failed may still have been applied, so the clean-up deletes it.
		denied = true
		if _, err := e.cfg.Client.NetworkingV1().NetworkPolicies(e.cfg.Namespace).Create(ctx, denyPolicy(name, e.cfg.Namespace, created.UID, labels, annotations), metav1.CreateOptions{}); err != nil {
			return fail(fmt.Errorf("create NetworkPolicy %s/%s for run.network: none: %w", e.cfg.Namespace, name+denySuffix, err))
		}
	}
	// The deadline counts from the Job's start, which the controller sets
	// after the resume; measured from the resume, it falls no earlier than
	// intended.
	resumed := e.cfg.Clock.Now()
	until := spec.LatestUntil() // renewals made while the Job was created
	ads = deadline(resumed, until, polls)
	patch := fmt.Sprintf(`{"spec":{"suspend":false,"activeDeadlineSeconds":%d}}`, ads)
	if _, err := jobs.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fail(fmt.Errorf("resume Kubernetes Job %s/%s: %w", e.cfg.Namespace, name, err))
	}
	j := &job{e: e, name: name, uid: created.UID, spec: spec, deny: deny, polls: polls, resumed: resumed, until: until,
		stopCh: make(chan struct{}), extendCh: make(chan struct{}, 1), done: make(chan struct{})}
	go j.extender()
	go j.monitor()
	return j, nil
}

// denySuffix ends the name of an attempt's NetworkPolicy.
const denySuffix = "-deny"

// denyPolicy is the NetworkPolicy of run.network: none for the Job name
// (whose UID is uid): it selects the attempt's pod alone, by the attempt
// label the pod carries among labels, and with both policy types and no
// rule it allows no traffic in or out. The Job owns it, so the garbage
// collector removes it with the Job if the executor does not.
func denyPolicy(name, ns string, uid types.UID, labels, annotations map[string]string) *networkingv1.NetworkPolicy {
	sel := map[string]string{}
	for _, k := range []string{LabelManagedBy, LabelRunner, LabelAttempt} {
		sel[k] = labels[k]
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name + denySuffix, Namespace: ns, Labels: labels, Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: name, UID: uid}}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: sel},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
}

// removeDeny deletes the NetworkPolicy of the Job name once the Job is
// gone, hence (foreground deletion) its pods: a pod still in its grace
// period keeps the policy until then. If ctx ends first, the policy is
// left to the garbage collector, which removes it with the Job.
func (e *Executor) removeDeny(ctx context.Context, name string) {
	if !e.waitGone(ctx, name) {
		return
	}
	_ = e.cfg.Client.NetworkingV1().NetworkPolicies(e.cfg.Namespace).Delete(ctx, name+denySuffix, metav1.DeleteOptions{})
}

// waitGone waits until the Job name is gone, or ctx ends (false).
func (e *Executor) waitGone(ctx context.Context, name string) bool {
	for ctx.Err() == nil {
		_, err := e.cfg.Client.BatchV1().Jobs(e.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true
		}
		select {
		case <-ctx.Done():
		case <-time.After(e.cfg.Poll):
		}
	}
	return false
}

// remove deletes the Job with foreground propagation (its pods go first)
// and its Secret; grace >= 0 is also passed to the pods.
func (e *Executor) remove(ctx context.Context, name string, grace int64) {
	if grace >= 0 {
		pods, err := e.cfg.Client.CoreV1().Pods(e.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + name})
		if err == nil {
			for _, p := range pods.Items {
				_ = e.cfg.Client.CoreV1().Pods(e.cfg.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
			}
		}
	}
	fg := metav1.DeletePropagationForeground
	_ = e.cfg.Client.BatchV1().Jobs(e.cfg.Namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &fg})
	_ = e.cfg.Client.CoreV1().Secrets(e.cfg.Namespace).Delete(ctx, name+"-env", metav1.DeleteOptions{})
}

// Sweep implements executor.Executor: it deletes runner's Jobs (and their
// pods, Secrets and NetworkPolicies) of attempts keep does not report as
// held.
func (e *Executor) Sweep(ctx context.Context, runner string, keep func(string) bool) error {
	sel := fmt.Sprintf("%s=%s,%s=%s", LabelManagedBy, managedBy, LabelRunner, LabelValue(runner))
	jobs, err := e.cfg.Client.BatchV1().Jobs(e.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return fmt.Errorf("list Kubernetes Jobs in %s: %w", e.cfg.Namespace, err)
	}
	var removed []string
	for _, j := range jobs.Items {
		if j.Annotations[LabelRunner] != runner || keep(j.Annotations[LabelAttempt]) {
			continue
		}
		e.remove(ctx, j.Name, 0)
		if j.Annotations[AnnotationNetwork] == executor.NetworkNone {
			removed = append(removed, j.Name)
		}
	}
	if len(removed) == 0 {
		return nil
	}
	// Their NetworkPolicies go once the Jobs are; those still there at
	// the bound are left to the garbage collector.
	ctx, cancel := context.WithTimeout(ctx, e.removeWait)
	defer cancel()
	for _, name := range removed {
		e.removeDeny(ctx, name)
	}
	return nil
}

// job is one attempt's Kubernetes Job.
type job struct {
	e       *Executor
	name    string
	uid     types.UID
	spec    *executor.Spec
	deny    bool // the attempt has a deny-all NetworkPolicy
	polls   bool // the pod's supervisor follows the lease
	resumed time.Time

	mu       sync.Mutex
	until    time.Time
	grace    int64 // -1 until Stop
	stopped  bool
	stopCh   chan struct{}
	extendCh chan struct{}
	done     chan struct{}
	exit     executor.Exit

	// logs is closed when the log stream's goroutine has ended (nil while
	// none was started); only monitor's goroutine uses it.
	logs chan struct{}
}

// Extend implements executor.Job: it moves the Job's activeDeadlineSeconds.
func (j *job) Extend(until time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !until.After(j.until) {
		return
	}
	j.until = until
	select {
	case j.extendCh <- struct{}{}:
	default:
	}
}

// extender patches the latest deadline, one request at a time.
func (j *job) extender() {
	for {
		select {
		case <-j.done:
			return
		case <-j.extendCh:
		}
		j.mu.Lock()
		ads := deadline(j.resumed, j.until, j.polls)
		j.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		patch := fmt.Sprintf(`{"spec":{"activeDeadlineSeconds":%d}}`, ads)
		_, _ = j.e.cfg.Client.BatchV1().Jobs(j.e.cfg.Namespace).Patch(ctx, j.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		cancel()
	}
}

// Stop implements executor.Job: it deletes the pod with grace and the Job
// with foreground propagation. A later call with a shorter grace deletes
// the pod again with it.
func (j *job) Stop(grace time.Duration) {
	g := max(int64(math.Ceil(grace.Seconds())), 0)
	j.mu.Lock()
	if j.stopped && g >= j.grace {
		j.mu.Unlock()
		return
	}
	first := !j.stopped
	j.stopped, j.grace = true, g
	j.mu.Unlock()
	if first {
		close(j.stopCh)
	}
	ctx, cancel := context.WithTimeout(context.Background(), j.e.removeWait)
	defer cancel()
	j.e.remove(ctx, j.name, g)
}

// Wait implements executor.Job.
func (j *job) Wait() executor.Exit {
	<-j.done
	return j.exit
}

// monitor follows the pod until the job ends, streams its log, then removes
// the Job and its Secret, waits for the Job to be gone, and then removes
// its NetworkPolicy. Before Wait returns, it ends the log stream and waits
// for it, as the other executors deliver no output after Wait: the stream
// ends with the pod, but a log that has not ended by then (a kubelet or API
// server that stopped answering, a stream still being retried) would report
// lines afterwards.
func (j *job) monitor() {
	defer close(j.done)
	logCtx, stopLogs := context.WithCancel(context.Background())
	defer func() {
		stopLogs()
		if j.logs != nil {
			<-j.logs
		}
	}()
	j.exit = j.follow(logCtx)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	j.e.remove(ctx, j.name, -1)
	// Foreground deletion: the Job is gone once its pods are.
	if j.deny {
		j.e.removeDeny(ctx, j.name)
	} else {
		j.e.waitGone(ctx, j.name)
	}
}

// pullReasons are container waiting reasons of an image that cannot be had.
var pullReasons = map[string]bool{"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true, "ErrImageNeverPull": true}

// follow watches the Job and its pod until the job has ended, and returns
// how. The log stream it starts runs under logCtx.
func (j *job) follow(logCtx context.Context) executor.Exit {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		unschedAt  time.Time
		pullAt     time.Time
		initPullAt time.Time
		configAt   time.Time
		deadlineAt time.Time
	)
	waitLogs := func() {
		if j.logs == nil {
			return
		}
		select {
		case <-j.logs:
		case <-time.After(j.e.logWait):
		}
	}
	c := j.e.cfg.Client
	ns := j.e.cfg.Namespace
	stopCh := j.stopCh
	for {
		now := j.e.cfg.Clock.Now()
		kj, err := c.BatchV1().Jobs(ns).Get(ctx, j.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && kj.UID != j.uid) {
			waitLogs()
			return executor.Exit{Code: -1, Summary: "the Kubernetes Job was deleted"}
		}
		var pod *corev1.Pod
		if pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + j.name}); err == nil {
			for i := range pods.Items {
				if pod == nil || pods.Items[i].CreationTimestamp.After(pod.CreationTimestamp.Time) {
					pod = &pods.Items[i]
				}
			}
		}
		if pod != nil {
			var cs *corev1.ContainerStatus
			for i := range pod.Status.ContainerStatuses {
				if pod.Status.ContainerStatuses[i].Name == containerName {
					cs = &pod.Status.ContainerStatuses[i]
				}
			}
			if cs != nil && j.logs == nil && (cs.State.Running != nil || cs.State.Terminated != nil) {
				j.logs = make(chan struct{})
				go j.stream(logCtx, pod.Name, j.logs)
			}
			if cs != nil && cs.State.Terminated != nil {
				waitLogs()
				exit := terminated(cs.State.Terminated)
				if j.e.cfg.SupervisorImage != "" {
					exit.Artifacts = supervise.ReadReport(cs.State.Terminated.Message).Artifacts
				}
				if err == nil && deadlineExceeded(kj) {
					exit.Summary += "; the Kubernetes Job's active deadline (the end of the lease) passed"
				}
				return exit
			}
			if cs != nil && cs.State.Waiting != nil {
				w := cs.State.Waiting
				switch {
				case pullReasons[w.Reason]:
					if pullAt.IsZero() {
						pullAt = now
					}
					if now.Sub(pullAt) >= j.e.cfg.PullWait {
						return executor.Exit{Code: -1, Reason: executor.ReasonImageMissing,
							Summary: fmt.Sprintf("image %s cannot be pulled (%s: %s)", j.imageOf(pod), w.Reason, w.Message)}
					}
				case w.Reason == "CreateContainerConfigError" || w.Reason == "CreateContainerError" || w.Reason == "RunContainerError":
					if configAt.IsZero() {
						configAt = now
					}
					if now.Sub(configAt) >= j.e.cfg.PullWait {
						return executor.Exit{Code: -1, Reason: executor.ReasonStartFailed,
							Summary: fmt.Sprintf("the pod's container cannot start (%s: %s)", w.Reason, w.Message)}
					}
				default:
					pullAt, configAt = time.Time{}, time.Time{}
				}
			}
			if exit, ok := j.initFailed(pod, now, &initPullAt); ok {
				return exit
			}
			unsched := false
			for _, cond := range pod.Status.Conditions {
				if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
					unsched = true
					if unschedAt.IsZero() {
						unschedAt = now
					}
					if now.Sub(unschedAt) >= j.e.cfg.ScheduleWait {
						return executor.Exit{Code: -1, Reason: executor.ReasonUnschedulable,
							Summary: "the pod cannot be scheduled: " + cond.Message}
					}
				}
			}
			if !unsched {
				unschedAt = time.Time{}
			}
			if cs == nil && (pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded) {
				return executor.Exit{Code: -1, Summary: fmt.Sprintf("the pod ended without its container (%s: %s)", pod.Status.Reason, pod.Status.Message)}
			}
		}
		if err == nil && deadlineExceeded(kj) {
			// The pod's container may still report how it ended.
			if deadlineAt.IsZero() {
				deadlineAt = now
			}
			if pod == nil || now.Sub(deadlineAt) >= time.Duration(terminationGrace+5)*time.Second {
				waitLogs()
				return executor.Exit{Code: -1, Summary: "the Kubernetes Job's active deadline (the end of the lease) passed"}
			}
		}
		j.mu.Lock()
		stopped := j.stopped
		j.mu.Unlock()
		if stopped && pod == nil {
			waitLogs()
			return executor.Exit{Code: -1, Summary: "stopped before the pod ran"}
		}
		select {
		case <-time.After(j.e.cfg.Poll):
		case <-stopCh:
			// Check at once, then at the usual pace.
			stopCh = nil
		}
	}
}

// deadlineExceeded says whether the Job controller ended the Job at its
// activeDeadlineSeconds.
func deadlineExceeded(kj *batchv1.Job) bool {
	for _, cond := range kj.Status.Conditions {
		// FailureTarget comes first, while the controller stops the pods.
		if (cond.Type == batchv1.JobFailed || cond.Type == batchv1.JobFailureTarget) &&
			cond.Status == corev1.ConditionTrue && cond.Reason == batchv1.JobReasonDeadlineExceeded {
			return true
		}
	}
	return false
}

// initFailed says whether the supervisor's init container failed, or its
// image could not be pulled for PullWait (pullAt tracks since when).
func (j *job) initFailed(pod *corev1.Pod, now time.Time, pullAt *time.Time) (executor.Exit, bool) {
	for _, cs := range pod.Status.InitContainerStatuses {
		if cs.Name != supervisorContainer {
			continue
		}
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			return executor.Exit{Code: -1, Reason: executor.ReasonStartFailed,
				Summary: fmt.Sprintf("the supervisor could not be installed from %s (exit status %d: %s)", cs.Image, t.ExitCode, t.Message)}, true
		}
		if w := cs.State.Waiting; w != nil && pullReasons[w.Reason] {
			if pullAt.IsZero() {
				*pullAt = now
			}
			if now.Sub(*pullAt) >= j.e.cfg.PullWait {
				return executor.Exit{Code: -1, Reason: executor.ReasonImageMissing,
					Summary: fmt.Sprintf("the supervisor's image %s cannot be pulled (%s: %s)", cs.Image, w.Reason, w.Message)}, true
			}
		}
	}
	return executor.Exit{}, false
}

func (j *job) imageOf(pod *corev1.Pod) string {
	for _, c := range pod.Spec.Containers {
		if c.Name == containerName {
			return c.Image
		}
	}
	return ""
}

// terminated turns a container's termination into an Exit.
func terminated(t *corev1.ContainerStateTerminated) executor.Exit {
	code := int(t.ExitCode)
	switch {
	case t.Reason == "OOMKilled":
		return executor.Exit{Code: code, Reason: executor.ReasonOOMKilled, Summary: "out of memory (OOMKilled)"}
	case t.Signal != 0:
		return executor.Exit{Code: 128 + int(t.Signal), Summary: fmt.Sprintf("killed by signal %d", t.Signal)}
	default:
		return executor.Exit{Code: code, Summary: fmt.Sprintf("exit status %d", code)}
	}
}

// stream follows the container's log through pods/log and reports each
// line until the log or ctx ends; it retries while the log cannot be
// opened yet.
func (j *job) stream(ctx context.Context, pod string, done chan struct{}) {
	defer close(done)
	for range 5 {
		req := j.e.cfg.Client.CoreV1().Pods(j.e.cfg.Namespace).GetLogs(pod, &corev1.PodLogOptions{Container: containerName, Follow: true})
		rc, err := req.Stream(ctx)
		if err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		executor.ReadPieces(rc, j.spec.Emitter("stdout"))
		rc.Close()
		return
	}
}
