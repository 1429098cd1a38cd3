package review

import (
	"bytes"
	"encoding/json"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/gitsync"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden with the current output")

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(p, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(p)
	require.NoError(t, err, "missing golden file; run go test ./internal/review/ -update")
	require.Equal(t, string(want), got)
}

// commitTime makes commits, and so their hashes, the same on every run.
var commitTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// repo creates a Git repository whose commits are the given file sets, in
// order, each applied over the previous one ("" deletes a file).
func repo(t *testing.T, commits ...map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for i, files := range commits {
		var err error
		when := gitsync.WithTime(commitTime.Add(time.Duration(i) * time.Minute))
		if i == 0 {
			_, err = gitsync.InitRepo(dir, "main", files, "commit 0", when)
		} else {
			_, err = gitsync.CommitFiles(dir, "main", files, "commit", when)
		}
		require.NoError(t, err)
	}
	return dir
}

func with(base map[string]string, kv ...string) map[string]string {
	m := maps.Clone(base)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func validateText(t *testing.T, target, repoDir string) (string, Report) {
	t.Helper()
	files, extra, err := Load(target, repoDir)
	require.NoError(t, err)
	rep := Validate(files, extra...)
	var b bytes.Buffer
	rep.WriteText(&b)
	return b.String(), rep
}

const (
	groupsYAML = `groups:
  payments-operators: {members: [alice, bob]}
  payments-leads: {members: [carol]}
  contractors: {members: [mallory]}
`
	warehouseYAML = `name: warehouse
type: static
bindings:
  prod: {read: {DSN: wh-read}, write: {DSN: wh-write}}
  staging: {read: {DSN: wh-staging}}
`
	backfillYAML = `name: backfill-account
owners: [payments-leads]
runbook: runbooks/backfill-account.md
params:
  type: object
  required: [account]
  properties:
    account: {type: string}
    dry_run: {type: boolean, default: true}
run: {command: [echo, backfill]}
leases:
  - key: "backfill:{params.account}"
connectors: {warehouse: write}
`
	helloYAML = "name: hello\nrun: {command: [echo, hi]}\n"
	ruleHello = `  - id: anyone-hello
    jobs: [hello]
    users: ["*"]
`
	ruleBackfillProd = `  - id: backfill-prod
    jobs: [backfill-account]
    channels: [prod]
    groups: [payments-operators]
    approval: {count: 1, groups: [payments-leads]}
    grants: {warehouse: read}
`
	ruleBackfillStaging = `  - id: backfill-staging
    jobs: [backfill-account]
    channels: [staging]
    groups: [payments-operators]
    when: 'request.ref.protected'
`
	testsYAML = `tests:
  - name: operators backfill in prod once approved
    request: {actor: alice, job: backfill-account, channel: prod, params: {account: "1"}}
    expect: approval
    grants: {warehouse: read}
  - name: contractors do not backfill
    request: {actor: mallory, job: backfill-account, channel: prod, params: {account: "1"}}
    expect: deny
  - name: anyone says hello
    request: {actor: zed, job: hello, channel: staging}
    expect: allow
`
)

var base = map[string]string{
	"README.md":                    "# definitions\n",
	"groups.yaml":                  groupsYAML,
	"connectors/warehouse.yaml":    warehouseYAML,
	"jobs/backfill-account.yaml":   backfillYAML,
	"jobs/hello.yaml":              helloYAML,
	"runbooks/backfill-account.md": "# backfill-account\n",
	"policies/a.yaml":              "rules:\n" + ruleHello + ruleBackfillProd + ruleBackfillStaging,
	"tests/policy.yaml":            testsYAML,
}

func TestValidateClean(t *testing.T) {
	t.Parallel()
	dir := repo(t, base)
	onDisk, rep := validateText(t, dir, "")
	require.True(t, rep.OK)
	atHead, _ := validateText(t, "HEAD", dir)
	require.Equal(t, onDisk, atHead, "the work tree and its commit must validate the same")
	golden(t, "validate_clean.golden", onDisk)
}

func TestValidateErrors(t *testing.T) {
	t.Parallel()
	dir := repo(t, base, with(base,
		"jobs/hello.yaml", "name: hello\nrun: {command: [echo, hi]}\ncolour: blue\n",
		"policies/a.yaml", "rules:\n"+ruleHello+ruleBackfillProd+strings.Replace(ruleBackfillStaging, "request.ref.protected", "request.ref.protectd", 1),
		"jobs/backfill-account.yaml", strings.Replace(backfillYAML, "runbooks/backfill-account.md", "runbooks/backfill.md", 1),
		"tests/policy.yaml", testsYAML+`  - name: unknown job
    request: {actor: alice, job: backfil-account, channel: prod}
    expect: allow
    extra: 1
`))
	got, rep := validateText(t, "HEAD", dir)
	require.False(t, rep.OK)
	golden(t, "validate_errors.golden", got)

	// The previous commit is still fine: REV reads history, not the disk.
	_, rep = validateText(t, "HEAD~1", dir)
	require.True(t, rep.OK)
}

func TestValidateRunbookMissing(t *testing.T) {
	t.Parallel()
	dir := repo(t, with(base, "runbooks/backfill-account.md", ""))
	got, rep := validateText(t, dir, "")
	require.False(t, rep.OK)
	require.True(t, rep.TestsRun)
	golden(t, "validate_runbook.golden", got)
}

func TestValidateFailingTest(t *testing.T) {
	t.Parallel()
	dir := repo(t, with(base, "tests/more.yaml", `tests:
  - name: bob may backfill staging from any branch
    request:
      actor: bob
      job: backfill-account
      channel: staging
      params: {account: "7"}
      ref: {branch: feature/x}
    expect: allow
  - name: prod grants write
    request: {actor: bob, job: backfill-account, channel: prod, params: {account: "7"}}
    expect: approval
    grants: {warehouse: write}
`))
	got, rep := validateText(t, dir, "")
	require.False(t, rep.OK)
	require.Equal(t, 2, rep.Failed)
	golden(t, "validate_failing_test.golden", got)
	js, err := json.MarshalIndent(rep, "", "  ")
	require.NoError(t, err)
	golden(t, "validate_failing_test.json.golden", string(js)+"\n")
}

// The example repository shipped under examples/ must validate and its tests
// pass: it is what users copy.
func TestExampleRepository(t *testing.T) {
	t.Parallel()
	got, rep := validateText(t, filepath.Join("..", "..", "examples", "definitions"), "")
	require.True(t, rep.OK, got)
	require.Zero(t, rep.Failed)
	require.GreaterOrEqual(t, rep.Passed, 10)
	golden(t, "validate_example.golden", got)
}

var shaRe = regexp.MustCompile(`^[0-9a-f]{40}$`)

// diffText runs diff between the last two commits of the given sets.
func diffText(t *testing.T, before, after map[string]string, channels ...string) (string, *DiffResult) {
	t.Helper()
	dir := repo(t, before, after)
	if len(channels) == 0 {
		channels = []string{"prod"}
	}
	res, err := DiffRevisions(dir, "HEAD~1", "HEAD", channels)
	require.NoError(t, err)
	require.Regexp(t, shaRe, res.Before.Commit)
	require.Regexp(t, shaRe, res.After.Commit)
	// Hashes depend on gitsync's commit format, which is not under test.
	res.Before.Commit, res.After.Commit = strings.Repeat("1", 40), strings.Repeat("2", 40)
	var b bytes.Buffer
	res.WriteText(&b)
	return b.String(), res
}

func TestDiffMoveRuleIsNoChange(t *testing.T) {
	t.Parallel()
	got, res := diffText(t, base, with(base,
		"policies/a.yaml", "rules:\n"+ruleBackfillProd+ruleHello,
		"policies/b.yaml", "# moved here\nrules:\n"+strings.Replace(ruleBackfillStaging, "backfill-staging", "staging-backfill", 1)))
	require.True(t, res.OK())
	require.Empty(t, res.Impact.Jobs)
	golden(t, "diff_move_rule.golden", got)
}

func TestDiffAddMember(t *testing.T) {
	t.Parallel()
	got, res := diffText(t, base, with(base, "groups.yaml", strings.Replace(groupsYAML, "[alice, bob]", "[alice, bob, dave]", 1)))
	require.True(t, res.OK())
	golden(t, "diff_add_member.golden", got)
	js, err := json.MarshalIndent(res, "", "  ")
	require.NoError(t, err)
	golden(t, "diff_add_member.json.golden", string(js)+"\n")
}

func TestDiffApprovalCount(t *testing.T) {
	t.Parallel()
	got, _ := diffText(t, base, with(base, "policies/a.yaml", "rules:\n"+ruleHello+
		strings.Replace(ruleBackfillProd, "count: 1", "count: 2", 1)+ruleBackfillStaging))
	golden(t, "diff_approval.golden", got)
}

func TestDiffDenyRule(t *testing.T) {
	t.Parallel()
	got, _ := diffText(t, base, with(base, "policies/deny.yaml", `rules:
  - id: no-prod-for-contractors
    effect: deny
    jobs: ["*"]
    channels: [prod]
    groups: [contractors]
  - id: no-backfill-on-sundays
    effect: deny
    jobs: [backfill-account]
    users: ["*"]
    when: 'now.getDayOfWeek() == 0'
`))
	golden(t, "diff_deny.golden", got)
}

func TestDiffGrantsAndLeases(t *testing.T) {
	t.Parallel()
	got, _ := diffText(t, base, with(base,
		"policies/a.yaml", "rules:\n"+ruleHello+strings.Replace(ruleBackfillProd, "warehouse: read", "warehouse: write", 1)+ruleBackfillStaging+
			`  - id: hello-at-night
    jobs: [hello]
    groups: [payments-leads]
    hours: {tz: Europe/Paris, from: "22:00", to: "02:00"}
    grants: {warehouse: read}
`,
		"jobs/backfill-account.yaml", strings.Replace(backfillYAML, `"backfill:{params.account}"`, `"backfill:account:{params.account}"
    on_conflict: reject
  - key: warehouse-writes
    limit: 4`, 1)), "prod", "sandbox")
	golden(t, "diff_grants.golden", got)
}

func TestDiffInvalidSide(t *testing.T) {
	t.Parallel()
	got, res := diffText(t, base, with(base, "groups.yaml", "groups:\n  payments-operators: {members: alice}\n"))
	require.False(t, res.OK())
	golden(t, "diff_invalid.golden", got)
}

func TestDiffRetention(t *testing.T) {
	t.Parallel()
	before := with(base, "jobs/hello.yaml", helloYAML+"retention: {logs: 30d}\n")
	got, res := diffText(t, before, with(base, "jobs/hello.yaml", helloYAML+"retention: {logs: 7d, artifacts: 48h}\n"))
	require.True(t, res.OK())
	require.Len(t, res.Impact.Jobs, 1)
	require.Equal(t, &Change{Before: []string{"logs 30d"}, After: []string{"logs 7d", "artifacts 2d"}}, res.Impact.Jobs[0].Retention)
	golden(t, "diff_retention.golden", got)

	_, res = diffText(t, before, before)
	require.Empty(t, res.Impact.Jobs)
}

func TestDiffExecution(t *testing.T) {
	t.Parallel()
	before := with(base, "jobs/hello.yaml", "name: hello\nrun: {command: [echo, hi], image: busybox:1.36, resources: {cpu: 0.5}}\n")
	after := with(base, "jobs/hello.yaml", "name: hello\nisolation: required\nrun: {command: [echo, hi], image: busybox:1.37, resources: {cpu: 2, memory: 1Gi}, network: none, workdir: /src}\n")
	got, res := diffText(t, before, after)
	require.True(t, res.OK())
	require.Len(t, res.Impact.Jobs, 1)
	require.Equal(t, &Change{
		Before: []string{"image busybox:1.36", "cpu 500m"},
		After:  []string{"image busybox:1.37", "cpu 2", "memory 1Gi", "network none", "workdir /src", "isolation required"},
	}, res.Impact.Jobs[0].Execution)
	golden(t, "diff_execution.golden", got)

	_, res = diffText(t, before, before)
	require.Empty(t, res.Impact.Jobs)
	_, res = diffText(t, with(base, "jobs/hello.yaml", helloYAML), with(base, "jobs/hello.yaml", helloYAML+"isolation: none\n"))
	require.Empty(t, res.Impact.Jobs, "spelling out a default is no change")
}
