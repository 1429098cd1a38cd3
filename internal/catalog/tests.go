package catalog

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"

	"github.com/jobplane/jobplane/internal/yamlpos"
)

// Expectations of a policy test.
const (
	ExpectAllow    = "allow"    // allowed without approval
	ExpectDeny     = "deny"     // denied
	ExpectApproval = "approval" // allowed once approved
)

// ReferenceTime is the `now` of a policy test that does not give one, and of
// the neutral requests of `jobplane diff`: Monday 2026-01-05 12:00 UTC. A
// fixed time keeps a test's outcome independent of when CI runs it; tests of
// `hours` should name their own `now`.
var ReferenceTime = time.Date(2026, time.January, 5, 12, 0, 0, 0, time.UTC)

// ReferenceRef is the ref of a policy test that does not give one: the
// default protected branch, as most production requests run from it.
var ReferenceRef = Ref{Branch: "main", Protected: true}

// PolicyTest is one entry of tests/*.yaml: a request and the decision
// expected of the catalog's policies.
type PolicyTest struct {
	Name string `json:"name"`
	File string `json:"file"`
	Line int    `json:"line"`
	// Request is complete: params validated against the job's schema with
	// defaults applied, ref, now and actor kind defaulted.
	Request Request `json:"request"`
	Expect  string  `json:"expect"`
	// Grants, when not nil, must equal the decision's grants exactly.
	Grants map[string]string `json:"grants,omitempty"`
}

// testCheck is what must be checked of a test once every job is known.
type testCheck struct {
	d          *yamlpos.Decoder
	field      string // tests[i]
	test       *PolicyTest
	nameNode   ast.Node
	jobNode    ast.Node
	paramsNode ast.Node
	params     map[string]any
}

// Tests returns the policy tests, by file then position.
func (c *Catalog) Tests() []*PolicyTest {
	if c == nil {
		return nil
	}
	return slices.Clone(c.tests)
}

func (p *parse) parseTests(d *yamlpos.Decoder, body ast.Node) {
	var nodes []ast.Node
	present, ok := d.Object(body, "", 0, map[string]func(ast.Node, string){
		"tests": func(v ast.Node, f string) { nodes, _ = d.List(v, f) },
	})
	if !ok {
		return
	}
	if !present["tests"] {
		d.Add(body, "tests", "is required")
	}
	for i, n := range nodes {
		p.parseTest(d, n, yamlpos.Index("tests", i))
	}
}

func (p *parse) parseTest(d *yamlpos.Decoder, n ast.Node, field string) {
	line, _ := yamlpos.Position(d.Resolve(n, field))
	t := &PolicyTest{File: d.File, Line: line, Request: Request{Ref: ReferenceRef, Now: ReferenceTime}}
	chk := testCheck{d: d, test: t, field: field}
	var reqPresent map[string]bool
	present, ok := d.Object(n, field, 1, map[string]func(ast.Node, string){
		"name": func(v ast.Node, f string) {
			chk.nameNode = v
			t.Name, _ = d.Str(v, f)
		},
		"expect": func(v ast.Node, f string) {
			if s, ok := d.Str(v, f); ok {
				if s != ExpectAllow && s != ExpectDeny && s != ExpectApproval {
					d.Add(v, f, "must be allow, deny or approval, got %q", s)
				}
				t.Expect = s
			}
		},
		"grants": func(v ast.Node, f string) {
			t.Grants = d.StrMap(v, f, 2)
			es, _ := d.Entries(v, f, 2)
			for _, e := range es {
				if s := t.Grants[e.Key]; e.Value != nil && s != "read" && s != "write" {
					d.Add(e.Value, yamlpos.Join(f, e.Key), "must be read or write, got %q", s)
				}
			}
		},
		"request": func(v ast.Node, f string) {
			reqPresent, _ = d.Object(v, f, 2, map[string]func(ast.Node, string){
				"actor": func(v ast.Node, f string) { t.Request.Actor, _ = d.Str(v, f) },
				"job": func(v ast.Node, f string) {
					chk.jobNode = v
					t.Request.Job, _ = d.Str(v, f)
				},
				"channel": func(v ast.Node, f string) { t.Request.Channel, _ = d.Str(v, f) },
				"actor_kind": func(v ast.Node, f string) {
					if s, ok := d.Str(v, f); ok {
						if s != "user" && s != "service" {
							d.Add(v, f, "must be user or service, got %q", s)
						}
						t.Request.ActorKind = s
					}
				},
				"params": func(v ast.Node, f string) {
					chk.paramsNode = v
					if x, ok := d.Value(v, f, 3); ok {
						if m, isMap := x.(map[string]any); isMap {
							chk.params = m
						} else {
							d.Add(v, f, "must be a mapping")
						}
					}
				},
				"source": func(v ast.Node, f string) {
					if x, ok := d.Value(v, f, 3); ok {
						if m, isMap := x.(map[string]any); isMap {
							t.Request.Source = jsonRoundTrip(m)
						} else {
							d.Add(v, f, "must be a mapping")
						}
					}
				},
				"ref": func(v ast.Node, f string) {
					// A ref given replaces the default whole: a test that
					// names a feature branch means an unprotected one
					// unless it says otherwise.
					t.Request.Ref = Ref{}
					d.Object(v, f, 3, map[string]func(ast.Node, string){
						"branch":    func(v ast.Node, f string) { t.Request.Ref.Branch, _ = d.Str(v, f) },
						"protected": func(v ast.Node, f string) { t.Request.Ref.Protected, _ = d.Boolean(v, f) },
						"commit":    func(v ast.Node, f string) { t.Request.Ref.Commit, _ = d.Str(v, f) },
					})
				},
				"now": func(v ast.Node, f string) {
					if s, ok := d.Str(v, f); ok {
						now, err := time.Parse(time.RFC3339, s)
						if err != nil {
							d.Add(v, f, "must be an RFC 3339 time like 2026-01-05T12:00:00Z, got %q", s)
							return
						}
						t.Request.Now = now
					}
				},
			})
		},
	})
	if !ok {
		return
	}
	for _, k := range []string{"name", "request", "expect"} {
		if !present[k] {
			d.Add(n, yamlpos.Join(field, k), "is required")
		}
	}
	if present["request"] {
		for _, k := range []string{"actor", "job", "channel"} {
			if !reqPresent[k] {
				d.Add(n, yamlpos.Join(field, "request."+k), "is required")
			}
		}
	}
	if t.Request.ActorKind == "" {
		t.Request.ActorKind = "user"
		// The built-in service principals are services wherever they are
		// named, as the server would authenticate them.
		if t.Request.Actor == "scheduler" || t.Request.Actor == "github" {
			t.Request.ActorKind = "service"
		}
	}
	if t.Expect == ExpectDeny && t.Grants != nil {
		d.Add(n, yamlpos.Join(field, "grants"), "a denied request has no grants")
	}
	p.cat.tests = append(p.cat.tests, t)
	p.testChecks = append(p.testChecks, chk)
}

// checkTests resolves what a test can only know once every job is parsed:
// the job exists, and the params satisfy its schema (with defaults applied,
// as the server would before deciding). Test names must be unique, so a
// failure names one test.
func (p *parse) checkTests() {
	seen := map[string]*PolicyTest{}
	for _, c := range p.testChecks {
		t := c.test
		if first, dup := seen[t.Name]; dup && t.Name != "" {
			line, col := yamlpos.Position(c.nameNode)
			p.errs = append(p.errs, Error{File: t.File, Line: line, Column: col, Field: yamlpos.Join(c.field, "name"),
				Message: fmt.Sprintf("duplicate test name %q (first defined at %s:%d)", t.Name, first.File, first.Line)})
		} else {
			seen[t.Name] = t
		}
		if t.Request.Job == "" {
			continue
		}
		j, ok := p.cat.jobs[t.Request.Job]
		if !ok {
			line, col := yamlpos.Position(c.jobNode)
			p.errs = append(p.errs, Error{File: t.File, Line: line, Column: col, Field: yamlpos.Join(c.field, "request.job"),
				Message: fmt.Sprintf("unknown job %q (jobs are defined in %s%s.yaml)", t.Request.Job, JobsDir, t.Request.Job)})
			continue
		}
		var raw json.RawMessage
		if c.params != nil {
			raw, _ = json.Marshal(c.params)
		}
		norm, err := j.ValidateParams(raw)
		var pe *ParamsError
		if errors.As(err, &pe) {
			target, field := c.paramsNode, yamlpos.Join(c.field, "request.params")
			if pe.Field != "" {
				field += "." + strings.ReplaceAll(pe.Field, "/", ".")
			}
			if target == nil {
				target = c.jobNode
			} else if pe.Field != "" {
				target = c.d.Lookup(target, strings.Split(pe.Field, "/"))
			}
			line, col := yamlpos.Position(target)
			p.errs = append(p.errs, Error{File: t.File, Line: line, Column: col, Field: field,
				Message: pe.Message})
			continue
		}
		// Decoded from JSON, as the server decodes params before deciding,
		// so numbers are float64 in CEL exactly as in production.
		var params map[string]any
		if json.Unmarshal(norm, &params) == nil {
			t.Request.Params = params
		}
	}
}

// jsonRoundTrip gives free-form YAML values the types a JSON request would
// have (float64 numbers), so a test sees what the server sees.
func jsonRoundTrip(m map[string]any) map[string]any {
	b, err := json.Marshal(m)
	if err != nil {
		return maps.Clone(m)
	}
	var out map[string]any
	if json.Unmarshal(b, &out) != nil {
		return maps.Clone(m)
	}
	return out
}
