package bench

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/store/postgres"
)

// The backlog measurement answers "does a claim stay as cheap with a million
// runs queued as with a thousand?". One run is requested through the API and
// copied in bulk (INSERT … SELECT generate_series) into `backlog` queued runs
// and attempts, all older than it, in the runners' pool. Then the runners
// claim and finish `runs` of them through the API, exactly as in the
// claim+result phase, and the claim latency is reported. PostgreSQL only: it
// is the store meant for big queues.

// Backlog is the outcome of the backlog measurement.
type Backlog struct {
	Queued       int     `json:"queued"`
	InsertSecs   float64 `json:"insert_seconds"`
	ClaimResult  Phase   `json:"claim_result"`
	ClaimLatency Latency `json:"claim_latency"`
	// Explain is EXPLAIN (ANALYZE, BUFFERS) of the claim statement with the
	// backlog in place, run in a transaction that is rolled back.
	Explain string `json:"explain,omitempty"`
}

// backlogPrefix marks the copied rows' ids; the benchmark deletes none of
// them (use a fresh database).
const backlogPrefix = "BKLG"

// RunBacklog fills the queue and measures claims against it.
func (e *Env) RunBacklog(ctx context.Context, runners []*Runner, backlog, runs int) (*Backlog, error) {
	if e.Driver != "postgres" {
		return nil, fmt.Errorf("--backlog needs PostgreSQL (the store is %s)", e.Driver)
	}
	tmpl, err := e.RequestRuns(ctx, 1, 1, nil)
	if err != nil {
		return nil, err
	}
	var tmplID string
	for id := range tmpl.CreatedAt {
		tmplID = id
	}
	conn, err := pgx.Connect(ctx, e.DSN)
	if err != nil {
		return nil, fmt.Errorf("backlog: %w", err)
	}
	defer conn.Close(ctx)
	t0 := clock.Real{}.Now()
	// Copies are older than the template (and than anything requested
	// later), one microsecond apart, so they are claimed first and in order.
	runSQL := `INSERT INTO runs (id, tenant, job, channel, ref, commit_sha, params, actor, reason, source,
			idempotency_key, state, decision, grants, lease_keys, waiting_for, spec, max_attempts, counted_attempts,
			cancel_requested, created_at, updated_at, finished_at)
		SELECT 'run_` + backlogPrefix + `' || lpad(g::text, 22, '0'), tenant, job, channel, ref, commit_sha, params, actor, reason, source,
			'', 'queued', decision, grants, lease_keys, waiting_for, spec, max_attempts, 0,
			false, created_at - interval '1 day' + g * interval '1 microsecond', updated_at, NULL
		FROM runs, generate_series(1, $2) g WHERE runs.id = $1`
	attSQL := `INSERT INTO attempts (id, run_id, tenant, number, state, pool, labels, lease_ttl_us, timeout_us,
			not_before, runner_id, lease_digest, claim_request_id, created_at, blocked_on)
		SELECT 'att_` + backlogPrefix + `' || lpad(g::text, 22, '0'), 'run_` + backlogPrefix + `' || lpad(g::text, 22, '0'),
			tenant, 1, 'queued', pool, labels, lease_ttl_us, timeout_us,
			not_before - interval '1 day' + g * interval '1 microsecond', '', '', '', created_at, ''
		FROM attempts, generate_series(1, $2) g WHERE attempts.run_id = $1`
	// In slices, so that one statement does not hold a million rows' worth
	// of work in one transaction on a small machine.
	const slice = 100_000
	for lo := 0; lo < backlog; lo += slice {
		n := min(slice, backlog-lo)
		off := func(q string) string {
			return strings.ReplaceAll(q, "g::text", "(g + "+fmt.Sprint(lo)+")::text")
		}
		if _, err := conn.Exec(ctx, off(runSQL), tmplID, n); err != nil {
			return nil, fmt.Errorf("backlog: insert runs: %w", err)
		}
		if _, err := conn.Exec(ctx, off(attSQL), tmplID, n); err != nil {
			return nil, fmt.Errorf("backlog: insert attempts: %w", err)
		}
	}
	if _, err := conn.Exec(ctx, `ANALYZE runs; ANALYZE attempts`); err != nil {
		return nil, fmt.Errorf("backlog: analyze: %w", err)
	}
	out := &Backlog{Queued: backlog + 1, InsertSecs: clock.Real{}.Now().Sub(t0).Seconds()}
	if out.Explain, err = explainClaim(ctx, conn, runners[0].ID); err != nil {
		return nil, err
	}
	dr, err := e.drain(ctx, runners, nil, nil, runs)
	if err != nil {
		return nil, err
	}
	// Each claimed run was claimed once (the drain refuses a result that
	// does not end its run succeeded).
	for id, n := range dr.Claims {
		if n != 1 {
			return nil, fmt.Errorf("backlog: run %s was claimed %d times: %w", id, n, ErrVerify)
		}
	}
	if len(dr.Claims) != runs {
		return nil, fmt.Errorf("backlog: %d runs claimed, want %d: %w", len(dr.Claims), runs, ErrVerify)
	}
	out.ClaimResult, out.ClaimLatency = dr.Phase, dr.ClaimLatency
	return out, nil
}

// explainClaim runs the claim statement under EXPLAIN ANALYZE for runner,
// in a transaction it rolls back.
func explainClaim(ctx context.Context, conn *pgx.Conn, runnerID string) (string, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var tenant, pool string
	var labels []string
	if err := tx.QueryRow(ctx, `SELECT tenant, pool, labels FROM runners WHERE id = $1`, runnerID).Scan(&tenant, &pool, &labels); err != nil {
		return "", fmt.Errorf("explain: runner: %w", err)
	}
	rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) `+postgres.ClaimQuery,
		nil, runnerID, "explain", "", tenant, pool, labels)
	if err != nil {
		return "", fmt.Errorf("explain: %w", err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", fmt.Errorf("explain: %w", err)
	}
	return strings.Join(lines, "\n"), nil
}
