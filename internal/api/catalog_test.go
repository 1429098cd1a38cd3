package api_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// TestCatalogAPI reads jobs and catalogs over HTTP, then breaks the branch
// and checks that the rejection is reported while the good commit serves.
func TestCatalogAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testdb.SQLite(t))

	code, pc, body := e.bearer("GET", "/v1/jobs?channel=prod", adminToken, "")
	require.Equal(t, 200, code, pc)
	var jobs protocol.JobsView
	require.NoError(t, json.Unmarshal(body, &jobs))
	require.Equal(t, "prod", jobs.Channel)
	require.Len(t, jobs.Commit, 40)
	var names []string
	for _, j := range jobs.Jobs {
		names = append(names, j.Name)
	}
	require.Equal(t, []string{"echo", "flaky", "gpu", "secret"}, names)

	code, pc, body = e.bearer("GET", "/v1/jobs/echo?channel=prod", adminToken, "")
	require.Equal(t, 200, code, pc)
	var job protocol.JobView
	require.NoError(t, json.Unmarshal(body, &job))
	require.Equal(t, "echo", job.Name)
	require.Equal(t, "Print a message", job.Description)
	var who []string
	for _, p := range job.MayRun {
		who = append(who, p.Principal)
	}
	require.Contains(t, who, "admin")
	require.Contains(t, who, "*", "users: [\"*\"] lets any other principal run it")
	require.NotContains(t, who, "mallory", "a deny rule keeps contractors out")

	code, pc, _ = e.bearer("GET", "/v1/jobs/nope?channel=prod", adminToken, "")
	require.Equal(t, 404, code)
	require.Contains(t, []string{protocol.CodeUnknownJob, protocol.CodeNotFound}, pc)

	// A bad commit is rejected with its position; the good one stays active.
	good := jobs.Commit
	_, err := gitsync.CommitFiles(e.repo, "main", map[string]string{"jobs/echo.yaml": "name: echo\nrun: {command: [x], colour: red}\n"}, "break echo")
	require.NoError(t, err)
	code, pc, body = e.bearer("POST", "/v1/catalogs/sync", adminToken, "")
	require.Equal(t, 200, code, pc)
	var cats protocol.CatalogsView
	require.NoError(t, json.Unmarshal(body, &cats))
	require.Len(t, cats.Channels, 1)
	ch := cats.Channels[0]
	require.Equal(t, good, ch.ActiveCommit)
	require.NotEmpty(t, ch.Rejected)
	require.NotEmpty(t, ch.Rejected[0].Errors)
	require.Equal(t, "jobs/echo.yaml", ch.Rejected[0].Errors[0].File)
	require.Equal(t, 2, ch.Rejected[0].Errors[0].Line)

	code, _, body = e.bearer("GET", "/v1/catalogs", adminToken, "")
	require.Equal(t, 200, code)
	require.Contains(t, string(body), `"active_commit":"`+good+`"`)

	// Syncing is for admins.
	_, err = e.admin.CreatePrincipal(e.ctx(), protocol.PrincipalRequest{Name: "bob"})
	require.NoError(t, err)
	tok, err := e.admin.CreatePrincipalToken(e.ctx(), "bob", protocol.PrincipalTokenRequest{})
	require.NoError(t, err)
	code, pc, _ = e.bearer("POST", "/v1/catalogs/sync", tok.Token, "")
	require.Equal(t, 403, code)
	require.Equal(t, protocol.CodeForbidden, pc)
}
