package api_test

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

var leaseDefinitions = map[string]string{
	"jobs/migrate.yaml": `name: migrate
description: One at a time per channel
run: {command: ["true"], lease_ttl: 10s}
leases:
  - key: "schema-migration:{channel}"
`,
	"jobs/backfill.yaml": `name: backfill
description: At most two at once, one per account
params:
  type: object
  required: [account]
  properties:
    account: {type: string}
run: {command: ["true"]}
leases:
  - key: "backfill:account:{params.account}"
  - key: warehouse-writes
    limit: 2
`,
	"jobs/deploy.yaml": `name: deploy
description: Refused while another is pending
run: {command: ["true"]}
leases:
  - {key: "deploy:{channel}", on_conflict: reject}
`,
	"jobs/rollup.yaml": `name: rollup
description: Once a day
run: {command: ["true"]}
leases:
  - {key: "rollup:{window.date}", once: true}
`,
	"groups.yaml": "groups:\n  operators: {members: [admin]}\n",
	"policies/all.yaml": `rules:
  - id: all
    jobs: ["*"]
    users: ["*"]
`,
}

func (e *testEnv) requestP(job, params string) *protocol.Run {
	e.t.Helper()
	r, err := e.admin.CreateRun(e.ctx(), &protocol.RunRequest{Job: job, Channel: "prod", Params: json.RawMessage(params)})
	require.NoError(e.t, err)
	return r
}

func (e *testEnv) finish(rc *apiclient.RunnerClient, asg *protocol.Assignment, outcome string) {
	e.t.Helper()
	_, err := rc.Result(e.ctx(), apiclient.AttemptRef{RunID: asg.RunID, AttemptID: asg.AttemptID, LeaseToken: asg.Lease.Token},
		protocol.ResultRequest{Outcome: outcome, Summary: outcome})
	require.NoError(e.t, err)
}

func (e *testEnv) noClaim(rc *apiclient.RunnerClient) {
	e.t.Helper()
	asg, err := rc.Claim(e.ctx(), 0, "")
	require.NoError(e.t, err)
	require.Nil(e.t, asg, "nothing should be claimable")
}

func TestRunLeases(t *testing.T) {
	t.Parallel()
	for name, newStore := range map[string]func(testing.TB) store.Store{"sqlite": testdb.SQLite, "postgres": testdb.Postgres} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			leaseCases(t, newStore)
		})
	}
}

// other returns the run of the pair that is not id.
func other(a, b *protocol.Run, id string) *protocol.Run {
	if a.ID == id {
		return b
	}
	return a
}

func leaseCases(t *testing.T, newStore func(testing.TB) store.Store) {
	{
		t.Run("mutual exclusion and fencing", func(t *testing.T) {
			e := newEnvFiles(t, newStore(t), leaseDefinitions)
			first := e.requestP("migrate", "")
			second := e.requestP("migrate", "")
			rc := e.runner()
			a1, _ := e.claim(rc)
			r1 := &protocol.Run{ID: a1.RunID}
			r2 := other(first, second, a1.RunID)
			require.Equal(t, []protocol.FencedKey{{Key: "schema-migration:prod", FencingToken: 1}}, a1.Leases)
			e.noClaim(rc) // r2 waits for the key
			require.Equal(t, "lease schema-migration:prod", e.run(r2.ID).WaitingFor)

			cur, holder, err := e.admin.VerifyLease(e.ctx(), "schema-migration:prod", 1)
			require.NoError(t, err)
			require.True(t, cur)
			require.Equal(t, r1.ID, holder)
			// The job can verify with its own run token too.
			code, _, body := e.bearer("POST", "/v1/leases/verify", a1.RunToken.Token, `{"key":"schema-migration:prod","fencing_token":1}`)
			require.Equal(t, 200, code)
			require.Contains(t, string(body), `"current":true`)

			raw, err := e.admin.Lease(e.ctx(), "schema-migration:prod")
			require.NoError(t, err)
			require.Contains(t, string(raw), r2.ID, "the waiting run is listed")

			e.finish(rc, a1, "succeeded")
			cur, _, err = e.admin.VerifyLease(e.ctx(), "schema-migration:prod", 1)
			require.NoError(t, err)
			require.False(t, cur, "a released token is no longer current")
			a2, _ := e.claim(rc)
			require.Equal(t, r2.ID, a2.RunID)
			require.Equal(t, int64(2), a2.Leases[0].FencingToken)
			require.Empty(t, e.run(r2.ID).WaitingFor)
		})

		t.Run("semaphore and groups", func(t *testing.T) {
			e := newEnvFiles(t, newStore(t), leaseDefinitions)
			runs := []*protocol.Run{e.requestP("backfill", `{"account":"1"}`), e.requestP("backfill", `{"account":"2"}`), e.requestP("backfill", `{"account":"3"}`)}
			rc := e.runner()
			a1, _ := e.claim(rc)
			a2, _ := e.claim(rc)
			require.Len(t, a1.Leases, 2, "all keys of the group")
			e.noClaim(rc)
			var r3 *protocol.Run
			for _, r := range runs {
				if r.ID != a1.RunID && r.ID != a2.RunID {
					r3 = r
				}
			}
			require.Equal(t, "lease warehouse-writes", e.run(r3.ID).WaitingFor)
			e.finish(rc, a1, "failed")
			a3, _ := e.claim(rc)
			require.Equal(t, r3.ID, a3.RunID)
		})

		t.Run("key confusion through a parameter is refused", func(t *testing.T) {
			e := newEnvFiles(t, newStore(t), leaseDefinitions)
			_, err := e.admin.CreateRun(e.ctx(), &protocol.RunRequest{Job: "backfill", Channel: "prod", Params: json.RawMessage(`{"account":"1:warehouse"}`)})
			p := problemOf(t, err)
			require.Equal(t, protocol.CodeInvalidParams, p.Code)
			require.Equal(t, "account", p.Field)
		})

		t.Run("on_conflict reject", func(t *testing.T) {
			e := newEnvFiles(t, newStore(t), leaseDefinitions)
			r1 := e.requestP("deploy", "")
			_, err := e.admin.CreateRun(e.ctx(), &protocol.RunRequest{Job: "deploy", Channel: "prod"})
			p := problemOf(t, err)
			require.Equal(t, protocol.CodeLeaseHeld, p.Code)
			require.Equal(t, r1.ID, p.RunID)
			rc := e.runner()
			a, _ := e.claim(rc)
			e.finish(rc, a, "succeeded")
			e.requestP("deploy", "") // free again
		})

		t.Run("once keys are consumed by a success only", func(t *testing.T) {
			e := newEnvFiles(t, newStore(t), leaseDefinitions)
			rc := e.runner()
			e.requestP("rollup", "")
			a, _ := e.claim(rc)
			e.finish(rc, a, "failed")
			r2 := e.requestP("rollup", "") // a failure does not consume it
			a2, _ := e.claim(rc)
			e.finish(rc, a2, "succeeded")
			_, err := e.admin.CreateRun(e.ctx(), &protocol.RunRequest{Job: "rollup", Channel: "prod"})
			p := problemOf(t, err)
			require.Equal(t, protocol.CodeAlreadyDone, p.Code)
			require.Equal(t, r2.ID, p.RunID)
			e.clock.Advance(24 * time.Hour)
			e.requestP("rollup", "") // the next day is another key
		})

		t.Run("expiry frees the key and the next holder's token is higher", func(t *testing.T) {
			e := newEnvFiles(t, newStore(t), leaseDefinitions)
			x := e.requestP("migrate", "")
			y := e.requestP("migrate", "")
			a, b := e.runner(), e.runner()
			a1, ref1 := e.claim(a)
			r2 := other(x, y, a1.RunID)
			e.clock.Advance(11 * time.Second)
			_, err := e.svc.Reap(e.ctx())
			require.NoError(t, err)
			a2, _ := e.claim(b)
			require.Equal(t, r2.ID, a2.RunID)
			require.Greater(t, a2.Leases[0].FencingToken, a1.Leases[0].FencingToken)
			cur, _, err := e.admin.VerifyLease(e.ctx(), "schema-migration:prod", a1.Leases[0].FencingToken)
			require.NoError(t, err)
			require.False(t, cur, "the paused holder is refused downstream")
			_, err = a.Renew(e.ctx(), ref1)
			require.True(t, apiclient.IsCode(err, protocol.CodeLeaseExpired), "got %v", err)
		})

		t.Run("break-glass release", func(t *testing.T) {
			e := newEnvFiles(t, newStore(t), leaseDefinitions)
			x := e.requestP("migrate", "")
			y := e.requestP("migrate", "")
			rc := e.runner()
			a1, ref1 := e.claim(rc)
			r1 := &protocol.Run{ID: a1.RunID}
			r2 := other(x, y, a1.RunID)
			_, err := e.admin.ReleaseLease(e.ctx(), "schema-migration:prod", "")
			require.Equal(t, protocol.CodeBadRequest, problemOf(t, err).Code, "a reason is required")
			_, err = e.admin.ReleaseLease(e.ctx(), "schema-migration:prod", "stuck after a network partition")
			require.NoError(t, err)
			rn, err := rc.Renew(e.ctx(), ref1)
			require.NoError(t, err)
			require.True(t, rn.CancelRequested, "the holder is told to stop")
			cur, _, err := e.admin.VerifyLease(e.ctx(), "schema-migration:prod", a1.Leases[0].FencingToken)
			require.NoError(t, err)
			require.False(t, cur)
			a2, _ := e.claim(rc)
			require.Equal(t, r2.ID, a2.RunID)
			require.Equal(t, int64(3), a2.Leases[0].FencingToken, "the release moved the token on")
			found := false
			events, err := e.admin.Audit(e.ctx(), 0, 1000)
			require.NoError(t, err)
			for _, ev := range events.Events {
				if ev.Action == "lease.force_released" {
					found = true
					require.Equal(t, "admin", ev.Actor)
					require.Contains(t, string(ev.Details), "network partition")
					require.Contains(t, string(ev.Details), r1.ID)
				}
			}
			require.True(t, found, "the release is audited")
		})
	}
}

// Requests racing for an on_conflict: reject key, through POST /v1/runs and
// POST /v1/runs/batch at once: exactly one is accepted and every other is
// refused with lease_held naming it. Before each request locked the key it
// checks, two PostgreSQL transactions could both find the key free; and
// before a refused body of a group transaction ran again alone, a refusal
// could name a run whose insert was rolled back with its group.
func TestRejectKeyRace(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnvFiles(t, st, leaseDefinitions)
		const n = 24
		runs := make([]string, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				req := protocol.RunRequest{Job: "deploy", Channel: "prod"}
				if i%4 != 0 {
					r, err := e.admin.CreateRun(e.ctx(), &req)
					if err == nil {
						runs[i] = r.ID
					}
					errs[i] = err
					return
				}
				ans, err := e.admin.CreateRuns(e.ctx(), []protocol.RunRequest{req})
				if err == nil {
					if err = ans[0].Err; err == nil {
						runs[i] = ans[0].Run.ID
					}
				}
				errs[i] = err
			})
		}
		wg.Wait()
		winner := ""
		for i := range n {
			if errs[i] == nil {
				require.Empty(t, winner, "two requests for the reject key were accepted: %s and %s", winner, runs[i])
				winner = runs[i]
			}
		}
		require.NotEmpty(t, winner)
		for i := range n {
			if errs[i] != nil {
				p := problemOf(t, errs[i])
				require.Equal(t, protocol.CodeLeaseHeld, p.Code, "request %d", i)
				require.Equal(t, winner, p.RunID, "request %d", i)
			}
		}
	})
}
