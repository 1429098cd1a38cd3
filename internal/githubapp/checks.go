package githubapp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/github"
	"github.com/jobplane/jobplane/internal/store"
)

// Check Runs are written through an outbox: a run's state changes append
// the Check Run state they imply to github_check_outbox in the transaction
// that changes the run, and DispatchChecks sends them later. GitHub
// being slow or down therefore delays Check Runs but never blocks, fails or
// loses a run, and no update is lost: an entry is removed from the queue
// only once GitHub has accepted it, or has refused it for good.

// CheckWriter writes Check Runs (a *github.App).
type CheckWriter interface {
	CreateCheckRun(ctx context.Context, installation int64, repo string, c github.CheckRunCreate) (*github.CheckRun, error)
	UpdateCheckRun(ctx context.Context, installation int64, repo string, id int64, u github.CheckRunUpdate) (*github.CheckRun, error)
	FindCheckRun(ctx context.Context, installation int64, repo, sha, externalID string) (*github.CheckRun, error)
}

var _ CheckWriter = (*github.App)(nil)

// Check names the Check Run that mirrors a run.
type Check struct {
	RunID        string
	Tenant       string
	Installation int64
	Repo         string // owner/name
	HeadSHA      string
	Name         string // shown on the pull request, e.g. "jobplane / test"
}

// Dispatch tuning.
const (
	// checkHold is how long claimed entries stay invisible to other
	// dispatchers; it bounds the delay after a dispatcher dies mid-send and
	// exceeds checkSendTimeout, so a live sender is never overtaken.
	checkHold        = 2 * time.Minute
	checkSendTimeout = 30 * time.Second
	checkBackoffMin  = 5 * time.Second
	checkBackoffMax  = 10 * time.Minute
)

// OpenCheck records a run's Check Run and queues its first state
// (queued), in the caller's transaction.
func (s *Service) OpenCheck(ctx context.Context, tx store.Tx, c Check, title, summary string) error {
	now := clock.NowOrZero(s.clock)
	if err := tx.GitHubCheckRunCreate(ctx, &store.GitHubCheckRun{RunID: c.RunID, Tenant: c.Tenant, InstallationID: c.Installation,
		Repo: c.Repo, HeadSHA: c.HeadSHA, Name: c.Name, CreatedAt: now}); err != nil {
		return fmt.Errorf("record check run: %w", err)
	}
	return tx.GitHubCheckUpdateAppend(ctx, &store.GitHubCheckUpdate{RunID: c.RunID, Tenant: c.Tenant, Status: github.CheckQueued,
		Title: title, Summary: summary, At: now, NextAttemptAt: now, CreatedAt: now})
}

// RecordCheck queues the Check Run state a run's state implies, in
// the caller's transaction; a run without a Check Run is left alone.
func (s *Service) RecordCheck(ctx context.Context, tx store.Tx, run *store.Run, title, summary string) error {
	cr, err := tx.GitHubCheckRunGet(ctx, run.ID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	status, conclusion := CheckState(run.State)
	if status == github.CheckQueued {
		// A queued run is re-stated when runners come or go
		// (control.Service.RefreshRunnerWaits); one whose Check Run would
		// read the same is not written to GitHub again.
		ups, err := tx.GitHubCheckUpdateList(ctx, run.ID)
		if err != nil {
			return err
		}
		if n := len(ups); n > 0 {
			last := ups[n-1]
			if last.Status == status && last.Conclusion == conclusion && last.Title == title && last.Summary == summary {
				return nil
			}
		}
	}
	now := clock.NowOrZero(s.clock)
	return tx.GitHubCheckUpdateAppend(ctx, &store.GitHubCheckUpdate{RunID: run.ID, Tenant: cr.Tenant, Status: status,
		Conclusion: conclusion, Title: title, Summary: summary, At: now, NextAttemptAt: now, CreatedAt: now})
}

// CheckState maps a run state to a Check Run status and conclusion.
func CheckState(st store.RunState) (status, conclusion string) {
	switch st {
	case store.RunPendingApproval, store.RunQueued:
		return github.CheckQueued, ""
	case store.RunRunning:
		return github.CheckInProgress, ""
	case store.RunSucceeded:
		return github.CheckCompleted, github.ConclusionSuccess
	case store.RunCancelled, store.RunRejected, store.RunSuperseded:
		// GitHub sets stale itself and refuses it from an App.
		return github.CheckCompleted, github.ConclusionCancelled
	case store.RunTimedOut, store.RunExpired:
		return github.CheckCompleted, github.ConclusionTimedOut
	}
	// failed, denied, and any state this switch does not know: a Check Run
	// must never show success by default.
	return github.CheckCompleted, github.ConclusionFailure
}

// DispatchChecks sends due Check Run updates, up to limit runs, and
// reports how many were accepted. Only the newest state of a run is sent
// (each entry is a whole state), so an outage ends with one write per run.
func (s *Service) DispatchChecks(ctx context.Context, w CheckWriter, limit int) (int, error) {
	ctx = store.WithSystem(ctx, "github check outbox") // cross-tenant by nature (docs/operations.md)
	claimed, err := s.store.GitHubCheckClaim(ctx, &store.GitHubCheckClaimParams{Now: s.clock.NowOrNil(), Limit: limit, Hold: checkHold})
	if err != nil {
		return 0, fmt.Errorf("claim check updates: %w", err)
	}
	sent := 0
	var errs []error
	start := s.clock.Now()
	access := map[int64]*checkAccess{}
	for _, u := range claimed {
		if s.clock.Now().Sub(start) > checkHold-checkSendTimeout {
			// The rest of the batch is about to be released to other
			// dispatchers; leave it to them rather than race them.
			break
		}
		cr, err := s.store.GitHubCheckRunGet(ctx, u.RunID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if held, err := s.checkHeld(ctx, access, cr, u); err != nil || held {
			if err != nil {
				errs = append(errs, err)
			}
			continue
		}
		sendCtx, cancel := context.WithTimeout(ctx, checkSendTimeout)
		sendErr := s.sendCheck(sendCtx, w, cr, u)
		cancel()
		// Errors of package github name method, path and status, never a
		// token, so their text may be stored as the entry's last error.
		switch {
		case sendErr == nil:
			sent++
			err = s.store.GitHubCheckMarkSent(ctx, u.RunID, u.Seq, "", s.clock.NowOrNil())
		case ctx.Err() != nil:
			// Shutting down: the hold expires and another pass resends.
			err = nil
		case github.Retryable(sendErr):
			var now time.Time
			if now, err = s.store.Now(ctx, s.clock.NowOrNil()); err == nil {
				err = s.store.GitHubCheckRetry(ctx, u.RunID, u.Seq, now.Add(checkBackoff(u.Attempts)), sendErr.Error())
			}
		default:
			// GitHub refused the update for good (the installation lost the
			// repository or the permission): keep the reason, stop retrying.
			s.log.Warn("github: check run update refused", "run_id", u.RunID, "repo", cr.Repo, "err", sendErr)
			err = s.store.GitHubCheckMarkSent(ctx, u.RunID, u.Seq, sendErr.Error(), s.clock.NowOrNil())
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return sent, errors.Join(errs...)
}

// checkBackoff doubles from checkBackoffMin up to checkBackoffMax.
func checkBackoff(attempts int) time.Duration {
	d := checkBackoffMin
	for range attempts {
		d *= 2
		if d >= checkBackoffMax {
			return checkBackoffMax
		}
	}
	return d
}

// sendCheck makes GitHub's Check Run show u. A create whose answer was lost
// is found again by its external ID (the run ID) rather than repeated.
func (s *Service) sendCheck(ctx context.Context, w CheckWriter, cr *store.GitHubCheckRun, u *store.GitHubCheckUpdate) error {
	var output *github.CheckOutput
	if u.Title != "" && u.Summary != "" {
		output = &github.CheckOutput{Title: u.Title, Summary: u.Summary}
	}
	at := u.At.UTC()
	upd := github.CheckRunUpdate{Status: u.Status, Conclusion: u.Conclusion, Output: output}
	switch u.Status {
	case github.CheckInProgress:
		upd.StartedAt = &at
	case github.CheckCompleted:
		upd.CompletedAt = &at
		upd.Status = "" // a conclusion implies completed
	}
	if cr.CheckRunID == 0 {
		found, err := w.FindCheckRun(ctx, cr.InstallationID, cr.Repo, cr.HeadSHA, cr.RunID)
		switch {
		case errors.Is(err, github.ErrNotFound):
			created, err := w.CreateCheckRun(ctx, cr.InstallationID, cr.Repo, github.CheckRunCreate{
				Name: cr.Name, HeadSHA: cr.HeadSHA, ExternalID: cr.RunID, Status: upd.Status, Conclusion: upd.Conclusion,
				StartedAt: upd.StartedAt, CompletedAt: upd.CompletedAt, Output: output,
			})
			if err != nil {
				return err
			}
			return s.store.GitHubCheckRunSetID(ctx, cr.RunID, created.ID)
		case err != nil:
			return err
		}
		if err := s.store.GitHubCheckRunSetID(ctx, cr.RunID, found.ID); err != nil {
			return err
		}
		cr.CheckRunID = found.ID
	}
	_, err := w.UpdateCheckRun(ctx, cr.InstallationID, cr.Repo, cr.CheckRunID, upd)
	return err
}

// checkHeld keeps an update from GitHub when GitHub would refuse it: one
// of a repository the installation lost, or of a deleted installation, is
// dropped with the reason (never retried); one of a suspended installation
// waits for the longest backoff and is sent after the unsuspension.
func (s *Service) checkHeld(ctx context.Context, cache map[int64]*checkAccess, cr *store.GitHubCheckRun, u *store.GitHubCheckUpdate) (bool, error) {
	a, err := s.accessOf(ctx, cache, cr.InstallationID)
	if err != nil {
		return false, err
	}
	if reason := a.lostReason(cr.Repo); reason != "" {
		s.log.Info("github: check run update dropped", "run_id", u.RunID, "repo", cr.Repo, "reason", reason)
		return true, s.store.GitHubCheckMarkSent(ctx, u.RunID, u.Seq, checkDropped(reason), s.clock.NowOrNil())
	}
	if a.status == store.GitHubInstallationSuspended {
		now, err := s.store.Now(ctx, s.clock.NowOrNil())
		if err != nil {
			return true, err
		}
		return true, s.store.GitHubCheckRetry(ctx, u.RunID, u.Seq, now.Add(checkBackoffMax), "held: GitHub installation suspended")
	}
	return false, nil
}
