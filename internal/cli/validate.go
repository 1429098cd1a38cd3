package cli

import (
	"fmt"
	"path/filepath"

	"github.com/jobplane/jobplane/internal/review"
)

// ValidateCmd checks a definitions repository and runs its policy tests: the
// check a definitions repository's CI runs on every pull request.
type ValidateCmd struct {
	Target string `arg:"" optional:"" help:"A directory to validate as it is on disk (default: the current directory), or a revision (HEAD~1, a branch, a sha) of the repository." placeholder:"DIR|REV"`
	Repo   string `help:"Repository a REV is read from (default: the one containing the current directory)." placeholder:"DIR"`
	JSON   bool   `help:"Print the report as JSON." name:"json"`
}

// Run validates and exits 1 unless everything passes.
func (c *ValidateCmd) Run(g *Globals) error {
	files, extra, err := review.Load(c.Target, c.Repo)
	if err != nil {
		return err
	}
	if !review.HasDefinitions(files) && len(extra) == 0 {
		where := c.Target
		if where == "" {
			where = "."
		}
		if abs, err := filepath.Abs(where); err == nil && c.Repo == "" {
			where = abs
		}
		return fmt.Errorf("%w in %s: expected jobs/*.yaml, policies/*.yaml or groups.yaml (docs/definitions.md); run jobplane validate in the definitions repository or give its path: jobplane validate DIR", review.ErrNoDefinitions, where)
	}
	rep := review.Validate(files, extra...)
	if c.JSON {
		if err := printJSON(g.Stdout, rep); err != nil {
			return err
		}
	} else {
		rep.WriteText(g.Stdout)
	}
	if !rep.OK {
		return &ExitError{Code: 1}
	}
	return nil
}
