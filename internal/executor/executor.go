package executor

import (
	"context"
	"errors"
	"time"
)

// Executor starts and stops the jobs of attempts. Implementations are safe
// for concurrent use: a worker with several slots starts several jobs.
type Executor interface {
	// Name is the executor's name as `jobplane worker --executor` takes it.
	Name() string
	// Capabilities says what the executor can run and how isolated its
	// jobs are; the worker advertises it to the server, which hands the
	// runner only attempts it can run.
	Capabilities() Capabilities
	// Layout returns where a job sees the files of the attempt directory
	// the worker prepared at host (which, for an executor that runs the
	// job elsewhere, it must make available there).
	Layout(host Layout) Layout
	// Start starts the job of spec. It returns when the job runs; an
	// error means nothing of the job runs (a *StartError when the reason
	// is known). ctx bounds the start only, not the job.
	Start(ctx context.Context, spec *Spec) (Job, error)
	// Sweep ends and removes what the executor left of runner's attempts
	// that keep does not report as held: after a restart, every attempt of
	// a previous incarnation. An executor that leaves nothing behind
	// returns nil.
	Sweep(ctx context.Context, runner string, keep func(attemptID string) bool) error
}

// Job is one started job.
type Job interface {
	// Extend moves the instant by which the job must be gone to until
	// (never earlier: an earlier until is ignored). The worker calls it
	// after each renewal.
	Extend(until time.Time)
	// Stop stops the job: SIGTERM (or the executor's equivalent), then a
	// kill after grace; grace <= 0 kills at once. Later calls may shorten
	// the grace, never lengthen it.
	Stop(grace time.Duration)
	// Wait blocks until every process of the job is gone, its output has
	// been delivered to Spec.Output, and its files are back in the host
	// layout; it returns how the job ended. It may be called once.
	Wait() Exit
}

// Capabilities is what a runner's executor can run.
type Capabilities struct {
	// Images: runs jobs in the OCI image that run.image names, with
	// run.resources and run.network enforced.
	Images bool
	// Isolated: a job cannot reach the runner's key, its state directory,
	// or the worker's processes.
	Isolated bool
}

// Layout is where the files of one attempt are: on the host, as the worker
// prepared them, or as the job sees them.
type Layout struct {
	// Root is the attempt's directory; the others lie within it.
	Root string
	// Workspace is the job's working directory by default, where its
	// source is unpacked.
	Workspace string
	// Artifacts is JOBPLANE_ARTIFACTS_DIR.
	Artifacts string
	// ParamsFile is JOBPLANE_PARAMS_FILE.
	ParamsFile string
	// Home is the job's HOME when the executor gives it a fresh one.
	Home string
	// Tmp is the job's TMPDIR when the executor gives it a fresh one.
	Tmp string
}

// Resources are a job's limits (run.resources).
type Resources struct {
	// MilliCPU is the CPU limit in thousandths of a core; 0 means none.
	MilliCPU int64
	// MemoryBytes is the memory limit; 0 means none.
	MemoryBytes int64
}

// Network modes of run.network.
const (
	NetworkDefault = "default"
	NetworkNone    = "none"
)

// Spec is one attempt's job as an executor starts it.
type Spec struct {
	// Runner, Tenant, Run, Attempt and Job name the attempt; executors
	// label what they create with them.
	Runner, Tenant, Run, Attempt, Job string
	AttemptNumber                     int
	// Command is the argv.
	Command []string
	// Env is the job's whole environment as KEY=VALUE, credentials
	// included: an executor passes it to the job without writing it where
	// others can read it (an image, an engine's container record or logs).
	Env []string
	// Layout is the attempt directory on the host (see Executor.Layout).
	Layout Layout
	// Workdir is the job's working directory as the job sees it: empty for
	// the workspace, a relative path within the workspace, or (with an
	// image) an absolute path of the image.
	Workdir string
	// Image is the OCI image reference; empty runs on the host.
	Image     string
	Resources Resources
	// Network is NetworkDefault or NetworkNone.
	Network string
	// Until is the instant, on the worker's clock, by which the job must be
	// gone unless Extend moves it.
	Until time.Time
	// Output receives each line the job writes, without its line ending,
	// in order per stream ("stdout" or "stderr"). It is called from one
	// goroutine per stream and must not block for long.
	Output func(stream, line string)
}

// Reasons an executor gives for how a job ended, beyond its exit code.
const (
	// ReasonStartFailed: the job could not be started (no such command,
	// a bad working directory, the engine refused the container).
	ReasonStartFailed = "start_failed"
	// ReasonImageMissing: the image is not present and could not be
	// pulled.
	ReasonImageMissing = "image_missing"
	// ReasonOOMKilled: the job was killed for exceeding its memory limit.
	ReasonOOMKilled = "oom_killed"
	// ReasonUnschedulable: no node can take the job (Kubernetes).
	ReasonUnschedulable = "unschedulable"
	// ReasonSupervisorLost: the supervisor ended without saying how the
	// job ended; the executor killed what was left.
	ReasonSupervisorLost = "supervisor_lost"
)

// Exit is how a job ended.
type Exit struct {
	// Code is the exit code; 128+N for a job killed by signal N; -1 when
	// there is none.
	Code int
	// Summary says how the job ended, for the log and the result
	// ("exit status 3", "killed by signal SIGKILL", "out of memory").
	Summary string
	// Reason is one of the Reason constants when the executor knows one.
	Reason string
}

// StartError is a job that could not be started, with the reason.
type StartError struct {
	Reason string
	Err    error
}

func (e *StartError) Error() string { return e.Err.Error() }

func (e *StartError) Unwrap() error { return e.Err }

// ErrNoCommand is a Spec without a command.
var ErrNoCommand = errors.New("job has no command")
