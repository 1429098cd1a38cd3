package review

import (
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/jobplane/jobplane/internal/catalog"
)

// Report is the outcome of Validate. Its JSON form is what `jobplane
// validate --json` prints.
type Report struct {
	OK     bool            `json:"ok"`
	Errors []catalog.Error `json:"errors"`
	Jobs   int             `json:"jobs"`
	Rules  int             `json:"rules"`
	// TestsRun is false when the definitions did not parse: tests need a
	// catalog to decide with.
	TestsRun bool         `json:"tests_run"`
	Tests    []TestResult `json:"tests"`
	Passed   int          `json:"passed"`
	Failed   int          `json:"failed"`
}

// TestResult is the outcome of one policy test.
type TestResult struct {
	Name   string `json:"name"`
	File   string `json:"file"`
	Line   int    `json:"line"`
	Passed bool   `json:"passed"`
	Expect string `json:"expect"`
	Got    string `json:"got"`
	// ExpectGrants is the test's grants expectation, if it has one.
	ExpectGrants map[string]string `json:"expect_grants,omitempty"`
	Grants       map[string]string `json:"grants,omitempty"`
	Explanation  string            `json:"explanation"`
	// Rules are the traces of the rules that name the request's job and
	// channel: the ones that matched or came closest. Only for failures.
	Rules []catalog.RuleTrace `json:"rules,omitempty"`
}

// Validate parses the files of a definitions repository (repo-relative path
// → content, as ReadDir and ReadRevision return them), checks that runbooks
// exist and runs the policy tests. extra are problems found while reading
// (a link where a file should be); they fail the report like parse errors.
func Validate(files map[string][]byte, extra ...catalog.Error) Report {
	cat, errs := catalog.Parse(files)
	errs = append(slices.Clone(extra), errs...)
	rep := Report{Errors: errs, Tests: []TestResult{}}
	if cat != nil {
		rep.Errors = append(rep.Errors, cat.CheckRunbooks(func(p string) bool {
			_, ok := files[p]
			return ok
		})...)
		rep.Jobs, rep.Rules, rep.TestsRun = len(cat.Jobs()), len(cat.Rules()), true
		for _, t := range cat.Tests() {
			r := runTest(cat, t)
			if r.Passed {
				rep.Passed++
			} else {
				rep.Failed++
			}
			rep.Tests = append(rep.Tests, r)
		}
	}
	if rep.Errors == nil {
		rep.Errors = []catalog.Error{}
	}
	slices.SortStableFunc(rep.Errors, compareErrors)
	rep.OK = len(rep.Errors) == 0 && rep.Failed == 0
	return rep
}

func compareErrors(a, b catalog.Error) int {
	if c := strings.Compare(a.File, b.File); c != 0 {
		return c
	}
	if a.Line != b.Line {
		return a.Line - b.Line
	}
	return a.Column - b.Column
}

// outcome names a decision the way tests name expectations.
func outcome(d catalog.Decision) string {
	switch {
	case !d.Allowed:
		return catalog.ExpectDeny
	case d.NeedsApproval != nil && d.NeedsApproval.Count > 0:
		return catalog.ExpectApproval
	default:
		return catalog.ExpectAllow
	}
}

func runTest(cat *catalog.Catalog, t *catalog.PolicyTest) TestResult {
	d := cat.Decide(t.Request)
	r := TestResult{Name: t.Name, File: t.File, Line: t.Line, Expect: t.Expect, Got: outcome(d),
		ExpectGrants: t.Grants, Grants: d.Grants, Explanation: d.Explanation}
	r.Passed = r.Got == r.Expect
	if r.Passed && t.Grants != nil {
		// A missing grants map and an empty one both mean "no grants".
		r.Passed = maps.Equal(t.Grants, d.Grants)
	}
	if !r.Passed {
		byID := map[string]*catalog.Rule{}
		for _, rule := range cat.Rules() {
			byID[rule.ID] = rule
		}
		for _, tr := range d.Rules {
			if rule := byID[tr.ID]; rule != nil && namesJobAndChannel(rule, t.Request.Job, t.Request.Channel) {
				r.Rules = append(r.Rules, tr)
			}
		}
	}
	return r
}

// namesJobAndChannel reports whether a rule is about this job in this
// channel, whoever asks: the rules worth showing for a failed test.
func namesJobAndChannel(r *catalog.Rule, job, channel string) bool {
	if len(r.Channels) > 0 && !slices.Contains(r.Channels, channel) {
		return false
	}
	return slices.ContainsFunc(r.Jobs, func(pat string) bool {
		ok, err := path.Match(pat, job)
		return pat == job || (err == nil && ok)
	})
}

// WriteText prints a report for people: errors as file:line:column, one test
// per line with the decision of each failure, and a one-line summary.
func (r Report) WriteText(w io.Writer) {
	for _, e := range r.Errors {
		fmt.Fprintln(w, e.Error())
	}
	for _, t := range r.Tests {
		if t.Passed {
			fmt.Fprintf(w, "ok   %s:%d: %s\n", t.File, t.Line, t.Name)
			continue
		}
		fmt.Fprintf(w, "FAIL %s:%d: %s\n", t.File, t.Line, t.Name)
		fmt.Fprintf(w, "     expected %s, got %s\n", describeOutcome(t.Expect, t.ExpectGrants), describeOutcome(t.Got, t.Grants))
		fmt.Fprintf(w, "     %s\n", t.Explanation)
		for _, tr := range t.Rules {
			mark := "no match"
			if tr.Matched {
				mark = "matched"
			}
			fmt.Fprintf(w, "     - %s rule %s (%s:%d): %s: %s\n", tr.Effect, tr.ID, tr.File, tr.Line, mark, tr.Reason)
		}
	}
	fmt.Fprintln(w, r.Summary())
}

func describeOutcome(o string, grants map[string]string) string {
	if grants == nil || o == catalog.ExpectDeny {
		return o
	}
	if len(grants) == 0 {
		return o + " with no grants"
	}
	return o + " granting " + grantsText(grants)
}

// Summary is the last line of the text report.
func (r Report) Summary() string {
	if r.OK {
		return fmt.Sprintf("ok: %s, %s, %s passed", plural(r.Jobs, "job"), plural(r.Rules, "rule"), plural(r.Passed, "test"))
	}
	var parts []string
	if n := len(r.Errors); n > 0 {
		parts = append(parts, plural(n, "error"))
	}
	if r.Failed > 0 {
		parts = append(parts, plural(r.Failed, "test")+" failed", fmt.Sprintf("%d passed", r.Passed))
	} else if !r.TestsRun {
		parts = append(parts, "tests not run")
	}
	return "FAIL: " + strings.Join(parts, ", ")
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func grantsText(g map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(g)) {
		parts = append(parts, k+"="+g[k])
	}
	return strings.Join(parts, ", ")
}
