package catalog

import (
	"slices"

	"github.com/goccy/go-yaml/ast"

	"github.com/jobplane/jobplane/internal/yamlpos"
)

// PullRequestActions are the pull_request actions a job may be triggered by.
var PullRequestActions = []string{"opened", "synchronize", "reopened", "ready_for_review"}

// On is what requests the job besides explicit requests and its schedule.
type On struct {
	PullRequest *PullRequestTrigger `json:"pull_request,omitempty"`
}

// PullRequestTrigger requests a run on the head commit of a pull request of
// the tenant's GitHub installation, as the principal "github".
type PullRequestTrigger struct {
	// Types are the pull_request actions that request a run.
	Types []string `json:"types"`
	// Drafts lets draft pull requests request runs too.
	Drafts bool `json:"drafts"`
}

// Matches reports whether a pull_request delivery with this action, on a
// draft or not, requests a run.
func (t *PullRequestTrigger) Matches(action string, draft bool) bool {
	if t == nil || (draft && !t.Drafts) {
		return false
	}
	return slices.Contains(t.Types, action)
}

func (j *Job) parseOn(d *yamlpos.Decoder, n ast.Node, field string) {
	on := &On{}
	d.Object(n, field, 1, map[string]func(ast.Node, string){
		"pull_request": func(v ast.Node, f string) { on.PullRequest = parsePullRequestTrigger(d, v, f) },
	})
	j.On = on
}

func parsePullRequestTrigger(d *yamlpos.Decoder, n ast.Node, field string) *PullRequestTrigger {
	t := &PullRequestTrigger{}
	present, ok := d.Object(n, field, 2, map[string]func(ast.Node, string){
		"types": func(v ast.Node, f string) {
			items, _ := d.List(v, f)
			if len(items) == 0 {
				d.Add(v, f, "must name at least one of %v", PullRequestActions)
			}
			for i, item := range items {
				s, ok := d.Str(item, yamlpos.Index(f, i))
				if !ok {
					continue
				}
				if !slices.Contains(PullRequestActions, s) {
					d.Add(item, yamlpos.Index(f, i), "unknown pull_request type %q (known: %v)", s, PullRequestActions)
					continue
				}
				if slices.Contains(t.Types, s) {
					d.Add(item, yamlpos.Index(f, i), "%q is listed twice", s)
					continue
				}
				t.Types = append(t.Types, s)
			}
		},
		"drafts": func(v ast.Node, f string) { t.Drafts, _ = d.Boolean(v, f) },
	})
	if ok && !present["types"] {
		// Defaulting to every action would make a forgotten field run on
		// each push to every pull request; ask for it instead.
		d.Add(n, yamlpos.Join(field, "types"), "is required (any of %v)", PullRequestActions)
	}
	return t
}
