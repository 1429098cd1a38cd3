package retention

import (
	"context"
	"errors"
	"fmt"

	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/logarchive"
	"github.com/jobplane/jobplane/internal/store"
)

// logsArchivedDetails: "run.logs_archived", one per attempt moved.
type logsArchivedDetails struct {
	Attempt string `json:"attempt"`
	Job     string `json:"job"`
	Key     string `json:"key"`
	Lines   int64  `json:"lines"`
	SHA256  string `json:"sha256"`
	Size    int64  `json:"size"`
}

// moveLogs moves the logs of runs that ended ArchiveLogsAfter ago into the
// object store, an attempt at a time: publish the object, then commit its
// row (state moving) with the audit event, then delete the lines from the
// database in batches and mark the row stored; once every attempt of a run
// is done, the run is marked archived. A round interrupted anywhere leaves
// the lines served: from the database until the row commits, from either
// copy after (the reader takes one), and the next round goes on where it
// stopped, finding its published object again under the same key.
func (s *Sweeper) moveLogs(ctx context.Context, w *writer, rep *Report) error {
	if !s.moving() {
		return nil
	}
	now, err := s.now(ctx)
	if err != nil {
		return err
	}
	runs, err := s.cfg.Store.RunsLogsUnarchived(ctx, now.Add(-s.cfg.ArchiveLogsAfter), &now, s.cfg.Batch)
	if err != nil {
		return fmt.Errorf("list runs whose logs move: %w", err)
	}
	budget := s.cfg.MaxRounds * 10 // batches of LogBatch lines, as pruneLogs
	for _, r := range runs {
		done, err := s.moveRun(ctx, w, r, &budget, rep)
		if err != nil {
			return fmt.Errorf("move logs of %s: %w", r.RunID, err)
		}
		if !done {
			return nil // the rest in the next sweep
		}
	}
	return nil
}

// moving says whether sweeps move logs to the object store.
func (s *Sweeper) moving() bool { return s.cfg.Objects != nil && s.cfg.ArchiveLogsAfter > 0 }

func (s *Sweeper) moveRun(ctx context.Context, w *writer, r *store.RunRetention, budget *int, rep *Report) (bool, error) {
	attempts, err := s.cfg.Store.AttemptListByRun(ctx, r.RunID)
	if err != nil {
		return false, err
	}
	existing, err := s.cfg.Store.LogArchiveList(ctx, r.RunID)
	if err != nil {
		return false, err
	}
	byAttempt := map[string]*store.LogArchive{}
	for _, a := range existing {
		byAttempt[a.AttemptID] = a
	}
	for _, at := range attempts {
		arch := byAttempt[at.ID]
		if arch == nil {
			if *budget <= 0 {
				return false, nil
			}
			if arch, err = s.archive(ctx, w, r, at.ID); err != nil {
				return false, err
			}
			if arch == nil {
				continue // no lines
			}
			*budget -= 1 + int(arch.Lines)/s.cfg.LogBatch
			rep.LogArchives++
			rep.LogLinesMoved += int(arch.Lines)
			s.cfg.Metrics.Swept("log_archive", 1)
			s.cfg.Metrics.Swept("log_line_moved", int(arch.Lines))
		}
		for arch.State == store.LogArchiveMoving {
			if *budget <= 0 {
				return false, nil
			}
			*budget--
			if err := w.inTx(ctx, func(tx store.Tx) error {
				n, err := tx.LogDeleteArchived(ctx, r.RunID, at.ID, arch.LastID, s.cfg.LogBatch)
				if err != nil || n == s.cfg.LogBatch {
					return err
				}
				if err := tx.LogArchiveSetState(ctx, at.ID, store.LogArchiveStored); err != nil {
					return err
				}
				arch.State = store.LogArchiveStored
				return nil
			}); err != nil {
				return false, fmt.Errorf("delete moved lines of %s: %w", at.ID, err)
			}
		}
	}
	if err := w.inTx(ctx, func(tx store.Tx) error {
		return tx.RetentionMarkArchived(ctx, r.RunID, s.cfg.Clock.NowOrNil())
	}); err != nil {
		return false, err
	}
	rep.LogRunsMoved++
	s.cfg.Metrics.Swept("run_logs_moved", 1)
	s.cfg.Logger.InfoContext(ctx, "retention: moved a run's logs to the object store", "run_id", r.RunID)
	return true, nil
}

// archive publishes an attempt's lines and commits the archive's row with
// its audit event; nil when the attempt has no lines.
func (s *Sweeper) archive(ctx context.Context, w *writer, r *store.RunRetention, attemptID string) (*store.LogArchive, error) {
	src := func(ctx context.Context, after int64, n int) ([]*store.LogLine, error) {
		return s.cfg.Store.LogListAttempt(ctx, r.RunID, attemptID, after, n)
	}
	arch, err := logarchive.Write(ctx, s.cfg.Objects, r.Tenant, r.RunID, attemptID, src)
	if arch == nil || err != nil {
		return nil, err
	}
	err = w.inTx(ctx, func(tx store.Tx) error {
		if err := tx.LogArchiveCreate(ctx, arch); err != nil {
			return err
		}
		return audit.Recorder{Clock: s.cfg.Clock}.Append(ctx, tx, r.Tenant, Actor, "run.logs_archived", r.RunID,
			logsArchivedDetails{Attempt: attemptID, Job: r.Job, Key: arch.Key, Lines: arch.Lines, SHA256: arch.SHA256, Size: arch.Size})
	})
	if errors.Is(err, store.ErrAlreadyExists) {
		// Recorded by a round that ran alongside (a replica paused past
		// its lease, which is fenced from here on): that one stands.
		return s.recorded(ctx, r.RunID, attemptID)
	}
	if err != nil {
		// The object stays: the next round finds it under the same key.
		return nil, fmt.Errorf("record archive of %s: %w", attemptID, err)
	}
	return arch, nil
}

// dropArchives deletes a run's archived logs: the rows become deleting
// (no longer served), then the objects go, then the rows. It returns the
// lines they held. An interrupted drop is finished by the next round,
// which finds the deleting rows again.
func (s *Sweeper) dropArchives(ctx context.Context, w *writer, r *store.RunRetention) (int, error) {
	if s.cfg.Objects == nil {
		return 0, nil
	}
	var marked []*store.LogArchive
	if err := w.inTx(ctx, func(tx store.Tx) (err error) {
		marked, err = tx.LogArchiveMarkDeleting(ctx, r.RunID)
		return err
	}); err != nil {
		return 0, fmt.Errorf("mark archived logs deleting: %w", err)
	}
	keys := map[string]bool{}
	for _, a := range marked {
		keys[a.Key] = true
	}
	if s.cfg.ArchiveLogsAfter > 0 {
		// A move interrupted before its row committed left an object that
		// no row names, always under the attempt's own key.
		attempts, err := s.cfg.Store.AttemptListByRun(ctx, r.RunID)
		if err != nil {
			return 0, err
		}
		for _, at := range attempts {
			keys[logarchive.Key(r.Tenant, r.RunID, at.ID)] = true
		}
	}
	for key := range keys {
		if err := s.cfg.Objects.Delete(ctx, key); err != nil {
			return 0, fmt.Errorf("delete archived logs %s: %w", key, err)
		}
	}
	lines := 0
	for _, a := range marked {
		err := w.inTx(ctx, func(tx store.Tx) error { return tx.LogArchiveDelete(ctx, a.AttemptID) })
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return lines, fmt.Errorf("delete archive row of %s: %w", a.AttemptID, err)
		}
		lines += int(a.Lines)
	}
	return lines, nil
}

// recorded is the archive row of an attempt.
func (s *Sweeper) recorded(ctx context.Context, runID, attemptID string) (*store.LogArchive, error) {
	archives, err := s.cfg.Store.LogArchiveList(ctx, runID)
	if err != nil {
		return nil, err
	}
	for _, a := range archives {
		if a.AttemptID == attemptID {
			return a, nil
		}
	}
	return nil, fmt.Errorf("archive of %s: %w", attemptID, store.ErrNotFound)
}
