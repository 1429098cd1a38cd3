package openapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	pyaml "go.yaml.in/yaml/v3"

	"github.com/jobplane/jobplane/internal/openapi"
)

// The JSON served is the YAML document, value for value: the conversion
// loses no key, anchor or type (an independent YAML parser reads the
// source).
func TestJSONIsTheYAMLDocument(t *testing.T) {
	t.Parallel()
	var fromYAML any
	require.NoError(t, pyaml.Unmarshal(openapi.YAML(), &fromYAML))
	want, err := json.Marshal(fromYAML)
	require.NoError(t, err)
	var got, wantV any
	require.NoError(t, json.Unmarshal(openapi.JSON(), &got))
	require.NoError(t, json.Unmarshal(want, &wantV))
	require.Equal(t, wantV, got)
	doc := got.(map[string]any)
	require.Equal(t, "3.1.0", doc["openapi"])
}

func TestServeHTTP(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	openapi.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, openapi.Path, nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	require.JSONEq(t, string(openapi.JSON()), rec.Body.String())
}
