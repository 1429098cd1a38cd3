package web_test

import (
	"context"
	"database/sql"
	"fmt"
	"html"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite" // the raw connection that tampers with the audit log

	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// The audit page verifies the hash chain: intact, then broken by an edit
// made behind the server's back. The run page shows the run's audit trail.
func TestAuditChainStatusAndRunTrail(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	v, _, err := e.svc.RequestRun(ctx, e.actor("alice"), &protocol.RunRequest{Job: "deploy", Channel: "prod"})
	require.NoError(t, err)
	_, err = e.svc.Approve(ctx, e.actor("bob"), v.Run.ID, "ok")
	require.NoError(t, err)
	_, err = e.srv.Sealer().Seal(ctx)
	require.NoError(t, err)

	admin := e.client()
	admin.signIn(adminToken)
	_, page := admin.get("/audit")
	require.Contains(t, page, `hx-get="/audit/chain"`, "the page loads the verification after itself")
	_, body := admin.get("/audit/chain")
	require.Contains(t, body, "Chain verified")
	require.Regexp(t, regexp.MustCompile(`\d+ events sealed`), body)

	_, body = admin.get("/runs/" + v.Run.ID)
	trail := body[strings.Index(body, `id="history"`):]
	for _, action := range []string{"run.requested", "run.approved"} {
		require.Contains(t, trail, action)
	}
	require.Contains(t, trail, "<td>bob</td>")

	alice := e.client()
	alice.signIn(e.tokens["alice"])
	resp, _ := alice.get("/audit/chain")
	require.Equal(t, 403, resp.StatusCode, "verification is for admins")

	db, err := sql.Open("sqlite", strings.TrimPrefix(e.dsn, "sqlite:")+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	defer db.Close()
	for _, tr := range []string{"audit_events_no_update", "audit_events_no_delete"} {
		_, err := db.Exec(`DROP TRIGGER ` + tr)
		require.NoError(t, err)
	}
	_, err = db.Exec(`UPDATE audit_events SET actor = 'mallory' WHERE action = 'run.approved'`)
	require.NoError(t, err)
	_, body = admin.get("/audit/chain")
	require.Contains(t, body, "Chain broken")
}

// The audit page lists the newest event first; "Older events" continues
// below the last event shown, keeping the filters, until the oldest.
func TestAuditPageNewestFirstPagesBackward(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	require.NoError(t, e.st.InTx(ctx, func(tx store.Tx) error {
		for i := range 150 {
			ev := &store.AuditEvent{Tenant: e.admin.TenantID, Actor: "pager", Action: "test.page", Subject: fmt.Sprintf("s_%03d", i)}
			if err := tx.AuditAppend(ctx, ev); err != nil {
				return err
			}
		}
		return nil
	}))
	admin := e.client()
	admin.signIn(adminToken)
	link := regexp.MustCompile(`<a href="([^"]*)" rel="next">Older events</a>`)

	_, page := admin.get("/audit?actor=pager")
	require.Less(t, strings.Index(page, "s_149"), strings.Index(page, "s_148"), "newest first")
	require.Contains(t, page, "s_050")
	require.NotContains(t, page, "s_049")
	require.NotContains(t, page, "Newest events", "the first page is the newest")
	m := link.FindStringSubmatch(page)
	require.NotNil(t, m, "a link to older events")
	older := html.UnescapeString(m[1])
	require.Contains(t, older, "actor=pager", "the link keeps the filter")

	_, page = admin.get(older)
	require.Less(t, strings.Index(page, "s_049"), strings.Index(page, "s_048"))
	require.Contains(t, page, "s_000")
	require.NotContains(t, page, "s_050")
	require.Nil(t, link.FindStringSubmatch(page), "the oldest page links no further")
	require.Contains(t, page, `<a href="/audit?actor=pager" rel="first">Newest events</a>`)

	resp, _ := admin.get("/audit?before=x")
	require.Equal(t, 400, resp.StatusCode)
}
