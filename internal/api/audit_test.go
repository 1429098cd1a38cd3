package api_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/actionsoidc"
	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/github/fakegithub"
	"github.com/jobplane/jobplane/internal/githubapp"
	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

var auditDefinitions = map[string]string{
	"jobs/work.yaml": `name: work
description: Takes a lease key per n
params:
  type: object
  required: [n]
  properties:
    n: {type: string, pattern: "^[0-9]+$"}
run: {command: ["true"], lease_ttl: 30s}
leases:
  - key: "work:{params.n}"
`,
	"jobs/gated.yaml": "name: gated\ndescription: Needs a lead\nrun: {command: [\"true\"]}\n",
	"jobs/built.yaml": "name: built\nrun: {command: [\"true\"]}\nruns_on: {pool: src}\nartifacts: [{name: out.txt}]\nsource: {repo: code}\n",
	"groups.yaml":     "groups:\n  leads: {members: [alice]}\n",
	"policies/all.yaml": `rules:
  - id: work
    jobs: [work]
    users: ["*"]
  - id: built
    jobs: [built]
    users: ["*"]
  - id: gated
    jobs: [gated]
    users: ["*"]
    approval: {count: 1, groups: [leads]}
`,
}

// mutatingRoutes reads the route table from the package's source, so that
// a route added later without an audit case fails the sweep below.
func mutatingRoutes(t *testing.T) []string {
	t.Helper()
	files, err := os.ReadDir(".")
	require.NoError(t, err)
	handle := regexp.MustCompile(`HandleFunc\("(POST|PUT|DELETE|PATCH) ([^"]+)"`)
	signed := regexp.MustCompile(`"(/v1/runner/[^"]+)":\s+h\.`)
	var out []string
	for _, f := range files {
		if !strings.HasSuffix(f.Name(), ".go") || strings.HasSuffix(f.Name(), "_test.go") {
			continue
		}
		b, err := os.ReadFile(f.Name())
		require.NoError(t, err)
		for _, m := range handle.FindAllStringSubmatch(string(b), -1) {
			out = append(out, m[1]+" "+m[2])
		}
		for _, m := range signed.FindAllStringSubmatch(string(b), -1) {
			out = append(out, "POST "+m[1])
		}
	}
	sort.Strings(out)
	require.Greater(t, len(out), 20, "the route table was found")
	return out
}

// notAudited are the mutating routes that append no event, and why.
var notAudited = map[string]string{
	"POST /v1/leases/verify":        "read-only: asks whether a fencing token is current",
	"POST /v1/runner/heartbeat":     "liveness only: refreshes last-seen; its age is a metric (a change of the executor it states is audited: runner.executor_changed, TestRunnerCapabilityInputRefused)",
	"POST /v1/runner/attempt/renew": "renewals are not audited one by one (RELIABILITY decisions); the claim and the end are",
	"POST /v1/runner/attempt/logs":  "output, not a state change: the log is its own record",
	"POST /v1/admin/prune":          "runs the retention sweep early: each deletion it makes is audited (run.logs_pruned, run.artifacts_pruned; TestAdminPrune)",
}

type auditCase struct {
	setup func(e *auditSweep)                        // events it makes are not counted
	do    func(e *auditSweep) error                  // the mutation under test
	want  []string                                   // the actions it must append, in order
	check func(t *testing.T, ev []*store.AuditEvent) // optional
}

type auditSweep struct {
	*testEnv
	rc       *apiclient.RunnerClient
	asg      *protocol.Assignment
	ref      apiclient.AttemptRef
	runID    string
	runnerID string
	tokenID  string
	user     *apiclient.Client
	n        int
	src      srcAttempt // an attempt of a job with artifacts and a source
}

func (e *auditSweep) work() *protocol.Run {
	e.n++
	return e.requestP("work", `{"n":"`+strings.Repeat("1", e.n)+`"}`)
}

func (e *auditSweep) claimed() {
	e.work()
	e.asg, e.ref = e.claim(e.rc)
}

func (e *auditSweep) newRunner() *apiclient.RunnerClient { return e.runner() }

func heldBy(t *testing.T, ev *store.AuditEvent) {
	t.Helper()
	var d struct {
		Holder map[string]string `json:"holder"`
	}
	require.NoError(t, json.Unmarshal(ev.Details, &d), ev.Action)
	for _, k := range []string{"registration", "incarnation", "lease"} {
		require.NotEmpty(t, d.Holder[k], "%s: holder.%s", ev.Action, k)
	}
}

// TestAU1AuditCoverage sweeps every mutating route: each committed mutation
// appends exactly its events, in its transaction, with actor and tenant,
// and attempt and lease events name their holder; routes that do not audit
// say why.
func TestAU1AuditCoverage(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := &auditSweep{testEnv: newEnvFiles(t, st, auditDefinitions)}
		ctx := e.ctx()
		e.rc = e.runner()
		cases := map[string]auditCase{
			"POST /v1/principals": {do: func(e *auditSweep) error {
				_, err := e.admin.CreatePrincipal(ctx, protocol.PrincipalRequest{Name: "carol", Kind: "user"})
				return err
			}, want: []string{"principal.created"}},
			"POST /v1/principals/{name}/tokens": {setup: func(e *auditSweep) { e.principal("dave") }, do: func(e *auditSweep) error {
				_, err := e.admin.CreatePrincipalToken(ctx, "dave", protocol.PrincipalTokenRequest{})
				return err
			}, want: []string{"token.created"}},
			"DELETE /v1/tokens/{id}": {setup: func(e *auditSweep) {
				e.principal("bob")
				tok, err := e.admin.CreatePrincipalToken(ctx, "bob", protocol.PrincipalTokenRequest{})
				require.NoError(t, err)
				e.tokenID = tok.ID
			}, do: func(e *auditSweep) error { return e.admin.RevokeToken(ctx, e.tokenID) }, want: []string{"token.revoked"}},
			"PUT /v1/secrets/{name}": {do: func(e *auditSweep) error {
				return e.admin.SetSecret(ctx, "db-password", "prod", "hunter2")
			}, want: []string{"secret.set"}, check: func(t *testing.T, ev []*store.AuditEvent) {
				require.NotContains(t, string(ev[0].Details), "hunter2", "a secret value is never audited")
			}},
			"POST /v1/admin/signing-keys/rotate": {do: func(e *auditSweep) error {
				_, err := e.admin.RotateSigningKeys(ctx)
				return err
			}, want: []string{"signing_key.rotated"}},
			"POST /v1/runners/registration-tokens": {do: func(e *auditSweep) error {
				_, err := e.admin.CreateRegistrationToken(ctx, protocol.RegistrationTokenRequest{Pool: "default"})
				return err
			}, want: []string{"registration_token.created"}},
			"POST /v1/runner/register": {setup: func(e *auditSweep) {
				tok, err := e.admin.CreateRegistrationToken(ctx, protocol.RegistrationTokenRequest{Pool: "default"})
				require.NoError(t, err)
				e.tokenID = tok.Token
			}, do: func(e *auditSweep) error {
				pub, priv, err := ed25519.GenerateKey(rand.Reader)
				require.NoError(t, err)
				rc := &apiclient.RunnerClient{BaseURL: e.srv.URL, Key: priv, HTTP: e.srv.Client(), Clock: e.clock}
				_, err = rc.Register(ctx, e.tokenID, protocol.RegisterRequest{Name: "r", PublicKey: protocol.EncodeKey(pub)})
				return err
			}, want: []string{"runner.registered"}},
			"POST /v1/runners/{id}/disable": {setup: func(e *auditSweep) { e.runnerID = e.newRunner().RunnerID },
				do:   func(e *auditSweep) error { return e.admin.DisableRunner(ctx, e.runnerID) },
				want: []string{"runner.disabled"}},
			"POST /v1/runners/{id}/enable": {setup: func(e *auditSweep) {
				e.runnerID = e.newRunner().RunnerID
				require.NoError(t, e.admin.DisableRunner(ctx, e.runnerID))
			}, do: func(e *auditSweep) error { return e.admin.EnableRunner(ctx, e.runnerID) }, want: []string{"runner.enabled"}},
			"POST /v1/runner/keys": {do: func(e *auditSweep) error {
				_, k, err := ed25519.GenerateKey(rand.Reader)
				require.NoError(t, err)
				return e.rc.RotateKey(ctx, k)
			}, want: []string{"runner.key_rotated"}},
			"POST /v1/runs": {do: func(e *auditSweep) error {
				e.work()
				return nil
			}, want: []string{"run.requested"}},
			"POST /v1/runs/batch": {do: func(e *auditSweep) error {
				e.n++
				ans, err := e.admin.CreateRuns(ctx, []protocol.RunRequest{{Job: "work", Channel: "prod", Params: json.RawMessage(`{"n":"` + strings.Repeat("1", e.n) + `"}`)}})
				if err == nil {
					err = ans[0].Err
				}
				return err
			}, want: []string{"run.requested"}},
			"POST /v1/runner/claim": {setup: func(e *auditSweep) { e.work() }, do: func(e *auditSweep) error {
				e.asg, e.ref = e.claim(e.rc)
				return nil
			}, want: []string{"lease.acquired", "attempt.claimed"}, check: func(t *testing.T, ev []*store.AuditEvent) {
				heldBy(t, ev[0])
				heldBy(t, ev[1])
			}},
			"POST /v1/runner/attempt/result": {setup: func(e *auditSweep) { e.claimed() }, do: func(e *auditSweep) error {
				_, err := e.rc.Result(ctx, e.ref, protocol.ResultRequest{Outcome: "succeeded", Summary: "done"})
				return err
			}, want: []string{"lease.released", "attempt.succeeded"}, check: func(t *testing.T, ev []*store.AuditEvent) {
				heldBy(t, ev[0])
				heldBy(t, ev[1])
				require.Equal(t, "done", detailOf(t, ev[1], "reason"))
			}},
			"POST /v1/runner/results": {setup: func(e *auditSweep) { e.claimed() }, do: func(e *auditSweep) error {
				ans, err := e.rc.Results(ctx, []apiclient.ResultItem{{Ref: e.ref, Result: protocol.ResultRequest{Outcome: "succeeded", Summary: "batched"}}})
				if err == nil {
					err = ans[0].Err
				}
				return err
			}, want: []string{"lease.released", "attempt.succeeded"}, check: func(t *testing.T, ev []*store.AuditEvent) {
				heldBy(t, ev[0])
				heldBy(t, ev[1])
				require.Equal(t, "batched", detailOf(t, ev[1], "reason"))
			}},
			"POST /v1/runner/attempt/artifacts": {setup: func(e *auditSweep) { e.srcClaimed(t) }, do: func(e *auditSweep) error {
				_, err := e.src.rc.RequestUpload(ctx, e.src.ref, protocol.ArtifactRequest{Name: "out.txt"})
				return err
			}, want: []string{"artifact.capability_issued"}},
			"PUT /v1/uploads/{capability}": {setup: func(e *auditSweep) { e.srcUploadable(t) }, do: func(e *auditSweep) error {
				_, err := e.src.rc.Upload(ctx, e.src.uploadURL, strings.NewReader("out"), 3)
				return err
			}, want: []string{"artifact.stored"}},
			"POST /v1/runner/attempt/source": {setup: func(e *auditSweep) { e.srcClaimed(t) }, do: func(e *auditSweep) error {
				_, err := e.src.rc.Source(ctx, e.src.ref)
				return err
			}, want: []string{"source.ticket_issued"}},
			"POST /v1/run/artifacts": {setup: func(e *auditSweep) { e.srcClaimed(t) }, do: func(e *auditSweep) error {
				_, err := e.src.job.RunRequestUpload(ctx, protocol.ArtifactRequest{Name: "out.txt"})
				return err
			}, want: []string{"artifact.capability_issued"}, check: func(t *testing.T, ev []*store.AuditEvent) {
				require.True(t, strings.HasPrefix(ev[0].Actor, "run:"), "the job asked: %s", ev[0].Actor)
			}},
			"POST /v1/run/source": {setup: func(e *auditSweep) { e.srcClaimed(t) }, do: func(e *auditSweep) error {
				_, err := e.src.job.RunSource(ctx)
				return err
			}, want: []string{"source.ticket_issued"}, check: func(t *testing.T, ev []*store.AuditEvent) {
				require.True(t, strings.HasPrefix(ev[0].Actor, "run:"), "the job asked: %s", ev[0].Actor)
			}},
			"POST /v1/runner/attempt/relinquish": {setup: func(e *auditSweep) { e.claimed() }, do: func(e *auditSweep) error {
				return e.rc.Relinquish(ctx, e.ref, "shutting down")
			}, want: []string{"lease.released", "attempt.relinquished"}, check: func(t *testing.T, ev []*store.AuditEvent) {
				heldBy(t, ev[1])
				require.Equal(t, "shutting down", detailOf(t, ev[1], "reason"))
			}},
			"POST /v1/leases/{key}/release": {setup: func(e *auditSweep) { e.claimed() }, do: func(e *auditSweep) error {
				_, err := e.admin.ReleaseLease(ctx, e.asg.Leases[0].Key, "stuck holder")
				return err
			}, want: []string{"lease.force_released"}, check: func(t *testing.T, ev []*store.AuditEvent) {
				require.Equal(t, "stuck holder", detailOf(t, ev[0], "reason"))
			}},
			"POST /v1/runs/{id}/cancel": {setup: func(e *auditSweep) { e.runID = e.work().ID }, do: func(e *auditSweep) error {
				_, err := e.admin.CancelRun(ctx, e.runID)
				return err
			}, want: []string{"run.cancelled"}},
			"POST /v1/runs/{id}/approve": {setup: func(e *auditSweep) {
				e.runID = e.request("gated", "").ID
				e.user = e.userClient(t, "alice")
			}, do: func(e *auditSweep) error {
				_, err := e.user.ApproveRun(ctx, e.runID, "ok")
				return err
			}, want: []string{"run.approved"}},
			"POST /v1/runs/{id}/reject": {setup: func(e *auditSweep) {
				e.runID = e.request("gated", "").ID
				e.user = e.userClient(t, "alice")
			}, do: func(e *auditSweep) error {
				_, err := e.user.RejectRun(ctx, e.runID, "no")
				return err
			}, want: []string{"run.rejected"}},
			// The webhook route exists only when a webhook secret is set, and
			// its signature check is W1/W2's; this is what it runs after.
			"POST /v1/github/webhook": {do: func(e *auditSweep) error {
				body := []byte(`{"action":"created","installation":{"id":77,"account":{"login":"acme"}},"repositories":[{"id":5,"full_name":"acme/ops"}]}`)
				_, err := e.gh.HandleDelivery(ctx, githubapp.Delivery{ID: "d-77", Event: "installation", Body: body})
				return err
			}, want: []string{"github.installation.created"}},
			// A refused exchange is audited in the tenant of the attempt it
			// named; the accepted one (actions.exchanged with
			// attempt.claimed) is control's TestActionsTwoInstallationsEndToEnd.
			"POST /v1/actions/exchange": {setup: func(e *auditSweep) {
				body := []byte(`{"action":"created","installation":{"id":82,"account":{"login":"umbrella"}},"repositories":[{"id":8,"full_name":"umbrella/app"}]}`)
				_, err := e.gh.HandleDelivery(ctx, githubapp.Delivery{ID: "d-82", Event: "installation", Body: body})
				require.NoError(t, err)
				in, err := st.GitHubInstallationGet(store.WithSystem(ctx, "test"), 82)
				require.NoError(t, err)
				require.NoError(t, st.ActionsDispatchCreate(store.WithSystem(ctx, "test"), &store.ActionsDispatch{
					AttemptID: "att_audit", RunID: "run_audit", Tenant: in.Tenant, InstallationID: 82, Repo: "umbrella/app",
					Commit: strings.Repeat("a", 40), Workflow: "jobplane.yml", RepoID: 8, OwnerID: 820, Ref: "refs/heads/main",
					State: store.DispatchSent}))
			}, do: func(e *auditSweep) error {
				run := fakegithub.WorkflowRun{Dispatch: fakegithub.Dispatch{Repo: "umbrella/app", RepoID: 8, OwnerID: 820,
					Workflow: "jobplane.yml", FullRef: "refs/heads/main", SHA: strings.Repeat("a", 40)}, RunID: 5, RunAttempt: 1}
				claims := e.oidc.OIDCClaims(run, actionsoidc.DefaultAudience)
				claims["event_name"] = "push"
				pub, _, err := ed25519.GenerateKey(rand.Reader)
				require.NoError(t, err)
				_, err = e.act.Exchange(ctx, e.oidc.SignOIDC(claims), &protocol.ActionsExchangeRequest{AttemptID: "att_audit", PublicKey: protocol.EncodeKey(pub)})
				require.ErrorIs(t, err, protocol.ErrOIDCEventMismatch)
				return nil
			}, want: []string{"actions.exchange_refused"}},
			"POST /v1/github/installations/{id}/registration-tokens": {setup: func(e *auditSweep) {
				body := []byte(`{"action":"created","installation":{"id":78,"account":{"login":"globex"}},"repositories":[{"id":6,"full_name":"globex/ci"}]}`)
				_, err := e.gh.HandleDelivery(ctx, githubapp.Delivery{ID: "d-78", Event: "installation", Body: body})
				require.NoError(t, err)
			}, do: func(e *auditSweep) error {
				_, err := e.admin.CreateInstallationRegistrationToken(ctx, 78, protocol.RegistrationTokenRequest{SelfHosted: true, AllowedRepos: []string{"globex/ci"}})
				return err
			}, want: []string{"registration_token.created"}},
			"POST /v1/github/installations/{id}/principals": {setup: func(e *auditSweep) {
				body := []byte(`{"action":"created","installation":{"id":79,"account":{"login":"initech"}},"repositories":[]}`)
				_, err := e.gh.HandleDelivery(ctx, githubapp.Delivery{ID: "d-79", Event: "installation", Body: body})
				require.NoError(t, err)
			}, do: func(e *auditSweep) error {
				_, err := e.admin.CreateInstallationPrincipal(ctx, 79, protocol.PrincipalRequest{Name: "peter"})
				return err
			}, want: []string{"principal.created"}},
			"POST /v1/github/installations/{id}/principals/{name}/tokens": {setup: func(e *auditSweep) {
				body := []byte(`{"action":"created","installation":{"id":80,"account":{"login":"hooli"}},"repositories":[]}`)
				_, err := e.gh.HandleDelivery(ctx, githubapp.Delivery{ID: "d-80", Event: "installation", Body: body})
				require.NoError(t, err)
				_, err = e.admin.CreateInstallationPrincipal(ctx, 80, protocol.PrincipalRequest{Name: "gavin"})
				require.NoError(t, err)
			}, do: func(e *auditSweep) error {
				_, err := e.admin.CreateInstallationPrincipalToken(ctx, 80, "gavin", protocol.PrincipalTokenRequest{})
				return err
			}, want: []string{"token.created"}},
			"DELETE /v1/github/installations/{id}/tokens/{token}": {setup: func(e *auditSweep) {
				body := []byte(`{"action":"created","installation":{"id":81,"account":{"login":"pied"}},"repositories":[]}`)
				_, err := e.gh.HandleDelivery(ctx, githubapp.Delivery{ID: "d-81", Event: "installation", Body: body})
				require.NoError(t, err)
				_, err = e.admin.CreateInstallationPrincipal(ctx, 81, protocol.PrincipalRequest{Name: "richard"})
				require.NoError(t, err)
				tok, err := e.admin.CreateInstallationPrincipalToken(ctx, 81, "richard", protocol.PrincipalTokenRequest{})
				require.NoError(t, err)
				e.tokenID = tok.ID
			}, do: func(e *auditSweep) error {
				return e.admin.RevokeInstallationToken(ctx, 81, e.tokenID)
			}, want: []string{"token.revoked"}},
			"POST /v1/catalogs/sync": {setup: func(e *auditSweep) {
				_, err := gitsync.CommitFiles(e.repo, "main", map[string]string{"jobs/more.yaml": "name: more\nrun: {command: [\"true\"]}\n"}, "more")
				require.NoError(t, err)
			}, do: func(e *auditSweep) error {
				req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/catalogs/sync", nil)
				require.NoError(t, err)
				req.Header.Set("Authorization", "Bearer "+adminToken)
				code, problem := e.send(req)
				require.Equal(t, http.StatusOK, code, problem)
				return nil
			}, want: []string{"catalog.activated"}},
		}
		routes := mutatingRoutes(t)
		for _, route := range routes {
			if reason, ok := notAudited[route]; ok {
				t.Logf("%s: not audited: %s", route, reason)
				continue
			}
			c, ok := cases[route]
			require.True(t, ok, "mutating route %s has no audit case: add one here, or a reason to notAudited", route)
			if c.setup != nil {
				c.setup(e)
			}
			before := auditAll(t, st)
			require.NoError(t, c.do(e), route)
			got := auditAll(t, st)[len(before):]
			var actions []string
			for _, ev := range got {
				actions = append(actions, ev.Action)
				require.NotEmpty(t, ev.Actor, "%s: %s has an actor", route, ev.Action)
				require.NotEmpty(t, ev.Tenant, "%s: %s has a tenant", route, ev.Action)
				require.NotEmpty(t, ev.Subject, "%s: %s has a subject", route, ev.Action)
				require.NotZero(t, ev.At, route)
			}
			require.Equal(t, c.want, actions, "events appended by %s", route)
			if c.check != nil {
				c.check(t, got)
			}
			delete(cases, route)
		}
		var stale []string
		for r := range cases {
			stale = append(stale, r)
		}
		require.Empty(t, stale, "cases for routes that no longer exist")
		require.True(t, slices.IsSorted(routes))
	})
}

// auditAll reads every event of every tenant in order (a webhook's events
// belong to its installation's tenant).
func auditAll(t *testing.T, st store.Store) []*store.AuditEvent {
	t.Helper()
	var out []*store.AuditEvent
	for after := int64(0); ; {
		evs, err := st.AuditScan(t.Context(), &store.AuditScanParams{After: after, Limit: 1000})
		require.NoError(t, err)
		out = append(out, evs...)
		if len(evs) < 1000 {
			return out
		}
		after = evs[len(evs)-1].Seq
	}
}

// principal makes a user principal unless it exists.
func (e *auditSweep) principal(name string) {
	_, _ = e.admin.CreatePrincipal(e.ctx(), protocol.PrincipalRequest{Name: name, Kind: "user"})
}

// userClient makes a principal (unless it exists) and a token for it.
func (e *auditSweep) userClient(t *testing.T, name string) *apiclient.Client {
	t.Helper()
	e.principal(name)
	tok, err := e.admin.CreatePrincipalToken(e.ctx(), name, protocol.PrincipalTokenRequest{})
	require.NoError(t, err)
	return &apiclient.Client{BaseURL: e.srv.URL, Token: tok.Token, HTTP: e.srv.Client()}
}

func detailOf(t *testing.T, ev *store.AuditEvent, key string) any {
	t.Helper()
	var d map[string]any
	require.NoError(t, json.Unmarshal(ev.Details, &d), ev.Action)
	return d[key]
}

// TestAuditQueryRefusals: bad filters and checkpoints are 400 with the
// field named; a non-admin gets 403; filters narrow the listing.
func TestAuditQueryRefusals(t *testing.T) {
	t.Parallel()
	e := &auditSweep{testEnv: newEnv(t, testdb.SQLite(t))}
	get := func(token, path string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, e.srv.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		return e.send(req)
	}
	for _, p := range []string{
		"/v1/audit?since=yesterday", "/v1/audit?after=-1", "/v1/audit?limit=x",
		"/v1/audit/verify?checkpoint=12", "/v1/audit/verify?checkpoint=0:" + strings.Repeat("a", 64),
		"/v1/audit/verify?checkpoint=1:" + strings.Repeat("A", 64),
	} {
		code, problem := get(adminToken, p)
		require.Equal(t, http.StatusBadRequest, code, p)
		require.Equal(t, protocol.CodeBadRequest, problem, p)
	}
	user := e.userClient(t, "bob")
	code, problem := get(user.Token, "/v1/audit")
	require.Equal(t, http.StatusForbidden, code, problem)
	code, problem = get(user.Token, "/v1/audit/verify")
	require.Equal(t, http.StatusForbidden, code, problem)

	run := e.request("echo", "")
	page, err := e.admin.AuditQuery(e.ctx(), apiclient.AuditQuery{RunID: run.ID})
	require.NoError(t, err)
	require.Len(t, page.Events, 1)
	require.Equal(t, "run.requested", page.Events[0].Action)
	page, err = e.admin.AuditQuery(e.ctx(), apiclient.AuditQuery{Actor: "nobody"})
	require.NoError(t, err)
	require.Empty(t, page.Events)
	page, err = e.admin.AuditQuery(e.ctx(), apiclient.AuditQuery{Since: e.clock.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.Empty(t, page.Events, "nothing happened after the fake clock's now + 1h")
	page, err = e.admin.AuditQuery(e.ctx(), apiclient.AuditQuery{Since: e.clock.Now().Add(-time.Hour), Actor: "admin"})
	require.NoError(t, err)
	require.NotEmpty(t, page.Events)
}
