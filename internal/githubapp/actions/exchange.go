package actions

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jobplane/jobplane/internal/actionsoidc"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// Exchange trades a workflow's Actions OIDC token for the attempt it was
// dispatched for: a one-attempt runner with the workflow's key, and the
// attempt leased to it. Every refusal is audited in the attempt's tenant
// when the attempt is known, and logged otherwise.
func (s *Service) Exchange(ctx context.Context, oidcToken string, req *protocol.ActionsExchangeRequest) (*protocol.ActionsExchangeResponse, error) {
	if !s.Enabled() {
		return nil, fmt.Errorf("the GitHub Actions mode is not configured: %w", protocol.ErrNotFound)
	}
	pub, err := protocol.DecodePublicKey(req.PublicKey)
	if err != nil {
		return nil, protocol.Refused(protocol.ErrBadRequest, fmt.Errorf("public_key: %w", err))
	}
	if req.AttemptID == "" || len(req.AttemptID) > 64 || !strings.HasPrefix(req.AttemptID, id.Attempt) {
		return nil, fmt.Errorf("attempt_id %q is not an attempt ID: %w", clip(req.AttemptID), protocol.ErrAttemptNotDispatched)
	}
	claims, err := s.verifier.Verify(ctx, oidcToken)
	if errors.Is(err, actionsoidc.ErrKeysUnavailable) {
		s.log.WarnContext(ctx, "actions: oidc keys unavailable", "error", err)
		return nil, fmt.Errorf("the Actions OIDC issuer's keys are unavailable: %w", protocol.ErrUnavailable)
	}
	if err != nil {
		s.log.InfoContext(ctx, "actions: exchange refused", "attempt_id", req.AttemptID, "reason", err.Error())
		s.auditRefusal(ctx, req.AttemptID, nil, err)
		return nil, err
	}
	ctx = store.WithSystem(ctx, "actions exchange") // the token decides the tenant, as a registration token does
	token := id.Secret(32)
	var (
		run       *store.Run
		attempt   *store.Attempt
		runner    *store.Runner
		withdrawn string
	)
	err = s.store.InTx(ctx, func(tx store.Tx) error {
		d, err := tx.ActionsDispatchGet(ctx, req.AttemptID)
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("attempt %s was not dispatched to GitHub Actions: %w", req.AttemptID, protocol.ErrAttemptNotDispatched)
		}
		if err != nil {
			return err
		}
		if err := exchangeMatches(d, claims); err != nil {
			return err
		}
		a, err := tx.AttemptGetByID(ctx, d.AttemptID, true)
		if err != nil {
			return err
		}
		if a.State != store.AttemptQueued {
			return fmt.Errorf("attempt %s is %s: %w", a.ID, a.State, protocol.ErrAttemptNotDispatched)
		}
		r, err := tx.RunGetByID(ctx, a.RunID, true)
		if err != nil {
			return err
		}
		if r.State.Terminal() || r.CancelRequested {
			return fmt.Errorf("run %s is %s: %w", r.ID, r.State, protocol.ErrAttemptNotDispatched)
		}
		if withdrawn, err = installationGrants(ctx, tx, a.Tenant, d.InstallationID, d.RepoID, d.Repo); err != nil {
			return err
		}
		now, err := tx.Now(ctx, s.clock.NowOrNil())
		if err != nil {
			return err
		}
		rn := &store.Runner{
			ID: id.New(id.Runner, now), Tenant: a.Tenant, Pool: store.ActionsPool, Name: "github-actions " + d.Repo + " #" + fmt.Sprint(claims.RunID),
			PublicKey: req.PublicKey, KeyFingerprint: protocol.SHA256Hex(pub)[:16], Status: store.RunnerActive,
			AllowedRepos: []string{d.Repo}, Version: "github-actions", LastSeenAt: &now, CreatedAt: now,
		}
		if err := tx.RunnerCreate(ctx, rn); err != nil {
			return err
		}
		err = s.runs.HandOut(ctx, tx, rn, a, r, token, "actions:"+claims.JTI, now)
		if errors.Is(err, control.ErrNotHandedOut) {
			return fmt.Errorf("attempt %s may not run now (denied at dispatch or waiting for a lease key): %w", a.ID, protocol.ErrAttemptNotDispatched)
		}
		if err != nil {
			return err
		}
		d.State, d.ExchangedAt, d.WorkflowRunID, d.WorkflowRunAttempt, d.TokenID = store.DispatchExchanged, &now, claims.RunID, claims.RunAttempt, claims.JTI
		if err := tx.ActionsDispatchUpdate(ctx, d); errors.Is(err, store.ErrAlreadyExists) {
			return fmt.Errorf("workflow run %d (attempt %d) or its token was already exchanged: %w", claims.RunID, claims.RunAttempt, protocol.ErrOIDCTokenReplayed)
		} else if err != nil {
			return err
		}
		run, attempt, runner = r, a, rn
		return s.audit(ctx, tx, a.Tenant, "github-actions:"+d.Repo, "actions.exchanged", r.ID, map[string]any{
			"attempt": a.ID, "runner": rn.ID, "workflow_run_id": claims.RunID, "workflow_run_attempt": claims.RunAttempt,
			"workflow_ref": claims.WorkflowRef, "repository_id": claims.RepositoryID, "key_fingerprint": rn.KeyFingerprint,
		})
	})
	if err != nil {
		if protocol.IsRefusal(err) {
			s.log.InfoContext(ctx, "actions: exchange refused", "attempt_id", req.AttemptID, "reason", err.Error())
			s.auditRefusal(ctx, req.AttemptID, claims, err)
		}
		if withdrawn != "" {
			// The repository is gone for good: the attempt's run ends
			// now rather than when its callback time runs out.
			if ferr := s.failDispatch(ctx, &store.ActionsDispatch{AttemptID: req.AttemptID}, store.AttemptCancelled, withdrawn); ferr != nil {
				s.log.WarnContext(ctx, "actions: ending an attempt whose repository is withdrawn failed", "attempt_id", req.AttemptID, "error", ferr)
			}
		}
		return nil, store.Refusal(err)
	}
	asg, err := s.runs.HandedOut(run, attempt, token)
	if err != nil {
		return nil, err
	}
	return &protocol.ActionsExchangeResponse{RunnerID: runner.ID, Assignment: asg}, nil
}

// exchangeMatches checks the token's claims against the dispatch: the
// repository and its owner (the installation's account), the event, the
// workflow file at the dispatched ref, and that the dispatch is waiting
// for an exchange.
func exchangeMatches(d *store.ActionsDispatch, c *actionsoidc.Claims) error {
	if d.State == store.DispatchPending {
		return fmt.Errorf("attempt %s has not been dispatched yet: %w", d.AttemptID, protocol.ErrAttemptNotDispatched)
	}
	if c.RepositoryID != d.RepoID || c.RepositoryOwnerID != d.OwnerID {
		return fmt.Errorf("the token's repository %s (%d, owner %d) is not the attempt's: %w", c.Repository, c.RepositoryID, c.RepositoryOwnerID, protocol.ErrOIDCRepositoryMismatch)
	}
	if c.EventName != "workflow_dispatch" {
		return fmt.Errorf("event_name is %q: %w", clip(c.EventName), protocol.ErrOIDCEventMismatch)
	}
	// GitHub's owner and repository names ignore case; a file's path and a
	// ref do not, so .github/workflows/Jobplane.yml is another workflow.
	want := d.Repo + "/.github/workflows/" + d.Workflow + "@" + d.Ref
	repo, file, ok := strings.Cut(c.WorkflowRef, "/.github/workflows/")
	if !ok || !strings.EqualFold(repo, d.Repo) || file != d.Workflow+"@"+d.Ref || c.Ref != d.Ref {
		return fmt.Errorf("workflow_ref %q is not %q: %w", clip(c.WorkflowRef), want, protocol.ErrOIDCWorkflowMismatch)
	}
	switch d.State {
	case store.DispatchExchanged:
		if c.JTI == d.TokenID || (c.RunID == d.WorkflowRunID && c.RunAttempt == d.WorkflowRunAttempt) {
			return fmt.Errorf("attempt %s was already exchanged by this token or workflow run: %w", d.AttemptID, protocol.ErrOIDCTokenReplayed)
		}
		return fmt.Errorf("attempt %s was already exchanged by another workflow run: %w", d.AttemptID, protocol.ErrAttemptNotDispatched)
	case store.DispatchFailed:
		return fmt.Errorf("the dispatch of attempt %s ended (%s): %w", d.AttemptID, d.LastError, protocol.ErrAttemptNotDispatched)
	}
	return nil
}

// installationGrants refuses unless the tenant's installation is active
// and still grants the repository (by GitHub's ID, which survives a
// rename); withdrawn says why when it no longer grants it, which ends the
// attempt.
func installationGrants(ctx context.Context, tx store.Tx, tenant string, installation, repoID int64, repo string) (withdrawn string, err error) {
	in, err := tx.GitHubInstallationGetByTenant(ctx, tenant)
	if err != nil {
		return "", err
	}
	if in.ID != installation {
		return "", fmt.Errorf("the run's installation changed: %w", protocol.ErrForbidden)
	}
	switch in.Status {
	case store.GitHubInstallationSuspended:
		return "", fmt.Errorf("GitHub installation %d (%s) is suspended: %w", in.ID, in.Account, protocol.ErrInstallationSuspended)
	case store.GitHubInstallationDeleted:
		return "", fmt.Errorf("GitHub installation %d (%s) was deleted: %w", in.ID, in.Account, protocol.ErrInstallationDeleted)
	}
	repos, err := tx.GitHubRepoList(ctx, in.ID)
	if err != nil {
		return "", err
	}
	for _, r := range repos {
		if r.RepoID == repoID {
			return "", nil
		}
	}
	withdrawn = fmt.Sprintf("GitHub installation %d no longer grants %s", in.ID, repo)
	return withdrawn, fmt.Errorf("%s: %w", withdrawn, protocol.ErrForbidden)
}

// auditRefusal records a refused exchange in the tenant of the attempt it
// named, when that attempt was dispatched; a token that names no
// dispatched attempt has no tenant to be filed under and is only logged.
func (s *Service) auditRefusal(ctx context.Context, attemptID string, c *actionsoidc.Claims, cause error) {
	ctx = store.WithSystem(ctx, "actions exchange refusal")
	details := map[string]any{"attempt": attemptID, "reason": cause.Error()}
	if c != nil {
		details["repository"], details["repository_id"] = c.Repository, c.RepositoryID
		details["workflow_ref"], details["workflow_run_id"], details["event_name"] = c.WorkflowRef, c.RunID, c.EventName
	}
	err := s.store.InTx(ctx, func(tx store.Tx) error {
		d, err := tx.ActionsDispatchGet(ctx, attemptID)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return s.audit(ctx, tx, d.Tenant, "github-actions", "actions.exchange_refused", d.RunID, details)
	})
	if err != nil {
		s.log.WarnContext(ctx, "actions: audit of a refused exchange failed", "error", err)
	}
}
