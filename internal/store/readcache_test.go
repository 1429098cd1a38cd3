package store

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestReadCache(t *testing.T) {
	var c ReadCache[int]
	loads := 0
	load := func(v int, err error) func() (int, error) {
		return func() (int, error) { loads++; return v, err }
	}
	v, err := c.Get("a", load(1, nil), nil)
	require.NoError(t, err)
	require.Equal(t, 1, v)
	c.Get("a", load(1, nil), nil)
	require.Equal(t, 2, loads, "off until enabled: every read loads")

	c.Enable(true)
	c.Get("a", load(1, nil), nil)
	v, _ = c.Get("a", load(2, nil), nil)
	require.Equal(t, 1, v, "cached")
	require.Equal(t, 3, loads)

	c.Forget("a")
	v, _ = c.Get("a", load(2, nil), nil)
	require.Equal(t, 2, v, "forgotten, read again")

	// A change forgotten while a read is in flight: what that read saw is
	// not kept.
	v, _ = c.Get("b", func() (int, error) { c.Forget("b"); return 7, nil }, nil)
	require.Equal(t, 7, v)
	v, _ = c.Get("b", load(8, nil), nil)
	require.Equal(t, 8, v, "the overlapping read was not cached")

	// Errors are kept only when asked to.
	missing := errors.New("missing")
	_, err = c.Get("c", load(0, missing), nil)
	require.ErrorIs(t, err, missing)
	_, err = c.Get("c", load(3, nil), nil)
	require.NoError(t, err)
	_, err = c.Get("d", load(0, missing), func(err error) bool { return errors.Is(err, missing) })
	require.ErrorIs(t, err, missing)
	_, err = c.Get("d", load(4, nil), nil)
	require.ErrorIs(t, err, missing, "a kept absence is served from the cache")

	c.Update("a", func(v *int) { *v = 20 })
	v, _ = c.Get("a", load(0, nil), nil)
	require.Equal(t, 20, v)
	c.Update("zz", func(v *int) { *v = 1 })
	v, _ = c.Get("zz", load(5, nil), nil)
	require.Equal(t, 5, v, "Update never creates an entry")

	c.MaxAge = time.Nanosecond
	time.Sleep(time.Millisecond)
	require.False(t, c.Has("a"), "past MaxAge an entry is not served")
	v, _ = c.Get("a", load(21, nil), nil)
	require.Equal(t, 21, v)
	c.MaxAge = 0
	require.True(t, c.Has("a"))

	c.Enable(false)
	require.False(t, c.Has("a"))
	before := loads
	c.Get("a", load(0, nil), nil)
	c.Get("a", load(0, nil), nil)
	require.Equal(t, before+2, loads, "off: nothing cached, nothing served")
}
