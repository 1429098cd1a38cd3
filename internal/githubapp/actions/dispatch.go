package actions

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/store"
)

// Dispatch runs one pass of the dispatcher: it records a dispatch for each
// new attempt in store.ActionsPool, sends the due ones to GitHub (retrying
// unavailability with backoff, ending the attempt on a refusal), and
// expires dispatched attempts whose workflow never called back. It returns
// how many dispatches it acted on.
func (s *Service) Dispatch(ctx context.Context) (int, error) {
	if !s.Enabled() || s.app == nil {
		return 0, nil
	}
	ctx = store.WithSystem(ctx, "actions dispatch") // cross-tenant by nature, as the Check Run outbox
	fresh, err := s.store.ActionsAttemptsUndispatched(ctx, s.clock.NowOrNil(), dispatchBatch)
	if err != nil {
		return 0, store.Refusal(err)
	}
	for _, a := range fresh {
		if err := s.recordDispatch(ctx, a); err != nil {
			return 0, err
		}
	}
	due, err := s.store.ActionsDispatchListDue(ctx, s.clock.NowOrNil(), dispatchBatch)
	if err != nil {
		return 0, store.Refusal(err)
	}
	for _, d := range due {
		if d.State == store.DispatchSent {
			err = s.expireDispatch(ctx, d)
		} else {
			err = s.sendDispatch(ctx, d)
		}
		if err != nil {
			return 0, err
		}
	}
	return len(due), nil
}

// recordDispatch records the pending dispatch of a new attempt; an attempt
// of a run with no repository (requested through the API, say) cannot be
// dispatched and fails.
func (s *Service) recordDispatch(ctx context.Context, snap *store.Attempt) error {
	return store.Refusal(s.store.InTx(ctx, func(tx store.Tx) error {
		a, err := tx.AttemptGetByID(ctx, snap.ID, true)
		if err != nil {
			return err
		}
		if a.State != store.AttemptQueued {
			return nil
		}
		r, err := tx.RunGetByID(ctx, a.RunID, true)
		if err != nil {
			return err
		}
		now, err := tx.Now(ctx, s.clock.NowOrNil())
		if err != nil {
			return err
		}
		spec, err := control.RunSpec(r)
		if err != nil {
			return err
		}
		cr, err := tx.GitHubCheckRunGet(ctx, r.ID)
		if errors.Is(err, store.ErrNotFound) || spec.Workflow == "" {
			return s.runs.EndQueued(ctx, tx, r, a, store.AttemptFailed, now, "system:actions",
				"a GitHub Actions job runs only for a pull request, whose repository the workflow is dispatched in")
		}
		if err != nil {
			return err
		}
		err = tx.ActionsDispatchCreate(ctx, &store.ActionsDispatch{
			AttemptID: a.ID, RunID: r.ID, Tenant: a.Tenant, InstallationID: cr.InstallationID, Repo: cr.Repo,
			Commit: cr.HeadSHA, Workflow: spec.Workflow, State: store.DispatchPending, NextAttemptAt: now, CreatedAt: now,
		})
		if errors.Is(err, store.ErrAlreadyExists) {
			return nil
		}
		return err
	}))
}

// claimWindow is how long a pass sending a dispatch keeps the other passes
// from sending it too: longer than the GitHub calls of one dispatch take.
// A dispatch whose pass died in between is sent again after it.
const claimWindow = 2 * time.Minute

// sendDispatch claims a pending dispatch and asks GitHub to run its
// workflow. The call is made outside any transaction; its outcome is
// recorded after.
func (s *Service) sendDispatch(ctx context.Context, d *store.ActionsDispatch) error {
	a, err := s.store.AttemptGetByID(ctx, d.AttemptID, false)
	if err != nil {
		return store.Refusal(err)
	}
	if a.State != store.AttemptQueued {
		return s.finishDispatch(ctx, d, "attempt "+string(a.State)+" before it was dispatched")
	}
	var (
		withdrawn string
		claimed   *store.ActionsDispatch
	)
	if err := s.store.InTx(ctx, func(tx store.Tx) (err error) {
		withdrawn, claimed = "", nil
		// Every replica runs passes: the attempt's row lock orders those
		// that would send this dispatch, and the later one finds it
		// claimed, so that GitHub runs the workflow once.
		if _, err := tx.AttemptGetByID(ctx, d.AttemptID, true); err != nil {
			return err
		}
		cur, err := tx.ActionsDispatchGet(ctx, d.AttemptID)
		if err != nil {
			return err
		}
		now, err := tx.Now(ctx, s.clock.NowOrNil())
		if err != nil {
			return err
		}
		if cur.State != store.DispatchPending || cur.NextAttemptAt.After(now) {
			return nil // sent, ended or claimed by another pass
		}
		if withdrawn, err = s.withdrawn(ctx, tx, d.Tenant, d.Repo); err != nil || withdrawn != "" {
			return err
		}
		cur.NextAttemptAt = now.Add(claimWindow)
		if err := tx.ActionsDispatchUpdate(ctx, cur); err != nil {
			return err
		}
		claimed = cur
		return nil
	}); err != nil {
		return store.Refusal(err)
	}
	if withdrawn != "" {
		return s.failDispatch(ctx, d, store.AttemptCancelled, withdrawn)
	}
	if claimed == nil {
		return nil
	}
	d = claimed
	// Always the default branch: the workflow that runs is the one the
	// repository's maintainers merged, never a pull request's copy.
	target, err := s.app.DispatchWorkflow(ctx, d.InstallationID, d.Repo, d.Workflow, map[string]string{
		InputRun: d.RunID, InputAttempt: d.AttemptID, InputCommit: d.Commit,
	})
	var refusal *Refusal
	switch {
	case err == nil:
		d.RepoID, d.OwnerID, d.Ref = target.RepoID, target.OwnerID, target.Ref
		return store.Refusal(s.store.InTx(ctx, func(tx store.Tx) error {
			t, err := tx.Now(ctx, s.clock.NowOrNil())
			if err != nil {
				return err
			}
			d.State, d.Tries, d.LastError, d.DispatchedAt = store.DispatchSent, d.Tries+1, "", &t
			d.NextAttemptAt = t.Add(s.timeout)
			if err := tx.ActionsDispatchUpdate(ctx, d); err != nil {
				return err
			}
			return s.dispatchChanged(ctx, tx, d)
		}))
	case !errors.As(err, &refusal):
		d.Tries++
		backoff := minBackoff << min(d.Tries-1, 10)
		backoff = min(backoff, maxBackoff)
		d.LastError = err.Error()
		return store.Refusal(s.store.InTx(ctx, func(tx store.Tx) error {
			t, err := tx.Now(ctx, s.clock.NowOrNil())
			if err != nil {
				return err
			}
			d.NextAttemptAt = t.Add(backoff)
			if err := tx.ActionsDispatchUpdate(ctx, d); err != nil {
				return err
			}
			return s.dispatchChanged(ctx, tx, d)
		}))
	default:
		reason := "GitHub refused to dispatch workflow " + d.Workflow + " in " + d.Repo + ": " + refusal.Reason
		return s.failDispatch(ctx, d, store.AttemptFailed, reason)
	}
}

// dispatchChanged tells the run service that what the dispatch's run
// waits for changed (its Check Run's summary says it), in tx.
func (s *Service) dispatchChanged(ctx context.Context, tx store.Tx, d *store.ActionsDispatch) error {
	r, err := tx.RunGetByID(ctx, d.RunID, false)
	if err != nil {
		return err
	}
	if r.State != store.RunQueued {
		return nil
	}
	return s.runs.RunChanged(ctx, tx, r, "")
}

// expireDispatch ends an attempt whose workflow did not exchange in time:
// it expires like a lease and its job's retry policy applies.
func (s *Service) expireDispatch(ctx context.Context, d *store.ActionsDispatch) error {
	return s.failDispatch(ctx, d, store.AttemptExpired,
		fmt.Sprintf("workflow %s never called back within %s of its dispatch", d.Workflow, s.timeout))
}

// failDispatch ends the dispatch and, when it is still queued, the attempt
// with state and reason (on the run's timeline and its Check Run).
func (s *Service) failDispatch(ctx context.Context, d *store.ActionsDispatch, state store.AttemptState, reason string) error {
	return store.Refusal(s.store.InTx(ctx, func(tx store.Tx) error {
		a, err := tx.AttemptGetByID(ctx, d.AttemptID, true)
		if err != nil {
			return err
		}
		cur, err := tx.ActionsDispatchGet(ctx, d.AttemptID)
		if err != nil {
			return err
		}
		if cur.State == store.DispatchExchanged || cur.State == store.DispatchFailed {
			return nil // the workflow called back meanwhile, or another pass ended it
		}
		cur.State, cur.LastError = store.DispatchFailed, reason
		if err := tx.ActionsDispatchUpdate(ctx, cur); err != nil {
			return err
		}
		if a.State != store.AttemptQueued {
			return nil
		}
		r, err := tx.RunGetByID(ctx, a.RunID, true)
		if err != nil {
			return err
		}
		now, err := tx.Now(ctx, s.clock.NowOrNil())
		if err != nil {
			return err
		}
		s.log.InfoContext(ctx, "actions: attempt ended", "attempt_id", a.ID, "run_id", r.ID, "reason", reason)
		return s.runs.EndQueued(ctx, tx, r, a, state, now, "system:actions", reason)
	}))
}

// finishDispatch marks a dispatch failed without touching its attempt,
// which ended on its own.
func (s *Service) finishDispatch(ctx context.Context, d *store.ActionsDispatch, reason string) error {
	return store.Refusal(s.store.InTx(ctx, func(tx store.Tx) error {
		cur, err := tx.ActionsDispatchGet(ctx, d.AttemptID)
		if err != nil {
			return err
		}
		if cur.State != store.DispatchPending {
			return nil
		}
		cur.State, cur.LastError = store.DispatchFailed, reason
		return tx.ActionsDispatchUpdate(ctx, cur)
	}))
}

// AttemptWait is what an attempt of the mode waits for: its dispatch,
// then its workflow's exchange (control.Actions).
func (s *Service) AttemptWait(ctx context.Context, q store.Queries, r *store.Run, a *store.Attempt) string {
	d, err := q.ActionsDispatchGet(ctx, a.ID)
	if err != nil {
		workflow := ""
		if spec, err := control.RunSpec(r); err == nil {
			workflow = spec.Workflow + " "
		}
		return "GitHub Actions: the dispatch of the workflow " + workflow + "(next dispatcher pass)"
	}
	switch d.State {
	case store.DispatchPending:
		w := fmt.Sprintf("GitHub Actions: the dispatch of the workflow %s in %s", d.Workflow, d.Repo)
		if d.LastError != "" {
			w += fmt.Sprintf(" (try %d failed: %s; next at %s)", d.Tries, clip(d.LastError), d.NextAttemptAt.UTC().Format(time.RFC3339))
		}
		return w
	case store.DispatchSent:
		return fmt.Sprintf("GitHub Actions: the workflow %s in %s to call back (by %s)", d.Workflow, d.Repo, d.NextAttemptAt.UTC().Format(time.RFC3339))
	}
	return ""
}
