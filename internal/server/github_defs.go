package server

import "slices"

// PullRequestJobs lists the jobs whose on.pull_request matches a pull
// request action (githubapp.PullRequestCatalog).
func (p *pinned) PullRequestJobs(action string, draft bool) []string {
	var out []string
	for _, j := range p.snap.Catalog.Jobs() {
		if j.On != nil && j.On.PullRequest.Matches(action, draft) {
			out = append(out, j.Name)
		}
	}
	slices.Sort(out)
	return out
}
