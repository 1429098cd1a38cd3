package githubapp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/github"
	"github.com/jobplane/jobplane/internal/github/fakegithub"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

func (e *prEnv) checkSummary(repo, runID string) string {
	e.t.Helper()
	for _, cr := range e.fake.CheckRuns(repo) {
		if cr.ExternalID == runID {
			require.NotNil(e.t, cr.Output, "check run of %s has no output", runID)
			return cr.Output.Summary
		}
	}
	e.t.Fatalf("no check run for %s", runID)
	return ""
}

// TestQueuedCheckRunSaysWhatItWaitsFor: a queued run's Check Run summary
// names what the run waits for, and follows it when that changes: no
// eligible runner at the request, then a lease key held by another run.
func TestQueuedCheckRunSaysWhatItWaitsFor(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newPREnv(t, st)
		ci := func(sha string) string {
			for _, v := range e.runs(1) {
				if v.Run.Job == "ci" && sourceMap(t, v.Run)["head_sha"] == sha {
					return v.Run.ID
				}
			}
			t.Fatalf("no ci run of %s", sha)
			return ""
		}
		e.deliver(e.pr(1, "acme/app", "opened", nil))
		first := ci(e.sha["acme/app"])
		e.dispatch()
		require.Contains(t, e.checkSummary("acme/app", first),
			"Waiting for runner: none of the 0 online runners is eligible (needs pool default, access to acme/app).")

		// A second pull request's ci run waits for the lease key the
		// first one holds once claimed.
		other := e.push("acme/app")
		e.deliver(e.pr(1, "acme/app", "opened", func(p *fakegithub.PullRequest) { p.Number, p.HeadSHA = 8, other }))
		second := ci(other)
		rn := e.runner(1, false)
		claimed := map[string]bool{}
		for range 5 {
			asg, err := e.claim(rn)
			require.NoError(t, err)
			if asg != nil {
				claimed[asg.RunID] = true
			}
		}
		require.NotEqual(t, claimed[first], claimed[second], "one ci run holds the key, the other waits")
		blocked := first
		if claimed[first] {
			blocked = second
		}
		v, err := e.svc.GetRun(context.Background(), principal.Actor{TenantID: e.tenant(1)}, blocked)
		require.NoError(t, err)
		require.Equal(t, "lease schema-migration:prod", v.Run.WaitingFor)
		e.dispatch()
		require.Contains(t, e.checkSummary("acme/app", blocked), "Waiting for lease schema-migration:prod.")
		for _, cr := range e.fake.CheckRuns("acme/app") {
			if cr.ExternalID == blocked {
				require.Equal(t, github.CheckQueued, cr.Status)
			}
		}
	})
}

// TestActionsAttemptSaysWhatItWaitsFor: an attempt of the GitHub Actions
// mode waits for its dispatch, then for its workflow to call back; the run
// and its Check Run say so.
func TestActionsAttemptSaysWhatItWaitsFor(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newActionsEnv(t, st, "1")
		e.deliver(e.pr(1, "acme/app", "opened", nil))
		run := e.runs(1)[0].Run
		require.Equal(t, "GitHub Actions: the dispatch of the workflow jobplane.yml (next dispatcher pass)", run.WaitingFor)
		e.fake.SetDown(true)
		e.dispatchActions()
		e.fake.SetDown(false)
		run = e.runs(1)[0].Run
		require.Contains(t, run.WaitingFor, "GitHub Actions: the dispatch of the workflow jobplane.yml in acme/app (try 1 failed: ")
		e.clock.Advance(5 * time.Second)
		e.dispatchActions()
		run = e.runs(1)[0].Run
		require.Equal(t, "GitHub Actions: the workflow jobplane.yml in acme/app to call back (by 2026-11-29T12:10:05Z)", run.WaitingFor)
		e.dispatch()
		require.Contains(t, e.checkSummary("acme/app", run.ID), "Waiting for GitHub Actions: the workflow jobplane.yml in acme/app to call back")
	})
}

// TestQueuedCheckRunFollowsRunners: a queued run's Check Run follows the
// runners of its tenant and pool coming and going — one registering and
// calling, one falling silent, one disabled, one stating other
// capabilities — without the run changing; a pass with nothing changed,
// a runner's further heartbeats and another tenant's runners write nothing
// to GitHub.
func TestQueuedCheckRunFollowsRunners(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newPREnv(t, st)
		ctx := context.Background()
		e.deliver(e.pr(1, "acme/app", "opened", nil))
		var ci string
		for _, v := range e.runs(1) {
			if v.Run.Job == "ci" {
				ci = v.Run.ID
			}
		}
		require.NotEmpty(t, ci)
		refresh := func() int {
			t.Helper()
			n, err := e.svc.RefreshRunnerWaits(ctx)
			require.NoError(t, err)
			e.dispatch()
			return n
		}
		checkWrites := func() int {
			n := 0
			for _, r := range e.fake.Requests() {
				if strings.Contains(r.Path, "/check-runs") && r.Method != "GET" {
					n++
				}
			}
			return n
		}
		// A runner's signed call, as authn records it: the runner as the
		// call found it, then its last-seen time.
		call := func(rn *store.Runner, caps *protocol.Capabilities) {
			t.Helper()
			found := *rn
			_, err := e.svc.Heartbeat(ctx, &authn.SignedCall{Runner: &found}, &protocol.HeartbeatRequest{Status: "idle", Capabilities: caps})
			require.NoError(t, err)
			now := e.clock.Now()
			require.NoError(t, st.RunnerTouch(ctx, rn.ID, &now))
			rn.LastSeenAt = &now
			rn.Executor = store.ExecutorProcess
			rn.Capabilities = 0
			if caps != nil && caps.Isolated {
				rn.Capabilities = store.CapIsolated
			}
		}
		isolated := &protocol.Capabilities{Isolated: true}
		e.dispatch()
		require.Contains(t, e.checkSummary("acme/app", ci), "Waiting for runner: none of the 0 online runners is eligible")
		require.Zero(t, refresh(), "nothing came or went")

		// A runner of another repository registers and calls: counted,
		// not eligible.
		other := e.runner(1, false, "acme/other")
		call(other, isolated)
		require.Equal(t, 2, refresh(), "the ci and preview runs of tenant 1's pool")
		require.Contains(t, e.checkSummary("acme/app", ci), "Waiting for runner: none of the 1 online runners is eligible (needs pool default, access to acme/app).")

		// Its further calls, and an unchanged pass, write nothing.
		writes := checkWrites()
		e.clock.Advance(30 * time.Second)
		call(other, isolated)
		require.Zero(t, refresh())
		require.Equal(t, writes, checkWrites())

		// Another tenant's runner restates nothing of tenant 1.
		call(e.runner(2, false), isolated)
		require.Zero(t, refresh(), "tenant 2 has no queued runs")
		require.Equal(t, writes, checkWrites())

		// An eligible runner comes online: the run no longer waits for a
		// runner, it is merely next in line.
		good := e.runner(1, false)
		call(good, isolated)
		require.Equal(t, 2, refresh())
		require.NotContains(t, e.checkSummary("acme/app", ci), "Waiting for")
		require.Equal(t, github.CheckQueued, e.checkRunOf("acme/app", ci).Status)

		// Both fall silent: after the online window the Check Run says so.
		e.clock.Advance(control.RunnerOnlineWindow + time.Second)
		require.Equal(t, 2, refresh())
		require.Contains(t, e.checkSummary("acme/app", ci), "Waiting for runner: none of the 0 online runners is eligible")

		// The eligible one comes back, then is disabled.
		call(good, isolated)
		refresh()
		require.NotContains(t, e.checkSummary("acme/app", ci), "Waiting for")
		_, err := e.svc.SetRunnerStatus(ctx, principal.Actor{TenantID: e.tenant(1), Name: "admin", Admin: true}, good.ID, store.RunnerDisabled)
		require.NoError(t, err)
		require.Equal(t, 2, refresh())
		require.Contains(t, e.checkSummary("acme/app", ci), "Waiting for runner: none of the 0 online runners is eligible")
		_, err = e.svc.SetRunnerStatus(ctx, principal.Actor{TenantID: e.tenant(1), Name: "admin", Admin: true}, good.ID, store.RunnerActive)
		require.NoError(t, err)
		require.Equal(t, 2, refresh())
		require.NotContains(t, e.checkSummary("acme/app", ci), "Waiting for")

		// A capability change: the runner restarted without isolation
		// still takes the ci run (it needs none), and the Check Run is
		// written only if what it says changed.
		writes = checkWrites()
		call(good, nil)
		require.Equal(t, 2, refresh())
		require.Equal(t, writes, checkWrites(), "the same text is not written again")
	})
}
