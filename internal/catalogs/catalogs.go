package catalogs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// maxRejectedShown bounds the rejected commits shown per channel branch.
const maxRejectedShown = 5

// Tenants serves the definitions of tenants that have their own (the
// GitHub App's installations, a *githubapp.Service).
type Tenants interface {
	// ViewCatalog is the catalog the tenant's views (jobs, catalogs) show
	// on channel, or on its only channel when channel is empty, which it
	// returns as servedOn. bound is false when the tenant sees the
	// server's definitions.
	ViewCatalog(ctx context.Context, tenant, channel string) (cat control.Catalog, servedOn string, bound bool, err error)
}

// Runs reads runs for RunJob (a *control.Service).
type Runs interface {
	GetRun(ctx context.Context, actor principal.Actor, runID string) (*control.RunView, error)
}

var _ Runs = (*control.Service)(nil)

// Config configures the Service.
type Config struct {
	Store  store.Store
	Clock  clock.Clock
	Logger *slog.Logger
	// Definitions are the server's; those that are a Source
	// have catalogs to record and show.
	Definitions control.Definitions
	// Tenants: nil when every tenant sees the server's definitions.
	Tenants Tenants
	// Runs reads the runs whose pinned job RunJob describes.
	Runs Runs
}

// Service records and shows what the definitions serve.
type Service struct {
	store   store.Store
	clock   clock.Clock
	log     *slog.Logger
	defs    control.Definitions
	tenants Tenants
	runs    Runs
}

// New returns a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("catalogs: Store is required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{store: cfg.Store, clock: cfg.Clock, log: cfg.Logger, defs: cfg.Definitions, tenants: cfg.Tenants, runs: cfg.Runs}, nil
}

func (s *Service) catalogSource() (Source, error) {
	cs, ok := s.defs.(Source)
	if !ok {
		return nil, fmt.Errorf("no definitions repository configured: %w", protocol.ErrCatalogUnavailable)
	}
	return cs, nil
}

func (s *Service) audit(ctx context.Context, tx store.Tx, tenant, actor, action, subject string, details any) error {
	return audit.Recorder{Clock: s.clock}.Append(ctx, tx, tenant, actor, action, subject, details)
}

// short is a commit's abbreviation in messages.
func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

func ptr[T any](v T) *T { return &v }

// LoadCatalogs hands the active commits persisted by earlier processes back
// to the definitions, so that the last good catalog survives a restart even
// when a branch's head is now bad. A commit the repository no longer holds
// is skipped.
func (s *Service) LoadCatalogs(ctx context.Context) error {
	ctx = store.WithSystem(ctx, "catalog load") // cross-tenant by nature (docs/operations.md)
	cs, err := s.catalogSource()
	if err != nil {
		return nil
	}
	t, err := s.store.TenantEnsure(ctx, principal.DefaultTenant, s.clock.NowOrNil())
	if err != nil {
		return store.Refusal(err)
	}
	rows, err := s.store.CatalogList(ctx, &store.CatalogListParams{Tenant: t.ID, Status: store.CatalogActive})
	if err != nil {
		return store.Refusal(err)
	}
	for _, c := range rows {
		if err := cs.Seed(c.Channel, c.Branch, c.Commit); err != nil {
			s.log.WarnContext(ctx, "catalogs: persisted active catalog not restored", "channel", c.Channel, "branch", c.Branch, "commit", c.Commit, "err", err)
		}
	}
	return nil
}

// RefreshCatalogs fetches the repository, resolves every channel and records
// each activation and rejection the first time it is seen, with its audit
// event in the same transaction. A failed fetch is reported but the mirror's
// current state is still recorded.
func (s *Service) RefreshCatalogs(ctx context.Context) error {
	ctx = store.WithSystem(ctx, "catalog sync") // cross-tenant by nature (docs/operations.md)
	cs, err := s.catalogSource()
	if err != nil {
		return nil
	}
	syncErr := cs.Sync(ctx)
	t, err := s.store.TenantEnsure(ctx, principal.DefaultTenant, s.clock.NowOrNil())
	if err != nil {
		return store.Refusal(err)
	}
	var errs []error
	for _, o := range cs.Observe(ctx) {
		if err := s.recordObservation(ctx, t.ID, o); err != nil {
			errs = append(errs, fmt.Errorf("record catalog of %s (%s): %w", o.Channel, o.Branch, err))
		}
	}
	return errors.Join(append([]error{syncErr}, errs...)...)
}

func (s *Service) recordObservation(ctx context.Context, tenant string, o ChannelObservation) error {
	if o.Active != nil {
		cur, err := s.store.CatalogGet(ctx, tenant, o.Channel, o.Branch, o.Active.Commit)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if err != nil || cur.Status != store.CatalogActive {
			if err := s.activate(ctx, tenant, o); err != nil {
				return err
			}
		}
	}
	for _, r := range o.Rejected {
		if _, err := s.store.CatalogGet(ctx, tenant, o.Channel, o.Branch, r.Commit); err == nil {
			continue
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if err := s.reject(ctx, tenant, o, r); err != nil {
			return err
		}
	}
	return nil
}

func (s *Service) activate(ctx context.Context, tenant string, o ChannelObservation) error {
	a := o.Active
	return s.store.InTx(ctx, func(tx store.Tx) error {
		c := &store.Catalog{Tenant: tenant, Channel: o.Channel, Branch: o.Branch, Commit: a.Commit, Status: store.CatalogActive,
			Author: a.Author, CommittedAt: a.At, LoadedAt: clock.NowOrZero(s.clock)}
		cur, err := tx.CatalogGet(ctx, tenant, o.Channel, o.Branch, a.Commit)
		switch {
		case errors.Is(err, store.ErrNotFound):
			err = tx.CatalogInsert(ctx, c)
		case err != nil:
		case cur.Status == store.CatalogActive:
			return nil // another replica got there first
		default:
			err = tx.CatalogSetStatus(ctx, c)
		}
		if err != nil {
			return err
		}
		n, err := tx.CatalogSupersede(ctx, tenant, o.Channel, o.Branch, a.Commit)
		if err != nil {
			return err
		}
		s.log.InfoContext(ctx, "catalogs: catalog activated", "channel", o.Channel, "branch", o.Branch, "commit", a.Commit)
		return s.audit(ctx, tx, tenant, "system:gitsync", "catalog.activated", o.Channel+"@"+a.Commit, map[string]any{
			"channel": o.Channel, "branch": o.Branch, "commit": a.Commit, "author": a.Author, "committed_at": a.At.UTC(), "superseded": n,
		})
	})
}

func (s *Service) reject(ctx context.Context, tenant string, o ChannelObservation, r RejectedCommit) error {
	errsJSON, err := json.Marshal(r.Errors)
	if err != nil {
		return err
	}
	return s.store.InTx(ctx, func(tx store.Tx) error {
		c := &store.Catalog{Tenant: tenant, Channel: o.Channel, Branch: o.Branch, Commit: r.Commit, Status: store.CatalogRejected,
			Errors: errsJSON, Author: r.Author, CommittedAt: r.At, LoadedAt: clock.NowOrZero(s.clock)}
		if err := tx.CatalogInsert(ctx, c); errors.Is(err, store.ErrAlreadyExists) {
			return nil
		} else if err != nil {
			return err
		}
		s.log.WarnContext(ctx, "catalogs: catalog rejected", "channel", o.Channel, "branch", o.Branch, "commit", r.Commit, "errors", len(r.Errors))
		return s.audit(ctx, tx, tenant, "system:gitsync", "catalog.rejected", o.Channel+"@"+r.Commit, map[string]any{
			"channel": o.Channel, "branch": o.Branch, "commit": r.Commit, "author": r.Author, "committed_at": r.At.UTC(), "errors": r.Errors,
		})
	})
}

// SyncCatalogs fetches and records now (admin), then answers the catalogs.
func (s *Service) SyncCatalogs(ctx context.Context, actor principal.Actor) (*protocol.CatalogsView, error) {
	ctx = store.WithSystem(ctx, "catalog sync") // cross-tenant by nature (docs/operations.md)
	if err := principal.RequireAdmin(actor); err != nil {
		return nil, err
	}
	if _, err := s.catalogSource(); err != nil {
		return nil, err
	}
	if err := s.RefreshCatalogs(ctx); err != nil {
		// The answer still shows what is served; the failure is logged.
		s.log.WarnContext(ctx, "catalogs: catalog sync failed", "err", err)
	}
	return s.Catalogs(ctx, actor)
}

// Catalogs shows, for every channel branch, the active commit and when it
// was activated, and the newest rejected commits with their errors.
func (s *Service) Catalogs(ctx context.Context, actor principal.Actor) (*protocol.CatalogsView, error) {
	if s.tenants != nil {
		// An installation's tenant sees the one channel its definitions
		// are served on, at the commit its requests would use. The
		// server's rejected commits and their authors are the operator's
		// business and are not shown to it; a tenant's own errors are in
		// the server log.
		cat, channel, bound, err := s.tenants.ViewCatalog(ctx, actor.TenantID, "")
		switch {
		case bound:
			v := protocol.ChannelView{Channel: channel, Rejected: []protocol.RejectedView{}}
			if err != nil {
				if !errors.Is(err, protocol.ErrCatalogUnavailable) && !errors.Is(err, protocol.ErrUnavailable) {
					return nil, err
				}
				v.Error = err.Error()
			} else {
				v.Branch, v.ActiveCommit, v.Head = cat.Branch(), cat.Commit(), cat.Commit()
			}
			return &protocol.CatalogsView{Channels: []protocol.ChannelView{v}}, nil
		case err != nil:
			return nil, err
		}
	}
	cs, err := s.catalogSource()
	if err != nil {
		return nil, err
	}
	out := &protocol.CatalogsView{Channels: []protocol.ChannelView{}}
	for _, o := range cs.Observe(ctx) {
		v := protocol.ChannelView{Channel: o.Channel, Branch: o.Branch, Head: o.Head, Error: o.Err, Rejected: []protocol.RejectedView{}}
		if o.Active != nil {
			v.ActiveCommit, v.Author = o.Active.Commit, o.Active.Author
			if c, err := s.store.CatalogGet(ctx, actor.TenantID, o.Channel, o.Branch, o.Active.Commit); err == nil {
				v.ActivatedAt = ptr(c.LoadedAt.UTC())
			} else if !errors.Is(err, store.ErrNotFound) {
				return nil, store.Refusal(err)
			}
		}
		rows, err := s.store.CatalogList(ctx, &store.CatalogListParams{Tenant: actor.TenantID, Channel: o.Channel, Status: store.CatalogRejected})
		if err != nil {
			return nil, store.Refusal(err)
		}
		seen := map[string]bool{}
		for _, c := range rows {
			if c.Branch != o.Branch || len(v.Rejected) == maxRejectedShown {
				continue
			}
			rv := protocol.RejectedView{Commit: c.Commit, Author: c.Author, CommittedAt: c.CommittedAt.UTC(), At: c.LoadedAt.UTC(), Errors: []protocol.CatalogError{}}
			_ = json.Unmarshal(c.Errors, &rv.Errors)
			v.Rejected = append(v.Rejected, rv)
			seen[c.Commit] = true
		}
		// Rejections not recorded yet (the next sync records them).
		for _, r := range slices.Backward(o.Rejected) {
			if !seen[r.Commit] && len(v.Rejected) < maxRejectedShown {
				v.Rejected = append(v.Rejected, protocol.RejectedView{Commit: r.Commit, Author: r.Author, CommittedAt: r.At.UTC(), At: r.At.UTC(), Errors: r.Errors})
			}
		}
		out.Channels = append(out.Channels, v)
	}
	return out, nil
}

// jobCatalog resolves a channel for the jobs API; an empty channel means the
// only one, when there is only one.
func (s *Service) jobCatalog(ctx context.Context, actor principal.Actor, channel, ref string) (JobCatalog, string, error) {
	if s.tenants != nil {
		// An installation's tenant sees what its requests would run.
		cat, servedOn, bound, err := s.tenants.ViewCatalog(ctx, actor.TenantID, channel)
		if err != nil {
			return nil, "", err
		}
		if bound {
			jc, ok := cat.(JobCatalog)
			if !ok {
				return nil, "", fmt.Errorf("definitions cannot list jobs: %w", protocol.ErrCatalogUnavailable)
			}
			return jc, servedOn, nil
		}
	}
	if s.defs == nil {
		return nil, "", fmt.Errorf("no definitions repository configured: %w", protocol.ErrCatalogUnavailable)
	}
	if channel == "" {
		if cs, ok := s.defs.(Source); ok && len(cs.Channels()) == 1 {
			for ch := range cs.Channels() {
				channel = ch
			}
		} else {
			return nil, "", fmt.Errorf("channel is required: %w", protocol.ErrBadRequest)
		}
	}
	cat, err := s.defs.Resolve(ctx, channel, ref)
	if err != nil {
		return nil, "", err
	}
	jc, ok := cat.(JobCatalog)
	if !ok {
		return nil, "", fmt.Errorf("definitions cannot list jobs: %w", protocol.ErrCatalogUnavailable)
	}
	return jc, channel, nil
}

// ListJobs lists the jobs of a channel's active commit.
func (s *Service) ListJobs(ctx context.Context, actor principal.Actor, channel, ref string) (*protocol.JobsView, error) {
	cat, channel, err := s.jobCatalog(ctx, actor, channel, ref)
	if err != nil {
		return nil, err
	}
	jobs := cat.Jobs()
	if jobs == nil {
		jobs = []protocol.JobInfo{}
	}
	return &protocol.JobsView{Channel: channel, Branch: cat.Branch(), Commit: cat.Commit(), Jobs: jobs}, nil
}

// ShowJob describes one job of a channel's active commit and who may run
// it: every principal the definitions name is put to the policies with the
// job's default parameters, and those allowed are listed with the approval
// they would need. Rules conditioned on other parameter values may allow
// more than the list shows.
func (s *Service) ShowJob(ctx context.Context, actor principal.Actor, channel, ref, name string) (*protocol.JobView, error) {
	cat, channel, err := s.jobCatalog(ctx, actor, channel, ref)
	if err != nil {
		return nil, err
	}
	info, ok := cat.Describe(name)
	if !ok {
		return nil, fmt.Errorf("no job %q in channel %s at %s: %w", name, channel, short(cat.Commit()), protocol.ErrUnknownJob)
	}
	out := &protocol.JobView{Channel: channel, Branch: cat.Branch(), Commit: cat.Commit(), JobInfo: info}
	out.MayRun, err = s.mayRun(ctx, actor, cat, channel, name)
	out.ActorNamed = slices.Contains(cat.Principals(), actor.Name)
	return out, err
}

// CommitDefinitions is implemented by Definitions that can read the
// definitions of any commit, not only a channel's active one.
type CommitDefinitions interface {
	AtCommit(channel, branch, commit string) (JobCatalog, error)
}

// RunJob describes a run's job as the commit the run pinned defines it:
// description, owners, runbook and who may run it under that commit's
// policies. Like GetRun, it shows only runs of the actor's tenant, so only
// commits that tenant's runs were pinned to can be browsed this way.
func (s *Service) RunJob(ctx context.Context, actor principal.Actor, runID string) (*protocol.JobView, error) {
	v, err := s.runs.GetRun(ctx, actor, runID)
	if err != nil {
		return nil, err
	}
	cd, ok := s.defs.(CommitDefinitions)
	if !ok {
		return nil, fmt.Errorf("definitions cannot be read at a commit: %w", protocol.ErrCatalogUnavailable)
	}
	r := v.Run
	cat, err := cd.AtCommit(r.Channel, r.Ref, r.Commit)
	if err != nil {
		return nil, protocol.Refused(protocol.ErrCatalogUnavailable, fmt.Errorf("definitions at %s: %w", short(r.Commit), err))
	}
	info, ok := cat.Describe(r.Job)
	if !ok {
		return nil, fmt.Errorf("no job %q at %s: %w", r.Job, short(r.Commit), protocol.ErrUnknownJob)
	}
	out := &protocol.JobView{Channel: r.Channel, Branch: r.Ref, Commit: r.Commit, JobInfo: info}
	out.MayRun, err = s.mayRun(ctx, actor, cat, r.Channel, r.Job)
	return out, err
}

// mayRun puts every principal the definitions name to the policies with
// the job's default parameters (as ShowJob does).
func (s *Service) mayRun(ctx context.Context, actor principal.Actor, cat JobCatalog, channel, name string) ([]protocol.PrincipalAccess, error) {
	params, err := cat.ValidateParams(name, json.RawMessage(`{}`))
	if err != nil {
		params = json.RawMessage(`{}`)
	}
	branch := cat.Branch()
	source, _ := json.Marshal(map[string]string{"kind": "api", "ref": branch, "commit": cat.Commit()})
	now := s.clock.Now()
	out := []protocol.PrincipalAccess{}
	for _, p := range cat.Principals() {
		kind := "user"
		if pr, err := s.store.PrincipalGetByName(ctx, actor.TenantID, p); err == nil {
			kind = pr.Kind
		} else if !errors.Is(err, store.ErrNotFound) {
			return nil, store.Refusal(err)
		}
		d := cat.Decide(control.DecisionRequest{Job: name, Channel: channel, Actor: p, ActorKind: kind, Params: params,
			Ref: control.Ref{Branch: branch, Protected: cat.Protected(), Commit: cat.Commit()}, Source: source, Now: now})
		if d.Allowed {
			out = append(out, protocol.PrincipalAccess{Principal: p, Rule: d.Rule, Approval: d.Approval})
		}
	}
	return out, nil
}
