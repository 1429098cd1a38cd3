package github

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Check Run statuses and conclusions jobplane writes.
const (
	CheckQueued     = "queued"
	CheckInProgress = "in_progress"
	CheckCompleted  = "completed"

	ConclusionSuccess   = "success"
	ConclusionFailure   = "failure"
	ConclusionCancelled = "cancelled"
	ConclusionTimedOut  = "timed_out"
	ConclusionNeutral   = "neutral"
	ConclusionSkipped   = "skipped"
	ConclusionActionReq = "action_required"
)

// CheckOutput is the text shown on a Check Run.
type CheckOutput struct {
	Title   string `json:"title"`
	Summary string `json:"summary"`
	Text    string `json:"text,omitempty"`
}

// CheckRun is a Check Run as GitHub reports it.
type CheckRun struct {
	ID          int64        `json:"id"`
	Name        string       `json:"name"`
	HeadSHA     string       `json:"head_sha"`
	Status      string       `json:"status"`
	Conclusion  string       `json:"conclusion,omitempty"`
	ExternalID  string       `json:"external_id,omitempty"`
	DetailsURL  string       `json:"details_url,omitempty"`
	StartedAt   *time.Time   `json:"started_at,omitempty"`
	CompletedAt *time.Time   `json:"completed_at,omitempty"`
	Output      *CheckOutput `json:"output,omitempty"`
}

// CheckRunCreate is the body of a create.
type CheckRunCreate struct {
	Name        string       `json:"name"`
	HeadSHA     string       `json:"head_sha"`
	Status      string       `json:"status,omitempty"`
	Conclusion  string       `json:"conclusion,omitempty"`
	ExternalID  string       `json:"external_id,omitempty"`
	DetailsURL  string       `json:"details_url,omitempty"`
	StartedAt   *time.Time   `json:"started_at,omitempty"`
	CompletedAt *time.Time   `json:"completed_at,omitempty"`
	Output      *CheckOutput `json:"output,omitempty"`
}

// CheckRunUpdate is the body of an update; empty fields are left alone.
type CheckRunUpdate struct {
	Status      string       `json:"status,omitempty"`
	Conclusion  string       `json:"conclusion,omitempty"`
	DetailsURL  string       `json:"details_url,omitempty"`
	StartedAt   *time.Time   `json:"started_at,omitempty"`
	CompletedAt *time.Time   `json:"completed_at,omitempty"`
	Output      *CheckOutput `json:"output,omitempty"`
}

// CreateCheckRun creates a Check Run on a commit of repo ("owner/name")
// with a token narrowed to that repository and checks: write.
func (a *App) CreateCheckRun(ctx context.Context, installation int64, repo string, c CheckRunCreate) (*CheckRun, error) {
	if _, _, err := splitRepo(repo); err != nil {
		return nil, err
	}
	if !validSHA(c.HeadSHA) {
		return nil, fmt.Errorf("github: check run head_sha %q is not a full commit ID", c.HeadSHA)
	}
	out := &CheckRun{}
	err := a.repoCall(ctx, installation, repo, PermChecksWrite, http.MethodPost, "/repos/"+repo+"/check-runs", c, out)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// UpdateCheckRun updates a Check Run. Sending the same update twice leaves
// the Check Run as one update would, which is what lets the outbox retry.
func (a *App) UpdateCheckRun(ctx context.Context, installation int64, repo string, id int64, u CheckRunUpdate) (*CheckRun, error) {
	if _, _, err := splitRepo(repo); err != nil {
		return nil, err
	}
	out := &CheckRun{}
	err := a.repoCall(ctx, installation, repo, PermChecksWrite, http.MethodPatch, fmt.Sprintf("/repos/%s/check-runs/%d", repo, id), u, out)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// FindCheckRun returns the Check Run of a commit with this external ID, or
// ErrNotFound. It lets a create whose answer was lost be recognised instead
// of repeated.
func (a *App) FindCheckRun(ctx context.Context, installation int64, repo, sha, externalID string) (*CheckRun, error) {
	if _, _, err := splitRepo(repo); err != nil {
		return nil, err
	}
	if !validSHA(sha) {
		return nil, fmt.Errorf("github: commit %q is not a full commit ID", sha)
	}
	var out struct {
		CheckRuns []*CheckRun `json:"check_runs"`
	}
	// checks: write implies read, so one cached token serves create, find
	// and update.
	err := a.repoCall(ctx, installation, repo, PermChecksWrite, http.MethodGet,
		fmt.Sprintf("/repos/%s/commits/%s/check-runs?per_page=100", repo, sha), nil, &out)
	if err != nil {
		return nil, err
	}
	for _, cr := range out.CheckRuns {
		if cr.ExternalID == externalID {
			return cr, nil
		}
	}
	return nil, fmt.Errorf("github: check run %q on %s@%s: %w", externalID, repo, sha, ErrNotFound)
}
