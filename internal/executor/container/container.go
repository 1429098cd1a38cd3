package container

import (
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	ctypes "github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/executor"
	"github.com/jobplane/jobplane/internal/executor/supervise"
)

// Labels on every container the executor creates.
const (
	LabelManagedBy = "jobplane.dev/managed-by"
	managedBy      = "jobplane"
	LabelRunner    = "jobplane.dev/runner"
	LabelTenant    = "jobplane.dev/tenant"
	LabelRun       = "jobplane.dev/run"
	LabelJob       = "jobplane.dev/job"
	LabelAttempt   = "jobplane.dev/attempt"
	LabelNumber    = "jobplane.dev/attempt-number"
)

// Pull policies.
const (
	// PullMissing pulls an image that is not present (the default).
	PullMissing = "missing"
	// PullNever runs only images already present.
	PullNever = "never"
	// PullAlways pulls before every attempt; a failed pull ends it.
	PullAlways = "always"
)

// Paths in the container.
const (
	mountRoot     = "/jobplane"
	supervisorBin = "/jobplane/bin/jobplane"
)

const (
	// controlWrite bounds one control line's write: a stuck engine must
	// not block the worker (the supervisor's bound ends the job anyway).
	controlWrite = time.Second
	// engineCall bounds the engine calls made outside a caller's context.
	engineCall = 30 * time.Second
	// stopBackstop is added to a stop's grace before the engine's own
	// stop, which catches a supervisor that does not end the job itself.
	stopBackstop = 2 * time.Second
)

// Config configures the executor.
type Config struct {
	// Client talks to the engine's Docker API.
	Client *client.Client
	// Image runs jobs whose definition names no run.image; empty refuses
	// them.
	Image string
	// Supervisor is a statically linked jobplane binary, mounted read-only
	// into each container as its entrypoint (`jobplane supervise`).
	// Default: the running binary.
	Supervisor string
	// Pull is the pull policy: PullMissing (default), PullNever or
	// PullAlways.
	Pull string
	// Ulimits are set on every container (e.g. nofile 1024:1024, which
	// Podman needs where its defaults exceed the host's hard limits).
	Ulimits []Ulimit
	// Clock is the worker's clock (default clock.Real).
	Clock clock.Clock
}

// Ulimit is one resource limit of a container.
type Ulimit struct {
	Name       string
	Soft, Hard int64
}

// ParseUlimit parses NAME=SOFT:HARD (or NAME=N for both).
func ParseUlimit(s string) (Ulimit, error) {
	name, v, ok := strings.Cut(s, "=")
	soft, hard, two := strings.Cut(v, ":")
	if !two {
		hard = soft
	}
	a, err1 := strconv.ParseInt(soft, 10, 64)
	b, err2 := strconv.ParseInt(hard, 10, 64)
	if !ok || name == "" || err1 != nil || err2 != nil || a < 0 || b < a {
		return Ulimit{}, fmt.Errorf("ulimit %q is not NAME=SOFT:HARD with 0 <= SOFT <= HARD", s)
	}
	return Ulimit{Name: name, Soft: a, Hard: b}, nil
}

// Executor runs each attempt in a container of its own.
type Executor struct {
	cfg Config
}

var _ executor.Executor = (*Executor)(nil)

// New returns a container executor. The supervisor binary must be
// statically linked: it runs in images that may hold no C library.
func New(cfg Config) (*Executor, error) {
	if cfg.Client == nil {
		return nil, errors.New("container executor: no engine client")
	}
	switch cfg.Pull {
	case "":
		cfg.Pull = PullMissing
	case PullMissing, PullNever, PullAlways:
	default:
		return nil, fmt.Errorf("container executor: pull policy %q is not %s, %s or %s", cfg.Pull, PullMissing, PullNever, PullAlways)
	}
	if cfg.Supervisor == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("container executor: find the running binary: %w", err)
		}
		cfg.Supervisor = exe
	}
	if err := checkStatic(cfg.Supervisor); err != nil {
		return nil, fmt.Errorf("container executor: %w", err)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	return &Executor{cfg: cfg}, nil
}

// checkStatic refuses a binary that needs a dynamic loader.
func checkStatic(p string) error {
	f, err := elf.Open(p)
	if err != nil {
		return fmt.Errorf("supervisor %s: %w", p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("supervisor %s is dynamically linked and cannot run in an arbitrary image: build jobplane with CGO_ENABLED=0", p)
		}
	}
	return nil
}

// Name implements executor.Executor.
func (*Executor) Name() string { return "container" }

// Capabilities implements executor.Executor: jobs run in their image, with
// their limits, and see nothing of the worker's files or processes.
func (*Executor) Capabilities() executor.Capabilities {
	return executor.Capabilities{Images: true, Isolated: true}
}

// Layout implements executor.Executor: the attempt's files are mounted
// under /jobplane.
func (*Executor) Layout(executor.Layout) executor.Layout {
	return executor.Layout{
		Root: mountRoot, Workspace: mountRoot + "/workspace", Artifacts: mountRoot + "/artifacts",
		ParamsFile: mountRoot + "/params.json", Home: mountRoot + "/home", Tmp: mountRoot + "/tmp",
	}
}

// ContainerName is the name of runner's attempt's container: a hash, since
// IDs need not be valid container names.
func ContainerName(runner, attempt string) string {
	h := sha256.Sum256([]byte(runner + "\x00" + attempt))
	return "jobplane-" + hex.EncodeToString(h[:])[:20]
}

func labels(spec *executor.Spec) map[string]string {
	return map[string]string{
		LabelManagedBy: managedBy, LabelRunner: spec.Runner, LabelTenant: spec.Tenant, LabelRun: spec.Run,
		LabelJob: spec.Job, LabelAttempt: spec.Attempt, LabelNumber: strconv.Itoa(spec.AttemptNumber),
	}
}

// startErr is a StartError with a reason.
func startErr(reason string, format string, a ...any) error {
	return &executor.StartError{Reason: reason, Err: fmt.Errorf(format, a...)}
}

// Start implements executor.Executor.
func (e *Executor) Start(ctx context.Context, spec *executor.Spec) (executor.Job, error) {
	if len(spec.Command) == 0 || spec.Command[0] == "" {
		return nil, &executor.StartError{Reason: executor.ReasonStartFailed, Err: executor.ErrNoCommand}
	}
	image := spec.Image
	if image == "" {
		image = e.cfg.Image
	}
	if image == "" {
		return nil, startErr(executor.ReasonStartFailed, "the job names no run.image and the worker has no --container-image")
	}
	in := e.Layout(spec.Layout)
	workdir, err := executor.Workdir(in.Workspace, spec.Workdir)
	if err != nil {
		return nil, &executor.StartError{Reason: executor.ReasonStartFailed, Err: err}
	}
	imageEnv, err := e.ensureImage(ctx, image)
	if err != nil {
		return nil, err
	}
	mounts, err := prepareHost(spec.Layout, e.cfg.Supervisor)
	if err != nil {
		return nil, startErr(executor.ReasonStartFailed, "prepare the attempt directory: %w", err)
	}
	hc := &ctypes.HostConfig{
		Mounts: mounts,
		// The engine keeps no copy of the job's output: the worker reads it
		// through the attachment, masks it and ships it.
		LogConfig: ctypes.LogConfig{Type: "none"},
	}
	if spec.Network == executor.NetworkNone {
		hc.NetworkMode = "none"
	}
	if m := spec.Resources.MemoryBytes; m > 0 {
		hc.Memory, hc.MemorySwap = m, m
	}
	if c := spec.Resources.MilliCPU; c > 0 {
		hc.NanoCPUs = c * 1_000_000
	}
	for _, u := range e.cfg.Ulimits {
		hc.Ulimits = append(hc.Ulimits, &ctypes.Ulimit{Name: u.Name, Soft: u.Soft, Hard: u.Hard})
	}
	cfg := &ctypes.Config{
		Image:      image,
		Labels:     labels(spec),
		Entrypoint: []string{supervisorBin, "supervise"},
		Cmd: supervise.Args(supervise.Options{ControlFD: 0, StatusFD: -1, UntilMS: -1, Dir: workdir, Setup: true},
			spec.Command),
		WorkingDir:   workdir,
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		OpenStdin:    true,
		StdinOnce:    true,
	}
	name := ContainerName(spec.Runner, spec.Attempt)
	created, err := e.cfg.Client.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hc, Name: name})
	if err != nil && cerrdefs.IsConflict(err) {
		// A container of this attempt from an earlier start that died
		// before it could remove it.
		_ = e.remove(name)
		created, err = e.cfg.Client.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hc, Name: name})
	}
	if err != nil {
		// The engine may have created it before the call failed.
		_ = e.remove(name)
		return nil, startErr(executor.ReasonStartFailed, "create the container: %w", err)
	}
	id := created.ID
	att, err := e.cfg.Client.ContainerAttach(ctx, id, client.ContainerAttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		_ = e.remove(id)
		return nil, startErr(executor.ReasonStartFailed, "attach to the container: %w", err)
	}
	j := &job{e: e, id: id, att: att.HijackedResponse, memory: spec.Resources.MemoryBytes}
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	j.readers.Go(func() { executor.ReadPieces(outR, spec.Emitter("stdout")) })
	j.readers.Go(func() { executor.ReadPieces(errR, spec.Emitter("stderr")) })
	j.readers.Go(func() {
		_, _ = stdcopy.StdCopy(outW, errW, att.Reader)
		outW.Close()
		errW.Close()
	})
	j.closeOutput = func() { outR.Close(); errR.Close() }
	if _, err := e.cfg.Client.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		j.att.Close()
		_ = e.remove(id)
		j.closeOutput()
		j.readers.Wait()
		return nil, startErr(executor.ReasonStartFailed, "start the container: %w", err)
	}
	envLine, err := json.Marshal(jobEnv(imageEnv, spec.Env, in))
	if err != nil {
		return nil, err
	}
	j.send("env " + string(envLine))
	// Read now, after the pull and the create: the worker renewed
	// meanwhile.
	j.bound = executor.NewBound(e.cfg.Clock, spec.LatestUntil(), func(left time.Duration) {
		j.send(fmt.Sprintf("until %d", left.Milliseconds()))
	})
	if j.bound.Until().IsZero() {
		// No lease bound (a caller that runs without a lease): far enough.
		j.send("until " + strconv.FormatInt(math.MaxInt32, 10))
	} else {
		j.bound.Extend(time.Time{})
	}
	j.bound.Follow()
	return j, nil
}

// ensureImage makes image present as the pull policy says and returns its
// environment.
func (e *Executor) ensureImage(ctx context.Context, image string) ([]string, error) {
	inspect := func() ([]string, error) {
		res, err := e.cfg.Client.ImageInspect(ctx, image)
		if err != nil {
			return nil, err
		}
		if res.Config == nil {
			return nil, nil
		}
		return res.Config.Env, nil
	}
	if e.cfg.Pull != PullAlways {
		env, err := inspect()
		if err == nil {
			return env, nil
		}
		if !cerrdefs.IsNotFound(err) {
			return nil, startErr(executor.ReasonStartFailed, "inspect image %s: %w", image, err)
		}
		if e.cfg.Pull == PullNever {
			return nil, startErr(executor.ReasonImageMissing, "image %s is not present and the pull policy is %s", image, PullNever)
		}
	}
	if err := e.pull(ctx, image); err != nil {
		return nil, startErr(executor.ReasonImageMissing, "image %s could not be pulled: %w", image, err)
	}
	env, err := inspect()
	if err != nil {
		return nil, startErr(executor.ReasonImageMissing, "image %s is not present after its pull: %w", image, err)
	}
	return env, nil
}

func (e *Executor) pull(ctx context.Context, image string) error {
	resp, err := e.cfg.Client.ImagePull(ctx, image, client.ImagePullOptions{})
	if err != nil {
		return err
	}
	for msg, err := range resp.JSONMessages(ctx) {
		if err != nil {
			return err
		}
		if msg.Error != nil {
			return errors.New(msg.Error.Message)
		}
	}
	return nil
}

// prepareHost creates the job's HOME and TMPDIR in the attempt directory,
// opens the mounted directories to whatever user the image runs as (the
// path to them passes through the worker's state directory, which no other
// host user can enter), and returns the mounts: the attempt's directories,
// its parameters read-only, and the supervisor binary read-only. Nothing
// else of the host is mounted.
func prepareHost(l executor.Layout, supervisor string) ([]mount.Mount, error) {
	home, tmp := filepath.Join(l.Root, "home"), filepath.Join(l.Root, "tmp")
	for _, d := range []string{home, tmp, l.Workspace, l.Artifacts} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	for _, d := range []string{home, tmp, l.Artifacts} {
		if err := os.Chmod(d, 0o777); err != nil {
			return nil, err
		}
	}
	err := filepath.WalkDir(l.Workspace, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		add := fs.FileMode(0o666)
		if d.IsDir() || fi.Mode()&0o100 != 0 {
			add = 0o777
		}
		return os.Chmod(p, fi.Mode().Perm()|add)
	})
	if err != nil {
		return nil, err
	}
	m := []mount.Mount{
		{Type: mount.TypeBind, Source: l.Workspace, Target: mountRoot + "/workspace"},
		{Type: mount.TypeBind, Source: l.Artifacts, Target: mountRoot + "/artifacts"},
		{Type: mount.TypeBind, Source: home, Target: mountRoot + "/home"},
		{Type: mount.TypeBind, Source: tmp, Target: mountRoot + "/tmp"},
		{Type: mount.TypeBind, Source: supervisor, Target: supervisorBin, ReadOnly: true},
	}
	if l.ParamsFile != "" {
		if _, err := os.Stat(l.ParamsFile); err == nil {
			if err := os.Chmod(l.ParamsFile, 0o644); err != nil {
				return nil, err
			}
			m = append(m, mount.Mount{Type: mount.TypeBind, Source: l.ParamsFile, Target: mountRoot + "/params.json", ReadOnly: true})
		}
	}
	return m, nil
}

// jobEnv is the job's environment in the container: the image's, then the
// job's, with HOME and TMPDIR in the attempt's directories. The image's
// PATH wins over the one the worker passes on from its own host.
func jobEnv(image, job []string, in executor.Layout) []string {
	vals := map[string]string{}
	var order []string
	set := func(kv string) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return
		}
		if _, seen := vals[k]; !seen {
			order = append(order, k)
		}
		vals[k] = v
	}
	imagePath := ""
	for _, kv := range image {
		set(kv)
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			imagePath = v
		}
	}
	for _, kv := range job {
		set(kv)
	}
	if imagePath != "" {
		vals["PATH"] = imagePath
	}
	set("HOME=" + in.Home)
	set("TMPDIR=" + in.Tmp)
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vals[k])
	}
	return out
}

// remove removes a container, killing it first if it runs.
func (e *Executor) remove(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), engineCall)
	defer cancel()
	_, err := e.cfg.Client.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && cerrdefs.IsNotFound(err) {
		return nil
	}
	return err
}

// Sweep implements executor.Executor: it removes (killing first) every
// container of runner whose attempt keep does not report as held.
func (e *Executor) Sweep(ctx context.Context, runner string, keep func(string) bool) error {
	res, err := e.cfg.Client.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: client.Filters{}.Add("label", LabelManagedBy+"="+managedBy, LabelRunner+"="+runner),
	})
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	var errs []error
	for _, c := range res.Items {
		// The engine filtered already; checked again, since removing another
		// runner's container would end its job.
		if c.Labels[LabelRunner] != runner || c.Labels[LabelManagedBy] != managedBy || keep(c.Labels[LabelAttempt]) {
			continue
		}
		if err := e.remove(c.ID); err != nil {
			errs = append(errs, fmt.Errorf("remove container %s: %w", c.ID, err))
		}
	}
	return errors.Join(errs...)
}

// job is one attempt's container.
type job struct {
	e           *Executor
	id          string
	att         client.HijackedResponse
	readers     sync.WaitGroup
	closeOutput func()
	memory      int64

	bound *executor.Bound

	mu       sync.Mutex
	stopped  bool
	detached bool // the control stream is closed
}

// send writes one control line; a write that fails is dropped: the
// supervisor then ends the job at its bound, or is gone.
func (j *job) send(line string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.detached {
		return
	}
	// Wall time at an I/O edge: the deadline is the connection's, not the lease's.
	_ = j.att.Conn.SetWriteDeadline(clock.Real{}.Now().Add(controlWrite))
	_, _ = j.att.Conn.Write([]byte(line + "\n"))
}

// Extend implements executor.Job: the supervisor learns the new bound.
func (j *job) Extend(until time.Time) { j.bound.Extend(until) }

// Stop implements executor.Job: the supervisor sends SIGTERM to the job's
// processes and SIGKILL after grace; the engine's own stop (SIGTERM to the
// supervisor, SIGKILL to the container) follows a little later, in case
// the supervisor cannot.
func (j *job) Stop(grace time.Duration) {
	grace = max(0, grace)
	j.mu.Lock()
	j.stopped = true
	j.mu.Unlock()
	j.send(fmt.Sprintf("stop %d", grace.Milliseconds()))
	go func() {
		secs := int(math.Ceil((grace + stopBackstop).Seconds()))
		ctx, cancel := context.WithTimeout(context.Background(), engineCall+time.Duration(secs)*time.Second)
		defer cancel()
		_, _ = j.e.cfg.Client.ContainerStop(ctx, j.id, client.ContainerStopOptions{Timeout: &secs})
	}()
}

// Wait implements executor.Job: it waits for the container to end, drains
// its output, reads its exit and removes it.
func (j *job) Wait() executor.Exit {
	ctx := context.Background()
	var waitErr error
	for range 3 {
		w := j.e.cfg.Client.ContainerWait(ctx, j.id, client.ContainerWaitOptions{Condition: ctypes.WaitConditionNotRunning})
		select {
		case <-w.Result:
			waitErr = nil
		case waitErr = <-w.Error:
		}
		if waitErr == nil || cerrdefs.IsNotFound(waitErr) {
			break
		}
		time.Sleep(time.Second)
	}
	j.bound.Close()
	var stopped bool
	var until time.Time
	executor.DrainOutput(&j.readers, executor.OutputDrain, func() {
		j.mu.Lock()
		j.detached = true
		stopped, until = j.stopped, j.bound.Until()
		j.mu.Unlock()
		j.att.Close()
		j.closeOutput()
	})

	ictx, cancel := context.WithTimeout(ctx, engineCall)
	res, err := j.e.cfg.Client.ContainerInspect(ictx, j.id, client.ContainerInspectOptions{})
	cancel()
	removeErr := j.e.remove(j.id)
	if err != nil || res.Container.State == nil {
		if err == nil {
			err = errors.New("no state")
		}
		if waitErr != nil {
			err = errors.Join(waitErr, err)
		}
		return executor.Exit{Code: -1, Summary: fmt.Sprintf("the container's end is unknown: %v", err), Reason: executor.ReasonSupervisorLost}
	}
	st := res.Container.State
	code := st.ExitCode
	summary := describe(code)
	// The OOM killer picks the job's largest process, not the supervisor,
	// which then exits with the job's 137; and Podman on a cgroup v1 host
	// does not always record the kill. A memory-limited job killed by a
	// SIGKILL that neither the worker nor the bound sent is taken for one.
	boundPassed := !until.IsZero() && !j.e.cfg.Clock.Now().Before(until)
	if st.OOMKilled || (code == 137 && j.memory > 0 && !stopped && !boundPassed) {
		return executor.Exit{Code: code, Summary: fmt.Sprintf("out of memory: killed at its limit of %d bytes", j.memory), Reason: executor.ReasonOOMKilled}
	}
	if removeErr != nil {
		summary += fmt.Sprintf(" (the container could not be removed: %v)", removeErr)
	}
	return executor.Exit{Code: code, Summary: summary}
}

// describe says how a supervisor's exit code came about.
func describe(code int) string {
	if code > 128 && code < 128+65 {
		return "killed by signal " + unix.SignalName(unix.Signal(code-128))
	}
	return fmt.Sprintf("exit status %d", code)
}
