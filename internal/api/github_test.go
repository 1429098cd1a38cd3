package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/api"
	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/control"
	"github.com/jobplane/jobplane/internal/failpoint"
	"github.com/jobplane/jobplane/internal/github"
	"github.com/jobplane/jobplane/internal/github/fakegithub"
	"github.com/jobplane/jobplane/internal/githubapp"
	"github.com/jobplane/jobplane/internal/openapi/openapitest"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

const (
	ghSecret    = "It's a Secret to Everybody"
	ghOldSecret = "the previous secret"
)

type ghEnv struct {
	st    store.Store
	clock *clock.Fake
	url   string
	gh    *fakegithub.Fake
	until time.Time
}

func newGHEnv(t *testing.T, st store.Store) *ghEnv {
	t.Helper()
	return newGHEnvMax(t, st, 0)
}

func newGHEnvMax(t *testing.T, st store.Store, maxBody int64) *ghEnv {
	t.Helper()
	fc := clock.NewFake(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
	svc, app := wire(t, control.Config{Store: st, Clock: fc})
	until := fc.Now().Add(time.Hour)
	h := api.New(api.Config{Control: svc, GitHubApp: app, Auth: &authn.Authenticator{Store: st, Clock: fc}, GitHub: &api.GitHubWebhook{
		Secrets: github.WebhookSecrets{Current: []byte(ghSecret), Previous: []byte(ghOldSecret), PreviousUntil: until},
		Clock:   fc, MaxBody: maxBody,
	}})
	srv := httptest.NewServer(openapitest.Handler(t, h))
	t.Cleanup(srv.Close)
	key := fakegithub.Key(t, 0)
	gh := fakegithub.New(t, fakegithub.Options{AppID: 1, PublicKey: &key.PublicKey, Clock: fc})
	perms := github.Permissions{"metadata": "read", "contents": "read", "checks": "write", "pull_requests": "read"}
	gh.AddInstallation(1, "acme", perms)
	gh.AddInstallation(2, "globex", perms)
	gh.AddInstallation(3, "initech", perms)
	gh.AddRepo(1, "api", "")
	gh.AddRepo(1, "web", "")
	gh.AddRepo(2, "svc", "")
	return &ghEnv{st: st, clock: fc, url: srv.URL + "/v1/github/webhook", gh: gh, until: until}
}

func (e *ghEnv) send(t *testing.T, d fakegithub.Delivery) (int, api.GitHubWebhookResponse) {
	t.Helper()
	resp, err := fakegithub.Send(context.Background(), e.url, []byte(ghSecret), d)
	require.NoError(t, err)
	var out api.GitHubWebhookResponse
	if resp.Status == http.StatusOK {
		require.NoError(t, json.Unmarshal(resp.Body, &out))
	}
	return resp.Status, out
}

// post sends a raw request and returns the status and problem code.
func (e *ghEnv) post(t *testing.T, body []byte, headers map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.url, bytes.NewReader(body))
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var p protocol.Problem
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &p)
	return resp.StatusCode, p.Code
}

func signed(secret, body []byte, event string) map[string]string {
	return map[string]string{"X-Hub-Signature-256": github.SignWebhook(secret, body), "X-GitHub-Event": event,
		"X-GitHub-Delivery": "d-" + strings.Repeat("1", 8), "Content-Type": "application/json"}
}

// nothingWritten checks that no delivery is recorded and that none of the
// fake's installations is bound.
func (e *ghEnv) nothingWritten(t *testing.T, guids ...string) {
	t.Helper()
	e.notBound(t, 1, 2, 3, guids...)
}

func (e *ghEnv) notBound(t *testing.T, a, b, c int64, guids ...string) {
	t.Helper()
	ctx := context.Background()
	for _, g := range guids {
		_, err := e.st.GitHubDeliveryGet(ctx, g)
		require.ErrorIs(t, err, store.ErrNotFound, "delivery %s recorded", g)
	}
	for _, id := range []int64{a, b, c} {
		if id == 0 {
			continue
		}
		_, err := e.st.GitHubInstallationGet(ctx, id)
		require.ErrorIs(t, err, store.ErrNotFound, "installation %d bound", id)
	}
}

// W2 (K): GitHub's published vector verifies through the handler.
func TestGitHubWebhookKnownAnswer(t *testing.T) {
	t.Parallel()
	e := newGHEnv(t, testdb.SQLite(t))
	status, code := e.post(t, []byte("Hello, World!"), map[string]string{
		"X-Hub-Signature-256": "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
		"X-GitHub-Event":      "ping", "X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
	})
	require.Equal(t, http.StatusOK, status, code)
}

// W1: forged, missing or wrong-secret signatures are 401 with no write;
// unknown events and actions are acknowledged without side effects.
func TestGitHubWebhookRefusals(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newGHEnv(t, st)
		d := fakegithub.NewDelivery("installation", e.gh.InstallationPayload("created", 1))
		h := func(sig string) map[string]string {
			m := map[string]string{"X-GitHub-Event": d.Event, "X-GitHub-Delivery": d.GUID}
			if sig != "" {
				m["X-Hub-Signature-256"] = sig
			}
			return m
		}
		good := github.SignWebhook([]byte(ghSecret), d.Body)
		cases := map[string]struct {
			headers map[string]string
			code    string
		}{
			"missing":      {h(""), protocol.CodeWebhookSignatureMissing},
			"sha1 only":    {map[string]string{"X-GitHub-Event": d.Event, "X-GitHub-Delivery": d.GUID, "X-Hub-Signature": "sha1=" + strings.Repeat("0", 40)}, protocol.CodeWebhookSignatureMissing},
			"wrong secret": {h(github.SignWebhook([]byte("guess"), d.Body)), protocol.CodeWebhookSignatureInvalid},
			"forged":       {h("sha256=" + strings.Repeat("ab", 32)), protocol.CodeWebhookSignatureInvalid},
			"malformed":    {h("sha256=xyz"), protocol.CodeWebhookSignatureInvalid},
			"other body":   {h(github.SignWebhook([]byte(ghSecret), []byte("{}"))), protocol.CodeWebhookSignatureInvalid},
		}
		for name, c := range cases {
			status, code := e.post(t, d.Body, c.headers)
			require.Equal(t, http.StatusUnauthorized, status, name)
			require.Equal(t, c.code, code, name)
		}
		e.nothingWritten(t, d.GUID)

		// Signed, but without the delivery headers.
		status, code := e.post(t, d.Body, map[string]string{"X-Hub-Signature-256": good, "X-GitHub-Event": "installation"})
		require.Equal(t, http.StatusBadRequest, status)
		require.Equal(t, protocol.CodeWebhookDeliveryInvalid, code)
		status, code = e.post(t, d.Body, map[string]string{"X-Hub-Signature-256": good, "X-GitHub-Delivery": "x", "X-GitHub-Event": "../etc"})
		require.Equal(t, http.StatusBadRequest, status)
		require.Equal(t, protocol.CodeWebhookDeliveryInvalid, code)
		// Signed, but not the event it claims to be.
		bad := []byte(`{"action":"created","installation":{"id":"one"}}`)
		status, code = e.post(t, bad, signed([]byte(ghSecret), bad, "installation"))
		require.Equal(t, http.StatusBadRequest, status)
		require.Equal(t, protocol.CodeWebhookDeliveryInvalid, code)
		e.nothingWritten(t, d.GUID)

		// Unknown events and actions: 2xx, nothing written.
		var guids []string
		for _, u := range []fakegithub.Delivery{
			fakegithub.NewDelivery("push", map[string]any{"ref": "refs/heads/main"}),
			fakegithub.NewDelivery("ping", map[string]any{"zen": "Design for failure."}),
			fakegithub.NewDelivery("installation", e.gh.InstallationPayload("new_permissions_accepted", 1)),
			fakegithub.NewDelivery("installation_repositories", map[string]any{"action": "renamed", "installation": map[string]any{"id": 1}}),
		} {
			status, out := e.send(t, u)
			require.Equal(t, http.StatusOK, status, u.Event)
			require.Equal(t, string(githubapp.Ignored), out.Outcome, u.Event)
			guids = append(guids, u.GUID)
		}
		e.nothingWritten(t, guids...)
	})
}

// W2: only the raw bytes verify; the size limit applies before hashing.
func TestGitHubWebhookRawBytesAndSize(t *testing.T) {
	t.Parallel()
	e := newGHEnv(t, testdb.SQLite(t))
	checkRawBytesAndSize(t, e)
}

// W2 (N): with the size guard removed (a limit far above the body), the
// same oversized, correctly signed delivery is hashed and accepted, so the
// 413 assertions above can fail.
func TestGitHubWebhookSizeGuardRemoved(t *testing.T) {
	t.Parallel()
	e := newGHEnvMax(t, testdb.SQLite(t), 4*github.MaxWebhookBody)
	big := bytes.Repeat([]byte(" "), github.MaxWebhookBody+1)
	status, _ := e.post(t, big, signed([]byte(ghSecret), big, "ping"))
	require.Equal(t, http.StatusOK, status)
}

func checkRawBytesAndSize(t *testing.T, e *ghEnv) {
	t.Helper()
	raw := []byte("{\n  \"zen\": \"Speak like a human.\",\n  \"hook_id\": 1\n}")
	var v any
	require.NoError(t, json.Unmarshal(raw, &v))
	reser, _ := json.Marshal(v)
	h := signed([]byte(ghSecret), reser, "ping")
	status, code := e.post(t, raw, h)
	require.Equal(t, http.StatusUnauthorized, status)
	require.Equal(t, protocol.CodeWebhookSignatureInvalid, code)
	status, _ = e.post(t, raw, signed([]byte(ghSecret), raw, "ping"))
	require.Equal(t, http.StatusOK, status)

	// Over the limit, even correctly signed: 413, with or without a length.
	big := bytes.Repeat([]byte(" "), github.MaxWebhookBody+1)
	status, code = e.post(t, big, signed([]byte(ghSecret), big, "ping"))
	require.Equal(t, http.StatusRequestEntityTooLarge, status)
	require.Equal(t, protocol.CodeTooLarge, code)
	req, _ := http.NewRequest(http.MethodPost, e.url, io.MultiReader(bytes.NewReader(big)))
	for k, v := range signed([]byte(ghSecret), big, "ping") {
		req.Header.Set(k, v)
	}
	req.ContentLength = -1 // chunked: the limit is enforced while reading
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	// At the limit: accepted.
	atLimit := bytes.Repeat([]byte(" "), github.MaxWebhookBody)
	status, _ = e.post(t, atLimit, signed([]byte(ghSecret), atLimit, "ping"))
	require.Equal(t, http.StatusOK, status)
}

// W4: the previous secret is accepted during the overlap only.
func TestGitHubWebhookSecretRotation(t *testing.T) {
	t.Parallel()
	e := newGHEnv(t, testdb.SQLite(t))
	body := []byte(`{"zen":"Approachable is better than simple."}`)
	status, _ := e.post(t, body, signed([]byte(ghOldSecret), body, "ping"))
	require.Equal(t, http.StatusOK, status)
	e.clock.Set(e.until.Add(-time.Microsecond))
	status, _ = e.post(t, body, signed([]byte(ghOldSecret), body, "ping"))
	require.Equal(t, http.StatusOK, status)
	e.clock.Set(e.until)
	status, code := e.post(t, body, signed([]byte(ghOldSecret), body, "ping"))
	require.Equal(t, http.StatusUnauthorized, status)
	require.Equal(t, protocol.CodeWebhookSignatureInvalid, code)
	status, _ = e.post(t, body, signed([]byte(ghSecret), body, "ping"))
	require.Equal(t, http.StatusOK, status)
}

func repoNamesOf(t *testing.T, st store.Store, installation int64) []string {
	t.Helper()
	repos, err := st.GitHubRepoList(context.Background(), installation)
	require.NoError(t, err)
	var out []string
	for _, r := range repos {
		out = append(out, r.FullName)
	}
	return out
}

// Installation events maintain the tenant ↔ installation binding.
func TestGitHubInstallationLifecycle(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newGHEnv(t, st)
		ctx := context.Background()
		status := func(id int64) string {
			in, err := st.GitHubInstallationGet(ctx, id)
			require.NoError(t, err)
			return in.Status
		}
		deliver := func(d fakegithub.Delivery, want githubapp.Outcome) {
			t.Helper()
			code, out := e.send(t, d)
			require.Equal(t, http.StatusOK, code)
			require.Equal(t, string(want), out.Outcome)
		}

		deliver(fakegithub.NewDelivery("installation", e.gh.InstallationPayload("created", 1)), githubapp.Processed)
		deliver(fakegithub.NewDelivery("installation", e.gh.InstallationPayload("created", 2)), githubapp.Processed)
		a, err := st.GitHubInstallationGet(ctx, 1)
		require.NoError(t, err)
		b, err := st.GitHubInstallationGet(ctx, 2)
		require.NoError(t, err)
		require.NotEqual(t, a.Tenant, b.Tenant, "two installations, two tenants")
		tn, err := st.TenantGetByID(ctx, a.Tenant)
		require.NoError(t, err)
		require.Equal(t, "github-1", tn.Name)
		require.Equal(t, "acme", a.Account)
		require.Equal(t, []string{"acme/api", "acme/web"}, repoNamesOf(t, st, 1))
		require.Equal(t, []string{"globex/svc"}, repoNamesOf(t, st, 2))

		e.gh.AddRepo(1, "docs", "")
		deliver(fakegithub.NewDelivery("installation_repositories", e.gh.InstallationRepositoriesPayload(1, []string{"docs"}, nil)), githubapp.Processed)
		deliver(fakegithub.NewDelivery("installation_repositories", e.gh.InstallationRepositoriesPayload(1, nil, []string{"api"})), githubapp.Processed)
		require.Equal(t, []string{"acme/docs", "acme/web"}, repoNamesOf(t, st, 1))
		require.Equal(t, []string{"globex/svc"}, repoNamesOf(t, st, 2), "installation 2 untouched")

		deliver(fakegithub.NewDelivery("installation", e.gh.InstallationPayload("suspend", 1)), githubapp.Processed)
		require.Equal(t, store.GitHubInstallationSuspended, status(1))
		require.Equal(t, store.GitHubInstallationActive, status(2))
		deliver(fakegithub.NewDelivery("installation", e.gh.InstallationPayload("unsuspend", 1)), githubapp.Processed)
		require.Equal(t, store.GitHubInstallationActive, status(1))
		deliver(fakegithub.NewDelivery("installation", e.gh.InstallationPayload("deleted", 1)), githubapp.Processed)
		require.Equal(t, store.GitHubInstallationDeleted, status(1))
		require.Empty(t, repoNamesOf(t, st, 1))
		// A late copy of "created" does not revive a deleted installation.
		deliver(fakegithub.NewDelivery("installation", e.gh.InstallationPayload("created", 1)), githubapp.Processed)
		require.Equal(t, store.GitHubInstallationDeleted, status(1))
		require.Empty(t, repoNamesOf(t, st, 1))

		// Every change left one audit event in its own tenant, by "github".
		events, err := st.AuditList(ctx, &store.AuditListParams{Tenant: a.Tenant})
		require.NoError(t, err)
		var actions []string
		for _, ev := range events {
			require.Equal(t, githubapp.Actor, ev.Actor)
			require.Equal(t, "github-installation:1", ev.Subject)
			actions = append(actions, ev.Action)
		}
		require.Equal(t, []string{"github.installation.created", "github.installation_repositories.added",
			"github.installation_repositories.removed", "github.installation.suspend", "github.installation.unsuspend",
			"github.installation.deleted", "github.installation.ignored"}, actions)
		events, err = st.AuditList(ctx, &store.AuditListParams{Tenant: b.Tenant})
		require.NoError(t, err)
		require.Len(t, events, 1)
	})
}

// A suspend seen before any "created" (a lost delivery) still binds the
// installation.
func TestGitHubFirstEventNotCreated(t *testing.T) {
	t.Parallel()
	st := testdb.SQLite(t)
	e := newGHEnv(t, st)
	code, out := e.send(t, fakegithub.NewDelivery("installation", e.gh.InstallationPayload("suspend", 2)))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, string(githubapp.Processed), out.Outcome)
	in, err := st.GitHubInstallationGet(context.Background(), 2)
	require.NoError(t, err)
	require.Equal(t, store.GitHubInstallationSuspended, in.Status)
}

func auditCount(t *testing.T, st store.Store, installation int64) int {
	t.Helper()
	in, err := st.GitHubInstallationGet(context.Background(), installation)
	require.NoError(t, err)
	events, err := st.AuditList(context.Background(), &store.AuditListParams{Tenant: in.Tenant})
	require.NoError(t, err)
	return len(events)
}

// W3: dedupe on processed, not on received. Not parallel: failpoints are
// process-wide.
func TestGitHubDeliveryExactlyOnce(t *testing.T) {
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newGHEnv(t, st)
		ctx := context.Background()
		for i, point := range []string{"github.delivery.afterRecord", "github.delivery.beforeCommit"} {
			inst := int64(i + 1)
			d := fakegithub.NewDelivery("installation", e.gh.InstallationPayload("created", inst))
			disable := failpoint.Enable(point, func() error { return failpoint.ErrInjected })
			code, _ := e.send(t, d)
			disable()
			require.Equal(t, http.StatusInternalServerError, code, point)
			e.notBound(t, inst, 0, 0, d.GUID)
			// GitHub redelivers: now it is processed...
			code, out := e.send(t, d)
			require.Equal(t, http.StatusOK, code)
			require.Equal(t, string(githubapp.Processed), out.Outcome)
			// ...and a replay of the processed delivery is a no-op.
			code, out = e.send(t, d)
			require.Equal(t, http.StatusOK, code)
			require.Equal(t, string(githubapp.Duplicate), out.Outcome)
			require.Equal(t, 1, auditCount(t, st, inst))
			_, err := st.GitHubDeliveryGet(ctx, d.GUID)
			require.NoError(t, err)
		}

		// Concurrent copies of one delivery: processed once.
		d := fakegithub.NewDelivery("installation", e.gh.InstallationPayload("created", 3))
		var wg sync.WaitGroup
		var mu sync.Mutex
		outcomes := map[string]int{}
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := fakegithub.Send(ctx, e.url, []byte(ghSecret), d)
				require.NoError(t, err)
				var out api.GitHubWebhookResponse
				require.Equal(t, http.StatusOK, resp.Status, string(resp.Body))
				require.NoError(t, json.Unmarshal(resp.Body, &out))
				mu.Lock()
				outcomes[out.Outcome]++
				mu.Unlock()
			}()
		}
		wg.Wait()
		require.Equal(t, map[string]int{"processed": 1, "duplicate": 7}, outcomes)
		require.Equal(t, 1, auditCount(t, st, 3))
	})
}
