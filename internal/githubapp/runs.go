package githubapp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/github"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// Pull-request runs (docs/github.md): a pull_request delivery requests one
// run per job of the installation's tenant whose `on.pull_request` matches,
// as the built-in principal "github", pinned to the head commit. The
// idempotency key of each run is derived from the delivery ID, so a
// redelivery (or a concurrent copy) finds the runs already requested.

// DefaultChannel is the channel pull-request runs are requested on
// when GitHubRuns.Channel is empty.
const DefaultChannel = "prod"

// Catalogs resolves the definitions of an installation's tenant.
type Catalogs interface {
	// TenantCatalog returns the definitions of the installation's
	// .jobplane repository at its default branch's head, or nil (and no
	// error) when the installation has no such repository.
	TenantCatalog(ctx context.Context, in *store.GitHubInstallation) (control.Catalog, error)
}

// PullRequestCatalog is a control.Catalog whose jobs may declare on.pull_request.
type PullRequestCatalog interface {
	control.Catalog
	// PullRequestJobs lists the jobs a pull_request action requests, by name.
	PullRequestJobs(action string, draft bool) []string
}

// runOrigin is what a pull-request run is pinned to.
type runOrigin struct {
	Installation int64
	Repo         string
	HeadSHA      string
	PR           int
	Fork         bool
	HeadRef      string
}

// pin adds the repository and commit to the spec, and applies safe mode to
// a fork's run unless the deciding rule lifts it: managed runners only, no
// connectors, no grants.
func (g *runOrigin) pin(spec *control.Spec, d *control.Decision) {
	env := maps.Clone(spec.Env) // the catalog's map is shared
	if env == nil {
		env = map[string]string{}
	}
	env["JOBPLANE_GITHUB_REPOSITORY"] = g.Repo
	env["JOBPLANE_GITHUB_SHA"] = g.HeadSHA
	env["JOBPLANE_GITHUB_PR"] = strconv.Itoa(g.PR)
	spec.Env = env
	spec.Repo = g.Repo
	// The pull request's code is the run's source, whatever the job
	// declares: a managed runner gets a ticket for this exact commit, a
	// self-hosted one the repository and commit only.
	spec.Source = &control.SpecSource{Repo: g.Repo, Branch: g.HeadRef, Commit: g.HeadSHA}
	if g.Fork && !d.ForksFull {
		spec.SafeMode = true
		spec.Connectors = nil
		d.Grants = nil
		if d.Allowed {
			d.Explanation += "; safe mode (pull request from a fork): managed runners only, no connectors or secrets"
		}
	}
}

// checkInstallation refuses a tenant whose GitHub installation is suspended
// or deleted; tenants without one are not GitHub tenants.
func (s *Service) checkInstallation(ctx context.Context, tenant string) error {
	_, err := s.activeInstallation(ctx, tenant)
	return err
}

// activeInstallation returns the tenant's installation (nil for a tenant
// that is not a GitHub tenant), refusing a suspended or deleted one.
func (s *Service) activeInstallation(ctx context.Context, tenant string) (*store.GitHubInstallation, error) {
	// Cached: every run request and claim asks, nearly always of a tenant
	// with no installation; installation events empty the entry.
	in, err := s.store.GitHubInstallationByTenantCached(ctx, tenant)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, store.Refusal(err)
	}
	if err := installationStatusErr(in); err != nil {
		return nil, err
	}
	return in, nil
}

// installationClaimable refuses, in the claim's transaction, a tenant
// whose installation is no longer active.
func installationClaimable(ctx context.Context, tx store.Tx, tenant string) error {
	in, err := tx.GitHubInstallationGetByTenant(ctx, tenant)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil
	case err != nil:
		return err
	}
	return installationStatusErr(in)
}

func installationStatusErr(in *store.GitHubInstallation) error {
	switch in.Status {
	case store.GitHubInstallationSuspended:
		return fmt.Errorf("GitHub installation %d (%s) is suspended: %w", in.ID, in.Account, protocol.ErrInstallationSuspended)
	case store.GitHubInstallationDeleted:
		return fmt.Errorf("GitHub installation %d (%s) was deleted: %w", in.ID, in.Account, protocol.ErrInstallationDeleted)
	}
	return nil
}

// tenantCatalog is the catalog a GitHub tenant's API requests use: its
// .jobplane definitions, else the server's on the GitHub channel; either
// way on the GitHub channel only. nil for a tenant that is not a GitHub
// tenant (the channel's catalog applies).
func (s *Service) tenantCatalog(ctx context.Context, in *store.GitHubInstallation, channel string) (control.Catalog, error) {
	if in == nil {
		return nil, nil
	}
	if channel != s.channel {
		return nil, fmt.Errorf("channel %q: the definitions of GitHub installation %d (%s) are served on channel %s only: %w",
			channel, in.ID, in.Account, s.channel, protocol.ErrUnknownChannel)
	}
	return s.githubCatalog(ctx, in)
}

// openRunCheck opens the Check Run of a GitHub run in its request
// transaction; a run denied at once gets a completed one.
func (s *Service) openRunCheck(ctx context.Context, tx store.Tx, run *store.Run, g *runOrigin) error {
	if g == nil {
		return nil
	}
	c := Check{RunID: run.ID, Tenant: run.Tenant, Installation: g.Installation, Repo: g.Repo, HeadSHA: g.HeadSHA,
		Name: "jobplane / " + run.Job}
	title, summary := checkText(run, "")
	if err := s.OpenCheck(ctx, tx, c, title, summary); err != nil {
		return err
	}
	if run.State.Terminal() {
		return s.recordRunCheck(ctx, tx, run, "")
	}
	return nil
}

// githubMarker is in the source of every GitHub run (as its kind), in
// whatever spacing the store gives JSON back.
var githubMarker = []byte(`"github"`)

// recordRunCheck queues the Check Run state of a run that changed state, in
// the transaction that changed it. Most runs not started from GitHub cost a
// substring test: this sits on the claim and result paths.
func (s *Service) recordRunCheck(ctx context.Context, tx store.Tx, r *store.Run, summary string) error {
	if !bytes.Contains(r.Source, githubMarker) {
		return nil
	}
	var src struct {
		Kind string `json:"kind"`
	}
	if json.Unmarshal(r.Source, &src) != nil || src.Kind != "github" {
		return nil
	}
	title, text := checkText(r, summary)
	return s.RecordCheck(ctx, tx, r, title, text)
}

// checkText is the title and summary a Check Run shows for a run's state.
func checkText(r *store.Run, detail string) (title, summary string) {
	switch r.State {
	case store.RunQueued:
		title = "Queued"
	case store.RunPendingApproval:
		title = "Waiting for approval"
	case store.RunRunning:
		title = "Running"
	case store.RunDenied:
		title = "Denied by policy"
	default:
		title = string(r.State)
		if title != "" {
			title = string(title[0]-'a'+'A') + title[1:]
		}
	}
	summary = fmt.Sprintf("jobplane run `%s` of job `%s`: %s.", r.ID, r.Job, r.State)
	if r.WaitingFor != "" {
		summary += "\n\nWaiting for " + r.WaitingFor + "."
	}
	if detail != "" {
		summary += "\n\n" + detail
	}
	if len(summary) > 60000 { // GitHub's limit is 65535 characters
		summary = summary[:60000]
	}
	return title, summary
}

// handlePullRequest requests the runs of a pull_request delivery. Runs are
// requested in their own transactions (each opens its Check Run), then the
// delivery is recorded: a delivery that failed half-way is processed again
// in full when redelivered, and the idempotency keys make the runs already
// requested come back rather than double.
func (s *Service) handlePullRequest(ctx context.Context, d Delivery) (Outcome, error) {
	var head struct {
		Action string `json:"action"`
	}
	// Like other events, an action jobplane ignores (closed, labeled...)
	// is not held to the shape of one it handles.
	if json.Unmarshal(d.Body, &head) == nil && !isPullRequestAction(head.Action) {
		return Ignored, nil
	}
	ev, err := github.ParsePullRequestEvent(d.Body)
	if err != nil {
		return "", protocol.Refused(protocol.ErrWebhookDeliveryInvalid, fmt.Errorf("%s delivery %s: %w", d.Event, d.ID, err))
	}
	if !isPullRequestAction(ev.Action) {
		return Ignored, nil
	}
	if _, err := s.store.GitHubDeliveryGet(ctx, d.ID); err == nil {
		return Duplicate, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return "", store.Refusal(err)
	}
	in, err := s.bindInstallation(ctx, ev)
	if err != nil {
		return "", err
	}
	details := map[string]any{"delivery": d.ID, "repo": ev.Repository.FullName, "pr": ev.Number, "head_sha": ev.HeadSHA(),
		"fork": ev.Fork(), "draft": ev.PullRequest.Draft, "sender": ev.Sender.Login}
	action := "github.pull_request." + ev.Action
	runs := map[string]string{}
	granted, err := s.grantsRepo(ctx, in.ID, ev.Repository.ID)
	if err != nil {
		return "", store.Refusal(err)
	}
	if !granted {
		if granted, err = s.grantedNow(ctx, in, ev); err != nil {
			return "", err
		}
	}
	if err := s.checkInstallation(ctx, in.Tenant); err != nil {
		// GitHub does not deliver to a suspended installation, but a
		// delivery queued before the suspension may still arrive.
		action, details["reason"] = "github.pull_request.refused", err.Error()
	} else if !granted {
		// A delivery for a repository this installation does not grant:
		// one it lost (a late or redelivered copy), or another
		// installation's. It requests nothing.
		action, details["reason"] = "github.pull_request.refused",
			fmt.Sprintf("GitHub installation %d does not grant %s", in.ID, ev.Repository.FullName)
	} else {
		cat, err := s.githubCatalog(ctx, in)
		if err != nil {
			return "", err
		}
		var jobs []string
		if pc, ok := cat.(PullRequestCatalog); ok {
			jobs = pc.PullRequestJobs(ev.Action, ev.PullRequest.Draft)
		}
		details["definitions_commit"] = cat.Commit()
		var errs []error
		for _, job := range jobs {
			id, err := s.requestPullRequestRun(ctx, d, ev, in, cat, job)
			switch {
			case err == nil:
				runs[job] = id
			case transient(err):
				errs = append(errs, fmt.Errorf("job %s: %w", job, err))
			default:
				// A refusal (bad params, a lease conflict) is final for
				// this job and delivery; the others go on.
				runs[job] = "refused: " + err.Error()
			}
		}
		if len(errs) > 0 {
			// Not recorded: GitHub's redelivery (or the next copy) retries,
			// and the runs already requested come back by their keys.
			return "", errors.Join(errs...)
		}
	}
	details["runs"] = runs
	outcome := Processed
	err = s.store.InTx(ctx, func(tx store.Tx) error {
		outcome = Processed
		err := tx.GitHubDeliveryRecord(ctx, &store.GitHubDelivery{ID: d.ID, Event: d.Event, Action: ev.Action,
			InstallationID: in.ID, ProcessedAt: clock.NowOrZero(s.clock)})
		if errors.Is(err, store.ErrAlreadyExists) {
			outcome = Duplicate
			return nil
		}
		if err != nil {
			return err
		}
		if len(runs) > 0 {
			superseded, err := s.supersede(ctx, tx, in, ev)
			if err != nil {
				return err
			}
			if len(superseded) > 0 {
				details["superseded"] = superseded
			}
		}
		return s.audit(ctx, tx, in.Tenant, Actor, action, githubSubject(in.ID), details)
	})
	if err != nil {
		return "", store.Refusal(err)
	}
	s.log.InfoContext(ctx, "githubapp: pull request processed", "delivery", d.ID, "installation", in.ID, "repo", ev.Repository.FullName,
		"pr", ev.Number, "runs", len(runs))
	return outcome, nil
}

func isPullRequestAction(a string) bool {
	switch a {
	case "opened", "synchronize", "reopened", "ready_for_review":
		return true
	}
	return false
}

// requestPullRequestRun requests one job's run for a delivery; a denied
// run is a result, not an error.
func (s *Service) requestPullRequestRun(ctx context.Context, d Delivery, ev *github.PullRequestEvent, in *store.GitHubInstallation, cat control.Catalog, job string) (string, error) {
	actor := principal.Actor{TenantID: in.Tenant, Name: Actor, Kind: "service"}
	req := &protocol.RunRequest{
		Job: job, Channel: s.channel,
		IdempotencyKey: "github:" + d.ID + ":" + job,
		Reason:         fmt.Sprintf("pull request %s#%d %s by %s", ev.Repository.FullName, ev.Number, ev.Action, ev.Sender.Login),
	}
	src := map[string]any{
		"kind": "github", "event": "pull_request", "action": ev.Action, "delivery": d.ID,
		"installation": in.ID, "repo": ev.Repository.FullName, "pr": ev.Number, "head_sha": ev.HeadSHA(),
		"head_ref": ev.PullRequest.Head.Ref, "base_ref": ev.PullRequest.Base.Ref,
		"fork": ev.Fork(), "draft": ev.PullRequest.Draft, "sender": ev.Sender.Login,
	}
	if !ev.PullRequest.UpdatedAt.IsZero() {
		src["updated_at"] = ev.PullRequest.UpdatedAt.UTC().Format(time.RFC3339Nano)
	}
	g := &runOrigin{Installation: in.ID, Repo: ev.Repository.FullName, HeadSHA: ev.HeadSHA(), PR: ev.Number, Fork: ev.Fork(),
		HeadRef: ev.PullRequest.Head.Ref}
	v, _, err := s.runs.RequestRunFrom(ctx, actor, req, control.RequestOrigin{Source: src, Catalog: cat, Pin: g.pin,
		Recorded: func(ctx context.Context, tx store.Tx, run *store.Run) error { return s.openRunCheck(ctx, tx, run, g) }})
	var denied *control.DeniedError
	switch {
	case errors.As(err, &denied):
		return denied.RunID, nil
	case err != nil:
		return "", err
	}
	return v.Run.ID, nil
}

// githubCatalog is the tenant's own definitions when its installation has
// a .jobplane repository, else the server's on the GitHub channel.
func (s *Service) githubCatalog(ctx context.Context, in *store.GitHubInstallation) (control.Catalog, error) {
	return s.githubCatalogWithin(ctx, in, 0)
}

// githubCatalogWithin is githubCatalog answering from a .jobplane head read
// less than maxAge ago (0: read it now).
func (s *Service) githubCatalogWithin(ctx context.Context, in *store.GitHubInstallation, maxAge time.Duration) (control.Catalog, error) {
	if s.catalogs != nil {
		var cat control.Catalog
		var err error
		if w, ok := s.catalogs.(CatalogsWithin); ok && maxAge > 0 {
			cat, err = w.TenantCatalogWithin(ctx, in, maxAge)
		} else {
			cat, err = s.catalogs.TenantCatalog(ctx, in)
		}
		if err != nil {
			return nil, err
		}
		if cat != nil {
			return cat, nil
		}
	}
	if s.defs == nil {
		return nil, fmt.Errorf("no definitions repository configured: %w", protocol.ErrCatalogUnavailable)
	}
	return s.defs.Resolve(ctx, s.channel, "")
}

// bindInstallation returns the installation of an event, binding it (and
// creating its tenant) when its installation delivery was never seen.
func (s *Service) bindInstallation(ctx context.Context, ev *github.PullRequestEvent) (*store.GitHubInstallation, error) {
	in, err := s.store.GitHubInstallationGet(ctx, ev.Installation.ID)
	if err == nil || !errors.Is(err, store.ErrNotFound) {
		return in, store.Refusal(err)
	}
	err = s.store.InTx(ctx, func(tx store.Tx) error {
		in, err = tx.GitHubInstallationGet(ctx, ev.Installation.ID)
		if err == nil || !errors.Is(err, store.ErrNotFound) {
			return err
		}
		tn, err := tx.TenantEnsure(ctx, TenantName(ev.Installation.ID), s.clock.NowOrNil())
		if err != nil {
			return fmt.Errorf("ensure tenant: %w", err)
		}
		owner := ev.Repository.FullName[:bytes.IndexByte([]byte(ev.Repository.FullName), '/')]
		in = &store.GitHubInstallation{ID: ev.Installation.ID, Tenant: tn.ID, Status: store.GitHubInstallationActive,
			Account: owner, RepositorySelection: "selected", UpdatedAt: clock.NowOrZero(s.clock)}
		if err := tx.GitHubInstallationPut(ctx, in); err != nil {
			return err
		}
		// GitHub delivers an installation the events of the repositories
		// it can access: the delivery's repository is granted, and is all
		// that is known until an installation event lists the others. (A
		// later installation or installation_repositories delivery
		// replaces or amends it.)
		if err := tx.GitHubRepoPut(ctx, &store.GitHubRepo{InstallationID: in.ID, RepoID: ev.Repository.ID,
			FullName: ev.Repository.FullName, Private: ev.Repository.Private}); err != nil {
			return err
		}
		return s.audit(ctx, tx, in.Tenant, Actor, "github.installation.bound", githubSubject(in.ID),
			map[string]any{"account": owner, "reason": "first seen in a pull_request delivery"})
	})
	return in, store.Refusal(err)
}

// CreateInstallationRegistrationToken makes a runner registration token
// for an installation's tenant. Only an admin of the operator's tenant
// ("default") may: a tenant's managed runners are what keeps its forks'
// pull requests in safe mode, which is the operator's to decide. The
// runner it registers belongs to that tenant alone, whatever it asks
// later; with self_hosted and allowed_repos it is the customer's runner
// for some of the installation's repositories.
func (s *Service) CreateInstallationRegistrationToken(ctx context.Context, actor principal.Actor, installation int64, req *protocol.RegistrationTokenRequest) (*protocol.TokenResponse, error) {
	ctx, on, err := s.operatorOn(ctx, actor, installation, "register runners for")
	if err != nil {
		return nil, err
	}
	return s.admin.CreateRegistrationToken(ctx, on, req)
}

// operatorOn checks that actor is an operator (an admin of the default
// tenant) and returns the actor acting as an admin in the tenant of an
// active installation. An admin of any other tenant — an installation's
// own included — is refused: installation tenants never administer
// themselves, so that their runners and principals stay the operator's.
//
// The context it returns is scoped to that tenant (row-level security), for
// the work the operator does there.
func (s *Service) operatorOn(ctx context.Context, actor principal.Actor, installation int64, what string) (context.Context, principal.Actor, error) {
	if err := principal.RequireAdmin(actor); err != nil {
		return nil, principal.Actor{}, err
	}
	t, err := s.store.TenantGetByID(ctx, actor.TenantID)
	if err != nil {
		return nil, principal.Actor{}, store.Refusal(err)
	}
	if t.Name != principal.DefaultTenant {
		return nil, principal.Actor{}, fmt.Errorf("only an admin of the %q tenant may %s installations: %w", principal.DefaultTenant, what, protocol.ErrForbidden)
	}
	// An admin of the default tenant acts for another tenant here.
	in, err := s.store.GitHubInstallationGet(store.WithSystem(ctx, "installation operator"), installation)
	if errors.Is(err, store.ErrNotFound) {
		return nil, principal.Actor{}, fmt.Errorf("GitHub installation %d: %w", installation, protocol.ErrNotFound)
	}
	if err != nil {
		return nil, principal.Actor{}, store.Refusal(err)
	}
	ctx = store.WithTenant(ctx, in.Tenant)
	if err := s.checkInstallation(ctx, in.Tenant); err != nil {
		return nil, principal.Actor{}, err
	}
	return ctx, principal.Actor{TenantID: in.Tenant, Name: actor.Name, Kind: actor.Kind, Admin: true}, nil
}

// CreateInstallationPrincipal adds a principal to an installation's tenant
// (operators only), so that the installation's own people can list, request
// and approve that tenant's runs through the API. It is never an admin:
// it cannot create principals, tokens or runners, nor read the audit log;
// what it may run or approve is up to the tenant's policies and groups.
func (s *Service) CreateInstallationPrincipal(ctx context.Context, actor principal.Actor, installation int64, req *protocol.PrincipalRequest) (*store.Principal, error) {
	ctx, on, err := s.operatorOn(ctx, actor, installation, "create principals for")
	if err != nil {
		return nil, err
	}
	return s.admin.CreatePrincipal(ctx, on, req)
}

// CreateInstallationToken issues an API token for a principal of an
// installation's tenant (operators only).
func (s *Service) CreateInstallationToken(ctx context.Context, actor principal.Actor, installation int64, principal string, ttlSeconds int) (*protocol.TokenResponse, error) {
	ctx, on, err := s.operatorOn(ctx, actor, installation, "create tokens for")
	if err != nil {
		return nil, err
	}
	return s.admin.CreateToken(ctx, on, principal, ttlSeconds)
}

// RevokeInstallationToken revokes an API token of an installation's tenant
// (operators only): a token belongs to its tenant, so the operator's own
// DELETE /v1/tokens/{id} does not reach it.
func (s *Service) RevokeInstallationToken(ctx context.Context, actor principal.Actor, installation int64, tokenID string) error {
	ctx, on, err := s.operatorOn(ctx, actor, installation, "revoke tokens of")
	if err != nil {
		return err
	}
	return s.admin.RevokeToken(ctx, on, tokenID)
}

// transient tells an error worth retrying with the whole delivery (the
// store or the definitions unavailable a moment) from a refusal that is
// final for one job.
func transient(err error) bool {
	return errors.Is(err, protocol.ErrRetry) || errors.Is(err, protocol.ErrUnavailable) ||
		errors.Is(err, protocol.ErrCatalogUnavailable) || errors.Is(err, store.ErrCommitUnknown) ||
		errors.Is(err, store.ErrUnavailable) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// grantsRepo reports whether the installation grants the repository, as
// its installation and installation_repositories deliveries recorded.
// grantedNow asks GitHub about a repository of the installation's own
// account that its deliveries have not listed: the pull_request delivery
// may have overtaken the installation_repositories one that adds it (GitHub
// does not order deliveries). A repository GitHub confirms is recorded as
// granted; one of another account is never asked about. GitHub unreachable
// fails the delivery (5xx), so that it is redelivered rather than refused.
func (s *Service) grantedNow(ctx context.Context, in *store.GitHubInstallation, ev *github.PullRequestEvent) (bool, error) {
	owner, _, _ := strings.Cut(ev.Repository.FullName, "/")
	if s.access == nil || in.Account == "" || !strings.EqualFold(owner, in.Account) {
		return false, nil
	}
	id, err := s.access.RepositoryID(ctx, in.ID, ev.Repository.FullName)
	if err != nil {
		return false, fmt.Errorf("ask GitHub whether installation %d grants %s: %w: %w", in.ID, ev.Repository.FullName, protocol.ErrUnavailable, err)
	}
	if id == 0 || id != ev.Repository.ID {
		return false, nil
	}
	err = s.store.GitHubRepoPut(ctx, &store.GitHubRepo{InstallationID: in.ID, RepoID: id, FullName: ev.Repository.FullName,
		Private: ev.Repository.Private})
	return err == nil, store.Refusal(err)
}

func (s *Service) grantsRepo(ctx context.Context, installation, repoID int64) (bool, error) {
	repos, err := s.store.GitHubRepoList(ctx, installation)
	if err != nil {
		return false, err
	}
	for _, r := range repos {
		if r.RepoID == repoID {
			return true, nil
		}
	}
	return false, nil
}
