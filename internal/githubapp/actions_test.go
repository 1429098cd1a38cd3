package githubapp_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/actionsoidc"
	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/github"
	"github.com/jobplane/jobplane/internal/github/fakegithub"
	"github.com/jobplane/jobplane/internal/githubapp"
	"github.com/jobplane/jobplane/internal/githubapp/actions"
	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/server"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// The GitHub Actions compatibility mode against real stores, a real
// definitions repository and the fake GitHub (dispatch endpoint and OIDC
// issuer).

func actionsDefinitions(maxAttempts string) map[string]string {
	return map[string]string{
		"jobs/build.yaml": `name: build
run:
  command: ["make", "test"]
retries: {max_attempts: ` + maxAttempts + `, backoff: 0s}
executor: github-actions
workflow: jobplane.yml
on:
  pull_request:
    types: [opened, synchronize]
`,
		"groups.yaml": "groups: {}\n",
		"policies/github.yaml": `rules:
  - id: pr-build
    jobs: [build]
    users: [github]
`,
	}
}

type actionsEnv struct {
	*prEnv
	act *actions.Service
}

func newActionsEnv(t *testing.T, st store.Store, maxAttempts string, ghCfg ...githubapp.Config) *actionsEnv {
	t.Helper()
	fc := clock.NewFake(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	repo := t.TempDir()
	_, err := gitsync.InitRepo(repo, "main", actionsDefinitions(maxAttempts), "init")
	require.NoError(t, err)
	defs, err := server.OpenDefinitions(repo, map[string]string{"prod": "main"})
	require.NoError(t, err)
	key := fakegithub.Key(t, 0)
	f := fakegithub.New(t, fakegithub.Options{AppID: 9, PublicKey: &key.PublicKey, Clock: fc})
	app, err := github.New(github.Config{AppID: 9, PrivateKey: key, BaseURL: f.URL, Clock: fc})
	require.NoError(t, err)
	v, err := actionsoidc.New(actionsoidc.Config{Issuer: f.OIDCIssuer(), Clock: fc})
	require.NoError(t, err)
	var gc githubapp.Config
	if len(ghCfg) > 0 {
		gc = ghCfg[0]
	}
	svc, gh, act := wireActions(t, control.Config{Store: st, Clock: fc, Definitions: defs}, gc,
		actions.Config{Verifier: v, App: actions.Dispatcher{App: app}})
	perms := github.Permissions{"metadata": "read", "checks": "write", "contents": "read", "pull_requests": "read", "actions": "write"}
	f.AddInstallation(1, "acme", perms)
	f.AddInstallation(2, "globex", perms)
	e := &prEnv{t: t, st: st, clock: fc, svc: svc, gh: gh, fake: f, app: app, sha: map[string]string{}, dirs: map[string]string{}}
	for inst, name := range map[int64]string{1: "acme/app", 2: "globex/svc"} {
		dir, sha := fakegithub.InitRepo(t, map[string]string{"README": name})
		f.AddRepo(inst, name[len(name)-3:], dir)
		f.AddWorkflow(fakegithub.Workflow{Repo: name, File: "jobplane.yml",
			Inputs: []string{actions.InputRun, actions.InputAttempt, actions.InputCommit}})
		e.sha[name], e.dirs[name] = sha, dir
	}
	for _, inst := range []int64{1, 2} {
		e.deliver(fakegithub.NewDelivery("installation", f.InstallationPayload("created", inst)))
	}
	return &actionsEnv{e, act}
}

func (e *actionsEnv) dispatchActions() {
	e.t.Helper()
	_, err := e.act.Dispatch(context.Background())
	require.NoError(e.t, err)
}

func (e *actionsEnv) dispatchFor(repo string) fakegithub.Dispatch {
	e.t.Helper()
	var out []fakegithub.Dispatch
	for _, d := range e.fake.Dispatches() {
		if d.Repo == repo {
			out = append(out, d)
		}
	}
	require.NotEmpty(e.t, out, "no dispatch in %s", repo)
	return out[len(out)-1]
}

func newKey(t *testing.T) (string, ed25519.PrivateKey) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	return protocol.EncodeKey(pub), priv
}

func (e *actionsEnv) exchange(token, attempt string) (*protocol.ActionsExchangeResponse, error) {
	pub, _ := newKey(e.t)
	return e.act.Exchange(context.Background(), token, &protocol.ActionsExchangeRequest{AttemptID: attempt, PublicKey: pub})
}

func (e *actionsEnv) checkRun(repo, runID string) github.CheckRun {
	e.t.Helper()
	for _, cr := range e.fake.CheckRuns(repo) {
		if cr.ExternalID == runID {
			return cr
		}
	}
	e.t.Fatalf("no check run for %s", runID)
	return github.CheckRun{}
}

// TestActionsTwoInstallationsEndToEnd: each installation's run is
// dispatched in its own repository with its own narrowed token, the
// simulated workflows exchange and report, and the Check Runs complete.
func TestActionsTwoInstallationsEndToEnd(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newActionsEnv(t, st, "1")
		ctx := context.Background()
		e.deliver(e.pr(1, "acme/app", "opened", nil))
		e.deliver(e.pr(2, "globex/svc", "opened", nil))
		e.dispatchActions()
		ds := e.fake.Dispatches()
		require.Len(t, ds, 2)
		for _, d := range ds {
			inst := map[string]int64{"acme/app": 1, "globex/svc": 2}[d.Repo]
			require.Equal(t, inst, d.Installation, "dispatched with the repository's own installation's token")
			require.Equal(t, "main", d.Ref, "at the default branch, never a pull request's head")
			require.Equal(t, e.sha[d.Repo], d.Inputs[actions.InputCommit])
			require.NotEmpty(t, d.Inputs[actions.InputRun])
			require.NotEmpty(t, d.Inputs[actions.InputAttempt])
		}
		for _, r := range e.fake.Requests() {
			if r.Auth == "app" && r.TokenPermissions["actions"] != "" {
				require.Equal(t, github.Permissions{"actions": "write"}, r.TokenPermissions, "actions: write and nothing else")
				require.Len(t, r.TokenRepositories, 1, "narrowed to the one repository")
			}
		}
		// Another dispatch pass sends nothing more.
		e.dispatchActions()
		require.Len(t, e.fake.Dispatches(), 2)

		var other *store.Runner // the previous workflow's one-attempt runner
		for _, repo := range []string{"acme/app", "globex/svc"} {
			d := e.dispatchFor(repo)
			run := e.fake.StartWorkflowRun(d)
			pub, _ := newKey(t)
			resp, err := e.act.Exchange(ctx, e.fake.OIDCToken(run, actionsoidc.DefaultAudience),
				&protocol.ActionsExchangeRequest{AttemptID: d.Inputs[actions.InputAttempt], PublicKey: pub})
			require.NoError(t, err)
			asg := resp.Assignment
			require.Equal(t, d.Inputs[actions.InputRun], asg.RunID)
			require.Equal(t, d.Inputs[actions.InputAttempt], asg.AttemptID)
			require.Equal(t, []string{"make", "test"}, asg.Job.Command)
			require.Equal(t, e.sha[repo], asg.Job.Env["JOBPLANE_GITHUB_SHA"])
			rn, err := st.RunnerGetByID(ctx, resp.RunnerID, false)
			require.NoError(t, err)
			require.Equal(t, store.ActionsPool, rn.Pool)
			require.Equal(t, pub, rn.PublicKey)
			require.Equal(t, []string{repo}, rn.AllowedRepos)
			require.Equal(t, e.tenant(map[string]int64{"acme/app": 1, "globex/svc": 2}[repo]), rn.Tenant)

			// The credential renews and reports for its attempt, and claims
			// nothing else.
			call := &authn.SignedCall{Runner: rn, Run: asg.RunID, Attempt: asg.AttemptID, Lease: asg.Lease.Token}
			_, err = e.svc.Renew(ctx, call)
			require.NoError(t, err)
			if other != nil {
				// Another workflow's credential, even with this attempt's
				// lease token, acts on nothing here.
				_, err = e.svc.Renew(ctx, &authn.SignedCall{Runner: other, Run: asg.RunID, Attempt: asg.AttemptID, Lease: asg.Lease.Token})
				require.ErrorIs(t, err, protocol.ErrAttemptStale)
				_, err = e.svc.Result(ctx, &authn.SignedCall{Runner: other, Run: asg.RunID, Attempt: asg.AttemptID, Lease: asg.Lease.Token},
					&protocol.ResultRequest{Outcome: "failed", ExitCode: 1})
				require.ErrorIs(t, err, protocol.ErrAttemptStale)
			}
			other = rn
			_, err = e.svc.Claim(ctx, &authn.SignedCall{Runner: rn}, &protocol.ClaimRequest{})
			require.ErrorIs(t, err, protocol.ErrForbidden)
			e.dispatch()
			require.Equal(t, github.CheckInProgress, e.checkRun(repo, asg.RunID).Status)
			_, err = e.svc.Result(ctx, call, &protocol.ResultRequest{Outcome: "succeeded", Summary: "ok"})
			require.NoError(t, err)
			_, err = e.svc.Renew(ctx, call)
			require.ErrorIs(t, err, protocol.ErrAttemptStale, "the credential ends with its attempt")
			e.dispatch()
			cr := e.checkRun(repo, asg.RunID)
			require.Equal(t, github.CheckCompleted, cr.Status)
			require.Equal(t, github.ConclusionSuccess, cr.Conclusion)
		}
	})
}

// TestActionsJobOfAnInstallationsOwnDefinitions: an installation whose
// own definitions declare a job with executor: github-actions has it
// dispatched in its repository with the workflow those definitions name,
// while the other installation keeps the server's.
func TestActionsJobOfAnInstallationsOwnDefinitions(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		repo := t.TempDir()
		_, err := gitsync.InitRepo(repo, "main", map[string]string{
			"jobs/own.yaml": "name: own\nrun:\n  command: [\"./check.sh\"]\nexecutor: github-actions\nworkflow: own-ci.yaml\n" +
				"on: {pull_request: {types: [opened]}}\n",
			"groups.yaml":     "groups: {}\n",
			"policies/p.yaml": "rules:\n  - id: any\n    jobs: [\"*\"]\n    users: [github]\n",
		}, "tenant definitions")
		require.NoError(t, err)
		defs, err := server.OpenDefinitions(repo, map[string]string{"prod": "main"})
		require.NoError(t, err)
		own, err := defs.Resolve(context.Background(), "prod", "")
		require.NoError(t, err)
		e := newActionsEnv(t, st, "1", githubapp.Config{Catalogs: stubCatalogs{1: own}})
		e.fake.AddWorkflow(fakegithub.Workflow{Repo: "acme/app", File: "own-ci.yaml",
			Inputs: []string{actions.InputRun, actions.InputAttempt, actions.InputCommit}})
		e.deliver(e.pr(1, "acme/app", "opened", nil))
		e.deliver(e.pr(2, "globex/svc", "opened", nil))
		e.dispatchActions()
		d := e.dispatchFor("acme/app")
		require.Equal(t, "own-ci.yaml", d.Workflow)
		require.Equal(t, "jobplane.yml", e.dispatchFor("globex/svc").Workflow, "the server's definitions")
		resp, err := e.exchange(e.fake.OIDCToken(e.fake.StartWorkflowRun(d), actionsoidc.DefaultAudience), d.Inputs[actions.InputAttempt])
		require.NoError(t, err)
		require.Equal(t, "own", resp.Assignment.Job.Name)
		require.Equal(t, []string{"./check.sh"}, resp.Assignment.Job.Command)
		require.Equal(t, own.Commit(), e.runs(1)[0].Run.Commit, "pinned to the installation's definitions")
	})
}

// TestActionsForkPullRequestIsHandedOut: a fork's pull request is
// dispatched and exchanged like any other (docs/github.md), in safe mode:
// its attempt needs an isolated runner, which the one-attempt runner of
// the exchange does not state, and it is handed out all the same.
func TestActionsForkPullRequestIsHandedOut(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newActionsEnv(t, st, "1")
		e.deliver(e.pr(1, "acme/app", "opened", func(p *fakegithub.PullRequest) { p.HeadRepo = "mallory/app" }))
		run := e.runs(1)[0].Run
		spec, err := control.RunSpec(run)
		require.NoError(t, err)
		require.True(t, spec.SafeMode)
		e.dispatchActions()
		d := e.dispatchFor("acme/app")
		resp, err := e.exchange(e.fake.OIDCToken(e.fake.StartWorkflowRun(d), actionsoidc.DefaultAudience), d.Inputs[actions.InputAttempt])
		require.NoError(t, err)
		require.Equal(t, run.ID, resp.Assignment.RunID)
		require.Equal(t, store.RunRunning, e.runs(1)[0].Run.State)
	})
}

// TestActionsExchangeRefusals: every token or request that is not exactly
// the dispatched workflow run's is refused with its own code, and audited.
func TestActionsExchangeRefusals(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newActionsEnv(t, st, "1")
		e.deliver(e.pr(1, "acme/app", "opened", nil))
		e.deliver(e.pr(2, "globex/svc", "opened", nil))
		e.dispatchActions()
		dA, dB := e.dispatchFor("acme/app"), e.dispatchFor("globex/svc")
		attA := dA.Inputs[actions.InputAttempt]
		runA, runB := e.fake.StartWorkflowRun(dA), e.fake.StartWorkflowRun(dB)
		claims := func(mod func(map[string]any)) string {
			c := e.fake.OIDCClaims(runA, actionsoidc.DefaultAudience)
			mod(c)
			return e.fake.SignOIDC(c)
		}
		pubDER, err := x509.MarshalPKIXPublicKey(&e.fake.OIDCKey().PublicKey)
		require.NoError(t, err)
		now := e.clock.Now().Unix()
		cases := []struct {
			name, token, attempt string
			want                 *protocol.Error
		}{
			{"token of repo B for A's attempt", e.fake.OIDCToken(runB, actionsoidc.DefaultAudience), attA, protocol.ErrOIDCRepositoryMismatch},
			{"wrong audience", e.fake.OIDCToken(runA, "https://github.com/acme"), attA, protocol.ErrOIDCAudienceInvalid},
			{"wrong issuer", claims(func(c map[string]any) { c["iss"] = actionsoidc.DefaultIssuer }), attA, protocol.ErrOIDCIssuerInvalid},
			{"expired", claims(func(c map[string]any) { c["exp"] = now - 60 }), attA, protocol.ErrOIDCTokenExpired},
			{"alg none", noneToken(e.fake.OIDCClaims(runA, actionsoidc.DefaultAudience)), attA, protocol.ErrOIDCTokenInvalid},
			{"HS256", fakegithub.SignJWT(pubDER, jose.HS256, e.fake.OIDCKeyID(), e.fake.OIDCClaims(runA, actionsoidc.DefaultAudience)), attA, protocol.ErrOIDCTokenInvalid},
			{"workflow of another file", claims(func(c map[string]any) {
				c["workflow_ref"] = "acme/app/.github/workflows/evil.yml@refs/heads/main"
			}), attA, protocol.ErrOIDCWorkflowMismatch},
			{"workflow file named in another case", claims(func(c map[string]any) {
				c["workflow_ref"] = "acme/app/.github/workflows/Jobplane.yml@refs/heads/main"
			}), attA, protocol.ErrOIDCWorkflowMismatch},
			{"workflow at another ref", claims(func(c map[string]any) {
				c["workflow_ref"] = "acme/app/.github/workflows/jobplane.yml@refs/heads/pr-branch"
				c["ref"] = "refs/heads/pr-branch"
			}), attA, protocol.ErrOIDCWorkflowMismatch},
			{"event other than workflow_dispatch", claims(func(c map[string]any) { c["event_name"] = "pull_request_target" }), attA, protocol.ErrOIDCEventMismatch},
			{"owner of another account", claims(func(c map[string]any) { c["repository_owner_id"] = "20" }), attA, protocol.ErrOIDCRepositoryMismatch},
			{"attempt never dispatched", e.fake.OIDCToken(runA, actionsoidc.DefaultAudience), "att_00000000000000000000000000", protocol.ErrAttemptNotDispatched},
			{"not an attempt", e.fake.OIDCToken(runA, actionsoidc.DefaultAudience), "run_x", protocol.ErrAttemptNotDispatched},
		}
		for _, tc := range cases {
			_, err := e.exchange(tc.token, tc.attempt)
			require.ErrorIs(t, err, tc.want, tc.name)
		}
		// None of that leased anything; the right token does, once. GitHub
		// may spell the repository in another case than the dispatch did.
		good := claims(func(c map[string]any) {
			c["workflow_ref"] = "ACME/App/.github/workflows/jobplane.yml@refs/heads/main"
		})
		resp, err := e.exchange(good, attA)
		require.NoError(t, err)
		_, err = e.exchange(good, attA)
		require.ErrorIs(t, err, protocol.ErrOIDCTokenReplayed, "the same token again")
		_, err = e.exchange(e.fake.OIDCToken(runA, actionsoidc.DefaultAudience), attA)
		require.ErrorIs(t, err, protocol.ErrOIDCTokenReplayed, "another token of the same workflow run")
		_, err = e.exchange(e.fake.OIDCToken(e.fake.StartWorkflowRun(dA), actionsoidc.DefaultAudience), attA)
		require.ErrorIs(t, err, protocol.ErrAttemptNotDispatched, "a second workflow run for the same attempt")
		// The same workflow run cannot take B's attempt either.
		_, err = e.exchange(good, dB.Inputs[actions.InputAttempt])
		require.ErrorIs(t, err, protocol.ErrOIDCRepositoryMismatch)

		// An attempt that ended is not handed out again.
		rn, err := st.RunnerGetByID(context.Background(), resp.RunnerID, false)
		require.NoError(t, err)
		asg := resp.Assignment
		_, err = e.svc.Result(context.Background(), &authn.SignedCall{Runner: rn, Run: asg.RunID, Attempt: asg.AttemptID, Lease: asg.Lease.Token},
			&protocol.ResultRequest{Outcome: "failed", ExitCode: 1})
		require.NoError(t, err)
		_, err = e.exchange(e.fake.OIDCToken(e.fake.StartWorkflowRun(dA), actionsoidc.DefaultAudience), attA)
		require.ErrorIs(t, err, protocol.ErrAttemptNotDispatched)

		// B's attempt still takes B's token: nothing above touched it.
		_, err = e.exchange(e.fake.OIDCToken(runB, actionsoidc.DefaultAudience), dB.Inputs[actions.InputAttempt])
		require.NoError(t, err)

		// Refusals are audited in the attempt's tenant.
		evs, err := st.AuditList(store.WithSystem(context.Background(), "test"), &store.AuditListParams{Tenant: e.tenant(1), Limit: 1000})
		require.NoError(t, err)
		refused := 0
		for _, ev := range evs {
			if ev.Action == "actions.exchange_refused" {
				refused++
			}
		}
		require.GreaterOrEqual(t, refused, 10)
	})
}

// TestActionsDispatchOutcomes: 5xx is retried; a missing workflow (404) or
// permission (GitHub refuses the token) ends the attempt with the reason
// on the run's Check Run; a workflow that never calls back expires and is
// retried by the job's policy.
func TestActionsDispatchOutcomes(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newActionsEnv(t, st, "2")
		ctx := context.Background()

		// GitHub down: nothing dispatched, retried after the backoff.
		e.deliver(e.pr(1, "acme/app", "opened", nil))
		e.fake.SetDown(true)
		e.dispatchActions()
		require.Empty(t, e.fake.Dispatches())
		e.fake.SetDown(false)
		// A workflow run claiming the attempt before it was dispatched
		// (a forged or stray token of the right repository) gets nothing.
		pending := e.runs(1)[0].Attempts[0].ID
		early := e.fake.StartWorkflowRun(fakegithub.Dispatch{Repo: "acme/app", RepoID: 1, OwnerID: 10, Workflow: "jobplane.yml",
			Ref: "main", FullRef: "refs/heads/main", SHA: e.sha["acme/app"]})
		_, err := e.exchange(e.fake.OIDCToken(early, actionsoidc.DefaultAudience), pending)
		require.ErrorIs(t, err, protocol.ErrAttemptNotDispatched, "pending, not yet dispatched")
		e.dispatchActions()
		require.Empty(t, e.fake.Dispatches(), "not before the backoff")
		e.clock.Advance(5 * time.Second)
		e.dispatchActions()
		require.Len(t, e.fake.Dispatches(), 1)
		first := e.dispatchFor("acme/app")

		// Never called back: expired after the timeout, and retried.
		e.clock.Advance(actions.DefaultCallbackTimeout)
		e.dispatchActions() // expires the first attempt, queues the second
		e.dispatchActions() // dispatches the second
		require.Len(t, e.fake.Dispatches(), 2)
		second := e.dispatchFor("acme/app")
		require.Equal(t, first.Inputs[actions.InputRun], second.Inputs[actions.InputRun])
		require.NotEqual(t, first.Inputs[actions.InputAttempt], second.Inputs[actions.InputAttempt])
		_, err = e.exchange(e.fake.OIDCToken(e.fake.StartWorkflowRun(first), actionsoidc.DefaultAudience), first.Inputs[actions.InputAttempt])
		require.ErrorIs(t, err, protocol.ErrAttemptNotDispatched, "the expired attempt's late workflow")

		// 404: the workflow file does not exist in globex/svc.
		e.fake.AddWorkflow(fakegithub.Workflow{Repo: "globex/svc", File: "other.yml"})
		e.fake.RemoveWorkflow("globex/svc", "jobplane.yml")
		e.deliver(e.pr(2, "globex/svc", "opened", nil))
		e.dispatchActions()
		e.dispatchActions()
		runs := e.runs(2)
		require.Len(t, runs, 1)
		require.Equal(t, store.RunFailed, runs[0].Run.State, "two attempts, both refused")
		e.dispatch()
		cr := e.checkRun("globex/svc", runs[0].Run.ID)
		require.Equal(t, github.ConclusionFailure, cr.Conclusion)
		require.Contains(t, cr.Output.Summary, "no such workflow (404)")

		// Permission missing: an installation that did not grant Actions.
		e.fake.AddInstallation(2, "globex", github.Permissions{"metadata": "read", "checks": "write", "contents": "read", "pull_requests": "read"})
		e.fake.AddWorkflow(fakegithub.Workflow{Repo: "globex/svc", File: "jobplane.yml"})
		e.deliver(e.pr(2, "globex/svc", "synchronize", nil))
		e.dispatchActions()
		e.dispatchActions()
		e.dispatch()
		for _, v := range e.runs(2) {
			require.Equal(t, store.RunFailed, v.Run.State)
			require.Contains(t, e.checkRun("globex/svc", v.Run.ID).Output.Summary, "GitHub refused to dispatch workflow jobplane.yml in globex/svc")
		}

		// Each refusal and the expiry are audited, by the dispatcher, with
		// their reasons.
		audited := func(inst int64, action, reason string) {
			t.Helper()
			evs, err := st.AuditList(store.WithSystem(ctx, "test"), &store.AuditListParams{Tenant: e.tenant(inst), Limit: 1000})
			require.NoError(t, err)
			for _, ev := range evs {
				if ev.Action == action && ev.Actor == "system:actions" && strings.Contains(string(ev.Details), reason) {
					return
				}
			}
			t.Fatalf("no %s audited with %q", action, reason)
		}
		audited(1, "attempt.expired", "never called back")
		audited(2, "attempt.failed", "no such workflow (404)")
		audited(2, "attempt.failed", "GitHub refused to dispatch workflow jobplane.yml in globex/svc")
	})
}

// noneToken is an unsigned token (alg none) with a dummy signature part.
func noneToken(claims map[string]any) string {
	b64 := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return b64(map[string]string{"alg": "none", "typ": "JWT"}) + "." + b64(claims) + ".c2ln"
}

// TestPullRequestForAnUngrantedRepositoryIsRefused: a pull_request delivery
// for a repository the delivering installation does not grant (another
// installation's, or one removed earlier, delivered late or again)
// requests nothing and is recorded and audited as refused.
func TestPullRequestForAnUngrantedRepositoryIsRefused(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newActionsEnv(t, st, "1")
		ctx := store.WithSystem(context.Background(), "test")
		// Installation 1 delivering a pull request of installation 2's repository.
		d := e.pr(1, "globex/svc", "opened", nil)
		require.Equal(t, githubapp.Processed, e.deliver(d))
		require.Empty(t, e.runs(1))
		require.Empty(t, e.runs(2))
		require.Equal(t, githubapp.Duplicate, e.deliver(d), "a redelivery changes nothing")

		// A pull request opened before acme/app was removed, delivered after.
		early := e.pr(1, "acme/app", "opened", nil)
		e.deliver(fakegithub.NewDelivery("installation_repositories", e.fake.InstallationRepositoriesPayload(1, nil, []string{"app"})))
		require.Equal(t, githubapp.Processed, e.deliver(early))
		require.Empty(t, e.runs(1))
		e.dispatchActions()
		require.Empty(t, e.fake.Dispatches(), "nothing requested, nothing dispatched")

		evs, err := st.AuditList(ctx, &store.AuditListParams{Tenant: e.tenant(1), Limit: 1000})
		require.NoError(t, err)
		var refused []string
		for _, ev := range evs {
			if ev.Action == "github.pull_request.refused" {
				refused = append(refused, string(ev.Details))
			}
		}
		require.Len(t, refused, 2)
		require.Contains(t, refused[0], "does not grant globex/svc")
		require.Contains(t, refused[1], "does not grant acme/app")
	})
}

// heldApp is a replica's dispatcher: it counts its calls and, when held,
// waits to be released inside the first one.
type heldApp struct {
	actions.App
	calls   atomic.Int32
	entered chan struct{}
	release chan struct{}
}

func (h *heldApp) DispatchWorkflow(ctx context.Context, installation int64, repo, workflow string, inputs map[string]string) (actions.Target, error) {
	if h.calls.Add(1) == 1 && h.release != nil {
		close(h.entered)
		<-h.release
	}
	return h.App.DispatchWorkflow(ctx, installation, repo, workflow, inputs)
}

// TestActionsDispatchOnceAcrossReplicas: while one replica's pass is
// asking GitHub to run a dispatch's workflow, another replica's pass does
// not send it too: GitHub runs the workflow once.
func TestActionsDispatchOnceAcrossReplicas(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newActionsEnv(t, st, "1")
		replica := func(app *heldApp) *actions.Service {
			v, err := actionsoidc.New(actionsoidc.Config{Issuer: e.fake.OIDCIssuer(), Clock: e.clock})
			require.NoError(t, err)
			mode, err := actions.New(actions.Config{Store: st, Clock: e.clock, Verifier: v, App: app, Access: e.gh})
			require.NoError(t, err)
			mode.Attach(e.svc)
			return mode
		}
		held := &heldApp{App: actions.Dispatcher{App: e.app}, entered: make(chan struct{}), release: make(chan struct{})}
		other := &heldApp{App: actions.Dispatcher{App: e.app}}
		a, b := replica(held), replica(other)
		unblock := sync.OnceFunc(func() { close(held.release) })
		t.Cleanup(unblock)
		e.deliver(e.pr(1, "acme/app", "opened", nil))

		done := make(chan error, 1)
		go func() {
			_, err := a.Dispatch(context.Background())
			done <- err
		}()
		<-held.entered
		_, err := b.Dispatch(context.Background())
		require.NoError(t, err)
		require.Zero(t, other.calls.Load(), "the other replica left the dispatch being sent alone")
		unblock()
		require.NoError(t, <-done)
		require.Len(t, e.fake.Dispatches(), 1)

		_, err = b.Dispatch(context.Background())
		require.NoError(t, err)
		require.Zero(t, other.calls.Load(), "a sent dispatch is not sent again")
	})
}
