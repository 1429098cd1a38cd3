package e2e

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/openapi/openapitest"
)

// contractProxy is a reverse proxy to the server that checks every
// exchange passing through it against the OpenAPI document: the worker and
// the CLI are other processes, so their traffic is checked on the wire.
func contractProxy(t *testing.T, s *server) string {
	t.Helper()
	target, err := url.Parse(s.url)
	require.NoError(t, err)
	rp := httputil.NewSingleHostReverseProxy(target)
	// Log streams and long-polls are passed on as they come.
	rp.FlushInterval = -1
	// The server unreachable (stopped at the end of the test while the
	// worker long-polls) is a dropped connection, as without the proxy,
	// not a 502 of the proxy's own making for the checker to judge.
	rp.ErrorHandler = func(http.ResponseWriter, *http.Request, error) { panic(http.ErrAbortHandler) }
	px := httptest.NewServer(openapitest.Handler(t, rp))
	t.Cleanup(px.Close)
	return px.URL
}

// TestBinariesSpeakTheDocument runs the jobplane binary's worker and client
// verbs through a proxy that checks every request they send and every
// answer they get against the OpenAPI document: registration, claims,
// renewals, log lines, results, and the reads and refusals of the CLI. The
// in-process tests check the same client code; this checks the binaries as
// shipped. On both stores.
func TestBinariesSpeakTheDocument(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, func(string) []job {
			return []job{{name: "greet", script: `i=1; while [ $i -le 3 ]; do echo "line $i"; i=$((i+1)); sleep 0.2; done; echo oops >&2`}}
		})
		s := startServer(t, b.dsn(t), e)
		pxURL := contractProxy(t, s)
		startWorkerVia(t, pxURL, "contract-worker", t.TempDir(), s.registrationToken())
		via := &server{t: t, url: pxURL, adminToken: s.adminToken}

		out, errOut, code := runCLI(t, via, "run", "greet", "--wait")
		require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
		require.Contains(t, out, "line 3")
		runID := runIDFrom(t, errOut)

		for _, args := range [][]string{
			{"runs", "list"},
			{"runs", "show", runID},
			{"runs", "show", runID, "--json"},
			{"logs", runID},
			{"jobs", "list"},
			{"jobs", "show", "greet"},
			{"runners", "list"},
			{"leases", "list"},
			{"catalogs", "list"},
			{"schedules"},
			{"audit", "list"},
			{"audit", "verify"},
		} {
			out, errOut, code := runCLI(t, via, args...)
			require.Equal(t, 0, code, "jobplane %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), out, errOut)
		}
		// Refusals are problems the document describes too.
		for _, args := range [][]string{
			{"run", "no-such-job"},
			{"runs", "show", "run_01ZZZZZZZZZZZZZZZZZZZZZZZZ"},
			{"cancel", runID},
		} {
			_, errOut, code := runCLI(t, via, args...)
			require.NotEqual(t, 0, code, "jobplane %s was not refused: %s", strings.Join(args, " "), errOut)
		}

		// The proxy saw the worker's attempt calls: the run's log reached
		// the server through it.
		hc := checkedHTTP(t, 10*time.Second)
		resp, err := hc.Get(pxURL + "/readyz")
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	})
}
