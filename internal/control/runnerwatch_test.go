package control

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/store/testdb"
)

// flakyGate is an integration whose Gate fails until told otherwise.
type flakyGate struct {
	Tenants
	fail  bool
	calls int
}

var errGateDown = errors.New("installation unreadable")

func (g *flakyGate) Gate(context.Context, string) (bool, error) {
	g.calls++
	if g.fail {
		return false, errGateDown
	}
	return false, nil
}

// TestRefreshRunnerWaitsKeepsAPoolItCouldNotGate: a pool whose tenant the
// integration could not gate is reported and re-stated at the next pass,
// not dropped with its stale Check Runs.
func TestRefreshRunnerWaitsKeepsAPoolItCouldNotGate(t *testing.T) {
	g := &flakyGate{fail: true}
	svc, err := New(Config{Store: testdb.SQLite(t), Tenants: g})
	require.NoError(t, err)
	svc.watch.Mark("t1", "default")

	_, err = svc.RefreshRunnerWaits(context.Background())
	require.ErrorIs(t, err, errGateDown)
	require.Equal(t, 1, g.calls)

	g.fail = false
	_, err = svc.RefreshRunnerWaits(context.Background())
	require.NoError(t, err)
	require.Equal(t, 2, g.calls, "the pool is gated again at the next pass")

	_, err = svc.RefreshRunnerWaits(context.Background())
	require.NoError(t, err)
	require.Equal(t, 2, g.calls, "and then no more")
}
