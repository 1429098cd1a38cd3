package githubapp_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/github"
	"github.com/jobplane/jobplane/internal/github/fakegithub"
	"github.com/jobplane/jobplane/internal/githubapp"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// ciRun is installation 1's ci run of a head commit.
func (e *prEnv) ciRun(sha string) *store.Run {
	e.t.Helper()
	for _, v := range e.runs(1) {
		if v.Run.Job == "ci" && sourceMap(e.t, v.Run)["head_sha"] == sha {
			return v.Run
		}
	}
	e.t.Fatalf("no ci run of %s", sha)
	return nil
}

func (e *prEnv) push7(sha string, at time.Time) fakegithub.Delivery {
	return e.pr(1, "acme/app", "synchronize", func(p *fakegithub.PullRequest) { p.HeadSHA, p.UpdatedAt = sha, at })
}

// TestNewPushSupersedesOlderHead: a synchronize with a new head ends the
// older head's runs of the same job superseded — a queued one at once, a
// running one by cancelling its attempt — and their Check Runs complete
// saying so; the other pull request's and other jobs' runs are left alone.
// Redeliveries and late copies of an older push never supersede a newer
// head; the older head's runs they request are superseded themselves.
func TestNewPushSupersedesOlderHead(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newPREnv(t, st)
		ctx := context.Background()
		t0 := e.clock.Now()
		sha1 := e.sha["acme/app"]
		sha2, sha3, sha4 := e.push("acme/app"), e.push("acme/app"), e.push("acme/app")

		first := e.push7(sha1, t0)
		e.deliver(first)
		run1 := e.ciRun(sha1)

		// Running when the next push arrives.
		rn := e.runner(1, false)
		asg, err := e.claim(rn)
		require.NoError(t, err)
		require.NotNil(t, asg)
		require.Equal(t, run1.ID, asg.RunID, "the ci run of sha1 is the only one here (preview runs on opened only)")
		// Another pull request of the same repository, older still.
		e.deliver(e.pr(1, "acme/app", "synchronize", func(p *fakegithub.PullRequest) {
			p.Number, p.HeadSHA, p.UpdatedAt = 9, sha4, t0.Add(-time.Hour)
		}))

		second := e.push7(sha2, t0.Add(time.Minute))
		e.deliver(second)
		v1, err := e.svc.GetRun(ctx, principal.Actor{TenantID: e.tenant(1)}, run1.ID)
		require.NoError(t, err)
		require.Equal(t, store.RunSuperseded, v1.Run.State)
		require.Equal(t, store.AttemptCancelled, v1.Attempts[0].State)
		require.Equal(t, "superseded by "+sha2, v1.Timeline[len(v1.Timeline)-1].Reason)
		// The runner's next renewal hears the attempt ended.
		_, err = e.svc.Renew(ctx, &authn.SignedCall{Runner: rn, Run: asg.RunID, Attempt: asg.AttemptID, Lease: asg.Lease.Token})
		require.ErrorIs(t, err, protocol.ErrAttemptStale)
		// The other pull request's run is untouched.
		require.Equal(t, store.RunQueued, e.ciRun(sha4).State)

		// A redelivery of the first push, and a late copy of it under
		// another delivery ID: the newer head stays, and the older head's
		// late run is superseded by it.
		require.Equal(t, githubapp.Duplicate, e.deliver(first))
		e.deliver(e.push7(sha1, t0))
		run2 := e.ciRun(sha2)
		require.Equal(t, store.RunQueued, run2.State, "an older head never supersedes a newer one")
		for _, v := range e.runs(1) {
			if v.Run.Job == "ci" && sourceMap(t, v.Run)["head_sha"] == sha1 {
				require.Equal(t, store.RunSuperseded, v.Run.State)
			}
		}

		// A newer push supersedes the queued run.
		e.deliver(e.push7(sha3, t0.Add(2*time.Minute)))
		require.Equal(t, store.RunSuperseded, e.ciRun(sha2).State)
		require.Equal(t, store.RunQueued, e.ciRun(sha3).State)

		e.dispatch()
		for _, run := range []string{run1.ID, run2.ID} {
			cr := e.checkRunOf("acme/app", run)
			require.Equal(t, github.CheckCompleted, cr.Status)
			require.Equal(t, github.ConclusionCancelled, cr.Conclusion)
			require.Equal(t, "Superseded", cr.Output.Title)
		}
		require.Contains(t, e.checkRunOf("acme/app", run1.ID).Output.Summary, "superseded by "+sha2)
		require.Contains(t, e.checkRunOf("acme/app", run2.ID).Output.Summary, "superseded by "+sha3)

		evs, err := st.AuditList(store.WithSystem(ctx, "test"), &store.AuditListParams{Tenant: e.tenant(1), RunID: run2.ID, Limit: 100})
		require.NoError(t, err)
		require.Equal(t, "run.superseded", evs[len(evs)-1].Action)
	})
}

func (e *prEnv) checkRunOf(repo, runID string) github.CheckRun {
	e.t.Helper()
	for _, cr := range e.fake.CheckRuns(repo) {
		if cr.ExternalID == runID {
			return cr
		}
	}
	e.t.Fatalf("no check run for %s", runID)
	return github.CheckRun{}
}
