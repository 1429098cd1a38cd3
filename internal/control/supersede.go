package control

import (
	"context"

	"github.com/jobplane/jobplane/internal/store"
)

// SupersedeRun ends a run that a newer head of its pull request replaced,
// in the caller's transaction: a run not yet claimed ends at once, a
// running one has its attempt cancelled (its runner's next renewal or
// heartbeat is attempt_stale, and it stops the job) and its lease keys
// released; either way the run ends superseded, with reason on its
// timeline, its Check Run and the audit event run.superseded. It reports
// whether the run was open.
func (s *Service) SupersedeRun(ctx context.Context, tx store.Tx, runID, actor, reason string) (bool, error) {
	// The lock order of claims and cancels: attempt, then run.
	atts, err := tx.AttemptListByRun(ctx, runID)
	if err != nil {
		return false, err
	}
	var live *store.Attempt
	for _, a := range atts {
		if !a.State.Terminal() {
			if live, err = tx.AttemptGetByID(ctx, a.ID, true); err != nil {
				return false, err
			}
		}
	}
	r, err := tx.RunGetByID(ctx, runID, true)
	if err != nil {
		return false, err
	}
	if r.State.Terminal() {
		return false, nil
	}
	now, err := tx.Now(ctx, s.clock.NowOrNil())
	if err != nil {
		return false, err
	}
	details := map[string]any{"reason": reason, "previous_state": r.State}
	if live != nil && !live.State.Terminal() {
		details["attempt"] = live.ID
		live.State, live.EndedAt = store.AttemptCancelled, &now
		if err := tx.AttemptUpdate(ctx, live); err != nil {
			return false, err
		}
		if err := s.leases.Release(ctx, tx, r, live); err != nil {
			return false, err
		}
	}
	r.WaitingFor = ""
	finish(r, store.RunSuperseded, now)
	if err := tx.RunUpdate(ctx, r); err != nil {
		return false, err
	}
	if err := tx.WakeWatchers(ctx); err != nil {
		return false, err
	}
	if err := s.runChanged(ctx, tx, r, reason); err != nil {
		return false, err
	}
	s.log.InfoContext(ctx, "control: run superseded", "run_id", r.ID, "reason", reason)
	return true, s.audit(ctx, tx, r.Tenant, actor, "run.superseded", r.ID, details)
}
