package postgres_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/postgres"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// TestAuditReadsSkipTheSealedChain: reading the events after a sequence
// number reads the hash chain's links from that number on, not the whole
// chain. The sealer reads the events after the chain's head every round;
// a plan that walks audit_chain from its first link makes each round cost
// in proportion to the history (it did: a merge join that started at seq 1).
func TestAuditReadsSkipTheSealedChain(t *testing.T) {
	ctx := context.Background()
	s := testdb.Postgres(t).(*postgres.Store)
	const n = 3000
	_, err := postgres.TxStrings(ctx, s, `INSERT INTO audit_events (tenant, at, actor, action, subject, details)
		SELECT 'tn_plan', now(), 'usr_plan', 'test.event', 'run_' || i, '{}' FROM generate_series(1, `+strconv.Itoa(n)+`) i
		RETURNING seq::text`)
	require.NoError(t, err)
	sealed, err := audit.NewSealer(s, slog.New(slog.DiscardHandler)).SealAll(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, sealed, n)
	for _, table := range []string{"audit_events", "audit_chain"} { // the plan a server gets once autovacuum has run
		_, err = postgres.PoolStrings(ctx, s, `ANALYZE `+table)
		require.NoError(t, err)
	}
	head, err := postgres.PoolStrings(ctx, s, `SELECT max(seq)::text FROM audit_chain`)
	require.NoError(t, err)
	after, err := strconv.Atoi(head[0])
	require.NoError(t, err)
	after -= 10

	scan := postgres.AuditScanSQL()
	list := postgres.AuditListSQL(&store.AuditListParams{Tenant: "tn_plan", After: 1})
	for _, c := range []struct {
		name, sql string
		args      []string
	}{
		{"scan", scan, []string{strconv.Itoa(after), strconv.Itoa(math.MaxInt64), "100"}},
		{"list", list, []string{"'tn_plan'", strconv.Itoa(after), "100"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// A generic plan, as the sealer's prepared statement gets after
			// a few runs: it cannot see how close to the end $1 is.
			top, plan := analyzeGeneric(t, s, c.sql, c.args...)
			rows := relationRows(top, "audit_chain")
			require.GreaterOrEqual(t, rows, 10.0, "the plan reads the links of the last events: %s", plan)
			require.LessOrEqual(t, rows, 100.0, "the plan reads %v links of audit_chain for 10 events: %s", rows, plan)
		})
	}
}

type planNode struct {
	Relation string     `json:"Relation Name"`
	Index    string     `json:"Index Name"`
	Rows     float64    `json:"Actual Rows"`
	Loops    float64    `json:"Actual Loops"`
	Removed  float64    `json:"Rows Removed by Filter"`
	Plans    []planNode `json:"Plans"`
}

// forceGeneric makes a prepared statement take its generic plan at once,
// the plan it gets after a few calls.
const forceGeneric = `SET LOCAL plan_cache_mode = force_generic_plan`

// explainPrepared prepares sql and runs EXPLAIN (opts) of its execution
// with args (SQL literals), after the setup statements, in one transaction;
// it returns the plan (opts should ask for JSON).
func explainPrepared(t *testing.T, s *postgres.Store, setup []string, opts, sql string, args ...string) string {
	t.Helper()
	stmts := append(slices.Clone(setup), `PREPARE explained AS `+sql,
		`EXPLAIN (`+opts+`) EXECUTE explained(`+strings.Join(args, ", ")+`)`, `DEALLOCATE explained`)
	out, err := postgres.TxStringsSeq(context.Background(), s, stmts...)
	require.NoError(t, err)
	return out[len(setup)+1][0]
}

// analyzeGeneric runs sql with args (SQL literals) under EXPLAIN ANALYZE
// with the generic plan a prepared statement gets after a few calls, and
// returns the plan's top node and the plan as text.
func analyzeGeneric(t *testing.T, s *postgres.Store, sql string, args ...string) (planNode, string) {
	t.Helper()
	plan := explainPrepared(t, s, []string{forceGeneric}, "ANALYZE, FORMAT JSON", sql, args...)
	var plans []struct{ Plan planNode }
	require.NoError(t, json.Unmarshal([]byte(plan), &plans))
	return plans[0].Plan, plan
}

// relationRows sums the rows that the plan's scans of table and of its
// indexes (named after it) returned or removed by a filter.
func relationRows(p planNode, table string) float64 {
	var n float64
	if p.Relation == table || strings.HasPrefix(p.Index, table+"_") {
		n += (p.Rows + p.Removed) * p.Loops
	}
	for _, c := range p.Plans {
		n += relationRows(c, table)
	}
	return n
}

// TestAuditReadsUseTheirBounds: with the generic plans their prepared
// statements end up with, the sealer's scan up to its horizon reads no
// event after the horizon, and the audit list of one run or one actor
// reads that run's or actor's events, not every event of the tenant.
// Each bound was once a filter ("$2 = 0 OR e.seq <= $2"): the scan read
// every event written after the horizon at each call, and a run's
// timeline read the tenant's whole history.
func TestAuditReadsUseTheirBounds(t *testing.T) {
	ctx := context.Background()
	s := testdb.Postgres(t).(*postgres.Store)
	const n = 3000
	_, err := postgres.TxStrings(ctx, s, `INSERT INTO audit_events (tenant, at, actor, action, subject, details)
		SELECT 'tn_bound', now(), CASE WHEN i % 500 = 0 THEN 'usr_rare' ELSE 'usr_' || (i % 300) END, 'test.event', 'run_' || (i % 1000), '{}'
		FROM generate_series(1, `+strconv.Itoa(n)+`) i RETURNING ''`)
	require.NoError(t, err)
	_, err = postgres.PoolStrings(ctx, s, `ANALYZE audit_events`)
	require.NoError(t, err)
	first, err := postgres.PoolStrings(ctx, s, `SELECT min(seq)::text FROM audit_events WHERE tenant = 'tn_bound'`)
	require.NoError(t, err)
	from, err := strconv.Atoi(first[0])
	require.NoError(t, err)
	from--

	for _, c := range []struct {
		name, sql string
		args      []string
		want      float64 // rows the statement answers
	}{
		// The horizon 10 events in, 2,990 written after it.
		{"scan up to a horizon", postgres.AuditScanSQL(), []string{strconv.Itoa(from), strconv.Itoa(from + 10), "1000"}, 10},
		{"list of a run", postgres.AuditListSQL(&store.AuditListParams{Tenant: "tn_bound", RunID: "run_7"}),
			[]string{"'tn_bound'", strconv.Itoa(from), "'run_7'", "1000"}, 3},
		{"list of an actor", postgres.AuditListSQL(&store.AuditListParams{Tenant: "tn_bound", Actor: "usr_rare"}),
			[]string{"'tn_bound'", strconv.Itoa(from), "'usr_rare'", "1000"}, 6},
		{"list of a run since", postgres.AuditListSQL(&store.AuditListParams{Tenant: "tn_bound", RunID: "run_7", Since: time.Unix(1, 0)}),
			[]string{"'tn_bound'", strconv.Itoa(from), "'run_7'", "'1970-01-01T00:00:01Z'", "1000"}, 3},
		// The audit page's newest first, 1,000 events back.
		{"newest first before a cursor", postgres.AuditListSQL(&store.AuditListParams{Tenant: "tn_bound", Before: 1, Desc: true}),
			[]string{"'tn_bound'", "0", strconv.Itoa(from + n - 1000), "100"}, 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			top, plan := analyzeGeneric(t, s, c.sql, c.args...)
			require.Equal(t, c.want, top.Rows, "rows answered: %s", plan)
			read := relationRows(top, "audit_events")
			require.LessOrEqual(t, read, 4*c.want, "the plan reads %v events of audit_events for %v: %s", read, c.want, plan)
		})
	}
}

// TestRunsPageStartsAtItsCursor: a page deep in the runs list reads from
// its cursor on, with the generic plan, not every newer run of the tenant
// (the cursor was a filter that also held when it was empty).
func TestRunsPageStartsAtItsCursor(t *testing.T) {
	ctx := context.Background()
	s := testdb.Postgres(t).(*postgres.Store)
	_, err := postgres.TxStrings(ctx, s, `INSERT INTO runs (id, tenant, job, channel, ref, commit_sha, actor, reason,
			idempotency_key, state, lease_keys, waiting_for, max_attempts, counted_attempts, created_at, updated_at)
		SELECT 'run_' || lpad(i::text, 5, '0'), 'tn_page', 'job', 'main', 'main', '', 'usr', '', '', 'succeeded', '[]', '', 1, 1, now(), now()
		FROM generate_series(1, 3000) i RETURNING ''`)
	require.NoError(t, err)
	_, err = postgres.PoolStrings(ctx, s, `ANALYZE runs`)
	require.NoError(t, err)
	sql := postgres.RunListSQL(&store.RunListParams{Tenant: "tn_page", Before: "run_00100"})
	top, plan := analyzeGeneric(t, s, sql, "'tn_page'", "'run_00100'", "51")
	require.Equal(t, 51.0, top.Rows, "rows answered: %s", plan)
	read := relationRows(top, "runs")
	require.LessOrEqual(t, read, 200.0, "the page reads %v runs for 51: %s", read, plan)
}

// TestLookupsUsePartialIndexes: the lookups of a live run holding a lease
// key and of an attempt by its claim request use their partial indexes,
// whose conditions leave out the rows they never look up (migration 014),
// with the generic plan a prepared statement ends up with.
func TestLookupsUsePartialIndexes(t *testing.T) {
	ctx := context.Background()
	s := testdb.Postgres(t).(*postgres.Store)
	// A tenant with many live runs, none holding keys, so that its runs
	// are no way to the one that holds a key.
	_, err := postgres.TxStrings(ctx, s, `INSERT INTO runs (id, tenant, job, channel, ref, commit_sha, actor, reason,
			idempotency_key, state, lease_keys, waiting_for, max_attempts, counted_attempts, created_at, updated_at)
		SELECT 'run_' || i, 'tn_x', 'job', 'main', 'main', '', 'usr', '', '', 'queued', '[]', '', 1, 0, now(), now()
		FROM generate_series(1, 5000) i RETURNING ''`)
	require.NoError(t, err)
	_, err = postgres.PoolStrings(ctx, s, `ANALYZE runs`)
	require.NoError(t, err)
	live, byRequest := postgres.LookupSQL()
	for _, c := range []struct {
		name, sql, args, index string
	}{
		{"lease live run", live, `'tn_x', 'db', 'run_x'`, "runs_live_lease_keys"},
		{"attempt by claim request", byRequest, `'rnr_x', 'req_x'`, "attempts_claim_request"},
	} {
		t.Run(c.name, func(t *testing.T) {
			plan := explainPrepared(t, s, []string{forceGeneric, `SET LOCAL enable_seqscan = off`, `SET LOCAL enable_indexscan = on`},
				"FORMAT JSON", c.sql, c.args)
			require.Contains(t, plan, `"Index Name": "`+c.index+`"`, "plan: %s", plan)
		})
	}
}

// TestLeaseWaiterStatementsUseIndexes: unblocking a key's waiters and the
// sweep for waiters of free keys read attempts through attempts_blocked and
// update them by primary key, with generic plans, when most of the table is
// not waiting: a release or a sweep never scans every attempt. (With the
// locked rows joined back to attempts the update was a hash join over a
// scan of the table.)
func TestLeaseWaiterStatementsUseIndexes(t *testing.T) {
	ctx := context.Background()
	s := testdb.Postgres(t).(*postgres.Store)
	_, err := postgres.TxStrings(ctx, s, `WITH r AS (INSERT INTO runs (id, tenant, job, channel, ref, commit_sha, actor, reason,
			idempotency_key, state, lease_keys, waiting_for, max_attempts, counted_attempts, created_at, updated_at)
		SELECT 'run_' || i, 'tn_w', 'job', 'main', 'main', '', 'usr', '', '', 'queued', '[]', '', 1, 0, now(), now()
		FROM generate_series(1, 6000) i RETURNING id)
		INSERT INTO attempts (id, run_id, tenant, number, state, pool, lease_ttl_us, timeout_us, not_before,
			runner_id, lease_digest, claim_request_id, created_at, blocked_on)
		SELECT 'att_' || substr(id, 5), id, 'tn_w', 1, CASE WHEN substr(id, 5)::int <= 5900 THEN 'succeeded' ELSE 'queued' END,
			'default', 1000000, 1000000, now(), '', '', '', now(),
			CASE WHEN substr(id, 5)::int > 5950 THEN 'hot' WHEN substr(id, 5)::int > 5900 THEN 'free' ELSE '' END
		FROM r RETURNING ''`)
	require.NoError(t, err)
	_, err = postgres.TxStrings(ctx, s, `INSERT INTO leases (tenant, key, slot, run_id, attempt_id, fencing_token, acquired_at)
		VALUES ('tn_w', 'hot', 0, 'run_1', 'att_1', 1, now()) RETURNING ''`)
	require.NoError(t, err)
	_, err = postgres.PoolStrings(ctx, s, `ANALYZE attempts`)
	require.NoError(t, err)
	unblock, sweep := postgres.LeaseWaiterSQL()
	for _, c := range []struct{ name, sql, args string }{
		{"unblock", unblock, `'tn_w', 'hot'`},
		{"sweep", sweep, `100`},
	} {
		t.Run(c.name, func(t *testing.T) {
			plan := explainPrepared(t, s, []string{forceGeneric}, "FORMAT JSON", c.sql, c.args)
			require.Contains(t, plan, `"Index Name": "attempts_blocked"`, "plan: %s", plan)
			require.NotRegexp(t, `"Node Type": "Seq Scan",[^{}]*"Relation Name": "attempts"`, plan)
		})
	}
}

// TestGenericPlansProbeIndexes: every statement marked for a generic plan,
// planned on a new, empty schema, reaches its tables through an index.
// The generic plan is made once per connection and kept while the table
// grows (until ANALYZE invalidates it, never where autovacuum is off), so
// a sequential scan chosen for an empty table is paid at every call ever
// after: LogAppends' duplicate check hashed all of log_lines at every call,
// 4.5 ms a call at 8,000 lines.
func TestGenericPlansProbeIndexes(t *testing.T) {
	s := testdb.Postgres(t).(*postgres.Store)
	param := regexp.MustCompile(`\$(\d+)`)
	for name, sql := range postgres.GenericSQL() {
		t.Run(name, func(t *testing.T) {
			n := 0
			for _, m := range param.FindAllStringSubmatch(sql, -1) {
				n = max(n, atoi(t, m[1]))
			}
			plan := explainPrepared(t, s, []string{postgres.SetGenericSQL}, "FORMAT JSON", sql,
				strings.TrimSuffix(strings.Repeat("NULL, ", n), ", "))
			var plans []struct{ Plan scanNode }
			require.NoError(t, json.Unmarshal([]byte(plan), &plans))
			require.Empty(t, fullScans(plans[0].Plan), "scans of whole tables in the generic plan: %s", plan)
		})
	}
}

// TestGenericSQLListsEveryGenericStatement keeps GenericSQL complete: a
// statement marked generic that the test above does not plan could hold a
// sequential scan unseen.
func TestGenericSQLListsEveryGenericStatement(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	marks := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		src := string(b)
		marks += strings.Count(src, "generic(") + strings.Count(src, "genericMark + `")
		marks -= strings.Count(src, "func generic(")
	}
	distinct := map[string]bool{}
	for _, sql := range postgres.GenericSQL() {
		distinct[sql] = true
	}
	// runsCreateQueuedSQL is one mark and two statements.
	require.Equal(t, marks+1, len(distinct), "statements marked generic in the package vs listed by GenericSQL")
}

type scanNode struct {
	Type      string     `json:"Node Type"`
	Relation  string     `json:"Relation Name"`
	Index     string     `json:"Index Name"`
	IndexCond string     `json:"Index Cond"`
	Plans     []scanNode `json:"Plans"`
}

// fullScans lists the plan's sequential scans and its index scans without
// a condition (a whole index read, as a hash join's input would be).
func fullScans(p scanNode) []string {
	var out []string
	switch {
	case p.Type == "Seq Scan":
		out = append(out, p.Type+" on "+p.Relation)
	case strings.Contains(p.Type, "Index Scan") && p.IndexCond == "":
		out = append(out, p.Type+" of "+p.Index)
	}
	for _, c := range p.Plans {
		out = append(out, fullScans(c)...)
	}
	return out
}

func atoi(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}

// TestSweepsCompareTimeInTheIndex: the periodic sweeps (the reaper's list
// of expired leases, the nonce purge) compare their time column with a
// time PostgreSQL can use as an index condition. (The GitHub outbox's due
// list does too; whether its plan uses the condition depends on how many
// entries wait, so it is not asserted here.) Compared with clock_timestamp(), which is volatile, the
// index was read whole at every round, with the row behind every entry.
func TestSweepsCompareTimeInTheIndex(t *testing.T) {
	s := testdb.Postgres(t).(*postgres.Store)
	expired, purge := postgres.SweepSQL()
	for _, c := range []struct {
		name, sql, args, column string
	}{
		{"expired leases", expired, `NULL, 100`, "lease_expires_at"},
		{"nonce purge", purge, `NULL`, "expires_at"},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Sequential scans off: on empty tables the planner would pick
			// one whatever the condition; the question is whether the time
			// bounds the index scan.
			plan := explainPrepared(t, s, []string{`SET LOCAL enable_seqscan = off`}, "FORMAT JSON", c.sql, c.args)
			var plans []struct{ Plan scanNode }
			require.NoError(t, json.Unmarshal([]byte(plan), &plans))
			require.True(t, boundedBy(plans[0].Plan, c.column), "no index condition on %s: %s", c.column, plan)
		})
	}
}

// boundedBy reports whether an index scan of p has a condition on column.
func boundedBy(p scanNode, column string) bool {
	if strings.Contains(p.Type, "Index Scan") && strings.Contains(p.IndexCond, column) {
		return true
	}
	for _, c := range p.Plans {
		if boundedBy(c, column) {
			return true
		}
	}
	return false
}

// TestRetentionSweepUsesItsIndexes: the retention sweep's lists read their
// partial indexes, bounded by the time or the cursor they compare, so that
// a round costs what is due, not the history kept.
func TestRetentionSweepUsesItsIndexes(t *testing.T) {
	s := testdb.Postgres(t).(*postgres.Store)
	logsDue, stale, purge, unstamped := postgres.RetentionSQL()
	for _, c := range []struct {
		name, sql, args, index, column string
	}{
		{"logs due", logsDue, `NULL, 100`, "run_retention_logs_due", "logs_due_at"},
		{"stale artifact rows", stale, `NULL, now(), 100`, "artifacts_unstored", ""},
		{"source ticket purge", purge, `NULL, 100`, "source_tickets_expiry", "expires_at"},
		{"ended runs", unstamped, `now(), 100`, "runs_finished", "finished_at"},
		{"logs to move", postgres.LogArchiveSQL(), `NULL, now(), 100`, "run_retention_logs_unarchived", "finished_at"},
	} {
		t.Run(c.name, func(t *testing.T) {
			plan := explainPrepared(t, s, []string{`SET LOCAL enable_seqscan = off`}, "FORMAT JSON", c.sql, c.args)
			require.Contains(t, plan, `"Index Name": "`+c.index+`"`, "plan: %s", plan)
			if c.column != "" {
				var plans []struct{ Plan scanNode }
				require.NoError(t, json.Unmarshal([]byte(plan), &plans))
				require.True(t, boundedBy(plans[0].Plan, c.column), "no index condition on %s: %s", c.column, plan)
			}
		})
	}
}
