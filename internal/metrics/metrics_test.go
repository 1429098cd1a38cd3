package metrics_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jobplane/jobplane/internal/logging"
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

// TestInternalErrorLoggedWithIDs: an internal error the handler reports
// through its writer is logged once, at the edge, as one JSON line naming
// the request's route, run, attempt and runner.
func TestInternalErrorLoggedWithIDs(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log, err := logging.New(&buf, logging.Options{Format: "json"})
	require.NoError(t, err)
	m := metrics.New(nil, nil, log)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/runner/attempt/result", func(w http.ResponseWriter, r *http.Request) {
		rep, ok := w.(interface{ ReportError(error) bool })
		require.True(t, ok, "the writer takes internal errors")
		require.True(t, rep.ReportError(errors.New("disk on fire")))
		w.WriteHeader(http.StatusInternalServerError)
	})
	srv := httptest.NewServer(m.Instrument(mux, nil))
	defer srv.Close()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/runner/attempt/result", nil)
	require.NoError(t, err)
	req.Header.Set("Jobplane-Runner", "rnr_1")
	req.Header.Set("Jobplane-Run", "run_1")
	req.Header.Set("Jobplane-Attempt", "att_1")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 1)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &got))
	delete(got, "time")
	require.Equal(t, map[string]any{"level": "ERROR", "msg": "api: internal error", "route": "POST /v1/runner/attempt/result",
		"status": float64(500), "run_id": "run_1", "attempt_id": "att_1", "runner_id": "rnr_1", "err": "disk on fire"}, got)
}
