package postgres

import (
	"context"
	"time"

	"github.com/jobplane/jobplane/internal/store"
)

// MetricsGauges runs one statement per gauge; the runs count scans the
// table, which is why it happens per scrape and not per request.
func (q *queries) MetricsGauges(ctx context.Context, now *time.Time) (*store.Gauges, error) {
	g := &store.Gauges{}
	counts := func(sql string, scan func(c *store.Count) []any, args ...any) ([]store.Count, error) {
		rows, err := q.db.Query(ctx, sql, args...)
		if err != nil {
			return nil, interpretError(err)
		}
		defer rows.Close()
		var out []store.Count
		for rows.Next() {
			var c store.Count
			if err := rows.Scan(scan(&c)...); err != nil {
				return nil, interpretError(err)
			}
			out = append(out, c)
		}
		return out, interpretError(rows.Err())
	}
	var err error
	if g.Runs, err = counts(`SELECT job, state, count(*) FROM runs GROUP BY job, state ORDER BY job, state`,
		func(c *store.Count) []any { return []any{&c.Job, &c.State, &c.N} }); err != nil {
		return nil, err
	}
	if g.Attempts, err = counts(`SELECT state, count(*) FROM attempts GROUP BY state ORDER BY state`,
		func(c *store.Count) []any { return []any{&c.State, &c.N} }); err != nil {
		return nil, err
	}
	if g.QueueDepth, err = counts(`SELECT pool, count(*) FROM attempts
		WHERE state = 'queued' AND blocked_on = '' AND not_before <= coalesce($1::timestamptz, clock_timestamp())
		GROUP BY pool ORDER BY pool`,
		func(c *store.Count) []any { return []any{&c.Pool, &c.N} }, now); err != nil {
		return nil, err
	}
	if err := q.db.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM attempts WHERE state = 'queued' AND blocked_on <> ''),
			coalesce((SELECT max(seq) FROM audit_chain), 0),
			coalesce((SELECT max(seq) FROM audit_events), 0)`).Scan(&g.LeaseWaits, &g.AuditHead, &g.AuditLatest); err != nil {
		return nil, interpretError(err)
	}
	rows, err := q.db.Query(ctx, `SELECT id, pool, status, last_seen_at FROM runners ORDER BY id`)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	for rows.Next() {
		var r store.RunnerSeen
		if err := rows.Scan(&r.ID, &r.Pool, &r.Status, &r.LastSeenAt); err != nil {
			return nil, interpretError(err)
		}
		utcp(&r.LastSeenAt)
		g.Runners = append(g.Runners, r)
	}
	return g, interpretError(rows.Err())
}
