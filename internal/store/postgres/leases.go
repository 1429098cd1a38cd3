package postgres

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobplane/jobplane/internal/store"
)

// Run leases. Every writer of a key's holds first locks the key's counter
// row (lease_keys, FOR UPDATE), in sorted key order: acquirers, releasers and
// force releases of one key are serialized, the holds a locked key's writer
// reads cannot change under it, and a waiter that records BlockedOn while it
// still holds the row lock cannot miss the release that follows.

// leaseHoldCols reads a hold joined with its attempt (l: leases, a: attempts).
const leaseHoldCols = `l.tenant, l.key, l.slot, l.run_id, l.attempt_id, coalesce(a.runner_id, ''), l.fencing_token,
	l.acquired_at, a.lease_expires_at`

func scanLeaseHold(r pgx.Rows) (*store.LeaseHold, error) {
	h := &store.LeaseHold{}
	err := r.Scan(&h.Tenant, &h.Key, &h.Slot, &h.RunID, &h.AttemptID, &h.RunnerID, &h.FencingToken,
		&h.AcquiredAt, &h.ExpiresAt)
	utc(&h.AcquiredAt)
	utcp(&h.ExpiresAt)
	return h, err
}

func (q *queries) leaseHolds(ctx context.Context, sql string, args ...any) ([]store.LeaseHold, error) {
	rows, err := q.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	hs, err := collect(rows, scanLeaseHold)
	if err != nil {
		return nil, err
	}
	var out []store.LeaseHold
	for _, h := range hs {
		out = append(out, *h)
	}
	return out, nil
}

// lockLeaseKey locks a key's counter row and returns its counter.
func (q *queries) lockLeaseKey(ctx context.Context, tenant, key string) (int64, error) {
	var token int64
	err := q.db.QueryRow(ctx, `SELECT last_fencing_token FROM lease_keys WHERE tenant = $1 AND key = $2 FOR UPDATE`,
		tenant, key).Scan(&token)
	return token, interpretError(err)
}

func (q *queries) LeaseKeyLock(ctx context.Context, tenant, key string) error {
	if _, err := q.db.Exec(ctx, `INSERT INTO lease_keys (tenant, key) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
		tenant, key); err != nil {
		return interpretError(err)
	}
	_, err := q.lockLeaseKey(ctx, tenant, key)
	return err
}

// unblockWaiters makes the queued attempts waiting for key claimable
// again, except those another transaction has locked. Its callers hold
// key's row, and a claim may hold a waiter's row while it waits for that
// one: its statement locked the row under SKIP LOCKED, found on the
// row's latest version that another claim had just marked it waiting,
// and went on to the next attempt, whose keys it now waits for, keeping
// the lock to its end. Waiting here closed that cycle, which PostgreSQL
// broke after deadlock_timeout (63 times in 16 minutes of L1 with 64
// acquirers of one key). A waiter skipped is woken by the key's next
// release or, when there is none, by LeaseWakeStranded.
func (q *queries) unblockWaiters(ctx context.Context, tenant, key string) error {
	_, err := q.db.Exec(ctx, unblockWaitersSQL, tenant, key)
	return interpretError(err)
}

// The rows are updated by ID: a join with the locked rows was planned as
// a hash join over a scan of attempts. The test that blocked_on is not
// empty repeats the condition of attempts_blocked, which a generic plan
// cannot prove from blocked_on = $2, so that it reads the key's waiters
// from that index rather than every live attempt.
const unblockWaitersSQL = `UPDATE attempts SET blocked_on = '' WHERE id = ANY (ARRAY(SELECT id FROM attempts
		WHERE tenant = $1 AND blocked_on = $2 AND blocked_on <> '' AND state = 'queued' FOR UPDATE SKIP LOCKED))`

// leaseWakeStrandedSQL finds the distinct keys waited for with one index
// probe each (a loose scan of attempts_blocked: PostgreSQL 15 has no skip
// scan) and keeps those nobody holds, so that 10,000 waiters of one held
// key cost a probe, not 10,000; then it unblocks the waiters of the free
// keys, skipping locked rows, each key's read from the index (LATERAL),
// and updates them by ID (a join there was planned as a scan of attempts).
const leaseWakeStrandedSQL = `WITH RECURSIVE k(tenant, key) AS (
			(SELECT tenant, blocked_on FROM attempts WHERE state = 'queued' AND blocked_on <> ''
				ORDER BY tenant, blocked_on LIMIT 1)
			UNION ALL
			SELECT n.tenant, n.blocked_on FROM k CROSS JOIN LATERAL (SELECT tenant, blocked_on FROM attempts
				WHERE state = 'queued' AND blocked_on <> '' AND (tenant, blocked_on) > (k.tenant, k.key)
				ORDER BY tenant, blocked_on LIMIT 1) n),
		f AS MATERIALIZED (SELECT tenant, key FROM k
			WHERE NOT EXISTS (SELECT 1 FROM leases l WHERE l.tenant = k.tenant AND l.key = k.key COLLATE "C")),
		w AS MATERIALIZED (SELECT x.id FROM f CROSS JOIN LATERAL (SELECT a.id FROM attempts a
				WHERE a.tenant = f.tenant AND a.blocked_on = f.key AND a.state = 'queued' AND a.blocked_on <> ''
				FOR UPDATE OF a SKIP LOCKED) x
			LIMIT $1)
		UPDATE attempts SET blocked_on = '' WHERE id = ANY (ARRAY(SELECT id FROM w))`

func (q *queries) LeaseWakeStranded(ctx context.Context, limit int) (int, error) {
	tag, err := q.db.Exec(ctx, leaseWakeStrandedSQL, limit)
	if err != nil {
		return 0, interpretError(err)
	}
	return int(tag.RowsAffected()), nil
}

func (q *queries) LeaseAcquire(ctx context.Context, p *store.LeaseAcquireParams) ([]store.LeaseHold, string, error) {
	keys := store.SortedLeaseKeys(p.Keys)
	if len(keys) == 0 {
		return nil, "", nil
	}
	// Pass 1: every key, in order: ensure and lock its counter row, drop
	// stale holds, find its free slot.
	slots := make([]int, len(keys))
	count := make([]int, len(keys))
	purged := make([]int64, len(keys))
	blockedOn := ""
	for i, k := range keys {
		if _, err := q.db.Exec(ctx, `INSERT INTO lease_keys (tenant, key) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
			p.Tenant, k.Key); err != nil {
			return nil, "", interpretError(err)
		}
		if _, err := q.lockLeaseKey(ctx, p.Tenant, k.Key); err != nil {
			return nil, "", err
		}
		// A stale hold is dropped only with its attempt's row locked: a
		// renewal or result of that attempt (which lock the row first) either
		// committed before, and is seen (a renewed hold is live again), or
		// waits and then finds its hold gone. A row locked right now is
		// skipped, its hold treated as held: whoever holds the lock ends or
		// renews it, and a release wakes this waiter.
		tag, err := q.db.Exec(ctx, `DELETE FROM leases l WHERE l.tenant = $2 AND l.key = $3
			AND l.attempt_id IN (SELECT a.id FROM attempts a
				WHERE a.id IN (SELECT attempt_id FROM leases WHERE tenant = $2 AND key = $3)
					AND NOT (a.state = 'leased' AND a.lease_expires_at > `+nowSQL+`)
				FOR UPDATE OF a SKIP LOCKED)`, p.Now, p.Tenant, k.Key)
		if err != nil {
			return nil, "", interpretError(err)
		}
		purged[i] = tag.RowsAffected()
		used, err := q.leaseSlots(ctx, p.Tenant, k.Key)
		if err != nil {
			return nil, "", err
		}
		if len(used) >= k.Limit {
			blockedOn = k.Key
			break
		}
		slots[i], count[i] = freeSlot(used), len(used)
	}
	if blockedOn != "" {
		// The purges stay; whoever waited for a purged key may now get it.
		for i, k := range keys {
			if purged[i] > 0 && k.Key != blockedOn {
				if err := q.unblockWaiters(ctx, p.Tenant, k.Key); err != nil {
					return nil, "", err
				}
			}
		}
		return nil, blockedOn, nil
	}
	// The attempt's expiry was computed when it was claimed, before this
	// transaction waited on the keys' row locks: restart it from the
	// statement clock now, so a waiter never gets a grant already expired
	// (reliability rule 3, case L6).
	var runnerID string
	var expiresAt *time.Time
	err := q.db.QueryRow(ctx, `UPDATE attempts SET lease_expires_at = GREATEST(lease_expires_at,
			LEAST(`+nowSQL+` + LEAST(lease_ttl_us, timeout_us) * interval '1 microsecond', deadline))
		WHERE id = $2 RETURNING runner_id, lease_expires_at`, p.Now, p.AttemptID).
		Scan(&runnerID, &expiresAt)
	if err != nil {
		return nil, "", interpretError(err)
	}
	utcp(&expiresAt)
	// Pass 2: take a slot and the next token of every key, under its lock.
	held := make([]store.LeaseHold, 0, len(keys))
	for i, k := range keys {
		h := store.LeaseHold{Tenant: p.Tenant, Key: k.Key, Slot: slots[i], RunID: p.RunID, AttemptID: p.AttemptID,
			RunnerID: runnerID, ExpiresAt: expiresAt}
		err := q.db.QueryRow(ctx, `UPDATE lease_keys SET last_fencing_token = last_fencing_token + 1
			WHERE tenant = $1 AND key = $2 RETURNING last_fencing_token`, p.Tenant, k.Key).Scan(&h.FencingToken)
		if err != nil {
			return nil, "", interpretError(err)
		}
		err = q.db.QueryRow(ctx, `INSERT INTO leases (tenant, key, slot, run_id, attempt_id, fencing_token, acquired_at)
			VALUES ($2, $3, $4, $5, $6, $7, `+nowSQL+`) RETURNING acquired_at`,
			p.Now, h.Tenant, h.Key, h.Slot, h.RunID, h.AttemptID, h.FencingToken).Scan(&h.AcquiredAt)
		if err != nil {
			return nil, "", interpretError(err)
		}
		utc(&h.AcquiredAt)
		// A purge that freed more than the slot taken leaves room for a waiter.
		if purged[i] > 0 && count[i]+1 < k.Limit {
			if err := q.unblockWaiters(ctx, p.Tenant, k.Key); err != nil {
				return nil, "", err
			}
		}
		held = append(held, h)
	}
	return held, "", nil
}

func (q *queries) leaseSlots(ctx context.Context, tenant, key string) ([]int, error) {
	rows, err := q.db.Query(ctx, `SELECT slot FROM leases WHERE tenant = $1 AND key = $2 ORDER BY slot`, tenant, key)
	if err != nil {
		return nil, interpretError(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int])
	return out, interpretError(err)
}

// freeSlot returns the smallest slot not in used (sorted ascending).
func freeSlot(used []int) int {
	s := 0
	for _, u := range used {
		if u > s {
			break
		}
		if u == s {
			s++
		}
	}
	return s
}

func (q *queries) LeaseForceRelease(ctx context.Context, tenant, key string) ([]store.LeaseHold, int64, error) {
	if _, err := q.lockLeaseKey(ctx, tenant, key); err != nil {
		return nil, 0, err
	}
	dropped, err := q.leaseHolds(ctx, `WITH l AS (DELETE FROM leases WHERE tenant = $1 AND key = $2 RETURNING *)
		SELECT `+leaseHoldCols+` FROM l LEFT JOIN attempts a ON a.id = l.attempt_id ORDER BY l.slot`, tenant, key)
	if err != nil {
		return nil, 0, err
	}
	var token int64
	err = q.db.QueryRow(ctx, `UPDATE lease_keys SET last_fencing_token = last_fencing_token + 1
		WHERE tenant = $1 AND key = $2 RETURNING last_fencing_token`, tenant, key).Scan(&token)
	if err != nil {
		return nil, 0, interpretError(err)
	}
	if err := q.unblockWaiters(ctx, tenant, key); err != nil {
		return nil, 0, err
	}
	return dropped, token, nil
}

func (q *queries) LeaseKeyConsume(ctx context.Context, tenant, key, runID string) error {
	_, err := q.db.Exec(ctx, `INSERT INTO lease_keys (tenant, key, consumed_by_run) VALUES ($1, $2, $3)
		ON CONFLICT (tenant, key) DO UPDATE SET consumed_by_run = excluded.consumed_by_run
		WHERE lease_keys.consumed_by_run = ''`, tenant, key, runID)
	return interpretError(err)
}

func (q *queries) LeaseKeyGet(ctx context.Context, tenant, key string) (*store.LeaseKeyState, error) {
	k := &store.LeaseKeyState{}
	err := q.db.QueryRow(ctx, `SELECT tenant, key, last_fencing_token, consumed_by_run FROM lease_keys
		WHERE tenant = $1 AND key = $2`, tenant, key).Scan(&k.Tenant, &k.Key, &k.LastFencingToken, &k.ConsumedByRun)
	if err != nil {
		return nil, interpretError(err)
	}
	return k, nil
}

var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

func (q *queries) LeaseList(ctx context.Context, tenant, prefix string) ([]store.LeaseHold, error) {
	return q.leaseHolds(ctx, `SELECT `+leaseHoldCols+` FROM leases l LEFT JOIN attempts a ON a.id = l.attempt_id
		WHERE l.tenant = $1 AND l.key LIKE $2 || '%' ESCAPE '\' ORDER BY l.key, l.slot`,
		tenant, likeEscaper.Replace(prefix))
}

// leaseLiveRunSQL repeats the condition of runs_live_lease_keys, which
// leaves out the runs without keys (migration 014), so that the planner
// can use it.
const leaseLiveRunSQL = `SELECT r.id FROM runs r
		WHERE r.tenant = $1 AND r.state IN ('pending_approval', 'queued', 'running') AND r.id <> $3
			AND r.lease_keys <> '[]'::jsonb AND r.lease_keys @> jsonb_build_array(jsonb_build_object('key', $2::text))
		ORDER BY r.id LIMIT 1`

func (q *queries) LeaseLiveRun(ctx context.Context, tenant, key, exceptRun string) (string, error) {
	var runID string
	err := q.db.QueryRow(ctx, leaseLiveRunSQL, tenant, key, exceptRun).Scan(&runID)
	if err != nil {
		return "", interpretError(err)
	}
	return runID, nil
}

// LeaseReleaseAttempt locks the counter rows of the attempt's keys (sorted)
// before deleting its holds, like every other writer of those holds.
func (q *queries) LeaseReleaseAttempt(ctx context.Context, tenant, attemptID string) ([]string, error) {
	rows, err := q.db.Query(ctx, `SELECT DISTINCT key FROM leases WHERE tenant = $1 AND attempt_id = $2 ORDER BY key`,
		tenant, attemptID)
	if err != nil {
		return nil, interpretError(err)
	}
	candidates, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, interpretError(err)
	}
	if len(candidates) == 0 {
		return nil, nil
	}
	for _, k := range candidates {
		if _, err := q.lockLeaseKey(ctx, tenant, k); err != nil {
			return nil, err
		}
	}
	rows, err = q.db.Query(ctx, `WITH d AS (DELETE FROM leases WHERE tenant = $1 AND attempt_id = $2 RETURNING key)
		SELECT DISTINCT key FROM d ORDER BY key`, tenant, attemptID)
	if err != nil {
		return nil, interpretError(err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, interpretError(err)
	}
	for _, k := range keys {
		if err := q.unblockWaiters(ctx, tenant, k); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// LeaseBlockWaiters skips locked rows: waiting for them could close a
// cycle with a claim that holds one and waits for key's row, which the
// caller holds; an attempt left unmarked is only claimed and marked later.
func (q *queries) LeaseBlockWaiters(ctx context.Context, tenant, key string, limit int) (int, error) {
	var n int
	err := q.db.QueryRow(ctx, `WITH w AS (
			UPDATE attempts SET blocked_on = $2
			WHERE id IN (SELECT a.id FROM runs r JOIN attempts a ON a.run_id = r.id
				WHERE r.tenant = $1 AND r.state IN ('pending_approval', 'queued', 'running') AND r.lease_keys <> '[]'::jsonb
					AND r.lease_keys @> jsonb_build_array(jsonb_build_object('key', $2::text, 'limit', $3::int))
					AND a.tenant = $1 AND a.state = 'queued' AND a.blocked_on = ''
				FOR UPDATE OF a SKIP LOCKED)
			RETURNING run_id),
		r AS (UPDATE runs SET waiting_for = 'lease ' || $2
			WHERE id IN (SELECT id FROM runs WHERE id IN (SELECT run_id FROM w) AND waiting_for <> 'lease ' || $2
				FOR UPDATE SKIP LOCKED))
		SELECT count(*) FROM w`, tenant, key, limit).Scan(&n)
	return n, interpretError(err)
}

func (q *queries) LeaseWaiters(ctx context.Context, tenant, key string) ([]*store.Attempt, error) {
	return q.attempts(ctx, `SELECT `+attemptCols+` FROM attempts
		WHERE tenant = $1 AND blocked_on = $2 AND state = 'queued' ORDER BY not_before, id`, tenant, key)
}

// The writers are several statements that rely on row locks held to the end
// of a transaction: called on the Store, each runs in its own.

// LeaseAcquire takes a run's keys in a transaction of its own.
func (s *Store) LeaseAcquire(ctx context.Context, p *store.LeaseAcquireParams) (held []store.LeaseHold, blockedOn string, err error) {
	err = s.InTx(ctx, func(tx store.Tx) error {
		held, blockedOn, err = tx.LeaseAcquire(ctx, p)
		return err
	})
	return held, blockedOn, err
}

// LeaseForceRelease breaks a key's holds in a transaction of its own.
func (s *Store) LeaseForceRelease(ctx context.Context, tenant, key string) (dropped []store.LeaseHold, token int64, err error) {
	err = s.InTx(ctx, func(tx store.Tx) error {
		dropped, token, err = tx.LeaseForceRelease(ctx, tenant, key)
		return err
	})
	return dropped, token, err
}

// LeaseReleaseAttempt drops an attempt's holds in a transaction of its own.
func (s *Store) LeaseReleaseAttempt(ctx context.Context, tenant, attemptID string) (keys []string, err error) {
	err = s.InTx(ctx, func(tx store.Tx) error {
		keys, err = tx.LeaseReleaseAttempt(ctx, tenant, attemptID)
		return err
	})
	return keys, err
}
