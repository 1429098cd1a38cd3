package catalog

import (
	"testing"

	"github.com/stretchr/testify/require"
)

const prTrigger = "on:\n  pull_request:\n    types: [opened]\n"

func TestExecutorGitHubActions(t *testing.T) {
	t.Parallel()
	c := mustParse(t, files("jobs/hello.yaml", minimalJob+prTrigger+"executor: github-actions\nworkflow: jobplane.yml\n"))
	j, _ := c.Job("hello")
	require.Equal(t, ExecutorGitHubActions, j.Executor)
	require.Equal(t, "jobplane.yml", j.Workflow)
	require.Equal(t, ActionsPool, j.RunsOn.Pool, "no runner can claim it")

	j, _ = mustParse(t, files("jobs/hello.yaml", minimalJob)).Job("hello")
	require.Equal(t, ExecutorRunner, j.Executor, "the default")
	require.Empty(t, j.Workflow)
	j, _ = mustParse(t, files("jobs/hello.yaml", minimalJob+"executor: runner\n")).Job("hello")
	require.Equal(t, ExecutorRunner, j.Executor)
	// The default network and a workdir say nothing a workflow cannot do.
	mustParse(t, files("jobs/hello.yaml", minimalJob+"  network: default\n  workdir: sub\n"+prTrigger+"executor: github-actions\nworkflow: jobplane.yml\n"))
}

func TestExecutorErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml string
		line, col  int
		field, msg string
	}{
		{"unknown executor", "executor: kubernetes\n", 4, 11, "executor", `must be runner or github-actions, got "kubernetes"`},
		{"no workflow", prTrigger + "executor: github-actions\n", 7, 11, "workflow", "is required with executor github-actions"},
		{"workflow path", prTrigger + "executor: github-actions\nworkflow: .github/workflows/x.yml\n", 8, 11, "workflow", "must be a workflow file name"},
		{"workflow not yaml", prTrigger + "executor: github-actions\nworkflow: x.sh\n", 8, 11, "workflow", "must be a workflow file name"},
		{"workflow without executor", "workflow: jobplane.yml\n", 4, 11, "workflow", "needs executor: github-actions"},
		{"workflow with runner", "executor: runner\nworkflow: jobplane.yml\n", 5, 11, "workflow", "is only for executor github-actions"},
		{"no pull request", "executor: github-actions\nworkflow: jobplane.yml\n", 4, 11, "on.pull_request", "is required with executor github-actions"},
		{"runs_on", prTrigger + "executor: github-actions\nworkflow: jobplane.yml\nruns_on: {pool: gpu}\n", 7, 11, "runs_on", "selects jobplane runners"},
		{"image in a workflow", "  image: busybox:1.36\n" + prTrigger + "executor: github-actions\nworkflow: jobplane.yml\n", 4, 10, "run.image", "is not enforced in a GitHub Actions workflow"},
		{"limits in a workflow", "  resources: {memory: 64Mi}\n" + prTrigger + "executor: github-actions\nworkflow: jobplane.yml\n", 4, 15, "run.resources", "is not enforced in a GitHub Actions workflow"},
		{"no network in a workflow", "  network: none\n" + prTrigger + "executor: github-actions\nworkflow: jobplane.yml\n", 4, 12, "run.network", "is not enforced in a GitHub Actions workflow"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			requireJobError(t, tt.yaml, tt.line, tt.col, tt.field, tt.msg)
		})
	}
}
