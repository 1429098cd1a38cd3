package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"go.uber.org/goleak"

	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/postgres"
	"github.com/jobplane/jobplane/internal/store/storetest"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) store.Store { return testdb.Postgres(t) })
}

// TestListenerReconnects: a killed LISTEN connection is replaced, and the
// replacement wakes claimers once because notifications may have been lost.
func TestListenerReconnects(t *testing.T) {
	ctx := context.Background()
	s := testdb.Postgres(t)
	ch := s.Wake()
	killed, err := postgres.TerminateListener(ctx, s.(*postgres.Store))
	require.NoError(t, err)
	require.Equal(t, 1, killed)
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake after the listener reconnected")
	}
	// And notifications flow again.
	require.Eventually(t, func() bool {
		ch := s.Wake()
		if err := s.WakeClaimers(ctx); err != nil {
			return false
		}
		select {
		case <-ch:
			return true
		case <-time.After(500 * time.Millisecond):
			return false
		}
	}, 10*time.Second, 10*time.Millisecond)
}

// TestWakeReplicas: WakeClaimers reaches another replica on the same
// database (through NOTIFY); WakeWatchers wakes only its own process.
func TestWakeReplicas(t *testing.T) {
	ctx := context.Background()
	a, b := twoServers(ctx, t)
	waitWake := func(ch <-chan struct{}, d time.Duration) bool {
		select {
		case <-ch:
			return true
		case <-time.After(d):
			return false
		}
	}
	// The replica's listener may not be listening yet: retry until a
	// claimers' wake-up gets through.
	require.Eventually(t, func() bool {
		ch := b.Wake()
		require.NoError(t, a.InTx(ctx, func(tx store.Tx) error { return tx.WakeClaimers(ctx) }))
		return waitWake(ch, 500*time.Millisecond)
	}, 15*time.Second, 10*time.Millisecond, "WakeClaimers did not reach the other replica")

	time.Sleep(200 * time.Millisecond) // let any echo of the last notification pass
	own, other := a.Wake(), b.Wake()
	require.NoError(t, a.InTx(ctx, func(tx store.Tx) error { return tx.WakeWatchers(ctx) }))
	require.True(t, waitWake(own, 5*time.Second), "WakeWatchers did not wake its own process")
	require.False(t, waitWake(other, time.Second), "WakeWatchers woke another replica")

	other = b.Wake()
	require.NoError(t, a.InTx(ctx, func(tx store.Tx) error { return tx.WakeClaimers(ctx) }))
	require.True(t, waitWake(other, 5*time.Second), "WakeClaimers did not reach the other replica")
}

// twoServers opens two stores on one fresh schema, as two servers that
// share a database.
func twoServers(ctx context.Context, t *testing.T) (a, b *postgres.Store) {
	dsn := testdb.PostgresDSN(t)
	open := func() *postgres.Store {
		s, err := postgres.Open(ctx, dsn)
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	return open(), open()
}
