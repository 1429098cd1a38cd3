package control

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// SpecSource is the code a run executes in: a configured repository and the
// commit its branch pointed at when the run was requested.
type SpecSource struct {
	Repo   string `json:"repo"`
	Branch string `json:"branch"`
	Commit string `json:"commit"`
}

// pinSource resolves the job's source branch (default: the run's ref) to
// the commit it points at now, so that every attempt of the run gets the
// same code.
func (s *Service) pinSource(spec *Spec, ref string) error {
	if spec.Source == nil || isGitHubRepo(spec.Source.Repo) {
		return nil // a GitHub run's source is pinned to the pull request's head
	}
	if s.art.Sources == nil {
		return fmt.Errorf("job %s needs source repository %s and this server has none configured (--source-repo): %w", spec.Name, spec.Source.Repo, protocol.ErrSourceUnavailable)
	}
	if spec.Source.Branch == "" {
		spec.Source.Branch = ref
	}
	commit, err := s.art.Sources.Head(spec.Source.Repo, spec.Source.Branch)
	if err != nil {
		return protocol.Refused(protocol.ErrSourceUnavailable, fmt.Errorf("source of job %s: %w", spec.Name, err))
	}
	spec.Source.Commit = commit
	return nil
}

// AttemptSource answers a runner's source request: a single-use ticket for
// a managed runner, only the repository and commit for a self-hosted one.
func (s *Service) AttemptSource(ctx context.Context, call *authn.SignedCall) (*protocol.SourceAnswer, error) {
	ticket := id.Secret(32)
	var out *protocol.SourceAnswer
	err := s.store.InTx(ctx, func(tx store.Tx) error {
		a, r, now, err := s.checkAttempt(ctx, tx, call)
		if errors.Is(err, errEnded) {
			return fmt.Errorf("attempt %s already ended: %w", a.ID, protocol.ErrAttemptStale)
		}
		if err != nil {
			return err
		}
		spec, err := runSpec(r)
		if err != nil {
			return err
		}
		src := spec.Source
		if src == nil {
			return fmt.Errorf("job %s has no source: %w", r.Job, protocol.ErrNotFound)
		}
		if len(call.Runner.AllowedRepos) > 0 && !slices.Contains(call.Runner.AllowedRepos, src.Repo) {
			return fmt.Errorf("runner %s may not fetch repository %s: %w", call.Runner.ID, src.Repo, protocol.ErrForbidden)
		}
		if call.Runner.SelfHosted {
			out = &protocol.SourceAnswer{Kind: protocol.SourceKindDescriptor, Repo: src.Repo, Commit: src.Commit}
			return nil
		}
		expires := now.Add(s.art.ticketTTL())
		if a.Deadline != nil && a.Deadline.Before(expires) {
			expires = *a.Deadline
		}
		t := &store.SourceTicket{Digest: protocol.SHA256Hex([]byte(ticket)), Tenant: r.Tenant, RunID: r.ID, AttemptID: a.ID,
			LeaseDigest: a.LeaseDigest, Repo: src.Repo, Commit: src.Commit, ExpiresAt: expires, CreatedAt: s.nowValue()}
		if err := tx.SourceTicketCreate(ctx, t); err != nil {
			return err
		}
		exp := expires.UTC()
		out = &protocol.SourceAnswer{Kind: protocol.SourceKindTicket, URL: s.apiURL + "/v1/sources/" + ticket, ExpiresAt: &exp, Repo: src.Repo, Commit: src.Commit}
		return s.audit(ctx, tx, r.Tenant, "runner:"+call.Runner.ID, "source.ticket_issued", r.ID,
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
	if s.art.Sources == nil && (s.gh == nil || s.gh.Sources == nil) {
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
		if err := s.checkLive(ctx, tx, t.AttemptID, t.LeaseDigest); err != nil {
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
	if isGitHubRepo(t.Repo) {
		return s.archiveGitHubSource(ctx, t.Tenant, t.Repo, t.Commit, open)
	}
	if s.art.Sources == nil {
		return fmt.Errorf("this server has no source repositories: %w", protocol.ErrSourceUnavailable)
	}
	if err := s.art.Sources.Archive(ctx, t.Repo, t.Commit, open); err != nil {
		return protocol.Refused(protocol.ErrSourceUnavailable, fmt.Errorf("archive %s at %s: %w", t.Repo, t.Commit, err))
	}
	return nil
}
