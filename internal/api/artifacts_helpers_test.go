package api_test

import (
	"bufio"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/artifact"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/source"
)

func bufioReader(r io.Reader) *bufio.Reader { return bufio.NewReader(r) }
func jsonUnmarshal(b []byte, v any) error   { return json.Unmarshal(b, v) }

// testArtifacts gives every test server an artifact store in a temporary
// directory and a source repository "code", which is the definitions
// repository itself (it has a main branch).
func testArtifacts(t *testing.T, repo string) control.ArtifactConfig {
	t.Helper()
	fs, err := artifact.OpenFS(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { fs.Close() })
	b, err := source.Open(map[string]string{"code": repo}, t.TempDir())
	require.NoError(t, err)
	return control.ArtifactConfig{Storage: fs, Sources: b}
}

// srcAttempt is a claimed attempt of the audit sweep's job "built", which
// runs in its own pool so that no other case's queued work is claimed.
type srcAttempt struct {
	rc        *apiclient.RunnerClient
	ref       apiclient.AttemptRef
	uploadURL string
}

func (e *auditSweep) srcClaimed(t *testing.T) {
	t.Helper()
	tok, err := e.admin.CreateRegistrationToken(e.ctx(), protocol.RegistrationTokenRequest{Pool: "src"})
	require.NoError(t, err)
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	rc := &apiclient.RunnerClient{BaseURL: e.srv.URL, Key: priv, HTTP: e.srv.Client(), Clock: e.clock}
	reg, err := rc.Register(e.ctx(), tok.Token, protocol.RegisterRequest{Name: "src", PublicKey: protocol.EncodeKey(pub)})
	require.NoError(t, err)
	rc.RunnerID = reg.RunnerID
	e.request("built", "")
	_, ref := e.claim(rc)
	e.src = srcAttempt{rc: rc, ref: ref}
}

func (e *auditSweep) srcUploadable(t *testing.T) {
	t.Helper()
	e.srcClaimed(t)
	c, err := e.src.rc.RequestUpload(e.ctx(), e.src.ref, protocol.ArtifactRequest{Name: "out.txt"})
	require.NoError(t, err)
	e.src.uploadURL = c.UploadURL
}
