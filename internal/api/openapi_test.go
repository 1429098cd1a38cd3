package api_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/api"
	"github.com/jobplane/jobplane/internal/openapi"
	"github.com/jobplane/jobplane/internal/openapi/openapitest"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// TestOpenAPIDescribesEveryRoute holds the routes the API serves against
// the operations of the OpenAPI document, both ways: a route added without
// its description, or a description left behind by a removed route, fails.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	t.Parallel()
	c, err := openapitest.Load()
	require.NoError(t, err)
	h := api.New(api.Config{GitHub: &api.GitHubWebhook{}})
	served := h.Routes()
	// internal/server serves /metrics next to the API handler.
	served = append(served, "GET /metrics")
	slices.Sort(served)
	require.Equal(t, c.Operations(), served)
}

// The document is served, as JSON, without a token.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		resp, err := e.srv.Client().Get(e.srv.URL + openapi.Path)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)
		var doc struct {
			OpenAPI string         `json:"openapi"`
			Paths   map[string]any `json:"paths"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&doc))
		require.Equal(t, "3.1.0", doc.OpenAPI)
		require.Contains(t, doc.Paths, "/v1/runs")
	})
}
