package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// "Prefer: return=minimal" on the routes that request runs answers each
// run as protocol.RunBrief (id, state, waiting_for, created_at) and says
// so in Preference-Applied; refusals are the same problems as without it;
// without the preference, or with another, the answer is the whole run.
func TestRunsPreferMinimal(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnvFiles(t, st, batchFiles)
		post := func(path, prefer, body string) (int, http.Header, []byte) {
			t.Helper()
			req, err := http.NewRequest(http.MethodPost, e.srv.URL+path, strings.NewReader(body))
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+adminToken)
			if prefer != "" {
				req.Header.Set("Prefer", prefer)
			}
			resp, err := e.srv.Client().Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			return resp.StatusCode, resp.Header, b
		}
		briefKeys := []string{"created_at", "id", "state", "waiting_for"}
		keysOf := func(raw json.RawMessage) []string {
			t.Helper()
			var m map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(raw, &m))
			var ks []string
			for k := range m {
				ks = append(ks, k)
			}
			return ks
		}

		batch := `{"runs":[{"job":"echo","channel":"prod","params":{"message":"hi"}},{"job":"gated","channel":"prod"},{"job":"secret","channel":"prod"},{"job":"nope","channel":"prod"}]}`
		for _, prefer := range []string{"return=minimal", "Return = \"Minimal\"", "respond-async, return=minimal; x=y", "wait=5,return=minimal"} {
			code, h, body := post("/v1/runs/batch", prefer, batch)
			require.Equal(t, http.StatusOK, code, "%s: %s", prefer, body)
			require.Equal(t, "return=minimal", h.Get("Preference-Applied"), prefer)
			var resp struct {
				Runs []struct {
					Status int               `json:"status"`
					Run    json.RawMessage   `json:"run"`
					Error  *protocol.Problem `json:"error"`
				} `json:"runs"`
			}
			require.NoError(t, json.Unmarshal(body, &resp))
			require.Len(t, resp.Runs, 4)
			require.Equal(t, http.StatusCreated, resp.Runs[0].Status)
			require.ElementsMatch(t, briefKeys, keysOf(resp.Runs[0].Run), "%s: %s", prefer, resp.Runs[0].Run)
			var brief protocol.RunBrief
			require.NoError(t, json.Unmarshal(resp.Runs[0].Run, &brief))
			full := e.run(brief.ID)
			require.Equal(t, full.State, brief.State)
			require.Equal(t, "queued", brief.State)
			require.True(t, full.CreatedAt.Equal(brief.CreatedAt))
			require.NoError(t, json.Unmarshal(resp.Runs[1].Run, &brief))
			require.Equal(t, "pending_approval", brief.State)
			require.Equal(t, e.run(brief.ID).WaitingFor, brief.WaitingFor)
			// Refusals carry the whole problem, the denial its decision.
			require.Nil(t, resp.Runs[2].Run)
			require.Equal(t, protocol.CodeDenied, resp.Runs[2].Error.Code)
			require.NotNil(t, resp.Runs[2].Error.Decision)
			require.NotEmpty(t, resp.Runs[2].Error.RunID)
			require.Equal(t, protocol.CodeUnknownJob, resp.Runs[3].Error.Code)
		}

		// Without it, or preferring the representation, whole runs.
		for _, prefer := range []string{"", "return=representation", "return=representation, return=minimal", "handling=lenient", "minimal"} {
			code, h, body := post("/v1/runs/batch", prefer, `{"runs":[{"job":"echo","channel":"prod","params":{"message":"hi"}}]}`)
			require.Equal(t, http.StatusOK, code, body)
			require.Empty(t, h.Get("Preference-Applied"), prefer)
			var resp protocol.RunsResponse
			require.NoError(t, json.Unmarshal(body, &resp))
			require.NotNil(t, resp.Runs[0].Run, prefer)
			require.JSONEq(t, `{"message":"hi"}`, string(resp.Runs[0].Run.Params), prefer)
			require.NotEmpty(t, resp.Runs[0].Run.Decision, prefer)
		}

		// POST /v1/runs, once created and once by its idempotency key.
		for _, want := range []int{http.StatusCreated, http.StatusOK} {
			code, h, body := post("/v1/runs", "return=minimal", `{"job":"echo","channel":"prod","idempotency_key":"brief-1","params":{"message":"hi"}}`)
			require.Equal(t, want, code, body)
			require.Equal(t, "return=minimal", h.Get("Preference-Applied"))
			require.ElementsMatch(t, briefKeys, keysOf(body))
		}
		code, h, body := post("/v1/runs", "return=minimal", `{"job":"nope","channel":"prod"}`)
		require.Equal(t, http.StatusNotFound, code, body)
		require.Empty(t, h.Get("Preference-Applied"), "a refusal is a problem, not a run")

		// The client's brief call reads the brief answers into runs.
		answers, err := e.admin.CreateRunsBrief(e.ctx(), []protocol.RunRequest{{Job: "echo", Channel: "prod", Params: json.RawMessage(`{"message":"x"}`)}, {Job: "nope", Channel: "prod"}})
		require.NoError(t, err)
		require.NoError(t, answers[0].Err)
		require.True(t, answers[0].Created)
		require.Equal(t, "queued", answers[0].Run.State)
		require.Empty(t, answers[0].Run.Params, "the brief answer carries no params")
		require.True(t, apiclient.IsCode(answers[1].Err, protocol.CodeUnknownJob))
	})
}
