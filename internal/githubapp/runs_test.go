package githubapp_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/github"
	"github.com/jobplane/jobplane/internal/github/fakegithub"
	"github.com/jobplane/jobplane/internal/githubapp"
	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/server"
	"github.com/jobplane/jobplane/internal/source/tickets"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// Pull-request runs against real stores, a real definitions repository and
// the fake GitHub.

var prDefinitions = map[string]string{
	"jobs/ci.yaml": `name: ci
run:
  command: ["true"]
leases:
  - key: "schema-migration:prod"
on:
  pull_request:
    types: [opened, synchronize, ready_for_review]
`,
	"jobs/preview.yaml": `name: preview
run:
  command: ["true"]
connectors: {}
on:
  pull_request:
    types: [opened]
    drafts: true
`,
	"jobs/nightly.yaml": "name: nightly\nrun:\n  command: [\"true\"]\n",
	"groups.yaml":       "groups: {}\n",
	"policies/github.yaml": `rules:
  - id: pr-ci
    jobs: [ci]
    users: [github]
    when: 'request.source.event == "pull_request" && request.source.head_sha != ""'
  - id: preview-trusted
    jobs: [preview]
    users: [github]
    forks: full
    when: 'request.source.repo == "acme/app"'
`,
}

type prEnv struct {
	t     *testing.T
	st    store.Store
	clock *clock.Fake
	svc   *control.Service
	gh    *githubapp.Service
	fake  *fakegithub.Fake
	app   *github.App
	sha   map[string]string // repo → head commit
	dirs  map[string]string // repo → its git directory
}

func newPREnv(t *testing.T, st store.Store) *prEnv {
	t.Helper()
	fc := clock.NewFake(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	repo := t.TempDir()
	_, err := gitsync.InitRepo(repo, "main", prDefinitions, "init")
	require.NoError(t, err)
	defs, err := server.OpenDefinitions(repo, map[string]string{"prod": "main"})
	require.NoError(t, err)
	svc, gh := wire(t, control.Config{Store: st, Clock: fc, Definitions: defs}, githubapp.Config{})
	key := fakegithub.Key(t, 0)
	f := fakegithub.New(t, fakegithub.Options{AppID: 9, PublicKey: &key.PublicKey, Clock: fc})
	perms := github.Permissions{"metadata": "read", "checks": "write", "contents": "read", "pull_requests": "read"}
	f.AddInstallation(1, "acme", perms)
	f.AddInstallation(2, "globex", perms)
	e := &prEnv{t: t, st: st, clock: fc, svc: svc, gh: gh, fake: f, sha: map[string]string{}, dirs: map[string]string{}}
	for inst, name := range map[int64]string{1: "acme/app", 2: "globex/svc"} {
		dir, sha := fakegithub.InitRepo(t, map[string]string{"README": name})
		f.AddRepo(inst, name[len(name)-3:], dir)
		e.sha[name], e.dirs[name] = sha, dir
	}
	e.app, err = github.New(github.Config{AppID: 9, PrivateKey: key, BaseURL: f.URL, Clock: fc})
	require.NoError(t, err)
	for inst := range []int64{1, 2} {
		e.deliver(fakegithub.NewDelivery("installation", f.InstallationPayload("created", int64(inst+1))))
	}
	return e
}

func (e *prEnv) deliver(d fakegithub.Delivery) githubapp.Outcome {
	e.t.Helper()
	out, err := e.gh.HandleDelivery(context.Background(), githubapp.Delivery{ID: d.GUID, Event: d.Event, Body: d.Body})
	require.NoError(e.t, err)
	return out
}

func (e *prEnv) pr(inst int64, repo string, action string, mod func(*fakegithub.PullRequest)) fakegithub.Delivery {
	pr := fakegithub.PullRequest{Installation: inst, Repo: repo, Number: 7, Action: action, HeadSHA: e.sha[repo], Sender: "dev"}
	if mod != nil {
		mod(&pr)
	}
	return fakegithub.NewDelivery("pull_request", e.fake.PullRequestPayload(pr))
}

func (e *prEnv) tenant(inst int64) string {
	e.t.Helper()
	in, err := e.st.GitHubInstallationGet(context.Background(), inst)
	require.NoError(e.t, err)
	return in.Tenant
}

func (e *prEnv) runs(inst int64) []*control.RunView {
	e.t.Helper()
	runs, _, err := e.svc.ListRuns(context.Background(), principal.Actor{TenantID: e.tenant(inst)}, store.RunListParams{Limit: 100})
	require.NoError(e.t, err)
	return runs
}

func (e *prEnv) runner(inst int64, selfHosted bool, allowed ...string) *store.Runner {
	e.t.Helper()
	return e.runnerCaps(inst, selfHosted, store.CapIsolated, allowed...)
}

// runnerCaps is runner with the capabilities its executor states.
func (e *prEnv) runnerCaps(inst int64, selfHosted bool, caps store.Capabilities, allowed ...string) *store.Runner {
	e.t.Helper()
	now := e.clock.Now()
	if allowed == nil {
		allowed = []string{}
	}
	r := &store.Runner{ID: id.New(id.Runner, now), Tenant: e.tenant(inst), Pool: "default", Name: "r", Labels: []string{},
		PublicKey: protocol.EncodeKey(make([]byte, 32)), KeyFingerprint: "0000000000000000", Status: store.RunnerActive,
		SelfHosted: selfHosted, AllowedRepos: allowed, LastSeenAt: &now, CreatedAt: now, Capabilities: caps}
	require.NoError(e.t, e.st.InTx(context.Background(), func(tx store.Tx) error { return tx.RunnerCreate(context.Background(), r) }))
	return r
}

func (e *prEnv) claim(r *store.Runner) (*protocol.Assignment, error) {
	return e.svc.Claim(context.Background(), &authn.SignedCall{Runner: r}, &protocol.ClaimRequest{})
}

func (e *prEnv) dispatch() {
	e.t.Helper()
	_, err := e.gh.DispatchChecks(context.Background(), e.app, 50)
	require.NoError(e.t, err)
}

// push commits to repo and returns the new commit (a pull request's new
// head, say); e.sha keeps the first.
func (e *prEnv) push(repo string) string {
	e.t.Helper()
	return fakegithub.Commit(e.t, e.dirs[repo], map[string]string{"README": e.clock.Now().String() + repo})
}

func sourceMap(t *testing.T, r *store.Run) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.Source, &m))
	return m
}

func TestPullRequestRequestsRunsOnceWithCheckRuns(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newPREnv(t, st)
		d := e.pr(1, "acme/app", "opened", nil)
		require.Equal(t, githubapp.Processed, e.deliver(d))
		runs := e.runs(1)
		require.Len(t, runs, 2, "ci and preview match opened; nightly has no trigger")
		byJob := map[string]*store.Run{}
		for _, v := range runs {
			byJob[v.Run.Job] = v.Run
		}
		ci := byJob["ci"]
		require.Equal(t, store.RunQueued, ci.State)
		require.Equal(t, githubapp.Actor, ci.Actor)
		require.Equal(t, "github:"+d.GUID+":ci", ci.IdempotencyKey)
		src := sourceMap(t, ci)
		require.Equal(t, "github", src["kind"])
		require.Equal(t, "pull_request", src["event"])
		require.Equal(t, "acme/app", src["repo"])
		require.Equal(t, e.sha["acme/app"], src["head_sha"])
		require.Equal(t, false, src["fork"])
		require.Equal(t, false, src["draft"])
		require.Equal(t, "dev", src["sender"])
		require.EqualValues(t, 7, src["pr"])
		require.EqualValues(t, 1, src["installation"])
		var spec control.Spec
		require.NoError(t, json.Unmarshal(ci.Spec, &spec))
		require.Equal(t, e.sha["acme/app"], spec.Env["JOBPLANE_GITHUB_SHA"], "pinned to the exact head commit")
		require.Equal(t, "acme/app", spec.Repo)
		require.False(t, spec.SafeMode)
		require.Empty(t, e.runs(2), "the other installation's tenant gets nothing")

		// Redelivery (same GUID) and a concurrent-looking second copy: no new run.
		require.Equal(t, githubapp.Duplicate, e.deliver(d))
		require.Len(t, e.runs(1), 2)

		// Check Runs: queued, then in_progress at claim, completed at result.
		e.dispatch()
		crs := e.fake.CheckRuns("acme/app")
		require.Len(t, crs, 2)
		for _, cr := range crs {
			require.Equal(t, github.CheckQueued, cr.Status)
			require.Equal(t, e.sha["acme/app"], cr.HeadSHA)
		}
		rn := e.runner(1, false)
		asg, err := e.claim(rn)
		require.NoError(t, err)
		require.NotNil(t, asg)
		e.dispatch()
		status := func(runID string) github.CheckRun {
			for _, cr := range e.fake.CheckRuns("acme/app") {
				if cr.ExternalID == runID {
					return cr
				}
			}
			t.Fatalf("no check run for %s", runID)
			return github.CheckRun{}
		}
		require.Equal(t, github.CheckInProgress, status(asg.RunID).Status)
		call := &authn.SignedCall{Runner: rn, Run: asg.RunID, Attempt: asg.AttemptID, Lease: asg.Lease.Token}
		_, err = e.svc.Result(context.Background(), call, &protocol.ResultRequest{Outcome: "failed", ExitCode: 3, Summary: "3 tests failed"})
		require.NoError(t, err)
		e.dispatch()
		cr := status(asg.RunID)
		require.Equal(t, github.CheckCompleted, cr.Status)
		require.Equal(t, github.ConclusionFailure, cr.Conclusion)
		require.NotNil(t, cr.Output)
		require.Contains(t, cr.Output.Summary, "3 tests failed")

		// The other run is cancelled by its requester's admin: cancelled.
		other := byJob["ci"].ID
		if other == asg.RunID {
			other = byJob["preview"].ID
		}
		_, err = e.svc.CancelRun(context.Background(), principal.Actor{TenantID: e.tenant(1), Name: "admin", Admin: true}, other)
		require.NoError(t, err)
		e.dispatch()
		require.Equal(t, github.ConclusionCancelled, status(other).Conclusion)

		// A new push is a new delivery: new runs.
		require.Equal(t, githubapp.Processed, e.deliver(e.pr(1, "acme/app", "synchronize", nil)))
		require.Len(t, e.runs(1), 3, "synchronize triggers ci only")
		// Closed is not acted on and writes nothing.
		require.Equal(t, githubapp.Ignored, e.deliver(e.pr(1, "acme/app", "closed", nil)))
	})
}

func TestPullRequestDraftsAndForks(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newPREnv(t, st)
		e.deliver(e.pr(1, "acme/app", "opened", func(p *fakegithub.PullRequest) { p.Draft = true }))
		runs := e.runs(1)
		require.Len(t, runs, 1, "a draft requests only the job that opted in")
		require.Equal(t, "preview", runs[0].Run.Job)
		require.Equal(t, true, sourceMap(t, runs[0].Run)["draft"])

		// A fork's pull request: ci runs in safe mode; preview's rule lifts it.
		e.deliver(e.pr(1, "acme/app", "opened", func(p *fakegithub.PullRequest) { p.HeadRepo = "mallory/app"; p.Number = 8 }))
		var ci, preview *store.Run
		for _, v := range e.runs(1) {
			if sourceMap(t, v.Run)["pr"] == float64(8) {
				if v.Run.Job == "ci" {
					ci = v.Run
				} else {
					preview = v.Run
				}
			}
		}
		require.NotNil(t, ci)
		require.NotNil(t, preview)
		require.Equal(t, true, sourceMap(t, ci)["fork"])
		var spec control.Spec
		require.NoError(t, json.Unmarshal(ci.Spec, &spec))
		require.True(t, spec.SafeMode)
		require.Empty(t, spec.Connectors)
		require.JSONEq(t, `{}`, string(ci.Grants))
		var pspec control.Spec
		require.NoError(t, json.Unmarshal(preview.Spec, &pspec))
		require.False(t, pspec.SafeMode, "forks: full lifts safe mode")

		// The ci attempt is for managed runners only: a self-hosted runner of
		// the same tenant never gets it, a managed one does.
		selfHosted := e.runner(1, true)
		for {
			asg, err := e.claim(selfHosted)
			require.NoError(t, err)
			if asg == nil {
				break
			}
			require.NotEqual(t, ci.ID, asg.RunID, "a fork's run reached a self-hosted runner")
		}
		// Nor does a managed runner whose jobs could reach its key.
		exposed := e.runnerCaps(1, false, 0)
		for {
			asg, err := e.claim(exposed)
			require.NoError(t, err)
			if asg == nil {
				break
			}
			require.NotEqual(t, ci.ID, asg.RunID, "a fork's run reached a runner that is not isolated")
		}
		asg, err := e.claim(e.runner(1, false))
		require.NoError(t, err)
		require.NotNil(t, asg)
		require.Equal(t, ci.ID, asg.RunID)
	})
}

func TestPullRequestAllowListAndTenants(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newPREnv(t, st)
		e.deliver(e.pr(2, "globex/svc", "synchronize", nil))
		require.Len(t, e.runs(2), 1)
		// Installation 1's runners: none may take installation 2's work.
		a := e.runner(1, false)
		aSelf := e.runner(1, true, "acme/app")
		for _, r := range []*store.Runner{a, aSelf} {
			asg, err := e.claim(r)
			require.NoError(t, err)
			require.Nil(t, asg)
		}
		// Installation 2's self-hosted runner with another repository in its
		// allow-list does not get it; one listing it does.
		other := e.runner(2, true, "globex/other")
		asg, err := e.claim(other)
		require.NoError(t, err)
		require.Nil(t, asg)
		listed := e.runner(2, true, "globex/svc")
		asg, err = e.claim(listed)
		require.NoError(t, err)
		require.NotNil(t, asg)
	})
}

func TestGitHubInstallationSuspendedRefusesRunsAndClaims(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newPREnv(t, st)
		rn := e.runner(1, false)
		e.deliver(fakegithub.NewDelivery("installation", e.fake.InstallationPayload("suspend", 1)))
		_, err := e.claim(rn)
		require.ErrorIs(t, err, protocol.ErrInstallationSuspended)
		actor := principal.Actor{TenantID: e.tenant(1), Name: "admin", Admin: true}
		_, _, err = e.svc.RequestRun(context.Background(), actor, &protocol.RunRequest{Job: "nightly", Channel: "prod"})
		require.ErrorIs(t, err, protocol.ErrInstallationSuspended)
		var pe *protocol.Error
		require.True(t, errors.As(err, &pe))
		require.Equal(t, protocol.CodeInstallationSuspended, pe.Code)
		// A delivery queued before the suspension requests nothing.
		require.Equal(t, githubapp.Processed, e.deliver(e.pr(1, "acme/app", "opened", nil)))
		require.Empty(t, e.runs(1))

		e.deliver(fakegithub.NewDelivery("installation", e.fake.InstallationPayload("unsuspend", 1)))
		_, err = e.claim(rn)
		require.NoError(t, err)
		e.deliver(fakegithub.NewDelivery("installation", e.fake.InstallationPayload("deleted", 1)))
		_, err = e.claim(rn)
		require.ErrorIs(t, err, protocol.ErrInstallationDeleted)
		_, _, err = e.svc.RequestRun(context.Background(), actor, &protocol.RunRequest{Job: "nightly", Channel: "prod"})
		require.ErrorIs(t, err, protocol.ErrInstallationDeleted)
		// The other installation is untouched.
		_, err = e.claim(e.runner(2, false))
		require.NoError(t, err)
	})
}

// TestMT1TenantsNeverCross is acceptance case MT1: a runner of tenant A
// polls 10,000 times while only tenant B has work, both tenants' jobs use
// the lease key schema-migration:prod; A claims nothing of B's, and the
// lease key is independent per tenant.
func TestMT1TenantsNeverCross(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newPREnv(t, st)
		e.deliver(e.pr(2, "globex/svc", "synchronize", nil))
		bRuns := e.runs(2)
		require.Len(t, bRuns, 1)
		a := e.runner(1, false)
		claims := 0
		for range 10_000 {
			asg, err := e.claim(a)
			require.NoError(t, err)
			if asg != nil {
				claims++
			}
		}
		require.Zero(t, claims)
		// The check against the database: no attempt was ever leased to
		// A's runner, and B's attempt is still queued, never touched.
		leased, err := st.AttemptListLeasedByRunner(context.Background(), a.ID)
		require.NoError(t, err)
		require.Empty(t, leased)
		atts, err := st.AttemptListByRun(context.Background(), bRuns[0].Run.ID)
		require.NoError(t, err)
		require.Len(t, atts, 1)
		require.Equal(t, store.AttemptQueued, atts[0].State)
		require.Empty(t, atts[0].RunnerID)

		// B's runner takes B's run and holds schema-migration:prod in B.
		bAsg, err := e.claim(e.runner(2, false))
		require.NoError(t, err)
		require.NotNil(t, bAsg)
		require.Len(t, bAsg.Leases, 1)
		require.Equal(t, "schema-migration:prod", bAsg.Leases[0].Key)
		// A's run of the same key is not blocked by B's hold.
		e.deliver(e.pr(1, "acme/app", "synchronize", nil))
		aAsg, err := e.claim(a)
		require.NoError(t, err)
		require.NotNil(t, aAsg, "tenant B's hold blocked tenant A")
		require.Len(t, aAsg.Leases, 1)
		require.Equal(t, "schema-migration:prod", aAsg.Leases[0].Key)
		for inst, runID := range map[int64]string{1: aAsg.RunID, 2: bAsg.RunID} {
			holds, err := st.LeaseList(context.Background(), e.tenant(inst), "")
			require.NoError(t, err)
			require.Len(t, holds, 1)
			require.Equal(t, runID, holds[0].RunID)
		}
	})
}

func TestQueuedRunExplainsMissingRunner(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newPREnv(t, st)
		e.runner(1, true) // self-hosted, online, all repositories
		e.deliver(e.pr(1, "acme/app", "synchronize", func(p *fakegithub.PullRequest) { p.HeadRepo = "mallory/app" }))
		var ci *control.RunView
		for _, v := range e.runs(1) {
			if v.Run.Job == "ci" {
				ci = v
			}
		}
		require.NotNil(t, ci)
		require.Equal(t, "runner: none of the 1 online runners is eligible (needs pool default, a managed runner (safe mode), access to acme/app, an isolated runner (safe mode: pull request from a fork))", ci.Run.WaitingFor)
		v, err := e.svc.GetRun(context.Background(), principal.Actor{TenantID: e.tenant(1)}, ci.Run.ID)
		require.NoError(t, err)
		require.Equal(t, ci.Run.WaitingFor, v.Run.WaitingFor)
		// Written straight to the store, as another server would: the
		// cached runner list shows it once it is a second old.
		e.runner(1, false)
		v, err = e.svc.GetRun(context.Background(), principal.Actor{TenantID: e.tenant(1)}, ci.Run.ID)
		require.NoError(t, err)
		require.NotEmpty(t, v.Run.WaitingFor, "within a second, the list is the cached one")
		e.clock.Advance(time.Second)
		v, err = e.svc.GetRun(context.Background(), principal.Actor{TenantID: e.tenant(1)}, ci.Run.ID)
		require.NoError(t, err)
		require.Empty(t, v.Run.WaitingFor, "an eligible runner is online")
	})
}

// stubCatalogs gives some installations their own definitions.
type stubCatalogs map[int64]control.Catalog

func (s stubCatalogs) TenantCatalog(_ context.Context, in *store.GitHubInstallation) (control.Catalog, error) {
	return s[in.ID], nil
}

// ownDefinitions is an installation's .jobplane: a job "own" on pull
// requests and a policy that lets anyone run anything.
func ownDefinitions(t *testing.T) control.Catalog {
	t.Helper()
	repo := t.TempDir()
	_, err := gitsync.InitRepo(repo, "main", map[string]string{
		"jobs/own.yaml":   "name: own\nrun:\n  command: [\"true\"]\non: {pull_request: {types: [opened]}}\n",
		"groups.yaml":     "groups: {}\n",
		"policies/p.yaml": "rules:\n  - id: any\n    jobs: [\"*\"]\n    users: [github, alice]\n",
	}, "tenant definitions")
	require.NoError(t, err)
	defs, err := server.OpenDefinitions(repo, map[string]string{"prod": "main"})
	require.NoError(t, err)
	own, err := defs.Resolve(context.Background(), "prod", "")
	require.NoError(t, err)
	return own
}

func TestTenantDefinitionsReplaceTheServers(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		own := ownDefinitions(t)

		e := newPREnv(t, st)
		e.svc, e.gh = wire(t, control.Config{Store: st, Clock: e.clock, Definitions: serverDefs(t, e)},
			githubapp.Config{Catalogs: stubCatalogs{1: own}})
		e.deliver(e.pr(1, "acme/app", "opened", nil))
		runs := e.runs(1)
		require.Len(t, runs, 1)
		require.Equal(t, "own", runs[0].Run.Job)
		require.Equal(t, own.Commit(), runs[0].Run.Commit, "pinned to the tenant's definitions commit")
		// Handed out under the policies that admitted it, the tenant's:
		// the server's allow no job "own".
		asg, err := e.claim(e.runner(1, false))
		require.NoError(t, err)
		require.NotNil(t, asg, "the re-check at dispatch reads the tenant's definitions")
		require.Equal(t, runs[0].Run.ID, asg.RunID)
		e.deliver(e.pr(2, "globex/svc", "opened", nil))
		require.Len(t, e.runs(2), 2, "the other tenant keeps the server's definitions (ci, preview)")

		alice := principal.Actor{TenantID: e.tenant(1), Name: "alice", Kind: "user"}
		v, _, err := e.svc.RequestRun(context.Background(), alice, &protocol.RunRequest{Job: "own", Channel: "prod"})
		require.NoError(t, err)
		require.Equal(t, own.Commit(), v.Run.Commit)
		_, _, err = e.svc.RequestRun(context.Background(), alice, &protocol.RunRequest{Job: "nightly", Channel: "prod"})
		require.ErrorIs(t, err, protocol.ErrUnknownJob, "the server's jobs are not the tenant's")
		_, _, err = e.svc.RequestRun(context.Background(), alice, &protocol.RunRequest{Job: "own", Channel: "staging"})
		require.ErrorIs(t, err, protocol.ErrUnknownChannel)
	})
}

// serverDefs reopens the server's definitions of a prEnv.
func serverDefs(t *testing.T, _ *prEnv) control.Definitions {
	t.Helper()
	repo := t.TempDir()
	_, err := gitsync.InitRepo(repo, "main", prDefinitions, "init")
	require.NoError(t, err)
	defs, err := server.OpenDefinitions(repo, map[string]string{"prod": "main"})
	require.NoError(t, err)
	return defs
}

func TestPullRequestDeniedRunFailsItsCheck(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newPREnv(t, st)
		require.Equal(t, githubapp.Processed, e.deliver(e.pr(2, "globex/svc", "opened", nil)))
		var preview *store.Run
		for _, v := range e.runs(2) {
			if v.Run.Job == "preview" {
				preview = v.Run
			}
		}
		require.NotNil(t, preview)
		require.Equal(t, store.RunDenied, preview.State, "preview-trusted allows acme/app only")
		e.dispatch()
		for _, cr := range e.fake.CheckRuns("globex/svc") {
			if cr.ExternalID == preview.ID {
				require.Equal(t, github.CheckCompleted, cr.Status)
				require.Equal(t, github.ConclusionFailure, cr.Conclusion)
				require.Equal(t, "Denied by policy", cr.Output.Title)
				return
			}
		}
		t.Fatal("no Check Run for the denied run")
	})
}

// TestPullRequestConcurrentCopies: copies of one delivery processed at once
// (GitHub's redelivery racing the original, two replicas) request each
// job's run and open its Check Run exactly once.
func TestPullRequestConcurrentCopies(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newPREnv(t, st)
		d := e.pr(1, "acme/app", "opened", nil)
		_, other := wire(t, control.Config{Store: st, Clock: e.clock, Definitions: serverDefs(t, e)}, githubapp.Config{})
		const copies = 8
		errs := make(chan error, copies)
		outcomes := make(chan githubapp.Outcome, copies)
		for i := range copies {
			svc := e.gh
			if i%2 == 1 {
				svc = other
			}
			go func() {
				out, err := svc.HandleDelivery(context.Background(), githubapp.Delivery{ID: d.GUID, Event: d.Event, Body: d.Body})
				outcomes <- out
				errs <- err
			}()
		}
		processed := 0
		for range copies {
			err := <-errs
			if err != nil {
				// A copy that lost a race may be told to retry; GitHub's
				// redelivery (or another copy) completes the delivery.
				require.ErrorIs(t, err, protocol.ErrRetry)
			}
			if <-outcomes == githubapp.Processed {
				processed++
			}
		}
		require.Equal(t, 1, processed, "the delivery is recorded once")
		require.Equal(t, githubapp.Duplicate, e.deliver(d))
		runs := e.runs(1)
		require.Len(t, runs, 2, "one run per matching job")
		for _, v := range runs {
			ups, err := st.GitHubCheckUpdateList(context.Background(), v.Run.ID)
			require.NoError(t, err)
			require.Len(t, ups, 1, "one Check Run opened per run")
		}
		e.dispatch()
		require.Len(t, e.fake.CheckRuns("acme/app"), 2)
	})
}

// appSources serves GitHub archives straight from App.Tarball (the server
// re-packs them; this test only needs the verified bytes).
type appSources struct{ app *github.App }

func (a appSources) Archive(ctx context.Context, installation int64, repo, commit string, open func() io.Writer) error {
	rc, err := a.app.Tarball(ctx, installation, repo, commit)
	if err != nil {
		return err
	}
	defer rc.Close()
	_, err = io.Copy(open(), rc)
	return err
}

// TestGitHubSourceBroker: a managed runner's source ticket of a GitHub run
// is redeemed with the archive of the exact head commit; a self-hosted
// runner is told the repository and commit only; a repository the
// installation lost is refused.
func TestGitHubSourceBroker(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newPREnv(t, st)
		e.svc, e.gh = wire(t, control.Config{Store: st, Clock: e.clock, Definitions: serverDefs(t, e)},
			githubapp.Config{Sources: appSources{e.app}})
		srcs := tickets.New(tickets.Config{Store: st, Clock: e.clock, Runs: e.svc, Hosted: e.gh})
		e.deliver(e.pr(1, "acme/app", "opened", nil))
		sha := e.sha["acme/app"]
		ctx := context.Background()

		self := e.runner(1, true, "acme/app")
		asg, err := e.claim(self)
		require.NoError(t, err)
		require.NotNil(t, asg)
		require.NotNil(t, asg.Source)
		require.Equal(t, "acme/app", asg.Source.Repo)
		require.Equal(t, sha, asg.Source.Commit)
		ans, err := srcs.AttemptSource(ctx, &authn.SignedCall{Runner: self, Run: asg.RunID, Attempt: asg.AttemptID, Lease: asg.Lease.Token})
		require.NoError(t, err)
		require.Equal(t, protocol.SourceKindDescriptor, ans.Kind)
		require.Empty(t, ans.URL, "a self-hosted runner gets no ticket")
		require.Equal(t, sha, ans.Commit)

		managed := e.runner(1, false)
		asg, err = e.claim(managed)
		require.NoError(t, err)
		require.NotNil(t, asg)
		call := &authn.SignedCall{Runner: managed, Run: asg.RunID, Attempt: asg.AttemptID, Lease: asg.Lease.Token}
		ans, err = srcs.AttemptSource(ctx, call)
		require.NoError(t, err)
		require.Equal(t, protocol.SourceKindTicket, ans.Kind)
		ticket := ans.URL[strings.LastIndex(ans.URL, "/")+1:]
		var buf bytes.Buffer
		require.NoError(t, srcs.RedeemSource(ctx, ticket, func() io.Writer { return &buf }))
		zr, err := gzip.NewReader(&buf)
		require.NoError(t, err)
		h, err := tar.NewReader(zr).Next()
		require.NoError(t, err)
		require.Equal(t, sha, h.PAXRecords["comment"], "the archive of the exact head commit")
		require.ErrorIs(t, srcs.RedeemSource(ctx, ticket, func() io.Writer { return io.Discard }), protocol.ErrTicketExpired, "single use")

		// The installation loses the repository: a fresh ticket is refused
		// at redemption, before GitHub is asked.
		e.deliver(fakegithub.NewDelivery("installation_repositories", e.fake.InstallationRepositoriesPayload(1, nil, []string{"app"})))
		ans, err = srcs.AttemptSource(ctx, call)
		require.NoError(t, err)
		ticket = ans.URL[strings.LastIndex(ans.URL, "/")+1:]
		opened := false
		err = srcs.RedeemSource(ctx, ticket, func() io.Writer { opened = true; return io.Discard })
		require.ErrorIs(t, err, protocol.ErrForbidden)
		require.False(t, opened)
	})
}

// agedCatalogs is a githubapp.CatalogsWithin that records the maxAge each
// read allowed.
type agedCatalogs struct {
	stubCatalogs
	mu   sync.Mutex
	ages []time.Duration
}

func (a *agedCatalogs) TenantCatalogWithin(ctx context.Context, in *store.GitHubInstallation, maxAge time.Duration) (control.Catalog, error) {
	a.mu.Lock()
	a.ages = append(a.ages, maxAge)
	a.mu.Unlock()
	return a.TenantCatalog(ctx, in)
}

// The re-check at hand-out reads the tenant's definitions inside the claim's
// transaction, which other runners' claims share: it takes the copy this
// replica read last, however old, and never waits for GitHub to confirm the
// head (which a read with a bounded maxAge would do once that age passed).
func TestDispatchCatalogTakesTheLastReadCopy(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		own := ownDefinitions(t)

		e := newPREnv(t, st)
		cats := &agedCatalogs{stubCatalogs: stubCatalogs{1: own}}
		e.svc, e.gh = wire(t, control.Config{Store: st, Clock: e.clock, Definitions: serverDefs(t, e)},
			githubapp.Config{Catalogs: cats})
		e.deliver(e.pr(1, "acme/app", "opened", nil))
		require.Len(t, e.runs(1), 1)
		cats.mu.Lock()
		cats.ages = nil
		cats.mu.Unlock()
		e.clock.Advance(time.Hour)
		asg, err := e.claim(e.runner(1, false))
		require.NoError(t, err)
		require.NotNil(t, asg)
		cats.mu.Lock()
		defer cats.mu.Unlock()
		require.NotEmpty(t, cats.ages, "the hand-out re-checked against the tenant's definitions")
		for _, age := range cats.ages {
			require.Greater(t, age, 24*365*time.Hour, "a read in the claim's transaction would ask GitHub once the copy is older than %s", age)
		}
	})
}
