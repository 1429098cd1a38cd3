package sqlite

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/store"
)

// The audit reads and the runs list reach their rows through an index that holds their
// bounds: a run's or an actor's events through that column's index, the
// sealer's scan through the sequence on both sides. Each was once a
// filter ("(?3 = ” OR e.subject = ?3)", "(?2 = 0 OR e.seq <= ?2)"), and
// SQLite then read every event of the tenant, or every event after the
// horizon, at each call.
func TestListsUseTheirIndexes(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "plans.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	_, err = s.db.ExecContext(ctx, `INSERT INTO audit_events (tenant, at, actor, action, subject, details)
		WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < 3000)
		SELECT 'tn', 0, 'usr_' || (i % 300), 'test.event', 'run_' || (i % 1000), '{}' FROM g`)
	require.NoError(t, err)
	_, err = s.db.ExecContext(ctx, `ANALYZE`)
	require.NoError(t, err)

	plan := func(sql string, args ...any) string {
		t.Helper()
		rows, err := s.db.QueryContext(ctx, `EXPLAIN QUERY PLAN `+sql, args...)
		require.NoError(t, err)
		defer rows.Close()
		var lines []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
			lines = append(lines, detail)
		}
		require.NoError(t, rows.Err())
		return strings.Join(lines, "\n")
	}
	for _, c := range []struct {
		name string
		p    store.AuditListParams
		want string
	}{
		{"run", store.AuditListParams{Tenant: "tn", RunID: "run_7"}, "audit_events_subject (tenant=? AND subject=? AND seq>?)"},
		{"run since", store.AuditListParams{Tenant: "tn", RunID: "run_7", Since: time.Unix(1, 0)}, "audit_events_subject (tenant=? AND subject=? AND seq>?)"},
		{"actor", store.AuditListParams{Tenant: "tn", Actor: "usr_7"}, "audit_events_actor (tenant=? AND actor=? AND seq>?)"},
		{"actor newest before", store.AuditListParams{Tenant: "tn", Actor: "usr_7", Before: 100, Desc: true}, "audit_events_actor (tenant=? AND actor=? AND seq>? AND seq<?)"},
	} {
		sql, args := auditListSQL(&c.p)
		got := plan(sql, args...)
		require.Contains(t, got, c.want, "list of %s: %s", c.name, got)
		require.NotContains(t, got, "TEMP B-TREE", "list of %s sorts: %s", c.name, got)
	}
	got := plan(auditScanSQL, 10, math.MaxInt64, 100)
	require.Contains(t, got, "INTEGER PRIMARY KEY (rowid>? AND rowid<?)", "scan: %s", got)
	// A page deep in the runs list starts at its cursor.
	sql, args := runListSQL(&store.RunListParams{Tenant: "tn", Before: "run_5", Limit: 51})
	got = plan(sql, args...)
	require.Contains(t, got, "runs_tenant_id (tenant=? AND id<?)", "runs page: %s", got)
}
