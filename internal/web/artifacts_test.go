package web_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/protocol"
)

// A run's artifacts are listed with their digests and download as
// attachments that the browser never renders, to the run's tenant only.
func TestArtifactsListedAndDownloaded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker()
	e.open("greet")
	ctx := context.Background()
	v, _, err := e.svc.RequestRun(ctx, e.actor("alice"), &protocol.RunRequest{Job: "greet", Channel: "prod", Params: json.RawMessage(`{"who":"art"}`)})
	require.NoError(t, err)
	c := e.client()
	c.signIn(e.tokens["alice"])
	_, stream := c.get("/runs/" + v.Run.ID + "/log/stream") // ends when the run has ended
	require.Contains(t, stream, `event: end`)
	require.Contains(t, stream, `"succeeded"`)

	report := "report for art\n"
	sum := sha256.Sum256([]byte(report))
	_, page := c.get("/runs/" + v.Run.ID)
	require.Contains(t, page, hex.EncodeToString(sum[:]), "the digest is shown")
	require.Contains(t, page, `href="/runs/`+v.Run.ID+`/artifacts/report.txt"`)
	require.Contains(t, page, `href="/runs/`+v.Run.ID+`/artifacts/page.html"`)

	resp, body := c.get("/runs/" + v.Run.ID + "/artifacts/report.txt")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, report, body)
	require.Equal(t, `attachment; filename=report.txt`, resp.Header.Get("Content-Disposition"))
	require.Equal(t, hex.EncodeToString(sum[:]), resp.Header.Get("X-Artifact-SHA256"))

	// An HTML artifact is bytes to download, not a page of this origin.
	resp, body = c.get("/runs/" + v.Run.ID + "/artifacts/page.html")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "<script>alert(1)</script>", body)
	require.Equal(t, "application/octet-stream", resp.Header.Get("Content-Type"))
	require.Contains(t, resp.Header.Get("Content-Disposition"), "attachment")
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "sandbox")
	require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))

	resp, _ = c.get("/runs/" + v.Run.ID + "/artifacts/missing.txt")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	eve := e.client()
	eve.signIn(e.otherTenantUser("eve"))
	resp, body = eve.get("/runs/" + v.Run.ID + "/artifacts/report.txt")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.NotContains(t, body, "report for")
}
