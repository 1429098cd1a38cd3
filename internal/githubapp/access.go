package githubapp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jobplane/jobplane/internal/store"
)

// Repository access lost (docs/github.md): when an installation stops
// granting a repository, or is deleted, the runs of that repository that
// have not ended can no longer fetch their source nor report to their pull
// request. The ones not yet claimed are cancelled in the transaction that
// records the loss; a running one is told to stop at its next renewal, as
// a cancel would; and their Check Run updates, which GitHub would refuse,
// are dropped with the reason instead of being sent.

// lostAccessRuns are the runs one installation event ended or asked to stop.
type lostAccessRuns struct {
	Cancelled []string `json:"cancelled"`
	Stopping  []string `json:"stopping"`
}

// endLostRuns ends the open runs of the installation's repositories in
// lost (all of them when lost is nil), in the caller's transaction.
func (s *Service) endLostRuns(ctx context.Context, tx store.Tx, in *store.GitHubInstallation, lost map[string]bool, reason string) (*lostAccessRuns, error) {
	out := &lostAccessRuns{Cancelled: []string{}, Stopping: []string{}}
	checks, err := tx.GitHubCheckRunListOpen(ctx, in.ID)
	if err != nil {
		return nil, fmt.Errorf("list open runs: %w", err)
	}
	for _, c := range checks {
		if lost != nil && !lost[strings.ToLower(c.Repo)] {
			continue
		}
		stopping, ended, err := s.endLostRun(ctx, tx, c.RunID, reason)
		if err != nil {
			return nil, fmt.Errorf("run %s: %w", c.RunID, err)
		}
		switch {
		case ended:
			out.Cancelled = append(out.Cancelled, c.RunID)
		case stopping:
			out.Stopping = append(out.Stopping, c.RunID)
		}
	}
	return out, nil
}

// endLostRun cancels one run that is not running, or asks its runner to
// stop, and drops its Check Run updates. The lock order is that of claims
// and CancelRun: attempt, then run.
func (s *Service) endLostRun(ctx context.Context, tx store.Tx, runID, reason string) (stopping, ended bool, err error) {
	atts, err := tx.AttemptListByRun(ctx, runID)
	if err != nil {
		return false, false, err
	}
	var live *store.Attempt
	for _, a := range atts {
		if !a.State.Terminal() {
			if live, err = tx.AttemptGetByID(ctx, a.ID, true); err != nil {
				return false, false, err
			}
		}
	}
	r, err := tx.RunGetByID(ctx, runID, true)
	if err != nil {
		return false, false, err
	}
	if r.State.Terminal() {
		return false, false, nil
	}
	now, err := tx.Now(ctx, s.clock.NowOrNil())
	if err != nil {
		return false, false, err
	}
	if live != nil && live.State == store.AttemptLeased {
		if err := dropChecks(ctx, tx, r.ID, reason, now); err != nil {
			return false, false, err
		}
		if r.CancelRequested {
			return true, false, nil
		}
		r.CancelRequested = true
		r.UpdatedAt = now
		if err := tx.RunUpdate(ctx, r); err != nil {
			return false, false, err
		}
		return true, false, s.audit(ctx, tx, r.Tenant, Actor, "run.cancel_requested", r.ID,
			map[string]any{"attempt": live.ID, "reason": reason})
	}
	if live != nil {
		live.State = store.AttemptCancelled
		live.EndedAt = &now
		if err := tx.AttemptUpdate(ctx, live); err != nil {
			return false, false, err
		}
	}
	r.CancelRequested = true
	r.WaitingFor = ""
	r.State, r.UpdatedAt, r.FinishedAt = store.RunCancelled, now, &now
	if err := tx.RunUpdate(ctx, r); err != nil {
		return false, false, err
	}
	// The outbox keeps the final state, marked dropped with the reason.
	if err := s.recordRunCheck(ctx, tx, r, reason); err != nil {
		return false, false, err
	}
	if err := dropChecks(ctx, tx, r.ID, reason, now); err != nil {
		return false, false, err
	}
	return false, true, s.audit(ctx, tx, r.Tenant, Actor, "run.cancelled", r.ID, map[string]any{"reason": reason})
}

func dropChecks(ctx context.Context, tx store.Tx, runID, reason string, now time.Time) error {
	if err := tx.GitHubCheckMarkSent(ctx, runID, math.MaxInt64, checkDropped(reason), &now); err != nil {
		return fmt.Errorf("drop check run updates: %w", err)
	}
	return nil
}

// checkDropped is the last_error of a Check Run update that was never sent
// because GitHub would refuse it.
func checkDropped(reason string) string { return "dropped: " + reason }

// checkAccess is what the dispatcher knows of each installation in one pass.
type checkAccess struct {
	status string
	repos  map[string]bool // lower-case full names; nil: not bound
}

// accessOf reads an installation's status and repositories once per pass.
func (s *Service) accessOf(ctx context.Context, cache map[int64]*checkAccess, installation int64) (*checkAccess, error) {
	if a := cache[installation]; a != nil {
		return a, nil
	}
	in, err := s.store.GitHubInstallationGet(ctx, installation)
	if errors.Is(err, store.ErrNotFound) {
		// Nothing is known to hold it back (Check Runs are opened for bound
		// installations only): GitHub decides.
		a := &checkAccess{}
		cache[installation] = a
		return a, nil
	}
	if err != nil {
		return nil, err
	}
	repos, err := s.store.GitHubRepoList(ctx, installation)
	if err != nil {
		return nil, err
	}
	a := &checkAccess{status: in.Status, repos: map[string]bool{}}
	for _, r := range repos {
		a.repos[strings.ToLower(r.FullName)] = true
	}
	cache[installation] = a
	return a, nil
}

// lostReason says why a Check Run can no longer be written ("" when it can).
func (a *checkAccess) lostReason(repo string) string {
	switch {
	case a.repos == nil:
		return ""
	case a.status == store.GitHubInstallationDeleted:
		return "GitHub installation deleted"
	case !a.repos[strings.ToLower(repo)]:
		return "the GitHub installation no longer grants " + repo
	}
	return ""
}
