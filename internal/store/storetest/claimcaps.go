package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/store"
)

// testClaimCapabilities: a runner claims an attempt only when its
// capabilities include every one the attempt needs, in each claim
// statement (one attempt, one with its run, several), and the older
// attempt it cannot run does not hold back a newer one it can.
func testClaimCapabilities(t *testing.T, s store.Store) {
	f := newFixture(t, s)
	image := f.attempt(t, func(a *store.Attempt) { a.Needs = store.CapImages })
	isolated := f.attempt(t, func(a *store.Attempt) { a.Needs = store.CapIsolated })
	both := f.attempt(t, func(a *store.Attempt) { a.Needs = store.CapImages | store.CapIsolated })
	got, err := s.AttemptGetByID(bg(), both.ID, false)
	require.NoError(t, err)
	require.Equal(t, store.CapImages|store.CapIsolated, got.Needs)
	now := at(time.Minute)
	params := func(runner string, caps store.Capabilities) *store.AttemptClaimParams {
		return &store.AttemptClaimParams{Tenant: f.tenant, Pool: "default", RunnerID: runner, LeaseDigest: "d-" + runner,
			ClaimRequestID: "q-" + runner, Now: now, Capabilities: caps}
	}

	_, err = s.AttemptClaim(bg(), params("process", 0))
	require.ErrorIs(t, err, store.ErrNotFound, "a runner without capabilities claimed an attempt that needs some")
	_, _, err = s.AttemptClaimRun(bg(), params("process-run", 0))
	require.ErrorIs(t, err, store.ErrNotFound)
	cs, err := s.AttemptClaimRuns(bg(), params("process-many", 0), []store.ClaimSlot{{LeaseDigest: "x1"}, {LeaseDigest: "x2"}})
	require.NoError(t, err)
	require.Empty(t, cs)

	// A process runner with a job user: isolated, no images.
	a, _, err := s.AttemptClaimRun(bg(), params("job-user", store.CapIsolated))
	require.NoError(t, err)
	require.Equal(t, isolated.ID, a.ID, "the isolated runner skips the image attempt ahead of it")
	_, err = s.AttemptClaim(bg(), params("job-user-again", store.CapIsolated))
	require.ErrorIs(t, err, store.ErrNotFound)

	// Images without isolation takes the image attempt only.
	a, err = s.AttemptClaim(bg(), params("images", store.CapImages))
	require.NoError(t, err)
	require.Equal(t, image.ID, a.ID)

	plain := f.attempt(t, nil)
	cs, err = s.AttemptClaimRuns(bg(), params("container", store.CapImages|store.CapIsolated),
		[]store.ClaimSlot{{LeaseDigest: "c1", ClaimRequestID: "c1"}, {LeaseDigest: "c2", ClaimRequestID: "c2"}, {LeaseDigest: "c3", ClaimRequestID: "c3"}})
	require.NoError(t, err)
	require.Len(t, cs, 2)
	require.Equal(t, both.ID, cs[0].Attempt.ID)
	require.Equal(t, plain.ID, cs[1].Attempt.ID, "a capable runner takes attempts that need nothing too")
}
