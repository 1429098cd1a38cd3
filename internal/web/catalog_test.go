package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/protocol"
)

// The run page's pinned commit opens the job as that commit defines it,
// after the channel has moved on; the catalog shows the active commit and
// the last rejected one with its errors.
func TestPinnedCommitAndCatalog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	v, _, err := e.svc.RequestRun(ctx, e.actor("alice"), &protocol.RunRequest{Job: "greet", Channel: "prod", Params: json.RawMessage(`{"who":"old"}`)})
	require.NoError(t, err)
	pinned := v.Run.Commit

	defs := definitions(e.gates)
	changed := strings.Replace(defs["jobs/greet.yaml"], "description: Says hello, then waits for its gate", "description: Greets in a new way", 1)
	active, err := gitsync.CommitFiles(e.repo, "main", map[string]string{"jobs/greet.yaml": changed}, "new description")
	require.NoError(t, err)
	require.NoError(t, e.srv.Catalogs().RefreshCatalogs(ctx))
	bad, err := gitsync.CommitFiles(e.repo, "main", map[string]string{"jobs/broken.yaml": "name: broken\nrun: {}\n"}, "broken job")
	require.NoError(t, err)
	require.NoError(t, e.srv.Catalogs().RefreshCatalogs(ctx))

	c := e.client()
	c.signIn(e.tokens["alice"])
	_, body := c.get("/runs/" + v.Run.ID)
	require.Contains(t, body, `href="/runs/`+v.Run.ID+`/job"`)
	resp, body := c.get("/runs/" + v.Run.ID + "/job")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, "Says hello, then waits for its gate")
	require.Contains(t, body, pinned[:12])
	require.Contains(t, body, "anyone-greets", "who may run it, under the pinned policies")
	require.Contains(t, body, "<strong>gently</strong>", "the runbook at the pinned commit")

	_, body = c.get("/catalog/prod/greet")
	require.Contains(t, body, "Greets in a new way")
	_, body = c.get("/catalog")
	require.Contains(t, body, active[:12], "the active commit")
	require.Contains(t, body, bad[:12], "the last rejected commit")
	require.Contains(t, body, "jobs/broken.yaml", "with its errors")
	require.Contains(t, body, `href="/catalog/prod/greet"`, "and the channel's jobs")
	require.NotContains(t, body, "ref is only accepted")

	// Another tenant cannot read a commit through a run it cannot see.
	eve := e.client()
	eve.signIn(e.otherTenantUser("eve"))
	resp, _ = eve.get("/runs/" + v.Run.ID + "/job")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}
