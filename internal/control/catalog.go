package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// CatalogSource is implemented by Definitions read from a repository: it
// lists what each channel serves, fetches, and takes back the active commits
// persisted before a restart. Definitions without it (test fakes) simply have
// no catalog API.
type CatalogSource interface {
	// Channels maps each channel to its branch or branch pattern.
	Channels() map[string]string
	// IsPattern reports whether requests to the channel must name a branch.
	IsPattern(channel string) bool
	// Sync fetches the repository (a no-op when it is read in place).
	Sync(ctx context.Context) error
	// Observe resolves every channel and every branch of pattern channels.
	Observe(ctx context.Context) []ChannelObservation
	// Seed restores a persisted active commit of a channel's branch.
	Seed(channel, branch, commit string) error
}

// JobCatalog is implemented by a Catalog that can describe its jobs.
type JobCatalog interface {
	Catalog
	// Jobs lists every job (without runbook text), by name.
	Jobs() []JobInfo
	// Describe returns one job with its runbook rendered as plain text.
	Describe(name string) (JobInfo, bool)
	// Principals lists every principal the definitions name (group members
	// and users of rules), sorted.
	Principals() []string
}

// ChannelObservation is what a channel's branch serves now.
type ChannelObservation struct {
	Channel string
	Branch  string
	Head    string
	Active  *CommitInfo // nil when no commit of the branch validates
	// Rejected are the rejected commits the source has seen, oldest first.
	Rejected []RejectedCommit
	// Err says why the branch could not be read (missing branch, say).
	Err string
}

// CommitInfo names a commit, its author and its commit time.
type CommitInfo struct {
	Commit string
	Author string
	At     time.Time
}

// RejectedCommit is a commit that did not validate, with every error.
type RejectedCommit struct {
	CommitInfo
	Errors []CatalogError
}

// CatalogError is one validation error of a rejected commit.
type CatalogError struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Column  int    `json:"column"`
	Message string `json:"message"`
}

// CatalogsView is the answer of GET /v1/catalogs (PROTOCOL.md).
type CatalogsView struct {
	Channels []ChannelView `json:"channels"`
}

// ChannelView is one branch of one channel.
type ChannelView struct {
	Channel      string         `json:"channel"`
	Branch       string         `json:"branch"`
	ActiveCommit string         `json:"active_commit"`
	ActivatedAt  *time.Time     `json:"activated_at"`
	Author       string         `json:"author,omitempty"`
	Head         string         `json:"head,omitempty"`
	Error        string         `json:"error,omitempty"`
	Rejected     []RejectedView `json:"rejected"`
}

// RejectedView is a rejected commit as the API shows it; At is when the
// server rejected it.
type RejectedView struct {
	Commit      string         `json:"commit"`
	Author      string         `json:"author,omitempty"`
	CommittedAt time.Time      `json:"committed_at"`
	At          time.Time      `json:"at"`
	Errors      []CatalogError `json:"errors"`
}

// JobInfo describes a job of a catalog.
type JobInfo struct {
	Name        string          `json:"name"`
	File        string          `json:"file"`
	Description string          `json:"description,omitempty"`
	Owners      []string        `json:"owners"`
	Runbook     string          `json:"runbook,omitempty"`
	RunbookText string          `json:"runbook_text,omitempty"`
	Definition  json.RawMessage `json:"definition,omitempty"`

	// RunbookMarkdown is the runbook's source, for the web UI to render.
	RunbookMarkdown string `json:"-"`
}

// JobsView is the answer of GET /v1/jobs.
type JobsView struct {
	Channel string    `json:"channel"`
	Branch  string    `json:"branch"`
	Commit  string    `json:"commit"`
	Jobs    []JobInfo `json:"jobs"`
}

// JobView is the answer of GET /v1/jobs/{name}.
type JobView struct {
	Channel string `json:"channel"`
	Branch  string `json:"branch"`
	Commit  string `json:"commit"`
	JobInfo
	// MayRun lists the principals the definitions name whom the policies
	// allow to run the job, evaluated with the job's default parameters.
	MayRun []PrincipalAccess `json:"may_run"`
}

// PrincipalAccess is one principal allowed to run a job.
type PrincipalAccess struct {
	Principal string               `json:"principal"`
	Rule      string               `json:"rule,omitempty"`
	Approval  *ApprovalRequirement `json:"approval,omitempty"`
}

// maxRejectedShown bounds the rejected commits shown per channel branch.
const maxRejectedShown = 5

// catalogTenant is the tenant the background sync records under: one
// repository serves the default tenant (ARCHITECTURE.md: "default" locally).
const catalogTenant = "default"

func (s *Service) catalogSource() (CatalogSource, error) {
	cs, ok := s.defs.(CatalogSource)
	if !ok {
		return nil, fmt.Errorf("no definitions repository configured: %w", protocol.ErrCatalogUnavailable)
	}
	return cs, nil
}

// refFor is the ref to resolve a run's channel with at dispatch: the run's
// branch for a pattern channel, none for a fixed channel (whose branch is
// the channel's own).
func (s *Service) refFor(r *store.Run) string {
	if cs, ok := s.defs.(CatalogSource); ok && cs.IsPattern(r.Channel) {
		return r.Ref
	}
	return ""
}

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
	t, err := s.store.TenantEnsure(ctx, catalogTenant, s.clock.NowOrNil())
	if err != nil {
		return store.Refusal(err)
	}
	rows, err := s.store.CatalogList(ctx, &store.CatalogListParams{Tenant: t.ID, Status: store.CatalogActive})
	if err != nil {
		return store.Refusal(err)
	}
	for _, c := range rows {
		if err := cs.Seed(c.Channel, c.Branch, c.Commit); err != nil {
			s.log.WarnContext(ctx, "control: persisted active catalog not restored", "channel", c.Channel, "branch", c.Branch, "commit", c.Commit, "err", err)
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
	t, err := s.store.TenantEnsure(ctx, catalogTenant, s.clock.NowOrNil())
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
			Author: a.Author, CommittedAt: a.At, LoadedAt: s.nowValue()}
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
		s.log.InfoContext(ctx, "control: catalog activated", "channel", o.Channel, "branch", o.Branch, "commit", a.Commit)
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
			Errors: errsJSON, Author: r.Author, CommittedAt: r.At, LoadedAt: s.nowValue()}
		if err := tx.CatalogInsert(ctx, c); errors.Is(err, store.ErrAlreadyExists) {
			return nil
		} else if err != nil {
			return err
		}
		s.log.WarnContext(ctx, "control: catalog rejected", "channel", o.Channel, "branch", o.Branch, "commit", r.Commit, "errors", len(r.Errors))
		return s.audit(ctx, tx, tenant, "system:gitsync", "catalog.rejected", o.Channel+"@"+r.Commit, map[string]any{
			"channel": o.Channel, "branch": o.Branch, "commit": r.Commit, "author": r.Author, "committed_at": r.At.UTC(), "errors": r.Errors,
		})
	})
}

// SyncCatalogs fetches and records now (admin), then answers the catalogs.
func (s *Service) SyncCatalogs(ctx context.Context, actor principal.Actor) (*CatalogsView, error) {
	ctx = store.WithSystem(ctx, "catalog sync") // cross-tenant by nature (docs/operations.md)
	if err := principal.RequireAdmin(actor); err != nil {
		return nil, err
	}
	if _, err := s.catalogSource(); err != nil {
		return nil, err
	}
	if err := s.RefreshCatalogs(ctx); err != nil {
		// The answer still shows what is served; the failure is logged.
		s.log.WarnContext(ctx, "control: catalog sync failed", "err", err)
	}
	return s.Catalogs(ctx, actor)
}

// Catalogs shows, for every channel branch, the active commit and when it
// was activated, and the newest rejected commits with their errors.
func (s *Service) Catalogs(ctx context.Context, actor principal.Actor) (*CatalogsView, error) {
	in, err := s.installationOf(ctx, actor)
	if err != nil {
		return nil, err
	}
	if in != nil {
		return s.tenantCatalogs(ctx, in)
	}
	cs, err := s.catalogSource()
	if err != nil {
		return nil, err
	}
	out := &CatalogsView{Channels: []ChannelView{}}
	for _, o := range cs.Observe(ctx) {
		v := ChannelView{Channel: o.Channel, Branch: o.Branch, Head: o.Head, Error: o.Err, Rejected: []RejectedView{}}
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
			rv := RejectedView{Commit: c.Commit, Author: c.Author, CommittedAt: c.CommittedAt.UTC(), At: c.LoadedAt.UTC(), Errors: []CatalogError{}}
			_ = json.Unmarshal(c.Errors, &rv.Errors)
			v.Rejected = append(v.Rejected, rv)
			seen[c.Commit] = true
		}
		// Rejections not recorded yet (the next sync records them).
		for _, r := range slices.Backward(o.Rejected) {
			if !seen[r.Commit] && len(v.Rejected) < maxRejectedShown {
				v.Rejected = append(v.Rejected, RejectedView{Commit: r.Commit, Author: r.Author, CommittedAt: r.At.UTC(), At: r.At.UTC(), Errors: r.Errors})
			}
		}
		out.Channels = append(out.Channels, v)
	}
	return out, nil
}

// jobCatalog resolves a channel for the jobs API; an empty channel means the
// only one, when there is only one.
func (s *Service) jobCatalog(ctx context.Context, actor principal.Actor, channel, ref string) (JobCatalog, string, error) {
	in, err := s.installationOf(ctx, actor)
	if err != nil {
		return nil, "", err
	}
	if in != nil {
		// An installation's tenant sees what its requests would run: its
		// .jobplane definitions, else the server's, on the GitHub channel.
		if channel == "" {
			channel = s.githubChannel()
		}
		if channel != s.githubChannel() {
			return nil, "", fmt.Errorf("channel %q: the definitions of GitHub installation %d (%s) are served on channel %s only: %w",
				channel, in.ID, in.Account, s.githubChannel(), protocol.ErrUnknownChannel)
		}
		cat, err := s.githubCatalogWithin(ctx, in, TenantScheduleRefresh)
		if err != nil {
			return nil, "", err
		}
		jc, ok := cat.(JobCatalog)
		if !ok {
			return nil, "", fmt.Errorf("definitions cannot list jobs: %w", protocol.ErrCatalogUnavailable)
		}
		return jc, channel, nil
	}
	if s.defs == nil {
		return nil, "", fmt.Errorf("no definitions repository configured: %w", protocol.ErrCatalogUnavailable)
	}
	if channel == "" {
		if cs, ok := s.defs.(CatalogSource); ok && len(cs.Channels()) == 1 {
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
func (s *Service) ListJobs(ctx context.Context, actor principal.Actor, channel, ref string) (*JobsView, error) {
	cat, channel, err := s.jobCatalog(ctx, actor, channel, ref)
	if err != nil {
		return nil, err
	}
	jobs := cat.Jobs()
	if jobs == nil {
		jobs = []JobInfo{}
	}
	return &JobsView{Channel: channel, Branch: cat.Branch(), Commit: cat.Commit(), Jobs: jobs}, nil
}

// ShowJob describes one job of a channel's active commit and who may run
// it: every principal the definitions name is put to the policies with the
// job's default parameters, and those allowed are listed with the approval
// they would need. Rules conditioned on other parameter values may allow
// more than the list shows.
func (s *Service) ShowJob(ctx context.Context, actor principal.Actor, channel, ref, name string) (*JobView, error) {
	cat, channel, err := s.jobCatalog(ctx, actor, channel, ref)
	if err != nil {
		return nil, err
	}
	info, ok := cat.Describe(name)
	if !ok {
		return nil, fmt.Errorf("no job %q in channel %s at %s: %w", name, channel, short(cat.Commit()), protocol.ErrUnknownJob)
	}
	out := &JobView{Channel: channel, Branch: cat.Branch(), Commit: cat.Commit(), JobInfo: info}
	out.MayRun, err = s.mayRun(ctx, actor, cat, channel, name)
	return out, err
}

// installationOf is the GitHub installation of the caller's tenant, or nil.
func (s *Service) installationOf(ctx context.Context, actor principal.Actor) (*store.GitHubInstallation, error) {
	in, err := s.store.GitHubInstallationGetByTenant(ctx, actor.TenantID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	return in, store.Refusal(err)
}

// tenantCatalogs is the catalogs view of an installation's tenant: the one
// channel its definitions are served on, at the commit its requests would
// use. The server's rejected commits and their authors are the operator's
// business and are not shown to a tenant that uses the server's
// definitions; a tenant's own .jobplane errors are in the server log.
func (s *Service) tenantCatalogs(ctx context.Context, in *store.GitHubInstallation) (*CatalogsView, error) {
	v := ChannelView{Channel: s.githubChannel(), Rejected: []RejectedView{}}
	cat, err := s.githubCatalogWithin(ctx, in, TenantScheduleRefresh)
	if err != nil {
		if !errors.Is(err, protocol.ErrCatalogUnavailable) && !errors.Is(err, protocol.ErrUnavailable) {
			return nil, err
		}
		v.Error = err.Error()
	} else {
		v.Branch, v.ActiveCommit, v.Head = cat.Branch(), cat.Commit(), cat.Commit()
	}
	return &CatalogsView{Channels: []ChannelView{v}}, nil
}
