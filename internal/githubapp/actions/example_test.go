package actions_test

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/actionsoidc"
	"github.com/jobplane/jobplane/internal/cli"
	"github.com/jobplane/jobplane/internal/githubapp/actions"
)

// TestExampleWorkflowMatchesTheDispatch: the example workflow shipped for
// the compatibility mode declares exactly the inputs the dispatcher sends
// (GitHub refuses a dispatch with an undeclared input, 422), lets the job
// request an OIDC token and write nothing, checks out the commit to build
// without keeping the job's GitHub token, and hands the attempt to
// `jobplane actions-run`.
func TestExampleWorkflowMatchesTheDispatch(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "examples", "github-actions", "jobplane.yml"))
	require.NoError(t, err)
	var wf struct {
		On struct {
			Dispatch struct {
				Inputs map[string]struct {
					Required bool `yaml:"required"`
				} `yaml:"inputs"`
			} `yaml:"workflow_dispatch"`
		} `yaml:"on"`
		Permissions map[string]string `yaml:"permissions"`
		Jobs        map[string]struct {
			Steps []struct {
				Uses string            `yaml:"uses"`
				With map[string]any    `yaml:"with"`
				Env  map[string]string `yaml:"env"`
				Run  string            `yaml:"run"`
			} `yaml:"steps"`
		} `yaml:"jobs"`
	}
	require.NoError(t, yaml.Unmarshal(b, &wf))

	var inputs []string
	for name, in := range wf.On.Dispatch.Inputs {
		require.True(t, in.Required, name)
		inputs = append(inputs, name)
	}
	slices.Sort(inputs)
	want := []string{actions.InputAttempt, actions.InputCommit, actions.InputRun}
	slices.Sort(want)
	require.Equal(t, want, inputs)

	require.Equal(t, "write", wf.Permissions["id-token"])
	for p, v := range wf.Permissions {
		if p != "id-token" {
			require.NotEqual(t, "write", v, "permission %s", p)
		}
	}

	require.Len(t, wf.Jobs, 1)
	checkedOut, ran := false, false
	for _, job := range wf.Jobs {
		for _, st := range job.Steps {
			if strings.HasPrefix(st.Uses, "actions/checkout@") {
				checkedOut = true
				require.Equal(t, "${{ inputs."+actions.InputCommit+" }}", st.With["ref"])
				require.Equal(t, false, st.With["persist-credentials"])
			}
			if strings.Contains(st.Run, "jobplane actions-run") {
				ran = true
				require.Equal(t, "${{ inputs."+actions.InputAttempt+" }}", st.Env["JOBPLANE_ATTEMPT"])
				require.NotEmpty(t, st.Env["JOBPLANE_SERVER"])
				// The default audience of actions-run is the server's.
				require.NotContains(t, st.Run, "--audience")
			}
		}
	}
	require.True(t, checkedOut, "the commit to build is checked out")
	require.True(t, ran, "jobplane actions-run runs the attempt")
	f, ok := reflect.TypeFor[cli.ActionsRunCmd]().FieldByName("Audience")
	require.True(t, ok)
	require.Equal(t, actionsoidc.DefaultAudience, f.Tag.Get("default"), "actions-run asks for the audience the server accepts by default")
}
