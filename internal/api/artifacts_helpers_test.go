package api_test

import (
	"bufio"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/artifact"
	artbroker "github.com/jobplane/jobplane/internal/artifact/broker"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/githubapp"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/source"
	"github.com/jobplane/jobplane/internal/source/tickets"
	"github.com/jobplane/jobplane/internal/store"
)

func bufioReader(r io.Reader) *bufio.Reader { return bufio.NewReader(r) }
func jsonUnmarshal(b []byte, v any) error   { return json.Unmarshal(b, v) }

// testArtifacts gives every test server an artifact store in a temporary
// directory and a source repository "code", which is the definitions
// repository itself (it has a main branch).
func testArtifacts(t *testing.T, repo string) artConfig {
	t.Helper()
	fs, err := artifact.OpenFS(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { fs.Close() })
	b, err := source.Open(map[string]string{"code": repo}, t.TempDir())
	require.NoError(t, err)
	return artConfig{Storage: fs, Sources: b}
}

// artConfig configures a test server's artifact and source ticket
// services; zero durations are the services' defaults.
type artConfig struct {
	Storage       artifact.Storage
	Sources       *source.Broker
	UploadTimeout time.Duration
	TicketTTL     time.Duration
}

// heads is the source broker as the run service pins branches with it.
func (c artConfig) heads() control.SourceHeads {
	if c.Sources == nil {
		return nil
	}
	return c.Sources
}

// services builds the artifact and source ticket services over the run
// service svc and, when not nil, the GitHub App gh.
func (c artConfig) services(st store.Store, clk clock.Clock, svc *control.Service, gh *githubapp.Service) (*artbroker.Service, *tickets.Service) {
	arts := artbroker.New(artbroker.Config{Store: st, Clock: clk, Runs: svc, Storage: c.Storage, UploadTimeout: c.UploadTimeout})
	tcfg := tickets.Config{Store: st, Clock: clk, Runs: svc, TicketTTL: c.TicketTTL}
	if c.Sources != nil {
		tcfg.Repos = c.Sources
	}
	if gh != nil {
		tcfg.Hosted = gh
	}
	return arts, tickets.New(tcfg)
}

// srcAttempt is a claimed attempt of the audit sweep's job "built", which
// runs in its own pool so that no other case's queued work is claimed.
type srcAttempt struct {
	rc        *apiclient.RunnerClient
	ref       apiclient.AttemptRef
	uploadURL string
	job       *apiclient.Client // the attempt's job, holding only its run token
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
	asg, ref := e.claim(rc)
	require.NotNil(t, asg.RunToken)
	e.src = srcAttempt{rc: rc, ref: ref, job: &apiclient.Client{BaseURL: e.srv.URL, Token: asg.RunToken.Token, HTTP: e.srv.Client()}}
}

func (e *auditSweep) srcUploadable(t *testing.T) {
	t.Helper()
	e.srcClaimed(t)
	c, err := e.src.rc.RequestUpload(e.ctx(), e.src.ref, protocol.ArtifactRequest{Name: "out.txt"})
	require.NoError(t, err)
	e.src.uploadURL = c.UploadURL
}
