package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobplane/jobplane/internal/store"
)

// ---- logs moved to the object store ----

// runsLogsUnarchivedSQL reads the runs whose logs may move through the
// partial index run_retention_logs_unarchived ($1 now, $2 ended before,
// $3 limit).
const runsLogsUnarchivedSQL = `SELECT ` + retentionCols + ` FROM run_retention
	WHERE logs_archived_at IS NULL AND logs_pruned_at IS NULL AND finished_at <= $2
	  AND (logs_due_at IS NULL OR logs_due_at > ` + sweepNowSQL + `)
	ORDER BY finished_at, run_id LIMIT $3`

func (q *queries) RunsLogsUnarchived(ctx context.Context, endedBefore time.Time, now *time.Time, limit int) ([]*store.RunRetention, error) {
	rows, err := q.db.Query(ctx, runsLogsUnarchivedSQL, now, endedBefore, limit)
	if err != nil {
		return nil, interpretError(err)
	}
	return collect(rows, func(r pgx.Rows) (*store.RunRetention, error) { return scanRetention(r) })
}

func (q *queries) RetentionMarkArchived(ctx context.Context, runID string, now *time.Time) error {
	return q.exec1(ctx, `UPDATE run_retention SET logs_archived_at = `+nowSQL+` WHERE run_id = $2`, now, runID)
}

func (q *queries) LogListAttempt(ctx context.Context, runID, attemptID string, after int64, n int) ([]*store.LogLine, error) {
	rows, err := q.db.Query(ctx, `SELECT id, run_id, attempt_id, seq, idx, at, stream, text FROM log_lines
		WHERE run_id = $1 AND id > $2 AND attempt_id = $3 ORDER BY id LIMIT $4`, runID, after, attemptID, limit(n))
	if err != nil {
		return nil, interpretError(err)
	}
	return collect(rows, scanLogLine)
}

func (q *queries) LogDeleteArchived(ctx context.Context, runID, attemptID string, upTo int64, n int) (int, error) {
	tag, err := q.db.Exec(ctx, `DELETE FROM log_lines WHERE id IN
		(SELECT id FROM log_lines WHERE run_id = $1 AND attempt_id = $2 AND id <= $3 ORDER BY id LIMIT $4)`,
		runID, attemptID, upTo, limit(n))
	if err != nil {
		return 0, interpretError(err)
	}
	return int(tag.RowsAffected()), nil
}

const logArchiveCols = `attempt_id, run_id, tenant, storage_key, first_id, last_id, lines, size, sha256, blocks::text, state, created_at`

func (q *queries) LogArchiveCreate(ctx context.Context, a *store.LogArchive) error {
	blocks, err := store.MarshalLogBlocks(a.Blocks)
	if err != nil {
		return err
	}
	var created *time.Time
	if !a.CreatedAt.IsZero() {
		created = &a.CreatedAt
	}
	err = q.insert(ctx, `INSERT INTO log_archives (attempt_id, run_id, tenant, storage_key, first_id, last_id, lines, size, sha256, blocks, state, created_at)
		VALUES ($2, $3, $4, $5, $6, $7, $8, $9, $10, $11::jsonb, $12, `+nowSQL+`)
		ON CONFLICT (attempt_id) DO NOTHING RETURNING created_at`,
		[]any{created, a.AttemptID, a.RunID, a.Tenant, a.Key, a.FirstID, a.LastID, a.Lines, a.Size, a.SHA256, string(blocks), string(a.State)},
		&a.CreatedAt)
	utc(&a.CreatedAt)
	return err
}

func (q *queries) LogArchiveSetState(ctx context.Context, attemptID string, state store.LogArchiveState) error {
	return q.exec1(ctx, `UPDATE log_archives SET state = $1 WHERE attempt_id = $2`, string(state), attemptID)
}

func (q *queries) LogArchiveMarkDeleting(ctx context.Context, runID string) ([]*store.LogArchive, error) {
	return q.logArchives(ctx, `UPDATE log_archives SET state = 'deleting' WHERE run_id = $1 RETURNING `+logArchiveCols, runID)
}

func (q *queries) LogArchiveDelete(ctx context.Context, attemptID string) error {
	_, err := q.db.Exec(ctx, `DELETE FROM log_archives WHERE attempt_id = $1`, attemptID)
	return interpretError(err)
}

func (q *queries) LogArchiveList(ctx context.Context, runID string) ([]*store.LogArchive, error) {
	return q.logArchives(ctx, `SELECT `+logArchiveCols+` FROM log_archives
		WHERE run_id = $1 AND state <> 'deleting' ORDER BY first_id`, runID)
}

func (q *queries) logArchives(ctx context.Context, sql string, args ...any) ([]*store.LogArchive, error) {
	rows, err := q.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	out, err := collect(rows, func(r pgx.Rows) (*store.LogArchive, error) {
		a := &store.LogArchive{}
		var blocks, state string
		if err := r.Scan(&a.AttemptID, &a.RunID, &a.Tenant, &a.Key, &a.FirstID, &a.LastID, &a.Lines, &a.Size, &a.SHA256,
			&blocks, &state, &a.CreatedAt); err != nil {
			return nil, err
		}
		a.State = store.LogArchiveState(state)
		utc(&a.CreatedAt)
		var err error
		a.Blocks, err = store.UnmarshalLogBlocks([]byte(blocks))
		return a, err
	})
	if err != nil {
		return nil, err
	}
	// RETURNING gives rows in no set order.
	store.SortLogArchives(out)
	return out, nil
}
