package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/store"
)

// testClaimScope: a self-hosted runner never claims a managed_only attempt,
// and a runner with an allow-list claims only attempts of listed
// repositories (an attempt without a repository is outside every list).
func testClaimScope(t *testing.T, s store.Store) {
	f := newFixture(t, s)
	safe := f.attempt(t, func(a *store.Attempt) { a.Repo, a.ManagedOnly = "acme/app", true })
	got, err := s.AttemptGetByID(bg(), safe.ID, false)
	require.NoError(t, err)
	require.Equal(t, "acme/app", got.Repo)
	require.True(t, got.ManagedOnly)
	now := at(time.Minute)
	scoped := func(runner string, selfHosted bool, allowed ...string) (*store.Attempt, error) {
		return s.AttemptClaim(bg(), &store.AttemptClaimParams{
			Tenant: f.tenant, Pool: "default", RunnerID: runner, LeaseDigest: "d-" + runner, ClaimRequestID: "q-" + runner,
			Now: now, SelfHosted: selfHosted, AllowedRepos: allowed,
		})
	}
	_, err = scoped("self", true)
	require.ErrorIs(t, err, store.ErrNotFound, "self-hosted runner claimed a managed_only attempt")
	_, err = scoped("self-listed", true, "acme/app")
	require.ErrorIs(t, err, store.ErrNotFound, "an allow-list does not lift managed_only")
	_, err = scoped("managed-other", false, "acme/other")
	require.ErrorIs(t, err, store.ErrNotFound, "claimed outside the allow-list")
	a, err := scoped("managed-listed", false, "acme/other", "acme/app")
	require.NoError(t, err)
	require.Equal(t, safe.ID, a.ID)

	plain := f.attempt(t, func(a *store.Attempt) { a.Repo = "acme/app" })
	noRepo := f.attempt(t, nil)
	_, err = scoped("self-other", true, "acme/web")
	require.ErrorIs(t, err, store.ErrNotFound, "an attempt without a repository is outside every allow-list")
	a, err = scoped("self-app", true, "acme/app")
	require.NoError(t, err)
	require.Equal(t, plain.ID, a.ID)
	a, err = scoped("unrestricted", true)
	require.NoError(t, err)
	require.Equal(t, noRepo.ID, a.ID)
}
