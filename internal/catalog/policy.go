package catalog

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/goccy/go-yaml/ast"
)

// Rule effects.
const (
	EffectAllow = "allow"
	EffectDeny  = "deny"
)

// AnyUser in a rule's users matches every authenticated principal.
const AnyUser = "*"

var ruleIDRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// Rule is one authorization rule of a policy file.
type Rule struct {
	ID       string   `json:"id"`
	File     string   `json:"file"`
	Line     int      `json:"line"`
	Effect   string   `json:"effect"`
	Jobs     []string `json:"jobs"`
	Channels []string `json:"channels,omitempty"` // empty: every channel
	Groups   []string `json:"groups,omitempty"`
	Users    []string `json:"users,omitempty"`

	// The fields below are parsed so that files written for later versions
	// report a precise error, but a catalog whose rules use them does not
	// validate in this version: see the package documentation.
	When     string            `json:"when,omitempty"`
	Hours    *Hours            `json:"hours,omitempty"`
	Approval *Approval         `json:"approval,omitempty"`
	Grants   map[string]string `json:"grants,omitempty"`
}

// Hours restricts a rule to a weekly time window.
type Hours struct {
	TZ   string   `json:"tz"`
	From string   `json:"from"`
	To   string   `json:"to"`
	Days []string `json:"days,omitempty"`
}

// Approval is the approvals a rule requires before the run starts.
type Approval struct {
	Count  int      `json:"count"`
	Groups []string `json:"groups"`
}

func (p *parse) parseGroups(d *decoder, body ast.Node) {
	d.object(body, "", 0, map[string]func(ast.Node, string){
		"groups": func(v ast.Node, f string) {
			es, _ := d.entries(v, f, 1)
			for _, e := range es {
				gf := join(f, e.key)
				if !ruleIDRe.MatchString(e.key) {
					d.add(e.keyNode, gf, "group names must match %s", ruleIDRe)
					continue
				}
				g := &Group{Name: e.key}
				if e.value != nil {
					d.object(e.value, gf, 2, map[string]func(ast.Node, string){
						"members": func(v ast.Node, f string) {
							g.Members = d.strList(v, f)
							for i, m := range g.Members {
								if m == AnyUser {
									d.add(v, index(f, i), "%q is not a member name", AnyUser)
								}
							}
						},
						"attributes": func(v ast.Node, f string) {
							x, ok := d.value(v, f, 2)
							if !ok {
								return
							}
							m, isMap := x.(map[string]any)
							if !isMap {
								d.add(v, f, "must be a mapping")
								return
							}
							g.Attributes = m
						},
					})
				}
				p.cat.groups[e.key] = g
			}
		},
	})
}

func (p *parse) parsePolicy(d *decoder, body ast.Node) {
	var ruleNodes []ast.Node
	present, ok := d.object(body, "", 0, map[string]func(ast.Node, string){
		"rules": func(v ast.Node, f string) { ruleNodes, _ = d.list(v, f) },
	})
	if !ok {
		return
	}
	if !present["rules"] {
		d.add(body, "rules", "is required")
	}
	if p.ruleIDs == nil {
		p.ruleIDs = map[string]*Rule{}
	}
	for i, n := range ruleNodes {
		p.parseRule(d, n, index("rules", i))
	}
}

func (p *parse) parseRule(d *decoder, n ast.Node, field string) {
	line, _ := position(d.resolve(n, field))
	r := &Rule{File: d.file, Line: line, Effect: EffectAllow}
	var idNode ast.Node
	unsupported := func(v ast.Node, f, what string) {
		d.add(v, f, "%s is not supported by this server version", what)
	}
	present, ok := d.object(n, field, 1, map[string]func(ast.Node, string){
		"id": func(v ast.Node, f string) {
			idNode = v
			if s, ok := d.str(v, f); ok {
				r.ID = s
				if !ruleIDRe.MatchString(s) {
					d.add(v, f, "must match %s", ruleIDRe)
				}
			}
		},
		"effect": func(v ast.Node, f string) {
			if s, ok := d.str(v, f); ok {
				if s != EffectAllow && s != EffectDeny {
					d.add(v, f, "must be allow or deny, got %q", s)
				}
				r.Effect = s
			}
		},
		"jobs": func(v ast.Node, f string) {
			items, _ := d.list(v, f)
			for i, item := range items {
				s, ok := d.str(item, index(f, i))
				if !ok {
					continue
				}
				if _, err := path.Match(s, ""); err != nil || s == "" {
					d.add(item, index(f, i), "invalid job name or glob %q", s)
					continue
				}
				r.Jobs = append(r.Jobs, s)
			}
		},
		"channels": func(v ast.Node, f string) { r.Channels = d.strList(v, f) },
		"groups": func(v ast.Node, f string) {
			items, _ := d.list(v, f)
			for i, item := range items {
				if s, ok := d.str(item, index(f, i)); ok {
					r.Groups = append(r.Groups, s)
					p.ref(d, s, item, index(f, i))
				}
			}
		},
		"users": func(v ast.Node, f string) { r.Users = d.strList(v, f) },
		"when": func(v ast.Node, f string) {
			r.When, _ = d.str(v, f)
			unsupported(v, f, "when (a CEL condition)")
		},
		"hours": func(v ast.Node, f string) {
			h := &Hours{}
			d.object(v, f, 2, map[string]func(ast.Node, string){
				"tz":   func(v ast.Node, f string) { h.TZ, _ = d.str(v, f) },
				"from": func(v ast.Node, f string) { h.From, _ = d.str(v, f) },
				"to":   func(v ast.Node, f string) { h.To, _ = d.str(v, f) },
				"days": func(v ast.Node, f string) { h.Days = d.strList(v, f) },
			})
			r.Hours = h
			unsupported(v, f, "hours")
		},
		"approval": func(v ast.Node, f string) {
			a := &Approval{}
			d.object(v, f, 2, map[string]func(ast.Node, string){
				"count": func(v ast.Node, f string) {
					c, _ := d.integer(v, f)
					a.Count = int(min(max(c, 0), 1000))
				},
				"groups": func(v ast.Node, f string) { a.Groups = d.strList(v, f) },
			})
			r.Approval = a
			unsupported(v, f, "approval")
		},
		"grants": func(v ast.Node, f string) {
			r.Grants = d.strMap(v, f, 2)
			unsupported(v, f, "grants")
		},
	})
	if !ok {
		return
	}
	if !present["id"] {
		d.add(n, join(field, "id"), "is required")
	} else if first, dup := p.ruleIDs[r.ID]; dup && r.ID != "" {
		d.add(idNode, join(field, "id"), "duplicate rule id %q (first defined at %s:%d)", r.ID, first.File, first.Line)
	} else {
		p.ruleIDs[r.ID] = r
	}
	if !present["jobs"] {
		d.add(n, join(field, "jobs"), "is required (use [\"*\"] for every job)")
	}
	if !present["groups"] && !present["users"] {
		d.add(n, field, "must name groups or users")
	}
	p.cat.rules = append(p.cat.rules, r)
}

// Request is what an authorization decision is about.
type Request struct {
	Job       string `json:"job"`
	Channel   string `json:"channel"`
	Actor     string `json:"actor"`
	ActorKind string `json:"actor_kind,omitempty"`
}

// Decision is the outcome of Decide, kept with the run so that anyone can see
// why it was allowed or refused.
type Decision struct {
	Allowed bool `json:"allowed"`
	// Rule is the id of the deciding rule: the first matching deny, or else
	// the first matching allow; empty when no rule matched.
	Rule        string      `json:"rule,omitempty"`
	Explanation string      `json:"explanation"`
	Rules       []RuleTrace `json:"rules"`
}

// RuleTrace records how one rule was evaluated.
type RuleTrace struct {
	ID      string `json:"id"`
	File    string `json:"file"`
	Line    int    `json:"line"`
	Effect  string `json:"effect"`
	Matched bool   `json:"matched"`
	Reason  string `json:"reason"`
}

// Decide authorizes a request: default deny, any matching deny rule refuses,
// otherwise a matching allow rule allows. A rule matches when the job is in its
// jobs (exact name or path.Match glob), the channel is in its channels (none
// listed: all), and the actor is a member of one of its groups or listed in its
// users ("*": any authenticated, i.e. non-empty, actor). Every rule is traced,
// in file then position order. A nil catalog denies.
func (c *Catalog) Decide(req Request) Decision {
	dec := Decision{Rules: []RuleTrace{}}
	if c == nil {
		dec.Explanation = "no valid definitions: every request is denied"
		return dec
	}
	actorGroups := c.memberOf[req.Actor]
	var firstAllow, firstDeny *Rule
	for _, r := range c.rules {
		matched, reason := r.match(req, actorGroups)
		dec.Rules = append(dec.Rules, RuleTrace{ID: r.ID, File: r.File, Line: r.Line, Effect: r.Effect, Matched: matched, Reason: reason})
		if !matched {
			continue
		}
		if r.Effect == EffectDeny && firstDeny == nil {
			firstDeny = r
		}
		if r.Effect == EffectAllow && firstAllow == nil {
			firstAllow = r
		}
	}
	what := fmt.Sprintf("%s to run job %s in channel %s", actorName(req.Actor), req.Job, req.Channel)
	switch {
	case firstDeny != nil:
		dec.Rule = firstDeny.ID
		dec.Explanation = fmt.Sprintf("denied: rule %s (%s:%d) forbids %s", firstDeny.ID, firstDeny.File, firstDeny.Line, what)
	case firstAllow != nil:
		dec.Allowed = true
		dec.Rule = firstAllow.ID
		dec.Explanation = fmt.Sprintf("allowed: rule %s (%s:%d) allows %s", firstAllow.ID, firstAllow.File, firstAllow.Line, what)
	default:
		dec.Explanation = fmt.Sprintf("denied: no rule allows %s", what)
	}
	return dec
}

func actorName(a string) string {
	if a == "" {
		return "an unauthenticated request"
	}
	return a
}

func (r *Rule) match(req Request, actorGroups []string) (bool, string) {
	if !slices.ContainsFunc(r.Jobs, func(pat string) bool { return globMatch(pat, req.Job) }) {
		return false, fmt.Sprintf("job %s not in %s", req.Job, list(r.Jobs))
	}
	if len(r.Channels) > 0 && !slices.Contains(r.Channels, req.Channel) {
		return false, fmt.Sprintf("channel %s not in %s", req.Channel, list(r.Channels))
	}
	if req.Actor != "" {
		for _, g := range r.Groups {
			if slices.Contains(actorGroups, g) {
				return true, fmt.Sprintf("actor %s is in group %s", req.Actor, g)
			}
		}
		if slices.Contains(r.Users, req.Actor) {
			return true, fmt.Sprintf("actor %s is listed in users", req.Actor)
		}
		if slices.Contains(r.Users, AnyUser) {
			return true, fmt.Sprintf("users %q matches any authenticated actor", AnyUser)
		}
	}
	return false, fmt.Sprintf("actor %s is not in groups %s or users %s", actorName(req.Actor), list(r.Groups), list(r.Users))
}

func globMatch(pattern, name string) bool {
	if pattern == name || pattern == "*" {
		return true
	}
	ok, err := path.Match(pattern, name)
	return err == nil && ok
}

func list(xs []string) string {
	return "[" + strings.Join(xs, ", ") + "]"
}
