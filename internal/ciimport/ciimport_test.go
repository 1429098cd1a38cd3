package ciimport

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jobplane/jobplane/internal/review"
)

var update = flag.Bool("update", false, "rewrite testdata/golden with the current output")

// golden compares got with testdata/golden/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", "golden", name)
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, got, 0o644))
		return
	}
	want, err := os.ReadFile(p)
	require.NoError(t, err, "run go test -update to create %s", p)
	require.Equal(t, string(want), string(got), "output differs from %s (go test -update rewrites it)", p)
}

// goldenTree compares a written repository with testdata/golden/dir, file
// for file, extra and missing files included.
func goldenTree(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	root := filepath.Join("testdata", "golden", dir)
	if *update {
		require.NoError(t, os.RemoveAll(root))
		for p, b := range files {
			require.NoError(t, os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(root, p), b, 0o644))
		}
		return
	}
	var want []string
	require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		want = append(want, filepath.ToSlash(rel))
		return nil
	}))
	require.Equal(t, want, sortedKeys(files), "files of the written repository differ from %s", root)
	for _, p := range want {
		golden(t, filepath.Join(dir, p), files[p])
	}
}

func jsonOf(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	require.NoError(t, err)
	return append(b, '\n')
}

// requireValid runs `jobplane validate`'s check on the written files: they
// parse, the runbooks exist and every policy test passes.
func requireValid(t *testing.T, files map[string][]byte) review.Report {
	t.Helper()
	rep := review.Validate(files)
	var text bytes.Buffer
	rep.WriteText(&text)
	require.True(t, rep.OK, "the written repository does not validate:\n%s", text.String())
	require.Positive(t, rep.Passed, "no policy test ran")
	return rep
}

type corpusBundle struct {
	res *Result
}

func importCorpus(t *testing.T, kind, path string, ov *Overrides) corpusBundle {
	t.Helper()
	var srcs []Source
	if kind == KindGitLab {
		src, err := GitLabSource(path)
		require.NoError(t, err)
		srcs = []Source{src}
	} else {
		var err error
		srcs, err = GitHubSources([]string{path})
		require.NoError(t, err)
	}
	return corpusBundle{res: Import(kind, srcs, ov)}
}

func TestGitHubCorpus(t *testing.T) {
	t.Parallel()
	b := importCorpus(t, KindGitHub, "testdata/github", nil)
	inv := b.res.Inventory
	require.Empty(t, inv.Errors)

	var table, classes bytes.Buffer
	WriteInventory(&table, inv)
	WriteClassification(&classes, inv)
	golden(t, "github/inventory.txt", table.Bytes())
	golden(t, "github/inventory.json", jsonOf(t, inv))
	golden(t, "github/classification.txt", classes.Bytes())
	golden(t, "github/report.md", []byte(b.res.Report()))
	goldenTree(t, "github/repo", b.res.Plan.Files)
	requireValid(t, b.res.Plan.Files)

	// The CI's image is written commented out; uncommented, it is a
	// run.image the definitions accept.
	backfill := string(b.res.Plan.Files["jobs/backfill.yaml"])
	require.Contains(t, backfill, "\n  # image: python:3.12-slim   # REVIEW:")
	uncommented := maps.Clone(b.res.Plan.Files)
	uncommented["jobs/backfill.yaml"] = []byte(strings.Replace(backfill, "\n  # image: ", "\n  image: ", 1))
	requireValid(t, uncommented)

	class := map[string]string{}
	for _, j := range inv.Jobs {
		class[j.Key] = j.Class.Class
	}
	require.Equal(t, map[string]string{
		".github/workflows/ci.yml#test":                "build-test",
		".github/workflows/ci.yml#lint":                "build-test",
		".github/workflows/deploy.yml#deploy":          "build-test",
		".github/workflows/migrate.yml#migrate":        "operational",
		".github/workflows/backfill.yml#backfill":      "operational",
		".github/workflows/crm-sync.yml#sync-contacts": "data-movement",
		".github/workflows/crm-sync.yml#load-contacts": "data-movement",
		".github/workflows/_db-task.yml#run-task":      "operational",
		".github/workflows/reindex.yml#reindex":        "operational",
	}, class)
}

func TestGitLabCorpus(t *testing.T) {
	t.Parallel()
	b := importCorpus(t, KindGitLab, "testdata/gitlab", nil)
	inv := b.res.Inventory
	require.Empty(t, inv.Errors)
	require.Len(t, inv.Warnings, 1, "the project include is not followed, and says so")

	var table, classes bytes.Buffer
	WriteInventory(&table, inv)
	WriteClassification(&classes, inv)
	golden(t, "gitlab/inventory.txt", table.Bytes())
	golden(t, "gitlab/inventory.json", jsonOf(t, inv))
	golden(t, "gitlab/classification.txt", classes.Bytes())
	golden(t, "gitlab/report.md", []byte(b.res.Report()))
	goldenTree(t, "gitlab/repo", b.res.Plan.Files)
	requireValid(t, b.res.Plan.Files)
}

// TestOverrides repeats the GitHub import with a reviewed --classify file:
// the deploy moves under a chosen name, production needs no approval and
// maps to channel prod, the groups name real people, and the written
// policy tests follow.
func TestOverrides(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("testdata/classify.yaml")
	require.NoError(t, err)
	ov, errs := ParseOverrides("testdata/classify.yaml", data)
	require.Empty(t, errs)
	b := importCorpus(t, KindGitHub, "testdata/github", ov)
	require.Empty(t, b.res.Inventory.Errors)

	var classes bytes.Buffer
	WriteClassification(&classes, b.res.Inventory)
	golden(t, "overrides/classification.txt", classes.Bytes())
	goldenTree(t, "overrides/repo", b.res.Plan.Files)
	requireValid(t, b.res.Plan.Files)

	files := b.res.Plan.Files
	require.Contains(t, files, "jobs/deploy-app.yaml")
	require.NotContains(t, files, "jobs/sync-contacts.yaml", "moved back to CI by the override")
	require.Contains(t, string(files["groups.yaml"]), `members: ["alice", "bob"]`)
	require.Contains(t, string(files["tests/migrate.yaml"]), "actor: alice")
	require.NotContains(t, string(files["policies/migrate.yaml"]), "approval:", "approval: 0 for production")
	require.Contains(t, string(files["jobs/backfill.yaml"]), `schedule: {cron: "30 2 * * *", tz: "Europe/Paris", channel: prod}`)
}

func TestOverridesErrors(t *testing.T) {
	t.Parallel()
	src := `defaults: {channel: Prod, color: blue}
groups: {operators: ["*"]}
environments: {production: {approval: 11}}
jobs:
  nope#x: {class: operational}
  migrate: {class: ops, cron: "every day", name: Bad_Name}
`
	ov, errs := ParseOverrides("classify.yaml", []byte(src))
	var got []string
	for _, e := range errs {
		got = append(got, e.Error())
	}
	b := importCorpus(t, KindGitHub, "testdata/github", ov)
	for _, e := range b.res.Inventory.Errors {
		got = append(got, e.Error())
	}
	golden(t, "overrides/errors.txt", []byte(strings.Join(got, "\n")+"\n"))
	require.Len(t, got, 8)
}

// TestDeterministic imports twice, from inputs listed in another order, and
// requires byte-identical output: the result is reviewed as a diff.
func TestDeterministic(t *testing.T) {
	t.Parallel()
	a := importCorpus(t, KindGitHub, "testdata/github", nil)
	srcs, err := GitHubSources([]string{
		"testdata/github/.github/workflows/reindex.yml", "testdata/github/.github/workflows/migrate.yml",
		"testdata/github/.github/workflows/_db-task.yml", "testdata/github/.github/workflows/crm-sync.yml",
		"testdata/github/.github/workflows/ci.yml", "testdata/github/.github/workflows/deploy.yml",
		"testdata/github/.github/workflows/backfill.yml",
	})
	require.NoError(t, err)
	require.Len(t, srcs, 1, "files of one repository share a source")
	b := Import(KindGitHub, srcs, nil)
	require.Equal(t, jsonOf(t, a.res.Inventory), jsonOf(t, b.Inventory))
	require.Equal(t, a.res.Plan.Files, b.Plan.Files)
}

// TestTwoRepositoriesKeepTheirJobsApart: two repositories with the same
// workflow path give two jobs with two keys (each naming its repository),
// two written jobs, a report that maps each to its own file, and an
// override that applies to one of them only.
func TestTwoRepositoriesKeepTheirJobsApart(t *testing.T) {
	t.Parallel()
	other := filepath.Join(t.TempDir(), "other")
	wf, err := os.ReadFile("testdata/github/.github/workflows/migrate.yml")
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(other, ".github", "workflows"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(other, ".github", "workflows", "migrate.yml"), wf, 0o644))
	srcs, err := GitHubSources([]string{"testdata/github", other})
	require.NoError(t, err)
	require.Len(t, srcs, 2)

	otherKey := filepath.ToSlash(other) + "/.github/workflows/migrate.yml#migrate"
	ov, errs := ParseOverrides("c.yaml", []byte("jobs:\n  "+strconv.Quote(otherKey)+": {name: other-migrate}\n"))
	require.Empty(t, errs)
	res := Import(KindGitHub, srcs, ov)
	require.Empty(t, res.Inventory.Errors)
	var keys []string
	for _, j := range res.Inventory.Jobs {
		if j.ID == "migrate" {
			keys = append(keys, j.Key)
		}
	}
	require.ElementsMatch(t, []string{"testdata/github/.github/workflows/migrate.yml#migrate", otherKey}, keys)
	requireValid(t, res.Plan.Files)
	require.Contains(t, res.Plan.Files, "jobs/migrate.yaml")
	require.Contains(t, res.Plan.Files, "jobs/other-migrate.yaml", "the override names one of the two jobs")
	report := res.Report()
	require.Contains(t, report, "| `testdata/github/.github/workflows/migrate.yml#migrate` | operational | high | `jobs/migrate.yaml` |")
	require.Contains(t, report, "| `"+otherKey+"` | operational | high | `jobs/other-migrate.yaml` |")
}

// TestMalformedGitHub: broken YAML, unknown keys and bad expressions are
// reported with positions, all at once, and the rest is still inventoried.
func TestMalformedGitHub(t *testing.T) {
	t.Parallel()
	b := importCorpus(t, KindGitHub, "testdata/github-broken", nil)
	inv := b.res.Inventory
	var errs []string
	for _, e := range inv.Errors {
		require.Positive(t, e.Line, "%v", e)
		require.Positive(t, e.Column, "%v", e)
		errs = append(errs, e.Error())
	}
	golden(t, "broken/github-errors.txt", []byte(strings.Join(errs, "\n")+"\n"))
	var keys []string
	for _, j := range inv.Jobs {
		keys = append(keys, j.Key)
	}
	require.Equal(t, []string{
		".github/workflows/expressions.yml#nightly-cleanup",
		".github/workflows/good.yml#backfill",
		".github/workflows/unknown-keys.yml#purge",
		".github/workflows/unknown-keys.yml#broken-job",
	}, keys, "the jobs of readable files are inventoried despite the errors")
	requireValid(t, b.res.Plan.Files)
}

func TestMalformedGitLab(t *testing.T) {
	t.Parallel()
	b := importCorpus(t, KindGitLab, "testdata/gitlab-broken", nil)
	inv := b.res.Inventory
	var errs []string
	for _, e := range inv.Errors {
		require.Positive(t, e.Line, "%v", e)
		errs = append(errs, e.Error())
	}
	golden(t, "broken/gitlab-errors.txt", []byte(strings.Join(errs, "\n")+"\n"))
	var keys []string
	for _, j := range inv.Jobs {
		keys = append(keys, j.Key)
	}
	require.Contains(t, keys, ".gitlab-ci.yml#rotate-keys", "a good job next to broken ones is inventoried")
	require.Contains(t, errs, "testdata/gitlab-broken/.gitlab-ci.yml:2:12: include[0].local: cannot read testdata/gitlab-broken/ci/missing.yml: no such file or directory",
		"a missing include is reported where it is included, not at a file that does not exist")
	requireValid(t, b.res.Plan.Files)
}

// TestGitLabIncludeForms: the short form of include: takes wildcards as
// the local: form does, and a missing file is reported at the entry that
// names it.
func TestGitLabIncludeForms(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{
		".gitlab-ci.yml": {Data: []byte("include:\n  - ci/*.yml\n  - local: ci/gone.yml\n")},
		"ci/a.yml":       {Data: []byte("purge:\n  when: manual\n  script: [./purge]\n")},
		"ci/b.yml":       {Data: []byte("rotate:\n  when: manual\n  script: [./rotate]\n")},
	}
	inv := GitLab([]Source{{FS: fsys, Files: []string{".gitlab-ci.yml"}}})
	var keys []string
	for _, j := range inv.Jobs {
		keys = append(keys, j.Key)
	}
	require.ElementsMatch(t, []string{".gitlab-ci.yml#purge", ".gitlab-ci.yml#rotate"}, keys)
	require.Len(t, inv.Errors, 1)
	require.Equal(t, ".gitlab-ci.yml:3:12: include[1].local: cannot read ci/gone.yml: file does not exist", inv.Errors[0].Error())
}

// TestScriptTranslation pins the rewriting of expressions into the
// variables jobplane sets, and that literal text is never expanded.
func TestScriptTranslation(t *testing.T) {
	t.Parallel()
	wf := `on:
  workflow_dispatch:
    inputs:
      Account-ID: {required: true}
jobs:
  fix:
    runs-on: ubuntu-latest
    env:
      TOKEN: "pre-$HOME-${{ secrets.Api_Token }}'s"
    steps:
      - run: echo "${{ inputs.Account-ID }} ${{ github.event.inputs.Account-ID }} ${{ vars.REGION }} ${{ env.TOKEN }} ${{ steps.x.outputs.y }}"
`
	inv := GitHub([]Source{{FS: fstest.MapFS{"w.yml": {Data: []byte(wf)}}, Files: []string{"w.yml"}}})
	require.Empty(t, inv.Errors)
	j := inv.Jobs[0]
	require.Equal(t, []string{`export TOKEN='pre-$HOME-'"${JOBPLANE_CONNECTOR_API_TOKEN_VALUE}"''\''s'`}, j.exports)
	require.Equal(t, `echo "${JOBPLANE_PARAM_ACCOUNT_ID} ${JOBPLANE_PARAM_ACCOUNT_ID} ${REGION} ${TOKEN} ${{ steps.x.outputs.y }}"`, j.Steps[0].script)
	require.Equal(t, []string{"Api_Token"}, j.Secrets)
	require.Equal(t, []string{"REGION"}, j.Variables)
	require.Len(t, j.Notes, 1)
	require.Equal(t, 11, j.Notes[0].Line)
	require.Contains(t, j.Notes[0].Message, "steps.x.outputs.y")
}

// TestOrderingLeftToDo: a moved job that waited for another (needs:) or
// ran as a matrix says so in the report, whether the job it waited for
// moves, stays in CI or is not in the inventory.
func TestOrderingLeftToDo(t *testing.T) {
	t.Parallel()
	wf := `on:
  schedule: [{cron: "0 2 * * *"}]
jobs:
  extract:
    runs-on: x
    steps: [{run: ./etl extract}]
  build:
    runs-on: x
    steps: [{run: go build ./...}]
  load:
    needs: [extract, build, elsewhere]
    runs-on: x
    strategy: {matrix: {table: [a, b]}}
    steps: [{run: ./etl load}]
`
	inv := GitHub([]Source{{FS: fstest.MapFS{"w.yml": {Data: []byte(wf)}}, Files: []string{"w.yml"}}})
	require.Empty(t, inv.Errors)
	require.Len(t, inv.Jobs, 3)
	ov, errs := ParseOverrides("c.yaml", []byte("jobs:\n  build: {class: build-test}\n  load: {class: data-movement}\n"))
	require.Empty(t, errs)
	Classify(inv, ov)
	p := Write(inv, ov)
	requireValid(t, p.Files)
	var load *Move
	for _, m := range p.Moves {
		if m.Name == "load" {
			load = m
		}
	}
	require.NotNil(t, load)
	left := strings.Join(load.Left, "\n")
	require.Contains(t, left, "ran after w.yml#extract in the CI (needs: extract), which becomes job extract; jobplane does not chain jobs")
	require.Contains(t, left, "ran after w.yml#build in the CI (needs: build), which stays in CI")
	require.Contains(t, left, "ran after elsewhere in the CI (needs: elsewhere), a job the inventory does not hold")
	require.Contains(t, left, `ran as a matrix (table: "a", "b"); jobplane runs it once per request`)
	require.Contains(t, string(p.Files[ReportFile]), "which becomes job extract")
}

// TestLeaseKeys pins how concurrency groups become lease keys.
func TestLeaseKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ group, want string }{
		{"migrate", "migrate"},
		{"deploy-${{ inputs.env }}", "deploy-{params.env}"},
		{"${{ github.workflow }}-${{ github.ref }}", "ops-tasks-{channel}"},
		{"x/${{ github.job }} y", "x-{job}-y"},
		{"run-${{ github.run_id }}", ""},
		{"m-${{ matrix.shard }}", ""},
	} {
		wf := "name: Ops tasks\non:\n  workflow_dispatch:\n    inputs:\n      env: {}\njobs:\n  a:\n    runs-on: x\n    concurrency: \"" + tc.group + "\"\n    steps: [{run: echo}]\n"
		inv := GitHub([]Source{{FS: fstest.MapFS{"w.yml": {Data: []byte(wf)}}, Files: []string{"w.yml"}}})
		require.Empty(t, inv.Errors, tc.group)
		require.Equal(t, tc.want, inv.Jobs[0].leaseKey, "leaseKey(%q)", tc.group)
		if tc.want == "" {
			require.NotEmpty(t, inv.Jobs[0].Notes, "a dropped lease is noted")
		}
	}
}

func TestClassifyTable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		job       Job
		class     string
		confident string
	}{
		{"nothing", Job{ID: "x"}, ClassBuildTest, ConfidenceLow},
		{"push build", Job{ID: "build", Triggers: []Trigger{{Event: "push"}}, Steps: []Step{{Kind: StepRun, Run: "make test"}}}, ClassBuildTest, ConfidenceHigh},
		{"dispatch migrate", Job{ID: "db", Environment: "production", Triggers: []Trigger{{Event: "workflow_dispatch", Inputs: []Param{{Name: "v"}}}}, Steps: []Step{{Kind: StepRun, Run: "./migrate up"}}}, ClassOperational, ConfidenceHigh},
		{"nightly dbt", Job{ID: "nightly", Triggers: []Trigger{{Event: "schedule", Cron: "0 1 * * *"}}, Steps: []Step{{Kind: StepRun, Run: "dbt run"}}}, ClassDataMovement, ConfidenceMedium},
		{"manual deploy", Job{ID: "ship", Triggers: []Trigger{{Event: "workflow_dispatch"}}, Steps: []Step{{Kind: StepRun, Run: "helm upgrade app"}}}, ClassOperational, ConfidenceMedium},
		{"tie stays in CI", Job{ID: "x", Triggers: []Trigger{{Event: "push"}, {Event: "workflow_dispatch", Inputs: []Param{{Name: "a"}}}}, Steps: []Step{{Kind: StepRun, Run: "echo"}}}, ClassBuildTest, ConfidenceLow},
	} {
		c := classify(&tc.job)
		require.Equal(t, tc.class, c.Class, "classify(%s).Class", tc.name)
		require.Equal(t, tc.confident, c.Confidence, "classify(%s).Confidence", tc.name)
		require.NotEmpty(t, c.Evidence, tc.name)
	}
}

// TestWrittenYAMLSurvivesHostileStrings: names, descriptions and scripts
// with YAML's special characters are written so that they validate and
// read back unchanged.
func TestWrittenYAMLSurvivesHostileStrings(t *testing.T) {
	t.Parallel()
	wf := "name: \"a: b # c\"\non:\n  workflow_dispatch:\n    inputs:\n      \"on\": {description: \"x\\ty \\\"z\\\" \\u00e9 {}: [ ]\", type: choice, options: [\"yes\", \"a'b\"], default: \"yes\"}\n" +
		"jobs:\n  migrate:\n    runs-on: [\"lbl: x\"]\n    steps:\n      - name: \"weird\\rname\"\n        run: \"  leading\\n\\ttab\\n  \\n# not a comment: {x}\\n\\u0007bell\"\n"
	inv := GitHub([]Source{{FS: fstest.MapFS{"w.yml": {Data: []byte(wf)}}, Files: []string{"w.yml"}}})
	require.Empty(t, inv.Errors)
	Classify(inv, nil)
	inv.Jobs[0].Class.Class = ClassOperational
	p := Write(inv, nil)
	requireValid(t, p.Files)
	require.Contains(t, string(p.Files["jobs/migrate.yaml"]), `\abell`, "a control character forces a quoted scalar")
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestGitLabExpansionBudget: templates referred to many times at every
// level would expand exponentially; the import stops at a budget, says so,
// and goes on.
func TestGitLabExpansionBudget(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString(".t0: {script: [echo]}\n")
	for i := 1; i <= 11; i++ {
		fmt.Fprintf(&b, ".t%d:\n  extends: [.t%d, .t%d, .t%d, .t%d]\n  script:\n", i, i-1, i-1, i-1, i-1)
		for k := 0; k < 6; k++ {
			fmt.Fprintf(&b, "    - !reference [.t%d, script]\n", i-1)
		}
	}
	b.WriteString("job:\n  extends: .t11\n")
	inv := GitLab([]Source{{FS: fstest.MapFS{".gitlab-ci.yml": {Data: []byte(b.String())}}, Files: []string{".gitlab-ci.yml"}}})
	require.NotEmpty(t, inv.Errors)
	require.Contains(t, inv.Errors[len(inv.Errors)-1].Message+inv.Errors[0].Message, "job too large")
	require.Len(t, inv.Jobs, 1)
}

// TestOversizedFileRefused: a file over MaxFileSize is reported, not
// parsed, and the other files are still read.
func TestOversizedFileRefused(t *testing.T) {
	t.Parallel()
	big := "on: push\njobs: {a: {runs-on: x, steps: [{run: echo}]}}\n#" + strings.Repeat("x", MaxFileSize)
	fsys := fstest.MapFS{
		"big.yml": {Data: []byte(big)},
		"ok.yml":  {Data: []byte("on: workflow_dispatch\njobs: {fix: {runs-on: x, steps: [{run: ./fix}]}}\n")},
	}
	inv := GitHub([]Source{{FS: fsys, Files: []string{"big.yml", "ok.yml"}}})
	require.Len(t, inv.Errors, 1)
	require.Equal(t, "big.yml:1:1: cannot read: larger than 1048576 bytes", inv.Errors[0].Error())
	require.Len(t, inv.Jobs, 1)
	require.Equal(t, "ok.yml#fix", inv.Jobs[0].Key)
}
