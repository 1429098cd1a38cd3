package catalog

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// RunbooksDir holds the runbooks jobs point at. Runbooks are prose for
// people; Parse does not read them, and the server does not need them.
const RunbooksDir = "runbooks/"

// Groups returns every group, sorted by name.
func (c *Catalog) Groups() []*Group {
	if c == nil {
		return nil
	}
	out := make([]*Group, 0, len(c.groups))
	for _, name := range slices.Sorted(maps.Keys(c.groups)) {
		out = append(out, c.groups[name])
	}
	return out
}

// CheckRunbooks reports each job whose runbook names a file that does not
// exist. It is separate from Parse because the server reads only what it
// serves: a missing runbook is a review problem, caught by `jobplane
// validate`, not a reason to stop serving a commit.
func (c *Catalog) CheckRunbooks(exists func(path string) bool) []Error {
	var errs []Error
	for _, j := range c.Jobs() {
		if j.Runbook == "" || exists(j.Runbook) {
			continue
		}
		msg := fmt.Sprintf("runbook %q does not exist", j.Runbook)
		if !strings.HasPrefix(j.Runbook, RunbooksDir) {
			msg += fmt.Sprintf(" (runbooks live in %s*.md)", RunbooksDir)
		}
		errs = append(errs, Error{File: j.File, Line: j.runbookLine, Column: j.runbookColumn, Field: "runbook", Message: msg})
	}
	return errs
}
