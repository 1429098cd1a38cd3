package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/store"
)

func testGitHubInstallations(t *testing.T, s store.Store) {
	ctx := bg()
	in := &store.GitHubInstallation{ID: 42, Tenant: "tnt_a", Account: "acme", AccountType: "Organization",
		RepositorySelection: "selected", Status: store.GitHubInstallationActive, CreatedAt: t0, UpdatedAt: t0}
	require.NoError(t, s.InTx(ctx, func(tx store.Tx) error { return tx.GitHubInstallationPut(ctx, in) }))
	got, err := s.GitHubInstallationGet(ctx, 42)
	require.NoError(t, err)
	requireEqual(t, in, got)
	got, err = s.GitHubInstallationGetByTenant(ctx, "tnt_a")
	require.NoError(t, err)
	require.Equal(t, int64(42), got.ID)
	_, err = s.GitHubInstallationGet(ctx, 43)
	require.ErrorIs(t, err, store.ErrNotFound)

	// An update changes status and account, never the tenant.
	upd := &store.GitHubInstallation{ID: 42, Tenant: "tnt_other", Account: "acme-renamed", AccountType: "Organization",
		RepositorySelection: "all", Status: store.GitHubInstallationSuspended, UpdatedAt: t0.Add(time.Hour)}
	require.NoError(t, s.GitHubInstallationPut(ctx, upd))
	require.Equal(t, "tnt_a", upd.Tenant)
	require.Equal(t, t0, upd.CreatedAt)
	got, err = s.GitHubInstallationGet(ctx, 42)
	require.NoError(t, err)
	require.Equal(t, store.GitHubInstallationSuspended, got.Status)
	require.Equal(t, "acme-renamed", got.Account)
	require.Equal(t, t0.Add(time.Hour), got.UpdatedAt)

	// A second installation cannot share the tenant.
	err = s.GitHubInstallationPut(ctx, &store.GitHubInstallation{ID: 7, Tenant: "tnt_a", Status: store.GitHubInstallationActive})
	require.ErrorIs(t, err, store.ErrAlreadyExists)

	// Repositories.
	require.NoError(t, s.GitHubRepoPut(ctx, &store.GitHubRepo{InstallationID: 42, RepoID: 2, FullName: "acme/b", Private: true, AddedAt: t0}))
	require.NoError(t, s.GitHubRepoPut(ctx, &store.GitHubRepo{InstallationID: 42, RepoID: 1, FullName: "acme/a", AddedAt: t0}))
	require.NoError(t, s.GitHubRepoPut(ctx, &store.GitHubRepo{InstallationID: 42, RepoID: 1, FullName: "acme/a2", Private: true}))
	repos, err := s.GitHubRepoList(ctx, 42)
	require.NoError(t, err)
	requireEqual(t, []*store.GitHubRepo{
		{InstallationID: 42, RepoID: 1, FullName: "acme/a2", Private: true, AddedAt: t0},
		{InstallationID: 42, RepoID: 2, FullName: "acme/b", Private: true, AddedAt: t0},
	}, repos)
	require.NoError(t, s.GitHubRepoDelete(ctx, 42, 2))
	require.ErrorIs(t, s.GitHubRepoDelete(ctx, 42, 2), store.ErrNotFound)
	repos, err = s.GitHubRepoList(ctx, 42)
	require.NoError(t, err)
	require.Len(t, repos, 1)
	// A repository of an unknown installation is refused.
	require.Error(t, s.GitHubRepoPut(ctx, &store.GitHubRepo{InstallationID: 999, RepoID: 1, FullName: "x/y"}))
}

func testGitHubDeliveries(t *testing.T, s store.Store) {
	ctx := bg()
	d := &store.GitHubDelivery{ID: "guid-1", Event: "installation", Action: "created", InstallationID: 42, ProcessedAt: t0}
	require.NoError(t, s.GitHubDeliveryRecord(ctx, d))
	require.ErrorIs(t, s.GitHubDeliveryRecord(ctx, &store.GitHubDelivery{ID: "guid-1", Event: "x"}), store.ErrAlreadyExists)
	got, err := s.GitHubDeliveryGet(ctx, "guid-1")
	require.NoError(t, err)
	requireEqual(t, d, got)

	// A record rolled back with its transaction is not a record.
	errBoom := errorString("boom")
	err = s.InTx(ctx, func(tx store.Tx) error {
		require.NoError(t, tx.GitHubDeliveryRecord(ctx, &store.GitHubDelivery{ID: "guid-2", Event: "installation", ProcessedAt: t0}))
		return errBoom
	})
	require.ErrorIs(t, err, errBoom)
	_, err = s.GitHubDeliveryGet(ctx, "guid-2")
	require.ErrorIs(t, err, store.ErrNotFound)

	// Concurrent records of one delivery: exactly one wins.
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.InTx(ctx, func(tx store.Tx) error {
				return tx.GitHubDeliveryRecord(ctx, &store.GitHubDelivery{ID: "guid-3", Event: "installation", ProcessedAt: t0})
			})
			if err == nil {
				mu.Lock()
				wins++
				mu.Unlock()
			} else {
				require.ErrorIs(t, err, store.ErrAlreadyExists)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 1, wins)

	require.NoError(t, s.GitHubDeliveryRecord(ctx, &store.GitHubDelivery{ID: "guid-old", Event: "x", ProcessedAt: t0.Add(-8 * 24 * time.Hour)}))
	n, err := s.GitHubDeliveryPurge(ctx, t0.Add(-7*24*time.Hour))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, err = s.GitHubDeliveryGet(ctx, "guid-1")
	require.NoError(t, err)
}

type errorString string

func (e errorString) Error() string { return string(e) }

func testGitHubCheckOutbox(t *testing.T, s store.Store) {
	ctx := bg()
	for _, run := range []string{"run_a", "run_b"} {
		c := &store.GitHubCheckRun{RunID: run, Tenant: "tnt_a", InstallationID: 42, Repo: "acme/app",
			HeadSHA: "0123456789012345678901234567890123456789", Name: "jobplane / " + run, CreatedAt: t0}
		require.NoError(t, s.GitHubCheckRunCreate(ctx, c))
	}
	require.ErrorIs(t, s.GitHubCheckRunCreate(ctx, &store.GitHubCheckRun{RunID: "run_a"}), store.ErrAlreadyExists)
	require.NoError(t, s.GitHubCheckRunSetID(ctx, "run_a", 1001))
	c, err := s.GitHubCheckRunGet(ctx, "run_a")
	require.NoError(t, err)
	require.Equal(t, int64(1001), c.CheckRunID)
	require.ErrorIs(t, s.GitHubCheckRunSetID(ctx, "run_zz", 1), store.ErrNotFound)

	add := func(run, status string, at time.Duration) *store.GitHubCheckUpdate {
		u := &store.GitHubCheckUpdate{RunID: run, Tenant: "tnt_a", Status: status, Title: status, Summary: "s",
			At: t0.Add(at), NextAttemptAt: t0.Add(at), CreatedAt: t0.Add(at)}
		require.NoError(t, s.InTx(ctx, func(tx store.Tx) error { return tx.GitHubCheckUpdateAppend(ctx, u) }))
		return u
	}
	a1 := add("run_a", "queued", 0)
	a2 := add("run_a", "in_progress", time.Second)
	b1 := add("run_b", "queued", 2*time.Second)
	require.Less(t, a1.Seq, a2.Seq)

	// Nothing is due before its time.
	got, err := s.GitHubCheckClaim(ctx, &store.GitHubCheckClaimParams{Now: at(-time.Second), Limit: 10, Hold: time.Minute})
	require.NoError(t, err)
	require.Empty(t, got)

	// Each due run yields its newest unsent update, oldest run first.
	got, err = s.GitHubCheckClaim(ctx, &store.GitHubCheckClaimParams{Now: at(time.Minute), Limit: 1, Hold: time.Minute})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, a2.Seq, got[0].Seq)
	// Claimed entries are held: a second claimer gets the other run only.
	got, err = s.GitHubCheckClaim(ctx, &store.GitHubCheckClaimParams{Now: at(time.Minute), Limit: 10, Hold: time.Minute})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, b1.Seq, got[0].Seq)

	// A failed send is counted and scheduled.
	require.NoError(t, s.GitHubCheckRetry(ctx, "run_b", b1.Seq, t0.Add(5*time.Minute), "github: unavailable"))
	// A newer update arrives while run_a's send is in flight; marking the
	// sent one leaves it unsent.
	a3 := add("run_a", "completed", 90*time.Second)
	require.NoError(t, s.GitHubCheckMarkSent(ctx, "run_a", a2.Seq, "", at(91*time.Second)))
	list, err := s.GitHubCheckUpdateList(ctx, "run_a")
	require.NoError(t, err)
	require.Len(t, list, 3)
	require.NotNil(t, list[0].SentAt)
	require.NotNil(t, list[1].SentAt)
	require.Nil(t, list[2].SentAt)

	got, err = s.GitHubCheckClaim(ctx, &store.GitHubCheckClaimParams{Now: at(2 * time.Minute), Limit: 10, Hold: time.Minute})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, a3.Seq, got[0].Seq)
	// Given up (a permanent refusal): marked with its error, never resent.
	require.NoError(t, s.GitHubCheckMarkSent(ctx, "run_a", a3.Seq, "github: 422", at(2*time.Minute)))

	got, err = s.GitHubCheckClaim(ctx, &store.GitHubCheckClaimParams{Now: at(6 * time.Minute), Limit: 10, Hold: time.Minute})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, b1.Seq, got[0].Seq)
	require.Equal(t, 1, got[0].Attempts)
	require.Equal(t, "github: unavailable", got[0].LastError)

	// Concurrent claimers never take the same run twice.
	for i := range 6 {
		add("run_b", "in_progress", time.Duration(10+i)*time.Minute)
	}
	add("run_a", "completed", 10*time.Minute)
	var mu sync.Mutex
	var wg sync.WaitGroup
	seen := map[string]int{}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := s.GitHubCheckClaim(ctx, &store.GitHubCheckClaimParams{Now: at(time.Hour), Limit: 10, Hold: time.Minute})
			require.NoError(t, err)
			mu.Lock()
			for _, u := range got {
				seen[u.RunID]++
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	require.Equal(t, map[string]int{"run_a": 1, "run_b": 1}, seen)
}

func testGitHubOpenCheckRuns(t *testing.T, s store.Store) {
	ctx := bg()
	f := newFixture(t, s)
	for _, id := range []int64{9, 8} {
		require.NoError(t, s.GitHubInstallationPut(ctx, &store.GitHubInstallation{ID: id, Tenant: "tnt_" + string(rune('a'+id)),
			Account: "acme", AccountType: "Organization", RepositorySelection: "selected", Status: store.GitHubInstallationActive}))
	}
	ins, err := s.GitHubInstallationList(ctx)
	require.NoError(t, err)
	require.Len(t, ins, 2)
	require.Equal(t, []int64{8, 9}, []int64{ins[0].ID, ins[1].ID})

	open := map[string]bool{}
	for i, st := range []store.RunState{store.RunQueued, store.RunRunning, store.RunPendingApproval, store.RunSucceeded, store.RunCancelled, store.RunSuperseded} {
		r := f.run(t, func(r *store.Run) { r.State = st })
		back, err := s.RunGetByID(ctx, r.ID, false)
		require.NoError(t, err)
		require.Equal(t, st, back.State, "every state round-trips")
		inst := int64(9)
		if i == 1 {
			inst = 8 // another installation's run is never listed
		}
		require.NoError(t, s.GitHubCheckRunCreate(ctx, &store.GitHubCheckRun{RunID: r.ID, Tenant: f.tenant, InstallationID: inst,
			Repo: "acme/app", HeadSHA: "0123456789012345678901234567890123456789", Name: "jobplane / x", CreatedAt: t0}))
		if inst == 9 && !st.Terminal() {
			open[r.ID] = true
		}
	}
	list, err := s.GitHubCheckRunListOpen(ctx, 9)
	require.NoError(t, err)
	got := map[string]bool{}
	for _, c := range list {
		require.Equal(t, int64(9), c.InstallationID)
		require.Equal(t, "acme/app", c.Repo)
		got[c.RunID] = true
	}
	require.Equal(t, open, got)
	list, err = s.GitHubCheckRunListOpen(ctx, 77)
	require.NoError(t, err)
	require.Empty(t, list)
}
