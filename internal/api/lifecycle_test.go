package api_test

import (
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

func TestLifecycle(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		t.Run("succeeds with logs", func(t *testing.T) {
			e := newEnv(t, st)
			run := e.request("echo", `{"message":"hello there"}`)
			require.Equal(t, "queued", run.State)
			require.JSONEq(t, `{"message":"hello there"}`, string(run.Params))
			require.Len(t, run.Commit, 40)

			rc := e.runner()
			asg, ref := e.claim(rc)
			require.Equal(t, run.ID, asg.RunID)
			require.Equal(t, 1, asg.AttemptNumber)
			require.Equal(t, []string{"sh", "-c", `echo "$JOBPLANE_PARAM_MESSAGE"`}, asg.Job.Command)
			require.Equal(t, 600, asg.Job.TimeoutSeconds)
			require.Equal(t, 30, asg.Lease.TTLSeconds)
			require.Equal(t, e.clock.Now().Add(30*time.Second), asg.Lease.ExpiresAt)
			require.Equal(t, e.clock.Now().Add(10*time.Minute), asg.Lease.Deadline)
			require.Equal(t, "running", e.run(run.ID).State)

			e.clock.Advance(20 * time.Second)
			rn, err := rc.Renew(e.ctx(), ref)
			require.NoError(t, err)
			require.Equal(t, e.clock.Now().Add(30*time.Second), rn.ExpiresAt)
			require.False(t, rn.CancelRequested)

			lines := protocol.LogsRequest{Seq: 1, Lines: []protocol.LogLine{{At: e.clock.Now(), Stream: "stdout", Text: "hello there"}, {At: e.clock.Now(), Stream: "stderr", Text: "warn"}}}
			require.NoError(t, rc.Logs(e.ctx(), ref, lines))
			require.NoError(t, rc.Logs(e.ctx(), ref, lines)) // repeated seq: ignored

			res, err := rc.Result(e.ctx(), ref, protocol.ResultRequest{Outcome: "succeeded", ExitCode: 0, Summary: "ok", RequestID: "r1"})
			require.NoError(t, err)
			require.Equal(t, "succeeded", res.RunState)
			// The same result again is acknowledged.
			res, err = rc.Result(e.ctx(), ref, protocol.ResultRequest{Outcome: "succeeded", ExitCode: 0, Summary: "ok", RequestID: "r1"})
			require.NoError(t, err)
			require.Equal(t, "succeeded", res.RunState)
			// A different one conflicts.
			_, err = rc.Result(e.ctx(), ref, protocol.ResultRequest{Outcome: "failed", ExitCode: 1, Summary: "no"})
			require.True(t, apiclient.IsCode(err, protocol.CodeResultConflict), "got %v", err)

			got := e.run(run.ID)
			require.Equal(t, "succeeded", got.State)
			require.NotNil(t, got.FinishedAt)
			require.Len(t, got.Attempts, 1)
			require.Equal(t, "succeeded", got.Attempts[0].State)

			logs, err := e.admin.Logs(e.ctx(), run.ID, 0)
			require.NoError(t, err)
			require.Len(t, logs.Lines, 2)
			require.Equal(t, "hello there", logs.Lines[0].Text)
			require.Equal(t, "stderr", logs.Lines[1].Stream)

			var seen []string
			state, err := e.admin.FollowLogs(e.ctx(), run.ID, 0, func(l protocol.RunLogLine) error { seen = append(seen, l.Text); return nil })
			require.NoError(t, err)
			require.Equal(t, "succeeded", state)
			require.Equal(t, []string{"hello there", "warn"}, seen)
		})

		t.Run("retries failures then fails", func(t *testing.T) {
			e := newEnv(t, st)
			run := e.request("flaky", "")
			rc := e.runner()
			for i := 1; i <= 3; i++ {
				asg, ref := e.claim(rc)
				require.Equal(t, i, asg.AttemptNumber)
				res, err := rc.Result(e.ctx(), ref, protocol.ResultRequest{Outcome: "failed", ExitCode: 1, Summary: "exit status 1"})
				require.NoError(t, err)
				if i < 3 {
					require.Equal(t, "queued", res.RunState)
					// Backoff: not claimable until 5 s have passed.
					asg, err := rc.Claim(e.ctx(), 0, "")
					require.NoError(t, err)
					require.Nil(t, asg)
					e.clock.Advance(5 * time.Second)
				} else {
					require.Equal(t, "failed", res.RunState)
				}
			}
			got := e.run(run.ID)
			require.Equal(t, "failed", got.State)
			require.Len(t, got.Attempts, 3)
		})

		t.Run("expired lease is retried and late calls refused", func(t *testing.T) {
			e := newEnv(t, st)
			run := e.request("flaky", "")
			a := e.runner()
			b := e.runner()
			_, refA := e.claim(a)
			e.clock.Advance(10 * time.Second)
			// Expired but not yet reaped: the lease is past its expiry.
			_, err := a.Renew(e.ctx(), refA)
			require.True(t, apiclient.IsCode(err, protocol.CodeLeaseExpired), "got %v", err)
			n, err := e.svc.Reap(e.ctx())
			require.NoError(t, err)
			require.Equal(t, 1, n)
			n, err = e.svc.Reap(e.ctx())
			require.NoError(t, err)
			require.Equal(t, 0, n, "a reaped attempt is not reaped twice")

			e.clock.Advance(5 * time.Second)
			asg, refB := e.claim(b)
			require.Equal(t, 2, asg.AttemptNumber)
			// The first attempt's late result is refused and changes nothing.
			_, err = a.Result(e.ctx(), refA, protocol.ResultRequest{Outcome: "succeeded"})
			require.True(t, apiclient.IsCode(err, protocol.CodeLeaseExpired), "got %v", err)
			err = a.Logs(e.ctx(), refA, protocol.LogsRequest{Seq: 1, Lines: []protocol.LogLine{{Stream: "stdout", Text: "late"}}})
			require.True(t, apiclient.IsCode(err, protocol.CodeLeaseExpired), "got %v", err)
			// Runner A naming B's attempt with its own lease token is stale.
			_, err = a.Renew(e.ctx(), apiclient.AttemptRef{RunID: refB.RunID, AttemptID: refB.AttemptID, LeaseToken: refA.LeaseToken})
			require.True(t, apiclient.IsCode(err, protocol.CodeAttemptStale), "got %v", err)
			_, err = b.Result(e.ctx(), refB, protocol.ResultRequest{Outcome: "succeeded"})
			require.NoError(t, err)
			got := e.run(run.ID)
			require.Equal(t, "succeeded", got.State)
			require.Equal(t, "expired", got.Attempts[0].State)
		})

		t.Run("renew never passes the deadline and the run times out", func(t *testing.T) {
			e := newEnv(t, st)
			run := e.request("echo", "")
			rc := e.runner()
			asg, ref := e.claim(rc)
			for e.clock.Now().Add(20 * time.Second).Before(asg.Lease.Deadline) {
				e.clock.Advance(20 * time.Second)
				rn, err := rc.Renew(e.ctx(), ref)
				require.NoError(t, err)
				require.False(t, rn.ExpiresAt.After(asg.Lease.Deadline))
			}
			e.clock.Advance(time.Minute)
			_, err := e.svc.Reap(e.ctx())
			require.NoError(t, err)
			require.Equal(t, "timed_out", e.run(run.ID).State)
		})

		t.Run("cancel queued and running", func(t *testing.T) {
			e := newEnv(t, st)
			q := e.request("echo", "")
			r, err := e.admin.CancelRun(e.ctx(), q.ID)
			require.NoError(t, err)
			require.Equal(t, "cancelled", r.State)
			rc := e.runner()
			asg, err := rc.Claim(e.ctx(), 0, "")
			require.NoError(t, err)
			require.Nil(t, asg, "a cancelled run is not claimable")

			run := e.request("echo", "")
			_, ref := e.claim(rc)
			r, err = e.admin.CancelRun(e.ctx(), run.ID)
			require.NoError(t, err)
			require.Equal(t, "running", r.State)
			rn, err := rc.Renew(e.ctx(), ref)
			require.NoError(t, err)
			require.True(t, rn.CancelRequested)
			hb, err := rc.Heartbeat(e.ctx(), protocol.HeartbeatRequest{Status: "busy", Attempts: []string{ref.AttemptID}})
			require.NoError(t, err)
			require.Equal(t, []string{ref.AttemptID}, hb.CancelAttempts)
			res, err := rc.Result(e.ctx(), ref, protocol.ResultRequest{Outcome: "failed", ExitCode: -1, Summary: "cancelled"})
			require.NoError(t, err)
			require.Equal(t, "cancelled", res.RunState)
		})

		t.Run("relinquish gives a fresh attempt that is not a retry", func(t *testing.T) {
			e := newEnv(t, st)
			run := e.request("echo", "")
			rc := e.runner()
			_, ref := e.claim(rc)
			require.NoError(t, rc.Relinquish(e.ctx(), ref, "shutting down"))
			asg, ref2 := e.claim(rc)
			require.Equal(t, 2, asg.AttemptNumber)
			_, err := rc.Result(e.ctx(), ref2, protocol.ResultRequest{Outcome: "succeeded"})
			require.NoError(t, err)
			got := e.run(run.ID)
			require.Equal(t, "succeeded", got.State)
			require.Equal(t, "relinquished", got.Attempts[0].State)
		})

		t.Run("claim eligibility by labels", func(t *testing.T) {
			e := newEnv(t, st)
			e.request("gpu", "")
			plain := e.runner()
			asg, err := plain.Claim(e.ctx(), 0, "")
			require.NoError(t, err)
			require.Nil(t, asg)
			gpu := e.runner("gpu", "linux")
			asg, _ = e.claim(gpu)
			require.Equal(t, "gpu", asg.Job.Name)
		})

		t.Run("repeated claim request id returns the same attempt", func(t *testing.T) {
			e := newEnv(t, st)
			e.request("echo", "")
			rc := e.runner()
			first, err := rc.Claim(e.ctx(), 0, "claim-1")
			require.NoError(t, err)
			require.NotNil(t, first)
			again, err := rc.Claim(e.ctx(), 0, "claim-1")
			require.NoError(t, err)
			require.NotNil(t, again)
			require.Equal(t, first.AttemptID, again.AttemptID)
			// The token was rotated: only the latest answer's token works.
			_, err = rc.Renew(e.ctx(), apiclient.AttemptRef{RunID: first.RunID, AttemptID: first.AttemptID, LeaseToken: first.Lease.Token})
			require.True(t, apiclient.IsCode(err, protocol.CodeAttemptStale), "got %v", err)
			_, err = rc.Renew(e.ctx(), apiclient.AttemptRef{RunID: again.RunID, AttemptID: again.AttemptID, LeaseToken: again.Lease.Token})
			require.NoError(t, err)
		})

		t.Run("disable expires leases and refuses the runner", func(t *testing.T) {
			e := newEnv(t, st)
			run := e.request("flaky", "")
			rc := e.runner()
			_, ref := e.claim(rc)
			require.NoError(t, e.admin.DisableRunner(e.ctx(), rc.RunnerID))
			got := e.run(run.ID)
			require.Equal(t, "expired", got.Attempts[0].State)
			require.Equal(t, "queued", got.State)
			_, err := rc.Renew(e.ctx(), ref)
			require.True(t, apiclient.IsCode(err, protocol.CodeRunnerDisabled), "got %v", err)
			require.NoError(t, e.admin.EnableRunner(e.ctx(), rc.RunnerID))
			_, err = rc.Renew(e.ctx(), ref)
			require.True(t, apiclient.IsCode(err, protocol.CodeLeaseExpired), "got %v", err)
		})

		t.Run("conflicting results: the first committed wins", func(t *testing.T) {
			e := newEnv(t, st)
			run := e.request("echo", "")
			rc := e.runner()
			_, ref := e.claim(rc)
			var wg sync.WaitGroup
			codes := make(chan string, 50)
			for i := range 50 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					outcome, exit := "succeeded", 0
					if i%2 == 1 {
						outcome, exit = "failed", 1
					}
					_, err := rc.Result(e.ctx(), ref, protocol.ResultRequest{Outcome: outcome, ExitCode: exit, Summary: outcome})
					if err == nil {
						codes <- outcome
					} else if apiclient.IsCode(err, protocol.CodeResultConflict) {
						codes <- "conflict"
					} else {
						codes <- err.Error()
					}
				}()
			}
			wg.Wait()
			close(codes)
			counts := map[string]int{}
			for c := range codes {
				counts[c]++
			}
			require.Equal(t, 50, counts["succeeded"]+counts["failed"]+counts["conflict"], "unexpected answers: %v", counts)
			require.True(t, counts["succeeded"] == 0 || counts["failed"] == 0, "both outcomes accepted: %v", counts)
			got := e.run(run.ID)
			require.Contains(t, []string{"succeeded", "failed"}, got.State)
			if counts["succeeded"] > 0 {
				require.Equal(t, "succeeded", got.State)
			}
		})
	})
}

func TestRequests(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		t.Run("invalid params name the field", func(t *testing.T) {
			_, err := e.admin.CreateRun(e.ctx(), &protocol.RunRequest{Job: "echo", Channel: "prod", Params: json.RawMessage(`{"message":"NOPE!"}`)})
			require.True(t, apiclient.IsCode(err, protocol.CodeInvalidParams), "got %v", err)
			var ae *apiclient.APIError
			require.ErrorAs(t, err, &ae)
			require.Equal(t, 422, ae.Status)
			require.Equal(t, "message", ae.Problem.Field)
			_, err = e.admin.CreateRun(e.ctx(), &protocol.RunRequest{Job: "echo", Channel: "prod", Params: json.RawMessage(`{"other":1}`)})
			require.True(t, apiclient.IsCode(err, protocol.CodeInvalidParams), "got %v", err)
		})
		t.Run("defaults apply", func(t *testing.T) {
			run := e.request("echo", "")
			require.JSONEq(t, `{"message":"hi"}`, string(run.Params))
		})
		t.Run("denied is kept", func(t *testing.T) {
			_, err := e.admin.CreateRun(e.ctx(), &protocol.RunRequest{Job: "secret", Channel: "prod"})
			require.True(t, apiclient.IsCode(err, protocol.CodeDenied), "got %v", err)
			var ae *apiclient.APIError
			require.ErrorAs(t, err, &ae)
			require.Equal(t, 403, ae.Status)
			require.NotEmpty(t, ae.Problem.RunID)
			require.NotNil(t, ae.Problem.Decision)
			run := e.run(ae.Problem.RunID)
			require.Equal(t, "denied", run.State)
			require.Empty(t, run.Attempts)
		})
		t.Run("deny overrides allow", func(t *testing.T) {
			_, err := e.admin.CreatePrincipal(e.ctx(), protocol.PrincipalRequest{Name: "mallory"})
			require.NoError(t, err)
			tok, err := e.admin.CreatePrincipalToken(e.ctx(), "mallory", protocol.PrincipalTokenRequest{})
			require.NoError(t, err)
			m := &apiclient.Client{BaseURL: e.srv.URL, Token: tok.Token, HTTP: e.srv.Client()}
			_, err = m.CreateRun(e.ctx(), &protocol.RunRequest{Job: "echo", Channel: "prod"})
			require.True(t, apiclient.IsCode(err, protocol.CodeDenied), "got %v", err)
			// Not an admin: may not create registration tokens.
			_, err = m.CreateRegistrationToken(e.ctx(), protocol.RegistrationTokenRequest{})
			require.True(t, apiclient.IsCode(err, protocol.CodeForbidden), "got %v", err)
			// A revoked token stops working.
			require.NoError(t, e.admin.RevokeToken(e.ctx(), tok.ID))
			_, err = m.ListRuns(e.ctx(), apiclient.ListRunsParams{})
			require.True(t, apiclient.IsCode(err, protocol.CodeUnauthorized), "got %v", err)
		})
		t.Run("idempotency key", func(t *testing.T) {
			req := &protocol.RunRequest{Job: "echo", Channel: "prod", IdempotencyKey: "deploy-42"}
			a, err := e.admin.CreateRun(e.ctx(), req)
			require.NoError(t, err)
			b, err := e.admin.CreateRun(e.ctx(), req)
			require.NoError(t, err)
			require.Equal(t, a.ID, b.ID)
			_, err = e.admin.CreateRun(e.ctx(), &protocol.RunRequest{Job: "flaky", Channel: "prod", IdempotencyKey: "deploy-42"})
			require.True(t, apiclient.IsCode(err, protocol.CodeIdempotencyConflict), "got %v", err)
		})
		t.Run("unknown job and channel", func(t *testing.T) {
			_, err := e.admin.CreateRun(e.ctx(), &protocol.RunRequest{Job: "nope", Channel: "prod"})
			require.True(t, apiclient.IsCode(err, protocol.CodeUnknownJob), "got %v", err)
			_, err = e.admin.CreateRun(e.ctx(), &protocol.RunRequest{Job: "echo", Channel: "nope"})
			require.True(t, apiclient.IsCode(err, protocol.CodeUnknownChannel), "got %v", err)
		})
		t.Run("list pages newest first", func(t *testing.T) {
			for range 5 {
				e.request("echo", "")
			}
			page, err := e.admin.ListRuns(e.ctx(), apiclient.ListRunsParams{Job: "echo", Limit: 3})
			require.NoError(t, err)
			require.Len(t, page.Runs, 3)
			require.NotEmpty(t, page.NextCursor)
			require.Greater(t, page.Runs[0].ID, page.Runs[1].ID)
			next, err := e.admin.ListRuns(e.ctx(), apiclient.ListRunsParams{Job: "echo", Limit: 3, Cursor: page.NextCursor})
			require.NoError(t, err)
			require.NotEmpty(t, next.Runs)
			require.Less(t, next.Runs[0].ID, page.Runs[2].ID)
		})
	})
}

func TestUnknownRoutesAreProblems(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testdb.SQLite(t))
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/v1/nothing", nil)
	code, pc := e.send(req)
	require.Equal(t, 404, code)
	require.Equal(t, protocol.CodeNotFound, pc)
	req, _ = http.NewRequest(http.MethodDelete, e.srv.URL+"/v1/runs", nil)
	code, pc = e.send(req)
	require.Equal(t, 405, code)
	require.Equal(t, protocol.CodeMethodNotAllowed, pc)
	req, _ = http.NewRequest(http.MethodGet, e.srv.URL+"/healthz", nil)
	code, _ = e.send(req)
	require.Equal(t, 200, code)
	req, _ = http.NewRequest(http.MethodGet, e.srv.URL+"/readyz", nil)
	code, _ = e.send(req)
	require.Equal(t, 200, code)
}
