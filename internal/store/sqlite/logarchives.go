package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/jobplane/jobplane/internal/store"
)

// ---- logs moved to the object store ----

func (q *queries) RunsLogsUnarchived(ctx context.Context, endedBefore time.Time, now *time.Time, n int) ([]*store.RunRetention, error) {
	rows, err := q.db.QueryContext(ctx, `SELECT `+retentionCols+` FROM run_retention
		WHERE logs_archived_at IS NULL AND logs_pruned_at IS NULL AND finished_at <= ?
		  AND (logs_due_at IS NULL OR logs_due_at > coalesce(?, `+nowSQL+`))
		ORDER BY finished_at, run_id LIMIT ?`, endedBefore.UnixMicro(), microsPtr(now), limit(n))
	if err != nil {
		return nil, interpretError(err)
	}
	return scanRetentions(rows)
}

func (q *queries) RetentionMarkArchived(ctx context.Context, runID string, now *time.Time) error {
	return q.exec1(ctx, `UPDATE run_retention SET logs_archived_at = coalesce(?, `+nowSQL+`) WHERE run_id = ?`, microsPtr(now), runID)
}

func (q *queries) LogListAttempt(ctx context.Context, runID, attemptID string, after int64, n int) ([]*store.LogLine, error) {
	rows, err := q.db.QueryContext(ctx, `SELECT id, run_id, attempt_id, seq, idx, at, stream, text FROM log_lines
		WHERE run_id = ? AND id > ? AND attempt_id = ? ORDER BY id LIMIT ?`, runID, after, attemptID, limit(n))
	if err != nil {
		return nil, interpretError(err)
	}
	return scanLogLines(rows)
}

func (q *queries) LogDeleteArchived(ctx context.Context, runID, attemptID string, upTo int64, n int) (int, error) {
	res, err := q.db.ExecContext(ctx, `DELETE FROM log_lines WHERE id IN
		(SELECT id FROM log_lines WHERE run_id = ? AND attempt_id = ? AND id <= ? ORDER BY id LIMIT ?)`,
		runID, attemptID, upTo, limit(n))
	if err != nil {
		return 0, interpretError(err)
	}
	c, err := res.RowsAffected()
	return int(c), err
}

const logArchiveCols = `attempt_id, run_id, tenant, storage_key, first_id, last_id, lines, size, sha256, blocks, state, created_at`

func (q *queries) LogArchiveCreate(ctx context.Context, a *store.LogArchive) error {
	blocks, err := store.MarshalLogBlocks(a.Blocks)
	if err != nil {
		return err
	}
	row := q.db.QueryRowContext(ctx, `INSERT INTO log_archives (`+logArchiveCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, coalesce(?, `+nowSQL+`)) RETURNING created_at`,
		a.AttemptID, a.RunID, a.Tenant, a.Key, a.FirstID, a.LastID, a.Lines, a.Size, a.SHA256, string(blocks), a.State, micros(a.CreatedAt))
	return interpretError(row.Scan(timeCol{&a.CreatedAt}))
}

func (q *queries) LogArchiveSetState(ctx context.Context, attemptID string, state store.LogArchiveState) error {
	return q.exec1(ctx, `UPDATE log_archives SET state = ? WHERE attempt_id = ?`, state, attemptID)
}

func (q *queries) LogArchiveMarkDeleting(ctx context.Context, runID string) ([]*store.LogArchive, error) {
	return q.logArchives(ctx, `UPDATE log_archives SET state = 'deleting' WHERE run_id = ? RETURNING `+logArchiveCols, runID)
}

func (q *queries) LogArchiveDelete(ctx context.Context, attemptID string) error {
	_, err := q.db.ExecContext(ctx, `DELETE FROM log_archives WHERE attempt_id = ?`, attemptID)
	return interpretError(err)
}

func (q *queries) LogArchiveList(ctx context.Context, runID string) ([]*store.LogArchive, error) {
	return q.logArchives(ctx, `SELECT `+logArchiveCols+` FROM log_archives
		WHERE run_id = ? AND state <> 'deleting' ORDER BY first_id`, runID)
}

func (q *queries) logArchives(ctx context.Context, query string, args ...any) ([]*store.LogArchive, error) {
	rows, err := q.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []*store.LogArchive
	for rows.Next() {
		a, err := scanLogArchive(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError(err)
	}
	// RETURNING gives rows in no set order.
	store.SortLogArchives(out)
	return out, nil
}

func scanLogArchive(rows *sql.Rows) (*store.LogArchive, error) {
	a := &store.LogArchive{}
	var blocks string
	if err := rows.Scan(&a.AttemptID, &a.RunID, &a.Tenant, &a.Key, &a.FirstID, &a.LastID, &a.Lines, &a.Size, &a.SHA256,
		&blocks, &a.State, timeCol{&a.CreatedAt}); err != nil {
		return nil, interpretError(err)
	}
	var err error
	a.Blocks, err = store.UnmarshalLogBlocks([]byte(blocks))
	return a, err
}
