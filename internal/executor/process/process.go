package process

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/executor"
	"github.com/jobplane/jobplane/internal/executor/supervise"
)

const (
	// controlWrite bounds one control line's write: a stopped supervisor
	// must not block the worker (its bound ends the job anyway).
	controlWrite = time.Second
)

// Options configure a process executor.
type Options struct {
	// Clock is the worker's clock, on which Spec.Until is given. Default:
	// the real clock.
	Clock clock.Clock
	// Supervisor is the jobplane binary that supervises each job. Default:
	// the running binary (/proc/self/exe).
	Supervisor string
	// JobUser, when set, is the OS user jobs run as (`jobplane worker
	// --job-user`): another user than the worker's, so that a job cannot
	// read the runner's key or signal the worker. It needs a worker
	// running as root.
	JobUser *JobUser
}

// Executor runs jobs as child processes under a supervisor.
type Executor struct {
	clk        clock.Clock
	supervisor string
	user       *JobUser
}

var _ executor.Executor = (*Executor)(nil)

// New returns a process executor.
func New(o Options) *Executor {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Supervisor == "" {
		o.Supervisor = "/proc/self/exe"
	}
	return &Executor{clk: o.Clock, supervisor: o.Supervisor, user: o.JobUser}
}

// Name implements executor.Executor.
func (*Executor) Name() string { return "process" }

// Capabilities implements executor.Executor: no images; isolated only
// with a job user, since a job running as the worker's own user can read
// the runner's key and signal the worker.
func (e *Executor) Capabilities() executor.Capabilities {
	return executor.Capabilities{Isolated: e.user != nil}
}

// Layout implements executor.Executor: the job sees the host's paths, and
// with a job user gets its own HOME and TMPDIR in the attempt directory.
func (e *Executor) Layout(host executor.Layout) executor.Layout {
	if e.user != nil {
		host.Home = filepath.Join(host.Root, "home")
		host.Tmp = filepath.Join(host.Root, "tmp")
	}
	return host
}

// Sweep implements executor.Executor: the supervisor of an earlier worker's
// job ends it when that worker goes, so nothing is left to remove.
func (*Executor) Sweep(context.Context, string, func(string) bool) error { return nil }

// Start implements executor.Executor.
func (e *Executor) Start(_ context.Context, spec *executor.Spec) (executor.Job, error) {
	if len(spec.Command) == 0 || spec.Command[0] == "" {
		return nil, &executor.StartError{Reason: executor.ReasonStartFailed, Err: executor.ErrNoCommand}
	}
	if spec.Image != "" {
		return nil, &executor.StartError{Reason: executor.ReasonStartFailed, Err: fmt.Errorf("the process executor cannot run image %s", spec.Image)}
	}
	// The server hands such a job only to a runner that runs images; a job
	// that came here anyway must not run with its limits silently dropped.
	if spec.Resources != (executor.Resources{}) || spec.Network == executor.NetworkNone {
		return nil, &executor.StartError{Reason: executor.ReasonStartFailed,
			Err: errors.New("the process executor cannot enforce run.resources or run.network: none; a container or kubernetes runner can")}
	}
	dir, err := workdir(spec.Layout.Workspace, spec.Workdir)
	if err != nil {
		return nil, &executor.StartError{Reason: executor.ReasonStartFailed, Err: err}
	}
	// The common mistakes (no such command, a missing directory) are
	// found here; the supervisor reports any later failure to Wait.
	if _, err := os.Stat(dir); err != nil {
		return nil, &executor.StartError{Reason: executor.ReasonStartFailed, Err: fmt.Errorf("working directory: %w", err)}
	}
	if _, err := supervise.LookPath(spec.Command[0], spec.Env, dir); err != nil {
		return nil, &executor.StartError{Reason: executor.ReasonStartFailed, Err: err}
	}
	env, userFlag := spec.Env, ""
	if e.user != nil {
		if env, err = e.user.prepare(e.Layout(spec.Layout), spec.Env); err != nil {
			return nil, &executor.StartError{Reason: executor.ReasonStartFailed, Err: fmt.Errorf("prepare the attempt directory for job user %s: %w", e.user.Name, err)}
		}
		userFlag = fmt.Sprintf("%d:%d", e.user.UID, e.user.GID)
	}
	var parent, child []*os.File // ends kept, ends passed to the supervisor
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			f.Close()
		}
	}
	pipe := func() (r, w *os.File) {
		if err != nil {
			return nil, nil
		}
		r, w, err = os.Pipe()
		return r, w
	}
	outR, outW := pipe()
	errR, errW := pipe()
	ctlR, ctlW := pipe()
	stR, stW := pipe()
	if err != nil {
		closeAll([]*os.File{outR, outW, errR, errW, ctlR, ctlW, stR, stW})
		return nil, err
	}
	parent = []*os.File{outR, errR, ctlW, stR}
	child = []*os.File{outW, errW, ctlR, stW}
	bound := spec.LatestUntil()
	until := int64(-1)
	if !bound.IsZero() {
		until = max(0, bound.Sub(e.clk.Now()).Milliseconds())
	}
	cmd := &exec.Cmd{
		Path: e.supervisor,
		Args: append([]string{supervise.Argv0}, supervise.Args(supervise.Options{
			ControlFD: 3, StatusFD: 4, UntilMS: until, Dir: dir, User: userFlag,
		}, spec.Command)...),
		Env:        env,
		Stdout:     outW,
		Stderr:     errW,
		ExtraFiles: []*os.File{ctlR, stW},
		// Its own group, out of reach of a terminal's signals to the
		// worker; SIGHUP when the worker dies (the pipe's end says so too).
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGHUP},
	}
	err = cmd.Start()
	// The supervisor has its own copies; ours must go so that EOF comes
	// when it and the job are gone.
	closeAll(child)
	if err != nil {
		closeAll(parent)
		return nil, &executor.StartError{Reason: executor.ReasonStartFailed, Err: fmt.Errorf("start the supervisor: %w", err)}
	}
	j := &job{e: e, cmd: cmd, ctl: ctlW, outR: outR, errR: errR, status: make(chan supervise.Status, 2)}
	j.readers.Go(func() { executor.ReadPieces(outR, spec.Emitter("stdout")) })
	j.readers.Go(func() { executor.ReadPieces(errR, spec.Emitter("stderr")) })
	// The supervisor's first status line (started, or why not) is read
	// by Wait: Start returns as soon as the supervisor runs.
	go j.readStatus(stR)
	j.bound = executor.NewBound(e.clk, bound, func(left time.Duration) {
		j.send(fmt.Sprintf("until %d", left.Milliseconds()))
	})
	j.bound.Follow()
	return j, nil
}

// workdir resolves the job's working directory: the workspace, or a
// relative path within it.
func workdir(workspace, rel string) (string, error) {
	if rel == "" {
		return workspace, nil
	}
	if !filepath.IsLocal(rel) {
		return "", fmt.Errorf("workdir %q is not a relative path within the workspace (an absolute workdir needs an image)", rel)
	}
	return filepath.Join(workspace, rel), nil
}

// job is a supervised job.
type job struct {
	e          *Executor
	cmd        *exec.Cmd
	outR, errR *os.File
	readers    sync.WaitGroup
	status     chan supervise.Status // the exit line, or nothing

	bound *executor.Bound

	mu   sync.Mutex
	ctl  *os.File // nil once closed
	pgid int      // the job's process group, led by its first process
}

// readStatus sends the supervisor's first status line and its exit line
// to j.status.
func (j *job) readStatus(r *os.File) {
	defer r.Close()
	defer close(j.status)
	sc := bufio.NewScanner(r)
	first := true
	for sc.Scan() {
		st, err := supervise.ReadStatus(sc.Bytes())
		if err != nil {
			continue
		}
		if first || st.Event == "exit" {
			first = false
			if st.Event == "started" {
				j.mu.Lock()
				j.pgid = st.PID
				j.mu.Unlock()
			}
			j.status <- st
		}
	}
}

// send writes one control line; a write that fails is dropped: the
// supervisor then ends the job at its bound, or is gone.
func (j *job) send(line string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.ctl == nil {
		return
	}
	// Wall time at an I/O edge: the deadline is the pipe's, not the lease's.
	_ = j.ctl.SetWriteDeadline(clock.Real{}.Now().Add(controlWrite))
	_, _ = j.ctl.WriteString(line + "\n")
}

// abandon closes the control stream, which tells the supervisor to kill
// the job at once.
func (j *job) abandon() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.ctl != nil {
		j.ctl.Close()
		j.ctl = nil
	}
}

// Extend implements executor.Job: the supervisor learns the new bound.
func (j *job) Extend(until time.Time) { j.bound.Extend(until) }

// Stop implements executor.Job: the supervisor sends SIGTERM to the job's
// processes and SIGKILL after grace, or SIGKILL at once.
func (j *job) Stop(grace time.Duration) {
	j.send(fmt.Sprintf("stop %d", max(0, grace.Milliseconds())))
}

// Wait implements executor.Job: it waits for the supervisor, which ends
// only when every process of the job is gone, then drains the output.
func (j *job) Wait() executor.Exit {
	err := j.cmd.Wait()
	j.bound.Close()
	j.abandon()
	var first, last supervise.Status
	for st := range j.status {
		if first.Event == "" {
			first = st
		}
		last = st
	}
	j.mu.Lock()
	pgid := j.pgid
	j.mu.Unlock()
	if last.Event != "exit" && pgid > 0 {
		// The supervisor died without a word (killed): its job's leader
		// got SIGKILL from the kernel (parent death); the rest of its
		// group gets it here.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	executor.DrainOutput(&j.readers, executor.OutputDrain, func() {
		j.outR.Close()
		j.errR.Close()
	})
	switch {
	case first.Event == "start_failed":
		return executor.Exit{Code: 127, Summary: "start: " + first.Error, Reason: executor.ReasonStartFailed}
	case last.Event != "exit":
		return executor.Exit{Code: -1, Summary: fmt.Sprintf("the job's supervisor ended without a status (%v)", err), Reason: executor.ReasonSupervisorLost}
	}
	return executor.Exit{Code: last.Code, Summary: last.Summary}
}
