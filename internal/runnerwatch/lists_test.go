package runnerwatch

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/store"
)

// countingRunners is the one query Lists makes.
type countingRunners struct {
	store.Queries
	reads   int
	runners []*store.Runner
}

func (c *countingRunners) RunnerList(context.Context, string) ([]*store.Runner, error) {
	c.reads++
	return c.runners, nil
}

func TestListsCache(t *testing.T) {
	q := &countingRunners{runners: []*store.Runner{{ID: "rnr_1"}}}
	var c Lists
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	get := func(tenant string, at time.Time) []*store.Runner {
		t.Helper()
		l, err := c.Get(context.Background(), q, tenant, at)
		require.NoError(t, err)
		return l
	}
	require.Len(t, get("a", t0), 1)
	require.Len(t, get("a", t0.Add(999*time.Millisecond)), 1)
	require.Equal(t, 1, q.reads, "within the TTL the list is cached")
	get("b", t0)
	require.Equal(t, 2, q.reads, "per tenant")
	get("a", t0.Add(ListTTL))
	require.Equal(t, 3, q.reads, "at the TTL it is read again")
	get("a", t0)
	require.Equal(t, 4, q.reads, "a clock set back does not keep an entry alive")
	c.Invalidate()
	q.runners = append(q.runners, &store.Runner{ID: "rnr_2"})
	require.Len(t, get("a", t0), 2, "a runner written through this server shows at once")
	require.Equal(t, 5, q.reads)
}
