package control

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/connector"
	"github.com/jobplane/jobplane/internal/protocol"
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
	Branch    string `json:"branch"`
	Protected bool   `json:"protected"`
	Commit    string `json:"commit"`
}

// Decision is an authorization outcome with its explanation.
type Decision struct {
	Allowed     bool   `json:"allowed"`
	Rule        string `json:"rule,omitempty"`
	Explanation string `json:"explanation"`
	// Approval is the chosen rule's approval requirement, with the
	// principals who may give it, expanded from its groups at the pinned
	// commit.
	Approval *ApprovalRequirement `json:"approval,omitempty"`
	// Grants are the connector access levels of the chosen rule.
	Grants map[string]string `json:"grants,omitempty"`
	// ForksFull: the chosen rule lifts safe mode (forks: full).
	ForksFull bool `json:"forks_full,omitempty"`
	// Detail is the policy engine's full decision: every rule considered
	// and why it matched or not.
	Detail json.RawMessage `json:"detail,omitempty"`
}

// ApprovalRequirement is how many of which principals must approve a run.
type ApprovalRequirement struct {
	Count     int      `json:"count"`
	Groups    []string `json:"groups"`
	Approvers []string `json:"approvers"`
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
	// Credentials mints run tokens; without it assignments carry none.
	Credentials *Credentials
	// Broker issues and revokes connector credentials.
	Broker *connector.Broker
	// GitHub configures pull-request runs (nil: none).
	GitHub *GitHubRuns
	// Artifacts configures artifact storage and source tickets.
	Artifacts ArtifactConfig
	// Metrics receives measurements (internal/metrics); nil records nothing.
	Metrics Observer
}

// Service is the run service.
type Service struct {
	store store.Store
	// grouped runs the hot calls' transactions (Config.Grouped).
	grouped store.Store
	// runnerLists caches runner lists for queued runs' explanations.
	runnerLists runnerLists
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
	creds  *Credentials
	broker *connector.Broker
	art    ArtifactConfig
	obs    Observer
	gh     *GitHubRuns
	lines  claimLines
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
	if cfg.Grouped == nil {
		cfg.Grouped = groupcommit.New(cfg.Store, groupcommit.Config{Refusal: protocol.IsRefusal})
	}
	return &Service{store: cfg.Store, grouped: cfg.Grouped, clock: cfg.Clock, defs: cfg.Definitions, log: cfg.Logger, apiURL: cfg.APIURL,
		batch: cfg.ReapBatch, appTTL: cfg.ApprovalTTL, creds: cfg.Credentials, broker: cfg.Broker, art: cfg.Artifacts,
		obs: observerOrNop(cfg.Metrics), gh: cfg.GitHub}, nil
}

func (s *Service) audit(ctx context.Context, tx store.Tx, tenant, actor, action, subject string, details any) error {
	return audit.Recorder{Clock: s.clock}.Append(ctx, tx, tenant, actor, action, subject, details)
}

// nowValue is the fake time in tests and the zero time (store picks database
// time) in production.
func (s *Service) nowValue() time.Time {
	if n := s.clock.NowOrNil(); n != nil {
		return *n
	}
	return time.Time{}
}

func ptr[T any](v T) *T { return &v }
