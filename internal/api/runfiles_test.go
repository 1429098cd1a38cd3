package api_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/artifact"
	"github.com/jobplane/jobplane/internal/creds"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// TestRunSourceAndArtifacts covers POST /v1/run/source and
// POST /v1/run/artifacts: a job that holds only its run token (the
// Kubernetes executor's pod) gets the ticket and the capabilities its runner
// would, under the same checks, and nothing once its attempt ended.
func TestRunSourceAndArtifacts(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newArtifactEnv(t, st, artConfig{})
		rc := e.runner()
		asg, ref := e.claimBuild(rc)
		require.NotNil(t, asg.RunToken)
		job := func(token string) *apiclient.Client {
			return &apiclient.Client{BaseURL: e.srv.URL, Token: token, HTTP: e.srv.Client()}
		}
		c := job(asg.RunToken.Token)

		t.Run("the source, as the runner would get it", func(t *testing.T) {
			ans, err := c.RunSource(e.ctx())
			require.NoError(t, err)
			require.Equal(t, protocol.SourceKindTicket, ans.Kind)
			require.Equal(t, asg.Source.Commit, ans.Commit)
			rd, err := c.DownloadSourceFrom(e.ctx(), ans.URL)
			require.NoError(t, err)
			files, comment := untar(t, rd)
			rd.Close()
			require.Equal(t, asg.Source.Commit, comment)
			require.Equal(t, "package main\n", files["main.go"])
			_, err = c.DownloadSourceFrom(e.ctx(), ans.URL)
			require.Equal(t, protocol.CodeTicketExpired, code(err), "single use")
		})

		t.Run("an artifact, stored and listed", func(t *testing.T) {
			data := []byte(`{"from":"the pod"}`)
			capa, err := c.RunRequestUpload(e.ctx(), protocol.ArtifactRequest{Name: "report.json", Role: "report", Size: int64(len(data)), SHA256: sum(data)})
			require.NoError(t, err)
			up, err := c.UploadTo(e.ctx(), capa.UploadURL, bytes.NewReader(data), int64(len(data)))
			require.NoError(t, err)
			require.Equal(t, sum(data), up.SHA256)
			rd, err := e.admin.DownloadArtifact(e.ctx(), asg.RunID, "report.json")
			require.NoError(t, err)
			b, _ := io.ReadAll(rd)
			rd.Close()
			require.Equal(t, data, b)
			events, err := e.admin.Audit(e.ctx(), 0, 500)
			require.NoError(t, err)
			var actor string
			for _, ev := range events.Events {
				if ev.Action == "artifact.capability_issued" {
					actor = ev.Actor
				}
			}
			require.Equal(t, "run:"+asg.RunID, actor, "the job, not its runner, asked")
		})

		t.Run("the runner path's refusals", func(t *testing.T) {
			_, err := c.RunRequestUpload(e.ctx(), protocol.ArtifactRequest{Name: "big.bin", Size: artifact.DefaultMaxBytes + 1})
			require.Equal(t, protocol.CodeTooLarge, code(err), "an announced size over max_bytes")
			_, err = c.RunRequestUpload(e.ctx(), protocol.ArtifactRequest{Name: "other.txt"})
			require.Equal(t, protocol.CodeArtifactUndeclared, code(err))
			_, err = c.RunRequestUpload(e.ctx(), protocol.ArtifactRequest{Name: "big.bin", SHA256: "sha256:" + sum(nil)})
			require.Equal(t, protocol.CodeBadRequest, code(err), "a labelled digest")
			_, err = c.RunRequestUpload(e.ctx(), protocol.ArtifactRequest{Name: "../x"})
			require.Equal(t, protocol.CodeInvalidName, code(err))

			// The upload itself: more bytes than announced, another digest.
			capa, err := c.RunRequestUpload(e.ctx(), protocol.ArtifactRequest{Name: "big.bin", Size: 10})
			require.NoError(t, err)
			_, err = c.UploadTo(e.ctx(), capa.UploadURL, bytes.NewReader(make([]byte, 11)), 11)
			require.Equal(t, protocol.CodeTooLarge, code(err))
			e.requireNoRow(capa.ArtifactID)
			capa, err = c.RunRequestUpload(e.ctx(), protocol.ArtifactRequest{Name: "big.bin", SHA256: sum([]byte("other"))})
			require.NoError(t, err)
			_, err = c.UploadTo(e.ctx(), capa.UploadURL, strings.NewReader("bytes"), 5)
			require.Equal(t, protocol.CodeDigestMismatch, code(err))
			e.requireNoRow(capa.ArtifactID)
		})

		t.Run("the runner's registration applies", func(t *testing.T) {
			register := func(req protocol.RegistrationTokenRequest) *apiclient.RunnerClient {
				t.Helper()
				tok, err := e.admin.CreateRegistrationToken(e.ctx(), req)
				require.NoError(t, err)
				pub, priv, err := ed25519.GenerateKey(rand.Reader)
				require.NoError(t, err)
				r := &apiclient.RunnerClient{BaseURL: e.srv.URL, Key: priv, HTTP: e.srv.Client(), Clock: e.clock}
				reg, err := r.Register(e.ctx(), tok.Token, protocol.RegisterRequest{Name: "r-" + req.Pool, PublicKey: protocol.EncodeKey(pub)})
				require.NoError(t, err)
				r.RunnerID = reg.RunnerID
				return r
			}
			// A self-hosted runner's job gets the repository and commit only.
			sh := register(protocol.RegistrationTokenRequest{Pool: "default", SelfHosted: true})
			asgSH, refSH := e.claimBuild(sh)
			ans, err := job(asgSH.RunToken.Token).RunSource(e.ctx())
			require.NoError(t, err)
			require.Equal(t, protocol.SourceAnswer{Kind: protocol.SourceKindDescriptor, Repo: "code", Commit: asgSH.Source.Commit}, *ans)
			_, err = sh.Result(e.ctx(), refSH, protocol.ResultRequest{Outcome: "succeeded"})
			require.NoError(t, err)
		})

		t.Run("no token, an API token, a forged token", func(t *testing.T) {
			parts := strings.Split(asg.RunToken.Token, ".")
			tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"attempt_id":"x"}`)) + "." + parts[2]
			for name, bad := range map[string]string{"none": "", "api token": adminToken, "garbage": "a.b.c", "tampered": tampered} {
				t.Run(name, func(t *testing.T) {
					_, err := job(bad).RunSource(e.ctx())
					require.Equal(t, protocol.CodeUnauthorized, code(err))
					_, err = job(bad).RunRequestUpload(e.ctx(), protocol.ArtifactRequest{Name: "report.json"})
					require.Equal(t, protocol.CodeUnauthorized, code(err))
				})
			}
		})

		t.Run("an ended attempt", func(t *testing.T) {
			_, err := rc.Result(e.ctx(), ref, protocol.ResultRequest{Outcome: "succeeded"})
			require.NoError(t, err)
			_, err = c.RunSource(e.ctx())
			requireStatus(t, err, 410, protocol.CodeAttemptEnded)
			_, err = c.RunRequestUpload(e.ctx(), protocol.ArtifactRequest{Name: "big.bin"})
			requireStatus(t, err, 410, protocol.CodeAttemptEnded)
		})

		t.Run("an expired lease, then an expired token", func(t *testing.T) {
			asg2, _ := e.claimBuild(rc)
			c2 := job(asg2.RunToken.Token)
			capa, err := c2.RunRequestUpload(e.ctx(), protocol.ArtifactRequest{Name: "report.json"})
			require.NoError(t, err)
			e.clock.Advance(asg2.Lease.ExpiresAt.Sub(e.clock.Now()) + time.Second)
			if asg2.RunToken.ExpiresAt.After(e.clock.Now()) {
				_, err = c2.RunSource(e.ctx())
				requireStatus(t, err, 410, protocol.CodeAttemptEnded)
				_, err = c2.RunRequestUpload(e.ctx(), protocol.ArtifactRequest{Name: "report.json"})
				requireStatus(t, err, 410, protocol.CodeAttemptEnded)
			}
			// A capability issued under the lost lease is worth nothing.
			_, err = c2.UploadTo(e.ctx(), capa.UploadURL, strings.NewReader("{}"), 2)
			require.Contains(t, []string{protocol.CodeLeaseExpired, protocol.CodeCapabilityExpired}, code(err))
			e.clock.Advance(asg2.RunToken.ExpiresAt.Sub(e.clock.Now()) + creds.MaxLeeway + time.Second)
			_, err = c2.RunSource(e.ctx())
			requireStatus(t, err, 401, protocol.CodeUnauthorized)
			_, err = c2.RunRequestUpload(e.ctx(), protocol.ArtifactRequest{Name: "report.json"})
			requireStatus(t, err, 401, protocol.CodeUnauthorized)
		})
	})
}

// requireNoRow: a refused upload keeps no artifact row.
func (e *artEnv) requireNoRow(artifactID string) {
	e.t.Helper()
	_, err := e.store.ArtifactGetByID(e.ctx(), artifactID)
	require.ErrorIs(e.t, err, store.ErrNotFound)
}

func requireStatus(t *testing.T, err error, status int, problemCode string) {
	t.Helper()
	var ae *apiclient.APIError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, status, ae.Status, ae.Error())
	require.Equal(t, problemCode, ae.Problem.Code)
}
