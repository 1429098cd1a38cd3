package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/admin"
	"github.com/jobplane/jobplane/internal/api"
	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/github"
	"github.com/jobplane/jobplane/internal/github/fakegithub"
	"github.com/jobplane/jobplane/internal/githubapp"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/openapi/openapitest"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// TestInstallationRegistrationTokens: only an admin of the operator's
// tenant makes registration tokens for an installation, and the runner
// they register belongs to the installation's tenant.
func TestInstallationRegistrationTokens(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		fc := clock.NewFake(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
		svc, app := wire(t, control.Config{Store: st, Clock: fc})
		adm := admin.New(st, fc)
		adm.OnRunnersChanged(svc.RunnersChanged)
		srv := httptest.NewServer(openapitest.Handler(t, api.New(api.Config{Control: svc, Admin: adm, Audit: audit.NewLog(st), GitHubApp: app, Auth: &authn.Authenticator{Store: st, Clock: fc},
			GitHub: &api.GitHubWebhook{Secrets: github.WebhookSecrets{Current: []byte(ghSecret)}, Clock: fc}})))
		t.Cleanup(srv.Close)
		key := fakegithub.Key(t, 0)
		gh := fakegithub.New(t, fakegithub.Options{AppID: 1, PublicKey: &key.PublicKey, Clock: fc})
		gh.AddInstallation(1, "acme", github.Permissions{"metadata": "read"})
		gh.AddInstallation(2, "globex", github.Permissions{"metadata": "read"})
		for _, inst := range []int64{1, 2} {
			d := fakegithub.NewDelivery("installation", gh.InstallationPayload("created", inst))
			_, err := app.HandleDelivery(ctx, githubapp.Delivery{ID: d.GUID, Event: d.Event, Body: d.Body})
			require.NoError(t, err)
		}
		operator := "jpt_operator_" + strings.Repeat("x", 16)
		require.NoError(t, adm.EnsureAdmin(ctx, operator))
		// An admin of an installation's tenant is not the operator.
		in1, err := st.GitHubInstallationGet(ctx, 1)
		require.NoError(t, err)
		tenantAdmin := "jpt_tenant_admin_" + strings.Repeat("y", 16)
		require.NoError(t, st.InTx(ctx, func(tx store.Tx) error {
			now := fc.Now()
			p := &store.Principal{ID: id.New(id.Principal, now), Tenant: in1.Tenant, Kind: "user", Name: "boss", Admin: true, CreatedAt: now}
			if err := tx.PrincipalCreate(ctx, p); err != nil {
				return err
			}
			return tx.APITokenCreate(ctx, &store.APIToken{ID: id.New(id.Token, now), PrincipalID: p.ID, Digest: authn.Digest(tenantAdmin), CreatedAt: now})
		}))

		post := func(token, inst string) (int, string, protocol.TokenResponse) {
			body, _ := json.Marshal(protocol.RegistrationTokenRequest{SelfHosted: true, AllowedRepos: []string{"acme/api"}})
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/github/installations/"+inst+"/registration-tokens", bytes.NewReader(body))
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			var out struct {
				protocol.TokenResponse
				Code string `json:"code"`
			}
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
			return resp.StatusCode, out.Code, out.TokenResponse
		}
		status, code, _ := post(tenantAdmin, "1")
		require.Equal(t, http.StatusForbidden, status)
		require.Equal(t, protocol.CodeForbidden, code)
		status, code, _ = post("jpt_nobody_"+strings.Repeat("z", 16), "1")
		require.Equal(t, http.StatusUnauthorized, status, code)
		status, code, _ = post(operator, "999")
		require.Equal(t, http.StatusNotFound, status)
		require.Equal(t, protocol.CodeNotFound, code)
		status, code, _ = post(operator, "-1")
		require.Equal(t, http.StatusBadRequest, status)
		require.Equal(t, protocol.CodeBadRequest, code)

		status, _, tok := post(operator, "1")
		require.Equal(t, http.StatusCreated, status)
		rn, err := adm.Register(ctx, tok.Token, &protocol.RegisterRequest{PublicKey: protocol.EncodeKey(make([]byte, 32)), Name: "acme-ci"})
		require.NoError(t, err)
		require.Equal(t, in1.Tenant, rn.Tenant)
		require.True(t, rn.SelfHosted)
		require.Equal(t, []string{"acme/api"}, rn.AllowedRepos)

		d := fakegithub.NewDelivery("installation", gh.InstallationPayload("suspend", 2))
		_, err = app.HandleDelivery(ctx, githubapp.Delivery{ID: d.GUID, Event: d.Event, Body: d.Body})
		require.NoError(t, err)
		status, code, _ = post(operator, "2")
		require.Equal(t, http.StatusForbidden, status)
		require.Equal(t, protocol.CodeInstallationSuspended, code)
	})
}
