package control

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/postgres"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// withPGSettings adds server settings as startup parameters, which pgx sends
// for unknown DSN keys, so every pooled connection has them.
func withPGSettings(dsn string, kv ...string) string {
	sep, pair := "&", "%s=%s"
	if !strings.Contains(dsn, "://") {
		sep, pair = " ", "%s=%s"
	} else if !strings.Contains(dsn, "?") {
		sep = "?"
	}
	for i := 0; i+1 < len(kv); i += 2 {
		dsn += sep + fmt.Sprintf(pair, kv[i], kv[i+1])
		if sep == "?" {
			sep = "&"
		}
	}
	return dsn
}

// overClaims is the C2 checker: claim request IDs whose one claim of k rows
// leased more than k (claimed[request] is k).
func overClaims(t *testing.T, conn *pgx.Conn, pool string, claimed map[string]int) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT claim_request_id, count(*) FROM attempts
		WHERE pool = $1 AND state = 'leased' GROUP BY claim_request_id`, pool)
	require.NoError(t, err)
	defer rows.Close()
	var bad []string
	for rows.Next() {
		var req string
		var n int
		require.NoError(t, rows.Scan(&req, &n))
		k, ok := claimed[req]
		if !ok || n > k {
			bad = append(bad, fmt.Sprintf("%s: %d rows for a claim of %d", req, n, k))
		}
	}
	require.NoError(t, rows.Err())
	return bad
}

// TestC2_ClaimNeverOverClaims (PostgreSQL): with hash and merge joins off
// and the attempts table's statistics stale (analyzed empty, autovacuum
// off), the single-row claim (LIMIT 1 in a CTE, FOR UPDATE SKIP LOCKED)
// never leases more than one row per call, under 8 concurrent claimers. The
// N part runs the BUG #15715 shape `IN (SELECT … LIMIT k FOR UPDATE SKIP
// LOCKED)` through the same checker, and proves the checker fires on a
// statement that over-claims.
func TestC2_ClaimNeverOverClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := withPGSettings(testdb.PostgresDSN(t), "enable_hashjoin", "off", "enable_mergejoin", "off", "enable_material", "off")
	st, err := postgres.Open(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	for _, name := range []string{"enable_hashjoin", "enable_mergejoin"} {
		var v string
		require.NoError(t, conn.QueryRow(ctx, "SHOW "+name).Scan(&v))
		require.Equal(t, "off", v, name)
	}
	_, err = conn.Exec(ctx, `ALTER TABLE attempts SET (autovacuum_enabled = false); ANALYZE attempts; ANALYZE runs`)
	require.NoError(t, err)

	spec := jobSpec(time.Hour, 2*time.Hour, 1)
	const n = 300
	seedRuns(t, st, spec, n, nil)
	seedRuns(t, st, spec, n, func(_ int, a *store.Attempt, _ *store.Run) { a.Pool = "n-pool" })
	e := newEnv(t, st, spec)
	rn := e.runner("c2")

	// The real claim, k = 1, 8 claimers, until the pool is empty.
	var (
		mu      sync.Mutex
		claimed = map[string]int{}
		seq     atomic.Int64
		wg      sync.WaitGroup
	)
	for range 8 {
		wg.Go(func() {
			for {
				req := fmt.Sprintf("c2-%d", seq.Add(1))
				var got *store.Attempt
				err := st.InTx(ctx, func(tx store.Tx) error {
					a, err := tx.AttemptClaim(ctx, &store.AttemptClaimParams{
						Tenant: testTenant, Pool: testPool, RunnerLabels: []string{}, RunnerID: rn.ID,
						LeaseDigest: "d", ClaimRequestID: req, Now: e.clock.NowOrNil(),
					})
					got = a
					return err
				})
				if err != nil {
					if !errors.Is(err, store.ErrNotFound) {
						t.Errorf("claim: %v", err)
					}
					return
				}
				mu.Lock()
				claimed[req] = 1
				mu.Unlock()
				_ = got
			}
		})
	}
	wg.Wait()
	require.Len(t, claimed, n)
	require.Empty(t, overClaims(t, conn, testPool, claimed))
	var leased int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM attempts WHERE pool = $1 AND state = 'leased'`, testPool).Scan(&leased))
	require.Equal(t, n, leased, "claimed = inserted")

	// N: the batch shape of BUG #15715, k = 1…10, 8 concurrent claimers.
	batch := func(req string, k, limit int) int {
		rows, err := conn.Query(ctx, `UPDATE attempts SET state = 'leased', runner_id = 'n', claim_request_id = $1
			WHERE id IN (SELECT id FROM attempts WHERE state = 'queued' AND pool = 'n-pool'
				ORDER BY not_before, id LIMIT $2 FOR UPDATE SKIP LOCKED) RETURNING id`, req, limit)
		require.NoError(t, err)
		defer rows.Close()
		got := 0
		for rows.Next() {
			got++
		}
		require.NoError(t, rows.Err())
		return got
	}
	nclaimed := map[string]int{}
	var conns []*pgx.Conn
	for range 8 {
		c, err := pgx.Connect(ctx, dsn)
		require.NoError(t, err)
		conns = append(conns, c)
	}
	defer func() {
		for _, c := range conns {
			_ = c.Close(context.Background())
		}
	}()
	returnedOver := 0
	for w, c := range conns {
		wg.Go(func() {
			for i := 0; ; i++ {
				k := 1 + (w+i)%10
				req := fmt.Sprintf("n-%d-%d", w, i)
				rows, err := c.Query(ctx, `UPDATE attempts SET state = 'leased', runner_id = 'n', claim_request_id = $1
					WHERE id IN (SELECT id FROM attempts WHERE state = 'queued' AND pool = 'n-pool'
						ORDER BY not_before, id LIMIT $2 FOR UPDATE SKIP LOCKED) RETURNING id`, req, k)
				if err != nil {
					t.Error(err)
					return
				}
				got := 0
				for rows.Next() {
					got++
				}
				rows.Close()
				mu.Lock()
				nclaimed[req] = k
				if got > k {
					returnedOver++
				}
				mu.Unlock()
				if got == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	over := overClaims(t, conn, "n-pool", nclaimed)
	t.Logf("C2 N: IN (SELECT … LIMIT k FOR UPDATE SKIP LOCKED) with forced nested loops over %d claims: %d over-claims in the table (%v), %d in RETURNING", len(nclaimed), len(over), over, returnedOver)

	// The checker can fail: a statement that takes one row more than asked
	// (what the planner bug does) is caught.
	_, err = conn.Exec(ctx, `UPDATE attempts SET state = 'queued', claim_request_id = '' WHERE pool = 'n-pool'`)
	require.NoError(t, err)
	require.Equal(t, 4, batch("n-broken", 3, 4))
	caught := overClaims(t, conn, "n-pool", map[string]int{"n-broken": 3})
	require.Len(t, caught, 1, "the checker must catch an over-claim")
}
