package actions

import (
	"context"
	"errors"

	"github.com/jobplane/jobplane/internal/github"
)

// Dispatcher dispatches the workflows of the mode with the App's client
// (an App).
type Dispatcher struct {
	App *github.App
}

var _ App = Dispatcher{}

// DispatchWorkflow reads the repository's default branch and IDs
// (metadata: read) and dispatches workflow there with a token narrowed to
// the repository and actions: write. GitHub's 4xx answers are refusals,
// with the reason the run's Check Run shows.
func (d Dispatcher) DispatchWorkflow(ctx context.Context, installation int64, repo, workflow string, inputs map[string]string) (Target, error) {
	info, err := d.App.Repository(ctx, installation, repo)
	if err != nil {
		return Target{}, classify(err, "repository "+repo+" unreadable")
	}
	t := Target{RepoID: info.ID, OwnerID: info.Owner.ID, Ref: "refs/heads/" + info.DefaultBranch}
	return t, classify(d.App.DispatchWorkflow(ctx, installation, repo, workflow, info.DefaultBranch, inputs), "")
}

func classify(err error, what string) error {
	if err == nil || github.Retryable(err) {
		return err
	}
	if what != "" {
		return &Refusal{Reason: what + ": " + err.Error(), Err: err}
	}
	reason := err.Error()
	switch {
	case errors.Is(err, github.ErrNotFound):
		reason = "no such workflow (404)"
	case errors.Is(err, github.ErrForbidden):
		reason = "the installation lacks the Actions: write permission (403)"
	case errors.Is(err, github.ErrInvalid):
		reason = "the request was refused (" + err.Error() + ")"
	}
	return &Refusal{Reason: reason, Err: err}
}
