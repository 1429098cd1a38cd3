package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/postgres"
)

// TestReadCacheAcrossServers: two servers share one database; a runner
// disabled through one is refused by the other, whose cached copy the
// change's announcement empties, and a server whose listener is gone
// serves nothing from its cache until it listens again.
func TestReadCacheAcrossServers(t *testing.T) {
	ctx := store.WithSystem(context.Background(), "test")
	a, b := twoServers(ctx, t)
	tn, err := a.TenantEnsure(ctx, "acme", nil)
	require.NoError(t, err)
	now := time.Now().UTC().Truncate(time.Microsecond)
	rn := &store.Runner{ID: id.New(id.Runner, now), Tenant: tn.ID, Pool: "default", Name: "r", Labels: []string{},
		PublicKey: protocol.EncodeKey(make([]byte, 32)), KeyFingerprint: "0000000000000000", Status: store.RunnerActive,
		AllowedRepos: []string{}, LastSeenAt: &now, CreatedAt: now}
	require.NoError(t, a.InTx(ctx, func(tx store.Tx) error { return tx.RunnerCreate(ctx, rn) }))
	status := func(s *postgres.Store) string {
		r, err := s.RunnerGetCached(ctx, rn.ID)
		require.NoError(t, err)
		return r.Status
	}
	require.Equal(t, store.RunnerActive, status(a))
	require.True(t, postgres.RunnerCached(a, rn.ID))

	// A token revoked through B is refused by A.
	p := &store.Principal{ID: "prn_x", Tenant: tn.ID, Kind: "user", Name: "alice", CreatedAt: now}
	require.NoError(t, a.PrincipalCreate(ctx, p))
	require.NoError(t, a.APITokenCreate(ctx, &store.APIToken{ID: "tok_x", PrincipalID: p.ID, Digest: "dx", CreatedAt: now}))
	tok, _, err := a.APITokenGetCached(ctx, "dx")
	require.NoError(t, err)
	require.Nil(t, tok.RevokedAt)
	require.NoError(t, b.InTx(ctx, func(tx store.Tx) error { return tx.APITokenRevoke(ctx, tn.ID, "tok_x", nil) }))
	require.Eventually(t, func() bool {
		tok, _, err := a.APITokenGetCached(ctx, "dx")
		return err == nil && tok.RevokedAt != nil
	}, 5*time.Second, 5*time.Millisecond, "the other server kept serving a revoked token")

	rn.Status = store.RunnerDisabled
	require.NoError(t, b.InTx(ctx, func(tx store.Tx) error { return tx.RunnerUpdate(ctx, rn) }))
	require.Equal(t, store.RunnerDisabled, status(b), "the writer forgets at its commit")
	require.Eventually(t, func() bool { return !postgres.RunnerCached(a, rn.ID) }, 5*time.Second, 5*time.Millisecond,
		"the other server never heard of the change")
	require.Equal(t, store.RunnerDisabled, status(a))

	// Without its listener a server cannot hear of changes: it caches
	// nothing until the listener is back.
	require.True(t, postgres.RunnerCached(a, rn.ID))
	killed, err := postgres.TerminateListener(ctx, a)
	require.NoError(t, err)
	require.Equal(t, 2, killed, "both servers' listeners (they share the channel)")
	require.Eventually(t, func() bool { return !postgres.RunnerCached(a, rn.ID) }, 5*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool {
		status(a)
		return postgres.RunnerCached(a, rn.ID)
	}, 10*time.Second, 10*time.Millisecond, "caching resumes once the listener reconnected")
	rn.Status = store.RunnerActive
	require.NoError(t, b.InTx(ctx, func(tx store.Tx) error { return tx.RunnerUpdate(ctx, rn) }))
	require.Eventually(t, func() bool { return status(a) == store.RunnerActive }, 5*time.Second, 5*time.Millisecond)
}
