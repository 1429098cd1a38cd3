package server

import (
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A stopping server closes a kept-alive connection only once its client has
// left it alone for quietFor: one that was used a moment ago may have a
// request on its way, and closing it would drop that request.
func TestDrainWaitsForQuietConnections(t *testing.T) {
	d := &drainer{}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	require.True(t, d.quiet(t0), "no connection, no request: quiet")

	d.conns = map[net.Conn]connState{a: {state: http.StateIdle, since: t0}}
	require.False(t, d.quiet(t0.Add(quietFor/2)), "idle for less than quietFor")
	require.True(t, d.quiet(t0.Add(quietFor)), "idle for quietFor")

	d.conns[b] = connState{state: http.StateActive, since: t0}
	require.False(t, d.quiet(t0.Add(time.Hour)), "a request is being read or served")

	d.track(b, http.StateClosed)
	require.True(t, d.quiet(t0.Add(quietFor)))
	d.inflight.Add(1)
	require.False(t, d.quiet(t0.Add(time.Hour)), "a request in flight")
	d.inflight.Add(-1)

	d.track(a, http.StateActive)
	require.Equal(t, http.StateActive, d.conns[a].state, "the hook records each state change")
	require.False(t, d.quiet(t0.Add(time.Hour)))
}
