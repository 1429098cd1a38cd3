package actions

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jobplane/jobplane/internal/actionsoidc"
	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// Defaults of the mode.
const (
	// DefaultCallbackTimeout is how long a dispatched attempt waits for its
	// workflow's exchange before it expires (and is retried by its job's
	// policy). GitHub usually starts a dispatched workflow within seconds;
	// a queue of its hosted runners can take minutes.
	DefaultCallbackTimeout = 10 * time.Minute
	dispatchBatch          = 50
	minBackoff             = 5 * time.Second
	maxBackoff             = 10 * time.Minute
)

// Workflow dispatch inputs: the workflow file declares them under
// on.workflow_dispatch.inputs.
const (
	InputRun     = "jobplane_run"
	InputAttempt = "jobplane_attempt"
	InputCommit  = "jobplane_commit"
)

// App dispatches workflows (a Dispatcher over the GitHub App client).
type App interface {
	// DispatchWorkflow runs workflow in repo at the repository's default
	// branch with inputs, and says where: the repository's and its
	// owner's IDs and the full ref. A refusal by GitHub (not worth
	// retrying) is a *Refusal; any other error is retried.
	DispatchWorkflow(ctx context.Context, installation int64, repo, workflow string, inputs map[string]string) (Target, error)
}

// Target is where a workflow was dispatched, as GitHub reported it.
type Target struct {
	RepoID  int64
	OwnerID int64
	Ref     string // refs/heads/<default branch>
}

// Refusal is GitHub refusing a dispatch for good: Reason says why (for the
// run's timeline and its Check Run).
type Refusal struct {
	Reason string
	Err    error
}

func (e *Refusal) Error() string { return e.Reason }

// Unwrap is the client's error.
func (e *Refusal) Unwrap() error { return e.Err }

// Runs is what the mode asks of the run service (a *control.Service).
type Runs interface {
	HandOut(ctx context.Context, tx store.Tx, rn *store.Runner, a *store.Attempt, r *store.Run, token, requestID string, now time.Time) error
	HandedOut(r *store.Run, a *store.Attempt, token string) (*protocol.Assignment, error)
	EndQueued(ctx context.Context, tx store.Tx, r *store.Run, a *store.Attempt, state store.AttemptState, now time.Time, actor, reason string) error
	RunChanged(ctx context.Context, tx store.Tx, r *store.Run, detail string) error
}

var _ Runs = (*control.Service)(nil)

// Access says, in the transaction that would hand out an attempt of the
// tenant building repo, why the tenant may no longer work on it ("" while
// it may): its installation no longer grants the repository (a
// *githubapp.Service).
type Access interface {
	RepoWithdrawnTx(ctx context.Context, tx store.Tx, tenant, repo string) (reason string, err error)
}

// Config configures the Service.
type Config struct {
	Store  store.Store
	Clock  clock.Clock
	Logger *slog.Logger
	// Verifier checks the workflows' OIDC tokens; nil: the mode is off
	// (nothing is dispatched and exchanges are refused).
	Verifier *actionsoidc.Verifier
	// App dispatches workflows.
	App App
	// Access re-checks that an installation grants a repository before
	// its attempt is dispatched or handed out (nil: always).
	Access Access
	// CallbackTimeout: DefaultCallbackTimeout when zero.
	CallbackTimeout time.Duration
}

// Service is the GitHub Actions compatibility mode.
type Service struct {
	store    store.Store
	clock    clock.Clock
	log      *slog.Logger
	verifier *actionsoidc.Verifier
	app      App
	access   Access
	timeout  time.Duration
	runs     Runs
}

var _ control.Actions = (*Service)(nil)

// New returns a Service; Attach gives it the run service before use.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("actions: Store is required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.CallbackTimeout <= 0 {
		cfg.CallbackTimeout = DefaultCallbackTimeout
	}
	return &Service{store: cfg.Store, clock: cfg.Clock, log: cfg.Logger, verifier: cfg.Verifier, app: cfg.App,
		access: cfg.Access, timeout: cfg.CallbackTimeout}, nil
}

// Attach gives the service the run service it hands attempts out through.
// The run service is built with this one as its control.Actions, so one of
// the two is given to the other after both exist.
func (s *Service) Attach(runs Runs) { s.runs = runs }

// Enabled reports whether the mode is configured.
func (s *Service) Enabled() bool { return s != nil && s.verifier != nil }

func (s *Service) audit(ctx context.Context, tx store.Tx, tenant, actor, action, subject string, details any) error {
	return audit.Recorder{Clock: s.clock}.Append(ctx, tx, tenant, actor, action, subject, details)
}

// withdrawn is Access.RepoWithdrawnTx, or "" without a repository or an
// Access.
func (s *Service) withdrawn(ctx context.Context, tx store.Tx, tenant, repo string) (string, error) {
	if s.access == nil || repo == "" {
		return "", nil
	}
	return s.access.RepoWithdrawnTx(ctx, tx, tenant, repo)
}

func clip(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
}
