package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/store"
)

type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// queries implements store.Queries over the pool or one transaction.
type queries struct {
	db dbtx
	s  *Store
	// woke: the transaction called WakeClaimers (tryTx broadcasts after
	// its commit, and flushLater sends the NOTIFY); wokeHere: it called
	// WakeWatchers (tryTx broadcasts after its commit, with no NOTIFY).
	woke, wokeHere bool
	// read holds the records of the runs the transaction read (noteRun);
	// nil outside a transaction.
	read map[*store.Run]runRecords
	// later holds what a transaction writes without needing an answer —
	// its audit events and its wake-up notification — until just before
	// its commit (flushLater), where they go in one statement: a round
	// trip each was a third of a run request's and a result's.
	later laterWrites
	// forget lists the cache entries the transaction's writes invalidate,
	// forgotten again locally after its commit (store.ReadCache).
	forget []func()
}

func (q *queries) forgetAll() {
	for _, f := range q.forget {
		f()
	}
}

// announce forgets a cached row here and now, has every server forget it
// (this one included) when the change commits, and in a transaction
// forgets it here again right after the commit: a read in between could
// have cached the row as it was.
func (q *queries) announce(ctx context.Context, payload string) error {
	q.s.announced(payload)
	if _, err := q.db.Exec(ctx, `SELECT pg_notify($1, $2)`, q.s.channel, payload); err != nil {
		return interpretError(err)
	}
	if q.inTx() {
		q.forget = append(q.forget, func() { q.s.announced(payload) })
	} else {
		q.s.announced(payload)
	}
	return nil
}

var _ store.Tx = (*queries)(nil)

type scanner interface{ Scan(dest ...any) error }

// nowSQL is the statement clock unless the caller passes a time as $1.
const nowSQL = "coalesce($1::timestamptz, clock_timestamp())"

// sweepNowSQL is the time a sweep compares an indexed column with: the
// statement's start unless the caller passes a time as $1. clock_timestamp()
// is volatile, so PostgreSQL cannot make a comparison with it an index
// condition: the sweep then read every entry of its index, and every row
// behind them, at every round (the reaper read all 16,000 attempts ever
// leased, once a second, to find none expired). A sweep only lists
// candidates; what it does to each is decided again under the row's lock.
const sweepNowSQL = "coalesce($1::timestamptz, statement_timestamp())"

func limit(n int) any {
	if n <= 0 {
		return nil // LIMIT NULL is no limit
	}
	return n
}

func newID(prefix string) string { return id.New(prefix, clock.Real{}.Now()) }

func forUpdateSQL(forUpdate bool) string {
	if forUpdate {
		return " FOR UPDATE"
	}
	return ""
}

func (q *queries) exec1(ctx context.Context, sql string, args ...any) error {
	tag, err := q.db.Exec(ctx, sql, args...)
	if err != nil {
		return interpretError(err)
	}
	if tag.RowsAffected() == 0 {
		return store.ErrNotFound
	}
	return nil
}

// insert runs an INSERT ... ON CONFLICT DO NOTHING RETURNING. DO NOTHING
// rather than a unique-violation error keeps the caller's transaction usable,
// e.g. to read the row that won.
func (q *queries) insert(ctx context.Context, sql string, args []any, dest ...any) error {
	err := q.db.QueryRow(ctx, sql, args...).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrAlreadyExists
	}
	return interpretError(err)
}

// ---- tokens and principals ----

const principalCols = "id, tenant, kind, name, admin, created_at"

func scanPrincipal(r scanner, extra ...any) (*store.Principal, error) {
	p := &store.Principal{}
	if err := r.Scan(append([]any{&p.ID, &p.Tenant, &p.Kind, &p.Name, &p.Admin, &p.CreatedAt}, extra...)...); err != nil {
		return nil, interpretError(err)
	}
	utc(&p.CreatedAt)
	return p, nil
}

func (q *queries) APITokenCreate(ctx context.Context, t *store.APIToken) error {
	if t.ID == "" {
		t.ID = newID(id.Token)
	}
	err := q.insert(ctx, `INSERT INTO api_tokens (id, principal_id, digest, expires_at, revoked_at, created_at)
		VALUES ($2, $3, $4, $5, $6, `+nowSQL+`) ON CONFLICT DO NOTHING RETURNING created_at`,
		[]any{timeArg(t.CreatedAt), t.ID, t.PrincipalID, t.Digest, t.ExpiresAt, t.RevokedAt}, &t.CreatedAt)
	utc(&t.CreatedAt)
	return err
}

func (q *queries) APITokenGetByDigest(ctx context.Context, digest string) (*store.APIToken, *store.Principal, error) {
	t := &store.APIToken{}
	row := q.db.QueryRow(ctx, `SELECT p.id, p.tenant, p.kind, p.name, p.admin, p.created_at,
		t.id, t.principal_id, t.digest, t.expires_at, t.revoked_at, t.created_at
		FROM api_tokens t JOIN principals p ON p.id = t.principal_id WHERE t.digest = $1`, digest)
	p, err := scanPrincipal(row, &t.ID, &t.PrincipalID, &t.Digest, &t.ExpiresAt, &t.RevokedAt, &t.CreatedAt)
	if err != nil {
		return nil, nil, err
	}
	utcp(&t.ExpiresAt)
	utcp(&t.RevokedAt)
	utc(&t.CreatedAt)
	return t, p, nil
}

func (q *queries) APITokenRevoke(ctx context.Context, tenant, tokenID string, now *time.Time) error {
	var digest string
	if err := q.db.QueryRow(ctx, `UPDATE api_tokens SET revoked_at = coalesce(revoked_at, `+nowSQL+`) WHERE id = $2
		AND principal_id IN (SELECT id FROM principals WHERE tenant = $3) RETURNING digest`, now, tokenID, tenant).Scan(&digest); err != nil {
		return interpretError(err)
	}
	return q.announce(ctx, notifyToken+digest)
}

func (q *queries) PrincipalCreate(ctx context.Context, p *store.Principal) error {
	if p.ID == "" {
		p.ID = newID(id.Principal)
	}
	err := q.insert(ctx, `INSERT INTO principals (id, tenant, kind, name, admin, created_at)
		VALUES ($2, $3, $4, $5, $6, `+nowSQL+`) ON CONFLICT DO NOTHING RETURNING created_at`,
		[]any{timeArg(p.CreatedAt), p.ID, p.Tenant, p.Kind, p.Name, p.Admin}, &p.CreatedAt)
	utc(&p.CreatedAt)
	return err
}

func (q *queries) PrincipalGetByName(ctx context.Context, tenant, name string) (*store.Principal, error) {
	return scanPrincipal(q.db.QueryRow(ctx, `SELECT `+principalCols+` FROM principals WHERE tenant = $1 AND name = $2`, tenant, name))
}

// ---- attempts ----

const attemptCols = `id, run_id, tenant, number, state, pool, labels, lease_ttl_us, timeout_us, not_before,
	runner_id, lease_digest, claim_request_id, claimed_at, lease_expires_at, deadline, heartbeat_at, ended_at,
	result, created_at, blocked_on, repo, managed_only, needs`

var attemptColsQ = prefixCols("attempts.", attemptCols)

func scanAttempt(r scanner) (*store.Attempt, error) {
	a := &store.Attempt{}
	var ttl, timeout int64
	var needs int32
	err := r.Scan(&a.ID, &a.RunID, &a.Tenant, &a.Number, &a.State, &a.Pool, &a.Labels, &ttl, &timeout,
		&a.NotBefore, &a.RunnerID, &a.LeaseDigest, &a.ClaimRequestID, &a.ClaimedAt, &a.LeaseExpiresAt,
		&a.Deadline, &a.HeartbeatAt, &a.EndedAt, jsonCol{&a.Result}, &a.CreatedAt, &a.BlockedOn, &a.Repo, &a.ManagedOnly, &needs)
	if err != nil {
		return nil, interpretError(err)
	}
	a.LeaseTTL, a.Timeout, a.Needs = us(ttl), us(timeout), store.Capabilities(needs)
	nilEmpty(&a.Labels)
	utc(&a.NotBefore)
	utc(&a.CreatedAt)
	for _, p := range []**time.Time{&a.ClaimedAt, &a.LeaseExpiresAt, &a.Deadline, &a.HeartbeatAt, &a.EndedAt} {
		utcp(p)
	}
	return a, nil
}

func (q *queries) attempts(ctx context.Context, sql string, args ...any) ([]*store.Attempt, error) {
	rows, err := q.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []*store.Attempt
	for rows.Next() {
		a, err := scanAttempt(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, interpretError(rows.Err())
}

// ClaimQuery claims the oldest eligible attempt of a scope. It locks the
// chosen row in a CTE and updates exactly it; the CTE shape (not IN (SELECT …
// LIMIT …)) guarantees at most one row (bug #15715). Parameters: $1 fake now
// or NULL, $2 runner, $3 lease digest, $4 claim request id, $5 tenant, $6
// pool, $7 runner labels, $8 self-hosted runner, $9 its allowed
// repositories, $10 its capabilities. Exported for `jobplane bench --explain`.
var ClaimQuery = claimWith + claimUpdate

// claimRunQuery is ClaimQuery that also returns the claimed attempt's run,
// locked after the attempt: one round trip where the claim took two.
var claimRunQuery = claimWith + `, u AS (` + claimUpdate + `)
		SELECT u.*, ` + runColsQ + ` FROM u JOIN runs ON runs.id = u.run_id FOR UPDATE OF runs`

var claimWith = claimCTE("a.id", "1")

// NeedsArg is the claim's $10: every needs value a runner with caps can
// serve (the subsets of caps). An equality the planner estimates from the
// column's statistics keeps the claim on its index, where the bitwise test
// (needs & ~caps) = 0, an expression without statistics, was guessed
// selective enough to make a sort of a sequential scan look cheaper.
func NeedsArg(caps store.Capabilities) []int32 {
	var out []int32
	for s := caps; ; s = (s - 1) & caps {
		out = append(out, int32(s))
		if s == 0 {
			return out
		}
	}
}

// claimCTE is the statement clock (n) and the eligible queued attempts the
// runner may take (c), locked in claim order, with the columns c carries
// and how many it takes.
func claimCTE(cols, limit string) string {
	return `WITH n AS (SELECT ` + nowSQL + ` AS now),
		c AS (
			SELECT ` + cols + ` FROM attempts a
			WHERE a.state = 'queued' AND a.tenant = $5 AND a.pool = $6
				AND a.not_before <= (SELECT now FROM n) AND a.blocked_on = '' AND a.labels <@ $7::text[]
				AND (NOT $8 OR NOT a.managed_only) AND (cardinality($9::text[]) = 0 OR a.repo = ANY($9::text[]))
				AND a.needs = ANY($10::integer[])
			ORDER BY a.not_before, a.id
			LIMIT ` + limit + `
			FOR UPDATE OF a SKIP LOCKED)`
}

var claimUpdate = `
		UPDATE attempts SET state = 'leased', runner_id = $2, lease_digest = $3, claim_request_id = $4,
			claimed_at = n.now, heartbeat_at = n.now,
			deadline = n.now + attempts.timeout_us * interval '1 microsecond',
			lease_expires_at = n.now + LEAST(attempts.lease_ttl_us, attempts.timeout_us) * interval '1 microsecond'
		FROM c, n
		WHERE attempts.id = c.id AND attempts.state = 'queued'
		RETURNING ` + attemptColsQ

func (q *queries) AttemptClaim(ctx context.Context, p *store.AttemptClaimParams) (*store.Attempt, error) {
	return scanAttempt(q.db.QueryRow(ctx, ClaimQuery,
		p.Now, p.RunnerID, p.LeaseDigest, p.ClaimRequestID, p.Tenant, p.Pool, listArg(p.RunnerLabels),
		p.SelfHosted, listArg(p.AllowedRepos), NeedsArg(p.Capabilities)))
}

func (q *queries) AttemptClaimRun(ctx context.Context, p *store.AttemptClaimParams) (*store.Attempt, *store.Run, error) {
	row := q.db.QueryRow(ctx, claimRunQuery,
		p.Now, p.RunnerID, p.LeaseDigest, p.ClaimRequestID, p.Tenant, p.Pool, listArg(p.RunnerLabels),
		p.SelfHosted, listArg(p.AllowedRepos), NeedsArg(p.Capabilities))
	var r *store.Run
	a, err := scanAttempt(scanFunc(func(ad ...any) error {
		var err error
		r, err = q.noteRun(scanRun(scanFunc(func(rd ...any) error { return row.Scan(append(ad, rd...)...) })))
		return err
	}))
	if err != nil {
		return nil, nil, err
	}
	return a, r, nil
}

// claimRunsQuery is claimRunQuery for up to $11 attempts: the i-th in
// claim order gets the i-th lease digest ($3) and claim request ID ($4).
// The row numbers are taken after the locking CTE, which may not carry a
// window function; the runs are locked in claim order.
var claimRunsQuery = claimCTE("a.id, a.not_before", "$11") + `,
		o AS (SELECT id, row_number() OVER (ORDER BY not_before, id) AS i FROM c),
		u AS (
		UPDATE attempts SET state = 'leased', runner_id = $2, lease_digest = ($3::text[])[o.i], claim_request_id = ($4::text[])[o.i],
			claimed_at = n.now, heartbeat_at = n.now,
			deadline = n.now + attempts.timeout_us * interval '1 microsecond',
			lease_expires_at = n.now + LEAST(attempts.lease_ttl_us, attempts.timeout_us) * interval '1 microsecond'
		FROM o, n
		WHERE attempts.id = o.id AND attempts.state = 'queued'
		RETURNING o.i, ` + attemptColsQ + `)
		SELECT u.*, ` + runColsQ + ` FROM u JOIN runs ON runs.id = u.run_id ORDER BY u.i FOR UPDATE OF runs`

func (q *queries) AttemptClaimRuns(ctx context.Context, p *store.AttemptClaimParams, slots []store.ClaimSlot) ([]store.ClaimedRun, error) {
	if len(slots) == 0 {
		return nil, nil
	}
	digests, requests := make([]string, len(slots)), make([]string, len(slots))
	for i, sl := range slots {
		digests[i], requests[i] = sl.LeaseDigest, sl.ClaimRequestID
	}
	rows, err := q.db.Query(ctx, claimRunsQuery,
		p.Now, p.RunnerID, digests, requests, p.Tenant, p.Pool, listArg(p.RunnerLabels),
		p.SelfHosted, listArg(p.AllowedRepos), NeedsArg(p.Capabilities), len(slots))
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []store.ClaimedRun
	for rows.Next() {
		var slot int64
		var r *store.Run
		a, err := scanAttempt(scanFunc(func(ad ...any) error {
			var err error
			r, err = q.noteRun(scanRun(scanFunc(func(rd ...any) error { return rows.Scan(append(append([]any{&slot}, ad...), rd...)...) })))
			return err
		}))
		if err != nil {
			return nil, err
		}
		out = append(out, store.ClaimedRun{Attempt: a, Run: r, Slot: int(slot) - 1})
	}
	return out, interpretError(rows.Err())
}

func (q *queries) AttemptCreate(ctx context.Context, a *store.Attempt) error {
	if a.ID == "" {
		a.ID = newID(id.Attempt)
	}
	if a.State == "" {
		a.State = store.AttemptQueued
	}
	err := q.insert(ctx, `INSERT INTO attempts (`+attemptCols+`) VALUES ($2, $3, $4, $5, $6, $7, $8, $9, $10, $11,
		$12, $13, $14, $15, $16, $17, $18, $19, $20, `+nowSQL+`, $21, $22, $23, $24) ON CONFLICT DO NOTHING RETURNING created_at`,
		[]any{timeArg(a.CreatedAt), a.ID, a.RunID, a.Tenant, a.Number, a.State, a.Pool, listArg(a.Labels),
			a.LeaseTTL.Microseconds(), a.Timeout.Microseconds(), a.NotBefore, a.RunnerID, a.LeaseDigest,
			a.ClaimRequestID, a.ClaimedAt, a.LeaseExpiresAt, a.Deadline, a.HeartbeatAt, a.EndedAt, jsonArg(a.Result),
			a.BlockedOn, a.Repo, a.ManagedOnly, int32(a.Needs)},
		&a.CreatedAt)
	utc(&a.CreatedAt)
	return err
}

// attemptByClaimRequestSQL repeats the condition of
// attempts_claim_request, which leaves out attempts never claimed
// (migration 014), so that the planner can use it.
var attemptByClaimRequestSQL = `SELECT ` + attemptCols + ` FROM attempts
		WHERE runner_id = $1 AND claim_request_id = $2 AND claim_request_id <> '' ORDER BY number DESC LIMIT 1`

func (q *queries) AttemptGetByClaimRequest(ctx context.Context, runnerID, requestID string) (*store.Attempt, error) {
	if requestID == "" {
		return nil, store.ErrNotFound
	}
	return scanAttempt(q.db.QueryRow(ctx, attemptByClaimRequestSQL, runnerID, requestID))
}

func (q *queries) AttemptGetByID(ctx context.Context, attemptID string, forUpdate bool) (*store.Attempt, error) {
	return scanAttempt(q.db.QueryRow(ctx, `SELECT `+attemptCols+` FROM attempts WHERE id = $1`+forUpdateSQL(forUpdate), attemptID))
}

var runColsQ = prefixCols("runs.", runCols)

func (q *queries) AttemptForCall(ctx context.Context, attemptID string, withRun bool, now *time.Time) (*store.Attempt, *store.Run, time.Time, error) {
	var t time.Time
	if !withRun {
		row := q.db.QueryRow(ctx, `SELECT `+attemptColsQ+`, `+nowSQL+` FROM attempts WHERE attempts.id = $2 FOR UPDATE`, now, attemptID)
		a, err := scanAttempt(scanFunc(func(dest ...any) error { return row.Scan(append(dest, &t)...) }))
		return a, nil, t.UTC(), err
	}
	// FOR UPDATE locks the rows of both tables the join returns, attempt
	// then run, the order the calls locked them in one by one.
	row := q.db.QueryRow(ctx, `SELECT `+attemptColsQ+`, `+runColsQ+`, `+nowSQL+`
		FROM attempts JOIN runs ON runs.id = attempts.run_id WHERE attempts.id = $2 FOR UPDATE`, now, attemptID)
	var r *store.Run
	a, err := scanAttempt(scanFunc(func(ad ...any) error {
		var err error
		r, err = q.noteRun(scanRun(scanFunc(func(rd ...any) error {
			return row.Scan(append(append(ad, rd...), &t)...)
		})))
		return err
	}))
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	return a, r, t.UTC(), nil
}

// attemptsForCallSQL is AttemptsForCall's statement.
var attemptsForCallSQL = generic(`SELECT ` + attemptColsQ + `, ` + runColsQ + `, ` + nowSQL + `
		FROM attempts JOIN runs ON runs.id = attempts.run_id WHERE attempts.id = ANY($2::text[])
		ORDER BY attempts.id FOR UPDATE`)

// AttemptsForCall locks the attempts and their runs in one statement, in
// attempt ID order (one order for every caller that locks several). Its
// plan is generic: by primary key, whatever the IDs.
func (q *queries) AttemptsForCall(ctx context.Context, ids []string, now *time.Time) ([]store.CallRows, error) {
	rows, err := q.db.Query(ctx, attemptsForCallSQL, now, ids)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []store.CallRows
	for rows.Next() {
		var c store.CallRows
		c.Attempt, err = scanAttempt(scanFunc(func(ad ...any) error {
			var err error
			c.Run, err = q.noteRun(scanRun(scanFunc(func(rd ...any) error {
				return rows.Scan(append(append(ad, rd...), &c.Now)...)
			})))
			return err
		}))
		if err != nil {
			return nil, err
		}
		c.Now = c.Now.UTC()
		out = append(out, c)
	}
	return out, interpretError(rows.Err())
}

// scanFunc lets scan functions share one row: the outer one's Scan calls
// the inner one, whose Scan reads the row into both destination lists.
type scanFunc func(dest ...any) error

func (f scanFunc) Scan(dest ...any) error { return f(dest...) }

func (q *queries) AttemptListByRun(ctx context.Context, runID string) ([]*store.Attempt, error) {
	return q.attempts(ctx, `SELECT `+attemptCols+` FROM attempts WHERE run_id = $1 ORDER BY number`, runID)
}

func (q *queries) AttemptListByRuns(ctx context.Context, runIDs []string) ([]*store.Attempt, error) {
	return q.attempts(ctx, `SELECT `+attemptCols+` FROM attempts WHERE run_id = ANY($1) ORDER BY run_id, number`, runIDs)
}

const attemptListExpiredSQL = `SELECT ` + attemptCols + ` FROM attempts
		WHERE state = 'leased' AND lease_expires_at <= ` + sweepNowSQL + `
		ORDER BY lease_expires_at, id LIMIT $2`

func (q *queries) AttemptListExpired(ctx context.Context, p *store.AttemptListExpiredParams) ([]*store.Attempt, error) {
	return q.attempts(ctx, attemptListExpiredSQL, p.Now, limit(p.Limit))
}

func (q *queries) AttemptListLeasedByRunner(ctx context.Context, runnerID string) ([]*store.Attempt, error) {
	return q.attempts(ctx, `SELECT `+attemptCols+` FROM attempts
		WHERE runner_id = $1 AND state = 'leased' ORDER BY claimed_at, id`, runnerID)
}

// AttemptRenew re-checks state, digest and expiry in the UPDATE itself, so a
// renewal racing the reaper either wins entirely or matches nothing.
// holdsIntact: the attempt still holds every lease key of its run, unless
// the run is being cancelled (a break-glass release drops the holds and asks
// the run to stop: its renewals go on answering cancel_requested). A hold
// purged by another acquirer means the lease was lost, whatever the clock
// of this renewal says: a renewal stamped earlier than the takeover (a
// clock that went back) must not revive it.
const holdsIntact = `EXISTS (SELECT 1 FROM runs r WHERE r.id = attempts.run_id AND (r.cancel_requested
	OR (CASE WHEN jsonb_typeof(r.lease_keys) = 'array' THEN jsonb_array_length(r.lease_keys) ELSE 0 END)
		= (SELECT count(*) FROM leases l WHERE l.attempt_id = attempts.id)))`

func (q *queries) AttemptRenew(ctx context.Context, p *store.AttemptRenewParams) (*store.Attempt, error) {
	return scanAttempt(q.db.QueryRow(ctx, `WITH n AS (SELECT `+nowSQL+` AS now)
		UPDATE attempts SET
			lease_expires_at = LEAST(n.now + attempts.lease_ttl_us * interval '1 microsecond', attempts.deadline),
			heartbeat_at = n.now
		FROM n
		WHERE attempts.id = $2 AND attempts.state = 'leased' AND attempts.lease_digest = $3
			AND attempts.lease_expires_at > n.now AND `+holdsIntact+`
		RETURNING `+attemptColsQ, p.Now, p.ID, p.LeaseDigest))
}

func (q *queries) AttemptUpdate(ctx context.Context, a *store.Attempt) error {
	return q.exec1(ctx, `UPDATE attempts SET state = $1, runner_id = $2, lease_digest = $3, claim_request_id = $4,
		claimed_at = $5, lease_expires_at = $6, deadline = $7, heartbeat_at = $8, ended_at = $9, result = $10,
		not_before = $11, blocked_on = $12 WHERE id = $13`,
		a.State, a.RunnerID, a.LeaseDigest, a.ClaimRequestID, a.ClaimedAt, a.LeaseExpiresAt, a.Deadline,
		a.HeartbeatAt, a.EndedAt, jsonArg(a.Result), a.NotBefore, a.BlockedOn, a.ID)
}

// ---- logs ----

// LogAppend is one statement. Two concurrent copies of a chunk both pass the
// NOT EXISTS check, but the second then waits on the unique index and
// inserts nothing, so only one reports the chunk as new.
func (q *queries) LogAppend(ctx context.Context, p *store.LogAppendParams) (bool, error) {
	if len(p.Lines) == 0 {
		var exists bool
		err := q.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM log_lines WHERE attempt_id = $1 AND seq = $2)`,
			p.AttemptID, p.Seq).Scan(&exists)
		return !exists, interpretError(err)
	}
	ats := make([]*time.Time, len(p.Lines))
	streams := make([]string, len(p.Lines))
	texts := make([]string, len(p.Lines))
	for i, l := range p.Lines {
		if !l.At.IsZero() {
			at := l.At
			ats[i] = &at
		}
		streams[i], texts[i] = l.Stream, l.Text
	}
	var n int64
	err := q.db.QueryRow(ctx, `WITH ins AS (
			INSERT INTO log_lines (run_id, attempt_id, seq, idx, at, stream, text)
			SELECT $1, $2, $3, u.ord - 1, coalesce(u.at, clock_timestamp()), u.stream, u.text
			FROM unnest($4::timestamptz[], $5::text[], $6::text[]) WITH ORDINALITY AS u(at, stream, text, ord)
			WHERE NOT EXISTS (SELECT 1 FROM log_lines WHERE attempt_id = $2 AND seq = $3)
			ORDER BY u.ord
			ON CONFLICT DO NOTHING
			RETURNING 1)
		SELECT count(*) FROM ins`, p.RunID, p.AttemptID, p.Seq, ats, streams, texts).Scan(&n)
	if err != nil {
		return false, interpretError(err)
	}
	return n > 0, nil
}

func (q *queries) LogList(ctx context.Context, p *store.LogListParams) ([]*store.LogLine, error) {
	rows, err := q.db.Query(ctx, `SELECT id, run_id, attempt_id, seq, idx, at, stream, text FROM log_lines
		WHERE run_id = $1 AND id > $2 ORDER BY id LIMIT $3`, p.RunID, p.After, limit(p.Limit))
	if err != nil {
		return nil, interpretError(err)
	}
	return collect(rows, scanLogLine)
}

// scanLogLine reads a row of log_lines (id, run_id, attempt_id, seq, idx,
// at, stream, text).
func scanLogLine(r pgx.Rows) (*store.LogLine, error) {
	l := &store.LogLine{}
	if err := r.Scan(&l.ID, &l.RunID, &l.AttemptID, &l.Seq, &l.Idx, &l.At, &l.Stream, &l.Text); err != nil {
		return nil, err
	}
	utc(&l.At)
	return l, nil
}

// ---- nonces, clock ----

func (q *queries) NonceInsertMany(ctx context.Context, nonces []store.Nonce) ([]bool, error) {
	if len(nonces) == 0 {
		return nil, nil
	}
	runners := make([]string, len(nonces))
	values := make([]string, len(nonces))
	expires := make([]time.Time, len(nonces))
	for i, n := range nonces {
		runners[i], values[i], expires[i] = n.RunnerID, n.Nonce, n.ExpiresAt
	}
	rows, err := q.db.Query(ctx, `INSERT INTO nonces (runner_id, nonce, expires_at)
		SELECT r, n, e FROM unnest($1::text[], $2::text[], $3::timestamptz[]) WITH ORDINALITY AS u(r, n, e, i) ORDER BY i
		ON CONFLICT DO NOTHING RETURNING runner_id, nonce`, runners, values, expires)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	inserted := map[string]bool{}
	for rows.Next() {
		var r, n string
		if err := rows.Scan(&r, &n); err != nil {
			return nil, interpretError(err)
		}
		inserted[r+"\x00"+n] = true
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError(err)
	}
	return store.NonceNew(nonces, inserted), nil
}

func (q *queries) NonceInsert(ctx context.Context, runnerID, nonce string, expiresAt time.Time) error {
	tag, err := q.db.Exec(ctx, `INSERT INTO nonces (runner_id, nonce, expires_at) VALUES ($1, $2, $3)
		ON CONFLICT DO NOTHING`, runnerID, nonce, expiresAt)
	if err != nil {
		return interpretError(err)
	}
	if tag.RowsAffected() == 0 {
		return store.ErrAlreadyExists
	}
	return nil
}

const noncePurgeSQL = `DELETE FROM nonces WHERE expires_at < ` + sweepNowSQL

func (q *queries) NoncePurge(ctx context.Context, now *time.Time) (int, error) {
	tag, err := q.db.Exec(ctx, noncePurgeSQL, now)
	if err != nil {
		return 0, interpretError(err)
	}
	return int(tag.RowsAffected()), nil
}

func (q *queries) Now(ctx context.Context, now *time.Time) (time.Time, error) {
	if now != nil {
		return *now, nil
	}
	var t time.Time
	if err := q.db.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&t); err != nil {
		return time.Time{}, interpretError(err)
	}
	return t.UTC(), nil
}

// ---- registration tokens ----

const regTokenCols = "digest, tenant, pool, labels, allowed_repos, self_hosted, expires_at, used_at, created_at"

func (q *queries) RegTokenCreate(ctx context.Context, t *store.RegToken) error {
	err := q.insert(ctx, `INSERT INTO reg_tokens (`+regTokenCols+`) VALUES ($2, $3, $4, $5, $6, $7, $8, $9, `+nowSQL+`)
		ON CONFLICT DO NOTHING RETURNING created_at`,
		[]any{timeArg(t.CreatedAt), t.Digest, t.Tenant, t.Pool, listArg(t.Labels), listArg(t.AllowedRepos),
			t.SelfHosted, t.ExpiresAt, t.UsedAt}, &t.CreatedAt)
	utc(&t.CreatedAt)
	return err
}

// RegTokenUse: the UPDATE re-checks used_at after any lock wait, so of
// concurrent uses exactly one matches.
func (q *queries) RegTokenUse(ctx context.Context, digest string, now *time.Time) (*store.RegToken, error) {
	t := &store.RegToken{}
	err := q.db.QueryRow(ctx, `WITH n AS (SELECT `+nowSQL+` AS now)
		UPDATE reg_tokens SET used_at = n.now FROM n
		WHERE digest = $2 AND used_at IS NULL AND expires_at > n.now
		RETURNING `+prefixCols("reg_tokens.", regTokenCols), now, digest).Scan(&t.Digest, &t.Tenant, &t.Pool,
		&t.Labels, &t.AllowedRepos, &t.SelfHosted, &t.ExpiresAt, &t.UsedAt, &t.CreatedAt)
	if err != nil {
		return nil, interpretError(err)
	}
	nilEmpty(&t.Labels)
	nilEmpty(&t.AllowedRepos)
	utc(&t.ExpiresAt)
	utcp(&t.UsedAt)
	utc(&t.CreatedAt)
	return t, nil
}

// ---- runs ----

const runCols = `id, tenant, job, channel, ref, commit_sha, params, actor, reason, source, idempotency_key, state,
	decision, grants, lease_keys, waiting_for, spec, max_attempts, counted_attempts, cancel_requested,
	created_at, updated_at, finished_at`

func scanRun(r scanner) (*store.Run, error) {
	x := &store.Run{}
	err := r.Scan(&x.ID, &x.Tenant, &x.Job, &x.Channel, &x.Ref, &x.Commit, jsonCol{&x.Params}, &x.Actor, &x.Reason,
		jsonCol{&x.Source}, &x.IdempotencyKey, &x.State, jsonCol{&x.Decision}, jsonCol{&x.Grants},
		jsonCol{&x.LeaseKeys}, &x.WaitingFor, jsonCol{&x.Spec}, &x.MaxAttempts, &x.CountedAttempts,
		&x.CancelRequested, &x.CreatedAt, &x.UpdatedAt, &x.FinishedAt)
	if err != nil {
		return nil, interpretError(err)
	}
	utc(&x.CreatedAt)
	utc(&x.UpdatedAt)
	utcp(&x.FinishedAt)
	return x, nil
}

func (q *queries) RunCreate(ctx context.Context, r *store.Run) error {
	if r.ID == "" {
		r.ID = newID(id.Run)
	}
	err := q.insert(ctx, `WITH n AS (SELECT `+nowSQL+` AS now)
		INSERT INTO runs (`+runCols+`) SELECT $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18,
			$19, $20, $21, $22, n.now, coalesce($2::timestamptz, n.now), $23 FROM n
		ON CONFLICT DO NOTHING RETURNING created_at, updated_at`,
		[]any{timeArg(r.CreatedAt), timeArg(r.UpdatedAt), r.ID, r.Tenant, r.Job, r.Channel, r.Ref, r.Commit,
			jsonArg(r.Params), r.Actor, r.Reason, jsonArg(r.Source), r.IdempotencyKey, r.State, jsonArg(r.Decision),
			jsonArg(r.Grants), jsonArg(r.LeaseKeys), r.WaitingFor, jsonArg(r.Spec), r.MaxAttempts, r.CountedAttempts,
			r.CancelRequested, r.FinishedAt},
		&r.CreatedAt, &r.UpdatedAt)
	utc(&r.CreatedAt)
	utc(&r.UpdatedAt)
	return err
}

// queuedDefaults gives a queued run and its first attempt the IDs and the
// state their insert needs when the caller left them out.
func queuedDefaults(r *store.Run, a *store.Attempt) {
	if r.ID == "" {
		r.ID = newID(id.Run)
	}
	if a.ID == "" {
		a.ID = newID(id.Attempt)
	}
	if a.State == "" {
		a.State = store.AttemptQueued
	}
}

// RunCreateQueued inserts the run and its attempt with one statement: the
// attempt's insert reads the run's from a CTE, so it happens only when the
// run's did, with the run's time.
func (q *queries) RunCreateQueued(ctx context.Context, r *store.Run, a *store.Attempt) error {
	queuedDefaults(r, a)
	var notBefore, created *time.Time
	if !a.NotBefore.IsZero() {
		notBefore = &a.NotBefore
	}
	if !a.CreatedAt.IsZero() {
		created = &a.CreatedAt
	}
	err := q.insert(ctx, `WITH n AS (SELECT `+nowSQL+` AS now),
		r AS (
		INSERT INTO runs (`+runCols+`) SELECT $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18,
			$19, $20, $21, $22, n.now, coalesce($2::timestamptz, n.now), $23 FROM n
		ON CONFLICT DO NOTHING RETURNING created_at, updated_at),
		a AS (
		INSERT INTO attempts (`+attemptCols+`) SELECT $24, $25, $26, $27, $28, $29, $30, $31, $32,
			coalesce($33::timestamptz, r.created_at), $34, $35, $36, $37, $38, $39, $40, $41, $42,
			coalesce($43::timestamptz, r.created_at), $44, $45, $46, $47 FROM r
		ON CONFLICT DO NOTHING RETURNING created_at, not_before)
		SELECT r.created_at, r.updated_at, a.created_at, a.not_before FROM r, a`,
		[]any{timeArg(r.CreatedAt), timeArg(r.UpdatedAt), r.ID, r.Tenant, r.Job, r.Channel, r.Ref, r.Commit,
			jsonArg(r.Params), r.Actor, r.Reason, jsonArg(r.Source), r.IdempotencyKey, r.State, jsonArg(r.Decision),
			jsonArg(r.Grants), jsonArg(r.LeaseKeys), r.WaitingFor, jsonArg(r.Spec), r.MaxAttempts, r.CountedAttempts,
			r.CancelRequested, r.FinishedAt,
			a.ID, a.RunID, a.Tenant, a.Number, a.State, a.Pool, listArg(a.Labels), a.LeaseTTL.Microseconds(), a.Timeout.Microseconds(),
			notBefore, a.RunnerID, a.LeaseDigest, a.ClaimRequestID, a.ClaimedAt, a.LeaseExpiresAt, a.Deadline, a.HeartbeatAt,
			a.EndedAt, jsonArg(a.Result), created, a.BlockedOn, a.Repo, a.ManagedOnly, int32(a.Needs)},
		&r.CreatedAt, &r.UpdatedAt, &a.CreatedAt, &a.NotBefore)
	utc(&r.CreatedAt)
	utc(&r.UpdatedAt)
	utc(&a.CreatedAt)
	utc(&a.NotBefore)
	return err
}

func (q *queries) RunGetByID(ctx context.Context, runID string, forUpdate bool) (*store.Run, error) {
	return q.noteRun(scanRun(q.db.QueryRow(ctx, `SELECT `+runCols+` FROM runs WHERE id = $1`+forUpdateSQL(forUpdate), runID)))
}

func (q *queries) RunGetByIdempotencyKey(ctx context.Context, tenant, actor, key string) (*store.Run, error) {
	if key == "" {
		return nil, store.ErrNotFound
	}
	return q.noteRun(scanRun(q.db.QueryRow(ctx, `SELECT `+runCols+` FROM runs
		WHERE tenant = $1 AND actor = $2 AND idempotency_key = $3`, tenant, actor, key)))
}

// filter is one optional condition of a list statement: cond with a "%d"
// where its parameter's number goes, written only when set.
type filter struct {
	cond string
	v    any
	set  bool
}

// andFilters is " AND cond" for each filter that is set, its parameter
// numbered after args, and args with their values. A list statement
// carries only the filters it is given: a condition that also holds when
// its parameter is empty is a filter, not an index bound, in the generic
// plan a prepared statement ends up with (TestNoOptionalFilterConditions).
func andFilters(args []any, fs ...filter) (string, []any) {
	var b strings.Builder
	for _, f := range fs {
		if f.set {
			args = append(args, f.v)
			fmt.Fprintf(&b, " AND "+f.cond, len(args))
		}
	}
	return b.String(), args
}

// runListSQL is RunList's statement for the filters p gives, and its
// arguments. With the cursor a filter, a page deep in the list read every
// newer run of the tenant.
func runListSQL(p *store.RunListParams) (string, []any) {
	conds, args := andFilters([]any{p.Tenant},
		filter{"id < $%d", p.Before, p.Before != ""}, filter{"job = $%d", p.Job, p.Job != ""},
		filter{"state = $%d", p.State, p.State != ""}, filter{"channel = $%d", p.Channel, p.Channel != ""},
		filter{"actor = $%d", p.Actor, p.Actor != ""})
	args = append(args, limit(p.Limit))
	return fmt.Sprintf(`SELECT %s FROM runs WHERE tenant = $1%s ORDER BY id DESC LIMIT $%d`, runCols, conds, len(args)), args
}

func (q *queries) RunList(ctx context.Context, p *store.RunListParams) ([]*store.Run, error) {
	sql, args := runListSQL(p)
	rows, err := q.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	return collect(rows, func(r pgx.Rows) (*store.Run, error) { return q.noteRun(scanRun(r)) })
}

// AttemptRunUpdate updates the attempt in a CTE and the run only when the
// attempt's row was there: no row updated at all is ErrNotFound. A missing
// run leaves the attempt updated and returns ErrNotFound, which fails the
// caller's transaction, as the two statements would.
func (q *queries) AttemptRunUpdate(ctx context.Context, a *store.Attempt, r *store.Run) error {
	keep := q.keepRecords(r)
	return q.exec1(ctx, attemptRunUpdateSQL,
		timeArg(r.UpdatedAt), r.State, recordArg(keep, r.Decision), recordArg(keep, r.Grants), r.WaitingFor, r.CountedAttempts,
		r.CancelRequested, r.FinishedAt, r.ID,
		a.State, a.RunnerID, a.LeaseDigest, a.ClaimRequestID, a.ClaimedAt, a.LeaseExpiresAt, a.Deadline,
		a.HeartbeatAt, a.EndedAt, jsonArg(a.Result), a.NotBefore, a.BlockedOn, a.ID, keep)
}

var attemptRunUpdateSQL = `WITH a AS (
		UPDATE attempts SET state = $10, runner_id = $11, lease_digest = $12, claim_request_id = $13,
			claimed_at = $14, lease_expires_at = $15, deadline = $16, heartbeat_at = $17, ended_at = $18, result = $19,
			not_before = $20, blocked_on = $21 WHERE id = $22 RETURNING 1)
		UPDATE runs SET state = $2, ` + keptRecordsSQL("$3::json", "$4::jsonb", "$23::boolean") + `, waiting_for = $5,
		counted_attempts = $6, cancel_requested = $7, updated_at = ` + nowSQL + `, finished_at = $8
		WHERE id = $9 AND EXISTS (SELECT 1 FROM a)`

func (q *queries) RunUpdate(ctx context.Context, r *store.Run) error {
	keep := q.keepRecords(r)
	return q.exec1(ctx, runUpdateSQL,
		timeArg(r.UpdatedAt), r.State, recordArg(keep, r.Decision), recordArg(keep, r.Grants), r.WaitingFor, r.CountedAttempts,
		r.CancelRequested, r.FinishedAt, r.ID, keep)
}

var runUpdateSQL = `UPDATE runs SET state = $2, ` + keptRecordsSQL("$3::json", "$4::jsonb", "$10::boolean") + `,
		waiting_for = $5, counted_attempts = $6, cancel_requested = $7, updated_at = ` + nowSQL + `, finished_at = $8
		WHERE id = $9`

// keptRecordsSQL sets a run's decision and grants, or, where keep is
// true (keepRecords), leaves them as stored: the values are then not sent
// (recordArg) and PostgreSQL does not parse them again.
func keptRecordsSQL(decision, grants, keep string) string {
	return fmt.Sprintf(`decision = CASE WHEN %[3]s THEN runs.decision ELSE %[1]s END,
		grants = CASE WHEN %[3]s THEN runs.grants ELSE %[2]s END`, decision, grants, keep)
}

// recordArg is a run's record v as a parameter, or NULL when the update
// keeps the stored one.
func recordArg(keep bool, v json.RawMessage) any {
	if keep {
		return nil
	}
	return jsonArg(v)
}

// runRecords are a run's decision and grants as a transaction read them.
type runRecords struct{ decision, grants json.RawMessage }

// noteRun remembers, in a transaction, the records of each run it reads
// (keepRecords).
func (q *queries) noteRun(r *store.Run, err error) (*store.Run, error) {
	if err == nil && q.read != nil {
		q.read[r] = runRecords{decision: r.Decision, grants: r.Grants}
	}
	return r, err
}

// keepRecords reports whether this transaction read r and r's Decision
// and Grants are still the very slices it read: then an update need not
// write them. Together they are about a kilobyte per run, and most
// updates (a claim's lease, a result) leave them as they are. Code that
// changes a record assigns a new slice (json.Marshal, a splice); nothing
// edits one in place. A run read elsewhere, or made in Go, is written
// whole.
func (q *queries) keepRecords(r *store.Run) bool {
	rec, ok := q.read[r]
	return ok && sameSlice(r.Decision, rec.decision) && sameSlice(r.Grants, rec.grants)
}

// sameSlice reports whether a and b are the same bytes in memory (or both
// empty), not merely equal ones.
func sameSlice(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// ---- runners ----

const runnerCols = `id, tenant, pool, name, labels, public_key, key_fingerprint, status, self_hosted, allowed_repos,
	version, last_seen_at, created_at, executor, capabilities`

func scanRunner(r scanner) (*store.Runner, error) {
	x := &store.Runner{}
	var caps int32
	err := r.Scan(&x.ID, &x.Tenant, &x.Pool, &x.Name, &x.Labels, &x.PublicKey, &x.KeyFingerprint, &x.Status,
		&x.SelfHosted, &x.AllowedRepos, &x.Version, &x.LastSeenAt, &x.CreatedAt, &x.Executor, &caps)
	if err != nil {
		return nil, interpretError(err)
	}
	x.Capabilities = store.Capabilities(caps)
	nilEmpty(&x.Labels)
	nilEmpty(&x.AllowedRepos)
	utcp(&x.LastSeenAt)
	utc(&x.CreatedAt)
	return x, nil
}

func (q *queries) RunnerCreate(ctx context.Context, r *store.Runner) error {
	if r.ID == "" {
		r.ID = newID(id.Runner)
	}
	if r.Status == "" {
		r.Status = store.RunnerActive
	}
	err := q.insert(ctx, `INSERT INTO runners (`+runnerCols+`) VALUES ($2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12,
		$13, `+nowSQL+`, $14, $15) ON CONFLICT DO NOTHING RETURNING created_at`,
		[]any{timeArg(r.CreatedAt), r.ID, r.Tenant, r.Pool, r.Name, listArg(r.Labels), r.PublicKey, r.KeyFingerprint,
			r.Status, r.SelfHosted, listArg(r.AllowedRepos), r.Version, r.LastSeenAt, runnerExecutor(r), int32(r.Capabilities)}, &r.CreatedAt)
	utc(&r.CreatedAt)
	return err
}

func (q *queries) RunnerGetByID(ctx context.Context, runnerID string, forUpdate bool) (*store.Runner, error) {
	return scanRunner(q.db.QueryRow(ctx, `SELECT `+runnerCols+` FROM runners WHERE id = $1`+forUpdateSQL(forUpdate), runnerID))
}

func (q *queries) RunnerList(ctx context.Context, tenant string) ([]*store.Runner, error) {
	rows, err := q.db.Query(ctx, `SELECT `+runnerCols+` FROM runners WHERE tenant = $1 ORDER BY id`, tenant)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []*store.Runner
	for rows.Next() {
		r, err := scanRunner(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, interpretError(rows.Err())
}

func (q *queries) RunnerTouch(ctx context.Context, runnerID string, now *time.Time) error {
	var t time.Time
	if err := q.db.QueryRow(ctx, `UPDATE runners SET last_seen_at = `+nowSQL+` WHERE id = $2 RETURNING last_seen_at`, now, runnerID).Scan(&t); err != nil {
		return interpretError(err)
	}
	// Only this server reads its cached last-seen time (to touch at most
	// once a second): the entry is brought up to date, not announced.
	t = t.UTC()
	q.s.CachedReads.Runners.Update(runnerID, func(r *store.Runner) { r.LastSeenAt = &t })
	return nil
}

func (q *queries) RunnerUpdate(ctx context.Context, r *store.Runner) error {
	if err := q.exec1(ctx, `UPDATE runners SET status = $1, public_key = $2, key_fingerprint = $3, labels = $4,
		executor = $6, capabilities = $7 WHERE id = $5`,
		r.Status, r.PublicKey, r.KeyFingerprint, listArg(r.Labels), r.ID, runnerExecutor(r), int32(r.Capabilities)); err != nil {
		return err
	}
	return q.announce(ctx, notifyRunner+r.ID)
}

// ---- tenants ----

func (q *queries) TenantEnsure(ctx context.Context, name string, now *time.Time) (*store.Tenant, error) {
	if _, err := q.db.Exec(ctx, `INSERT INTO tenants (id, name, created_at) VALUES ($2, $3, `+nowSQL+`)
		ON CONFLICT (name) DO NOTHING`, now, newID(id.Tenant), name); err != nil {
		return nil, interpretError(err)
	}
	t := &store.Tenant{}
	if err := q.db.QueryRow(ctx, `SELECT id, name, created_at FROM tenants WHERE name = $1`, name).
		Scan(&t.ID, &t.Name, &t.CreatedAt); err != nil {
		return nil, interpretError(err)
	}
	utc(&t.CreatedAt)
	return t, nil
}

func (q *queries) TenantGetByID(ctx context.Context, tenantID string) (*store.Tenant, error) {
	t := &store.Tenant{}
	if err := q.db.QueryRow(ctx, `SELECT id, name, created_at FROM tenants WHERE id = $1`, tenantID).
		Scan(&t.ID, &t.Name, &t.CreatedAt); err != nil {
		return nil, interpretError(err)
	}
	utc(&t.CreatedAt)
	return t, nil
}

// WakeClaimers: PostgreSQL delivers the notification at commit and drops it
// on rollback, which is exactly the contract. Other processes (replicas)
// learn from the notification; this process wakes its own claimers itself
// right after the commit (tryTx) instead of waiting for the notification to
// travel through the listener connection, which under load took tens of
// milliseconds of request→claimed latency. The payload names this process
// so that its listener ignores the echo. One notification per transaction
// is enough (PostgreSQL folds identical ones anyway), so a transaction
// sends it once.
func (q *queries) WakeClaimers(ctx context.Context) error {
	if !q.inTx() {
		_, err := q.db.Exec(ctx, `SELECT pg_notify($1, $2)`, q.s.channel, q.s.instance)
		if err == nil {
			q.s.broadcast()
		}
		return interpretError(err)
	}
	// Sent with the transaction's audit events, just before its commit
	// (flushLater): PostgreSQL delivers it at the commit either way.
	q.woke = true
	return nil
}

// WakeWatchers wakes this process's waiters after the commit, as
// WakeClaimers does, without the NOTIFY (store.Queries).
func (q *queries) WakeWatchers(ctx context.Context) error {
	if !q.inTx() {
		q.s.broadcast()
		return nil
	}
	q.wokeHere = true
	return nil
}

// runnerExecutor is the executor stored for r: a runner that never named
// one runs the process executor.
func runnerExecutor(r *store.Runner) string {
	if r.Executor == "" {
		r.Executor = store.ExecutorProcess
	}
	return r.Executor
}
