package metrics_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jobplane/jobplane/internal/metrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestInstrument: requests are counted by route pattern and status, an
// unrouted path is "unmatched", and a streaming handler can still flush.
func TestInstrument(t *testing.T) {
	t.Parallel()
	m := metrics.New(nil, nil, nil)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/runs/{id}", func(w http.ResponseWriter, r *http.Request) {
		_, ok := w.(http.Flusher)
		require.True(t, ok, "the wrapper keeps http.Flusher")
		w.WriteHeader(http.StatusTeapot)
	})
	srv := httptest.NewServer(m.Instrument(mux, nil))
	defer srv.Close()
	for _, p := range []string{"/v1/runs/run_1", "/v1/runs/run_2", "/nowhere"} {
		resp, err := srv.Client().Get(srv.URL + p)
		require.NoError(t, err)
		resp.Body.Close()
	}
	m.PolicyDecision("request", "deny")
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	text := string(body)
	for _, want := range []string{
		`jobplane_http_requests_total{code="418",route="GET /v1/runs/{id}"} 2`,
		`jobplane_http_requests_total{code="404",route="unmatched"} 1`,
		`jobplane_policy_decisions_total{outcome="deny",stage="request"} 1`,
		`jobplane_http_request_duration_seconds_count{route="GET /v1/runs/{id}"} 2`,
	} {
		require.Contains(t, text, want+"\n")
	}
	require.False(t, strings.Contains(text, "run_1"), "raw paths never become labels")
}
