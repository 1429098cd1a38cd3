package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobplane/jobplane/internal/store"
)

// ---- schedules ----

const scheduleCols = "tenant, channel, job, cron, tz, commit_sha, next_fire_at, last_window, updated_at"

func scanSchedule(r pgx.Row) (*store.Schedule, error) {
	s := &store.Schedule{}
	err := r.Scan(&s.Tenant, &s.Channel, &s.Job, &s.Cron, &s.TZ, &s.Commit, &s.NextFireAt, &s.LastWindow, &s.UpdatedAt)
	if err != nil {
		return nil, interpretError(err)
	}
	utc(&s.NextFireAt)
	utcp(&s.LastWindow)
	utc(&s.UpdatedAt)
	return s, nil
}

func (q *queries) ScheduleGet(ctx context.Context, tenant, channel, job string) (*store.Schedule, error) {
	return scanSchedule(q.db.QueryRow(ctx, `SELECT `+scheduleCols+` FROM schedules
		WHERE tenant = $1 AND channel = $2 AND job = $3`, tenant, channel, job))
}

func (q *queries) ScheduleInsert(ctx context.Context, s *store.Schedule) error {
	err := q.insert(ctx, `INSERT INTO schedules (`+scheduleCols+`)
		VALUES ($2, $3, $4, $5, $6, $7, $8, $9, `+nowSQL+`) ON CONFLICT DO NOTHING RETURNING updated_at`,
		[]any{timeArg(s.UpdatedAt), s.Tenant, s.Channel, s.Job, s.Cron, s.TZ, s.Commit, s.NextFireAt, s.LastWindow},
		&s.UpdatedAt)
	utc(&s.UpdatedAt)
	return err
}

func (q *queries) ScheduleAdvance(ctx context.Context, s *store.Schedule, oldNext time.Time) error {
	err := q.db.QueryRow(ctx, `UPDATE schedules
		SET cron = $2, tz = $3, commit_sha = $4, next_fire_at = $5, last_window = $6, updated_at = `+nowSQL+`
		WHERE tenant = $7 AND channel = $8 AND job = $9 AND next_fire_at = $10 RETURNING updated_at`,
		timeArg(s.UpdatedAt), s.Cron, s.TZ, s.Commit, s.NextFireAt, s.LastWindow,
		s.Tenant, s.Channel, s.Job, oldNext).Scan(&s.UpdatedAt)
	utc(&s.UpdatedAt)
	return interpretError(err)
}

func (q *queries) ScheduleDelete(ctx context.Context, tenant, channel, job string) error {
	return q.exec1(ctx, `DELETE FROM schedules WHERE tenant = $1 AND channel = $2 AND job = $3`, tenant, channel, job)
}

func (q *queries) ScheduleList(ctx context.Context, tenant string) ([]*store.Schedule, error) {
	rows, err := q.db.Query(ctx, `SELECT `+scheduleCols+` FROM schedules WHERE tenant = $1 ORDER BY channel, job`, tenant)
	if err != nil {
		return nil, interpretError(err)
	}
	return collect(rows, func(r pgx.Rows) (*store.Schedule, error) { return scanSchedule(r) })
}
