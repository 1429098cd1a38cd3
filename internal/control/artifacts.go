package control

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobplane/jobplane/internal/artifact"
	"github.com/jobplane/jobplane/internal/crosstenant"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// The artifact service (internal/artifact/broker) and the source ticket
// service (internal/source/tickets) ask the run service, through the
// methods below, whether an attempt is live: capabilities and tickets are
// only as good as the attempt that obtained them.

// RunnerAttempt locks and returns, in tx, the attempt a signed call names
// and its run, refusing anything that is not the runner's live lease: an
// attempt that already ended is attempt_stale.
func (s *Service) RunnerAttempt(ctx context.Context, tx store.Tx, call *principal.RunnerCall) (*store.Attempt, *store.Run, time.Time, error) {
	a, r, now, err := s.checkAttempt(ctx, tx, call)
	if errors.Is(err, errEnded) {
		return nil, nil, now, fmt.Errorf("attempt %s already ended: %w", a.ID, protocol.ErrAttemptStale)
	}
	return a, r, now, err
}

// JobAttempt is RunnerAttempt for a job that presents its run token (the
// Kubernetes executor's pod, which holds no runner key), with the attempt's
// runner, whose registration bounds what the job may fetch. The token's
// attempt must still hold its lease (410 attempt_ended otherwise, as
// GET /v1/run/lease answers, so that the caller tells "stop" from "cannot
// confirm"); a token whose attempt or run does not match is 401.
func (s *Service) JobAttempt(ctx context.Context, tx store.Tx, call *principal.JobCall) (*store.Attempt, *store.Run, time.Time, *store.Runner, error) {
	a, r, now, err := tx.AttemptForCall(ctx, call.Attempt, true, s.clock.NowOrNil())
	if errors.Is(err, store.ErrNotFound) || (err == nil && (a.RunID != call.Run || a.Tenant != call.Tenant)) {
		return nil, nil, now, nil, fmt.Errorf("the run token names no attempt of its run: %w", protocol.ErrUnauthorized)
	}
	if err != nil {
		return nil, nil, now, nil, err
	}
	if a.State != store.AttemptLeased || a.LeaseExpiresAt == nil || !now.Before(*a.LeaseExpiresAt) {
		return nil, nil, now, nil, fmt.Errorf("attempt %s is %s: %w", a.ID, a.State, protocol.ErrAttemptEnded)
	}
	if r == nil {
		if r, err = tx.RunGetByID(ctx, a.RunID, false); err != nil {
			return nil, nil, now, nil, err
		}
	}
	runner, err := tx.RunnerGetByID(ctx, a.RunnerID, false)
	if err != nil {
		return nil, nil, now, nil, err
	}
	return a, r, now, runner, nil
}

// HoldsLease refuses, in tx, unless the attempt still holds the lease
// leaseDigest names.
func (s *Service) HoldsLease(ctx context.Context, tx store.Tx, attemptID, leaseDigest string) error {
	a, err := tx.AttemptGetByID(ctx, attemptID, true)
	if err != nil {
		return err
	}
	now, err := tx.Now(ctx, s.clock.NowOrNil())
	if err != nil {
		return err
	}
	switch {
	case a.State != store.AttemptLeased:
		return fmt.Errorf("attempt %s is %s: %w", a.ID, a.State, protocol.ErrAttemptStale)
	case !digestEqual(a.LeaseDigest, leaseDigest):
		return fmt.Errorf("attempt %s holds another lease now: %w", a.ID, protocol.ErrAttemptStale)
	case a.LeaseExpiresAt == nil || !now.Before(*a.LeaseExpiresAt):
		return fmt.Errorf("lease of attempt %s expired: %w", a.ID, protocol.ErrLeaseExpired)
	}
	return nil
}

// RunAttempts returns the attempts of a run the actor may see (GetRun's
// refusals otherwise).
func (s *Service) RunAttempts(ctx context.Context, actor principal.Actor, runID string) ([]*store.Attempt, error) {
	v, err := s.GetRun(ctx, actor, runID)
	if err != nil {
		return nil, err
	}
	return v.Attempts, nil
}

// claimArtifacts lists the declared artifacts for a claim answer.
func (sp Spec) claimArtifacts() []protocol.ArtifactSpec {
	out := make([]protocol.ArtifactSpec, 0, len(sp.Artifacts))
	for _, a := range sp.Artifacts {
		if a.MaxBytes <= 0 {
			a.MaxBytes = artifact.DefaultMaxBytes
		}
		out = append(out, a)
	}
	return out
}

// claimSource is the claim answer's source descriptor.
func (sp Spec) claimSource() *protocol.SourceDescriptor {
	if sp.Source == nil {
		return nil
	}
	return &protocol.SourceDescriptor{Repo: sp.Source.Repo, Commit: sp.Source.Commit}
}

// checkResultArtifacts accepts only stored artifacts of the attempt.
func (s *Service) checkResultArtifacts(ctx context.Context, tx store.Tx, a *store.Attempt, ids []string) error {
	seen := map[string]bool{}
	for _, aid := range ids {
		art, err := tx.ArtifactGetByID(ctx, aid)
		if err == nil {
			crosstenant.Note(ctx, a.Tenant, "artifact", art.Tenant)
		} else if errors.Is(err, store.ErrNotFound) {
			crosstenant.Note(ctx, a.Tenant, "artifact", crosstenant.Probe(ctx, tx, "artifact", aid))
		}
		if errors.Is(err, store.ErrNotFound) || (err == nil && (art.AttemptID != a.ID || art.State != store.ArtifactStored)) || seen[aid] {
			return fmt.Errorf("artifact %s is not a verified artifact of attempt %s: %w", aid, a.ID, protocol.ErrArtifactInvalid)
		}
		if err != nil {
			return err
		}
		seen[aid] = true
	}
	return nil
}
