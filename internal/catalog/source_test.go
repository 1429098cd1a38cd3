package catalog

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseSource(t *testing.T) {
	t.Parallel()
	c := mustParse(t, files("jobs/hello.yaml", minimalJob+"source: {repo: code, branch: release/1.x}\n", "jobs/other.yaml", "name: other\nrun: {command: [x]}\nsource: {repo: code}\n"))
	j, _ := c.Job("hello")
	require.Equal(t, &Source{Repo: "code", Branch: "release/1.x"}, j.Source)
	j, _ = c.Job("other")
	require.Equal(t, &Source{Repo: "code"}, j.Source)

	for _, tt := range []struct{ body, field, msg string }{
		{"source: {branch: main}\n", "source.repo", "is required"},
		{"source: {repo: Code}\n", "source.repo", "must match"},
		{"source: {repo: code, branch: ../x}\n", "source.branch", "branch name"},
		{"source: {repo: code, branch: a..b}\n", "source.branch", "branch name"},
		{"source: {repo: code, ref: x}\n", "source.ref", "unknown"},
		{"source: code\n", "source", ""},
	} {
		_, errs := Parse(files("jobs/hello.yaml", minimalJob+tt.body))
		require.NotEmpty(t, errs, "%q must not parse", tt.body)
		require.Equal(t, "jobs/hello.yaml", errs[0].File)
		require.Equal(t, tt.field, errs[0].Field, "%q", tt.body)
		require.True(t, strings.Contains(errs[0].Message, tt.msg), "%q: %s", tt.body, errs[0].Message)
	}
}
