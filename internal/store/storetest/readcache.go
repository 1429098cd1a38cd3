package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// testReadCaches: the cached reads behind every signed request and run
// request show a change written through the store as soon as it committed.
func testReadCaches(t *testing.T, s store.Store) {
	f := newFixture(t, s)
	now := t0
	rn := &store.Runner{ID: id.New(id.Runner, now), Tenant: f.tenant, Pool: "default", Name: "r", Labels: []string{},
		PublicKey: protocol.EncodeKey(make([]byte, 32)), KeyFingerprint: "0000000000000000", Status: store.RunnerActive,
		AllowedRepos: []string{}, LastSeenAt: &now, CreatedAt: now}
	require.NoError(t, s.InTx(bg(), func(tx store.Tx) error { return tx.RunnerCreate(bg(), rn) }))
	got, err := s.RunnerGetCached(bg(), rn.ID)
	require.NoError(t, err)
	require.Equal(t, store.RunnerActive, got.Status)
	got.Status = "scribbled" // a caller's copy, not the cache's
	got, err = s.RunnerGetCached(bg(), rn.ID)
	require.NoError(t, err)
	require.Equal(t, store.RunnerActive, got.Status)

	rn.Status = store.RunnerDisabled
	require.NoError(t, s.InTx(bg(), func(tx store.Tx) error { return tx.RunnerUpdate(bg(), rn) }))
	got, err = s.RunnerGetCached(bg(), rn.ID)
	require.NoError(t, err)
	require.Equal(t, store.RunnerDisabled, got.Status, "a disabled runner is refused at its next request")

	// A rolled-back change leaves the row (and what the cache may hold) as
	// it was.
	rn.Status = store.RunnerActive
	_ = s.InTx(bg(), func(tx store.Tx) error {
		require.NoError(t, tx.RunnerUpdate(bg(), rn))
		return errRollback
	})
	got, err = s.RunnerGetCached(bg(), rn.ID)
	require.NoError(t, err)
	require.Equal(t, store.RunnerDisabled, got.Status)

	touched := now.Add(time.Hour)
	require.NoError(t, s.RunnerTouch(bg(), rn.ID, &touched))
	got, err = s.RunnerGetCached(bg(), rn.ID)
	require.NoError(t, err)
	require.NotNil(t, got.LastSeenAt)
	require.True(t, got.LastSeenAt.Equal(touched), "last seen %s, want %s", got.LastSeenAt, touched)

	_, err = s.RunnerGetCached(bg(), "rnr_missing")
	require.ErrorIs(t, err, store.ErrNotFound)

	p := &store.Principal{ID: "prn_cache", Tenant: f.tenant, Kind: "service", Name: "ci", CreatedAt: t0}
	require.NoError(t, s.PrincipalCreate(bg(), p))
	tok := &store.APIToken{ID: "tok_cache", PrincipalID: p.ID, Digest: "d-cache", CreatedAt: t0}
	require.NoError(t, s.APITokenCreate(bg(), tok))
	gt, gp, err := s.APITokenGetCached(bg(), "d-cache")
	require.NoError(t, err)
	require.Nil(t, gt.RevokedAt)
	require.Equal(t, "ci", gp.Name)
	require.NoError(t, s.InTx(bg(), func(tx store.Tx) error { return tx.APITokenRevoke(bg(), f.tenant, tok.ID, at(time.Minute)) }))
	gt, _, err = s.APITokenGetCached(bg(), "d-cache")
	require.NoError(t, err)
	require.NotNil(t, gt.RevokedAt, "a revoked token is refused at its next request")
	_, _, err = s.APITokenGetCached(bg(), "d-unknown")
	require.ErrorIs(t, err, store.ErrNotFound)

	_, err = s.GitHubInstallationByTenantCached(bg(), f.tenant)
	require.ErrorIs(t, err, store.ErrNotFound, "a tenant without an installation")
	in := &store.GitHubInstallation{ID: 4242, Tenant: f.tenant, Account: "acme", AccountType: "Organization",
		RepositorySelection: "all", Status: store.GitHubInstallationActive}
	require.NoError(t, s.InTx(bg(), func(tx store.Tx) error { return tx.GitHubInstallationPut(bg(), in) }))
	gi, err := s.GitHubInstallationByTenantCached(bg(), f.tenant)
	require.NoError(t, err, "the cached absence ends when the installation is bound")
	require.Equal(t, store.GitHubInstallationActive, gi.Status)
	in.Status = store.GitHubInstallationSuspended
	require.NoError(t, s.InTx(bg(), func(tx store.Tx) error { return tx.GitHubInstallationPut(bg(), in) }))
	gi, err = s.GitHubInstallationByTenantCached(bg(), f.tenant)
	require.NoError(t, err)
	require.Equal(t, store.GitHubInstallationSuspended, gi.Status, "a suspension shows at once")
}

var errRollback = errors.New("storetest: roll back")
