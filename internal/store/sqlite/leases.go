package sqlite

import (
	"context"
	"sort"
	"time"

	"github.com/jobplane/jobplane/internal/store"
)

// Run leases. A write transaction excludes every other writer, so the
// "locks" of the contract are implicit here: reads and writes of one
// transaction see one stable state of every key.

// leaseHoldCols reads a hold joined with its attempt (l: leases, a: attempts).
const leaseHoldCols = `l.tenant, l.key, l.slot, l.run_id, l.attempt_id, coalesce(a.runner_id, ''), l.fencing_token,
	l.acquired_at, a.lease_expires_at`

func scanLeaseHold(r scanner) (store.LeaseHold, error) {
	var h store.LeaseHold
	err := r.Scan(&h.Tenant, &h.Key, &h.Slot, &h.RunID, &h.AttemptID, &h.RunnerID, &h.FencingToken,
		timeCol{&h.AcquiredAt}, timePtrCol{&h.ExpiresAt})
	return h, interpretError(err)
}

func (q *queries) leaseHolds(ctx context.Context, query string, args ...any) ([]store.LeaseHold, error) {
	rows, err := q.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []store.LeaseHold
	for rows.Next() {
		h, err := scanLeaseHold(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, interpretError(rows.Err())
}

// unblockWaiters makes the queued attempts waiting for key claimable again.
func (q *queries) unblockWaiters(ctx context.Context, tenant, key string) error {
	_, err := q.db.ExecContext(ctx, `UPDATE attempts SET blocked_on = ''
		WHERE tenant = ? AND blocked_on = ? AND state = 'queued'`, tenant, key)
	return interpretError(err)
}

func (q *queries) LeaseAcquire(ctx context.Context, p *store.LeaseAcquireParams) ([]store.LeaseHold, string, error) {
	keys := store.SortedLeaseKeys(p.Keys)
	if len(keys) == 0 {
		return nil, "", nil
	}
	now, err := q.Now(ctx, p.Now)
	if err != nil {
		return nil, "", err
	}
	nowUS := now.UnixMicro()
	// Pass 1: every key, in order: ensure its counter row, drop stale holds,
	// find its free slot.
	slots := make([]int, len(keys))
	count := make([]int, len(keys))
	purged := make([]int64, len(keys))
	blockedOn := ""
	for i, k := range keys {
		if _, err := q.db.ExecContext(ctx, `INSERT INTO lease_keys (tenant, key) VALUES (?, ?) ON CONFLICT DO NOTHING`,
			p.Tenant, k.Key); err != nil {
			return nil, "", interpretError(err)
		}
		res, err := q.db.ExecContext(ctx, `DELETE FROM leases WHERE tenant = ?1 AND key = ?2
			AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.id = leases.attempt_id
				AND a.state = 'leased' AND a.lease_expires_at > ?3)`, p.Tenant, k.Key, nowUS)
		if err != nil {
			return nil, "", interpretError(err)
		}
		if purged[i], err = res.RowsAffected(); err != nil {
			return nil, "", err
		}
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
	var runnerID string
	var expiresAt *time.Time
	// The grant starts now: restart the attempt's expiry from the moment the
	// keys are taken (never past the deadline, never earlier than before), as
	// the PostgreSQL store does after waiting on the keys' row locks.
	err = q.db.QueryRowContext(ctx, `UPDATE attempts SET lease_expires_at = max(lease_expires_at,
			min(coalesce(?1, `+nowSQL+`) + min(lease_ttl_us, timeout_us), deadline))
		WHERE id = ?2 RETURNING runner_id, lease_expires_at`, microsPtr(p.Now), p.AttemptID).
		Scan(&runnerID, timePtrCol{&expiresAt})
	if err != nil {
		return nil, "", interpretError(err)
	}
	// Pass 2: take a slot and the next token of every key.
	held := make([]store.LeaseHold, 0, len(keys))
	for i, k := range keys {
		h := store.LeaseHold{Tenant: p.Tenant, Key: k.Key, Slot: slots[i], RunID: p.RunID, AttemptID: p.AttemptID,
			RunnerID: runnerID, ExpiresAt: expiresAt, AcquiredAt: time.UnixMicro(nowUS).UTC()}
		err := q.db.QueryRowContext(ctx, `UPDATE lease_keys SET last_fencing_token = last_fencing_token + 1
			WHERE tenant = ? AND key = ? RETURNING last_fencing_token`, p.Tenant, k.Key).Scan(&h.FencingToken)
		if err != nil {
			return nil, "", interpretError(err)
		}
		if _, err := q.db.ExecContext(ctx, `INSERT INTO leases (tenant, key, slot, run_id, attempt_id, fencing_token, acquired_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, h.Tenant, h.Key, h.Slot, h.RunID, h.AttemptID, h.FencingToken, nowUS); err != nil {
			return nil, "", interpretError(err)
		}
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
	rows, err := q.db.QueryContext(ctx, `SELECT slot FROM leases WHERE tenant = ? AND key = ? ORDER BY slot`, tenant, key)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var s int
		if err := rows.Scan(&s); err != nil {
			return nil, interpretError(err)
		}
		out = append(out, s)
	}
	return out, interpretError(rows.Err())
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
	var token int64
	err := q.db.QueryRowContext(ctx, `SELECT last_fencing_token FROM lease_keys WHERE tenant = ? AND key = ?`,
		tenant, key).Scan(&token)
	if err != nil {
		return nil, 0, interpretError(err)
	}
	dropped, err := q.leaseHolds(ctx, `SELECT `+leaseHoldCols+` FROM leases l LEFT JOIN attempts a ON a.id = l.attempt_id
		WHERE l.tenant = ? AND l.key = ? ORDER BY l.slot`, tenant, key)
	if err != nil {
		return nil, 0, err
	}
	if _, err := q.db.ExecContext(ctx, `DELETE FROM leases WHERE tenant = ? AND key = ?`, tenant, key); err != nil {
		return nil, 0, interpretError(err)
	}
	err = q.db.QueryRowContext(ctx, `UPDATE lease_keys SET last_fencing_token = last_fencing_token + 1
		WHERE tenant = ? AND key = ? RETURNING last_fencing_token`, tenant, key).Scan(&token)
	if err != nil {
		return nil, 0, interpretError(err)
	}
	if err := q.unblockWaiters(ctx, tenant, key); err != nil {
		return nil, 0, err
	}
	return dropped, token, nil
}

func (q *queries) LeaseKeyConsume(ctx context.Context, tenant, key, runID string) error {
	_, err := q.db.ExecContext(ctx, `INSERT INTO lease_keys (tenant, key, consumed_by_run) VALUES (?, ?, ?)
		ON CONFLICT (tenant, key) DO UPDATE SET consumed_by_run = excluded.consumed_by_run
		WHERE lease_keys.consumed_by_run = ''`, tenant, key, runID)
	return interpretError(err)
}

func (q *queries) LeaseKeyGet(ctx context.Context, tenant, key string) (*store.LeaseKeyState, error) {
	k := &store.LeaseKeyState{}
	err := q.db.QueryRowContext(ctx, `SELECT tenant, key, last_fencing_token, consumed_by_run FROM lease_keys
		WHERE tenant = ? AND key = ?`, tenant, key).Scan(&k.Tenant, &k.Key, &k.LastFencingToken, &k.ConsumedByRun)
	if err != nil {
		return nil, interpretError(err)
	}
	return k, nil
}

// LeaseKeyLock only creates the row: SQLite's one writer already runs the
// transactions that check a key one after the other.
func (q *queries) LeaseKeyLock(ctx context.Context, tenant, key string) error {
	_, err := q.db.ExecContext(ctx, `INSERT INTO lease_keys (tenant, key) VALUES (?, ?) ON CONFLICT DO NOTHING`, tenant, key)
	return interpretError(err)
}

// LeaseList compares the prefix with substr rather than LIKE: SQLite's LIKE
// ignores ASCII case, and keys are case-sensitive.
func (q *queries) LeaseList(ctx context.Context, tenant, prefix string) ([]store.LeaseHold, error) {
	return q.leaseHolds(ctx, `SELECT `+leaseHoldCols+` FROM leases l LEFT JOIN attempts a ON a.id = l.attempt_id
		WHERE l.tenant = ?1 AND substr(l.key, 1, length(?2)) = ?2 ORDER BY l.key, l.slot`, tenant, prefix)
}

// LeaseLiveRun reads a lease key list element only when it is an object:
// json_extract of a bare string would fail as malformed JSON.
func (q *queries) LeaseLiveRun(ctx context.Context, tenant, key, exceptRun string) (string, error) {
	var runID string
	err := q.db.QueryRowContext(ctx, `SELECT r.id FROM runs r
		WHERE r.tenant = ?1 AND r.state IN ('pending_approval', 'queued', 'running') AND r.id <> ?3
			AND EXISTS (SELECT 1 FROM json_each(r.lease_keys) j
				WHERE CASE WHEN j.type = 'object' THEN json_extract(j.value, '$.key') END = ?2)
		ORDER BY r.id LIMIT 1`, tenant, key, exceptRun).Scan(&runID)
	if err != nil {
		return "", interpretError(err)
	}
	return runID, nil
}

func (q *queries) LeaseReleaseAttempt(ctx context.Context, tenant, attemptID string) ([]string, error) {
	rows, err := q.db.QueryContext(ctx, `DELETE FROM leases WHERE tenant = ? AND attempt_id = ? RETURNING key`,
		tenant, attemptID)
	if err != nil {
		return nil, interpretError(err)
	}
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return nil, interpretError(err)
		}
		keys = append(keys, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, interpretError(err)
	}
	sort.Strings(keys)
	keys = dedupe(keys)
	for _, k := range keys {
		if err := q.unblockWaiters(ctx, tenant, k); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// dedupe drops adjacent duplicates of a sorted list.
func dedupe(l []string) []string {
	out := l[:0]
	for _, s := range l {
		if len(out) == 0 || out[len(out)-1] != s {
			out = append(out, s)
		}
	}
	return out
}

// LeaseBlockWaiters: one writer at a time, so nothing is locked by another.
func (q *queries) LeaseBlockWaiters(ctx context.Context, tenant, key string, limit int) (int, error) {
	// The tenant's live runs are read (runs_live); there is no index on
	// their keys here, as for LeaseLiveRun.
	names := `SELECT a.id FROM runs r JOIN attempts a ON a.run_id = r.id
		WHERE r.tenant = ?1 AND r.state IN ('pending_approval', 'queued', 'running') AND r.lease_keys <> '[]'
			AND EXISTS (SELECT 1 FROM json_each(r.lease_keys) j WHERE j.type = 'object'
				AND json_extract(j.value, '$.key') = ?2 AND json_extract(j.value, '$.limit') = ?3)
			AND a.tenant = ?1 AND a.state = 'queued' AND a.blocked_on = ''`
	if _, err := q.db.ExecContext(ctx, `UPDATE runs SET waiting_for = 'lease ' || ?2
		WHERE id IN (SELECT a.run_id FROM attempts a WHERE a.id IN (`+names+`)) AND waiting_for <> 'lease ' || ?2`,
		tenant, key, limit); err != nil {
		return 0, interpretError(err)
	}
	res, err := q.db.ExecContext(ctx, `UPDATE attempts SET blocked_on = ?2 WHERE id IN (`+names+`)`, tenant, key, limit)
	if err != nil {
		return 0, interpretError(err)
	}
	n, err := res.RowsAffected()
	return int(n), interpretError(err)
}

// LeaseWakeStranded: one writer at a time, so a release never skips a
// waiter here; the sweep is there for the stores where it can.
func (q *queries) LeaseWakeStranded(ctx context.Context, limit int) (int, error) {
	res, err := q.db.ExecContext(ctx, `UPDATE attempts SET blocked_on = '' WHERE id IN (SELECT a.id FROM attempts a
		WHERE a.state = 'queued' AND a.blocked_on <> ''
			AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.tenant = a.tenant AND l.key = a.blocked_on)
		LIMIT ?)`, limit)
	if err != nil {
		return 0, interpretError(err)
	}
	n, err := res.RowsAffected()
	return int(n), interpretError(err)
}

func (q *queries) LeaseWaiters(ctx context.Context, tenant, key string) ([]*store.Attempt, error) {
	return q.attempts(ctx, `SELECT `+attemptCols+` FROM attempts
		WHERE tenant = ? AND blocked_on = ? AND state = 'queued' ORDER BY not_before, id`, tenant, key)
}

// The writers go through the write gate when called outside a transaction.

// LeaseAcquire takes a run's keys behind the write gate.
func (s *Store) LeaseAcquire(ctx context.Context, p *store.LeaseAcquireParams) (held []store.LeaseHold, blockedOn string, err error) {
	err = s.gated(ctx, func(q *queries) error {
		held, blockedOn, err = q.LeaseAcquire(ctx, p)
		return err
	})
	return held, blockedOn, err
}

// LeaseForceRelease breaks a key's holds behind the write gate.
func (s *Store) LeaseForceRelease(ctx context.Context, tenant, key string) (dropped []store.LeaseHold, token int64, err error) {
	err = s.gated(ctx, func(q *queries) error {
		dropped, token, err = q.LeaseForceRelease(ctx, tenant, key)
		return err
	})
	return dropped, token, err
}

// LeaseKeyConsume marks a once key consumed behind the write gate.
func (s *Store) LeaseKeyConsume(ctx context.Context, tenant, key, runID string) error {
	return s.gated(ctx, func(q *queries) error { return q.LeaseKeyConsume(ctx, tenant, key, runID) })
}

// LeaseWakeStranded sweeps behind the write gate.
func (s *Store) LeaseWakeStranded(ctx context.Context, limit int) (n int, err error) {
	err = s.gated(ctx, func(q *queries) error {
		n, err = q.LeaseWakeStranded(ctx, limit)
		return err
	})
	return n, err
}

// LeaseReleaseAttempt drops an attempt's holds behind the write gate.
func (s *Store) LeaseReleaseAttempt(ctx context.Context, tenant, attemptID string) (keys []string, err error) {
	err = s.gated(ctx, func(q *queries) error {
		keys, err = q.LeaseReleaseAttempt(ctx, tenant, attemptID)
		return err
	})
	return keys, err
}
