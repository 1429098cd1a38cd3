package api_test

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/api"
	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// mt2NotAttemptScoped are the signed routes that take no run, attempt,
// lease or artifact identifier, and why; every other signed route is swept.
var mt2NotAttemptScoped = map[string]string{
	"/v1/runner/claim": "names nothing: the server alone chooses the attempt, in the runner's own tenant",
	"/v1/runner/keys":  "names nothing but the runner's new public key",
}

// mt2Bodies are the bodies the sweep sends to each attempt-scoped route;
// "{{attempt}}" is replaced by the attempt identifier under test.
var mt2Bodies = map[string]string{
	"/v1/runner/heartbeat":          `{"status":"busy","attempts":["{{attempt}}"]}`,
	"/v1/runner/attempt/renew":      `{}`,
	"/v1/runner/attempt/logs":       `{"seq":1,"lines":[{"at":"2026-11-01T12:00:00Z","stream":"stdout","text":"x"}]}`,
	"/v1/runner/attempt/relinquish": `{"reason":"mt2"}`,
	"/v1/runner/attempt/result":     `{"outcome":"succeeded","exit_code":0,"summary":"ok","artifacts":[]}`,
	"/v1/runner/attempt/artifacts":  `{"name":"out.txt"}`,
	"/v1/runner/attempt/source":     `{}`,
	// Two items: the second names an attempt that exists nowhere, so the
	// batch's answer for the first must not depend on the other items.
	"/v1/runner/results": `{"results":[{"run_id":"{{run}}","attempt_id":"{{attempt}}","lease_token":"{{lease}}","outcome":"succeeded","exit_code":0,"summary":"ok","artifacts":[]},` +
		`{"run_id":"run_01M8ZZZZZZZZZZZZZZZZZZZZZZ","attempt_id":"att_01M8ZZZZZZZZZZZZZZZZZZZZZZ","lease_token":"none","outcome":"succeeded","exit_code":0,"summary":"ok","artifacts":[]}]}`,
}

var mt2Files = func() map[string]string {
	f := maps.Clone(testDefinitions)
	f["jobs/made.yaml"] = "name: made\nrun: {command: [\"true\"]}\nartifacts: [{name: out.txt}]\n"
	f["policies/mt2.yaml"] = "rules:\n  - id: made\n    jobs: [made]\n    users: [\"*\"]\n"
	return f
}()

// mt2Tenant is tenant B: its own admin, runner, a live attempt and a stored
// artifact of that attempt.
type mt2Tenant struct {
	admin    *apiclient.Client
	rc       *apiclient.RunnerClient
	ref      apiclient.AttemptRef
	artifact string
}

func newMT2TenantB(t *testing.T, e *testEnv) *mt2Tenant {
	t.Helper()
	ctx := e.ctx()
	secret := "jpt_tenant_b_" + strings.Repeat("b", 20)
	require.NoError(t, e.store.InTx(ctx, func(tx store.Tx) error {
		now := e.clock.Now()
		tn, err := tx.TenantEnsure(ctx, "tenant-b", &now)
		if err != nil {
			return err
		}
		p := &store.Principal{ID: id.New(id.Principal, now), Tenant: tn.ID, Kind: "user", Name: "admin", Admin: true, CreatedAt: now}
		if err := tx.PrincipalCreate(ctx, p); err != nil {
			return err
		}
		return tx.APITokenCreate(ctx, &store.APIToken{ID: id.New(id.Token, now), PrincipalID: p.ID, Digest: authn.Digest(secret), CreatedAt: now})
	}))
	b := &mt2Tenant{admin: &apiclient.Client{BaseURL: e.srv.URL, Token: secret, HTTP: e.srv.Client()}}
	// Tenant B's runner, registered with B's own token.
	saved := e.admin
	e.admin = b.admin
	b.rc = e.runner()
	_, err := b.admin.CreateRun(ctx, &protocol.RunRequest{Job: "made", Channel: "prod"})
	require.NoError(t, err)
	e.admin = saved
	_, b.ref = e.claim(b.rc)
	capa, err := b.rc.RequestUpload(ctx, b.ref, protocol.ArtifactRequest{Name: "out.txt"})
	require.NoError(t, err)
	up, err := b.rc.Upload(ctx, capa.UploadURL, strings.NewReader("b's data"), 8)
	require.NoError(t, err)
	b.artifact = up.ArtifactID
	return b
}

// TestMT2CrossTenantIDsAreUnknown is acceptance case MT2, as a router sweep:
// every signed route that takes a run, attempt, lease or artifact
// identifier gets tenant B's live identifiers, signed by tenant A's runner,
// and well-formed identifiers that exist nowhere. The answers are the same
// (status, code, body once identifiers are masked), B's run is untouched,
// and each cross-tenant reference leaves one audit event in A's tenant that
// names neither B nor B's identifiers.
func TestMT2CrossTenantIDsAreUnknown(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnvFiles(t, st, mt2Files)
		ctx := e.ctx()
		b := newMT2TenantB(t, e)
		a := e.runner()
		aRun := e.request("made", "")
		_, aRef := e.claim(a)
		aRunRow, err := st.RunGetByID(ctx, aRun.ID, false)
		require.NoError(t, err)
		tenantA := aRunRow.Tenant

		bRunBefore, err := st.RunGetByID(ctx, b.ref.RunID, false)
		require.NoError(t, err)
		require.NotEqual(t, tenantA, bRunBefore.Tenant)
		bAttBefore, err := st.AttemptGetByID(ctx, b.ref.AttemptID, false)
		require.NoError(t, err)
		bViewBefore, err := b.admin.GetRun(ctx, b.ref.RunID)
		require.NoError(t, err)

		// The route table decides what is swept: a signed route added
		// later fails here until it is swept or given a reason.
		h := api.New(api.Config{Control: e.svc, Auth: &authn.Authenticator{Store: st, Clock: e.clock}})
		routes := h.SignedRoutes()
		slices.Sort(routes)
		for _, r := range routes {
			_, swept := mt2Bodies[r]
			_, skipped := mt2NotAttemptScoped[r]
			require.True(t, swept != skipped, "signed route %s must be swept (mt2Bodies) or listed as not attempt-scoped with a reason", r)
		}
		for r := range mt2Bodies {
			require.Contains(t, routes, r, "swept route no longer exists")
		}
		for r := range mt2NotAttemptScoped {
			require.Contains(t, routes, r, "listed route no longer exists")
		}

		now := e.clock.Now()
		fakeRun, fakeAtt, fakeArt := id.New(id.Run, now), id.New(id.Attempt, now), id.New("art_", now)
		fakeLease := id.Secret(32)
		masks := []struct{ from, to string }{
			{b.ref.RunID, "<run>"}, {fakeRun, "<run>"},
			{b.ref.AttemptID, "<attempt>"}, {fakeAtt, "<attempt>"},
			{b.artifact, "<artifact>"}, {fakeArt, "<artifact>"},
		}
		stamp := regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)
		norm := func(body string) string {
			for _, m := range masks {
				body = strings.ReplaceAll(body, m.from, m.to)
			}
			return stamp.ReplaceAllString(body, "<time>")
		}
		send := func(path, body string, ref apiclient.AttemptRef) (int, string, string) {
			t.Helper()
			req := e.signedRequest(rawSigned{Path: path, Body: []byte(body), Runner: a.RunnerID, Key: a.Key,
				Run: ref.RunID, Attempt: ref.AttemptID, Lease: ref.LeaseToken})
			resp, err := e.srv.Client().Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			raw, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			var p protocol.Problem
			_ = json.Unmarshal(raw, &p)
			return resp.StatusCode, p.Code, string(raw)
		}
		events := func() []*store.AuditEvent {
			t.Helper()
			ev, err := st.AuditList(ctx, &store.AuditListParams{Tenant: tenantA, Limit: 1000})
			require.NoError(t, err)
			var out []*store.AuditEvent
			for _, x := range ev {
				if x.Action == control.ActionCrossTenantReference {
					out = append(out, x)
				}
			}
			return out
		}

		type variant struct {
			name       string
			real, fake apiclient.AttemptRef
			kinds      []string
		}
		variants := []variant{
			{"attempt, run and lease of B", b.ref, apiclient.AttemptRef{RunID: fakeRun, AttemptID: fakeAtt, LeaseToken: fakeLease}, []string{"attempt", "run"}},
			{"run of B, unknown attempt", apiclient.AttemptRef{RunID: b.ref.RunID, AttemptID: fakeAtt, LeaseToken: fakeLease},
				apiclient.AttemptRef{RunID: fakeRun, AttemptID: fakeAtt, LeaseToken: fakeLease}, []string{"run"}},
		}
		type want struct {
			route string
			kinds []string
		}
		var wantEvents []want
		for _, route := range slices.Sorted(maps.Keys(mt2Bodies)) {
			body := mt2Bodies[route]
			if route == "/v1/runner/heartbeat" {
				// The heartbeat names attempts in its body, not its headers.
				rs, rc, rb := send(route, strings.ReplaceAll(body, "{{attempt}}", b.ref.AttemptID), apiclient.AttemptRef{})
				fs, fc, fb := send(route, strings.ReplaceAll(body, "{{attempt}}", fakeAtt), apiclient.AttemptRef{})
				require.Equal(t, http.StatusOK, fs, fb)
				require.Equal(t, []any{fs, fc, norm(fb)}, []any{rs, rc, norm(rb)}, route)
				require.Contains(t, rb, b.ref.AttemptID, "B's attempt is answered as one to cancel, like an unknown one")
				wantEvents = append(wantEvents, want{route, []string{"attempt"}})
				continue
			}
			if route == "/v1/runner/results" {
				// A batch of results names its attempts in its items, and
				// answers each item: the call is accepted, the item refused.
				items := func(ref apiclient.AttemptRef) string {
					return strings.NewReplacer("{{run}}", ref.RunID, "{{attempt}}", ref.AttemptID, "{{lease}}", ref.LeaseToken).Replace(body)
				}
				for _, v := range variants {
					rs, rc, rb := send(route, items(v.real), apiclient.AttemptRef{})
					fs, fc, fb := send(route, items(v.fake), apiclient.AttemptRef{})
					require.Equal(t, http.StatusOK, fs, fb)
					require.Contains(t, fb, `"code":"`+protocol.CodeAttemptStale+`"`)
					require.Equal(t, []any{fs, fc, norm(fb)}, []any{rs, rc, norm(rb)}, "%s %s", route, v.name)
					wantEvents = append(wantEvents, want{route, v.kinds})
				}
				continue
			}
			for _, v := range variants {
				rs, rc, rb := send(route, body, v.real)
				fs, fc, fb := send(route, body, v.fake)
				// the protocol: an attempt that is not this runner's current
				// lease is 409 attempt_stale; MT2's "as if unknown" holds
				// because an unknown attempt gets exactly that answer.
				require.Equal(t, http.StatusConflict, fs, "%s %s: %s", route, v.name, fb)
				require.Equal(t, protocol.CodeAttemptStale, fc)
				require.Equal(t, []any{fs, fc, norm(fb)}, []any{rs, rc, norm(rb)}, "%s %s", route, v.name)
				wantEvents = append(wantEvents, want{route, v.kinds})
			}
		}
		// An artifact of B's named in the result of A's own live attempt.
		resultBody := func(art string) string {
			return `{"outcome":"succeeded","exit_code":0,"summary":"ok","artifacts":["` + art + `"]}`
		}
		rs, rc, rb := send("/v1/runner/attempt/result", resultBody(b.artifact), aRef)
		fs, fc, fb := send("/v1/runner/attempt/result", resultBody(fakeArt), aRef)
		require.Equal(t, http.StatusUnprocessableEntity, fs, fb)
		require.Equal(t, protocol.CodeArtifactInvalid, fc)
		require.Equal(t, []any{fs, fc, norm(fb)}, []any{rs, rc, norm(rb)})
		wantEvents = append(wantEvents, want{"/v1/runner/attempt/result", []string{"artifact"}})
		resultsBody := func(art string) string {
			return fmt.Sprintf(`{"results":[{"run_id":%q,"attempt_id":%q,"lease_token":%q,"outcome":"succeeded","exit_code":0,"summary":"ok","artifacts":[%q]}]}`,
				aRef.RunID, aRef.AttemptID, aRef.LeaseToken, art)
		}
		rs, rc, rb = send("/v1/runner/results", resultsBody(b.artifact), apiclient.AttemptRef{})
		fs, fc, fb = send("/v1/runner/results", resultsBody(fakeArt), apiclient.AttemptRef{})
		require.Equal(t, http.StatusOK, fs, fb)
		require.Contains(t, fb, `"code":"`+protocol.CodeArtifactInvalid+`"`)
		require.Equal(t, []any{fs, fc, norm(fb)}, []any{rs, rc, norm(rb)})
		wantEvents = append(wantEvents, want{"/v1/runner/results", []string{"artifact"}})

		// B's run and attempt are exactly as they were.
		bRunAfter, err := st.RunGetByID(ctx, b.ref.RunID, false)
		require.NoError(t, err)
		require.Equal(t, bRunBefore, bRunAfter)
		bAttAfter, err := st.AttemptGetByID(ctx, b.ref.AttemptID, false)
		require.NoError(t, err)
		require.Equal(t, bAttBefore, bAttAfter)
		bViewAfter, err := b.admin.GetRun(ctx, b.ref.RunID)
		require.NoError(t, err)
		require.Equal(t, bViewBefore, bViewAfter)
		_, err = b.rc.Renew(ctx, b.ref)
		require.NoError(t, err, "B's lease still works")

		// One event per cross-tenant request, none for the unknown ones,
		// in A's tenant, naming A's runner, the route and the kinds only.
		got := events()
		require.Len(t, got, len(wantEvents))
		for i, ev := range got {
			require.Equal(t, tenantA, ev.Tenant)
			require.Equal(t, "runner:"+a.RunnerID, ev.Actor)
			var d struct {
				Route string   `json:"route"`
				Kinds []string `json:"kinds"`
			}
			require.NoError(t, json.Unmarshal(ev.Details, &d))
			require.Equal(t, wantEvents[i].route, d.Route)
			require.Equal(t, wantEvents[i].kinds, d.Kinds)
			for _, secret := range []string{bRunBefore.Tenant, b.ref.RunID, b.ref.AttemptID, b.ref.LeaseToken, b.artifact, b.rc.RunnerID} {
				require.NotContains(t, string(ev.Details)+ev.Subject, secret)
			}
		}
		// B's tenant saw nothing of A's probing.
		bEv, err := st.AuditList(ctx, &store.AuditListParams{Tenant: bRunBefore.Tenant, Limit: 1000})
		require.NoError(t, err)
		for _, ev := range bEv {
			require.NotEqual(t, control.ActionCrossTenantReference, ev.Action)
		}
	})
}
