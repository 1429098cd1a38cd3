package catalog

import (
	"path"
	"regexp"
	"strings"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"

	"github.com/jobplane/jobplane/internal/policy"
	"github.com/jobplane/jobplane/internal/yamlpos"
)

// Rule effects.
const (
	EffectAllow = policy.EffectAllow
	EffectDeny  = policy.EffectDeny
)

// AnyUser in a rule's users matches every authenticated principal.
const AnyUser = policy.AnyUser

var ruleIDRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// The policy types are package policy's: the catalog parses and positions
// them, the policy engine compiles and decides. The aliases keep the
// catalog's API whole for its callers.
type (
	// Rule is one authorization rule of a policy file.
	Rule = policy.Rule
	// Hours restricts a rule to a weekly time window.
	Hours = policy.Hours
	// Approval is the approvals a rule requires before the run starts.
	Approval = policy.Approval
	// Request is what an authorization decision is about.
	Request = policy.Request
	// Ref is the Git reference a request runs from.
	Ref = policy.Ref
	// Decision is the outcome of Decide.
	Decision = policy.Decision
	// RuleTrace records how one rule was evaluated.
	RuleTrace = policy.RuleTrace
)

func (p *parse) parseGroups(d *yamlpos.Decoder, body ast.Node) {
	d.Object(body, "", 0, map[string]func(ast.Node, string){
		"groups": func(v ast.Node, f string) {
			es, _ := d.Entries(v, f, 1)
			for _, e := range es {
				gf := yamlpos.Join(f, e.Key)
				if !ruleIDRe.MatchString(e.Key) {
					d.Add(e.KeyNode, gf, "group names must match %s", ruleIDRe)
					continue
				}
				g := &Group{Name: e.Key}
				if e.Value != nil {
					d.Object(e.Value, gf, 2, map[string]func(ast.Node, string){
						"members": func(v ast.Node, f string) {
							g.Members = d.StrList(v, f)
							for i, m := range g.Members {
								if m == AnyUser {
									d.Add(v, yamlpos.Index(f, i), "%q is not a member name", AnyUser)
								}
							}
						},
						"attributes": func(v ast.Node, f string) {
							x, ok := d.Value(v, f, 2)
							if !ok {
								return
							}
							m, isMap := x.(map[string]any)
							if !isMap {
								d.Add(v, f, "must be a mapping")
								return
							}
							g.Attributes = m
						},
					})
				}
				p.cat.groups[e.Key] = g
			}
		},
	})
}

func (p *parse) parsePolicy(d *yamlpos.Decoder, body ast.Node) {
	var ruleNodes []ast.Node
	present, ok := d.Object(body, "", 0, map[string]func(ast.Node, string){
		"rules": func(v ast.Node, f string) { ruleNodes, _ = d.List(v, f) },
	})
	if !ok {
		return
	}
	if !present["rules"] {
		d.Add(body, "rules", "is required")
	}
	if p.ruleIDs == nil {
		p.ruleIDs = map[string]*Rule{}
	}
	for i, n := range ruleNodes {
		p.parseRule(d, n, yamlpos.Index("rules", i))
	}
}

func (p *parse) parseRule(d *yamlpos.Decoder, n ast.Node, field string) {
	line, _ := yamlpos.Position(d.Resolve(n, field))
	r := &Rule{File: d.File, Line: line, Effect: EffectAllow}
	var idNode ast.Node
	// nodes keeps where each policy-engine field was written, so that the
	// problems CompileRule finds point at their line and column.
	nodes := map[string]ast.Node{}
	present, ok := d.Object(n, field, 1, map[string]func(ast.Node, string){
		"id": func(v ast.Node, f string) {
			idNode = v
			if s, ok := d.Str(v, f); ok {
				r.ID = s
				if !ruleIDRe.MatchString(s) {
					d.Add(v, f, "must match %s", ruleIDRe)
				}
			}
		},
		"effect": func(v ast.Node, f string) {
			if s, ok := d.Str(v, f); ok {
				if s != EffectAllow && s != EffectDeny {
					d.Add(v, f, "must be allow or deny, got %q", s)
				}
				r.Effect = s
			}
		},
		"jobs": func(v ast.Node, f string) {
			items, _ := d.List(v, f)
			for i, item := range items {
				s, ok := d.Str(item, yamlpos.Index(f, i))
				if !ok {
					continue
				}
				if _, err := path.Match(s, ""); err != nil || s == "" {
					d.Add(item, yamlpos.Index(f, i), "invalid job name or glob %q", s)
					continue
				}
				r.Jobs = append(r.Jobs, s)
			}
		},
		"channels": func(v ast.Node, f string) { r.Channels = d.StrList(v, f) },
		"groups": func(v ast.Node, f string) {
			items, _ := d.List(v, f)
			for i, item := range items {
				if s, ok := d.Str(item, yamlpos.Index(f, i)); ok {
					r.Groups = append(r.Groups, s)
					p.ref(d, s, item, yamlpos.Index(f, i))
				}
			}
		},
		"users": func(v ast.Node, f string) { r.Users = d.StrList(v, f) },
		"when": func(v ast.Node, f string) {
			nodes["when"] = v
			r.When, _ = d.Str(v, f)
		},
		"hours": func(v ast.Node, f string) {
			nodes["hours"] = v
			h := &Hours{}
			d.Object(v, f, 2, map[string]func(ast.Node, string){
				"tz":   func(v ast.Node, f string) { nodes["hours.tz"] = v; h.TZ, _ = d.Str(v, f) },
				"from": func(v ast.Node, f string) { nodes["hours.from"] = v; h.From, _ = d.Str(v, f) },
				"to":   func(v ast.Node, f string) { nodes["hours.to"] = v; h.To, _ = d.Str(v, f) },
				"days": func(v ast.Node, f string) {
					nodes["hours.days"] = v
					if items, ok := d.List(v, f); ok {
						for i, item := range items {
							nodes[yamlpos.Index("hours.days", i)] = item
						}
					}
					h.Days = d.StrList(v, f)
				},
			})
			r.Hours = h
		},
		"approval": func(v ast.Node, f string) {
			nodes["approval"] = v
			a := &Approval{}
			d.Object(v, f, 2, map[string]func(ast.Node, string){
				"count": func(v ast.Node, f string) {
					nodes["approval.count"] = v
					c, _ := d.Integer(v, f)
					a.Count = int(min(max(c, 0), 1000))
				},
				"groups": func(v ast.Node, f string) {
					nodes["approval.groups"] = v
					items, _ := d.List(v, f)
					for i, item := range items {
						s, ok := d.Str(item, yamlpos.Index(f, i))
						if !ok {
							continue
						}
						if s == "" {
							d.Add(item, yamlpos.Index(f, i), "must not be empty")
							continue
						}
						a.Groups = append(a.Groups, s)
						p.ref(d, s, item, yamlpos.Index(f, i))
					}
				},
			})
			r.Approval = a
		},
		"forks": func(v ast.Node, f string) {
			nodes["forks"] = v
			r.Forks, _ = d.Str(v, f)
		},
		"grants": func(v ast.Node, f string) {
			nodes["grants"] = v
			if es, ok := d.Entries(v, f, 2); ok {
				for _, e := range es {
					nodes["grants."+e.Key] = e.KeyNode
				}
			}
			r.Grants = d.StrMap(v, f, 2)
		},
	})
	if !ok {
		return
	}
	if !present["id"] {
		d.Add(n, yamlpos.Join(field, "id"), "is required")
	} else if first, dup := p.ruleIDs[r.ID]; dup && r.ID != "" {
		d.Add(idNode, yamlpos.Join(field, "id"), "duplicate rule id %q (first defined at %s:%d)", r.ID, first.File, first.Line)
	} else {
		p.ruleIDs[r.ID] = r
	}
	if !present["jobs"] {
		d.Add(n, yamlpos.Join(field, "jobs"), "is required (use [\"*\"] for every job)")
	}
	if !present["groups"] && !present["users"] {
		d.Add(n, field, "must name groups or users")
	}
	p.cat.rules = append(p.cat.rules, r)
	p.compileRule(d, n, field, r, nodes)
}

// compileRule hands the rule to the policy engine, which validates and
// compiles when, hours, approval and grants, and maps its problems back to
// the YAML. Problems about fields the catalog already checked are dropped so
// each mistake is reported once.
func (p *parse) compileRule(d *yamlpos.Decoder, n ast.Node, field string, r *Rule, nodes map[string]ast.Node) {
	c, probs := policy.CompileRule(*r)
	for _, pr := range probs {
		if pr.Field == "" || pr.Field == "effect" || strings.HasPrefix(pr.Field, "jobs") {
			continue
		}
		f := yamlpos.Join(field, pr.Field)
		node := nodes[pr.Field]
		if node == nil {
			// A sub-field that was absent: point at its parent.
			parent, _, _ := strings.Cut(pr.Field, ".")
			node = nodes[parent]
		}
		if node == nil {
			node = n
		}
		line, col := yamlpos.Position(node)
		if pr.Field == "when" && pr.Line > 0 {
			line, col = whenPosition(node, pr.Line, pr.Column)
		}
		d.Errs = append(d.Errs, Error{File: d.File, Line: line, Column: col, Field: f, Message: pr.Message})
	}
	if c != nil {
		p.compiled = append(p.compiled, c)
	}
}

// whenPosition maps a 1-based line and column inside a `when` expression to
// the position in the file. For a plain or quoted scalar on one line the
// column is exact unless escapes precede it; a multi-line flow scalar is
// folded into one line before CEL sees it, so only its first line is exact.
// For a block scalar (| or >) the line is the expression's line counted from
// the indicator (exact for | without leading blank lines) and the column
// assumes the content is indented two columns more than its key.
func whenPosition(n ast.Node, line, col int) (int, int) {
	n0 := n
	for {
		a, ok := n0.(*ast.AnchorNode)
		if !ok || a.Value == nil {
			break
		}
		n0 = a.Value
	}
	l, c := yamlpos.Position(n0)
	switch v := n0.(type) {
	case *ast.LiteralNode:
		// The parser keeps no position for the first content line, so
		// assume the usual layout: content one line below the indicator,
		// indented two more columns than the key.
		if v.Start != nil && v.Start.Position != nil {
			return l + line, v.Start.Position.IndentNum + 2 + col
		}
		return l + line, c
	case *ast.StringNode:
		if line > 1 {
			return l, c
		}
		if tk := v.GetToken(); tk != nil && (tk.Type == token.SingleQuoteType || tk.Type == token.DoubleQuoteType) {
			return l, c + col // skip the opening quote
		}
		return l, c + col - 1
	}
	return l, c
}

// Decide authorizes a request with the catalog's policies; see package
// policy for the semantics. A nil catalog denies.
func (c *Catalog) Decide(req Request) Decision {
	if c == nil {
		return (*policy.Policy)(nil).Decide(req)
	}
	return c.policy.Decide(req)
}
