package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobplane/jobplane/internal/store"
)

// ---- retention and system leases ----

func (q *queries) SystemLeaseAcquire(ctx context.Context, name, holder string, ttl time.Duration, now *time.Time) (*store.SystemLease, error) {
	l := &store.SystemLease{}
	err := q.db.QueryRow(ctx, `INSERT INTO system_leases AS l (name, holder, token, expires_at)
		VALUES ($2, $3, 1, `+nowSQL+` + $4::bigint * interval '1 microsecond')
		ON CONFLICT (name) DO UPDATE SET
			token = CASE WHEN l.holder = EXCLUDED.holder AND l.expires_at > `+nowSQL+` THEN l.token ELSE l.token + 1 END,
			holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
		WHERE l.holder = EXCLUDED.holder OR l.expires_at <= `+nowSQL+`
		RETURNING name, holder, token, expires_at`, now, name, holder, ttl.Microseconds()).
		Scan(&l.Name, &l.Holder, &l.Token, &l.ExpiresAt)
	if err != nil {
		return nil, interpretError(err)
	}
	utc(&l.ExpiresAt)
	return l, nil
}

func (q *queries) SystemLeaseCheck(ctx context.Context, name string, token int64, now *time.Time) error {
	var one int
	err := q.db.QueryRow(ctx, `SELECT 1 FROM system_leases
		WHERE name = $2 AND token = $3 AND expires_at > `+nowSQL+` FOR SHARE`, now, name, token).Scan(&one)
	return interpretError(err)
}

func (q *queries) SystemLeaseRelease(ctx context.Context, name string, token int64) error {
	_, err := q.db.Exec(ctx, `DELETE FROM system_leases WHERE name = $1 AND token = $2`, name, token)
	return interpretError(err)
}

func (q *queries) RetentionWatermark(ctx context.Context) (time.Time, error) {
	var t *time.Time
	if err := q.db.QueryRow(ctx, `SELECT max(finished_at) FROM run_retention`).Scan(&t); err != nil {
		return time.Time{}, interpretError(err)
	}
	if t == nil {
		return time.Time{}, nil
	}
	return t.UTC(), nil
}

// runsEndedUnstampedSQL reads ended runs from $1 on through runs_finished
// ($2 limit).
const runsEndedUnstampedSQL = `SELECT r.id, r.tenant, r.job, r.finished_at, r.spec::text FROM runs r
	WHERE r.finished_at IS NOT NULL AND r.finished_at >= $1
	  AND NOT EXISTS (SELECT 1 FROM run_retention x WHERE x.run_id = r.id)
	ORDER BY r.finished_at, r.id LIMIT $2`

func (q *queries) RunsEndedUnstamped(ctx context.Context, since time.Time, limit int) ([]*store.EndedRun, error) {
	rows, err := q.db.Query(ctx, runsEndedUnstampedSQL, since, limit)
	if err != nil {
		return nil, interpretError(err)
	}
	return collect(rows, func(r pgx.Rows) (*store.EndedRun, error) {
		e := &store.EndedRun{}
		var spec *string
		if err := r.Scan(&e.ID, &e.Tenant, &e.Job, &e.FinishedAt, &spec); err != nil {
			return nil, err
		}
		utc(&e.FinishedAt)
		if spec != nil {
			e.Spec = []byte(*spec)
		}
		return e, nil
	})
}

const retentionCols = `run_id, tenant, job, finished_at, logs_due_at, artifacts_due_at, logs_pruned_at, artifacts_pruned_at`

func scanRetention(r pgx.Row) (*store.RunRetention, error) {
	x := &store.RunRetention{}
	if err := r.Scan(&x.RunID, &x.Tenant, &x.Job, &x.FinishedAt, &x.LogsDueAt, &x.ArtifactsDueAt, &x.LogsPrunedAt, &x.ArtifactsPrunedAt); err != nil {
		return nil, interpretError(err)
	}
	utc(&x.FinishedAt)
	utcp(&x.LogsDueAt)
	utcp(&x.ArtifactsDueAt)
	utcp(&x.LogsPrunedAt)
	utcp(&x.ArtifactsPrunedAt)
	return x, nil
}

func (q *queries) RetentionStamp(ctx context.Context, r *store.RunRetention) error {
	_, err := q.db.Exec(ctx, `INSERT INTO run_retention (`+retentionCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (run_id) DO NOTHING`,
		r.RunID, r.Tenant, r.Job, r.FinishedAt, r.LogsDueAt, r.ArtifactsDueAt, r.LogsPrunedAt, r.ArtifactsPrunedAt)
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

// retentionDueSQL lists the runs whose due column has passed and whose
// pruned column is still empty, through the partial index on the due
// column ($1 now, $2 limit).
func retentionDueSQL(due, pruned string) string {
	return `SELECT ` + retentionCols + ` FROM run_retention
		WHERE ` + pruned + ` IS NULL AND ` + due + ` IS NOT NULL AND ` + due + ` <= ` + sweepNowSQL + `
		ORDER BY ` + due + `, run_id LIMIT $2`
}

func (q *queries) RetentionDue(ctx context.Context, kind store.RetentionKind, now *time.Time, limit int) ([]*store.RunRetention, error) {
	due, pruned, err := retentionColumns(kind)
	if err != nil {
		return nil, err
	}
	rows, err := q.db.Query(ctx, retentionDueSQL(due, pruned), now, limit)
	if err != nil {
		return nil, interpretError(err)
	}
	return collect(rows, func(r pgx.Rows) (*store.RunRetention, error) { return scanRetention(r) })
}

func (q *queries) RetentionMarkPruned(ctx context.Context, runID string, kind store.RetentionKind, now *time.Time) error {
	_, pruned, err := retentionColumns(kind)
	if err != nil {
		return err
	}
	return q.exec1(ctx, `UPDATE run_retention SET `+pruned+` = `+nowSQL+` WHERE run_id = $2`, now, runID)
}

func (q *queries) LogPrune(ctx context.Context, runID string, limit int) (int, error) {
	tag, err := q.db.Exec(ctx, `DELETE FROM log_lines WHERE id IN
		(SELECT id FROM log_lines WHERE run_id = $1 ORDER BY id LIMIT $2)`, runID, limit)
	if err != nil {
		return 0, interpretError(err)
	}
	return int(tag.RowsAffected()), nil
}

func (q *queries) ArtifactMarkDeleting(ctx context.Context, runID string, limit int) ([]*store.Artifact, error) {
	rows, err := q.db.Query(ctx, `UPDATE artifacts SET state = 'deleting' WHERE id IN
		(SELECT id FROM artifacts WHERE run_id = $1 AND state = 'stored' ORDER BY id LIMIT $2 FOR UPDATE)
		RETURNING `+artifactCols, runID, limit)
	if err != nil {
		return nil, interpretError(err)
	}
	return collect(rows, func(r pgx.Rows) (*store.Artifact, error) { return scanArtifact(r) })
}

// artifactListStaleSQL reads the artifact rows that are not stored through
// the partial index artifacts_unstored ($1 now, $2 uploading before, $3
// limit).
const artifactListStaleSQL = `SELECT ` + artifactCols + ` FROM artifacts
	WHERE state <> 'stored' AND ((state = 'pending' AND expires_at < ` + sweepNowSQL + `)
		OR (state = 'uploading' AND created_at < $2) OR state = 'deleting')
	ORDER BY created_at, id LIMIT $3`

func (q *queries) ArtifactListStale(ctx context.Context, uploadingBefore time.Time, now *time.Time, limit int) ([]*store.Artifact, error) {
	rows, err := q.db.Query(ctx, artifactListStaleSQL, now, uploadingBefore, limit)
	if err != nil {
		return nil, interpretError(err)
	}
	return collect(rows, func(r pgx.Rows) (*store.Artifact, error) { return scanArtifact(r) })
}

// sourceTicketPurgeSQL deletes expired tickets found through
// source_tickets_expiry ($1 now, $2 limit).
const sourceTicketPurgeSQL = `DELETE FROM source_tickets WHERE digest IN
	(SELECT digest FROM source_tickets WHERE expires_at < ` + sweepNowSQL + ` ORDER BY expires_at LIMIT $2)`

func (q *queries) SourceTicketPurge(ctx context.Context, now *time.Time, limit int) (int, error) {
	tag, err := q.db.Exec(ctx, sourceTicketPurgeSQL, now, limit)
	if err != nil {
		return 0, interpretError(err)
	}
	return int(tag.RowsAffected()), nil
}
