package control

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/store"
)

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
