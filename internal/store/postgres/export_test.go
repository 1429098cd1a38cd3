package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/jobplane/jobplane/internal/store"
)

// TerminateListener kills the backend of the store's LISTEN connection, as a
// database restart or a network cut would.
func TerminateListener(ctx context.Context, s *Store) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM (
		SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE query LIKE 'LISTEN %' || $1 || '%') t`, s.channel).Scan(&n)
	return n, err
}

// TxStrings runs sql in a transaction begun as InTx begins them (declaring
// the scope of ctx) and returns the first column of every row.
func TxStrings(ctx context.Context, s *Store, sql string) (out []string, err error) {
	err = s.InTx(ctx, func(tx store.Tx) error {
		out, err = firstColumn(ctx, tx.(*queries).db, sql)
		return err
	})
	return out, err
}

// PoolStrings runs sql as the store runs its statements outside InTx.
func PoolStrings(ctx context.Context, s *Store, sql string) ([]string, error) {
	return firstColumn(ctx, s.queries.db, sql)
}

func firstColumn(ctx context.Context, db dbtx, sql string) ([]string, error) {
	rows, err := db.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// TxStringsEach runs, in one transaction begun with ctx, sql once with each
// of ctxs, as the group committer runs the bodies of several callers.
func TxStringsEach(ctx context.Context, s *Store, sql string, ctxs ...context.Context) (out [][]string, err error) {
	err = s.InTx(ctx, func(tx store.Tx) error {
		out = nil
		for _, c := range ctxs {
			got, err := firstColumn(c, tx.(*queries).db, sql)
			if err != nil {
				return err
			}
			out = append(out, got)
		}
		return nil
	})
	return out, err
}

// RunnerCached reports whether the store serves the runner from its cache.
func RunnerCached(s *Store, id string) bool { return s.CachedReads.Runners.Has(id) }

// Generic marks sql to run with a generic plan.
func Generic(sql string) string { return generic(sql) }

// TxStringsSeq runs the statements one after the other in a transaction
// begun as InTx begins them, each with ctx, and returns the first column
// of each one's rows.
func TxStringsSeq(ctx context.Context, s *Store, sqls ...string) (out [][]string, err error) {
	err = s.InTx(ctx, func(tx store.Tx) error {
		out = nil
		for _, sql := range sqls {
			got, err := firstColumn(ctx, tx.(*queries).db, sql)
			if err != nil {
				return err
			}
			out = append(out, got)
		}
		return nil
	})
	return out, err
}

// AuditListSQL returns AuditList's statement for p's filters.
func AuditListSQL(p *store.AuditListParams) string {
	sql, _ := auditListSQL(p)
	return sql
}

// RunListSQL returns RunList's statement for p's filters.
func RunListSQL(p *store.RunListParams) string {
	sql, _ := runListSQL(p)
	return sql
}

// AuditScanSQL returns AuditScan's statement.
func AuditScanSQL() string { return auditScanSQL }

// LookupSQL returns LeaseLiveRun's and AttemptGetByClaimRequest's statements.
func LookupSQL() (leaseLiveRun, attemptByClaimRequest string) {
	return leaseLiveRunSQL, attemptByClaimRequestSQL
}

// GenericSQL returns the statements that run with generic plans, by name.
func GenericSQL() map[string]string {
	return map[string]string{
		"RunUpdates":                 runUpdatesSQL,
		"AttemptRunUpdates":          attemptRunUpdatesSQL,
		"LogAppends":                 logAppendsSQL,
		"RunsCreateQueued":           runsCreateQueuedSQL(""),
		"RunsCreateQueued with keys": runsCreateQueuedSQL("ON CONFLICT DO NOTHING"),
		"AttemptsForCall":            attemptsForCallSQL,
	}
}

// SetGenericSQL is what precedes a statement marked generic.
const SetGenericSQL = setGenericSQL

// RetentionSQL returns the statements of the retention sweep's lists:
// RetentionDue of logs, ArtifactListStale, SourceTicketPurge and
// RunsEndedUnstamped.
func RetentionSQL() (logsDue, stale, ticketPurge, unstamped string) {
	return retentionDueSQL("logs_due_at", "logs_pruned_at"), artifactListStaleSQL, sourceTicketPurgeSQL, runsEndedUnstampedSQL
}

// SweepSQL returns the statements of AttemptListExpired and NoncePurge.
func SweepSQL() (expired, noncePurge string) { return attemptListExpiredSQL, noncePurgeSQL }

// LeaseWaiterSQL returns the statements that unblock a key's waiters on
// release and sweep the waiters of keys nobody holds.
func LeaseWaiterSQL() (unblock, wakeStranded string) { return unblockWaitersSQL, leaseWakeStrandedSQL }

// LogArchiveSQL returns the statement of RunsLogsUnarchived.
func LogArchiveSQL() (unarchived string) { return runsLogsUnarchivedSQL }
