package store_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// optionalFilter matches a condition that also holds when its parameter
// is empty, zero or NULL (job = $2, or $2 is the empty string): one
// statement for every combination of filters. A planner cannot use such a condition to start
// or stop an index scan (PostgreSQL's generic plan, which a prepared
// statement gets after a few calls, and SQLite's every plan), so the
// statement reads every row its other conditions allow. It made a run's
// timeline read its tenant's whole audit history, the sealer read every
// event after its horizon, and each runs page every newer run (session
// 14, docs/benchmarks.md). Statements now carry only the filters given.
var optionalFilter = regexp.MustCompile(`(\$\d+|\?\d*)(::[a-z\[\]]+)? (= ''|= 0|IS NULL) OR|NOT \$\d+ OR|(cardinality|json_array_length)\((\$\d+|\?\d*)[^)]*\) = 0 OR`)

// optionalFilterAllowed names the lines where such a condition is kept,
// with why: each filters rows an index has already found.
var optionalFilterAllowed = map[string]string{
	"managed_only": "the claim's GitHub eligibility, applied to the attempts the claimable index found",
	"a.repo":       "the claim's repository eligibility, likewise",
}

func TestNoOptionalFilterConditions(t *testing.T) {
	for _, dir := range []string{"postgres", "sqlite"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no sources (%v)", dir, err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
		line:
			for i, l := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(strings.TrimSpace(l), "//") || !optionalFilter.MatchString(l) {
					continue
				}
				for k := range optionalFilterAllowed {
					if strings.Contains(l, k) {
						continue line
					}
				}
				t.Errorf("%s:%d: a condition that holds when its parameter is empty; write the filter only when it is given:\n%s", f, i+1, strings.TrimSpace(l))
			}
		}
	}
}
