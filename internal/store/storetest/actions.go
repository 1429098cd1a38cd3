package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/store"
)

func testActionsDispatches(t *testing.T, s store.Store) {
	ctx := bg()
	f := newFixture(t, s)
	at := func(d time.Duration) *time.Time { v := t0.Add(d); return &v }

	// Only queued, due, unblocked attempts of the Actions pool without a
	// dispatch are listed.
	a1 := f.attempt(t, func(a *store.Attempt) { a.Pool = store.ActionsPool; a.Repo = "acme/app" })
	a2 := f.attempt(t, func(a *store.Attempt) { a.Pool = store.ActionsPool; a.CreatedAt = t0.Add(time.Second) })
	f.attempt(t, nil) // another pool
	f.attempt(t, func(a *store.Attempt) { a.Pool = store.ActionsPool; a.NotBefore = t0.Add(time.Hour) })
	f.attempt(t, func(a *store.Attempt) { a.Pool = store.ActionsPool; a.BlockedOn = "k" })
	f.attempt(t, func(a *store.Attempt) { a.Pool = store.ActionsPool; a.State = store.AttemptExpired })
	list, err := s.ActionsAttemptsUndispatched(ctx, &t0, 10)
	require.NoError(t, err)
	require.Equal(t, []string{a1.ID, a2.ID}, attemptIDs(list))
	list, err = s.ActionsAttemptsUndispatched(ctx, &t0, 1)
	require.NoError(t, err)
	require.Len(t, list, 1)

	d := &store.ActionsDispatch{AttemptID: a1.ID, RunID: a1.RunID, Tenant: f.tenant, InstallationID: 42, Repo: "acme/app",
		Commit: "0123456789012345678901234567890123456789", Workflow: "jobplane.yml", State: store.DispatchPending,
		NextAttemptAt: t0, CreatedAt: t0}
	require.NoError(t, s.InTx(ctx, func(tx store.Tx) error { return tx.ActionsDispatchCreate(ctx, d) }))
	require.ErrorIs(t, s.ActionsDispatchCreate(ctx, &store.ActionsDispatch{AttemptID: a1.ID, RunID: a1.RunID, Tenant: f.tenant,
		State: store.DispatchPending}), store.ErrAlreadyExists)
	got, err := s.ActionsDispatchGet(ctx, a1.ID)
	require.NoError(t, err)
	requireEqual(t, d, got)
	_, err = s.ActionsDispatchGet(ctx, a2.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	list, err = s.ActionsAttemptsUndispatched(ctx, &t0, 10)
	require.NoError(t, err)
	require.Equal(t, []string{a2.ID}, attemptIDs(list), "a dispatched attempt is not listed again")

	// Due: pending and dispatched ones whose time came.
	due, err := s.ActionsDispatchListDue(ctx, at(-time.Second), 10)
	require.NoError(t, err)
	require.Empty(t, due)
	due, err = s.ActionsDispatchListDue(ctx, &t0, 10)
	require.NoError(t, err)
	require.Len(t, due, 1)

	d.RepoID, d.OwnerID, d.Ref, d.State, d.Tries = 7, 10, "refs/heads/main", store.DispatchSent, 1
	d.NextAttemptAt, d.DispatchedAt = t0.Add(10*time.Minute), at(time.Second)
	require.NoError(t, s.ActionsDispatchUpdate(ctx, d))
	got, err = s.ActionsDispatchGet(ctx, a1.ID)
	require.NoError(t, err)
	requireEqual(t, d, got)
	due, err = s.ActionsDispatchListDue(ctx, at(time.Minute), 10)
	require.NoError(t, err)
	require.Empty(t, due)
	due, err = s.ActionsDispatchListDue(ctx, at(10*time.Minute), 10)
	require.NoError(t, err)
	require.Len(t, due, 1)

	// Exchanged: no longer due; the workflow run and the token are unique.
	d.State, d.ExchangedAt, d.WorkflowRunID, d.WorkflowRunAttempt, d.TokenID = store.DispatchExchanged, at(2*time.Second), 555, 1, "jti-1"
	require.NoError(t, s.ActionsDispatchUpdate(ctx, d))
	due, err = s.ActionsDispatchListDue(ctx, at(time.Hour), 10)
	require.NoError(t, err)
	require.Empty(t, due)
	d2 := &store.ActionsDispatch{AttemptID: a2.ID, RunID: a2.RunID, Tenant: f.tenant, InstallationID: 42, Repo: "acme/app",
		Commit: d.Commit, Workflow: "jobplane.yml", State: store.DispatchSent, NextAttemptAt: t0, RepoID: 7}
	require.NoError(t, s.ActionsDispatchCreate(ctx, d2))
	d2.State, d2.WorkflowRunID, d2.WorkflowRunAttempt, d2.TokenID = store.DispatchExchanged, 555, 1, "jti-2"
	require.ErrorIs(t, s.ActionsDispatchUpdate(ctx, d2), store.ErrAlreadyExists, "the same workflow run twice")
	d2.WorkflowRunID, d2.TokenID = 556, "jti-1"
	require.ErrorIs(t, s.ActionsDispatchUpdate(ctx, d2), store.ErrAlreadyExists, "the same token twice")
	d2.WorkflowRunAttempt, d2.WorkflowRunID, d2.TokenID = 2, 555, "jti-2"
	require.NoError(t, s.ActionsDispatchUpdate(ctx, d2), "a rerun of the workflow run is a new run attempt")
	require.ErrorIs(t, s.ActionsDispatchUpdate(ctx, &store.ActionsDispatch{AttemptID: "att_none", State: "x"}), store.ErrNotFound)
}

func attemptIDs(as []*store.Attempt) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.ID
	}
	return out
}
