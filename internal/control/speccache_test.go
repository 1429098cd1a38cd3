package control

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/store"
)

// TestSpecCache: a spec is decoded as runSpec decodes it, once per distinct
// bytes; a spec that does not decode is an error and is not kept; the
// cache stays within its bound.
func TestSpecCache(t *testing.T) {
	var c specCache
	a := &store.Run{Spec: json.RawMessage(`{"pool":"gpu","command":["make","test"],"env":{"A":"1"}}`)}
	want, err := runSpec(a)
	require.NoError(t, err)
	got, err := c.get(a)
	require.NoError(t, err)
	require.Equal(t, want, got)
	again, err := c.get(&store.Run{Spec: append(json.RawMessage(nil), a.Spec...)})
	require.NoError(t, err)
	require.Equal(t, want, again)
	require.Len(t, c.m, 1, "the same bytes are one entry")

	b, err := c.get(&store.Run{Spec: json.RawMessage(`{"pool":"cpu"}`)})
	require.NoError(t, err)
	require.Equal(t, "cpu", b.Pool)

	_, err = c.get(&store.Run{Spec: json.RawMessage(`{"pool":`)})
	require.Error(t, err)
	require.Len(t, c.m, 2, "an undecodable spec is not kept")

	for i := range 3 * specCacheMax {
		_, err := c.get(&store.Run{Spec: json.RawMessage(fmt.Sprintf(`{"pool":"p%d"}`, i))})
		require.NoError(t, err)
		require.LessOrEqual(t, len(c.m), specCacheMax)
	}
}
