package catalog

import (
	"cmp"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/goccy/go-yaml/ast"

	"github.com/jobplane/jobplane/internal/connector"
	"github.com/jobplane/jobplane/internal/policy"
	"github.com/jobplane/jobplane/internal/yamlpos"
)

// File names of the definitions repository that Parse reads.
const (
	GroupsFile  = "groups.yaml"
	JobsDir     = "jobs/"
	PoliciesDir = "policies/"
	// ConnectorsDir holds connectors/<name>.yaml.
	ConnectorsDir = "connectors/"
	// TestsDir holds policy tests, tests/*.yaml, run by `jobplane validate`.
	TestsDir = "tests/"
)

var jobNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// Catalog is the validated content of one commit of a definitions repository.
// It is immutable once returned by Parse and safe for concurrent use.
type Catalog struct {
	jobs     map[string]*Job
	groups   map[string]*Group
	rules    []*Rule
	memberOf map[string][]string // actor → sorted group names
	policy   *policy.Policy      // rules compiled once, at Parse
	// connectors are connectors/<name>.yaml, by name.
	connectors map[string]*connector.Definition
	// tests are the policy tests of tests/*.yaml, by file then position.
	tests []*PolicyTest
}

// Group is a named set of principals, with free-form attributes for policy
// conditions.
type Group = policy.Group

// IsDefinitionFile reports whether Parse reads the file at this repo-relative
// path; callers that list a tree use it to pick the files to load.
func IsDefinitionFile(path string) bool {
	if path == GroupsFile {
		return true
	}
	for _, dir := range []string{JobsDir, PoliciesDir, ConnectorsDir, TestsDir} {
		if rest, ok := strings.CutPrefix(path, dir); ok {
			return strings.HasSuffix(rest, ".yaml") && !strings.Contains(rest, "/") && rest != ".yaml"
		}
	}
	return false
}

// Parse validates the files of a definitions repository, keyed by
// repo-relative slash-separated path. Files Parse does not read (see
// IsDefinitionFile) are ignored. It returns every error found, sorted by file
// and position, and a nil catalog when there is any.
func Parse(files map[string][]byte) (*Catalog, []Error) {
	p := &parse{
		cat: &Catalog{jobs: map[string]*Job{}, groups: map[string]*Group{}, memberOf: map[string][]string{},
			connectors: map[string]*connector.Definition{}},
		refs: map[string][]groupRef{},
	}
	for _, path := range slices.Sorted(maps.Keys(files)) {
		if !IsDefinitionFile(path) {
			continue
		}
		p.file(path, files[path])
	}
	p.checkRefs()
	p.checkTests()
	errs := p.errs
	slices.SortStableFunc(errs, func(a, b Error) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
	if len(errs) > 0 {
		return nil, errs
	}
	for name, g := range p.cat.groups {
		for _, m := range g.Members {
			p.cat.memberOf[m] = append(p.cat.memberOf[m], name)
		}
	}
	for _, gs := range p.cat.memberOf {
		slices.Sort(gs)
	}
	groups := make([]policy.Group, 0, len(p.cat.groups))
	for _, name := range slices.Sorted(maps.Keys(p.cat.groups)) {
		groups = append(groups, *p.cat.groups[name])
	}
	p.cat.policy = policy.New(p.compiled, groups)
	return p.cat, nil
}

// connRef is a job's use of a connector name.
type connRef struct {
	name         string
	file         string
	line, column int
	field        string
}

// groupRef is a use of a group name, checked once groups.yaml has been read
// whatever the file order.
type groupRef struct {
	file         string
	line, column int
	field        string
}

type parse struct {
	cat      *Catalog
	connRefs []connRef
	errs     []Error
	refs     map[string][]groupRef
	// ruleIDs are unique across files, so they can name a decision.
	ruleIDs map[string]*Rule
	// compiled holds the rules that compiled, in file then position order.
	compiled []*policy.CompiledRule
	// testChecks are the policy tests' references, checked once every job
	// is known.
	testChecks []testCheck
}

func (p *parse) file(path string, data []byte) {
	defer func() {
		// A bug of ours on some input must cost one file, not the process.
		if r := recover(); r != nil {
			p.errs = append(p.errs, Error{File: path, Message: fmt.Sprintf("internal error reading file: %v", r)})
		}
	}()
	d := yamlpos.New(path, yamlOptions)
	body := d.Parse(data)
	switch {
	case path == GroupsFile:
		if body != nil {
			p.parseGroups(d, body)
		}
	case strings.HasPrefix(path, JobsDir):
		p.parseJob(d, path, body, len(d.Errs) > 0)
	case strings.HasPrefix(path, PoliciesDir):
		if body != nil {
			p.parsePolicy(d, body)
		}
	case strings.HasPrefix(path, TestsDir):
		if body != nil {
			p.parseTests(d, body)
		}
	case strings.HasPrefix(path, ConnectorsDir):
		def, errs := connector.Parse(path, data)
		for _, e := range errs {
			p.errs = append(p.errs, Error{File: e.File, Line: e.Line, Column: e.Column, Field: e.Field, Message: e.Message})
		}
		if def != nil {
			p.cat.connectors[def.Name] = def
		}
	}
	p.errs = append(p.errs, d.Errs...)
}

func (p *parse) ref(d *yamlpos.Decoder, group string, n ast.Node, field string) {
	line, col := yamlpos.Position(n)
	p.refs[group] = append(p.refs[group], groupRef{file: d.File, line: line, column: col, field: field})
}

func (p *parse) checkRefs() {
	for _, r := range p.connRefs {
		if _, ok := p.cat.connectors[r.name]; !ok {
			p.errs = append(p.errs, Error{File: r.file, Line: r.line, Column: r.column, Field: r.field,
				Message: fmt.Sprintf("unknown connector %q (connectors are defined in %s%s.yaml)", r.name, ConnectorsDir, r.name)})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(p.refs)) {
		if _, ok := p.cat.groups[name]; ok {
			continue
		}
		for _, r := range p.refs[name] {
			p.errs = append(p.errs, Error{File: r.file, Line: r.line, Column: r.column, Field: r.field,
				Message: fmt.Sprintf("unknown group %q (groups are defined in %s)", name, GroupsFile)})
		}
	}
}

// Connector returns the connector with this name.
func (c *Catalog) Connector(name string) (*connector.Definition, bool) {
	if c == nil {
		return nil, false
	}
	d, ok := c.connectors[name]
	return d, ok
}

// Job returns the job with this name.
func (c *Catalog) Job(name string) (*Job, bool) {
	if c == nil {
		return nil, false
	}
	j, ok := c.jobs[name]
	return j, ok
}

// Jobs returns every job, sorted by name.
func (c *Catalog) Jobs() []*Job {
	if c == nil {
		return nil
	}
	out := make([]*Job, 0, len(c.jobs))
	for _, name := range slices.Sorted(maps.Keys(c.jobs)) {
		out = append(out, c.jobs[name])
	}
	return out
}

// Group returns the group with this name.
func (c *Catalog) Group(name string) (*Group, bool) {
	if c == nil {
		return nil, false
	}
	g, ok := c.groups[name]
	return g, ok
}

// Approvers expands an approval's groups to the sorted, distinct names of
// their members: the principals who may approve. A group the catalog does
// not define adds no one.
func (c *Catalog) Approvers(groups []string) []string {
	var out []string
	for _, name := range groups {
		if g, ok := c.Group(name); ok {
			out = append(out, g.Members...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Rules returns the policy rules in evaluation order: by file path, then
// position in the file.
func (c *Catalog) Rules() []*Rule {
	if c == nil {
		return nil
	}
	return slices.Clone(c.rules)
}

// GroupsOf returns the sorted names of the groups the actor is a member of.
func (c *Catalog) GroupsOf(actor string) []string {
	if c == nil {
		return nil
	}
	return slices.Clone(c.memberOf[actor])
}
