package api_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/actionsoidc"
	"github.com/jobplane/jobplane/internal/admin"
	"github.com/jobplane/jobplane/internal/api"
	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/catalogs"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/connector/broker"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/creds"
	"github.com/jobplane/jobplane/internal/github/fakegithub"
	"github.com/jobplane/jobplane/internal/githubapp"
	"github.com/jobplane/jobplane/internal/githubapp/actions"
	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/openapi/openapitest"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/retention"
	"github.com/jobplane/jobplane/internal/runcreds"
	"github.com/jobplane/jobplane/internal/schedule"
	"github.com/jobplane/jobplane/internal/server"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

const (
	adminToken = "test-admin-token-0123456789"
	testIssuer = "http://jobplane.test"
)

var testDefinitions = map[string]string{
	"jobs/echo.yaml": `name: echo
description: Print a message
params:
  type: object
  additionalProperties: false
  properties:
    message: {type: string, default: hi, pattern: "^[a-z ]{1,20}$"}
run:
  command: [sh, -c, 'echo "$JOBPLANE_PARAM_MESSAGE"']
  timeout: 10m
  lease_ttl: 30s
`,
	"jobs/flaky.yaml": `name: flaky
description: Retried
run:
  command: [sh, -c, 'exit 1']
  timeout: 2m
  lease_ttl: 10s
retries: {max_attempts: 3, backoff: 5s}
`,
	"jobs/gpu.yaml": `name: gpu
description: Needs a label
run:
  command: ["true"]
runs_on: {pool: default, labels: [gpu]}
`,
	"jobs/secret.yaml": `name: secret
description: Nobody may run this
run:
  command: ["true"]
`,
	"groups.yaml": `groups:
  operators: {members: [admin, alice]}
  contractors: {members: [mallory]}
`,
	"policies/main.yaml": `rules:
  - id: everyone-echo
    jobs: [echo, flaky, gpu]
    users: ["*"]
  - id: no-contractors
    effect: deny
    jobs: ["*"]
    groups: [contractors]
`,
}

type testEnv struct {
	t     *testing.T
	store store.Store
	clock *clock.Fake
	svc   *control.Service
	// creds is the run-credentials service; tokens signs run tokens.
	creds  *runcreds.Service
	tokens *runcreds.Keys
	gh     *githubapp.Service
	sched  *schedule.Service
	act    *actions.Service
	srv    *httptest.Server
	admin  *apiclient.Client
	repo   string
	// oidc is the fake GitHub whose Actions OIDC issuer the server trusts.
	oidc *fakegithub.Fake
}

func newEnv(t *testing.T, st store.Store) *testEnv {
	t.Helper()
	return newEnvFiles(t, st, testDefinitions)
}

// newEnvFiles is newEnv over another definitions repository.
func newEnvFiles(t *testing.T, st store.Store, files map[string]string) *testEnv {
	t.Helper()
	repo := t.TempDir()
	_, err := gitsync.InitRepo(repo, "main", files, "init")
	require.NoError(t, err)
	defs, err := server.OpenDefinitions(repo, map[string]string{"prod": "main"})
	require.NoError(t, err)
	fc := clock.NewFake(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
	box, err := creds.NewBox(bytes.Repeat([]byte{7}, 32))
	require.NoError(t, err)
	// The system under test connects as the production app role, bound by
	// row-level security (MT3): a path that forgot its scope fails here.
	// Fixtures keep using st (the superuser on PostgreSQL).
	app := testdb.AppView(t, st)
	tokens, err := runcreds.NewKeys(context.Background(), app, box, fc, testIssuer)
	require.NoError(t, err)
	arts := testArtifacts(t, repo)
	fake := fakegithub.New(t, fakegithub.Options{AppID: 1, PublicKey: &fakegithub.Key(t, 0).PublicKey, Clock: fc})
	verifier, err := actionsoidc.New(actionsoidc.Config{Issuer: fake.OIDCIssuer(), Clock: fc})
	require.NoError(t, err)
	svc, gh, act := wireActions(t, control.Config{Store: app, Clock: fc, Definitions: defs, Credentials: tokens,
		Sources: arts.heads()}, actions.Config{Verifier: verifier})
	artSvc, srcSvc := arts.services(app, fc, svc, gh)
	sched := schedule.New(schedule.Config{Store: app, Clock: fc, Runs: svc, Definitions: defs, Tenants: gh})
	cats, err := catalogs.New(catalogs.Config{Store: app, Clock: fc, Definitions: defs, Tenants: gh, Runs: svc})
	require.NoError(t, err)
	adm := admin.New(app, fc)
	adm.OnRunnersChanged(svc.RunnersChanged)
	require.NoError(t, adm.EnsureAdmin(context.Background(), adminToken))
	// The retention sweep keeps logs a day and artifacts two by default.
	sweeper := retention.New(retention.Config{Store: app, Objects: arts.Storage, Clock: fc,
		DefaultLogs: 24 * time.Hour, DefaultArtifacts: 48 * time.Hour})
	rc := runcreds.New(runcreds.Config{Store: app, Clock: fc, Keys: tokens, Box: box, Broker: broker.NewBroker(app, box)})
	h := api.New(api.Config{Control: svc, Admin: adm, Audit: audit.NewLog(app), Creds: rc, GitHubApp: gh, Actions: act, Catalogs: cats, Auth: &authn.Authenticator{Store: app, Clock: fc}, Ready: app.Ping, PublicURL: testIssuer,
		Retention: sweeper, Artifacts: artSvc, Sources: srcSvc, Schedules: sched})
	srv := httptest.NewServer(openapitest.Handler(t, h))
	t.Cleanup(srv.Close)
	return &testEnv{t: t, store: st, clock: fc, svc: svc, sched: sched, creds: rc, tokens: tokens, gh: gh, act: act, oidc: fake, srv: srv, repo: repo,
		admin: &apiclient.Client{BaseURL: srv.URL, Token: adminToken, HTTP: srv.Client()}}
}

func (e *testEnv) ctx() context.Context { return context.Background() }

// runner registers a new runner with the given labels.
func (e *testEnv) runner(labels ...string) *apiclient.RunnerClient {
	e.t.Helper()
	tok, err := e.admin.CreateRegistrationToken(e.ctx(), protocol.RegistrationTokenRequest{Pool: "default", Labels: labels})
	require.NoError(e.t, err)
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(e.t, err)
	rc := &apiclient.RunnerClient{BaseURL: e.srv.URL, Key: priv, HTTP: e.srv.Client(), Clock: e.clock}
	resp, err := rc.Register(e.ctx(), tok.Token, protocol.RegisterRequest{Name: "r", PublicKey: protocol.EncodeKey(pub), Labels: labels})
	require.NoError(e.t, err)
	rc.RunnerID = resp.RunnerID
	return rc
}

func (e *testEnv) request(job string, params string) *protocol.Run {
	e.t.Helper()
	req := &protocol.RunRequest{Job: job, Channel: "prod"}
	if params != "" {
		req.Params = json.RawMessage(params)
	}
	run, err := e.admin.CreateRun(e.ctx(), req)
	require.NoError(e.t, err)
	return run
}

func (e *testEnv) claim(rc *apiclient.RunnerClient) (*protocol.Assignment, apiclient.AttemptRef) {
	e.t.Helper()
	asg, err := rc.Claim(e.ctx(), 0, "")
	require.NoError(e.t, err)
	require.NotNil(e.t, asg, "expected an assignment")
	return asg, apiclient.AttemptRef{RunID: asg.RunID, AttemptID: asg.AttemptID, LeaseToken: asg.Lease.Token}
}

func (e *testEnv) run(id string) *protocol.Run {
	e.t.Helper()
	r, err := e.admin.GetRun(e.ctx(), id)
	require.NoError(e.t, err)
	return r
}

// rawSigned builds a signed request by hand so tests can tamper with any part.
type rawSigned struct {
	Method, Path, Query string
	Body                []byte
	Runner              string
	Key                 ed25519.PrivateKey
	Timestamp           string
	Nonce               string
	Run, Attempt, Lease string
	SignPath            string // when set, sign this path instead of Path
}

func (e *testEnv) signedRequest(r rawSigned) *http.Request {
	e.t.Helper()
	if r.Method == "" {
		r.Method = http.MethodPost
	}
	if r.Timestamp == "" {
		r.Timestamp = strconv.FormatInt(e.clock.Now().Unix(), 10)
	}
	if r.Nonce == "" {
		r.Nonce = apiclient.NewNonce()
	}
	sp := r.Path
	if r.SignPath != "" {
		sp = r.SignPath
	}
	sig, err := protocol.Sign(r.Key, &protocol.SignedRequest{Method: r.Method, Path: sp, RawQuery: r.Query, Timestamp: r.Timestamp,
		Nonce: r.Nonce, Runner: r.Runner, Run: r.Run, Attempt: r.Attempt, Lease: r.Lease, Body: r.Body})
	if err != nil {
		sig = "AAAA"
	}
	u := e.srv.URL + r.Path
	if r.Query != "" {
		u += "?" + r.Query
	}
	req, err := http.NewRequest(r.Method, u, bytes.NewReader(r.Body))
	require.NoError(e.t, err)
	req.Header.Set(protocol.HeaderRunner, r.Runner)
	req.Header.Set(protocol.HeaderTimestamp, r.Timestamp)
	req.Header.Set(protocol.HeaderNonce, r.Nonce)
	req.Header.Set(protocol.HeaderSignature, sig)
	if r.Run != "" {
		req.Header.Set(protocol.HeaderRun, r.Run)
		req.Header.Set(protocol.HeaderAttempt, r.Attempt)
		req.Header.Set(protocol.HeaderLease, r.Lease)
	}
	req.Header.Set("Content-Type", "application/json")
	return req
}

// send sends a request and returns status and problem code.
func (e *testEnv) send(req *http.Request) (int, string) {
	e.t.Helper()
	resp, err := e.srv.Client().Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var p protocol.Problem
	_ = json.Unmarshal(b, &p)
	return resp.StatusCode, p.Code
}
