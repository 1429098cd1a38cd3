package sqlite

import (
	"context"
	"time"

	"github.com/jobplane/jobplane/internal/store"
)

// ---- GitHub Actions dispatches ----

const actionsDispatchCols = `attempt_id, run_id, tenant, installation_id, repo, commit_sha, workflow, repo_id, owner_id, ref,
	state, tries, next_attempt_at, last_error, dispatched_at, exchanged_at, workflow_run_id, workflow_run_attempt,
	token_id, created_at`

func scanActionsDispatch(r scanner) (*store.ActionsDispatch, error) {
	d := &store.ActionsDispatch{}
	err := r.Scan(&d.AttemptID, &d.RunID, &d.Tenant, &d.InstallationID, &d.Repo, &d.Commit, &d.Workflow, &d.RepoID,
		&d.OwnerID, &d.Ref, &d.State, &d.Tries, timeCol{&d.NextAttemptAt}, &d.LastError, timePtrCol{&d.DispatchedAt},
		timePtrCol{&d.ExchangedAt}, &d.WorkflowRunID, &d.WorkflowRunAttempt, &d.TokenID, timeCol{&d.CreatedAt})
	if err != nil {
		return nil, interpretError(err)
	}
	return d, nil
}

func (q *queries) ActionsDispatchCreate(ctx context.Context, d *store.ActionsDispatch) error {
	return q.insert(ctx, `INSERT INTO actions_dispatches (`+actionsDispatchCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, coalesce(?, `+nowSQL+`), ?, ?, ?, ?, ?, ?, coalesce(?, `+nowSQL+`))
		ON CONFLICT DO NOTHING RETURNING next_attempt_at, created_at`,
		[]any{d.AttemptID, d.RunID, d.Tenant, d.InstallationID, d.Repo, d.Commit, d.Workflow, d.RepoID, d.OwnerID, d.Ref,
			d.State, d.Tries, micros(d.NextAttemptAt), d.LastError, microsPtr(d.DispatchedAt), microsPtr(d.ExchangedAt),
			d.WorkflowRunID, d.WorkflowRunAttempt, d.TokenID, micros(d.CreatedAt)},
		timeCol{&d.NextAttemptAt}, timeCol{&d.CreatedAt})
}

func (q *queries) ActionsDispatchGet(ctx context.Context, attemptID string) (*store.ActionsDispatch, error) {
	return scanActionsDispatch(q.db.QueryRowContext(ctx, `SELECT `+actionsDispatchCols+` FROM actions_dispatches WHERE attempt_id = ?`, attemptID))
}

func (q *queries) ActionsDispatchUpdate(ctx context.Context, d *store.ActionsDispatch) error {
	return q.exec1(ctx, `UPDATE actions_dispatches SET repo_id = ?, owner_id = ?, ref = ?, state = ?, tries = ?,
		next_attempt_at = ?, last_error = ?, dispatched_at = ?, exchanged_at = ?, workflow_run_id = ?,
		workflow_run_attempt = ?, token_id = ? WHERE attempt_id = ?`,
		d.RepoID, d.OwnerID, d.Ref, d.State, d.Tries, microsZero(d.NextAttemptAt), d.LastError, microsPtr(d.DispatchedAt),
		microsPtr(d.ExchangedAt), d.WorkflowRunID, d.WorkflowRunAttempt, d.TokenID, d.AttemptID)
}

func (q *queries) ActionsDispatchListDue(ctx context.Context, now *time.Time, n int) ([]*store.ActionsDispatch, error) {
	rows, err := q.db.QueryContext(ctx, `SELECT `+actionsDispatchCols+` FROM actions_dispatches
		WHERE state IN ('pending', 'dispatched') AND next_attempt_at <= coalesce(?, `+nowSQL+`)
		ORDER BY next_attempt_at, attempt_id LIMIT ?`, microsPtr(now), limit(n))
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []*store.ActionsDispatch
	for rows.Next() {
		d, err := scanActionsDispatch(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, interpretError(rows.Err())
}

func (q *queries) ActionsAttemptsUndispatched(ctx context.Context, now *time.Time, n int) ([]*store.Attempt, error) {
	return q.attempts(ctx, `SELECT `+attemptCols+` FROM attempts
		WHERE state = 'queued' AND pool = ? AND blocked_on = '' AND not_before <= coalesce(?, `+nowSQL+`)
		AND NOT EXISTS (SELECT 1 FROM actions_dispatches d WHERE d.attempt_id = attempts.id)
		ORDER BY created_at, id LIMIT ?`, store.ActionsPool, microsPtr(now), limit(n))
}

// ActionsDispatchCreate records a dispatch behind the write gate.
func (s *Store) ActionsDispatchCreate(ctx context.Context, d *store.ActionsDispatch) error {
	return s.gated(ctx, func(q *queries) error { return q.ActionsDispatchCreate(ctx, d) })
}

// ActionsDispatchUpdate updates a dispatch behind the write gate.
func (s *Store) ActionsDispatchUpdate(ctx context.Context, d *store.ActionsDispatch) error {
	return s.gated(ctx, func(q *queries) error { return q.ActionsDispatchUpdate(ctx, d) })
}
