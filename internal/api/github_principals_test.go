package api_test

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/github"
	"github.com/jobplane/jobplane/internal/github/fakegithub"
	"github.com/jobplane/jobplane/internal/githubapp"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

var installationFiles = func() map[string]string {
	f := maps.Clone(testDefinitions)
	f["jobs/deploy.yaml"] = "name: deploy\nrun: {command: [\"true\"]}\n"
	f["groups.yaml"] = "groups:\n  operators: {members: [admin, alice]}\n  contractors: {members: [mallory]}\n  reviewers: {members: [alice, carol]}\n"
	f["policies/deploy.yaml"] = "rules:\n  - id: deploy\n    jobs: [deploy]\n    users: [bob, carol]\n    approval: {count: 1, groups: [reviewers]}\n"
	return f
}()

// get answers a GET as some bearer token: status, problem code and body.
func get(t *testing.T, e *testEnv, token, path string) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.srv.URL+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := e.srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var p struct {
		Code string `json:"code"`
	}
	if resp.StatusCode >= 300 {
		require.NoError(t, json.Unmarshal(body, &p), string(body))
	}
	return resp.StatusCode, p.Code, body
}

// TestInstallationPrincipals: an operator gives an installation's people
// principals and tokens in its tenant; they see and act on that tenant's
// runs only, and administer nothing.
func TestInstallationPrincipals(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnvFiles(t, st, installationFiles)
		ctx := e.ctx()
		gh := fakegithub.New(t, fakegithub.Options{AppID: 1, PublicKey: &fakegithub.Key(t, 0).PublicKey, Clock: e.clock})
		gh.AddInstallation(1, "acme", github.Permissions{"metadata": "read"})
		gh.AddInstallation(2, "globex", github.Permissions{"metadata": "read"})
		gh.AddInstallation(3, "initech", github.Permissions{"metadata": "read"})
		deliver := func(d fakegithub.Delivery) {
			_, err := e.gh.HandleDelivery(ctx, githubapp.Delivery{ID: d.GUID, Event: d.Event, Body: d.Body})
			require.NoError(t, err)
		}
		for _, inst := range []int64{1, 2, 3} {
			deliver(fakegithub.NewDelivery("installation", gh.InstallationPayload("created", inst)))
		}
		in1, err := st.GitHubInstallationGet(ctx, 1)
		require.NoError(t, err)

		client := func(inst int64, name string) *apiclient.Client {
			p, err := e.admin.CreateInstallationPrincipal(ctx, inst, protocol.PrincipalRequest{Name: name})
			require.NoError(t, err)
			require.False(t, p.Admin, "an installation's principal is never an admin")
			tok, err := e.admin.CreateInstallationPrincipalToken(ctx, inst, name, protocol.PrincipalTokenRequest{})
			require.NoError(t, err)
			return &apiclient.Client{BaseURL: e.srv.URL, Token: tok.Token, HTTP: e.srv.Client()}
		}
		alice, bob := client(1, "alice"), client(1, "bob")
		carol := client(2, "carol") // installation 2: a reviewer by name, but of another tenant

		// Refusals of the operator routes, each with its code.
		_, err = e.admin.CreateInstallationPrincipal(ctx, 999, protocol.PrincipalRequest{Name: "x"})
		require.True(t, apiclient.IsCode(err, protocol.CodeNotFound), "%v", err)
		_, err = e.admin.CreateInstallationPrincipal(ctx, 1, protocol.PrincipalRequest{Name: "github"})
		require.True(t, apiclient.IsCode(err, protocol.CodeBadRequest), "%v", err)
		_, err = e.admin.CreateInstallationPrincipal(ctx, 1, protocol.PrincipalRequest{Name: "alice"})
		require.True(t, apiclient.IsCode(err, protocol.CodeAlreadyExists), "%v", err)
		_, err = e.admin.CreateInstallationPrincipalToken(ctx, 1, "carol", protocol.PrincipalTokenRequest{})
		require.True(t, apiclient.IsCode(err, protocol.CodeNotFound), "installation 2's principal is unknown in installation 1: %v", err)
		_, err = alice.CreateInstallationPrincipal(ctx, 1, protocol.PrincipalRequest{Name: "eve"})
		require.True(t, apiclient.IsCode(err, protocol.CodeForbidden), "%v", err)
		_, err = alice.CreateInstallationPrincipalToken(ctx, 1, "bob", protocol.PrincipalTokenRequest{})
		require.True(t, apiclient.IsCode(err, protocol.CodeForbidden), "%v", err)
		_, err = alice.CreatePrincipal(ctx, protocol.PrincipalRequest{Name: "eve"})
		require.True(t, apiclient.IsCode(err, protocol.CodeForbidden), "%v", err)
		_, err = alice.CreateRegistrationToken(ctx, protocol.RegistrationTokenRequest{})
		require.True(t, apiclient.IsCode(err, protocol.CodeForbidden), "%v", err)
		_, err = alice.Audit(ctx, 0, 10)
		require.True(t, apiclient.IsCode(err, protocol.CodeForbidden), "%v", err)
		// An admin of an installation's tenant (were there one) is not the operator.
		boss := "jpt_tenant_admin_" + strings.Repeat("y", 16)
		require.NoError(t, st.InTx(ctx, func(tx store.Tx) error {
			now := e.clock.Now()
			p := &store.Principal{ID: id.New(id.Principal, now), Tenant: in1.Tenant, Kind: "user", Name: "boss", Admin: true, CreatedAt: now}
			if err := tx.PrincipalCreate(ctx, p); err != nil {
				return err
			}
			return tx.APITokenCreate(ctx, &store.APIToken{ID: id.New(id.Token, now), PrincipalID: p.ID, Digest: authn.Digest(boss), CreatedAt: now})
		}))
		bossClient := &apiclient.Client{BaseURL: e.srv.URL, Token: boss, HTTP: e.srv.Client()}
		_, err = bossClient.CreateInstallationPrincipal(ctx, 1, protocol.PrincipalRequest{Name: "eve"})
		require.True(t, apiclient.IsCode(err, protocol.CodeForbidden), "%v", err)
		deliver(fakegithub.NewDelivery("installation", gh.InstallationPayload("suspend", 3)))
		_, err = e.admin.CreateInstallationPrincipal(ctx, 3, protocol.PrincipalRequest{Name: "x"})
		require.True(t, apiclient.IsCode(err, protocol.CodeInstallationSuspended), "%v", err)

		// bob requests; alice, a reviewer of her tenant, approves.
		run, err := bob.CreateRun(ctx, &protocol.RunRequest{Job: "deploy", Channel: "prod"})
		require.NoError(t, err)
		require.Equal(t, "pending_approval", string(run.State))
		list, err := alice.ListRuns(ctx, apiclient.ListRunsParams{})
		require.NoError(t, err)
		require.Len(t, list.Runs, 1)
		require.Equal(t, run.ID, list.Runs[0].ID)

		// carol, of installation 2, sees and touches none of it: unknown.
		list, err = carol.ListRuns(ctx, apiclient.ListRunsParams{})
		require.NoError(t, err)
		require.Empty(t, list.Runs)
		_, err = carol.GetRun(ctx, run.ID)
		require.True(t, apiclient.IsCode(err, protocol.CodeNotFound), "%v", err)
		_, err = carol.ApproveRun(ctx, run.ID, "lgtm")
		require.True(t, apiclient.IsCode(err, protocol.CodeNotFound), "%v", err)
		_, err = carol.RejectRun(ctx, run.ID, "no")
		require.True(t, apiclient.IsCode(err, protocol.CodeNotFound), "%v", err)
		_, err = carol.CancelRun(ctx, run.ID)
		require.True(t, apiclient.IsCode(err, protocol.CodeNotFound), "%v", err)
		_, err = carol.Logs(ctx, run.ID, 0)
		require.True(t, apiclient.IsCode(err, protocol.CodeNotFound), "%v", err)
		// Nor does the operator's tenant see it by ID.
		_, err = e.admin.GetRun(ctx, run.ID)
		require.True(t, apiclient.IsCode(err, protocol.CodeNotFound), "%v", err)

		approved, err := alice.ApproveRun(ctx, run.ID, "ok")
		require.NoError(t, err)
		require.Equal(t, "queued", string(approved.State))
		got, err := bob.GetRun(ctx, run.ID)
		require.NoError(t, err)
		require.Equal(t, "queued", string(got.State))
		_, err = bob.CancelRun(ctx, run.ID)
		require.NoError(t, err, "the requester cancels their own run")

		// Revocation: a token belongs to its tenant. The operator revokes
		// an installation's token through that installation only.
		_, err = e.admin.CreateInstallationPrincipal(ctx, 1, protocol.PrincipalRequest{Name: "dave"})
		require.NoError(t, err)
		dtok, err := e.admin.CreateInstallationPrincipalToken(ctx, 1, "dave", protocol.PrincipalTokenRequest{})
		require.NoError(t, err)
		require.NotEmpty(t, dtok.ID)
		dave := &apiclient.Client{BaseURL: e.srv.URL, Token: dtok.Token, HTTP: e.srv.Client()}
		err = e.admin.RevokeToken(ctx, dtok.ID)
		require.True(t, apiclient.IsCode(err, protocol.CodeNotFound), "another tenant's token by the generic route: %v", err)
		err = e.admin.RevokeInstallationToken(ctx, 2, dtok.ID)
		require.True(t, apiclient.IsCode(err, protocol.CodeNotFound), "through the wrong installation: %v", err)
		err = alice.RevokeInstallationToken(ctx, 1, dtok.ID)
		require.True(t, apiclient.IsCode(err, protocol.CodeForbidden), "%v", err)
		_, err = dave.ListRuns(ctx, apiclient.ListRunsParams{})
		require.NoError(t, err, "still valid after the refused revocations")
		require.NoError(t, e.admin.RevokeInstallationToken(ctx, 1, dtok.ID))
		_, err = dave.ListRuns(ctx, apiclient.ListRunsParams{})
		require.True(t, apiclient.IsCode(err, protocol.CodeUnauthorized), "revoked: %v", err)
	})
}

// TestCatalogAPIPerTenant: the jobs and catalogs routes show the caller's
// tenant's definitions: an installation without .jobplane sees the
// server's on the GitHub channel only, never their rejected commits.
func TestCatalogAPIPerTenant(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnvFiles(t, st, installationFiles)
		ctx := e.ctx()
		gh := fakegithub.New(t, fakegithub.Options{AppID: 1, PublicKey: &fakegithub.Key(t, 0).PublicKey, Clock: e.clock})
		gh.AddInstallation(1, "acme", github.Permissions{"metadata": "read"})
		d := fakegithub.NewDelivery("installation", gh.InstallationPayload("created", 1))
		_, err := e.gh.HandleDelivery(ctx, githubapp.Delivery{ID: d.GUID, Event: d.Event, Body: d.Body})
		require.NoError(t, err)
		_, err = e.admin.CreateInstallationPrincipal(ctx, 1, protocol.PrincipalRequest{Name: "alice"})
		require.NoError(t, err)
		tok, err := e.admin.CreateInstallationPrincipalToken(ctx, 1, "alice", protocol.PrincipalTokenRequest{})
		require.NoError(t, err)

		status, _, body := get(t, e, tok.Token, "/v1/jobs")
		require.Equal(t, http.StatusOK, status, string(body))
		var jobs struct {
			Channel string `json:"channel"`
			Jobs    []struct {
				Name string `json:"name"`
			} `json:"jobs"`
		}
		require.NoError(t, json.Unmarshal(body, &jobs))
		require.Equal(t, "prod", jobs.Channel)
		require.NotEmpty(t, jobs.Jobs)
		status, _, _ = get(t, e, tok.Token, "/v1/jobs/deploy")
		require.Equal(t, http.StatusOK, status)
		status, code, _ := get(t, e, tok.Token, "/v1/jobs?channel=staging")
		require.Equal(t, protocol.CodeUnknownChannel, code, status)
		status, code, _ = get(t, e, tok.Token, "/v1/jobs/deploy?channel=staging")
		require.Equal(t, protocol.CodeUnknownChannel, code, status)
		_, err = (&apiclient.Client{BaseURL: e.srv.URL, Token: tok.Token, HTTP: e.srv.Client()}).CreateRun(ctx,
			&protocol.RunRequest{Job: "echo", Channel: "staging"})
		require.True(t, apiclient.IsCode(err, protocol.CodeUnknownChannel), "%v", err)

		status, _, body = get(t, e, tok.Token, "/v1/catalogs")
		require.Equal(t, http.StatusOK, status, string(body))
		var cats protocol.CatalogsView
		require.NoError(t, json.Unmarshal(body, &cats))
		require.Len(t, cats.Channels, 1)
		require.Equal(t, "prod", cats.Channels[0].Channel)
		require.NotEmpty(t, cats.Channels[0].ActiveCommit)
		require.Empty(t, cats.Channels[0].Rejected)
		require.Empty(t, cats.Channels[0].Author)

		status, _, body = get(t, e, tok.Token, "/v1/schedules")
		require.Equal(t, http.StatusOK, status, string(body))
		require.JSONEq(t, `{"schedules":[]}`, string(body), "a tenant without .jobplane has no schedules")
	})
}
