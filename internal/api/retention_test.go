package api_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// GET /v1/admin/prune lists what is due without deleting it; POST deletes
// it. The run stays, with its audit trail, and the chain verifies; the
// routes are an admin's.
func TestAdminPrune(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		ctx := e.ctx()
		run := e.request("echo", `{"message":"x"}`)
		rc := e.runner()
		_, ref := e.claim(rc)
		require.NoError(t, rc.Logs(ctx, ref, protocol.LogsRequest{Seq: 0, Lines: []protocol.LogLine{{Stream: "stdout", Text: "a"}, {Stream: "stdout", Text: "b"}}}))
		_, err := rc.Result(ctx, ref, protocol.ResultRequest{Outcome: "succeeded", RequestID: "r1"})
		require.NoError(t, err)

		plan, err := e.admin.PrunePlan(ctx, 0)
		require.NoError(t, err)
		require.Empty(t, plan.Items, "nothing is due yet")

		e.clock.Advance(25 * time.Hour)
		plan, err = e.admin.PrunePlan(ctx, 10)
		require.NoError(t, err)
		require.Len(t, plan.Items, 1)
		require.Equal(t, "logs", plan.Items[0].Kind)
		require.Equal(t, run.ID, plan.Items[0].RunID)
		require.Equal(t, "echo", plan.Items[0].Job)
		logs, err := e.admin.Logs(ctx, run.ID, 0)
		require.NoError(t, err)
		require.Len(t, logs.Lines, 2, "a dry run deletes nothing")

		// Not an admin: refused, nothing done.
		_, err = e.admin.CreatePrincipal(ctx, protocol.PrincipalRequest{Name: "alice", Kind: "user"})
		require.NoError(t, err)
		tok, err := e.admin.CreatePrincipalToken(ctx, "alice", protocol.PrincipalTokenRequest{})
		require.NoError(t, err)
		alice := &apiclient.Client{BaseURL: e.srv.URL, Token: tok.Token, HTTP: e.srv.Client()}
		_, err = alice.PrunePlan(ctx, 0)
		var ae *apiclient.APIError
		require.True(t, errors.As(err, &ae), "got %v", err)
		require.Equal(t, 403, ae.Status)
		require.Equal(t, protocol.CodeForbidden, ae.Problem.Code)
		_, err = alice.Prune(ctx)
		require.True(t, errors.As(err, &ae), "got %v", err)
		require.Equal(t, 403, ae.Status)
		req, err := http.NewRequest(http.MethodGet, e.srv.URL+"/v1/admin/prune?limit=-1", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := e.srv.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, 400, resp.StatusCode)

		rep, err := e.admin.Prune(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, rep.LogRuns)
		require.Equal(t, 2, rep.LogLines)
		logs, err = e.admin.Logs(ctx, run.ID, 0)
		require.NoError(t, err)
		require.Empty(t, logs.Lines)
		got := e.run(run.ID)
		require.Equal(t, "succeeded", got.State, "the run record stays")
		plan, err = e.admin.PrunePlan(ctx, 0)
		require.NoError(t, err)
		require.Empty(t, plan.Items)

		sys := store.WithSystem(ctx, "test")
		_, err = audit.NewSealer(st, nil).SealAll(sys)
		require.NoError(t, err)
		vr, err := audit.Verify(sys, st, nil)
		require.NoError(t, err)
		require.True(t, vr.OK, "%+v", vr)
	})
}
