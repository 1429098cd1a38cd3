package control

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/store"
)

// countingRunners is the one query runnerLists makes.
type countingRunners struct {
	store.Queries
	reads   int
	runners []*store.Runner
}

func (c *countingRunners) RunnerList(context.Context, string) ([]*store.Runner, error) {
	c.reads++
	return c.runners, nil
}

func TestRunnerListsCache(t *testing.T) {
	q := &countingRunners{runners: []*store.Runner{{ID: "rnr_1"}}}
	var c runnerLists
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	get := func(tenant string, at time.Time) []*store.Runner {
		t.Helper()
		l, err := c.get(context.Background(), q, tenant, at)
		require.NoError(t, err)
		return l
	}
	require.Len(t, get("a", t0), 1)
	require.Len(t, get("a", t0.Add(999*time.Millisecond)), 1)
	require.Equal(t, 1, q.reads, "within the TTL the list is cached")
	get("b", t0)
	require.Equal(t, 2, q.reads, "per tenant")
	get("a", t0.Add(runnerListTTL))
	require.Equal(t, 3, q.reads, "at the TTL it is read again")
	get("a", t0)
	require.Equal(t, 4, q.reads, "a clock set back does not keep an entry alive")
	c.invalidate()
	q.runners = append(q.runners, &store.Runner{ID: "rnr_2"})
	require.Len(t, get("a", t0), 2, "a runner written through this server shows at once")
	require.Equal(t, 5, q.reads)
}

type countingPrincipals struct {
	store.Queries
	reads int
	have  map[string]string
}

func (c *countingPrincipals) PrincipalGetByName(_ context.Context, tenant, name string) (*store.Principal, error) {
	c.reads++
	if k, ok := c.have[name]; ok {
		return &store.Principal{Tenant: tenant, Name: name, Kind: k}, nil
	}
	return nil, store.ErrNotFound
}

func TestActorKinds(t *testing.T) {
	q := &countingPrincipals{have: map[string]string{"ci": "service"}}
	var c actorKinds
	for range 3 {
		k, err := c.kind(context.Background(), q, "t1", "ci")
		require.NoError(t, err)
		require.Equal(t, "service", k)
	}
	require.Equal(t, 1, q.reads, "a principal found is remembered")
	k, _ := c.kind(context.Background(), q, "t1", "alice")
	require.Equal(t, "user", k, "an actor without a principal counts as a user")
	q.have["alice"] = "service"
	k, _ = c.kind(context.Background(), q, "t1", "alice")
	require.Equal(t, "service", k, "one not found is asked again: it may have been created since")
	k, _ = c.kind(context.Background(), q, "t2", "ci")
	require.Equal(t, "service", k)
	require.Equal(t, 4, q.reads, "per tenant")
}
