package review

import (
	"fmt"
	"io"
	"os"

	"github.com/jobplane/jobplane/internal/catalog"
)

// Load reads what `jobplane validate [DIR|REV]` validates: target as a
// directory on disk when it is one (a pull request checkout is validated as
// it is, committed or not), else as a revision of the repository containing
// repo. An empty target is the current directory; a name that is both a
// directory and a revision is the directory, unless repo is given.
func Load(target, repo string) (map[string][]byte, []catalog.Error, error) {
	if target == "" {
		target = "."
	}
	if fi, err := os.Stat(target); err == nil && fi.IsDir() && repo == "" {
		return ReadDir(target)
	}
	dir := repo
	if dir == "" {
		dir = "."
	}
	rev, err := ReadRevision(dir, target)
	if err != nil {
		if repo == "" {
			return nil, nil, fmt.Errorf("%s is neither a directory nor a revision: %w", target, err)
		}
		return nil, nil, err
	}
	return rev.Files, rev.Errors, nil
}

// DiffResult is what `jobplane diff` prints: the two sides and, when both
// validate, the impact.
type DiffResult struct {
	Before DiffSide `json:"before"`
	After  DiffSide `json:"after"`
	// Impact is nil when either side does not validate.
	Impact *Impact `json:"impact,omitempty"`
}

// DiffSide is one revision compared.
type DiffSide struct {
	Rev    string          `json:"rev"`
	Commit string          `json:"commit"`
	Errors []catalog.Error `json:"errors,omitempty"`
}

// OK reports whether both sides validated.
func (r *DiffResult) OK() bool { return r.Impact != nil }

// DiffRevisions compares two revisions of the repository containing dir.
// channels are compared besides those the rules name.
func DiffRevisions(dir, rev1, rev2 string, channels []string) (*DiffResult, error) {
	var cats [2]*catalog.Catalog
	var sides [2]DiffSide
	empty := 0
	for i, rev := range []string{rev1, rev2} {
		r, err := ReadRevision(dir, rev)
		if err != nil {
			return nil, err
		}
		if !HasDefinitions(r.Files) {
			empty++
		}
		cat, errs := catalog.Parse(r.Files)
		sides[i] = DiffSide{Rev: rev, Commit: r.Commit, Errors: append(r.Errors, errs...)}
		if len(sides[i].Errors) == 0 {
			cats[i] = cat
		}
	}
	if empty == 2 {
		return nil, fmt.Errorf("%w at %s or %s in the repository of %s: expected jobs/*.yaml, policies/*.yaml or groups.yaml (docs/definitions.md); run jobplane diff in the definitions repository, or give it with --repo", ErrNoDefinitions, rev1, rev2, dir)
	}
	res := &DiffResult{Before: sides[0], After: sides[1]}
	if cats[0] == nil || cats[1] == nil {
		return res, nil
	}
	imp, err := Diff(cats[0], cats[1], channels)
	if err != nil {
		return nil, err
	}
	res.Impact = &imp
	return res, nil
}

// WriteText prints the result for people: a line naming the two commits,
// then the impact, or the errors of each side that does not validate.
func (r *DiffResult) WriteText(w io.Writer) {
	if !r.OK() {
		for _, s := range []DiffSide{r.Before, r.After} {
			if len(s.Errors) == 0 {
				continue
			}
			fmt.Fprintf(w, "%s (%s) does not validate:\n", s.Rev, short(s.Commit))
			for _, e := range s.Errors {
				fmt.Fprintf(w, "  %s\n", e.Error())
			}
		}
		return
	}
	fmt.Fprintf(w, "%s (%s) → %s (%s)\n", r.Before.Rev, short(r.Before.Commit), r.After.Rev, short(r.After.Commit))
	r.Impact.WriteText(w)
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}
