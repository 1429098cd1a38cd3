package bench

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/jobplane/jobplane/internal/apiclient"
)

// Verification is what the verify phase found.
type Verification struct {
	// Checked is the number of this benchmark's runs found through the API.
	Checked int `json:"checked"`
	// Problems lists every discrepancy (at most the first 20 are kept, with
	// a count of the rest); empty means every run succeeded exactly once.
	Problems []string `json:"problems,omitempty"`
}

// OK reports whether no problem was found.
func (v *Verification) OK() bool { return len(v.Problems) == 0 }

// Err is nil when OK, else an error wrapping ErrVerify.
func (v *Verification) Err() error {
	if v.OK() {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrVerify, strings.Join(v.Problems, "; "))
}

const maxProblems = 20

// Verify lists the runs of Job through the API and checks that each run in
// want succeeded on attempt 1 with no other attempt, that claims (from the
// drain phase; may be nil) holds exactly one claim for each of them and no
// claim of another run.
func (e *Env) Verify(ctx context.Context, want map[string]struct{}, claims map[string]int) (*Verification, error) {
	v := &Verification{}
	var problems []string
	seen := make(map[string]bool, len(want))
	cursor := ""
	for {
		page, err := e.Admin.ListRuns(ctx, apiclient.ListRunsParams{Job: Job, Limit: 500, Cursor: cursor})
		if err != nil {
			return nil, fmt.Errorf("verify: list runs: %w", err)
		}
		for _, r := range page.Runs {
			if _, ok := want[r.ID]; !ok || seen[r.ID] {
				continue
			}
			seen[r.ID] = true
			v.Checked++
			if r.State != "succeeded" {
				problems = append(problems, fmt.Sprintf("run %s is %s", r.ID, r.State))
			}
			if len(r.Attempts) != 1 {
				problems = append(problems, fmt.Sprintf("run %s has %d attempts", r.ID, len(r.Attempts)))
			}
			for _, a := range r.Attempts {
				if a.Number != 1 || a.State != "succeeded" {
					problems = append(problems, fmt.Sprintf("run %s: attempt %d is %s", r.ID, a.Number, a.State))
				}
			}
		}
		if page.NextCursor == "" || len(seen) == len(want) {
			break
		}
		cursor = page.NextCursor
	}
	for id := range want {
		if !seen[id] {
			problems = append(problems, fmt.Sprintf("run %s was not listed", id))
		}
	}
	if claims != nil {
		for id := range want {
			if n := claims[id]; n != 1 {
				problems = append(problems, fmt.Sprintf("run %s was claimed %d times", id, n))
			}
		}
		foreign := 0
		for id := range claims {
			if _, ok := want[id]; !ok {
				foreign++
			}
		}
		sort.Strings(problems)
		if foreign > 0 {
			problems = append([]string{fmt.Sprintf("%d runs not created by this benchmark were claimed (queued runs left in the database; use a fresh one)", foreign)}, problems...)
		}
	} else {
		sort.Strings(problems)
	}
	if len(problems) > maxProblems {
		rest := len(problems) - maxProblems
		problems = append(problems[:maxProblems], fmt.Sprintf("… and %d more", rest))
	}
	v.Problems = problems
	return v, nil
}
