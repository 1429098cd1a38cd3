package apiclient_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/apiclient"
)

// TestActionsIDToken: the token is asked for as actions/core does, with
// the audience and the request token, and a job without id-token: write
// (no variables) gets a clear error.
func TestActionsIDToken(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer req-token" || r.URL.Query().Get("audience") != "jobplane" ||
			r.URL.Query().Get("api-version") != "2.0" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte(`{"count":1,"value":"the.oidc.token"}`))
	}))
	defer srv.Close()
	t.Setenv("ACTIONS_ID_TOKEN_REQUEST_URL", srv.URL+"/idtoken?api-version=2.0")
	t.Setenv("ACTIONS_ID_TOKEN_REQUEST_TOKEN", "req-token")
	tok, err := apiclient.ActionsIDToken(context.Background(), nil, "jobplane")
	require.NoError(t, err)
	require.Equal(t, "the.oidc.token", tok)
	_, err = apiclient.ActionsIDToken(context.Background(), nil, "other")
	require.ErrorContains(t, err, "401")

	t.Setenv("ACTIONS_ID_TOKEN_REQUEST_TOKEN", "")
	_, err = apiclient.ActionsIDToken(context.Background(), nil, "jobplane")
	require.ErrorContains(t, err, "id-token: write")
}
