package githubapp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/github/fakegithub"
	"github.com/jobplane/jobplane/internal/githubapp"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// checkRequests counts the fake's requests about a repository's Check Runs.
func (e *prEnv) checkRequests(repo string) int {
	n := 0
	for _, r := range e.fake.Requests() {
		if strings.Contains(r.Path, "/repos/"+repo+"/check-runs") || strings.Contains(r.Path, "/repos/"+repo+"/commits/") {
			n++
		}
	}
	return n
}

func (e *prEnv) unsent(runID string) []*store.GitHubCheckUpdate {
	e.t.Helper()
	list, err := e.st.GitHubCheckUpdateList(context.Background(), runID)
	require.NoError(e.t, err)
	return list
}

func TestGitHubRepositoryRemovedEndsItsRuns(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		e := newPREnv(t, st)
		e.deliver(e.pr(1, "acme/app", "opened", nil))
		e.deliver(e.pr(2, "globex/svc", "opened", nil))
		e.dispatch()
		require.Len(t, e.runs(1), 2)
		rn := e.runner(1, false)
		asg, err := e.claim(rn)
		require.NoError(t, err)
		require.NotNil(t, asg)
		e.dispatch()

		e.fake.RemoveRepo(1, "app")
		d := fakegithub.NewDelivery("installation_repositories", e.fake.InstallationRepositoriesPayload(1, nil, []string{"app"}))
		require.Equal(t, githubapp.Processed, e.deliver(d))

		admin := principal.Actor{TenantID: e.tenant(1), Name: "admin", Admin: true}
		var queued string
		for _, v := range e.runs(1) {
			if v.Run.ID == asg.RunID {
				require.Equal(t, store.RunRunning, v.Run.State, "a running run is told to stop, not ended under its runner")
				require.True(t, v.Run.CancelRequested)
				continue
			}
			queued = v.Run.ID
			require.Equal(t, store.RunCancelled, v.Run.State)
			full, err := e.svc.GetRun(ctx, admin, v.Run.ID)
			require.NoError(t, err)
			last := full.Timeline[len(full.Timeline)-1]
			require.Equal(t, "run.cancelled", last.Action)
			require.Equal(t, githubapp.Actor, last.Actor)
			require.Contains(t, last.Reason, "no longer grants acme/app")
		}
		require.NotEmpty(t, queued)
		// The runner hears it at its next renewal.
		call := &authn.SignedCall{Runner: rn, Run: asg.RunID, Attempt: asg.AttemptID, Lease: asg.Lease.Token}
		rr, err := e.svc.Renew(ctx, call)
		require.NoError(t, err)
		require.True(t, rr.CancelRequested)
		// The installation event's audit lists both.
		evs := auditOf(t, st, e.tenant(1), "github.installation_repositories.removed")
		require.Len(t, evs, 1)
		require.Contains(t, string(evs[0].Details), queued)
		require.Contains(t, string(evs[0].Details), asg.RunID)

		// Check Run updates GitHub would refuse are dropped, never sent.
		before := e.checkRequests("acme/app")
		e.dispatch()
		_, err = e.svc.Result(ctx, call, &protocol.ResultRequest{Outcome: "succeeded"})
		require.NoError(t, err)
		e.dispatch()
		e.clock.Advance(time.Hour)
		e.dispatch()
		require.Equal(t, before, e.checkRequests("acme/app"), "nothing more is sent for a lost repository")
		for _, id := range []string{queued, asg.RunID} {
			for _, u := range e.unsent(id) {
				require.NotNil(t, u.SentAt, "update %d of %s left pending", u.Seq, id)
			}
			list := e.unsent(id)
			require.True(t, strings.HasPrefix(list[len(list)-1].LastError, "dropped: "), list[len(list)-1].LastError)
		}

		// The other installation is untouched; deleting it ends its runs.
		states := func() map[string]store.RunState {
			m := map[string]store.RunState{}
			for _, v := range e.runs(2) {
				m[v.Run.Job] = v.Run.State
			}
			return m
		}
		require.Equal(t, map[string]store.RunState{"ci": store.RunQueued, "preview": store.RunDenied}, states())
		require.Equal(t, githubapp.Processed, e.deliver(fakegithub.NewDelivery("installation", e.fake.InstallationPayload("deleted", 2))))
		require.Equal(t, map[string]store.RunState{"ci": store.RunCancelled, "preview": store.RunDenied}, states())
		evs = auditOf(t, st, e.tenant(2), "run.cancelled")
		require.Len(t, evs, 1)
		require.Contains(t, string(evs[0].Details), "was deleted")
	})
}

func auditOf(t *testing.T, st store.Store, tenant, action string) []*store.AuditEvent {
	t.Helper()
	var out []*store.AuditEvent
	evs, err := st.AuditList(context.Background(), &store.AuditListParams{Tenant: tenant, Limit: 1000})
	require.NoError(t, err)
	for _, ev := range evs {
		if ev.Action == action {
			out = append(out, ev)
		}
	}
	return out
}

// A claim long-polling when its installation is suspended hands out none
// of the tenant's attempts, even one that becomes due during the wait;
// after the unsuspension the same attempt is claimed.
func TestGitHubSuspensionDuringLongPollClaim(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		e := newPREnv(t, st)
		e.deliver(e.pr(2, "globex/svc", "synchronize", nil))
		runs := e.runs(2)
		require.Len(t, runs, 1)
		// Not claimable for a minute (a retry's backoff, say).
		require.NoError(t, st.InTx(ctx, func(tx store.Tx) error {
			atts, err := tx.AttemptListByRun(ctx, runs[0].Run.ID)
			if err != nil {
				return err
			}
			a := atts[0]
			a.NotBefore = e.clock.Now().Add(time.Minute)
			return tx.AttemptUpdate(ctx, a)
		}))
		rn := e.runner(2, false)
		type answer struct {
			asg *protocol.Assignment
			err error
		}
		done := make(chan answer, 1)
		go func() {
			asg, err := e.svc.Claim(ctx, &authn.SignedCall{Runner: rn}, &protocol.ClaimRequest{WaitSeconds: 5})
			done <- answer{asg, err}
		}()
		time.Sleep(300 * time.Millisecond) // the claim is past its first look
		e.deliver(fakegithub.NewDelivery("installation", e.fake.InstallationPayload("suspend", 2)))
		e.clock.Advance(2 * time.Minute) // the attempt is due; the next look finds it
		var got answer
		select {
		case got = <-done:
		case <-time.After(15 * time.Second):
			t.Fatal("claim did not return")
		}
		require.Nil(t, got.asg, "a suspended installation's attempt was handed out")
		require.ErrorIs(t, got.err, protocol.ErrInstallationSuspended)
		require.Equal(t, store.RunQueued, e.runs(2)[0].Run.State, "queued runs stay queued while suspended")

		e.deliver(fakegithub.NewDelivery("installation", e.fake.InstallationPayload("unsuspend", 2)))
		asg, err := e.claim(rn)
		require.NoError(t, err)
		require.NotNil(t, asg)
		require.Equal(t, runs[0].Run.ID, asg.RunID)
	})
}

// Check Run updates of a suspended installation wait for it, rather than
// be refused by GitHub and lost.
func TestGitHubCheckUpdatesHeldWhileSuspended(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newPREnv(t, st)
		e.deliver(e.pr(2, "globex/svc", "synchronize", nil))
		e.fake.SetSuspended(2, true)
		e.deliver(fakegithub.NewDelivery("installation", e.fake.InstallationPayload("suspend", 2)))
		before := e.checkRequests("globex/svc")
		e.dispatch()
		require.Equal(t, before, e.checkRequests("globex/svc"))
		run := e.runs(2)[0].Run.ID
		list := e.unsent(run)
		require.Nil(t, list[0].SentAt)
		require.Contains(t, list[0].LastError, "suspended")

		e.fake.SetSuspended(2, false)
		e.deliver(fakegithub.NewDelivery("installation", e.fake.InstallationPayload("unsuspend", 2)))
		e.clock.Advance(11 * time.Minute)
		e.dispatch()
		require.Len(t, e.fake.CheckRuns("globex/svc"), 1)
		require.NotNil(t, e.unsent(run)[0].SentAt)
	})
}
