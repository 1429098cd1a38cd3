package githubapp

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/jobplane/jobplane/internal/github"
	"github.com/jobplane/jobplane/internal/store"
)

// A push to a pull request makes the runs of its older head pointless:
// each job's open runs of the pull request are superseded by the job's
// run of the newest head. Which head is newest is decided by the
// pull request's updated_at in the deliveries that requested the runs
// (kept in each run's request.source), never by the order deliveries
// arrive in: a redelivery or a late copy of an older push carries its
// older time, so it never supersedes a newer head; its own runs, requested
// late, are the ones superseded.

// prRun is an open run of a pull request, as its request recorded it.
type prRun struct {
	id, job, sha string
	at           time.Time
}

// supersede ends, in the delivery's transaction, the open runs of ev's
// pull request whose head is older than another open run's of the same
// job, and returns their IDs.
func (s *Service) supersede(ctx context.Context, tx store.Tx, in *store.GitHubInstallation, ev *github.PullRequestEvent) ([]string, error) {
	checks, err := tx.GitHubCheckRunListOpen(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	byJob := map[string][]prRun{}
	for _, c := range checks {
		if !strings.EqualFold(c.Repo, ev.Repository.FullName) {
			continue
		}
		r, err := tx.RunGetByID(ctx, c.RunID, false)
		if err != nil {
			return nil, err
		}
		var src struct {
			PR        int    `json:"pr"`
			HeadSHA   string `json:"head_sha"`
			UpdatedAt string `json:"updated_at"`
		}
		if json.Unmarshal(r.Source, &src) != nil || src.PR != ev.Number || src.UpdatedAt == "" {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, src.UpdatedAt)
		if err != nil {
			continue
		}
		byJob[r.Job] = append(byJob[r.Job], prRun{id: r.ID, job: r.Job, sha: src.HeadSHA, at: at})
	}
	var out []string
	for _, runs := range byJob {
		newest := runs[0]
		for _, r := range runs[1:] {
			if r.at.After(newest.at) {
				newest = r
			}
		}
		for _, r := range runs {
			// Equal times order nothing: both stay.
			if r.sha == newest.sha || !r.at.Before(newest.at) {
				continue
			}
			ended, err := s.runs.SupersedeRun(ctx, tx, r.id, Actor, "superseded by "+newest.sha)
			if err != nil {
				return nil, err
			}
			if ended {
				out = append(out, r.id)
			}
		}
	}
	return out, nil
}
