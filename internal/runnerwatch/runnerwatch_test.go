package runnerwatch

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/store"
)

// TestRunnerWatchTransitions: only a runner's coming online, its silence
// past OnlineWindow (as the store, shared by every server, tells
// it), and explicit marks make a pool dirty; heartbeats of a runner known
// online do not, and one seen through another server stays online.
func TestRunnerWatchTransitions(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var w Watch
	rn := &store.Runner{ID: "rnr_a", Tenant: "t1", Pool: "default", Status: store.RunnerActive}
	at := func(d time.Duration) *time.Time { v := t0.Add(d); return &v }

	require.True(t, w.Saw(rn, at(0), t0), "first seen by this server")
	require.Equal(t, []Pool{{"t1", "default"}}, w.Take())
	require.False(t, w.Saw(rn, at(0), t0.Add(time.Second)))
	require.False(t, w.Saw(rn, at(time.Second), t0.Add(time.Minute)))
	require.Empty(t, w.Take(), "heartbeats of a runner known online")

	// Silent here, but the store has it calling another server.
	later := t0.Add(time.Minute + OnlineWindow + time.Second)
	require.Equal(t, []string{"rnr_a"}, w.Silent(later))
	fresh := *rn
	fresh.LastSeenAt = at(time.Minute + OnlineWindow)
	w.Update("rnr_a", &fresh, later)
	require.Empty(t, w.Take())
	require.Empty(t, w.Silent(later))

	// Silent everywhere: offline.
	gone := later.Add(OnlineWindow + time.Second)
	require.Equal(t, []string{"rnr_a"}, w.Silent(gone))
	w.Update("rnr_a", &fresh, gone)
	require.Equal(t, []Pool{{"t1", "default"}}, w.Take())
	require.Empty(t, w.Silent(gone), "forgotten")

	// Back after its silence.
	require.True(t, w.Saw(rn, fresh.LastSeenAt, gone.Add(time.Second)))
	require.Len(t, w.Take(), 1)

	// Disabled, or deleted, while silent: offline too.
	require.Equal(t, []string{"rnr_a"}, w.Silent(gone.Add(time.Second+OnlineWindow+time.Second)))
	w.Update("rnr_a", nil, gone.Add(time.Second+OnlineWindow+time.Second))
	require.Len(t, w.Take(), 1)

	w.Mark("t2", "gpu")
	require.Equal(t, []Pool{{"t2", "gpu"}}, w.Take())
}
