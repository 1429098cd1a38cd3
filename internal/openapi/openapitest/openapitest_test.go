package openapitest_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/openapi/openapitest"
)

const run = `{"id":"run_1","state":"queued","job":"echo","channel":"prod","ref":"main","commit":"c0ffee","params":{},
"actor":"admin","reason":"","source":null,"decision":{},"grants":null,"lease_keys":null,"waiting_for":"",
"attempts":[],"approvals":[],"cancel_requested":false,"created_at":"2026-11-01T12:00:00Z",
"updated_at":"2026-11-01T12:00:00Z","finished_at":null}`

func exchange(method, path, reqBody string, status int, ct, body string) *openapitest.Exchange {
	r := httptest.NewRequest(method, path, strings.NewReader(reqBody))
	r.Header.Set("Authorization", "Bearer jpt_x")
	if reqBody != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	h := http.Header{}
	if ct != "" {
		h.Set("Content-Type", ct)
	}
	return &openapitest.Exchange{Request: r, RequestBody: []byte(reqBody), Status: status, Header: h, Body: []byte(body)}
}

const problem = `{"type":"about:blank","title":"Bad request","status":400,"code":"bad_request","detail":"x"}`

// Each case is an exchange the document allows, or one a drifted handler
// would make; the checker must tell them apart.
func TestCheck(t *testing.T) {
	t.Parallel()
	c, err := openapitest.Load()
	require.NoError(t, err)
	runReq := `{"job":"echo","channel":"prod"}`
	for _, tc := range []struct {
		name string
		x    *openapitest.Exchange
		want string // "" when the exchange is allowed
	}{
		{"a run as the document says", exchange("POST", "/v1/runs", runReq, 201, "application/json", run), ""},
		{"a refusal with its problem", exchange("POST", "/v1/runs", `{"job":1}`, 400, "application/problem+json", problem), ""},
		{"an answer with a field the document does not have",
			exchange("POST", "/v1/runs", runReq, 201, "application/json", strings.Replace(run, `"id"`, `"colour":"red","id"`, 1)), "colour"},
		{"an answer without a required field",
			exchange("GET", "/v1/runs/run_1", "", 200, "application/json", strings.Replace(run, `"state":"queued",`, "", 1)), "state"},
		{"a state the document does not know",
			exchange("GET", "/v1/runs/run_1", "", 200, "application/json", strings.Replace(run, `"queued"`, `"paused"`, 1)), "answer 200"},
		{"a status the operation does not document",
			exchange("GET", "/v1/runs/run_1", "", 418, "application/problem+json", problem), "status is not supported"},
		{"a refusal that is not problem+json", exchange("GET", "/v1/runs/run_1", "", 404, "text/plain", "no"), "Content-Type"},
		{"a request the document forbids, accepted",
			exchange("POST", "/v1/runs", `{"job":"echo"}`, 201, "application/json", run), "forbids"},
		{"a request with an unknown field, accepted",
			exchange("POST", "/v1/runs", `{"job":"echo","channel":"prod","colour":"red"}`, 201, "application/json", run), "forbids"},
		{"a request the document forbids, refused", exchange("POST", "/v1/runs", `{"job":"echo"}`, 400, "application/problem+json", problem), ""},
		{"an unknown API path refused", exchange("GET", "/v1/nope", "", 404, "application/problem+json",
			`{"type":"about:blank","title":"Not found","status":404,"code":"not_found"}`), ""},
		{"an unknown API path served", exchange("GET", "/v1/nope", "", 200, "application/json", `{}`), "no operation"},
		{"an unknown path refused without a problem", exchange("GET", "/v1/nope", "", 404, "text/plain", "404 page not found"), "problem+json"},
		{"a web page is not the API's", exchange("GET", "/runs", "", 200, "text/html", "<html></html>"), ""},
		{"a signed call without its signature, accepted",
			exchange("POST", "/v1/runner/heartbeat", `{}`, 200, "application/json", `{"server_time":"2026-11-01T12:00:00Z","status":"active","cancel_attempts":[]}`), "forbids"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := c.Check(context.Background(), tc.x)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

// recordingTB collects what the checker reports instead of failing.
type recordingTB struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recordingTB) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.errs...)
}

// A drifted handler behind Handler, and a drifted server behind Transport,
// fail the test that talked to them; a faithful one does not.
func TestHandlerAndTransportReport(t *testing.T) {
	t.Parallel()
	drifted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, strings.Replace(run, `"id"`, `"colour":"red","id"`, 1))
	})
	faithful := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, run)
	})
	post := func(t *testing.T, hc *http.Client, url string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, url+"/v1/runs", strings.NewReader(`{"job":"echo","channel":"prod"}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer jpt_x")
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		require.NoError(t, err)
		_, _ = io.ReadAll(resp.Body)
		require.NoError(t, resp.Body.Close())
	}
	for _, tc := range []struct {
		name  string
		h     http.Handler
		fails bool
	}{{"drifted", drifted, true}, {"faithful", faithful, false}} {
		t.Run("handler "+tc.name, func(t *testing.T) {
			t.Parallel()
			rec := &recordingTB{TB: t}
			srv := httptest.NewServer(openapitest.Handler(rec, tc.h))
			post(t, srv.Client(), srv.URL)
			srv.Close() // waits for the check
			require.Equal(t, tc.fails, len(rec.got()) > 0, "reports: %v", rec.got())
		})
		t.Run("transport "+tc.name, func(t *testing.T) {
			t.Parallel()
			rec := &recordingTB{TB: t}
			srv := httptest.NewServer(tc.h)
			defer srv.Close()
			post(t, openapitest.Client(rec, srv.Client()), srv.URL)
			require.Equal(t, tc.fails, len(rec.got()) > 0, "reports: %v", rec.got())
		})
	}
}

// Requests checks what a client sends and ignores the answer.
func TestRequestsOnly(t *testing.T) {
	t.Parallel()
	rec := &recordingTB{TB: t}
	srv := httptest.NewServer(openapitest.Requests(rec, "/base", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusTeapot)
	})))
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/base/v1/runs", "application/json", strings.NewReader(`{"job":"echo","channel":"prod"}`))
	require.NoError(t, err)
	resp.Body.Close()
	got := rec.got()
	require.Len(t, got, 1, "the request has no bearer token")
	require.Contains(t, got[0], "bearer")
}
