package store_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

type sqlState string

func (s sqlState) Error() string    { return "sqlstate " + string(s) }
func (s sqlState) SQLState() string { return string(s) }

type safeToRetry struct{}

func (safeToRetry) Error() string     { return "conn closed" }
func (safeToRetry) SafeToRetry() bool { return true }

func TestConnectionLost(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		lost bool
	}{
		{sqlState("57P01"), true}, // admin_shutdown: pg_terminate_backend
		{sqlState("57P02"), true}, // crash_shutdown
		{sqlState("57P03"), true}, // cannot_connect_now
		{sqlState("08006"), true}, // connection_failure
		{sqlState("08P01"), true},
		{sqlState("53300"), true}, // too_many_connections
		{sqlState("23505"), false},
		{sqlState("22021"), false},
		{sqlState("40001"), false},
		{fmt.Errorf("query: %w", safeToRetry{}), true},
		{&net.OpError{Op: "read", Err: syscall.ECONNRESET}, true},
		{fmt.Errorf("x: %w", io.ErrUnexpectedEOF), true},
		{syscall.EPIPE, true},
		{errors.New("can't scan into dest"), false},
		{context.Canceled, false},
		{nil, false},
	} {
		require.Equal(t, c.lost, store.ConnectionLost(c.err), "%v", c.err)
		if c.lost {
			require.True(t, errors.Is(store.Refusal(c.err), protocol.ErrUnavailable), "%v", c.err)
		}
	}
}
