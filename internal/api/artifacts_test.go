package api_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/admin"
	"github.com/jobplane/jobplane/internal/api"
	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/artifact"
	artbroker "github.com/jobplane/jobplane/internal/artifact/broker"
	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/clock"
	connbroker "github.com/jobplane/jobplane/internal/connector/broker"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/creds"
	"github.com/jobplane/jobplane/internal/failpoint"
	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/openapi/openapitest"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/runcreds"
	"github.com/jobplane/jobplane/internal/server"
	"github.com/jobplane/jobplane/internal/source"
	"github.com/jobplane/jobplane/internal/source/tickets"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

var artifactDefinitions = map[string]string{
	"jobs/build.yaml": `name: build
description: Builds and reports
run:
  command: [sh, -c, 'true']
  timeout: 10m
  lease_ttl: 30s
retries: {max_attempts: 3, backoff: 1s}
artifacts:
  - {name: report.json, role: report, max_bytes: 1000}
  - {name: big.bin, role: data}
source: {repo: code}
`,
	"policies/main.yaml": `rules:
  - id: everyone
    jobs: [build]
    users: ["*"]
`,
}

type artEnv struct {
	*testEnv
	artDir   string
	codeRepo string
}

// newArtifactEnv is newEnvFiles with a filesystem artifact store and a
// source broker over a code repository (branch main).
func newArtifactEnv(t *testing.T, st store.Store, cfg artConfig) *artEnv {
	t.Helper()
	repo := t.TempDir()
	_, err := gitsync.InitRepo(repo, "main", artifactDefinitions, "init")
	require.NoError(t, err)
	code := t.TempDir()
	_, err = gitsync.InitRepo(code, "main", map[string]string{"main.go": "package main\n", "lib/util.go": "package lib\n"}, "code")
	require.NoError(t, err)
	defs, err := server.OpenDefinitions(repo, map[string]string{"prod": "main"})
	require.NoError(t, err)
	fc := clock.NewFake(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
	box, err := creds.NewBox(bytes.Repeat([]byte{7}, 32))
	require.NoError(t, err)
	tokens, err := runcreds.NewKeys(context.Background(), st, box, fc, testIssuer)
	require.NoError(t, err)
	artDir := t.TempDir()
	fsStore, err := artifact.OpenFS(artDir)
	require.NoError(t, err)
	t.Cleanup(func() { fsStore.Close() })
	broker, err := source.Open(map[string]string{"code": code}, t.TempDir())
	require.NoError(t, err)
	cfg.Storage, cfg.Sources = fsStore, broker
	svc, err := control.New(control.Config{Store: st, Clock: fc, Definitions: defs, Credentials: tokens, Sources: cfg.heads()})
	require.NoError(t, err)
	artSvc, srcSvc := cfg.services(st, fc, svc, nil)
	adm := admin.New(st, fc)
	adm.OnRunnersChanged(svc.RunnersChanged)
	require.NoError(t, adm.EnsureAdmin(context.Background(), adminToken))
	h := api.New(api.Config{Control: svc, Admin: adm, Audit: audit.NewLog(st), Creds: runcreds.New(runcreds.Config{Store: st, Clock: fc, Keys: tokens, Box: box, Broker: connbroker.NewBroker(st, box)}), Auth: &authn.Authenticator{Store: st, Clock: fc}, Ready: st.Ping, PublicURL: testIssuer,
		Artifacts: artSvc, Sources: srcSvc})
	srv := httptest.NewServer(openapitest.Handler(t, h))
	t.Cleanup(srv.Close)
	e := &testEnv{t: t, store: st, clock: fc, svc: svc, tokens: tokens, srv: srv, repo: repo,
		admin: &apiclient.Client{BaseURL: srv.URL, Token: adminToken, HTTP: srv.Client()}}
	return &artEnv{testEnv: e, artDir: artDir, codeRepo: code}
}

// stored lists the published objects and the staged leftovers.
func (e *artEnv) stored() (objects, temporaries []string) {
	e.t.Helper()
	require.NoError(e.t, filepath.WalkDir(e.artDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(e.artDir, p)
		if strings.HasPrefix(rel, ".tmp"+string(filepath.Separator)) {
			temporaries = append(temporaries, rel)
		} else {
			objects = append(objects, rel)
		}
		return nil
	}))
	return objects, temporaries
}

// requireNothingKept: no object, no staged file, and no row of the artifact.
func (e *artEnv) requireNothingKept(artifactID string) {
	e.t.Helper()
	objects, tmps := e.stored()
	require.Empty(e.t, objects, "no object kept")
	require.Empty(e.t, tmps, "no staged upload kept")
	_, err := e.store.ArtifactGetByID(e.ctx(), artifactID)
	require.ErrorIs(e.t, err, store.ErrNotFound, "no metadata row kept")
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func (e *artEnv) claimBuild(rc *apiclient.RunnerClient) (*protocol.Assignment, apiclient.AttemptRef) {
	e.t.Helper()
	e.request("build", "")
	return e.claim(rc)
}

func code(err error) string {
	var ae *apiclient.APIError
	if errors.As(err, &ae) {
		return ae.Problem.Code
	}
	if err == nil {
		return ""
	}
	return "transport: " + err.Error()
}

func TestArtifactRoundTrip(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newArtifactEnv(t, st, artConfig{})
		rc := e.runner()
		asg, ref := e.claimBuild(rc)
		require.Equal(t, []protocol.ArtifactSpec{
			{Name: "report.json", Role: "report", MaxBytes: 1000},
			{Name: "big.bin", Role: "data", MaxBytes: artifact.DefaultMaxBytes},
		}, asg.Artifacts, "the claim answer lists the declared artifacts")
		require.NotNil(t, asg.Source)
		require.Equal(t, "code", asg.Source.Repo)
		require.Len(t, asg.Source.Commit, 40)

		data := []byte(`{"ok":true}`)
		capa, err := rc.RequestUpload(e.ctx(), ref, protocol.ArtifactRequest{Name: "report.json", Role: "report", Size: int64(len(data)), SHA256: sum(data)})
		require.NoError(t, err)
		require.Equal(t, int64(len(data)), capa.MaxBytes, "an announced size is the limit")
		require.Equal(t, e.clock.Now().Add(artbroker.DefaultUploadTTL), capa.ExpiresAt)
		up, err := rc.Upload(e.ctx(), capa.UploadURL, bytes.NewReader(data), int64(len(data)))
		require.NoError(t, err)
		require.Equal(t, capa.ArtifactID, up.ArtifactID)
		require.Equal(t, sum(data), up.SHA256)
		objects, tmps := e.stored()
		require.Len(t, objects, 1)
		require.Empty(t, tmps)
		require.True(t, strings.HasSuffix(objects[0], filepath.Join(asg.RunID, asg.AttemptID, "report.json")), "stored under tenant/run/attempt/name: %s", objects[0])

		list, err := e.admin.ListArtifacts(e.ctx(), asg.RunID)
		require.NoError(t, err)
		require.Len(t, list.Artifacts, 1)
		got := list.Artifacts[0]
		require.Equal(t, protocol.Artifact{ID: up.ArtifactID, Name: "report.json", Role: "report", Size: int64(len(data)), SHA256: sum(data),
			AttemptID: asg.AttemptID, AttemptNumber: 1, StoredAt: e.clock.Now().UTC()}, got)
		rd, err := e.admin.DownloadArtifact(e.ctx(), asg.RunID, "report.json")
		require.NoError(t, err)
		b, _ := io.ReadAll(rd)
		rd.Close()
		require.Equal(t, data, b)
		_, err = e.admin.DownloadArtifact(e.ctx(), asg.RunID, "nope.txt")
		require.Equal(t, protocol.CodeNotFound, code(err))
		_, err = e.admin.DownloadArtifact(e.ctx(), asg.RunID, "a b")
		require.Equal(t, protocol.CodeInvalidName, code(err))

		// A result may name only stored artifacts of its own attempt.
		_, err = rc.Result(e.ctx(), ref, protocol.ResultRequest{Outcome: "succeeded", Artifacts: []string{"art_nope"}})
		require.Equal(t, protocol.CodeArtifactInvalid, code(err))
		res, err := rc.Result(e.ctx(), ref, protocol.ResultRequest{Outcome: "succeeded", Artifacts: []string{up.ArtifactID}})
		require.NoError(t, err)
		require.Equal(t, "succeeded", res.RunState)

		events, err := e.admin.Audit(e.ctx(), 0, 500)
		require.NoError(t, err)
		var actions []string
		for _, ev := range events.Events {
			actions = append(actions, ev.Action)
		}
		require.Contains(t, actions, "artifact.capability_issued")
		require.Contains(t, actions, "artifact.stored")
	})
}

// TestArtifactOversize is RELIABILITY A1.
// TestArtifactDownloadDuringSweep: a download that read the artifact just
// before a retention sweep took it answers 404 not_found, as one a moment
// later would, not 503 unavailable; bytes missing under a row still
// stored stay 503. Not parallel: the failpoint is process-wide.
func TestArtifactDownloadDuringSweep(t *testing.T) {
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newArtifactEnv(t, st, artConfig{})
		rc := e.runner()
		asg, ref := e.claimBuild(rc)
		data := []byte(`{"ok":true}`)
		capa, err := rc.RequestUpload(e.ctx(), ref, protocol.ArtifactRequest{Name: "report.json", Role: "report", Size: int64(len(data)), SHA256: sum(data)})
		require.NoError(t, err)
		_, err = rc.Upload(e.ctx(), capa.UploadURL, bytes.NewReader(data), int64(len(data)))
		require.NoError(t, err)
		objects, _ := e.stored()
		require.Len(t, objects, 1)

		// The bytes vanish under a row that still says stored: broken.
		require.NoError(t, os.Rename(filepath.Join(e.artDir, objects[0]), filepath.Join(e.artDir, objects[0]+".aside")))
		_, err = e.admin.DownloadArtifact(e.ctx(), asg.RunID, "report.json")
		require.Equal(t, protocol.CodeUnavailable, code(err))
		require.NoError(t, os.Rename(filepath.Join(e.artDir, objects[0]+".aside"), filepath.Join(e.artDir, objects[0])))

		// The sweep marks the artifact and deletes its bytes between the
		// download's listing and its opening: gone.
		swept := 0
		disable := failpoint.Enable("artifact.open.afterList", func() error {
			marked, err := st.ArtifactMarkDeleting(store.WithSystem(context.Background(), "test sweep"), asg.RunID, 10)
			if err != nil {
				return err
			}
			swept += len(marked)
			return os.Remove(filepath.Join(e.artDir, objects[0]))
		})
		_, err = e.admin.DownloadArtifact(e.ctx(), asg.RunID, "report.json")
		disable()
		require.Equal(t, 1, swept)
		require.Equal(t, protocol.CodeNotFound, code(err))
	})
}

func TestArtifactOversize(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newArtifactEnv(t, st, artConfig{UploadTimeout: 300 * time.Millisecond})
		rc := e.runner()
		_, ref := e.claimBuild(rc)
		capability := func() *protocol.ArtifactCapability {
			t.Helper()
			c, err := rc.RequestUpload(e.ctx(), ref, protocol.ArtifactRequest{Name: "report.json"})
			require.NoError(t, err)
			require.Equal(t, int64(1000), c.MaxBytes)
			return c
		}

		_, err := rc.RequestUpload(e.ctx(), ref, protocol.ArtifactRequest{Name: "report.json", Size: 1001})
		require.Equal(t, protocol.CodeTooLarge, code(err), "an announced size over the limit is refused at once")

		// Honest Content-Length over the limit: refused before reading.
		c := capability()
		_, err = rc.Upload(e.ctx(), c.UploadURL, bytes.NewReader(make([]byte, 1001)), 1001)
		require.Equal(t, protocol.CodeTooLarge, code(err))
		e.requireNothingKept(c.ArtifactID)

		// Exactly the limit is fine (then the name is taken for this attempt).
		// Chunked without a length, endless: cut after max+1 bytes, long
		// before the client runs out of bytes to send.
		c = capability()
		endless := &countingReader{r: zeroReader{}, limit: 1 << 30}
		_, err = rc.Upload(e.ctx(), c.UploadURL, endless, -1)
		require.Error(t, err)
		if ae := (*apiclient.APIError)(nil); errors.As(err, &ae) {
			require.Equal(t, protocol.CodeTooLarge, ae.Problem.Code)
		}
		require.Less(t, endless.n.Load(), int64(64<<20), "the server cut the connection instead of reading everything")
		e.requireNothingKept(c.ArtifactID)

		// Lying Content-Length, shorter than the body: only that many bytes
		// are read, and an announced digest of the real body refuses them.
		body := bytes.Repeat([]byte("y"), 2000)
		c2, err := rc.RequestUpload(e.ctx(), ref, protocol.ArtifactRequest{Name: "report.json", SHA256: sum(body[:900])})
		require.NoError(t, err)
		status, problem := rawPut(t, e.srv.URL, c2.UploadURL, 50, body)
		require.Equal(t, http.StatusUnprocessableEntity, status)
		require.Equal(t, protocol.CodeDigestMismatch, problem)
		e.requireNothingKept(c2.ArtifactID)

		// A trickling client is cut off by the read deadline.
		c = capability()
		_, err = rc.Upload(e.ctx(), c.UploadURL, &trickle{n: 200, every: 20 * time.Millisecond}, -1)
		require.Error(t, err)
		e.requireNothingKept(c.ArtifactID)

		// A crash between hashing and publishing publishes nothing.
		c = capability()
		func() {
			defer failpoint.Enable("upload.afterHashBeforePublish", func() error { return errors.New("injected crash") })()
			_, err = rc.Upload(e.ctx(), c.UploadURL, strings.NewReader("{}"), 2)
		}()
		require.Error(t, err)
		e.requireNothingKept(c.ArtifactID)

		c = capability()
		_, err = rc.Upload(e.ctx(), c.UploadURL, bytes.NewReader(make([]byte, 1000)), 1000)
		require.NoError(t, err, "exactly max_bytes is accepted")
	})
}

// TestArtifactDigest is RELIABILITY A2: any difference from the announced
// digest is refused with nothing kept, and the right digest of the exact
// bytes, in either case of hex, is always accepted.
func TestArtifactDigest(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newArtifactEnv(t, st, artConfig{})
		rc := e.runner()
		_, ref := e.claimBuild(rc)
		data := []byte(`{"report":"contents"}`)
		flipped := bytes.Clone(data)
		flipped[3] ^= 1
		for _, c := range []struct {
			name   string
			req    protocol.ArtifactRequest
			upload []byte
			want   string
		}{
			{"one bit flipped", protocol.ArtifactRequest{SHA256: sum(data)}, flipped, protocol.CodeDigestMismatch},
			{"truncated", protocol.ArtifactRequest{SHA256: sum(data)}, data[:10], protocol.CodeDigestMismatch},
			{"truncated with size", protocol.ArtifactRequest{SHA256: sum(data), Size: int64(len(data))}, data[:10], protocol.CodeSizeMismatch},
			{"extended", protocol.ArtifactRequest{SHA256: sum(data)}, append(bytes.Clone(data), 'x'), protocol.CodeDigestMismatch},
		} {
			c.req.Name = "report.json"
			capa, err := rc.RequestUpload(e.ctx(), ref, c.req)
			require.NoError(t, err, c.name)
			_, err = rc.Upload(e.ctx(), capa.UploadURL, bytes.NewReader(c.upload), int64(len(c.upload)))
			require.Equal(t, c.want, code(err), c.name)
			e.requireNothingKept(capa.ArtifactID)
		}
		for _, bad := range []string{"sha256:" + sum(data), sum(data)[:63], sum(data) + "0", "md5:abc", strings.Repeat("g", 64)} {
			_, err := rc.RequestUpload(e.ctx(), ref, protocol.ArtifactRequest{Name: "report.json", SHA256: bad})
			require.Equal(t, protocol.CodeBadRequest, code(err), "sha256 %q", bad)
		}
		capa, err := rc.RequestUpload(e.ctx(), ref, protocol.ArtifactRequest{Name: "report.json", SHA256: strings.ToUpper(sum(data))})
		require.NoError(t, err)
		up, err := rc.Upload(e.ctx(), capa.UploadURL, bytes.NewReader(data), int64(len(data)))
		require.NoError(t, err, "upper-case hex of the right digest is the right digest")
		require.Equal(t, sum(data), up.SHA256)
	})
}

// TestArtifactCapabilityMisuse is RELIABILITY A3, plus names and
// declarations (A4 through the API).
func TestArtifactCapabilityMisuse(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newArtifactEnv(t, st, artConfig{})
		rc := e.runner()
		_, ref := e.claimBuild(rc)
		data := []byte("x")

		// Undeclared, hostile and mis-roled names never get a capability.
		_, err := rc.RequestUpload(e.ctx(), ref, protocol.ArtifactRequest{Name: "other.txt"})
		require.Equal(t, protocol.CodeArtifactUndeclared, code(err))
		for _, name := range []string{"../x", `..\x`, "%2e%2e%2f", "/etc/passwd", "report.json/../../x", "a\x00", ".", "..", "", strings.Repeat("a", 4096), "．．／"} {
			_, err := rc.RequestUpload(e.ctx(), ref, protocol.ArtifactRequest{Name: name})
			require.Equal(t, protocol.CodeInvalidName, code(err), "name %q", name)
		}
		_, err = rc.RequestUpload(e.ctx(), ref, protocol.ArtifactRequest{Name: "report.json", Role: "data"})
		require.Equal(t, protocol.CodeBadRequest, code(err), "the declared role binds")

		// Another runner cannot ask for this attempt's capability.
		other := e.runner()
		_, err = other.RequestUpload(e.ctx(), ref, protocol.ArtifactRequest{Name: "report.json"})
		require.Equal(t, protocol.CodeAttemptStale, code(err))

		// Unknown, used and expired capabilities.
		_, err = rc.Upload(e.ctx(), "/v1/uploads/not-a-capability", bytes.NewReader(data), 1)
		require.Equal(t, protocol.CodeCapabilityExpired, code(err))
		used, err := rc.RequestUpload(e.ctx(), ref, protocol.ArtifactRequest{Name: "big.bin"})
		require.NoError(t, err)
		_, err = rc.Upload(e.ctx(), used.UploadURL, bytes.NewReader(data), 1)
		require.NoError(t, err)
		_, err = rc.Upload(e.ctx(), used.UploadURL, bytes.NewReader(data), 1)
		require.Equal(t, protocol.CodeCapabilityExpired, code(err), "single use")

		expired, err := rc.RequestUpload(e.ctx(), ref, protocol.ArtifactRequest{Name: "report.json"})
		require.NoError(t, err)
		e.clock.Advance(artbroker.DefaultUploadTTL)
		_, err = rc.Upload(e.ctx(), expired.UploadURL, bytes.NewReader(data), 1)
		require.Equal(t, protocol.CodeCapabilityExpired, code(err), "expired at expires_at")
		e.requireNothingKeptExcept(expired.ArtifactID, 1)
	})
}

// requireNothingKeptExcept is requireNothingKept when n other objects exist.
func (e *artEnv) requireNothingKeptExcept(artifactID string, n int) {
	e.t.Helper()
	objects, tmps := e.stored()
	require.Len(e.t, objects, n)
	require.Empty(e.t, tmps)
	a, err := e.store.ArtifactGetByID(e.ctx(), artifactID)
	if err == nil {
		require.NotEqual(e.t, store.ArtifactStored, a.State)
	}
}

// TestArtifactLiveLease is RELIABILITY A3: the capability is checked
// against the live lease when the upload is published, not only when it
// starts.
func TestArtifactLiveLease(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newArtifactEnv(t, st, artConfig{})
		rc := e.runner()
		_, ref := e.claimBuild(rc)

		// Lease lost while the bytes arrive.
		c, err := rc.RequestUpload(e.ctx(), ref, protocol.ArtifactRequest{Name: "report.json"})
		require.NoError(t, err)
		body := &hookReader{r: strings.NewReader("late bytes"), hook: func() { e.clock.Advance(31 * time.Second) }}
		_, err = rc.Upload(e.ctx(), c.UploadURL, body, 10)
		require.Equal(t, protocol.CodeLeaseExpired, code(err))
		e.requireNothingKept(c.ArtifactID)

		// After the attempt ended (reaped, then retried).
		_, err = e.svc.Reap(e.ctx())
		require.NoError(t, err)
		e.clock.Advance(2 * time.Second)
		_, ref2 := e.claim(rc)
		c2, err := rc.RequestUpload(e.ctx(), ref2, protocol.ArtifactRequest{Name: "report.json"})
		require.NoError(t, err)
		_, err = rc.Result(e.ctx(), ref2, protocol.ResultRequest{Outcome: "failed", ExitCode: 1})
		require.NoError(t, err)
		_, err = rc.Upload(e.ctx(), c2.UploadURL, strings.NewReader("x"), 1)
		require.Equal(t, protocol.CodeAttemptStale, code(err), "a terminal attempt stores nothing")
		e.requireNothingKept(c2.ArtifactID)
		_, err = rc.RequestUpload(e.ctx(), ref2, protocol.ArtifactRequest{Name: "report.json"})
		require.Equal(t, protocol.CodeAttemptStale, code(err))
	})
}

// TestArtifactAcrossAttempts is RELIABILITY A5: attempts N and N+1 upload
// the same name concurrently; the stale attempt is refused and nothing
// overwrites the live attempt's object.
func TestArtifactAcrossAttempts(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newArtifactEnv(t, st, artConfig{})
		r1, r2 := e.runner(), e.runner()
		asg1, ref1 := e.claimBuild(r1)
		c1, err := r1.RequestUpload(e.ctx(), ref1, protocol.ArtifactRequest{Name: "report.json"})
		require.NoError(t, err)
		e.clock.Advance(31 * time.Second)
		_, err = e.svc.Reap(e.ctx())
		require.NoError(t, err)
		e.clock.Advance(2 * time.Second)
		asg2, ref2 := e.claim(r2)
		require.Equal(t, asg1.RunID, asg2.RunID)
		require.Equal(t, 2, asg2.AttemptNumber)
		c2, err := r2.RequestUpload(e.ctx(), ref2, protocol.ArtifactRequest{Name: "report.json"})
		require.NoError(t, err)

		var wg sync.WaitGroup
		var err1, err2 error
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, err1 = r1.Upload(e.ctx(), c1.UploadURL, strings.NewReader("attempt one"), 11)
		}()
		go func() {
			defer wg.Done()
			_, err2 = r2.Upload(e.ctx(), c2.UploadURL, strings.NewReader("attempt two"), 11)
		}()
		wg.Wait()
		require.NoError(t, err2)
		require.Equal(t, protocol.CodeAttemptStale, code(err1))
		rd, err := e.admin.DownloadArtifact(e.ctx(), asg2.RunID, "report.json")
		require.NoError(t, err)
		b, _ := io.ReadAll(rd)
		rd.Close()
		require.Equal(t, "attempt two", string(b))
		objects, _ := e.stored()
		require.Len(t, objects, 1)
		require.Contains(t, objects[0], asg2.AttemptID)
	})
}

// ---- source tickets ----

func untar(t *testing.T, r io.Reader) (files map[string]string, comment string) {
	t.Helper()
	zr, err := gzip.NewReader(r)
	require.NoError(t, err)
	tr := tar.NewReader(zr)
	files = map[string]string{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, comment
		}
		require.NoError(t, err)
		if h.Typeflag == tar.TypeXGlobalHeader {
			comment = h.PAXRecords["comment"]
			continue
		}
		b, _ := io.ReadAll(tr)
		files[h.Name] = string(b)
	}
}

// TestSourceTicket covers the managed-runner path and RELIABILITY ST1: a
// ticket is redeemed once, also among 50 concurrent tries, and the archive
// is the commit pinned when the run was requested, not the branch's
// current head.
func TestSourceTicket(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newArtifactEnv(t, st, artConfig{})
		rc := e.runner()
		run := e.request("build", "")
		pinned := strings.TrimSpace(gitHead(t, e.codeRepo))
		_, err := gitsync.CommitFiles(e.codeRepo, "main", map[string]string{"main.go": "package main // later\n"}, "later")
		require.NoError(t, err)
		asg, ref := e.claim(rc)
		require.Equal(t, run.ID, asg.RunID)
		require.Equal(t, pinned, asg.Source.Commit, "pinned at request time")

		ans, err := rc.Source(e.ctx(), ref)
		require.NoError(t, err)
		require.Equal(t, protocol.SourceKindTicket, ans.Kind)
		require.Equal(t, pinned, ans.Commit)
		require.Equal(t, e.clock.Now().Add(tickets.DefaultTicketTTL), *ans.ExpiresAt)
		rd, err := rc.DownloadSource(e.ctx(), ans.URL)
		require.NoError(t, err)
		files, comment := untar(t, rd)
		rd.Close()
		require.Equal(t, pinned, comment)
		require.Equal(t, "package main\n", files["main.go"])
		require.Equal(t, "package lib\n", files["lib/util.go"])

		_, err = rc.DownloadSource(e.ctx(), ans.URL)
		require.Equal(t, protocol.CodeTicketExpired, code(err), "single use")

		ans, err = rc.Source(e.ctx(), ref)
		require.NoError(t, err)
		var wins, gone atomic.Int32
		var wg sync.WaitGroup
		for range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rd, err := rc.DownloadSource(e.ctx(), ans.URL)
				switch {
				case err == nil:
					_, _ = io.Copy(io.Discard, rd)
					rd.Close()
					wins.Add(1)
				case code(err) == protocol.CodeTicketExpired:
					gone.Add(1)
				default:
					t.Errorf("redeem: %v", err)
				}
			}()
		}
		wg.Wait()
		require.Equal(t, int32(1), wins.Load())
		require.Equal(t, int32(49), gone.Load())
	})
}

// TestSourceTicketBinding is RELIABILITY ST2 through the API: expired
// tickets, tickets whose attempt lost its lease or ended, tickets asked
// for by another runner, and a self-hosted runner that gets no ticket.
func TestSourceTicketBinding(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newArtifactEnv(t, st, artConfig{TicketTTL: 10 * time.Second})
		rc := e.runner()
		_, ref := e.claimBuild(rc)

		ans, err := rc.Source(e.ctx(), ref)
		require.NoError(t, err)
		e.clock.Advance(10 * time.Second)
		_, err = rc.DownloadSource(e.ctx(), ans.URL)
		require.Equal(t, protocol.CodeTicketExpired, code(err), "expired at expires_at")

		_, err = rc.DownloadSource(e.ctx(), "/v1/sources/unknown-ticket")
		require.Equal(t, protocol.CodeTicketExpired, code(err))

		other := e.runner()
		_, err = other.Source(e.ctx(), ref)
		require.Equal(t, protocol.CodeAttemptStale, code(err), "only the attempt's runner gets a ticket")
		_, err = rc.Source(e.ctx(), apiclient.AttemptRef{RunID: ref.RunID, AttemptID: ref.AttemptID, LeaseToken: "wrong"})
		require.Equal(t, protocol.CodeAttemptStale, code(err))

		// The lease is lost after the ticket was issued.
		ans, err = rc.Source(e.ctx(), ref)
		require.NoError(t, err)
		e.clock.Advance(21 * time.Second)
		_, err = rc.DownloadSource(e.ctx(), ans.URL)
		require.Equal(t, protocol.CodeTicketExpired, code(err), "bound to the live lease")

		// A ticket of attempt N is useless once attempt N+1 runs.
		_, err = e.svc.Reap(e.ctx())
		require.NoError(t, err)
		e.clock.Advance(2 * time.Second)
		_, ref2 := e.claim(rc)
		_, err = rc.Source(e.ctx(), ref)
		require.Equal(t, protocol.CodeLeaseExpired, code(err))
		ans2, err := rc.Source(e.ctx(), ref2)
		require.NoError(t, err)
		require.NoError(t, rc.Relinquish(e.ctx(), ref2, "test"))
		_, err = rc.DownloadSource(e.ctx(), ans2.URL)
		require.Equal(t, protocol.CodeTicketExpired, code(err), "bound to its attempt")

		// A self-hosted runner gets the repository and commit only.
		tok, err := e.admin.CreateRegistrationToken(e.ctx(), protocol.RegistrationTokenRequest{Pool: "default", SelfHosted: true})
		require.NoError(t, err)
		pub, priv, err := ed25519.GenerateKey(rand.Reader)
		require.NoError(t, err)
		sh := &apiclient.RunnerClient{BaseURL: e.srv.URL, Key: priv, HTTP: e.srv.Client(), Clock: e.clock}
		reg, err := sh.Register(e.ctx(), tok.Token, protocol.RegisterRequest{Name: "sh", PublicKey: protocol.EncodeKey(pub)})
		require.NoError(t, err)
		sh.RunnerID = reg.RunnerID
		asg3, ref3 := e.claim(sh)
		ans3, err := sh.Source(e.ctx(), ref3)
		require.NoError(t, err)
		require.Equal(t, protocol.SourceAnswer{Kind: protocol.SourceKindDescriptor, Repo: "code", Commit: asg3.Source.Commit}, *ans3)
	})
}

func gitHead(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, ".git", "refs", "heads", "main"))
	require.NoError(t, err)
	return string(b)
}

// ---- test readers ----

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

type countingReader struct {
	r     io.Reader
	n     atomic.Int64
	limit int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.n.Load() >= c.limit {
		return 0, io.EOF
	}
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// trickle sends one byte per tick.
type trickle struct {
	n     int
	every time.Duration
}

func (t *trickle) Read(p []byte) (int, error) {
	if t.n == 0 {
		return 0, io.EOF
	}
	time.Sleep(t.every)
	t.n--
	p[0] = 'x'
	return 1, nil
}

// hookReader runs hook once, at EOF: after the server has read the body.
type hookReader struct {
	r    io.Reader
	hook func()
	done bool
}

func (h *hookReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	if errors.Is(err, io.EOF) && !h.done {
		h.done = true
		h.hook()
	}
	return n, err
}

// rawPut sends a PUT with a Content-Length that need not match the body.
func rawPut(t *testing.T, base, path string, contentLength int, body []byte) (int, string) {
	t.Helper()
	host := strings.TrimPrefix(base, "http://")
	conn, err := net.Dial("tcp", host)
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "PUT %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n", path, host, contentLength)
	require.NoError(t, err)
	_, _ = conn.Write(body)
	resp, err := http.ReadResponse(bufioReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	var p protocol.Problem
	b, _ := io.ReadAll(resp.Body)
	_ = jsonUnmarshal(b, &p)
	return resp.StatusCode, p.Code
}
