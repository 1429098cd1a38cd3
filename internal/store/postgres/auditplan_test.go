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
