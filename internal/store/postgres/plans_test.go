package postgres_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/audit"
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

	list, scan := postgres.AuditSQL()
	for _, c := range []struct {
		name, sql string
		args      []string
	}{
		{"scan", scan, []string{strconv.Itoa(after), "0", "100"}},
		{"list", list, []string{"'tn_plan'", strconv.Itoa(after), "''", "''", "NULL", "100"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// A generic plan, as the sealer's prepared statement gets after
			// a few runs: it cannot see how close to the end $1 is.
			out, err := postgres.TxStringsSeq(ctx, s, `SET LOCAL plan_cache_mode = force_generic_plan`,
				`PREPARE audit_read AS `+c.sql,
				`EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE audit_read(`+strings.Join(c.args, ", ")+`)`,
				`DEALLOCATE audit_read`)
			require.NoError(t, err)
			plan := out[2][0]
			var plans []struct{ Plan planNode }
			require.NoError(t, json.Unmarshal([]byte(plan), &plans))
			rows := chainRows(plans[0].Plan)
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
	Plans    []planNode `json:"Plans"`
}

// chainRows sums the rows that the plan's scans of audit_chain returned.
func chainRows(p planNode) float64 {
	var n float64
	if p.Relation == "audit_chain" || strings.HasPrefix(p.Index, "audit_chain") {
		n += p.Rows * p.Loops
	}
	for _, c := range p.Plans {
		n += chainRows(c)
	}
	return n
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
			out, err := postgres.TxStringsSeq(ctx, s, `SET LOCAL plan_cache_mode = force_generic_plan`,
				`SET LOCAL enable_seqscan = off`, `SET LOCAL enable_indexscan = on`,
				`PREPARE lookup AS `+c.sql,
				`EXPLAIN (FORMAT JSON) EXECUTE lookup(`+c.args+`)`,
				`DEALLOCATE lookup`)
			require.NoError(t, err)
			require.Contains(t, out[4][0], `"Index Name": "`+c.index+`"`, "plan: %s", out[4][0])
		})
	}
}
