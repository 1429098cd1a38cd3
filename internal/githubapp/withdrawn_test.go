package githubapp_test

import (
	"context"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/server"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/actionsoidc"
	"github.com/jobplane/jobplane/internal/github"
	"github.com/jobplane/jobplane/internal/github/fakegithub"
	"github.com/jobplane/jobplane/internal/githubapp"
	"github.com/jobplane/jobplane/internal/githubapp/actions"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// withdraw takes repo away from the installation on the fake GitHub and in
// the store, without the run-ending of the removal delivery: the state a
// claim sees when the removal committed after the runs it ended were
// listed, or when the repository list was replaced otherwise.
func (e *prEnv) withdraw(inst int64, repo string) {
	e.t.Helper()
	ctx := store.WithSystem(context.Background(), "test")
	e.fake.RemoveRepo(inst, repo[len(repo)-3:])
	repos, err := e.st.GitHubRepoList(ctx, inst)
	require.NoError(e.t, err)
	for _, r := range repos {
		if r.FullName == repo {
			require.NoError(e.t, e.st.InTx(ctx, func(tx store.Tx) error { return tx.GitHubRepoDelete(ctx, inst, r.RepoID) }))
		}
	}
}

// requireWithdrawn checks that a run ended cancelled with the reason on its
// timeline, its Check Run update dropped rather than sent.
func (e *prEnv) requireWithdrawn(inst int64, runID, reason string) {
	e.t.Helper()
	v, err := e.svc.GetRun(context.Background(), principal.Actor{TenantID: e.tenant(inst)}, runID)
	require.NoError(e.t, err)
	require.Equal(e.t, store.RunCancelled, v.Run.State)
	found := false
	for _, t := range v.Timeline {
		if t.Reason == reason {
			found = true
		}
	}
	require.True(e.t, found, "reason %q on the timeline: %+v", reason, v.Timeline)
}

// TestClaimRechecksTheRepositoryIsGranted: a repository the installation
// stopped granting between a run's request and its claim is not handed
// out; the run ends cancelled with the reason, audited, and the runner
// gets the next eligible attempt (here none), while the other
// installation's run is unaffected.
func TestClaimRechecksTheRepositoryIsGranted(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newPREnv(t, st)
		e.deliver(e.pr(1, "acme/app", "opened", nil))
		e.deliver(e.pr(2, "globex/svc", "opened", nil))
		ci := func(inst int64) string {
			for _, v := range e.runs(inst) {
				if v.Run.Job == "ci" {
					return v.Run.ID
				}
			}
			t.Fatalf("no ci run of installation %d", inst)
			return ""
		}
		runA, runB := ci(1), ci(2)
		e.withdraw(1, "acme/app")

		asg, err := e.claim(e.runner(1, false))
		require.NoError(t, err)
		if asg != nil {
			require.NotEqual(t, runA, asg.RunID)
		}
		e.requireWithdrawn(1, runA, "GitHub installation 1 no longer grants acme/app")
		asg, err = e.claim(e.runner(2, false))
		require.NoError(t, err)
		require.NotNil(t, asg)
		require.Equal(t, runB, asg.RunID, "the other installation's run is handed out")

		evs, err := st.AuditList(store.WithSystem(context.Background(), "test"), &store.AuditListParams{Tenant: e.tenant(1), Limit: 1000})
		require.NoError(t, err)
		audited := false
		for _, ev := range evs {
			if ev.Action == "attempt.cancelled" && ev.Subject == runA {
				audited = true
				require.Contains(t, string(ev.Details), "no longer grants acme/app")
			}
		}
		require.True(t, audited)
		// The Check Run's final state is dropped, not sent to a repository
		// GitHub no longer lets the installation write.
		e.dispatch()
		for _, cr := range e.fake.CheckRuns("acme/app") {
			if cr.ExternalID == runA {
				require.NotEqual(t, github.CheckCompleted, cr.Status)
			}
		}
	})
}

// TestActionsDispatchAndExchangeRecheckTheRepository: a repository taken
// away before the dispatch is never dispatched to; one taken away between
// the dispatch and the exchange refuses the exchange and ends the run at
// once, rather than when its callback time runs out.
func TestActionsDispatchAndExchangeRecheckTheRepository(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newActionsEnv(t, st, "2")
		e.deliver(e.pr(1, "acme/app", "opened", nil))
		e.deliver(e.pr(2, "globex/svc", "opened", nil))
		runA, runB := e.runs(1)[0].Run.ID, e.runs(2)[0].Run.ID

		// Before the dispatch.
		e.withdraw(1, "acme/app")
		e.dispatchActions()
		e.dispatchActions()
		for _, d := range e.fake.Dispatches() {
			require.NotEqual(t, "acme/app", d.Repo, "never dispatched in a repository no longer granted")
		}
		e.requireWithdrawn(1, runA, "GitHub installation 1 no longer grants acme/app")

		// Between the dispatch and the exchange.
		d := e.dispatchFor("globex/svc")
		e.withdraw(2, "globex/svc")
		_, err := e.exchange(e.fake.OIDCToken(e.fake.StartWorkflowRun(d), actionsoidc.DefaultAudience), d.Inputs[actions.InputAttempt])
		require.ErrorIs(t, err, protocol.ErrForbidden)
		e.requireWithdrawn(2, runB, "GitHub installation 2 no longer grants globex/svc")
		e.dispatchActions()
		require.Len(t, e.fake.Dispatches(), 1, "no retry of a run that ended")
	})
}

// TestPullRequestOfAnInstallationFirstSeenInIt: an installation whose
// installation delivery never arrived (the App was installed before the
// webhook was configured) is bound by its first pull_request delivery,
// and that delivery's repository is the one thing known to be granted: its
// runs are requested and handed out. A repository of another account
// delivered by it later is still refused.
func TestPullRequestOfAnInstallationFirstSeenInIt(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newPREnv(t, st)
		e.fake.AddInstallation(3, "initech", github.Permissions{"metadata": "read", "checks": "write", "contents": "read", "pull_requests": "read"})
		dir, sha := fakegithub.InitRepo(t, map[string]string{"README": "initech/app"})
		e.fake.AddRepo(3, "app", dir)
		e.sha["initech/app"], e.dirs["initech/app"] = sha, dir
		require.Equal(t, githubapp.Processed, e.deliver(e.pr(3, "initech/app", "opened", nil)))
		runs := e.runs(3)
		require.NotEmpty(t, runs, "the delivering installation's own repository")
		for _, v := range runs {
			if v.Run.Job == "ci" {
				require.Equal(t, store.RunQueued, v.Run.State)
			}
		}
		asg, err := e.claim(e.runner(3, false))
		require.NoError(t, err)
		require.NotNil(t, asg, "the claim's re-check finds the repository granted")

		require.Equal(t, githubapp.Processed, e.deliver(e.pr(3, "globex/svc", "opened", nil)))
		require.Len(t, e.runs(3), len(runs), "another account's repository is refused")
	})
}

// TestPullRequestOvertakingItsRepositoryAddition: a pull_request delivery
// for a repository of the installation's account that its deliveries have
// not listed yet (the installation_repositories delivery adding it comes
// later: GitHub does not order deliveries) is checked with GitHub, which
// grants it, and requests its runs; the addition arriving afterwards
// changes nothing. A repository of the account GitHub does not grant, and
// one of another account (never asked about), are refused; GitHub down
// fails the delivery so that it can be redelivered.
func TestPullRequestOvertakingItsRepositoryAddition(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newPREnv(t, st)
		e.svc, e.gh = wire(t, control.Config{Store: st, Clock: e.clock, Definitions: serverDefs(t, e)},
			githubapp.Config{Access: server.RepoAccess(e.app)})
		dir, sha := fakegithub.InitRepo(t, map[string]string{"README": "acme/new"})
		e.fake.AddRepo(1, "new", dir)
		e.sha["acme/new"], e.dirs["acme/new"] = sha, dir

		e.fake.SetDown(true)
		_, err := e.gh.HandleDelivery(context.Background(), githubapp.Delivery{ID: "d-down", Event: "pull_request",
			Body: e.pr(1, "acme/new", "opened", nil).Body})
		require.ErrorIs(t, err, protocol.ErrUnavailable, "GitHub could not say: not refused, not recorded")
		e.fake.SetDown(false)

		require.Equal(t, githubapp.Processed, e.deliver(e.pr(1, "acme/new", "opened", nil)))
		var ci *store.Run
		for _, v := range e.runs(1) {
			if v.Run.Job == "ci" {
				ci = v.Run
			}
		}
		require.NotNil(t, ci, "granted on GitHub: requested")
		asg, err := e.claim(e.runner(1, false))
		require.NoError(t, err)
		require.NotNil(t, asg, "and handed out: the claim's re-check finds it granted")
		require.Equal(t, ci.ID, asg.RunID)
		n := len(e.runs(1))
		e.deliver(fakegithub.NewDelivery("installation_repositories", e.fake.InstallationRepositoriesPayload(1, []string{"new"}, nil)))
		require.Len(t, e.runs(1), n)

		// Not granted on GitHub, and another account's: refused.
		// (acme/ghost is granted to another installation of the account.)
		e.fake.AddInstallation(3, "acme", github.Permissions{"metadata": "read", "checks": "write", "contents": "read", "pull_requests": "read"})
		gdir, gsha := fakegithub.InitRepo(t, map[string]string{"README": "acme/ghost"})
		e.fake.AddRepo(3, "ghost", gdir)
		e.sha["acme/ghost"] = gsha
		require.Equal(t, githubapp.Processed, e.deliver(e.pr(1, "acme/ghost", "opened", nil)))
		require.Equal(t, githubapp.Processed, e.deliver(e.pr(1, "globex/svc", "opened", nil)))
		require.Len(t, e.runs(1), n)
		require.Empty(t, e.runs(2))
	})
}
