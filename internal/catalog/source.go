package catalog

import (
	"regexp"

	"github.com/goccy/go-yaml/ast"

	"github.com/jobplane/jobplane/internal/yamlpos"
)

// Source names the code repository a job runs in: a repository the server
// is configured with (--source-repo NAME=URL), at the head of Branch when
// the run is requested (empty: the branch of the run's channel).
type Source struct {
	Repo   string `json:"repo"`
	Branch string `json:"branch,omitempty"`
}

var (
	sourceRepoRe   = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	sourceBranchRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$`)
)

func (j *Job) parseSource(d *yamlpos.Decoder, n ast.Node, field string) {
	s := &Source{}
	present, ok := d.Object(n, field, 1, map[string]func(ast.Node, string){
		"repo": func(v ast.Node, f string) {
			if x, ok := d.Str(v, f); ok {
				s.Repo = x
				if !sourceRepoRe.MatchString(x) {
					d.Add(v, f, "must match %s", sourceRepoRe)
				}
			}
		},
		"branch": func(v ast.Node, f string) {
			if x, ok := d.Str(v, f); ok {
				s.Branch = x
				if !sourceBranchRe.MatchString(x) || hasDotDot(x) {
					d.Add(v, f, "must be a branch name matching %s", sourceBranchRe)
				}
			}
		},
	})
	if !ok {
		return
	}
	if !present["repo"] {
		d.Add(n, yamlpos.Join(field, "repo"), "is required")
	}
	j.Source = s
}

func hasDotDot(s string) bool {
	for i := 0; i+1 < len(s); i++ {
		if s[i] == '.' && s[i+1] == '.' {
			return true
		}
	}
	return false
}
