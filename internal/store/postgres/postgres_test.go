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
