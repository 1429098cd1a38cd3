package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/jobplane/jobplane/internal/executor"
)

// readerDrain bounds the wait for output after the process group is gone:
// a process that left the group (setsid) may still hold the pipes.
const readerDrain = 2 * time.Second

// Executor runs jobs as child processes. The zero value is ready to use.
type Executor struct{}

var _ executor.Executor = (*Executor)(nil)

// New returns a process executor.
func New() *Executor { return &Executor{} }

// Name implements executor.Executor.
func (*Executor) Name() string { return "process" }

// Capabilities implements executor.Executor: no images, and a job runs as
// the worker's own user, so it is not isolated from the runner's key.
func (*Executor) Capabilities() executor.Capabilities { return executor.Capabilities{} }

// Layout implements executor.Executor: the job sees the host's paths.
func (*Executor) Layout(host executor.Layout) executor.Layout { return host }

// Sweep implements executor.Executor: a process of an earlier worker is
// gone with its process group, so nothing is left to remove.
func (*Executor) Sweep(context.Context, string, func(string) bool) error { return nil }

// Start implements executor.Executor.
func (*Executor) Start(_ context.Context, spec *executor.Spec) (executor.Job, error) {
	if len(spec.Command) == 0 || spec.Command[0] == "" {
		return nil, &executor.StartError{Reason: executor.ReasonStartFailed, Err: executor.ErrNoCommand}
	}
	if spec.Image != "" {
		return nil, &executor.StartError{Reason: executor.ReasonStartFailed, Err: fmt.Errorf("the process executor cannot run image %s", spec.Image)}
	}
	dir, err := workdir(spec.Layout.Workspace, spec.Workdir)
	if err != nil {
		return nil, &executor.StartError{Reason: executor.ReasonStartFailed, Err: err}
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	cmd := exec.Command(spec.Command[0], spec.Command[1:]...)
	cmd.Dir = dir
	cmd.Env = spec.Env
	cmd.Stdin = nil // /dev/null
	cmd.Stdout = outW
	cmd.Stderr = errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	// The child has its own copies; ours must go so that EOF comes when the
	// job's processes are gone.
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, &executor.StartError{Reason: executor.ReasonStartFailed, Err: err}
	}
	j := &job{cmd: cmd, pgid: cmd.Process.Pid, outR: outR, errR: errR}
	j.readers.Go(func() { executor.ReadLines(outR, func(s string) { spec.Output("stdout", s) }) })
	j.readers.Go(func() { executor.ReadLines(errR, func(s string) { spec.Output("stderr", s) }) })
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

// job is a job's child process, leader of its own process group so that
// a stop reaches everything it spawned.
type job struct {
	cmd        *exec.Cmd
	pgid       int
	outR, errR *os.File
	readers    sync.WaitGroup

	mu     sync.Mutex
	exited bool
	timer  *time.Timer
}

// Extend implements executor.Job: the worker's own watchdog stops the
// job at the end of its trust window.
func (*job) Extend(time.Time) {}

// signal sends sig to the whole group, unless the group is known gone (its
// ID could otherwise be reused by an unrelated process).
func (j *job) signal(sig syscall.Signal) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.exited {
		_ = syscall.Kill(-j.pgid, sig)
	}
}

// Stop implements executor.Job: SIGTERM now and SIGKILL after grace, or
// SIGKILL at once when grace is not positive.
func (j *job) Stop(grace time.Duration) {
	if grace <= 0 {
		j.signal(syscall.SIGKILL)
		return
	}
	j.signal(syscall.SIGTERM)
	j.mu.Lock()
	if j.timer == nil && !j.exited {
		j.timer = time.AfterFunc(grace, func() { j.signal(syscall.SIGKILL) })
	}
	j.mu.Unlock()
}

// Wait implements executor.Job: it waits for the leader, then kills what is
// left of its group (nothing the job started may outlive the attempt, since
// the lease ends with it), and drains the output.
func (j *job) Wait() executor.Exit {
	err := j.cmd.Wait()
	j.mu.Lock()
	_ = syscall.Kill(-j.pgid, syscall.SIGKILL)
	j.exited = true
	if j.timer != nil {
		j.timer.Stop()
	}
	j.mu.Unlock()
	drained := make(chan struct{})
	go func() { j.readers.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(readerDrain):
	}
	j.outR.Close()
	j.errR.Close()
	<-drained
	return exitOf(err)
}

// exitOf describes how the process ended.
func exitOf(err error) executor.Exit {
	if err == nil {
		return executor.Exit{Code: 0, Summary: "exit status 0"}
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return executor.Exit{Code: 128 + int(ws.Signal()), Summary: "killed by signal " + ws.Signal().String()}
		}
		return executor.Exit{Code: ee.ExitCode(), Summary: fmt.Sprintf("exit status %d", ee.ExitCode())}
	}
	return executor.Exit{Code: -1, Summary: err.Error()}
}
