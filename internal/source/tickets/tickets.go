package tickets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// DefaultTicketTTL is how long a source ticket may wait for its use by
// default (docs/artifacts.md).
const DefaultTicketTTL = 2 * time.Minute

// Runs is what the ticket service asks of the run service.
type Runs interface {
	// RunnerAttempt locks and returns, in tx, the attempt a signed call
	// names and its run, refusing anything that is not the runner's live
	// lease (an ended attempt included), and the time of the check.
	RunnerAttempt(ctx context.Context, tx store.Tx, call *principal.RunnerCall) (*store.Attempt, *store.Run, time.Time, error)
	// JobAttempt is RunnerAttempt for a job's verified run token; it
	// returns the attempt's runner too.
	JobAttempt(ctx context.Context, tx store.Tx, call *principal.JobCall) (*store.Attempt, *store.Run, time.Time, *store.Runner, error)
	// HoldsLease refuses, in tx, unless the attempt still holds the lease
	// leaseDigest names.
	HoldsLease(ctx context.Context, tx store.Tx, attemptID, leaseDigest string) error
}

// Archiver writes a gzipped tar of a configured repository at a commit
// (a *source.Broker).
type Archiver interface {
	// Archive verifies the commit and writes the archive to the writer
	// open returns; open is not called when verification fails.
	Archive(ctx context.Context, repo, commit string, open func() io.Writer) error
}

// Hosted serves the sources of a Git host's repositories (owner/name) to
// the tenants that are its installations (a *githubapp.Service).
type Hosted interface {
	// ServesSources reports whether Archive can serve anything.
	ServesSources() bool
	// Archive writes the archive of a repository of the tenant at commit
	// to the writer open returns, calling open only once the access is
	// checked.
	Archive(ctx context.Context, tenant, repo, commit string, open func() io.Writer) error
}

// Config configures the Service.
type Config struct {
	Store store.Store
	Clock clock.Clock
	Runs  Runs
	// Repos archives the configured repositories (nil: none).
	Repos Archiver
	// Hosted archives the Git host's repositories (nil: none).
	Hosted Hosted
	// APIURL is the server's address as runners call it; tickets are URLs
	// under it.
	APIURL string
	// TicketTTL is how long a source ticket may wait for its use.
	TicketTTL time.Duration
}

// Service is the source ticket service.
type Service struct {
	store  store.Store
	clock  clock.Clock
	runs   Runs
	repos  Archiver
	hosted Hosted
	apiURL string
	ttl    time.Duration
}

// New returns a Service.
func New(cfg Config) *Service {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.TicketTTL <= 0 {
		cfg.TicketTTL = DefaultTicketTTL
	}
	return &Service{store: cfg.Store, clock: cfg.Clock, runs: cfg.Runs, repos: cfg.Repos, hosted: cfg.Hosted,
		apiURL: cfg.APIURL, ttl: cfg.TicketTTL}
}

func (s *Service) audit(ctx context.Context, tx store.Tx, tenant, actor, action, subject string, details any) error {
	return audit.Recorder{Clock: s.clock}.Append(ctx, tx, tenant, actor, action, subject, details)
}

// pinned is the source of a run's pinned spec: the repository and the
// commit the run service pinned at request time.
type pinned struct {
	Repo   string `json:"repo"`
	Commit string `json:"commit"`
}

func pinnedSource(r *store.Run) (*pinned, error) {
	var spec struct {
		Source *pinned `json:"source"`
	}
	err := json.Unmarshal(r.Spec, &spec)
	return spec.Source, err
}

// attemptCheck reads and checks, in tx, the live attempt a call names,
// with its run, the store's time, the audit log's actor and the runner
// whose registration bounds what may be fetched.
type attemptCheck func(ctx context.Context, tx store.Tx) (*store.Attempt, *store.Run, time.Time, string, *store.Runner, error)

// AttemptSource answers a runner's source request: a single-use ticket for
// a managed runner, only the repository and commit for a self-hosted one.
func (s *Service) AttemptSource(ctx context.Context, call *principal.RunnerCall) (*protocol.SourceAnswer, error) {
	return s.attemptSource(ctx, func(ctx context.Context, tx store.Tx) (*store.Attempt, *store.Run, time.Time, string, *store.Runner, error) {
		a, r, now, err := s.runs.RunnerAttempt(ctx, tx, call)
		return a, r, now, "runner:" + call.Runner.ID, call.Runner, err
	})
}

// JobSource is AttemptSource for a job that presents its run token (the
// Kubernetes executor's pod): the answer the attempt's runner would get,
// under its registration's allowed_repos and self-hosted flag.
func (s *Service) JobSource(ctx context.Context, call *principal.JobCall) (*protocol.SourceAnswer, error) {
	return s.attemptSource(store.WithTenant(ctx, call.Tenant), func(ctx context.Context, tx store.Tx) (*store.Attempt, *store.Run, time.Time, string, *store.Runner, error) {
		a, r, now, runner, err := s.runs.JobAttempt(ctx, tx, call)
		return a, r, now, "run:" + call.Run, runner, err
	})
}

func (s *Service) attemptSource(ctx context.Context, check attemptCheck) (*protocol.SourceAnswer, error) {
	ticket := id.Secret(32)
	var out *protocol.SourceAnswer
	err := s.store.InTx(ctx, func(tx store.Tx) error {
		a, r, now, actor, runner, err := check(ctx, tx)
		if err != nil {
			return err
		}
		src, err := pinnedSource(r)
		if err != nil {
			return err
		}
		if src == nil {
			return fmt.Errorf("job %s has no source: %w", r.Job, protocol.ErrNotFound)
		}
		if len(runner.AllowedRepos) > 0 && !slices.Contains(runner.AllowedRepos, src.Repo) {
			return fmt.Errorf("runner %s may not fetch repository %s: %w", runner.ID, src.Repo, protocol.ErrForbidden)
		}
		if runner.SelfHosted {
			out = &protocol.SourceAnswer{Kind: protocol.SourceKindDescriptor, Repo: src.Repo, Commit: src.Commit}
			return nil
		}
		expires := now.Add(s.ttl)
		if a.Deadline != nil && a.Deadline.Before(expires) {
			expires = *a.Deadline
		}
		t := &store.SourceTicket{Digest: protocol.SHA256Hex([]byte(ticket)), Tenant: r.Tenant, RunID: r.ID, AttemptID: a.ID,
			LeaseDigest: a.LeaseDigest, Repo: src.Repo, Commit: src.Commit, ExpiresAt: expires, CreatedAt: clock.NowOrZero(s.clock)}
		if err := tx.SourceTicketCreate(ctx, t); err != nil {
			return err
		}
		exp := expires.UTC()
		out = &protocol.SourceAnswer{Kind: protocol.SourceKindTicket, URL: s.apiURL + "/v1/sources/" + ticket, ExpiresAt: &exp, Repo: src.Repo, Commit: src.Commit}
		return s.audit(ctx, tx, r.Tenant, actor, "source.ticket_issued", r.ID,
			map[string]any{"attempt": a.ID, "repo": src.Repo, "commit": src.Commit, "expires_at": exp})
	})
	if err != nil {
		return nil, store.Refusal(err)
	}
	return out, nil
}

// RedeemSource uses a ticket, once, while its attempt still holds the lease
// it was issued under, and writes the archive of the ticket's commit to the
// writer open returns. open is not called when anything is refused.
func (s *Service) RedeemSource(ctx context.Context, ticket string, open func() io.Writer) error {
	if s.repos == nil && (s.hosted == nil || !s.hosted.ServesSources()) {
		return fmt.Errorf("this server has no source repositories: %w", protocol.ErrSourceUnavailable)
	}
	var t *store.SourceTicket
	err := s.store.InTx(ctx, func(tx store.Tx) (err error) {
		// The ticket is what tells the tenant (lookup by its digest).
		t, err = tx.SourceTicketUse(store.WithSystem(ctx, "source ticket"), protocol.SHA256Hex([]byte(ticket)), s.clock.NowOrNil())
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("the source ticket is unknown, used or expired: %w", protocol.ErrTicketExpired)
		}
		if err != nil {
			return err
		}
		ctx := store.WithTenant(ctx, t.Tenant)
		if err := s.runs.HoldsLease(ctx, tx, t.AttemptID, t.LeaseDigest); err != nil {
			if errors.As(err, new(*protocol.Error)) {
				return protocol.Refused(protocol.ErrTicketExpired, fmt.Errorf("the source ticket's attempt no longer holds its lease (%w)", err))
			}
			return err
		}
		return s.audit(ctx, tx, t.Tenant, "attempt:"+t.AttemptID, "source.redeemed", t.RunID,
			map[string]any{"attempt": t.AttemptID, "repo": t.Repo, "commit": t.Commit})
	})
	if err != nil {
		return store.Refusal(err)
	}
	ctx = store.WithTenant(ctx, t.Tenant)
	if hostedRepo(t.Repo) {
		if s.hosted == nil {
			return fmt.Errorf("this server has no GitHub App source broker: %w", protocol.ErrSourceUnavailable)
		}
		return s.hosted.Archive(ctx, t.Tenant, t.Repo, t.Commit, open)
	}
	if s.repos == nil {
		return fmt.Errorf("this server has no source repositories: %w", protocol.ErrSourceUnavailable)
	}
	if err := s.repos.Archive(ctx, t.Repo, t.Commit, open); err != nil {
		return protocol.Refused(protocol.ErrSourceUnavailable, fmt.Errorf("archive %s at %s: %w", t.Repo, t.Commit, err))
	}
	return nil
}

// hostedRepo tells a repository of a Git host (owner/name, served by
// Hosted) from a configured repository, whose names have no slash.
func hostedRepo(repo string) bool { return strings.Contains(repo, "/") }
