package catalog

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const policyTests = `tests:
  - name: operators backfill
    request:
      actor: alice
      job: backfill-account
      channel: prod
      params: {account: "1001"}
      now: "2026-01-06T02:30:00+01:00"
    expect: approval
    grants: {warehouse: write}
  - name: the scheduler says hello
    request: {actor: scheduler, job: hello, channel: staging, ref: {branch: dev}, source: {n: 1}}
    expect: deny
`

func TestParseTests(t *testing.T) {
	t.Parallel()
	c := mustParse(t, files("jobs/backfill-account.yaml", fullJob, "groups.yaml", fullGroups,
		"connectors/warehouse.yaml", warehouseConnector, "jobs/hello.yaml", minimalJob, "tests/a.yaml", policyTests))
	ts := c.Tests()
	require.Len(t, ts, 2)
	require.Equal(t, "operators backfill", ts[0].Name)
	require.Equal(t, "tests/a.yaml", ts[0].File)
	require.Equal(t, 2, ts[0].Line)
	require.Equal(t, ExpectApproval, ts[0].Expect)
	require.Equal(t, map[string]string{"warehouse": "write"}, ts[0].Grants)
	// Params are validated, with the schema's defaults applied.
	require.Equal(t, map[string]any{"account": "1001", "dry_run": true}, ts[0].Request.Params)
	require.True(t, ts[0].Request.Now.Equal(time.Date(2026, 1, 6, 1, 30, 0, 0, time.UTC)))
	require.Equal(t, ReferenceRef, ts[0].Request.Ref)
	require.Equal(t, "user", ts[0].Request.ActorKind)

	require.Equal(t, "service", ts[1].Request.ActorKind)
	require.Equal(t, Ref{Branch: "dev"}, ts[1].Request.Ref, "a ref given replaces the default")
	require.Equal(t, ReferenceTime, ts[1].Request.Now)
	require.Equal(t, map[string]any{"n": float64(1)}, ts[1].Request.Source)
	require.Nil(t, ts[1].Grants)
}

func TestParseTestsErrors(t *testing.T) {
	t.Parallel()
	_, errs := Parse(files("jobs/backfill-account.yaml", fullJob, "groups.yaml", fullGroups,
		"connectors/warehouse.yaml", warehouseConnector, "tests/a.yaml", `tests:
  - name: a
    request: {actor: alice, job: nope, channel: prod}
    expect: allow
  - name: a
    request: {actor: alice, job: backfill-account, channel: prod, params: {account: x1}, now: soon}
    expect: maybe
    grants: {warehouse: admin}
    colour: blue
  - request: {job: backfill-account}
`))
	var got []string
	for _, e := range errs {
		got = append(got, e.Error())
	}
	require.Equal(t, []string{
		`tests/a.yaml:3:34: tests[0].request.job: unknown job "nope" (jobs are defined in jobs/nope.yaml)`,
		`tests/a.yaml:5:11: tests[1].name: duplicate test name "a" (first defined at tests/a.yaml:2)`,
		`tests/a.yaml:6:85: tests[1].request.params.account: 'x1' does not match pattern '^[0-9]{1,12}$'`,
		`tests/a.yaml:6:95: tests[1].request.now: must be an RFC 3339 time like 2026-01-05T12:00:00Z, got "soon"`,
		`tests/a.yaml:7:13: tests[1].expect: must be allow, deny or approval, got "maybe"`,
		`tests/a.yaml:8:25: tests[1].grants.warehouse: must be read or write, got "admin"`,
		`tests/a.yaml:9:5: tests[1].colour: unknown field "colour"`,
		`tests/a.yaml:10:5: tests[2].name: is required`,
		`tests/a.yaml:10:5: tests[2].expect: is required`,
		`tests/a.yaml:10:5: tests[2].request.actor: is required`,
		`tests/a.yaml:10:5: tests[2].request.channel: is required`,
		`tests/a.yaml:10:20: tests[2].request.params.account: is required`,
	}, got)
}

func TestIsDefinitionFileTests(t *testing.T) {
	t.Parallel()
	require.True(t, IsDefinitionFile("tests/a.yaml"))
	require.False(t, IsDefinitionFile("tests/sub/a.yaml"))
	require.False(t, IsDefinitionFile("tests/a.md"))
	require.False(t, IsDefinitionFile("runbooks/a.md"), "runbooks are not parsed")
}

func TestCheckRunbooks(t *testing.T) {
	t.Parallel()
	c := mustParse(t, files("jobs/backfill-account.yaml", fullJob, "groups.yaml", fullGroups, "connectors/warehouse.yaml", warehouseConnector))
	require.Empty(t, c.CheckRunbooks(func(p string) bool { return p == "runbooks/backfill-account.md" }))
	errs := c.CheckRunbooks(func(string) bool { return false })
	require.Len(t, errs, 1)
	require.Equal(t, `jobs/backfill-account.yaml:4:10: runbook: runbook "runbooks/backfill-account.md" does not exist`, errs[0].Error())
	require.Len(t, c.Groups(), 3)
}
