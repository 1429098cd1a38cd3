package api_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/actionsoidc"
	"github.com/jobplane/jobplane/internal/github/fakegithub"
	"github.com/jobplane/jobplane/internal/githubapp"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// TestActionsExchangeRefusalsOnTheWire: POST /v1/actions/exchange answers
// each refusal with its status and problem+json code, as the OpenAPI
// document declares them (the server is wrapped in its validator).
func TestActionsExchangeRefusalsOnTheWire(t *testing.T) {
	t.Parallel()
	st := testdb.SQLite(t)
	e := newEnv(t, st)
	ctx := context.Background()
	body := []byte(`{"action":"created","installation":{"id":91,"account":{"login":"acme"}},"repositories":[{"id":9,"full_name":"acme/app"}]}`)
	_, err := e.gh.HandleDelivery(ctx, githubapp.Delivery{ID: "d-91", Event: "installation", Body: body})
	require.NoError(t, err)
	in, err := st.GitHubInstallationGet(store.WithSystem(ctx, "test"), 91)
	require.NoError(t, err)
	sha := strings.Repeat("b", 40)
	require.NoError(t, st.ActionsDispatchCreate(store.WithSystem(ctx, "test"), &store.ActionsDispatch{
		AttemptID: "att_wire", RunID: "run_wire", Tenant: in.Tenant, InstallationID: 91, Repo: "acme/app",
		Commit: sha, Workflow: "jobplane.yml", RepoID: 9, OwnerID: 910, Ref: "refs/heads/main", State: store.DispatchSent}))
	run := fakegithub.WorkflowRun{Dispatch: fakegithub.Dispatch{Repo: "acme/app", RepoID: 9, OwnerID: 910,
		Workflow: "jobplane.yml", FullRef: "refs/heads/main", SHA: sha}, RunID: 7, RunAttempt: 1}
	signed := func(mod func(map[string]any)) string {
		c := e.oidc.OIDCClaims(run, actionsoidc.DefaultAudience)
		mod(c)
		return e.oidc.SignOIDC(c)
	}
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	exchange := func(token, attempt string) (int, string) {
		b, err := json.Marshal(protocol.ActionsExchangeRequest{AttemptID: attempt, PublicKey: protocol.EncodeKey(pub)})
		require.NoError(t, err)
		req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/actions/exchange", bytes.NewReader(b))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		return e.send(req)
	}
	now := e.clock.Now().Unix()
	cases := []struct {
		name, token, attempt string
		status               int
		code                 string
	}{
		{"no token", "", "att_wire", http.StatusUnauthorized, protocol.CodeOIDCTokenInvalid},
		{"not a JWT", "not-a-token", "att_wire", http.StatusUnauthorized, protocol.CodeOIDCTokenInvalid},
		{"wrong audience", e.oidc.OIDCToken(run, "https://github.com/acme"), "att_wire", http.StatusUnauthorized, protocol.CodeOIDCAudienceInvalid},
		{"wrong issuer", signed(func(c map[string]any) { c["iss"] = actionsoidc.DefaultIssuer }), "att_wire", http.StatusUnauthorized, protocol.CodeOIDCIssuerInvalid},
		{"expired", signed(func(c map[string]any) { c["exp"] = now - 60 }), "att_wire", http.StatusUnauthorized, protocol.CodeOIDCTokenExpired},
		{"another repository", signed(func(c map[string]any) { c["repository_id"] = "10" }), "att_wire", http.StatusForbidden, protocol.CodeOIDCRepositoryMismatch},
		{"another workflow", signed(func(c map[string]any) {
			c["workflow_ref"] = "acme/app/.github/workflows/evil.yml@refs/heads/main"
		}), "att_wire", http.StatusForbidden, protocol.CodeOIDCWorkflowMismatch},
		{"another event", signed(func(c map[string]any) { c["event_name"] = "push" }), "att_wire", http.StatusForbidden, protocol.CodeOIDCEventMismatch},
		{"attempt never dispatched", e.oidc.OIDCToken(run, actionsoidc.DefaultAudience), "att_other", http.StatusConflict, protocol.CodeAttemptNotDispatched},
	}
	for _, tc := range cases {
		status, code := exchange(tc.token, tc.attempt)
		require.Equal(t, tc.status, status, tc.name)
		require.Equal(t, tc.code, code, tc.name)
	}
}
