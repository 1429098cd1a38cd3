package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/store"
)

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

type txState struct {
	wake bool
	// forget lists the cache entries the transaction's writes invalidate,
	// forgotten again once it ended (store.ReadCache).
	forget []func()
}

func (st *txState) forgetAll() {
	for _, f := range st.forget {
		f()
	}
}

// changed forgets a cache entry now and, in a transaction, once more after
// it ended: a read between the two could have cached the row as it was.
func (q *queries) changed(f func()) {
	f()
	if q.tx != nil {
		q.tx.forget = append(q.tx.forget, f)
	}
}

// queries implements store.Queries over either the database or one transaction.
type queries struct {
	db execer
	s  *Store
	tx *txState // nil outside a transaction
}

var _ store.Tx = (*queries)(nil)

type scanner interface{ Scan(dest ...any) error }

// limit maps "no limit" (<= 0) to SQLite's LIMIT -1.
func limit(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}

func newID(prefix string) string { return id.New(prefix, clock.Real{}.Now()) }

func (q *queries) exec1(ctx context.Context, query string, args ...any) error {
	res, err := q.db.ExecContext(ctx, query, args...)
	if err != nil {
		return interpretError(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return store.ErrNotFound
	}
	return nil
}

// insert runs an INSERT ... ON CONFLICT DO NOTHING RETURNING; no row back
// means a unique constraint refused it.
func (q *queries) insert(ctx context.Context, query string, args []any, dest ...any) error {
	err := q.db.QueryRowContext(ctx, query, args...).Scan(dest...)
	if err == sql.ErrNoRows {
		return store.ErrAlreadyExists
	}
	return interpretError(err)
}

// ---- tokens and principals ----

const principalCols = "id, tenant, kind, name, admin, created_at"

func scanPrincipal(r scanner, extra ...any) (*store.Principal, error) {
	p := &store.Principal{}
	err := r.Scan(append([]any{&p.ID, &p.Tenant, &p.Kind, &p.Name, &p.Admin, timeCol{&p.CreatedAt}}, extra...)...)
	if err != nil {
		return nil, interpretError(err)
	}
	return p, nil
}

func (q *queries) APITokenCreate(ctx context.Context, t *store.APIToken) error {
	if t.ID == "" {
		t.ID = newID(id.Token)
	}
	return q.insert(ctx, `INSERT INTO api_tokens (id, principal_id, digest, expires_at, revoked_at, created_at)
		VALUES (?, ?, ?, ?, ?, coalesce(?, `+nowSQL+`)) ON CONFLICT DO NOTHING RETURNING created_at`,
		[]any{t.ID, t.PrincipalID, t.Digest, microsPtr(t.ExpiresAt), microsPtr(t.RevokedAt), micros(t.CreatedAt)},
		timeCol{&t.CreatedAt})
}

func (q *queries) APITokenGetByDigest(ctx context.Context, digest string) (*store.APIToken, *store.Principal, error) {
	t := &store.APIToken{}
	row := q.db.QueryRowContext(ctx, `SELECT p.id, p.tenant, p.kind, p.name, p.admin, p.created_at,
		t.id, t.principal_id, t.digest, t.expires_at, t.revoked_at, t.created_at
		FROM api_tokens t JOIN principals p ON p.id = t.principal_id WHERE t.digest = ?`, digest)
	p, err := scanPrincipal(row, &t.ID, &t.PrincipalID, &t.Digest, timePtrCol{&t.ExpiresAt}, timePtrCol{&t.RevokedAt}, timeCol{&t.CreatedAt})
	if err != nil {
		return nil, nil, err
	}
	return t, p, nil
}

func (q *queries) APITokenRevoke(ctx context.Context, tenant, tokenID string, now *time.Time) error {
	var digest string
	err := q.db.QueryRowContext(ctx, `UPDATE api_tokens SET revoked_at = coalesce(revoked_at, ?, `+nowSQL+`) WHERE id = ?
		AND principal_id IN (SELECT id FROM principals WHERE tenant = ?) RETURNING digest`,
		microsPtr(now), tokenID, tenant).Scan(&digest)
	if err != nil {
		return interpretError(err)
	}
	q.changed(func() { q.s.CachedReads.Tokens.Forget(digest) })
	return nil
}

func (q *queries) PrincipalCreate(ctx context.Context, p *store.Principal) error {
	if p.ID == "" {
		p.ID = newID(id.Principal)
	}
	return q.insert(ctx, `INSERT INTO principals (id, tenant, kind, name, admin, created_at)
		VALUES (?, ?, ?, ?, ?, coalesce(?, `+nowSQL+`)) ON CONFLICT DO NOTHING RETURNING created_at`,
		[]any{p.ID, p.Tenant, p.Kind, p.Name, p.Admin, micros(p.CreatedAt)}, timeCol{&p.CreatedAt})
}

func (q *queries) PrincipalGetByName(ctx context.Context, tenant, name string) (*store.Principal, error) {
	return scanPrincipal(q.db.QueryRowContext(ctx,
		`SELECT `+principalCols+` FROM principals WHERE tenant = ? AND name = ?`, tenant, name))
}

// ---- attempts ----

const attemptCols = `id, run_id, tenant, number, state, pool, labels, lease_ttl_us, timeout_us, not_before,
	runner_id, lease_digest, claim_request_id, claimed_at, lease_expires_at, deadline, heartbeat_at, ended_at,
	result, created_at, blocked_on, repo, managed_only, needs`

func scanAttempt(r scanner) (*store.Attempt, error) {
	a := &store.Attempt{}
	err := r.Scan(&a.ID, &a.RunID, &a.Tenant, &a.Number, &a.State, &a.Pool, listCol{&a.Labels},
		durCol{&a.LeaseTTL}, durCol{&a.Timeout}, timeCol{&a.NotBefore}, &a.RunnerID, &a.LeaseDigest,
		&a.ClaimRequestID, timePtrCol{&a.ClaimedAt}, timePtrCol{&a.LeaseExpiresAt}, timePtrCol{&a.Deadline},
		timePtrCol{&a.HeartbeatAt}, timePtrCol{&a.EndedAt}, jsonCol{&a.Result}, timeCol{&a.CreatedAt}, &a.BlockedOn, &a.Repo, &a.ManagedOnly, &a.Needs)
	if err != nil {
		return nil, interpretError(err)
	}
	return a, nil
}

var (
	attemptColsQ = prefixCols("attempts.", attemptCols)
	runColsQ     = prefixCols("runs.", runCols)
)

// AttemptForCall takes no locks: the write transaction excludes every other
// writer. The clock is the process's (see Now).
func (q *queries) AttemptForCall(ctx context.Context, attemptID string, withRun bool, now *time.Time) (*store.Attempt, *store.Run, time.Time, error) {
	t, err := q.Now(ctx, now)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	if !withRun {
		a, err := scanAttempt(q.db.QueryRowContext(ctx, `SELECT `+attemptCols+` FROM attempts WHERE id = ?`, attemptID))
		return a, nil, t, err
	}
	row := q.db.QueryRowContext(ctx, `SELECT `+attemptColsQ+`, `+runColsQ+`
		FROM attempts JOIN runs ON runs.id = attempts.run_id WHERE attempts.id = ?`, attemptID)
	var r *store.Run
	a, err := scanAttempt(scanFunc(func(ad ...any) error {
		var err error
		r, err = scanRun(scanFunc(func(rd ...any) error { return row.Scan(append(ad, rd...)...) }))
		return err
	}))
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	return a, r, t, nil
}

// AttemptsForCall reads each attempt as AttemptForCall does: in process,
// a statement per attempt costs no round trip.
func (q *queries) AttemptsForCall(ctx context.Context, ids []string, now *time.Time) ([]store.CallRows, error) {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	var out []store.CallRows
	for _, id := range slices.Compact(ids) {
		a, r, t, err := q.AttemptForCall(ctx, id, true, now)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, store.CallRows{Attempt: a, Run: r, Now: t})
	}
	return out, nil
}

// scanFunc lets scan functions share one row: the outer one's Scan calls
// the inner one, whose Scan reads the row into both destination lists.
type scanFunc func(dest ...any) error

func (f scanFunc) Scan(dest ...any) error { return f(dest...) }

func prefixCols(prefix, cols string) string {
	parts := strings.Split(cols, ",")
	for i, p := range parts {
		parts[i] = prefix + strings.TrimSpace(p)
	}
	return strings.Join(parts, ", ")
}

func (q *queries) attempts(ctx context.Context, query string, args ...any) ([]*store.Attempt, error) {
	rows, err := q.db.QueryContext(ctx, query, args...)
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

// AttemptClaim needs no row locks: SQLite has one writer at a time, so the
// subquery and the UPDATE see the same queue.
func (q *queries) AttemptClaim(ctx context.Context, p *store.AttemptClaimParams) (*store.Attempt, error) {
	const n = "coalesce(?1, " + nowSQL + ")"
	return scanAttempt(q.db.QueryRowContext(ctx, `UPDATE attempts SET state = 'leased',
		runner_id = ?2, lease_digest = ?3, claim_request_id = ?4,
		claimed_at = `+n+`, heartbeat_at = `+n+`, deadline = `+n+` + timeout_us,
		lease_expires_at = `+n+` + min(lease_ttl_us, timeout_us)
		WHERE id = (SELECT a.id FROM attempts a
			WHERE a.state = 'queued' AND a.tenant = ?5 AND a.pool = ?6 AND a.not_before <= `+n+` AND a.blocked_on = ''
			AND NOT EXISTS (SELECT 1 FROM json_each(a.labels) l WHERE l.value NOT IN (SELECT value FROM json_each(?7)))
			AND (?8 = 0 OR a.managed_only = 0)
			AND (json_array_length(?9) = 0 OR a.repo IN (SELECT value FROM json_each(?9)))
			AND (a.needs & ~?10) = 0
			ORDER BY a.not_before, a.id LIMIT 1)
		RETURNING `+attemptCols,
		microsPtr(p.Now), p.RunnerID, p.LeaseDigest, p.ClaimRequestID, p.Tenant, p.Pool, listText(p.RunnerLabels),
		p.SelfHosted, listText(p.AllowedRepos), int64(p.Capabilities)))
}

// AttemptClaimRun: the claim's UPDATE cannot return another table's row,
// and SQLite's one writer needs no lock order; it is two statements.
func (q *queries) AttemptClaimRun(ctx context.Context, p *store.AttemptClaimParams) (*store.Attempt, *store.Run, error) {
	a, err := q.AttemptClaim(ctx, p)
	if err != nil {
		return nil, nil, err
	}
	r, err := q.RunGetByID(ctx, a.RunID, true)
	if err != nil {
		return nil, nil, err
	}
	return a, r, nil
}

// AttemptClaimRuns: with one writer, claims one after another see exactly
// the queue one statement would; statements cost no round trip here.
func (q *queries) AttemptClaimRuns(ctx context.Context, p *store.AttemptClaimParams, slots []store.ClaimSlot) ([]store.ClaimedRun, error) {
	var out []store.ClaimedRun
	for i, sl := range slots {
		one := *p
		one.LeaseDigest, one.ClaimRequestID = sl.LeaseDigest, sl.ClaimRequestID
		a, r, err := q.AttemptClaimRun(ctx, &one)
		if errors.Is(err, store.ErrNotFound) {
			break
		}
		if err != nil {
			return nil, err
		}
		out = append(out, store.ClaimedRun{Attempt: a, Run: r, Slot: i})
	}
	return out, nil
}

func (q *queries) AttemptCreate(ctx context.Context, a *store.Attempt) error {
	if a.ID == "" {
		a.ID = newID(id.Attempt)
	}
	if a.State == "" {
		a.State = store.AttemptQueued
	}
	return q.insert(ctx, `INSERT INTO attempts (`+attemptCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?,
		?, ?, ?, ?, ?, ?, ?, ?, ?, coalesce(?, `+nowSQL+`), ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING created_at`,
		[]any{a.ID, a.RunID, a.Tenant, a.Number, a.State, a.Pool, listText(a.Labels), a.LeaseTTL.Microseconds(),
			a.Timeout.Microseconds(), microsZero(a.NotBefore), a.RunnerID, a.LeaseDigest, a.ClaimRequestID,
			microsPtr(a.ClaimedAt), microsPtr(a.LeaseExpiresAt), microsPtr(a.Deadline), microsPtr(a.HeartbeatAt),
			microsPtr(a.EndedAt), jsonText(a.Result), micros(a.CreatedAt), a.BlockedOn, a.Repo, a.ManagedOnly, int64(a.Needs)},
		timeCol{&a.CreatedAt})
}

func (q *queries) AttemptGetByClaimRequest(ctx context.Context, runnerID, requestID string) (*store.Attempt, error) {
	if requestID == "" {
		return nil, store.ErrNotFound
	}
	return scanAttempt(q.db.QueryRowContext(ctx, `SELECT `+attemptCols+` FROM attempts
		WHERE runner_id = ? AND claim_request_id = ? ORDER BY number DESC LIMIT 1`, runnerID, requestID))
}

// AttemptGetByID ignores forUpdate: a write transaction already excludes
// every other writer.
func (q *queries) AttemptGetByID(ctx context.Context, attemptID string, forUpdate bool) (*store.Attempt, error) {
	return scanAttempt(q.db.QueryRowContext(ctx, `SELECT `+attemptCols+` FROM attempts WHERE id = ?`, attemptID))
}

func (q *queries) AttemptListByRun(ctx context.Context, runID string) ([]*store.Attempt, error) {
	return q.attempts(ctx, `SELECT `+attemptCols+` FROM attempts WHERE run_id = ? ORDER BY number`, runID)
}

func (q *queries) AttemptListByRuns(ctx context.Context, runIDs []string) ([]*store.Attempt, error) {
	return q.attempts(ctx, `SELECT `+attemptCols+` FROM attempts WHERE run_id IN (SELECT value FROM json_each(?))
		ORDER BY run_id, number`, listText(runIDs))
}

func (q *queries) AttemptListExpired(ctx context.Context, p *store.AttemptListExpiredParams) ([]*store.Attempt, error) {
	return q.attempts(ctx, `SELECT `+attemptCols+` FROM attempts
		WHERE state = 'leased' AND lease_expires_at <= coalesce(?, `+nowSQL+`)
		ORDER BY lease_expires_at, id LIMIT ?`, microsPtr(p.Now), limit(p.Limit))
}

func (q *queries) AttemptListLeasedByRunner(ctx context.Context, runnerID string) ([]*store.Attempt, error) {
	return q.attempts(ctx, `SELECT `+attemptCols+` FROM attempts
		WHERE runner_id = ? AND state = 'leased' ORDER BY claimed_at, id`, runnerID)
}

// holdsIntact: see the PostgreSQL store.
const holdsIntact = `EXISTS (SELECT 1 FROM runs r WHERE r.id = attempts.run_id AND (r.cancel_requested
	OR (CASE WHEN json_type(r.lease_keys) = 'array' THEN json_array_length(r.lease_keys) ELSE 0 END)
		= (SELECT count(*) FROM leases l WHERE l.attempt_id = attempts.id)))`

func (q *queries) AttemptRenew(ctx context.Context, p *store.AttemptRenewParams) (*store.Attempt, error) {
	const n = "coalesce(?1, " + nowSQL + ")"
	return scanAttempt(q.db.QueryRowContext(ctx, `UPDATE attempts SET
		lease_expires_at = min(`+n+` + lease_ttl_us, coalesce(deadline, `+n+` + lease_ttl_us)),
		heartbeat_at = `+n+`
		WHERE id = ?2 AND state = 'leased' AND lease_digest = ?3 AND lease_expires_at > `+n+` AND `+holdsIntact+`
		RETURNING `+attemptCols, microsPtr(p.Now), p.ID, p.LeaseDigest))
}

func (q *queries) AttemptUpdate(ctx context.Context, a *store.Attempt) error {
	return q.exec1(ctx, `UPDATE attempts SET state = ?, runner_id = ?, lease_digest = ?, claim_request_id = ?,
		claimed_at = ?, lease_expires_at = ?, deadline = ?, heartbeat_at = ?, ended_at = ?, result = ?, not_before = ?,
		blocked_on = ? WHERE id = ?`,
		a.State, a.RunnerID, a.LeaseDigest, a.ClaimRequestID, microsPtr(a.ClaimedAt), microsPtr(a.LeaseExpiresAt),
		microsPtr(a.Deadline), microsPtr(a.HeartbeatAt), microsPtr(a.EndedAt), jsonText(a.Result),
		microsZero(a.NotBefore), a.BlockedOn, a.ID)
}

// ---- logs ----

type logLineJSON struct {
	At     *int64 `json:"at"`
	Stream string `json:"s"`
	Text   string `json:"t"`
}

// LogAppend is one statement: the existence check and the insert cannot be
// split by another writer.
func (q *queries) LogAppend(ctx context.Context, p *store.LogAppendParams) (bool, error) {
	if len(p.Lines) == 0 {
		var n int
		err := q.db.QueryRowContext(ctx, `SELECT count(*) FROM log_lines WHERE attempt_id = ? AND seq = ?`,
			p.AttemptID, p.Seq).Scan(&n)
		return n == 0, interpretError(err)
	}
	lines := make([]logLineJSON, len(p.Lines))
	for i, l := range p.Lines {
		lines[i] = logLineJSON{Stream: l.Stream, Text: l.Text}
		if !l.At.IsZero() {
			at := l.At.UnixMicro()
			lines[i].At = &at
		}
	}
	body, err := json.Marshal(lines)
	if err != nil {
		return false, err
	}
	res, err := q.db.ExecContext(ctx, `INSERT INTO log_lines (run_id, attempt_id, seq, idx, at, stream, text)
		SELECT ?1, ?2, ?3, CAST(j.key AS INTEGER), coalesce(json_extract(j.value, '$.at'), `+nowSQL+`),
			json_extract(j.value, '$.s'), json_extract(j.value, '$.t')
		FROM json_each(?4) AS j
		WHERE NOT EXISTS (SELECT 1 FROM log_lines WHERE attempt_id = ?2 AND seq = ?3)
		ORDER BY j.key
		ON CONFLICT DO NOTHING`, p.RunID, p.AttemptID, p.Seq, string(body))
	if err != nil {
		return false, interpretError(err)
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

func (q *queries) LogList(ctx context.Context, p *store.LogListParams) ([]*store.LogLine, error) {
	rows, err := q.db.QueryContext(ctx, `SELECT id, run_id, attempt_id, seq, idx, at, stream, text FROM log_lines
		WHERE run_id = ? AND id > ? ORDER BY id LIMIT ?`, p.RunID, p.After, limit(p.Limit))
	if err != nil {
		return nil, interpretError(err)
	}
	return scanLogLines(rows)
}

// ---- nonces, clock ----

func (q *queries) NonceInsertMany(ctx context.Context, nonces []store.Nonce) ([]bool, error) {
	if len(nonces) == 0 {
		return nil, nil
	}
	type row struct {
		R string `json:"r"`
		N string `json:"n"`
		E int64  `json:"e"`
	}
	rows := make([]row, len(nonces))
	for i, n := range nonces {
		rows[i] = row{R: n.RunnerID, N: n.Nonce, E: n.ExpiresAt.UnixMicro()}
	}
	body, err := json.Marshal(rows)
	if err != nil {
		return nil, err
	}
	// "WHERE true" lets SQLite's parser tell the upsert clause from a join.
	res, err := q.db.QueryContext(ctx, `INSERT INTO nonces (runner_id, nonce, expires_at)
		SELECT json_extract(j.value, '$.r'), json_extract(j.value, '$.n'), json_extract(j.value, '$.e')
		FROM json_each(?) AS j WHERE true ORDER BY j.key
		ON CONFLICT DO NOTHING RETURNING runner_id, nonce`, string(body))
	if err != nil {
		return nil, interpretError(err)
	}
	defer res.Close()
	inserted := map[string]bool{}
	for res.Next() {
		var r, n string
		if err := res.Scan(&r, &n); err != nil {
			return nil, interpretError(err)
		}
		inserted[r+"\x00"+n] = true
	}
	if err := res.Err(); err != nil {
		return nil, interpretError(err)
	}
	return store.NonceNew(nonces, inserted), nil
}

func (q *queries) NonceInsert(ctx context.Context, runnerID, nonce string, expiresAt time.Time) error {
	res, err := q.db.ExecContext(ctx, `INSERT INTO nonces (runner_id, nonce, expires_at) VALUES (?, ?, ?)
		ON CONFLICT DO NOTHING`, runnerID, nonce, expiresAt.UnixMicro())
	if err != nil {
		return interpretError(err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return store.ErrAlreadyExists
	}
	return nil
}

func (q *queries) NoncePurge(ctx context.Context, now *time.Time) (int, error) {
	res, err := q.db.ExecContext(ctx, `DELETE FROM nonces WHERE expires_at < coalesce(?, `+nowSQL+`)`, microsPtr(now))
	if err != nil {
		return 0, interpretError(err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}

func (q *queries) Now(ctx context.Context, now *time.Time) (time.Time, error) {
	if now != nil {
		return *now, nil
	}
	// The database clock is this process's: SQLite reads the same system
	// clock at the same (millisecond) precision, so a statement to ask it
	// would only cost the single writer time.
	return time.UnixMilli(clock.Real{}.Now().UnixMilli()).UTC(), nil
}

// ---- registration tokens ----

const regTokenCols = "digest, tenant, pool, labels, allowed_repos, self_hosted, expires_at, used_at, created_at"

func (q *queries) RegTokenCreate(ctx context.Context, t *store.RegToken) error {
	return q.insert(ctx, `INSERT INTO reg_tokens (`+regTokenCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?,
		coalesce(?, `+nowSQL+`)) ON CONFLICT DO NOTHING RETURNING created_at`,
		[]any{t.Digest, t.Tenant, t.Pool, listText(t.Labels), listText(t.AllowedRepos), t.SelfHosted,
			t.ExpiresAt.UnixMicro(), microsPtr(t.UsedAt), micros(t.CreatedAt)},
		timeCol{&t.CreatedAt})
}

func (q *queries) RegTokenUse(ctx context.Context, digest string, now *time.Time) (*store.RegToken, error) {
	const n = "coalesce(?1, " + nowSQL + ")"
	t := &store.RegToken{}
	err := q.db.QueryRowContext(ctx, `UPDATE reg_tokens SET used_at = `+n+`
		WHERE digest = ?2 AND used_at IS NULL AND expires_at > `+n+` RETURNING `+regTokenCols,
		microsPtr(now), digest).Scan(&t.Digest, &t.Tenant, &t.Pool, listCol{&t.Labels}, listCol{&t.AllowedRepos},
		&t.SelfHosted, timeCol{&t.ExpiresAt}, timePtrCol{&t.UsedAt}, timeCol{&t.CreatedAt})
	if err != nil {
		return nil, interpretError(err)
	}
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
		&x.CancelRequested, timeCol{&x.CreatedAt}, timeCol{&x.UpdatedAt}, timePtrCol{&x.FinishedAt})
	if err != nil {
		return nil, interpretError(err)
	}
	return x, nil
}

func (q *queries) RunCreate(ctx context.Context, r *store.Run) error {
	if r.ID == "" {
		r.ID = newID(id.Run)
	}
	return q.insert(ctx, `INSERT INTO runs (`+runCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,
		coalesce(?21, `+nowSQL+`), coalesce(?22, ?21, `+nowSQL+`), ?23)
		ON CONFLICT DO NOTHING RETURNING created_at, updated_at`,
		[]any{r.ID, r.Tenant, r.Job, r.Channel, r.Ref, r.Commit, jsonText(r.Params), r.Actor, r.Reason,
			jsonText(r.Source), r.IdempotencyKey, r.State, jsonText(r.Decision), jsonText(r.Grants),
			jsonText(r.LeaseKeys), r.WaitingFor, jsonText(r.Spec), r.MaxAttempts, r.CountedAttempts,
			r.CancelRequested, micros(r.CreatedAt), micros(r.UpdatedAt), microsPtr(r.FinishedAt)},
		timeCol{&r.CreatedAt}, timeCol{&r.UpdatedAt})
}

// RunCreateQueued: statements cost no round trip here.
func (q *queries) RunCreateQueued(ctx context.Context, r *store.Run, a *store.Attempt) error {
	if err := q.RunCreate(ctx, r); err != nil {
		return err
	}
	if a.CreatedAt.IsZero() {
		a.CreatedAt = r.CreatedAt
	}
	if a.NotBefore.IsZero() {
		a.NotBefore = r.CreatedAt
	}
	return q.AttemptCreate(ctx, a)
}

func (q *queries) RunGetByID(ctx context.Context, runID string, forUpdate bool) (*store.Run, error) {
	return scanRun(q.db.QueryRowContext(ctx, `SELECT `+runCols+` FROM runs WHERE id = ?`, runID))
}

func (q *queries) RunGetByIdempotencyKey(ctx context.Context, tenant, actor, key string) (*store.Run, error) {
	if key == "" {
		return nil, store.ErrNotFound
	}
	return scanRun(q.db.QueryRowContext(ctx, `SELECT `+runCols+` FROM runs
		WHERE tenant = ? AND actor = ? AND idempotency_key = ?`, tenant, actor, key))
}

// filter is one optional condition of a list statement, written with its
// parameter only when set.
type filter struct {
	cond string
	v    any
	set  bool
}

// andFilters is " AND cond" for each filter that is set, and args with
// their values. A list statement carries only the filters it is given: a
// condition that also holds when its parameter is empty keeps SQLite from
// using an index for it (TestNoOptionalFilterConditions).
func andFilters(args []any, fs ...filter) (string, []any) {
	var b strings.Builder
	for _, f := range fs {
		if f.set {
			b.WriteString(" AND " + f.cond)
			args = append(args, f.v)
		}
	}
	return b.String(), args
}

// runListSQL is RunList's statement and arguments, with only the filters
// p gives: with the cursor a filter, a page deep in the list read every
// newer run of the tenant.
func runListSQL(p *store.RunListParams) (string, []any) {
	conds, args := andFilters([]any{p.Tenant},
		filter{"id < ?", p.Before, p.Before != ""}, filter{"job = ?", p.Job, p.Job != ""},
		filter{"state = ?", p.State, p.State != ""}, filter{"channel = ?", p.Channel, p.Channel != ""},
		filter{"actor = ?", p.Actor, p.Actor != ""})
	return `SELECT ` + runCols + ` FROM runs WHERE tenant = ?` + conds + ` ORDER BY id DESC LIMIT ?`, append(args, limit(p.Limit))
}

func (q *queries) RunList(ctx context.Context, p *store.RunListParams) ([]*store.Run, error) {
	sql, args := runListSQL(p)
	return q.runs(ctx, sql, args...)
}

// runs scans every run a query returns.
func (q *queries) runs(ctx context.Context, query string, args ...any) ([]*store.Run, error) {
	rows, err := q.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []*store.Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, interpretError(rows.Err())
}

// AttemptRunUpdate: statements cost no round trip here. A missing run
// fails the caller's transaction, which undoes the attempt's update.
func (q *queries) AttemptRunUpdate(ctx context.Context, a *store.Attempt, r *store.Run) error {
	if err := q.AttemptUpdate(ctx, a); err != nil {
		return err
	}
	return q.RunUpdate(ctx, r)
}

func (q *queries) RunUpdate(ctx context.Context, r *store.Run) error {
	return q.exec1(ctx, `UPDATE runs SET state = ?, decision = ?, grants = ?, waiting_for = ?, counted_attempts = ?,
		cancel_requested = ?, updated_at = coalesce(?, `+nowSQL+`), finished_at = ? WHERE id = ?`,
		r.State, jsonText(r.Decision), jsonText(r.Grants), r.WaitingFor, r.CountedAttempts, r.CancelRequested,
		micros(r.UpdatedAt), microsPtr(r.FinishedAt), r.ID)
}

// ---- runners ----

const runnerCols = `id, tenant, pool, name, labels, public_key, key_fingerprint, status, self_hosted, allowed_repos,
	version, last_seen_at, created_at, executor, capabilities`

func scanRunner(r scanner) (*store.Runner, error) {
	x := &store.Runner{}
	err := r.Scan(&x.ID, &x.Tenant, &x.Pool, &x.Name, listCol{&x.Labels}, &x.PublicKey, &x.KeyFingerprint,
		&x.Status, &x.SelfHosted, listCol{&x.AllowedRepos}, &x.Version, timePtrCol{&x.LastSeenAt},
		timeCol{&x.CreatedAt}, &x.Executor, &x.Capabilities)
	if err != nil {
		return nil, interpretError(err)
	}
	return x, nil
}

func (q *queries) RunnerCreate(ctx context.Context, r *store.Runner) error {
	if r.ID == "" {
		r.ID = newID(id.Runner)
	}
	if r.Status == "" {
		r.Status = store.RunnerActive
	}
	if r.Executor == "" {
		r.Executor = store.ExecutorProcess
	}
	return q.insert(ctx, `INSERT INTO runners (`+runnerCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,
		coalesce(?, `+nowSQL+`), ?, ?) ON CONFLICT DO NOTHING RETURNING created_at`,
		[]any{r.ID, r.Tenant, r.Pool, r.Name, listText(r.Labels), r.PublicKey, r.KeyFingerprint, r.Status,
			r.SelfHosted, listText(r.AllowedRepos), r.Version, microsPtr(r.LastSeenAt), micros(r.CreatedAt),
			r.Executor, int64(r.Capabilities)},
		timeCol{&r.CreatedAt})
}

func (q *queries) RunnerGetByID(ctx context.Context, runnerID string, forUpdate bool) (*store.Runner, error) {
	return scanRunner(q.db.QueryRowContext(ctx, `SELECT `+runnerCols+` FROM runners WHERE id = ?`, runnerID))
}

func (q *queries) RunnerList(ctx context.Context, tenant string) ([]*store.Runner, error) {
	rows, err := q.db.QueryContext(ctx, `SELECT `+runnerCols+` FROM runners WHERE tenant = ? ORDER BY id`, tenant)
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
	t, err := q.Now(ctx, now)
	if err != nil {
		return err
	}
	if err := q.exec1(ctx, `UPDATE runners SET last_seen_at = ? WHERE id = ?`, t.UnixMicro(), runnerID); err != nil {
		return err
	}
	// Only this process reads the cached last-seen time (to touch at most
	// once a second), so the entry is kept and brought up to date.
	q.s.CachedReads.Runners.Update(runnerID, func(r *store.Runner) { r.LastSeenAt = &t })
	return nil
}

func (q *queries) RunnerUpdate(ctx context.Context, r *store.Runner) error {
	q.changed(func() { q.s.CachedReads.Runners.Forget(r.ID) })
	if r.Executor == "" {
		r.Executor = store.ExecutorProcess
	}
	return q.exec1(ctx, `UPDATE runners SET status = ?, public_key = ?, key_fingerprint = ?, labels = ?,
		executor = ?, capabilities = ? WHERE id = ?`,
		r.Status, r.PublicKey, r.KeyFingerprint, listText(r.Labels), r.Executor, int64(r.Capabilities), r.ID)
}

// ---- tenants ----

func (q *queries) TenantEnsure(ctx context.Context, name string, now *time.Time) (*store.Tenant, error) {
	_, err := q.db.ExecContext(ctx, `INSERT INTO tenants (id, name, created_at) VALUES (?, ?, coalesce(?, `+nowSQL+`))
		ON CONFLICT (name) DO NOTHING`, newID(id.Tenant), name, microsPtr(now))
	if err != nil {
		return nil, interpretError(err)
	}
	t := &store.Tenant{}
	err = q.db.QueryRowContext(ctx, `SELECT id, name, created_at FROM tenants WHERE name = ?`, name).
		Scan(&t.ID, &t.Name, timeCol{&t.CreatedAt})
	if err != nil {
		return nil, interpretError(err)
	}
	return t, nil
}

func (q *queries) TenantGetByID(ctx context.Context, tenantID string) (*store.Tenant, error) {
	t := &store.Tenant{}
	err := q.db.QueryRowContext(ctx, `SELECT id, name, created_at FROM tenants WHERE id = ?`, tenantID).
		Scan(&t.ID, &t.Name, timeCol{&t.CreatedAt})
	if err != nil {
		return nil, interpretError(err)
	}
	return t, nil
}

// WakeClaimers defers the broadcast to after COMMIT inside a transaction, so
// that a woken claimer finds the work.
func (q *queries) WakeClaimers(ctx context.Context) error {
	if q.tx != nil {
		q.tx.wake = true
		return nil
	}
	q.s.broadcast()
	return nil
}

// WakeWatchers is WakeClaimers: on SQLite both are the in-process
// broadcast after COMMIT.
func (q *queries) WakeWatchers(ctx context.Context) error { return q.WakeClaimers(ctx) }

// scanLogLines reads and closes rows of log_lines (id, run_id, attempt_id,
// seq, idx, at, stream, text).
func scanLogLines(rows *sql.Rows) ([]*store.LogLine, error) {
	defer rows.Close()
	var out []*store.LogLine
	for rows.Next() {
		l := &store.LogLine{}
		if err := rows.Scan(&l.ID, &l.RunID, &l.AttemptID, &l.Seq, &l.Idx, timeCol{&l.At}, &l.Stream, &l.Text); err != nil {
			return nil, interpretError(err)
		}
		out = append(out, l)
	}
	return out, interpretError(rows.Err())
}
