package sqlite

import (
	"context"
	"time"

	"github.com/jobplane/jobplane/internal/store"
)

// ---- schedules ----

const scheduleCols = "tenant, channel, job, cron, tz, commit_sha, next_fire_at, last_window, updated_at"

func scanSchedule(r scanner) (*store.Schedule, error) {
	s := &store.Schedule{}
	err := r.Scan(&s.Tenant, &s.Channel, &s.Job, &s.Cron, &s.TZ, &s.Commit, timeCol{&s.NextFireAt},
		timePtrCol{&s.LastWindow}, timeCol{&s.UpdatedAt})
	if err != nil {
		return nil, interpretError(err)
	}
	return s, nil
}

func (q *queries) ScheduleGet(ctx context.Context, tenant, channel, job string) (*store.Schedule, error) {
	return scanSchedule(q.db.QueryRowContext(ctx, `SELECT `+scheduleCols+` FROM schedules
		WHERE tenant = ? AND channel = ? AND job = ?`, tenant, channel, job))
}

func (q *queries) ScheduleInsert(ctx context.Context, s *store.Schedule) error {
	return q.insert(ctx, `INSERT INTO schedules (`+scheduleCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, coalesce(?, `+nowSQL+`)) ON CONFLICT DO NOTHING RETURNING updated_at`,
		[]any{s.Tenant, s.Channel, s.Job, s.Cron, s.TZ, s.Commit, microsZero(s.NextFireAt), microsPtr(s.LastWindow), micros(s.UpdatedAt)},
		timeCol{&s.UpdatedAt})
}

func (q *queries) ScheduleAdvance(ctx context.Context, s *store.Schedule, oldNext time.Time) error {
	return interpretError(q.db.QueryRowContext(ctx, `UPDATE schedules
		SET cron = ?, tz = ?, commit_sha = ?, next_fire_at = ?, last_window = ?, updated_at = coalesce(?, `+nowSQL+`)
		WHERE tenant = ? AND channel = ? AND job = ? AND next_fire_at = ? RETURNING updated_at`,
		s.Cron, s.TZ, s.Commit, microsZero(s.NextFireAt), microsPtr(s.LastWindow), micros(s.UpdatedAt),
		s.Tenant, s.Channel, s.Job, microsZero(oldNext)).Scan(timeCol{&s.UpdatedAt}))
}

func (q *queries) ScheduleDelete(ctx context.Context, tenant, channel, job string) error {
	return q.exec1(ctx, `DELETE FROM schedules WHERE tenant = ? AND channel = ? AND job = ?`, tenant, channel, job)
}

func (q *queries) ScheduleList(ctx context.Context, tenant string) ([]*store.Schedule, error) {
	rows, err := q.db.QueryContext(ctx, `SELECT `+scheduleCols+` FROM schedules WHERE tenant = ? ORDER BY channel, job`, tenant)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []*store.Schedule
	for rows.Next() {
		s, err := scanSchedule(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, interpretError(rows.Err())
}

// ScheduleInsert records a schedule behind the write gate.
func (s *Store) ScheduleInsert(ctx context.Context, sc *store.Schedule) error {
	return s.gated(ctx, func(q *queries) error { return q.ScheduleInsert(ctx, sc) })
}

// ScheduleAdvance claims a fire time behind the write gate.
func (s *Store) ScheduleAdvance(ctx context.Context, sc *store.Schedule, oldNext time.Time) error {
	return s.gated(ctx, func(q *queries) error { return q.ScheduleAdvance(ctx, sc, oldNext) })
}

// ScheduleDelete forgets a schedule behind the write gate.
func (s *Store) ScheduleDelete(ctx context.Context, tenant, channel, job string) error {
	return s.gated(ctx, func(q *queries) error { return q.ScheduleDelete(ctx, tenant, channel, job) })
}
