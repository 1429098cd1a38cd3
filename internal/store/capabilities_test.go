package store_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// TestRunnerCapabilitiesInput: absent fields are the process executor
// without capabilities; a malformed executor is bad_request naming it.
func TestRunnerCapabilitiesInput(t *testing.T) {
	ex, caps, err := store.RunnerCapabilities("", nil)
	require.NoError(t, err)
	require.Equal(t, "process", ex)
	require.Zero(t, caps)
	ex, caps, err = store.RunnerCapabilities("container", &protocol.Capabilities{Images: true, Isolated: true})
	require.NoError(t, err)
	require.Equal(t, "container", ex)
	require.Equal(t, store.CapImages|store.CapIsolated, caps)
	for _, bad := range []string{"Process", "1x", "-", "a_b", "a b", "a\x00", "é", "abcdefghijklmnopqrstuvwxyz0123456"} {
		_, _, err := store.RunnerCapabilities(bad, nil)
		require.ErrorIs(t, err, protocol.ErrBadRequest, bad)
		var fe *protocol.FieldError
		require.ErrorAs(t, err, &fe, bad)
		require.Equal(t, "executor", fe.Field)
	}
}
