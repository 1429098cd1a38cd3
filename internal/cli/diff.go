package cli

import (
	"github.com/jobplane/jobplane/internal/review"
)

// DiffCmd prints the permission impact of a change between two commits of a
// definitions repository.
type DiffCmd struct {
	Rev1    string   `arg:"" help:"The revision before the change (a branch, a sha, HEAD~1)." placeholder:"REV1"`
	Rev2    string   `arg:"" help:"The revision after the change." placeholder:"REV2"`
	Repo    string   `help:"The definitions repository (default: the one containing the current directory)." placeholder:"DIR"`
	Channel []string `help:"A channel to compare besides those the rules name (repeatable; default: prod)." placeholder:"C"`
	JSON    bool     `help:"Print the impact as JSON." name:"json"`
}

// Run prints the impact. It exits 0 whatever changed (it reports, it does
// not judge) and 1 when either side does not validate.
func (c *DiffCmd) Run(g *Globals) error {
	repo := c.Repo
	if repo == "" {
		repo = "."
	}
	channels := c.Channel
	if len(channels) == 0 {
		channels = []string{"prod"}
	}
	res, err := review.DiffRevisions(repo, c.Rev1, c.Rev2, channels)
	if err != nil {
		return err
	}
	if c.JSON {
		if err := printJSON(g.Stdout, res); err != nil {
			return err
		}
	} else {
		res.WriteText(g.Stdout)
	}
	if !res.OK() {
		return &ExitError{Code: 1}
	}
	return nil
}
