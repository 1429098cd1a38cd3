package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobplane/jobplane/internal/store"
)

// ---- GitHub Actions dispatches ----

const actionsDispatchCols = `attempt_id, run_id, tenant, installation_id, repo, commit_sha, workflow, repo_id, owner_id, ref,
	state, tries, next_attempt_at, last_error, dispatched_at, exchanged_at, workflow_run_id, workflow_run_attempt,
	token_id, created_at`

func scanActionsDispatch(r scanner) (*store.ActionsDispatch, error) {
	d := &store.ActionsDispatch{}
	err := r.Scan(&d.AttemptID, &d.RunID, &d.Tenant, &d.InstallationID, &d.Repo, &d.Commit, &d.Workflow, &d.RepoID,
		&d.OwnerID, &d.Ref, &d.State, &d.Tries, &d.NextAttemptAt, &d.LastError, &d.DispatchedAt,
		&d.ExchangedAt, &d.WorkflowRunID, &d.WorkflowRunAttempt, &d.TokenID, &d.CreatedAt)
	if err != nil {
		return nil, interpretError(err)
	}
	utc(&d.NextAttemptAt)
	utc(&d.CreatedAt)
	utcp(&d.DispatchedAt)
	utcp(&d.ExchangedAt)
	return d, nil
}

func (q *queries) ActionsDispatchCreate(ctx context.Context, d *store.ActionsDispatch) error {
	err := q.insert(ctx, `INSERT INTO actions_dispatches (`+actionsDispatchCols+`)
		VALUES ($2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, coalesce($14, `+nowSQL+`), $15, $16, $17, $18, $19, $20,
			coalesce($21, `+nowSQL+`))
		ON CONFLICT DO NOTHING RETURNING next_attempt_at, created_at`,
		[]any{nil, d.AttemptID, d.RunID, d.Tenant, d.InstallationID, d.Repo, d.Commit, d.Workflow, d.RepoID, d.OwnerID, d.Ref,
			d.State, d.Tries, timeArg(d.NextAttemptAt), d.LastError, d.DispatchedAt, d.ExchangedAt,
			d.WorkflowRunID, d.WorkflowRunAttempt, d.TokenID, timeArg(d.CreatedAt)},
		&d.NextAttemptAt, &d.CreatedAt)
	utc(&d.NextAttemptAt)
	utc(&d.CreatedAt)
	return err
}

func (q *queries) ActionsDispatchGet(ctx context.Context, attemptID string) (*store.ActionsDispatch, error) {
	return scanActionsDispatch(q.db.QueryRow(ctx, `SELECT `+actionsDispatchCols+` FROM actions_dispatches WHERE attempt_id = $1`, attemptID))
}

func (q *queries) ActionsDispatchUpdate(ctx context.Context, d *store.ActionsDispatch) error {
	return q.exec1(ctx, `UPDATE actions_dispatches SET repo_id = $2, owner_id = $3, ref = $4, state = $5, tries = $6,
		next_attempt_at = $7, last_error = $8, dispatched_at = $9, exchanged_at = $10, workflow_run_id = $11,
		workflow_run_attempt = $12, token_id = $13 WHERE attempt_id = $1`,
		d.AttemptID, d.RepoID, d.OwnerID, d.Ref, d.State, d.Tries, d.NextAttemptAt, d.LastError, d.DispatchedAt,
		d.ExchangedAt, d.WorkflowRunID, d.WorkflowRunAttempt, d.TokenID)
}

func (q *queries) ActionsDispatchListDue(ctx context.Context, now *time.Time, n int) ([]*store.ActionsDispatch, error) {
	rows, err := q.db.Query(ctx, `SELECT `+actionsDispatchCols+` FROM actions_dispatches
		WHERE state IN ('pending', 'dispatched') AND next_attempt_at <= `+nowSQL+`
		ORDER BY next_attempt_at, attempt_id LIMIT $2`, now, limit(n))
	if err != nil {
		return nil, interpretError(err)
	}
	return collect(rows, func(r pgx.Rows) (*store.ActionsDispatch, error) { return scanActionsDispatch(r) })
}

func (q *queries) ActionsAttemptsUndispatched(ctx context.Context, now *time.Time, n int) ([]*store.Attempt, error) {
	return q.attempts(ctx, `SELECT `+attemptCols+` FROM attempts
		WHERE state = 'queued' AND pool = $2 AND blocked_on = '' AND not_before <= `+nowSQL+`
		AND NOT EXISTS (SELECT 1 FROM actions_dispatches d WHERE d.attempt_id = attempts.id)
		ORDER BY created_at, id LIMIT $3`, now, store.ActionsPool, limit(n))
}
