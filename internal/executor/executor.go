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
	// is known). ctx bounds the start only, not the job: the worker
	// cancels it when the attempt is stopped (cancelled, its lease lost)
	// before the job runs. The worker keeps renewing the lease during a
	// start, so a start may take long (an image pull); Spec.LatestUntil is
	// the bound to give the job.
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
	// OwnFiles: the job runs where the worker's attempt directory is not
	// (a Kubernetes pod). The executor's side fetches Spec.Source into the
	// job's workspace and uploads Spec.Artifacts itself, with the job's run
	// token, and reports the stored artifacts in Exit.Artifacts; the worker
	// does neither. Not told to the server.
	OwnFiles bool
}

// Source is the commit a job runs in.
type Source struct {
	Repo, Commit string
}

// Artifact is a declared artifact of a job.
type Artifact struct {
	Name, Role string
	MaxBytes   int64
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
	// Source is the job's source (nil: none) and Artifacts its declared
	// artifacts, for an executor with Capabilities.OwnFiles; the worker
	// handles them itself for the others.
	Source    *Source
	Artifacts []Artifact
	// Image is the OCI image reference; empty runs on the host.
	Image     string
	Resources Resources
	// Network is NetworkDefault or NetworkNone.
	Network string
	// Until is the instant, on the worker's clock, by which the job must be
	// gone unless Extend moves it.
	Until time.Time
	// Renewed, when set, returns the bound as the worker's renewals have
	// moved it since Until was read. A start can take long (an image pull)
	// while the worker keeps renewing the lease; an executor reads
	// LatestUntil just before the job starts, so that the first bound the
	// job gets is not one those renewals made stale.
	Renewed func() time.Time
	// Output receives each line the job writes, without its line ending,
	// in order per stream ("stdout" or "stderr"). It is called from one
	// goroutine per stream and must not block for long.
	Output func(stream, line string)
	// OutputPiece, when set, is called instead of Output with the pieces of
	// lines longer than MaxLineBytes as they are cut, more saying that the
	// same line goes on in the next piece of the stream.
	OutputPiece func(stream, piece string, more bool)
}

// LatestUntil returns the later of Until and what Renewed returns.
func (s *Spec) LatestUntil() time.Time {
	if s.Renewed != nil {
		if u := s.Renewed(); u.After(s.Until) {
			return u
		}
	}
	return s.Until
}

// Emitter returns the function an executor gives each piece of the
// stream's output to: OutputPiece, or Output.
func (s *Spec) Emitter(stream string) func(piece string, more bool) {
	if s.OutputPiece != nil {
		return func(p string, more bool) { s.OutputPiece(stream, p, more) }
	}
	return func(p string, _ bool) { s.Output(stream, p) }
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
	// Artifacts are the IDs of the artifacts the executor's side stored
	// (Capabilities.OwnFiles).
	Artifacts []string
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
