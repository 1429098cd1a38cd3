package github

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
)

// PermActionsWrite is what dispatching a workflow needs, and all a
// dispatch token carries.
var PermActionsWrite = Permissions{"actions": "write"}

// workflowFileRe is a workflow file name under .github/workflows/.
var workflowFileRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}\.ya?ml$`)

// ValidWorkflowFile reports whether name is a workflow file name jobplane
// dispatches (a plain file name under .github/workflows/, .yml or .yaml).
func ValidWorkflowFile(name string) bool { return workflowFileRe.MatchString(name) }

// DispatchWorkflow triggers a workflow_dispatch event of the workflow file
// in repo at ref (a branch name), with a token narrowed to that repository
// and actions: write, and nothing else. GitHub answers 204 without saying
// which workflow run it started; the run identifies itself later (with its
// OIDC token). 404 (ErrNotFound) is a missing workflow, 403 (ErrForbidden)
// a missing permission, 422 (ErrInvalid) a missing ref or an input the
// workflow does not declare.
func (a *App) DispatchWorkflow(ctx context.Context, installation int64, repo, workflow, ref string, inputs map[string]string) error {
	if _, _, err := splitRepo(repo); err != nil {
		return err
	}
	if !ValidWorkflowFile(workflow) {
		return fmt.Errorf("github: workflow %q is not a workflow file name", workflow)
	}
	if ref == "" {
		return fmt.Errorf("github: empty ref of %s", repo)
	}
	body := map[string]any{"ref": ref, "inputs": inputs}
	path := "/repos/" + repo + "/actions/workflows/" + workflow + "/dispatches"
	return a.repoCall(ctx, installation, repo, PermActionsWrite, http.MethodPost, path, body, nil)
}
