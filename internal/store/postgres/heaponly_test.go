package postgres_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/postgres"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// TestRunStateChangesAreHeapOnly: the updates of a run through its states
// (queued, running, succeeded) leave every index alone and its new version
// on its page (migration 015), as long as the run holds no lease key and
// waits for no approval. Each such update used to write an entry into
// three indexes and a version of about 1.5 kB wherever there was room.
func TestRunStateChangesAreHeapOnly(t *testing.T) {
	ctx := context.Background()
	s := testdb.Postgres(t).(*postgres.Store)
	// A decision record about the size of a real one, so that the page
	// room the migration leaves is tested with rows of the real width.
	decision := `{"request": {"explanation": "` + strings.Repeat("x", 900) + `"}}`
	const n = 40
	_, err := postgres.TxStrings(ctx, s, `INSERT INTO runs (id, tenant, job, channel, ref, commit_sha, actor, reason,
			idempotency_key, state, decision, lease_keys, waiting_for, max_attempts, counted_attempts, created_at, updated_at)
		SELECT 'run_' || i, 'tn_x', 'job', 'main', 'main', '', 'usr', '', '', 'queued', '`+decision+`',
			CASE WHEN i = 1 THEN '[{"key": "db"}]'::jsonb ELSE '[]' END, '', 1, 0, now(), now()
		FROM generate_series(1, `+strconv.Itoa(n)+`) i RETURNING ''`)
	require.NoError(t, err)

	tctx := store.WithTenant(ctx, "tn_x")
	for _, state := range []store.RunState{store.RunRunning, store.RunSucceeded} {
		var holder string
		var hot int
		// No require inside the transaction: FailNow there would leave
		// it open and the test waiting on its connection.
		err = s.InTx(tctx, func(tx store.Tx) error {
			var runs []*store.Run
			for i := 1; i <= n; i++ {
				r, err := tx.RunGetByID(tctx, "run_"+strconv.Itoa(i), true)
				if err != nil {
					return err
				}
				r.State = state
				runs = append(runs, r)
			}
			if err := tx.RunUpdates(tctx, runs); err != nil {
				return err
			}
			var err error
			if hot, err = postgres.XactHotUpdates(tctx, tx, "runs"); err != nil {
				return err
			}
			holder, err = tx.LeaseLiveRun(tctx, "tn_x", "db", "")
			return err
		})
		// Run 1 holds a key: it leaves runs_live_lease_keys when it ends,
		// which no heap-only update can do. A page may also run out of
		// room.
		require.GreaterOrEqual(t, hot, n*3/4, "%d of %d updates to %s were heap-only", hot, n, state)
		// The generated column follows the state: a running run holds
		// its key, an ended one does not.
		if state == store.RunRunning {
			require.NoError(t, err)
			require.Equal(t, "run_1", holder)
		} else {
			require.ErrorIs(t, err, store.ErrNotFound, "an ended run holds no key: %s", holder)
		}
	}
}
