package bench

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/postgres"
)

// The backlog measurement answers "does a claim stay as cheap with a million
// runs queued as with a thousand?". One run is requested through the API and
// copied in bulk (INSERT … SELECT generate_series) into `backlog` queued runs
// and attempts, all older than it, in the runners' pool. Then the runners
// claim and finish `runs` of them through the API, exactly as in the
// claim+result phase, and the claim latency is reported. PostgreSQL only: it
// is the store meant for big queues.

// Backlog is the outcome of the backlog measurement: the same claims
// measured first with a small queue, then with the big one, in one run.
type Backlog struct {
	Small BacklogRound `json:"small"`
	Big   BacklogRound `json:"big"`
	// P99Ratio is the big queue's claim p99 over the small one's.
	P99Ratio float64 `json:"p99_ratio"`
}

// BacklogRound is one measurement at one queue size.
type BacklogRound struct {
	// Queued is the number of queued runs when the round's claims begin.
	Queued       int     `json:"queued"`
	InsertSecs   float64 `json:"insert_seconds"`
	ClaimResult  Phase   `json:"claim_result"`
	ClaimLatency Latency `json:"claim_latency"`
	// Explain is EXPLAIN (ANALYZE, BUFFERS) of the claim statement with the
	// queue in place, run in a transaction that is rolled back.
	Explain string `json:"explain,omitempty"`
}

// backlogPrefix marks the copied rows' ids; the benchmark deletes none of
// them (use a fresh database).
const backlogPrefix = "BKLG"

// SmallBacklog is the queue the big one is compared with.
const SmallBacklog = 1000

// RunBacklog measures claims with SmallBacklog runs queued, then fills the
// queue up to backlog runs and measures again.
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
	out := &Backlog{}
	// The small queue holds runs+SmallBacklog copies so that SmallBacklog
	// are still queued while the last claims are measured; the big one
	// adds the rest.
	small := runs + SmallBacklog
	// Queued counts the template too: what is queued when the claims begin.
	if err := e.round(ctx, conn, runners, tmplID, 0, small, small+1, runs, &out.Small); err != nil {
		return nil, err
	}
	big := max(backlog, small)
	if err := e.round(ctx, conn, runners, tmplID, small, big+runs-small, big+1, runs, &out.Big); err != nil {
		return nil, err
	}
	if out.Small.ClaimLatency.P99ms > 0 {
		out.P99Ratio = math.Round(out.Big.ClaimLatency.P99ms/out.Small.ClaimLatency.P99ms*100) / 100
	}
	return out, nil
}

// round inserts n more copies (ids from offset on), then claims and
// finishes runs of the queue.
func (e *Env) round(ctx context.Context, conn *pgx.Conn, runners []*Runner, tmplID string, offset, n, queued, runs int, out *BacklogRound) error {
	t0 := clock.Real{}.Now()
	if err := fillBacklog(ctx, conn, tmplID, offset, n); err != nil {
		return err
	}
	out.Queued = queued
	out.InsertSecs = math.Round(clock.Real{}.Now().Sub(t0).Seconds()*10) / 10
	var err error
	if out.Explain, err = explainClaim(ctx, conn, runners[0].ID); err != nil {
		return err
	}
	dr, err := e.drain(ctx, runners, nil, nil, runs)
	if err != nil {
		return err
	}
	// Each claimed run was claimed once (the drain refuses a result that
	// does not end its run succeeded).
	for id, c := range dr.Claims {
		if c != 1 {
			return fmt.Errorf("backlog: run %s was claimed %d times: %w", id, c, ErrVerify)
		}
	}
	if len(dr.Claims) != runs {
		return fmt.Errorf("backlog: %d runs claimed, want %d: %w", len(dr.Claims), runs, ErrVerify)
	}
	out.ClaimResult, out.ClaimLatency = dr.Phase, dr.ClaimLatency
	return nil
}

// fillBacklog copies the template run n times (ids offset+1 … offset+n).
// Copies are older than the template and than anything requested later,
// one microsecond apart in id order, so they are claimed first and in order.
func fillBacklog(ctx context.Context, conn *pgx.Conn, tmplID string, offset, n int) error {
	runSQL := `INSERT INTO runs (id, tenant, job, channel, ref, commit_sha, params, actor, reason, source,
			idempotency_key, state, decision, grants, lease_keys, waiting_for, spec, max_attempts, counted_attempts,
			cancel_requested, created_at, updated_at, finished_at)
		SELECT 'run_` + backlogPrefix + `' || lpad(g::text, 22, '0'), tenant, job, channel, ref, commit_sha, params, actor, reason, source,
			'', 'queued', decision, grants, lease_keys, waiting_for, spec, max_attempts, 0,
			false, created_at - interval '1 day' + g * interval '1 microsecond', updated_at, NULL
		FROM runs, generate_series($2::bigint, $3::bigint) g WHERE runs.id = $1`
	attSQL := `INSERT INTO attempts (id, run_id, tenant, number, state, pool, labels, lease_ttl_us, timeout_us,
			not_before, runner_id, lease_digest, claim_request_id, created_at, blocked_on)
		SELECT 'att_` + backlogPrefix + `' || lpad(g::text, 22, '0'), 'run_` + backlogPrefix + `' || lpad(g::text, 22, '0'),
			tenant, 1, 'queued', pool, labels, lease_ttl_us, timeout_us,
			not_before - interval '1 day' + g * interval '1 microsecond', '', '', '', created_at, ''
		FROM attempts, generate_series($2::bigint, $3::bigint) g WHERE attempts.run_id = $1`
	// In slices, so that no statement holds a million rows' worth of work
	// in one transaction on a small machine.
	const slice = 100_000
	for lo := offset + 1; lo <= offset+n; lo += slice {
		hi := min(lo+slice-1, offset+n)
		if _, err := conn.Exec(ctx, runSQL, tmplID, lo, hi); err != nil {
			return fmt.Errorf("backlog: insert runs: %w", err)
		}
		if _, err := conn.Exec(ctx, attSQL, tmplID, lo, hi); err != nil {
			return fmt.Errorf("backlog: insert attempts: %w", err)
		}
	}
	if _, err := conn.Exec(ctx, `ANALYZE runs; ANALYZE attempts`); err != nil {
		return fmt.Errorf("backlog: analyze: %w", err)
	}
	return nil
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
	var labels, allowed []string
	var selfHosted bool
	var caps int32
	if err := tx.QueryRow(ctx, `SELECT tenant, pool, labels, self_hosted, allowed_repos, capabilities FROM runners WHERE id = $1`, runnerID).
		Scan(&tenant, &pool, &labels, &selfHosted, &allowed, &caps); err != nil {
		return "", fmt.Errorf("explain: runner: %w", err)
	}
	if allowed == nil {
		allowed = []string{}
	}
	rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) `+postgres.ClaimQuery,
		nil, runnerID, "explain", "", tenant, pool, labels, selfHosted, allowed, postgres.NeedsArg(store.Capabilities(caps)))
	if err != nil {
		return "", fmt.Errorf("explain: %w", err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", fmt.Errorf("explain: %w", err)
	}
	return strings.Join(lines, "\n"), nil
}
