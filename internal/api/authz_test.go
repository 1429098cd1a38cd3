package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/admin"
	"github.com/jobplane/jobplane/internal/api"
	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/openapi/openapitest"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/server"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

var authzDefinitions = map[string]string{
	"jobs/backfill.yaml": `name: backfill
description: Recompute one account
params:
  type: object
  required: [account]
  additionalProperties: false
  properties:
    account: {type: string, pattern: "^[0-9]{1,12}$"}
run:
  command: ["true"]
`,
	"jobs/migrate.yaml": `name: migrate
description: Needs two leads
run:
  command: ["true"]
`,
	"groups.yaml": `groups:
  operators:
    members: [alice]
    attributes: {accounts: ["1001", "1002"]}
  leads: {members: [carol, dave]}
`,
	"policies/main.yaml": `rules:
  - id: operators-backfill-their-accounts
    jobs: [backfill]
    groups: [operators]
    when: 'request.params.account in groups["operators"].attributes.accounts'
  - id: migrate-with-two-leads
    jobs: [migrate]
    users: ["*"]
    approval: {count: 2, groups: [leads]}
`,
}

type authzEnv struct {
	*testEnv
	users map[string]*apiclient.Client
}

func newAuthzEnv(t *testing.T, st store.Store) *authzEnv {
	t.Helper()
	repo := t.TempDir()
	_, err := gitsync.InitRepo(repo, "main", authzDefinitions, "init")
	require.NoError(t, err)
	defs, err := server.OpenDefinitions(repo, map[string]string{"prod": "main"})
	require.NoError(t, err)
	fc := clock.NewFake(time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC))
	svc, err := control.New(control.Config{Store: st, Clock: fc, Definitions: defs})
	require.NoError(t, err)
	adm := admin.New(st, fc)
	adm.OnRunnersChanged(svc.RunnersChanged)
	require.NoError(t, adm.EnsureAdmin(context.Background(), adminToken))
	srv := newServer(t, api.New(api.Config{Control: svc, Admin: adm, Audit: audit.NewLog(st), Auth: &authn.Authenticator{Store: st, Clock: fc}}))
	e := &authzEnv{testEnv: &testEnv{t: t, store: st, clock: fc, svc: svc, srv: srv, repo: repo,
		admin: &apiclient.Client{BaseURL: srv.URL, Token: adminToken, HTTP: srv.Client()}}, users: map[string]*apiclient.Client{}}
	for _, name := range []string{"alice", "carol", "dave", "mallory"} {
		_, err := e.admin.CreatePrincipal(e.ctx(), protocol.PrincipalRequest{Name: name})
		require.NoError(t, err)
		tok, err := e.admin.CreatePrincipalToken(e.ctx(), name, protocol.PrincipalTokenRequest{})
		require.NoError(t, err)
		e.users[name] = &apiclient.Client{BaseURL: srv.URL, Token: tok.Token, HTTP: srv.Client()}
	}
	return e
}

func problemOf(t *testing.T, err error) protocol.Problem {
	t.Helper()
	var ae *apiclient.APIError
	require.ErrorAs(t, err, &ae)
	return ae.Problem
}

func TestAuthorization(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newAuthzEnv(t, st)
		alice := e.users["alice"]

		t.Run("a parameter constraint from group attributes", func(t *testing.T) {
			run, err := alice.CreateRun(e.ctx(), &protocol.RunRequest{Job: "backfill", Channel: "prod", Params: json.RawMessage(`{"account":"1001"}`)})
			require.NoError(t, err)
			require.Equal(t, "queued", run.State)
			_, err = alice.CreateRun(e.ctx(), &protocol.RunRequest{Job: "backfill", Channel: "prod", Params: json.RawMessage(`{"account":"9999"}`)})
			p := problemOf(t, err)
			require.Equal(t, protocol.CodeDenied, p.Code)
			b, _ := json.Marshal(p.Decision)
			require.Contains(t, string(b), "operators-backfill-their-accounts")
			require.Contains(t, string(b), "when", "the explanation names the condition that failed: %s", b)
			// Someone outside the group is denied whatever the account.
			_, err = e.users["mallory"].CreateRun(e.ctx(), &protocol.RunRequest{Job: "backfill", Channel: "prod", Params: json.RawMessage(`{"account":"1001"}`)})
			require.True(t, apiclient.IsCode(err, protocol.CodeDenied), "got %v", err)
		})

		t.Run("approvals: two distinct leads, never the requester", func(t *testing.T) {
			run, err := alice.CreateRun(e.ctx(), &protocol.RunRequest{Job: "migrate", Channel: "prod"})
			require.NoError(t, err)
			require.Equal(t, "pending_approval", run.State)
			require.Empty(t, run.Attempts, "a run enters the queue only once approved")
			require.NotEmpty(t, run.WaitingFor)

			_, err = alice.ApproveRun(e.ctx(), run.ID, "me")
			require.Equal(t, protocol.CodeSelfApproval, problemOf(t, err).Code)
			_, err = e.users["mallory"].ApproveRun(e.ctx(), run.ID, "")
			require.Equal(t, protocol.CodeNotAnApprover, problemOf(t, err).Code)

			got, err := e.users["carol"].ApproveRun(e.ctx(), run.ID, "looks fine")
			require.NoError(t, err)
			require.Equal(t, "pending_approval", got.State)
			_, err = e.users["carol"].ApproveRun(e.ctx(), run.ID, "again")
			require.True(t, apiclient.IsCode(err, protocol.CodeAlreadyExists), "got %v", err)

			got, err = e.users["dave"].ApproveRun(e.ctx(), run.ID, "ok")
			require.NoError(t, err)
			require.Equal(t, "queued", got.State)
			require.Len(t, got.Attempts, 1)
			require.Len(t, got.Approvals, 2)
			require.Equal(t, "carol", got.Approvals[0].Approver)
			require.Equal(t, "looks fine", got.Approvals[0].Comment)

			rc := e.runner()
			for {
				asg, ref := e.claim(rc)
				if asg.RunID == run.ID {
					break
				}
				_, err := rc.Result(e.ctx(), ref, protocol.ResultRequest{Outcome: "succeeded"})
				require.NoError(t, err)
			}
		})

		t.Run("a rejection ends the run", func(t *testing.T) {
			run, err := alice.CreateRun(e.ctx(), &protocol.RunRequest{Job: "migrate", Channel: "prod"})
			require.NoError(t, err)
			got, err := e.users["dave"].RejectRun(e.ctx(), run.ID, "not today")
			require.NoError(t, err)
			require.Equal(t, "rejected", got.State)
			_, err = e.users["carol"].ApproveRun(e.ctx(), run.ID, "")
			require.True(t, apiclient.IsCode(err, protocol.CodeInvalidState), "got %v", err)
		})

		t.Run("an approval not given in time expires the run", func(t *testing.T) {
			run, err := alice.CreateRun(e.ctx(), &protocol.RunRequest{Job: "migrate", Channel: "prod"})
			require.NoError(t, err)
			e.clock.Advance(23 * time.Hour)
			n, err := e.svc.ExpireApprovals(e.ctx())
			require.NoError(t, err)
			require.Zero(t, n)
			e.clock.Advance(2 * time.Hour)
			n, err = e.svc.ExpireApprovals(e.ctx())
			require.NoError(t, err)
			require.GreaterOrEqual(t, n, 1)
			require.Equal(t, "expired", e.run(run.ID).State)
		})

		t.Run("a permission revoked before dispatch denies the run", func(t *testing.T) {
			run, err := alice.CreateRun(e.ctx(), &protocol.RunRequest{Job: "backfill", Channel: "prod", Params: json.RawMessage(`{"account":"1002"}`)})
			require.NoError(t, err)
			require.Equal(t, "queued", run.State)
			groups := "groups:\n  operators:\n    members: [alice]\n    attributes: {accounts: [\"1001\"]}\n  leads: {members: [carol, dave]}\n"
			_, err = gitsync.CommitFiles(e.repo, "main", map[string]string{"groups.yaml": groups}, "account 1002 moves to another team")
			require.NoError(t, err)
			rc := e.runner()
			for {
				asg, err := rc.Claim(e.ctx(), 0, "")
				require.NoError(t, err)
				if asg == nil {
					break
				}
				require.NotEqual(t, run.ID, asg.RunID, "the revoked run must not be handed out")
				_, err = rc.Result(e.ctx(), apiclient.AttemptRef{RunID: asg.RunID, AttemptID: asg.AttemptID, LeaseToken: asg.Lease.Token}, protocol.ResultRequest{Outcome: "succeeded"})
				require.NoError(t, err)
			}
			got := e.run(run.ID)
			require.Equal(t, "denied", got.State)
			require.Equal(t, "cancelled", got.Attempts[0].State)
			var rec struct {
				Request  struct{ Allowed bool }  `json:"request"`
				Dispatch *struct{ Allowed bool } `json:"dispatch"`
			}
			require.NoError(t, json.Unmarshal(got.Decision, &rec))
			require.True(t, rec.Request.Allowed)
			require.NotNil(t, rec.Dispatch, "both decisions are kept")
			require.False(t, rec.Dispatch.Allowed)
		})
	})
}

func newServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(openapitest.Handler(t, h))
	t.Cleanup(srv.Close)
	return srv
}
