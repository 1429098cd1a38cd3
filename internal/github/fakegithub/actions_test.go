package fakegithub_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/github"
	"github.com/jobplane/jobplane/internal/github/fakegithub"
)

// TestFakeWorkflowDispatch: the dispatch endpoint enforces the token's
// repository and actions: write, knows its workflows, refs and inputs, and
// records what it accepted.
func TestFakeWorkflowDispatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// Installation 1 (acme) gained Actions: write; 2 (globex) did not.
	b.fake.AddInstallation(1, "acme", github.Permissions{"metadata": "read", "checks": "write", "actions": "write"})
	b.fake.AddWorkflow(fakegithub.Workflow{Repo: b.repoA, File: "jobplane.yml", Inputs: []string{"run", "attempt", "commit"}})
	b.fake.AddWorkflow(fakegithub.Workflow{Repo: b.repoB, File: "jobplane.yml", Inputs: []string{"run"}})

	inputs := map[string]string{"run": "r1", "attempt": "a1", "commit": b.shaA}
	require.NoError(t, b.app.DispatchWorkflow(ctx, b.instA, b.repoA, "jobplane.yml", "main", inputs))
	last := b.lastCall()
	require.Equal(t, http.StatusNoContent, last.Status)
	d := b.fake.Dispatches()
	require.Len(t, d, 1)
	require.Equal(t, fakegithub.Dispatch{Repo: b.repoA, RepoID: d[0].RepoID, OwnerID: 10, Workflow: "jobplane.yml",
		Ref: "main", FullRef: "refs/heads/main", SHA: b.shaA, Inputs: inputs, Installation: b.instA}, d[0])
	// The token asked for was narrowed to the repository and actions: write.
	var tokReq *fakegithub.Request
	for _, r := range b.fake.Requests() {
		if r.Auth == "app" && r.TokenPermissions["actions"] != "" {
			tokReq = &r
		}
	}
	require.NotNil(t, tokReq)
	require.Equal(t, []string{"app"}, tokReq.TokenRepositories)
	require.Equal(t, github.Permissions{"actions": "write"}, tokReq.TokenPermissions)

	// Refusals.
	require.ErrorIs(t, b.app.DispatchWorkflow(ctx, b.instA, b.repoA, "other.yml", "main", nil), github.ErrNotFound)
	require.ErrorIs(t, b.app.DispatchWorkflow(ctx, b.instA, b.repoA, "jobplane.yml", "nope", nil), github.ErrInvalid)
	require.ErrorIs(t, b.app.DispatchWorkflow(ctx, b.instA, b.repoA, "jobplane.yml", "main", map[string]string{"x": "1"}), github.ErrInvalid)
	// Globex lacks Actions: its token cannot even be asked for it (422).
	require.ErrorIs(t, b.app.DispatchWorkflow(ctx, b.instB, b.repoB, "jobplane.yml", "main", nil), github.ErrInvalid)
	// A token without actions: write is 403; another installation's
	// repository 404.
	_, tokChecks := rawToken(t, b, b.instA, `{"repositories":["app"],"permissions":{"checks":"write"}}`)
	require.Equal(t, http.StatusForbidden, call(t, b, "POST", "/repos/acme/app/actions/workflows/jobplane.yml/dispatches", tokChecks, `{"ref":"main"}`))
	_, tokA := rawToken(t, b, b.instA, `{"repositories":["app"],"permissions":{"actions":"write"}}`)
	require.Equal(t, http.StatusNotFound, call(t, b, "POST", "/repos/globex/svc/actions/workflows/jobplane.yml/dispatches", tokA, `{"ref":"main"}`))
	require.Equal(t, http.StatusUnprocessableEntity, call(t, b, "POST", "/repos/acme/app/actions/workflows/jobplane.yml/dispatches", tokA, `{"inputs":{}}`))
	require.Equal(t, http.StatusUnprocessableEntity, call(t, b, "POST", "/repos/acme/app/actions/workflows/jobplane.yml/dispatches", tokA, `{"ref":"main","inputs":{"run":1}}`))
	require.Len(t, b.fake.Dispatches(), 1)
}

// TestFakeOIDCIssuer: discovery names the issuer and its JWKS; tokens of a
// simulated run carry GitHub's documented claims.
func TestFakeOIDCIssuer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var disc map[string]any
	resp, err := http.Get(b.fake.OIDCIssuer() + "/.well-known/openid-configuration")
	require.NoError(t, err)
	require.NoError(t, decodeJSON(resp, &disc))
	require.Equal(t, b.fake.OIDCIssuer(), disc["issuer"])
	require.Equal(t, b.fake.OIDCIssuer()+"/.well-known/jwks", disc["jwks_uri"])
	var jwks struct {
		Keys []map[string]any `json:"keys"`
	}
	resp, err = http.Get(b.fake.OIDCIssuer() + "/.well-known/jwks")
	require.NoError(t, err)
	require.NoError(t, decodeJSON(resp, &jwks))
	require.Len(t, jwks.Keys, 1)
	require.Equal(t, "RSA", jwks.Keys[0]["kty"])
	require.Equal(t, b.fake.OIDCKeyID(), jwks.Keys[0]["kid"])
	require.Nil(t, jwks.Keys[0]["d"], "no private part")

	run := b.fake.StartWorkflowRun(fakegithub.Dispatch{Repo: b.repoA, RepoID: 7, OwnerID: 10, Workflow: "jobplane.yml",
		Ref: "main", FullRef: "refs/heads/main", SHA: b.shaA})
	c := b.fake.OIDCClaims(run, "jobplane")
	require.Equal(t, "acme/app/.github/workflows/jobplane.yml@refs/heads/main", c["workflow_ref"])
	require.Equal(t, "workflow_dispatch", c["event_name"])
	require.Equal(t, "7", c["repository_id"])
	require.Equal(t, "10", c["repository_owner_id"])
	require.Equal(t, "repo:acme/app:ref:refs/heads/main", c["sub"])
	require.NotEqual(t, c["jti"], b.fake.OIDCClaims(run, "jobplane")["jti"], "each token has its own jti")
	require.NotEqual(t, run.RunID, b.fake.StartWorkflowRun(run.Dispatch).RunID)
}

func decodeJSON(resp *http.Response, v any) error {
	defer resp.Body.Close()
	return jsonDecode(resp, v)
}

func jsonDecode(resp *http.Response, v any) error { return json.NewDecoder(resp.Body).Decode(v) }
