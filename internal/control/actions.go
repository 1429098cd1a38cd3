package control

import (
	"context"
	"time"

	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// Actions is the GitHub Actions compatibility mode (package
// githubapp/actions) as the run service sees it. The attempts of a job with
// executor github-actions sit in store.ActionsPool, where no runner claims
// them: the mode dispatches a workflow for each, hands the attempt out to
// the workflow that calls back (HandOut, HandedOut) and ends the attempts
// it cannot dispatch (EndQueued). The run service asks it only what such
// an attempt waits for.
type Actions interface {
	// AttemptWait says what a queued attempt in store.ActionsPool waits
	// for, read through q.
	AttemptWait(ctx context.Context, q store.Queries, r *store.Run, a *store.Attempt) string
}

// ErrNotHandedOut is HandOut's answer when the attempt does not go to the
// runner (denied at dispatch, its repository no longer granted, or blocked
// on a lease key); its new state is part of the transaction.
var ErrNotHandedOut = errRevoked

// HandOut leases the queued attempt a of run r (both locked in tx) to the
// runner rn, as a claim would (store.AttemptClaimRun), with the digest of
// token and requestID, and then decides as a claim does whether it goes
// out: ErrNotHandedOut when it does not. The GitHub Actions exchange hands
// out this way the attempt a workflow was dispatched for, to the
// one-attempt runner it registered in tx.
func (s *Service) HandOut(ctx context.Context, tx store.Tx, rn *store.Runner, a *store.Attempt, r *store.Run, token, requestID string, now time.Time) error {
	exp, deadline := now.Add(a.LeaseTTL), now.Add(a.Timeout)
	if deadline.Before(exp) {
		exp = deadline
	}
	a.State, a.RunnerID, a.LeaseDigest, a.ClaimRequestID = store.AttemptLeased, rn.ID, protocol.SHA256Hex([]byte(token)), requestID
	a.ClaimedAt, a.LeaseExpiresAt, a.Deadline, a.HeartbeatAt = &now, &exp, &deadline, &now
	if err := tx.AttemptUpdate(ctx, a); err != nil {
		return err
	}
	_, err := s.handOut(ctx, tx, writeNow{tx}, nil, &principal.RunnerCall{Runner: rn}, a, r, token, s.tenants != nil)
	return err
}

// HandedOut is the assignment of an attempt HandOut gave out with token,
// once its transaction committed: it counts as a claim, and the runner it
// went to is a new one.
func (s *Service) HandedOut(r *store.Run, a *store.Attempt, token string) (*protocol.Assignment, error) {
	s.runnerLists.Invalidate()
	asg, err := s.assignment(r, a, token)
	if err != nil {
		return nil, err
	}
	s.observeClaim(a)
	return asg, nil
}

// EndQueued ends the queued attempt a of run r (both locked in tx) with
// state, on behalf of actor for reason, and moves the run on as its job's
// retry policy says.
func (s *Service) EndQueued(ctx context.Context, tx store.Tx, r *store.Run, a *store.Attempt, state store.AttemptState, now time.Time, actor, reason string) error {
	return s.endAttempt(ctx, tx, writeNow{tx}, r, a, state, nil, now, actor, reason)
}

// RunChanged tells the integration (Tenants.RunChanged) in tx that what
// the queued run r waits for changed.
func (s *Service) RunChanged(ctx context.Context, tx store.Tx, r *store.Run, detail string) error {
	return s.runChanged(ctx, tx, r, detail)
}

// RunSpec is the spec pinned on r.
func RunSpec(r *store.Run) (Spec, error) { return runSpec(r) }
