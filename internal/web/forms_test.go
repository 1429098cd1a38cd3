package web_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/store"
)

// The server checks what the browser checked: a bad value comes back next
// to its field, a denial shows the policy's explanation, and a form posted
// twice (same idempotency key) makes one run.
func TestRequestFormServerSide(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	bob := e.client()
	csrf := bob.signIn(e.tokens["bob"])

	resp, body := bob.post("/request", url.Values{"csrf": {csrf}, "channel": {"prod"}, "job": {"greet"}, "p.who": {"Bad1"}, "key": {"k1"}})
	require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode)
	require.Regexp(t, regexp.MustCompile(`id="p-who-err"[^>]*>[^<]*who[^<]*</p>`), body, "the refusal is shown under the who field")
	require.Contains(t, body, `value="Bad1"`, "what was typed is kept")

	resp, body = bob.post("/request", url.Values{"csrf": {csrf}, "channel": {"prod"}, "job": {"greet"}, "p.times": {"two"}, "p.who": {"ok"}})
	require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode)
	require.Regexp(t, regexp.MustCompile(`id="p-times-err"[^>]*>must be a whole number</p>`), body)

	resp, body = bob.post("/request", url.Values{"csrf": {csrf}, "channel": {"prod"}, "job": {"deploy"}, "reason": {"try"}})
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Contains(t, body, `id="denial-explanation"`)
	require.Contains(t, body, "bob", "the explanation names the principal")

	form := url.Values{"csrf": {csrf}, "channel": {"prod"}, "job": {"greet"}, "p.who": {"bob"}, "p.times": {"2"}, "p.tone": {"loud"}, "key": {"web-once"}}
	first, _ := bob.post("/request", form)
	require.Equal(t, http.StatusSeeOther, first.StatusCode)
	again, _ := bob.post("/request", form)
	require.Equal(t, first.Header.Get("Location"), again.Header.Get("Location"))
	runs, _, err := e.svc.ListRuns(ctx, e.admin, store.RunListParams{Actor: "bob", Job: "greet"})
	require.NoError(t, err)
	require.Len(t, runs, 1)
	require.JSONEq(t, `{"who":"bob","times":2,"tone":"loud"}`, string(runs[0].Run.Params))
	require.Contains(t, string(runs[0].Run.Source), `"kind":"web"`, "a run requested from the form says so")

	// The form offers the jobs bob may run, not the one he is denied.
	_, body = bob.get("/request?channel=prod")
	require.Contains(t, body, `<option value="greet"`)
	require.NotContains(t, body, `<option value="deploy"`)
	// "*" is anyone the definitions do not name: not mallory, whom a deny
	// rule keeps from greet.
	mallory := e.client()
	mallory.signIn(e.tokens["mallory"])
	_, body = mallory.get("/request?channel=prod")
	require.NotContains(t, body, `<option value="greet"`)

	// The runs page filters by actor and links the run.
	_, body = bob.get("/runs?actor=bob&job=greet")
	require.Contains(t, body, runs[0].Run.ID)
	_, body = bob.get("/runs?actor=alice")
	require.NotContains(t, body, runs[0].Run.ID)
}

// An admin disables a runner from the runners page; its status shows.
func TestRunnersDisable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker()
	ctx := context.Background()
	var id string
	admin := e.client()
	csrf := admin.signIn(adminToken)
	// The worker registers on start; wait for it through the page itself.
	re := regexp.MustCompile(`data-runner="(rnr_[0-9A-Z]+)"`)
	for deadline := time.Now().Add(30 * time.Second); id == ""; {
		require.True(t, time.Now().Before(deadline), "the worker never registered")
		_, body := admin.get("/runners")
		if m := re.FindStringSubmatch(body); m != nil {
			id = m[1]
		}
	}
	resp, _ := admin.post("/runners/"+id+"/disable", withCSRF(nil, csrf))
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	rn, err := e.st.RunnerGetByID(ctx, id, false)
	require.NoError(t, err)
	require.Equal(t, store.RunnerDisabled, rn.Status)
	_, body := admin.get("/runners")
	require.Contains(t, body, "/runners/"+id+"/enable")
}
