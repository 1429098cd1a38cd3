package control

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/claimline"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/lease"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/runnerwatch"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/groupcommit"
)

// Definitions resolves a channel to the job definitions and policies in force.
type Definitions interface {
	// Resolve returns the active definitions of a channel (ref names the
	// branch of a pattern channel).
	Resolve(ctx context.Context, channel, ref string) (Catalog, error)
}

// Catalog is the definitions of one commit.
type Catalog interface {
	Commit() string
	Branch() string
	// Protected reports whether the branch counts as protected in policies.
	Protected() bool
	// Job returns the pinned spec of a job; ok is false when there is no such job.
	Job(name string) (spec Spec, ok bool)
	// ValidateParams applies defaults and checks params against the job's
	// schema; it returns the normalized params or a *ParamsError.
	ValidateParams(job string, params json.RawMessage) (json.RawMessage, error)
	// Decide authorizes a request.
	Decide(req DecisionRequest) Decision
}

// ParamsError names the parameter that failed validation.
type ParamsError struct {
	Field   string
	Message string
}

func (e *ParamsError) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

// DecisionRequest is what a policy decides on.
type DecisionRequest struct {
	Job       string
	Channel   string
	Actor     string
	ActorKind string
	Params    json.RawMessage
	Ref       Ref
	Source    json.RawMessage
	Now       time.Time
}

// Ref is the branch and commit a request runs from.
type Ref struct {
	Branch    string
	Protected bool
	Commit    string
}

// Decision is an authorization outcome with its explanation; the wire
// type, which runs keep.
type Decision = protocol.Decision

// RunTokens mints the run token an assignment carries.
type RunTokens interface {
	Mint(r *store.Run, a *store.Attempt, grants map[string]string) (*protocol.RunToken, error)
}

// Config configures the Service.
type Config struct {
	// Store is the database.
	Store store.Store
	// Grouped runs the transactions of the hot calls: claims, renewals,
	// log chunks, results and run requests, with the pending nonces of
	// their signed requests. A groupcommit.Store shares one transaction
	// among the calls waiting at that moment; nil is one over Store with
	// the default settings.
	Grouped     store.Store
	Clock       clock.Clock
	Definitions Definitions
	Logger      *slog.Logger
	// APIURL is the server's address as jobs should call it (JOBPLANE_API).
	APIURL string
	// ReapBatch bounds one reaper pass.
	ReapBatch int
	// ApprovalTTL is how long a run may wait for approval (default 24 h).
	ApprovalTTL time.Duration
	// Credentials mints run tokens (a *runcreds.Keys); without it
	// assignments carry none.
	Credentials RunTokens
	// Tenants is the integration whose installations are tenants (the
	// GitHub App); nil: every tenant uses the server's definitions.
	Tenants Tenants
	// Actions is the GitHub Actions compatibility mode (nil: off).
	Actions Actions
	// Sources pins the source branches of the configured repositories
	// (nil: jobs with such a source cannot be requested).
	Sources SourceHeads
	// Leases applies the run lease rules; nil is one over Store.
	Leases *lease.Service
	// Metrics receives measurements (internal/metrics); nil records nothing.
	Metrics Observer
	// IsolateWriteGrants keeps every run with a connector granted at
	// write on isolated runners (docs/security.md §8).
	IsolateWriteGrants bool
	// Logs reads runs' lines (logarchive.Reader adds those moved to the
	// object store); nil reads the database's.
	Logs LogReader
}

// LogReader reads at most limit of a run's lines with ID > after, in ID
// order.
type LogReader interface {
	Lines(ctx context.Context, run *store.Run, after int64, limit int) ([]*store.LogLine, error)
}

// dbLogs is the LogReader of the database alone.
type dbLogs struct{ st store.Store }

func (d dbLogs) Lines(ctx context.Context, run *store.Run, after int64, limit int) ([]*store.LogLine, error) {
	return d.st.LogList(ctx, &store.LogListParams{RunID: run.ID, After: after, Limit: limit})
}

// Service is the run service.
type Service struct {
	store store.Store
	// isolateWriteGrants is Config.IsolateWriteGrants.
	isolateWriteGrants bool
	// grouped runs the hot calls' transactions (Config.Grouped).
	grouped store.Store
	// runnerLists caches runner lists for queued runs' explanations.
	runnerLists runnerwatch.Lists
	// watch follows runners' availability for queued runs' Check Runs.
	watch runnerwatch.Watch
	// actorKinds caches principals' kinds for the re-check at dispatch.
	actorKinds actorKinds
	// specs caches the pinned specs claim answers are made of.
	specs  specCache
	clock  clock.Clock
	defs   Definitions
	log    *slog.Logger
	apiURL string
	batch  int
	appTTL time.Duration
	creds  RunTokens
	// sources is Config.Sources.
	sources SourceHeads
	obs     Observer
	leases  *lease.Service
	// tenants is Config.Tenants.
	tenants Tenants
	lines   claimline.Lines
	drain   drainSignal
	// actions is Config.Actions.
	actions Actions
	logs    LogReader
}

// New returns a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("control: Store is required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ReapBatch <= 0 {
		cfg.ReapBatch = 100
	}
	if cfg.ApprovalTTL <= 0 {
		cfg.ApprovalTTL = 24 * time.Hour
	}
	if cfg.Leases == nil {
		cfg.Leases = lease.New(lease.Config{Store: cfg.Store, Clock: cfg.Clock, Logger: cfg.Logger, Batch: cfg.ReapBatch})
	}
	if cfg.Logs == nil {
		cfg.Logs = dbLogs{cfg.Store}
	}
	if cfg.Grouped == nil {
		cfg.Grouped = groupcommit.New(cfg.Store, groupcommit.Config{Refusal: protocol.IsRefusal})
	}
	return &Service{store: cfg.Store, grouped: cfg.Grouped, clock: cfg.Clock, defs: cfg.Definitions, log: cfg.Logger, apiURL: cfg.APIURL,
		batch: cfg.ReapBatch, appTTL: cfg.ApprovalTTL, creds: cfg.Credentials, sources: cfg.Sources,
		obs: observerOrNop(cfg.Metrics), tenants: cfg.Tenants, leases: cfg.Leases, actions: cfg.Actions, logs: cfg.Logs,
		isolateWriteGrants: cfg.IsolateWriteGrants}, nil
}

func (s *Service) audit(ctx context.Context, tx store.Tx, tenant, actor, action, subject string, details any) error {
	return audit.Recorder{Clock: s.clock}.Append(ctx, tx, tenant, actor, action, subject, details)
}

func ptr[T any](v T) *T { return &v }

// Leases is the lease service the run service applies the lease rules
// with (Config.Leases), for the handlers that show and break leases.
func (s *Service) Leases() *lease.Service { return s.leases }
