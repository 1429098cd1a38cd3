package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jobplane/jobplane/internal/store"
)

// ---- retention and system leases ----

// SystemLeaseAcquire needs no row lock: a write transaction already
// excludes every other writer of the file.
func (q *queries) SystemLeaseAcquire(ctx context.Context, name, holder string, ttl time.Duration, now *time.Time) (*store.SystemLease, error) {
	l := &store.SystemLease{}
	err := q.db.QueryRowContext(ctx, `INSERT INTO system_leases (name, holder, token, expires_at)
		VALUES (?2, ?3, 1, coalesce(?1, `+nowSQL+`) + ?4)
		ON CONFLICT (name) DO UPDATE SET
			token = CASE WHEN system_leases.holder = excluded.holder AND system_leases.expires_at > coalesce(?1, `+nowSQL+`)
				THEN system_leases.token ELSE system_leases.token + 1 END,
			holder = excluded.holder, expires_at = excluded.expires_at
		WHERE system_leases.holder = excluded.holder OR system_leases.expires_at <= coalesce(?1, `+nowSQL+`)
		RETURNING name, holder, token, expires_at`, microsPtr(now), name, holder, ttl.Microseconds()).
		Scan(&l.Name, &l.Holder, &l.Token, timeCol{&l.ExpiresAt})
	if err != nil {
		return nil, interpretError(err)
	}
	return l, nil
}

func (q *queries) SystemLeaseCheck(ctx context.Context, name string, token int64, now *time.Time) error {
	var one int
	err := q.db.QueryRowContext(ctx, `SELECT 1 FROM system_leases
		WHERE name = ? AND token = ? AND expires_at > coalesce(?, `+nowSQL+`)`, name, token, microsPtr(now)).Scan(&one)
	return interpretError(err)
}

func (q *queries) SystemLeaseRelease(ctx context.Context, name string, token int64) error {
	_, err := q.db.ExecContext(ctx, `DELETE FROM system_leases WHERE name = ? AND token = ?`, name, token)
	return interpretError(err)
}

func (q *queries) RetentionWatermark(ctx context.Context) (time.Time, error) {
	var t *time.Time
	if err := q.db.QueryRowContext(ctx, `SELECT max(finished_at) FROM run_retention`).Scan(timePtrCol{&t}); err != nil {
		return time.Time{}, interpretError(err)
	}
	if t == nil {
		return time.Time{}, nil
	}
	return *t, nil
}

func (q *queries) RunsEndedUnstamped(ctx context.Context, since time.Time, n int) ([]*store.EndedRun, error) {
	rows, err := q.db.QueryContext(ctx, `SELECT r.id, r.tenant, r.job, r.finished_at, r.spec FROM runs r
		WHERE r.finished_at IS NOT NULL AND r.finished_at >= ?
		  AND NOT EXISTS (SELECT 1 FROM run_retention x WHERE x.run_id = r.id)
		ORDER BY r.finished_at, r.id LIMIT ?`, since.UnixMicro(), limit(n))
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []*store.EndedRun
	for rows.Next() {
		e := &store.EndedRun{}
		if err := rows.Scan(&e.ID, &e.Tenant, &e.Job, timeCol{&e.FinishedAt}, jsonCol{&e.Spec}); err != nil {
			return nil, interpretError(err)
		}
		out = append(out, e)
	}
	return out, interpretError(rows.Err())
}

const retentionCols = `run_id, tenant, job, finished_at, logs_due_at, artifacts_due_at, logs_pruned_at, artifacts_pruned_at`

func (q *queries) RetentionStamp(ctx context.Context, r *store.RunRetention) error {
	_, err := q.db.ExecContext(ctx, `INSERT INTO run_retention (`+retentionCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO NOTHING`,
		r.RunID, r.Tenant, r.Job, microsZero(r.FinishedAt), microsPtr(r.LogsDueAt), microsPtr(r.ArtifactsDueAt),
		microsPtr(r.LogsPrunedAt), microsPtr(r.ArtifactsPrunedAt))
	return interpretError(err)
}

// retentionColumns names the due and pruned columns of kind.
func retentionColumns(kind store.RetentionKind) (due, pruned string, err error) {
	switch kind {
	case store.RetainLogs:
		return "logs_due_at", "logs_pruned_at", nil
	case store.RetainArtifacts:
		return "artifacts_due_at", "artifacts_pruned_at", nil
	}
	return "", "", fmt.Errorf("unknown retention kind %q", kind)
}

func (q *queries) RetentionDue(ctx context.Context, kind store.RetentionKind, now *time.Time, n int) ([]*store.RunRetention, error) {
	due, pruned, err := retentionColumns(kind)
	if err != nil {
		return nil, err
	}
	rows, err := q.db.QueryContext(ctx, `SELECT `+retentionCols+` FROM run_retention
		WHERE `+pruned+` IS NULL AND `+due+` IS NOT NULL AND `+due+` <= coalesce(?, `+nowSQL+`)
		ORDER BY `+due+`, run_id LIMIT ?`, microsPtr(now), limit(n))
	if err != nil {
		return nil, interpretError(err)
	}
	return scanRetentions(rows)
}

func (q *queries) RetentionMarkPruned(ctx context.Context, runID string, kind store.RetentionKind, now *time.Time) error {
	_, pruned, err := retentionColumns(kind)
	if err != nil {
		return err
	}
	return q.exec1(ctx, `UPDATE run_retention SET `+pruned+` = coalesce(?, `+nowSQL+`) WHERE run_id = ?`, microsPtr(now), runID)
}

func (q *queries) LogPrune(ctx context.Context, runID string, n int) (int, error) {
	res, err := q.db.ExecContext(ctx, `DELETE FROM log_lines WHERE id IN
		(SELECT id FROM log_lines WHERE run_id = ? ORDER BY id LIMIT ?)`, runID, limit(n))
	if err != nil {
		return 0, interpretError(err)
	}
	c, err := res.RowsAffected()
	return int(c), err
}

func (q *queries) ArtifactMarkDeleting(ctx context.Context, runID string, n int) ([]*store.Artifact, error) {
	return q.artifacts(ctx, `UPDATE artifacts SET state = 'deleting' WHERE id IN
		(SELECT id FROM artifacts WHERE run_id = ? AND state = 'stored' ORDER BY id LIMIT ?)
		RETURNING `+artifactCols, runID, limit(n))
}

func (q *queries) ArtifactListStale(ctx context.Context, uploadingBefore time.Time, now *time.Time, n int) ([]*store.Artifact, error) {
	return q.artifacts(ctx, `SELECT `+artifactCols+` FROM artifacts
		WHERE state <> 'stored' AND ((state = 'pending' AND expires_at < coalesce(?, `+nowSQL+`))
			OR (state = 'uploading' AND created_at < ?) OR state = 'deleting')
		ORDER BY created_at, id LIMIT ?`, microsPtr(now), uploadingBefore.UnixMicro(), limit(n))
}

func (q *queries) artifacts(ctx context.Context, query string, args ...any) ([]*store.Artifact, error) {
	rows, err := q.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []*store.Artifact
	for rows.Next() {
		a, err := scanArtifact(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, interpretError(rows.Err())
}

func (q *queries) SourceTicketPurge(ctx context.Context, now *time.Time, n int) (int, error) {
	res, err := q.db.ExecContext(ctx, `DELETE FROM source_tickets WHERE digest IN
		(SELECT digest FROM source_tickets WHERE expires_at < coalesce(?, `+nowSQL+`) ORDER BY expires_at LIMIT ?)`,
		microsPtr(now), limit(n))
	if err != nil {
		return 0, interpretError(err)
	}
	c, err := res.RowsAffected()
	return int(c), err
}

// scanRetentions reads and closes rows of retentionCols.
func scanRetentions(rows *sql.Rows) ([]*store.RunRetention, error) {
	defer rows.Close()
	var out []*store.RunRetention
	for rows.Next() {
		x := &store.RunRetention{}
		if err := rows.Scan(&x.RunID, &x.Tenant, &x.Job, timeCol{&x.FinishedAt}, timePtrCol{&x.LogsDueAt}, timePtrCol{&x.ArtifactsDueAt},
			timePtrCol{&x.LogsPrunedAt}, timePtrCol{&x.ArtifactsPrunedAt}); err != nil {
			return nil, interpretError(err)
		}
		out = append(out, x)
	}
	return out, interpretError(rows.Err())
}
