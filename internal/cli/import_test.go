package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// readTree returns every file under dir by slash path.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = string(b)
		return err
	}))
	return out
}

// TestImportWritesWhatValidateAccepts runs the whole migration step from
// the command line: import with --write, then `jobplane validate` on the
// directory, then the same import again, which changes nothing.
func TestImportWritesWhatValidateAccepts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ kind, path string }{
		{"github-actions", "../ciimport/testdata/github"},
		{"gitlab-ci", "../ciimport/testdata/gitlab/.gitlab-ci.yml"},
	} {
		dir := filepath.Join(t.TempDir(), "definitions")
		code, out, errOut := run(t, "import", tc.kind, tc.path, "--write", dir)
		require.Equal(t, 0, code, "stdout: %s\nstderr: %s", out, errOut)
		require.Contains(t, out, "\n# Migration report\n")
		require.Contains(t, errOut, "jobplane validate "+dir+": ok:")
		first := readTree(t, dir)
		require.Contains(t, first, "MIGRATION.md")
		require.Equal(t, out, first["MIGRATION.md"], "the report shown is the one written")

		code, out, errOut = run(t, "validate", dir)
		require.Equal(t, 0, code, "validate %s: %s %s", tc.kind, out, errOut)
		require.Contains(t, out, "passed")

		code, _, errOut = run(t, "import", tc.kind, tc.path, "--write", dir)
		require.Equal(t, 0, code, errOut)
		require.Equal(t, first, readTree(t, dir), "a second import of the same input changes nothing")
	}
}

// TestImportKeepsOtherFiles: a file of the directory the import did not
// plan is left alone and named.
func TestImportKeepsOtherFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "jobs"), 0o755))
	own := "name: old-job\nowners: [operators]\nrun: {command: [\"true\"]}\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "jobs", "old-job.yaml"), []byte(own), 0o644))
	code, _, errOut := run(t, "import", "github-actions", "../ciimport/testdata/github", "--write", dir)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, filepath.Join(dir, "jobs", "old-job.yaml")+" was not written by this import")
	b, err := os.ReadFile(filepath.Join(dir, "jobs", "old-job.yaml"))
	require.NoError(t, err)
	require.Equal(t, own, string(b))
}

// TestImportRefusesToReplaceOwnFiles: a file of a planned path that the
// import did not write (a team's own groups.yaml) stops the write before
// anything is written.
func TestImportRefusesToReplaceOwnFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	own := "groups:\n  platform: {members: [dave]}\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "groups.yaml"), []byte(own), 0o644))
	code, _, errOut := run(t, "import", "github-actions", "../ciimport/testdata/github", "--write", dir)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "will not replace files that jobplane import did not write: "+filepath.Join(dir, "groups.yaml"))
	b, err := os.ReadFile(filepath.Join(dir, "groups.yaml"))
	require.NoError(t, err)
	require.Equal(t, own, string(b))
	_, err = os.Stat(filepath.Join(dir, "jobs"))
	require.ErrorIs(t, err, os.ErrNotExist, "nothing was written")
}

// TestImportReportsErrorsWithPartialInventory: problems of the input are
// all printed with their positions, the readable jobs are still listed,
// and the exit code says something was wrong.
func TestImportReportsErrorsWithPartialInventory(t *testing.T) {
	t.Parallel()
	code, out, errOut := run(t, "import", "github-actions", "../ciimport/testdata/github-broken")
	require.Equal(t, 1, code, errOut)
	require.Contains(t, out, "../ciimport/testdata/github-broken/.github/workflows/broken-yaml.yml:1:4: could not parse as YAML")
	require.Contains(t, out, "../ciimport/testdata/github-broken/.github/workflows/unknown-keys.yml:7:5: unexpected key \"enviroment\"")
	require.Contains(t, out, ".github/workflows/good.yml#backfill")
	require.Contains(t, out, "Classification:")

	code, out, _ = run(t, "import", "gitlab-ci", "../ciimport/testdata/gitlab-broken", "--json")
	require.Equal(t, 1, code)
	var got struct {
		Jobs   []struct{ Key string } `json:"jobs"`
		Errors []struct {
			File         string
			Line, Column int
			Message      string
		} `json:"errors"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.NotEmpty(t, got.Errors)
	for _, e := range got.Errors {
		require.Positive(t, e.Line, "%+v", e)
	}
	require.NotEmpty(t, got.Jobs)
}

func TestImportJSONAndClassify(t *testing.T) {
	t.Parallel()
	code, out, errOut := run(t, "import", "github-actions", "../ciimport/testdata/github", "--json",
		"--classify", "../ciimport/testdata/classify.yaml")
	require.Equal(t, 0, code, errOut)
	var got struct {
		Kind string `json:"kind"`
		Jobs []struct {
			Key            string `json:"key"`
			Classification struct {
				Class    string `json:"class"`
				Override string `json:"override"`
			} `json:"classification"`
		} `json:"jobs"`
		Secrets     []struct{ Name string } `json:"secrets"`
		Definitions []string                `json:"definitions"`
		Report      string                  `json:"report"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Equal(t, "github-actions", got.Kind)
	require.Contains(t, got.Definitions, "jobs/deploy-app.yaml")
	require.Contains(t, got.Report, "# Migration report")
	require.NotEmpty(t, got.Secrets)
	for _, j := range got.Jobs {
		if j.Key == ".github/workflows/deploy.yml#deploy" {
			require.Equal(t, "operational", j.Classification.Class)
			require.Equal(t, "../ciimport/testdata/classify.yaml:11", j.Classification.Override)
		}
	}

	code, _, errOut = run(t, "import", "github-actions", "does-not-exist")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "does-not-exist")
}
