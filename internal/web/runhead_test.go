package web_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// The run page: a header with state, duration, actor and cancel that stays
// in view, the log first while the run is live, the requester never offered
// as an approver, and an ended run's failure said in plain words.
func TestRunPageHeadApproversAndFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	v, _, err := e.svc.RequestRun(ctx, e.actor("alice"), &protocol.RunRequest{Job: "rotate", Channel: "prod"})
	require.NoError(t, err)
	require.Equal(t, store.RunPendingApproval, v.Run.State)

	alice := e.client()
	alice.signIn(e.tokens["alice"])
	_, body := alice.get("/runs/" + v.Run.ID)
	head := body[strings.Index(body, `id="run-head"`):]
	head = head[:strings.Index(head, "</div>")]
	require.Contains(t, head, `class="run-head"`)
	require.Contains(t, head, `id="head-state">pending_approval<`)
	require.Contains(t, head, `id="head-actor">alice<`)
	require.Contains(t, head, `id="head-cancel"`, "the requester may cancel from the header")
	require.Contains(t, head, `hx-get="/runs/`+v.Run.ID+`/head"`, "the header refreshes while the run is live")
	require.Less(t, strings.Index(body, `id="h-log"`), strings.Index(body, `id="h-request"`), "the log comes first while the run is live")
	require.Contains(t, body, "(approvers: admin; not alice, who requested it)")
	require.NotContains(t, body, "approvers: admin, alice")
	require.Contains(t, body, "You requested this run, so you cannot approve it.")

	_, part := alice.get("/runs/" + v.Run.ID + "/head")
	require.Contains(t, part, `id="head-state">pending_approval<`)

	// admin approves; the job exits 3 and the page says so in words.
	_, err = e.svc.Approve(ctx, e.admin, v.Run.ID, "go")
	require.NoError(t, err)
	e.startWorker()
	deadline := time.Now().Add(30 * time.Second)
	for {
		rv, err := e.svc.GetRun(ctx, e.admin, v.Run.ID)
		require.NoError(t, err)
		if rv.Run.State.Terminal() {
			require.Equal(t, store.RunFailed, rv.Run.State)
			break
		}
		require.True(t, time.Now().Before(deadline), "run did not end: %s", rv.Run.State)
		time.Sleep(50 * time.Millisecond)
	}
	_, body = alice.get("/runs/" + v.Run.ID)
	require.Contains(t, body, `id="failure-reason">The job failed: its command exited with status 3.`)
	require.Greater(t, strings.Index(body, `id="h-log"`), strings.Index(body, `id="h-request"`), "an ended run shows its request first")
	require.NotContains(t, body, `id="head-cancel"`)
	require.NotContains(t, body[strings.Index(body, `id="run-head"`):strings.Index(body, `id="h-request"`)], "hx-get", "an ended run's header is not polled")
}

// The audit page: details readable (no \u003c), IDs kept whole, times
// relative with the exact time on hover.
func TestAuditPageReadable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	v, _, err := e.svc.RequestRun(ctx, e.actor("alice"), &protocol.RunRequest{Job: "rotate", Channel: "prod"})
	require.NoError(t, err)
	_, err = e.svc.Approve(ctx, e.admin, v.Run.ID, "fix <b> & co")
	require.NoError(t, err)
	admin := e.client()
	admin.signIn(adminToken)
	_, body := admin.get("/audit?run=" + v.Run.ID)
	require.NotContains(t, body, `\u003c`)
	require.Contains(t, body, "fix &lt;b&gt; &amp; co")
	require.Regexp(t, `<time datetime="[0-9T:Z-]+" title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ">[^<]+ ago</time>`, body)

	_, body = admin.get("/runs")
	require.Regexp(t, `<time datetime="[0-9T:Z-]+" title="[^"]+">[^<]+ ago</time>`, body)
}
