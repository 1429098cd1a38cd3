package catalog

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPullRequestTrigger(t *testing.T) {
	t.Parallel()
	c := mustParse(t, files("jobs/hello.yaml", minimalJob+"on:\n  pull_request:\n    types: [opened, synchronize]\n    drafts: true\n"))
	j, ok := c.Job("hello")
	require.True(t, ok)
	require.NotNil(t, j.On)
	pr := j.On.PullRequest
	require.Equal(t, []string{"opened", "synchronize"}, pr.Types)
	require.True(t, pr.Matches("opened", true))
	require.True(t, pr.Matches("synchronize", false))
	require.False(t, pr.Matches("reopened", false))

	c = mustParse(t, files("jobs/hello.yaml", minimalJob+"on: {pull_request: {types: [opened]}}\n"))
	j, _ = c.Job("hello")
	require.False(t, j.On.PullRequest.Drafts, "drafts default to false")
	require.False(t, j.On.PullRequest.Matches("opened", true), "a draft is skipped unless the job opts in")
	require.True(t, j.On.PullRequest.Matches("opened", false))

	j, _ = mustParse(t, files("jobs/hello.yaml", minimalJob)).Job("hello")
	require.Nil(t, j.On)
}

func TestPullRequestTriggerErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml string
		line, col  int
		field, msg string
	}{
		{"unknown type", "on:\n  pull_request:\n    types: [opened, closed]\n", 6, 21, "on.pull_request.types[1]", `unknown pull_request type "closed"`},
		{"missing types", "on:\n  pull_request:\n    drafts: true\n", 6, 5, "on.pull_request.types", "is required"},
		{"empty types", "on:\n  pull_request:\n    types: []\n", 6, 12, "on.pull_request.types", "at least one"},
		{"drafts not bool", "on:\n  pull_request:\n    types: [opened]\n    drafts: yes please\n", 7, 13, "on.pull_request.drafts", "must be true or false"},
		{"unknown event", "on:\n  push: {}\n", 5, 3, "on.push", `unknown field "push"`},
		{"duplicate type", "on:\n  pull_request:\n    types: [opened, opened]\n", 6, 21, "on.pull_request.types[1]", "listed twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			requireJobError(t, tt.yaml, tt.line, tt.col, tt.field, tt.msg)
		})
	}
}

func TestRuleForks(t *testing.T) {
	t.Parallel()
	const groups = "groups: {}\n"
	c := mustParse(t, files("jobs/hello.yaml", minimalJob, "groups.yaml", groups,
		"policies/p.yaml", "rules:\n  - id: forks\n    jobs: [hello]\n    users: [github]\n    forks: full\n"))
	d := c.Decide(Request{Job: "hello", Channel: "prod", Actor: "github"})
	require.True(t, d.Allowed)
	require.True(t, d.ForksFull)
	require.Contains(t, d.Explanation, "forks: full")

	c = mustParse(t, files("jobs/hello.yaml", minimalJob, "groups.yaml", groups,
		"policies/p.yaml", "rules:\n  - id: plain\n    jobs: [hello]\n    users: [github]\n"))
	require.False(t, c.Decide(Request{Job: "hello", Channel: "prod", Actor: "github"}).ForksFull)

	for _, tt := range []struct{ rule, msg string }{
		{"  - id: x\n    jobs: [hello]\n    users: [github]\n    forks: open\n", `must be safe or full, got "open"`},
		{"  - id: x\n    effect: deny\n    jobs: [hello]\n    users: [github]\n    forks: full\n", "a deny rule cannot lift safe mode"},
	} {
		_, errs := Parse(files("jobs/hello.yaml", minimalJob, "groups.yaml", groups, "policies/p.yaml", "rules:\n"+tt.rule))
		require.Len(t, errs, 1, "%v", errs)
		require.Equal(t, "policies/p.yaml", errs[0].File)
		require.Equal(t, "rules[0].forks", errs[0].Field)
		require.Equal(t, 1+strings.Count(tt.rule, "\n"), errs[0].Line, "forks is the rule's last line")
		require.Contains(t, errs[0].Message, tt.msg)
	}
}
