package githubapp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/github"
	"github.com/jobplane/jobplane/internal/github/fakegithub"
	"github.com/jobplane/jobplane/internal/githubapp"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

type checksBundle struct {
	st    store.Store
	clock *clock.Fake
	svc   *githubapp.Service
	fake  *fakegithub.Fake
	app   *github.App
	shaA  string
	shaB  string
}

func setupChecks(t *testing.T, st store.Store) *checksBundle {
	t.Helper()
	fc := clock.NewFake(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	_, svc := wire(t, control.Config{Store: st, Clock: fc}, githubapp.Config{})
	key := fakegithub.Key(t, 0)
	f := fakegithub.New(t, fakegithub.Options{AppID: 9, PublicKey: &key.PublicKey, Clock: fc})
	perms := github.Permissions{"metadata": "read", "checks": "write", "contents": "read"}
	f.AddInstallation(1, "acme", perms)
	f.AddInstallation(2, "globex", perms)
	dirA, shaA := fakegithub.InitRepo(t, map[string]string{"a": "1"})
	dirB, shaB := fakegithub.InitRepo(t, map[string]string{"b": "2"})
	f.AddRepo(1, "app", dirA)
	f.AddRepo(2, "svc", dirB)
	app, err := github.New(github.Config{AppID: 9, PrivateKey: key, BaseURL: f.URL, Clock: fc})
	require.NoError(t, err)
	return &checksBundle{st: st, clock: fc, svc: svc, fake: f, app: app, shaA: shaA, shaB: shaB}
}

func (b *checksBundle) open(t *testing.T, runID string, inst int64, repo, sha string) {
	t.Helper()
	require.NoError(t, b.st.InTx(context.Background(), func(tx store.Tx) error {
		return b.svc.OpenCheck(context.Background(), tx, githubapp.Check{RunID: runID, Tenant: "tnt_" + repo,
			Installation: inst, Repo: repo, HeadSHA: sha, Name: "jobplane / test"}, "Queued", "Waiting for a runner")
	}))
}

func (b *checksBundle) record(t *testing.T, runID string, state store.RunState, summary string) {
	t.Helper()
	require.NoError(t, b.st.InTx(context.Background(), func(tx store.Tx) error {
		return b.svc.RecordCheck(context.Background(), tx, &store.Run{ID: runID, State: state}, string(state), summary)
	}))
}

func (b *checksBundle) dispatch(t *testing.T) int {
	t.Helper()
	n, err := b.svc.DispatchChecks(context.Background(), b.app, 10)
	require.NoError(t, err)
	return n
}

func TestGitHubCheckLifecycle(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		b := setupChecks(t, st)
		b.open(t, "run_1", 1, "acme/app", b.shaA)
		require.Equal(t, 1, b.dispatch(t))
		crs := b.fake.CheckRuns("acme/app")
		require.Len(t, crs, 1)
		require.Equal(t, github.CheckQueued, crs[0].Status)
		require.Equal(t, "run_1", crs[0].ExternalID)
		require.Equal(t, b.shaA, crs[0].HeadSHA)

		b.record(t, "run_1", store.RunRunning, "Running on runner r1")
		require.Equal(t, 1, b.dispatch(t))
		b.record(t, "run_1", store.RunSucceeded, "exit 0 in 3s")
		require.Equal(t, 1, b.dispatch(t))
		before := len(b.fake.Requests())
		require.Equal(t, 0, b.dispatch(t), "nothing left to send")
		require.Len(t, b.fake.Requests(), before)

		crs = b.fake.CheckRuns("acme/app")
		require.Len(t, crs, 1)
		require.Equal(t, github.ConclusionSuccess, crs[0].Conclusion)
		require.Equal(t, "exit 0 in 3s", crs[0].Output.Summary)
		require.Equal(t, []string{"queued", "in_progress", "completed"}, b.fake.CheckRunHistory(crs[0].ID))

		// A run without a Check Run records nothing.
		b.record(t, "run_other", store.RunRunning, "x")
		require.Equal(t, 0, b.dispatch(t))
	})
}

// A GitHub outage delays Check Run updates but never blocks the run's
// transitions nor loses an update.
func TestGitHubCheckOutage(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		b := setupChecks(t, st)
		b.fake.SetDown(true)
		b.open(t, "run_1", 1, "acme/app", b.shaA)
		require.Equal(t, 0, b.dispatch(t))
		b.record(t, "run_1", store.RunRunning, "running")
		b.record(t, "run_1", store.RunFailed, "exit 3")
		require.Equal(t, 0, b.dispatch(t), "held after the failed attempt")
		for range 3 { // retried with backoff while GitHub stays down
			b.clock.Advance(11 * time.Minute)
			require.Equal(t, 0, b.dispatch(t))
		}
		updates, err := st.GitHubCheckUpdateList(context.Background(), "run_1")
		require.NoError(t, err)
		require.Len(t, updates, 3)
		for _, u := range updates {
			require.Nil(t, u.SentAt)
		}
		require.Contains(t, updates[2].LastError, "unavailable")
		require.Empty(t, b.fake.CheckRuns("acme/app"))

		b.fake.SetDown(false)
		b.clock.Advance(11 * time.Minute)
		require.Equal(t, 1, b.dispatch(t))
		crs := b.fake.CheckRuns("acme/app")
		require.Len(t, crs, 1)
		require.Equal(t, github.ConclusionFailure, crs[0].Conclusion)
		require.Equal(t, "exit 3", crs[0].Output.Summary)
		updates, err = st.GitHubCheckUpdateList(context.Background(), "run_1")
		require.NoError(t, err)
		for _, u := range updates {
			require.NotNil(t, u.SentAt)
		}
	})
}

// A create whose answer was lost is found by its external ID, not repeated.
func TestGitHubCheckLostCreate(t *testing.T) {
	t.Parallel()
	b := setupChecks(t, testdb.SQLite(t))
	b.open(t, "run_1", 1, "acme/app", b.shaA)
	_, err := b.app.CreateCheckRun(context.Background(), 1, "acme/app",
		github.CheckRunCreate{Name: "jobplane / test", HeadSHA: b.shaA, ExternalID: "run_1", Status: github.CheckQueued})
	require.NoError(t, err)
	b.record(t, "run_1", store.RunRunning, "running")
	require.Equal(t, 1, b.dispatch(t))
	crs := b.fake.CheckRuns("acme/app")
	require.Len(t, crs, 1)
	require.Equal(t, github.CheckInProgress, crs[0].Status)
	cr, err := b.st.GitHubCheckRunGet(context.Background(), "run_1")
	require.NoError(t, err)
	require.Equal(t, crs[0].ID, cr.CheckRunID)
}

// A permanent refusal is kept with its reason and not retried; other
// installations' Check Runs are unaffected and never cross.
func TestGitHubCheckRefusedAndIsolated(t *testing.T) {
	t.Parallel()
	b := setupChecks(t, testdb.SQLite(t))
	b.open(t, "run_a", 1, "acme/app", b.shaA)
	b.open(t, "run_b", 2, "globex/svc", b.shaB)
	b.fake.SetSuspended(1, true)
	require.Equal(t, 1, b.dispatch(t))
	updates, err := b.st.GitHubCheckUpdateList(context.Background(), "run_a")
	require.NoError(t, err)
	require.NotNil(t, updates[0].SentAt)
	require.Contains(t, updates[0].LastError, "403")
	b.clock.Advance(time.Hour)
	require.Equal(t, 0, b.dispatch(t))

	require.Len(t, b.fake.CheckRuns("globex/svc"), 1)
	for _, r := range b.fake.Requests() {
		switch {
		case strings.Contains(r.Path, "/repos/acme/"), r.Path == "/app/installations/1/access_tokens":
			require.Equal(t, int64(1), r.Installation, r.Path)
		case strings.Contains(r.Path, "/repos/globex/"), r.Path == "/app/installations/2/access_tokens":
			require.Equal(t, int64(2), r.Installation, r.Path)
		}
	}
}

func TestCheckState(t *testing.T) {
	t.Parallel()
	cases := map[store.RunState][2]string{
		store.RunPendingApproval: {"queued", ""}, store.RunQueued: {"queued", ""}, store.RunRunning: {"in_progress", ""},
		store.RunSucceeded: {"completed", "success"}, store.RunFailed: {"completed", "failure"},
		store.RunCancelled: {"completed", "cancelled"}, store.RunTimedOut: {"completed", "timed_out"},
		store.RunDenied: {"completed", "failure"}, store.RunRejected: {"completed", "cancelled"},
		store.RunExpired: {"completed", "timed_out"}, store.RunState("new_state"): {"completed", "failure"},
	}
	for st, want := range cases {
		s, c := githubapp.CheckState(st)
		require.Equal(t, want, [2]string{s, c}, "CheckState(%s)", st)
	}
}
