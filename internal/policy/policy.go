package policy

import (
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
	"unsafe"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
)

// MaxApprovals is the largest approval count a rule may require.
const MaxApprovals = 100

var connectorRe = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// Problem is one reason a rule does not compile. Field is relative to the
// rule ("when", "hours.tz", "approval.count", "grants.warehouse"). For "when",
// Line and Column are the 1-based position inside the expression when CEL
// reports one, else 0.
type Problem struct {
	Field   string
	Line    int
	Column  int
	Message string
}

func (p Problem) Error() string {
	if p.Line > 0 {
		return fmt.Sprintf("%s:%d:%d: %s", p.Field, p.Line, p.Column, p.Message)
	}
	return p.Field + ": " + p.Message
}

// CompiledRule is a rule ready to be decided on: its condition planned, its
// window parsed. It is immutable and safe for concurrent use.
type CompiledRule struct {
	rule     Rule
	prg      cel.Program // nil without when
	hours    *window     // nil without hours
	anyJob   bool
	jobGlobs []string // the patterns among Jobs; the others are names
	anyUser  bool
	jobsList string // "[a, b]", precomputed for traces
	chanList string
	// noJobReason and noChanReason are the precomputed reasons of the two
	// most common misses.
	noJobReason, noChanReason string
	grpList                   string
	usrList                   string
	writes                    int // number of write grants, for the choice among allows
}

// Rule returns the rule as written.
func (c *CompiledRule) Rule() Rule { return c.rule }

// CompileRule validates the parts of a rule that the policy engine owns
// (effect, jobs globs, when, hours, approval, grants) and compiles it. It does
// not check that named groups exist: that needs the whole catalog, see New's
// caller. Every problem found is returned, not only the first.
func CompileRule(r Rule) (*CompiledRule, []Problem) {
	c := &CompiledRule{rule: r}
	var probs []Problem
	if r.Effect != EffectAllow && r.Effect != EffectDeny {
		probs = append(probs, Problem{Field: "effect", Message: fmt.Sprintf("must be allow or deny, got %q", r.Effect)})
	}
	if len(r.Jobs) == 0 {
		probs = append(probs, Problem{Field: "jobs", Message: "is required (use [\"*\"] for every job)"})
	}
	for i, j := range r.Jobs {
		if _, err := path.Match(j, ""); err != nil || j == "" {
			probs = append(probs, Problem{Field: fmt.Sprintf("jobs[%d]", i), Message: fmt.Sprintf("invalid job name or glob %q", j)})
		}
		c.anyJob = c.anyJob || j == "*"
		if strings.ContainsAny(j, `*?[\`) {
			c.jobGlobs = append(c.jobGlobs, j)
		}
	}
	if len(r.Groups) == 0 && len(r.Users) == 0 {
		probs = append(probs, Problem{Field: "", Message: "must name groups or users"})
	}
	c.anyUser = slices.Contains(r.Users, AnyUser)
	if r.When != "" {
		var ps []Problem
		c.prg, ps = compileWhen(r.When)
		probs = append(probs, ps...)
	}
	if r.Hours != nil {
		var ps []Problem
		c.hours, ps = compileHours(r.Hours)
		probs = append(probs, ps...)
	}
	if a := r.Approval; a != nil {
		if r.Effect == EffectDeny {
			probs = append(probs, Problem{Field: "approval", Message: "a deny rule cannot require approval"})
		}
		if a.Count < 1 || a.Count > MaxApprovals {
			probs = append(probs, Problem{Field: "approval.count", Message: fmt.Sprintf("must be from 1 to %d, got %d", MaxApprovals, a.Count)})
		}
		if len(a.Groups) == 0 {
			probs = append(probs, Problem{Field: "approval.groups", Message: "is required: the groups whose members may approve"})
		}
	}
	switch r.Forks {
	case "", ForksSafe:
	case ForksFull:
		if r.Effect == EffectDeny {
			probs = append(probs, Problem{Field: "forks", Message: "a deny rule cannot lift safe mode"})
		}
	default:
		probs = append(probs, Problem{Field: "forks", Message: fmt.Sprintf("must be safe or full, got %q", r.Forks)})
	}
	if len(r.Grants) > 0 && r.Effect == EffectDeny {
		probs = append(probs, Problem{Field: "grants", Message: "a deny rule cannot grant"})
	}
	for _, name := range slices.Sorted(maps.Keys(r.Grants)) {
		if !connectorRe.MatchString(name) {
			probs = append(probs, Problem{Field: "grants." + name, Message: fmt.Sprintf("connector names must match %s", connectorRe)})
		}
		switch r.Grants[name] {
		case GrantWrite:
			c.writes++
		case GrantRead:
		default:
			probs = append(probs, Problem{Field: "grants." + name, Message: fmt.Sprintf("must be read or write, got %q", r.Grants[name])})
		}
	}
	if len(probs) > 0 {
		return nil, probs
	}
	c.jobsList, c.chanList = list(r.Jobs), list(r.Channels)
	// Most rules of a large policy do not name the requested job: their
	// reason is fixed per rule, so a decision allocates nothing for them.
	c.noJobReason = "job not in " + c.jobsList
	c.noChanReason = "channel not in " + c.chanList
	c.grpList, c.usrList = list(r.Groups), list(r.Users)
	return c, nil
}

// Policy is the compiled rules and groups of one catalog. A nil *Policy is
// valid and denies everything.
type Policy struct {
	rules    []*CompiledRule
	memberOf map[string][]string // actor → sorted group names
	adapter  types.Adapter
	groups   ref.Val // the CEL `groups` variable, built once per catalog
}

// New assembles compiled rules, in priority order (file path, then position:
// the last tie-break among allow rules), and the catalog's groups. Group
// references are the caller's to have checked.
func New(rules []*CompiledRule, groups []Group) *Policy {
	p := &Policy{rules: slices.Clone(rules), memberOf: map[string][]string{}}
	for _, g := range groups {
		for _, m := range g.Members {
			p.memberOf[m] = append(p.memberOf[m], g.Name)
		}
	}
	for actor, gs := range p.memberOf {
		slices.Sort(gs)
		// A member listed twice would otherwise repeat in actor.groups.
		p.memberOf[actor] = slices.Compact(gs)
	}
	if env, err := environment(); err == nil {
		p.adapter = env.CELTypeAdapter()
		p.groups = groupsValue(p.adapter, groups)
	}
	return p
}

// Compile is CompileRule for every rule followed by New; problems are keyed by
// rule index. It suits callers that have no source positions to map.
func Compile(rules []Rule, groups []Group) (*Policy, map[int][]Problem) {
	var compiled []*CompiledRule
	var probs map[int][]Problem
	for i, r := range rules {
		c, ps := CompileRule(r)
		if len(ps) > 0 {
			if probs == nil {
				probs = map[int][]Problem{}
			}
			probs[i] = ps
			continue
		}
		compiled = append(compiled, c)
	}
	if probs != nil {
		return nil, probs
	}
	return New(compiled, groups), nil
}

// Rules returns the compiled rules in priority order.
func (p *Policy) Rules() []*CompiledRule {
	if p == nil {
		return nil
	}
	return slices.Clone(p.rules)
}

// outcome of one rule for one request.
type outcome uint8

const (
	noJob outcome = iota
	noChannel
	noActor
	whenFalse
	whenError
	outsideHours
	matched
)

// Decide authorizes a request. Default deny; a request is denied if any deny
// rule matches; otherwise it is allowed if an allow rule matches. A rule
// matches when the job is in its jobs (name or path.Match glob), the channel
// in its channels (none listed: all), the actor in one of its groups or its
// users ("*": any non-empty actor), its `when` is true and Now is inside its
// hours. Among matching allow rules the one requiring the fewest approvals
// wins, then the one granting the most (more write grants, then more grants),
// then the first in priority order. Every rule is traced.
func (p *Policy) Decide(req Request) Decision {
	if p == nil || len(p.rules) == 0 {
		return Decision{Rules: []RuleTrace{}, Explanation: emptyExplanation(p == nil, req)}
	}
	actorGroups := p.memberOf[req.Actor]
	// Rules that do not name the job are not considered: they are counted,
	// not traced, so that a large policy costs a decision little.
	trace := make([]RuleTrace, 0, 16)
	unrelated := 0
	closestReason := ""
	// Every reason is appended to one buffer and viewed as a string in
	// place: one allocation for all the reasons instead of one per rule.
	// This is safe because bytes already appended are never written again:
	// when append grows buf, the old array is left as it was, still
	// referenced by the earlier reasons.
	buf := make([]byte, 0, 512)
	var act *activation
	firstDeny, chosen, closest := -1, -1, -1
	start := 0
	for i, c := range p.rules {
		r := &c.rule
		var o outcome
		var err error
		o, buf = c.match(&req, actorGroups, buf)
		if o == matched && c.prg != nil {
			if act == nil {
				act = newActivation(p.adapter, p.groups, &req, actorGroups)
			}
			var ok bool
			ok, err = evalWhen(c.prg, act)
			switch {
			case err != nil:
				o = whenError
			case !ok:
				o = whenFalse
			}
		}
		if o == matched && c.hours != nil && !c.hours.contains(req.Now) {
			o = outsideHours
		}
		var reasonStr string
		switch o {
		case noJob:
			reasonStr = c.noJobReason
		case noChannel:
			reasonStr = c.noChanReason
		default:
			buf = c.explain(buf, o, err, &req)
			reason := buf[start:]
			start = len(buf)
			reasonStr = unsafe.String(unsafe.SliceData(reason), len(reason))
		}
		// A deny rule whose condition cannot be evaluated denies: an error
		// must never be what lets a request through (fail closed).
		denyOnError := o == whenError && r.Effect == EffectDeny
		if denyOnError {
			o = matched
		}
		if o == noJob {
			unrelated++
		} else {
			trace = append(trace, RuleTrace{ID: r.ID, File: r.File, Line: r.Line, Effect: r.Effect, Matched: o == matched,
				Reason: reasonStr})
		}
		switch {
		case o != matched:
			if o >= whenFalse && r.Effect == EffectAllow && closest < 0 {
				closest = i
				closestReason = reasonStr
			}
		case r.Effect == EffectDeny:
			if firstDeny < 0 {
				firstDeny = i
			}
		case chosen < 0 || p.rules[chosen].better(c):
			chosen = i
		}
	}
	dec := Decision{Rules: trace, Unrelated: unrelated}
	what := describe(req)
	switch {
	case firstDeny >= 0:
		r := &p.rules[firstDeny].rule
		dec.Rule = r.ID
		dec.Explanation = fmt.Sprintf("denied: rule %s (%s:%d) forbids %s", r.ID, r.File, r.Line, what)
	case chosen >= 0:
		c := p.rules[chosen]
		r := &c.rule
		dec.Allowed, dec.Rule = true, r.ID
		var extra string
		if a := r.Approval; a != nil {
			dec.NeedsApproval = &Approval{Count: a.Count, Groups: slices.Clone(a.Groups)}
			extra = fmt.Sprintf(", once approved by %d of %s", a.Count, list(a.Groups))
		}
		if len(r.Grants) > 0 {
			dec.Grants = maps.Clone(r.Grants)
			extra += ", granting " + grantsText(r.Grants)
		}
		if r.Forks == ForksFull {
			dec.ForksFull = true
			extra += ", forks: full"
		}
		dec.Explanation = fmt.Sprintf("allowed: rule %s (%s:%d) allows %s%s", r.ID, r.File, r.Line, what, extra)
	case closest >= 0:
		r := &p.rules[closest].rule
		dec.Explanation = fmt.Sprintf("denied: no rule allows %s (rule %s (%s:%d): %s)", what, r.ID, r.File, r.Line, closestReason)
	default:
		dec.Explanation = fmt.Sprintf("denied: no rule allows %s", what)
	}
	return dec
}

// better reports whether c should be chosen over b, an earlier matching allow
// rule: fewer approvals, then more write grants, then more grants. Equal
// rules keep the earlier one.
func (b *CompiledRule) better(c *CompiledRule) bool {
	if ab, ac := b.approvals(), c.approvals(); ab != ac {
		return ac < ab
	}
	if b.writes != c.writes {
		return c.writes > b.writes
	}
	return len(c.rule.Grants) > len(b.rule.Grants)
}

func (c *CompiledRule) approvals() int {
	if c.rule.Approval == nil {
		return 0
	}
	return c.rule.Approval.Count
}

// match does the cheap checks: job, channel, actor. On success it has
// appended the matching reason for the actor to buf.
func (c *CompiledRule) match(req *Request, actorGroups []string, buf []byte) (outcome, []byte) {
	r := &c.rule
	// Plain names are compared first: path.Match costs far more than an
	// equality and most rules name their jobs.
	if !c.anyJob && !slices.Contains(r.Jobs, req.Job) && !slices.ContainsFunc(c.jobGlobs, func(pat string) bool { return globMatch(pat, req.Job) }) {
		return noJob, buf
	}
	if len(r.Channels) > 0 && !slices.Contains(r.Channels, req.Channel) {
		return noChannel, buf
	}
	if req.Actor != "" {
		for _, g := range r.Groups {
			if slices.Contains(actorGroups, g) {
				buf = append(buf, "actor "...)
				buf = append(buf, req.Actor...)
				buf = append(buf, " is in group "...)
				return matched, append(buf, g...)
			}
		}
		if slices.Contains(r.Users, req.Actor) {
			buf = append(buf, "actor "...)
			buf = append(buf, req.Actor...)
			return matched, append(buf, " is listed in users"...)
		}
		if c.anyUser {
			return matched, append(buf, `users "*" matches any authenticated actor`...)
		}
	}
	return noActor, buf
}

// explain appends the reason for outcome o. For a match or a failure after
// the actor check, the actor part is already in buf.
func (c *CompiledRule) explain(buf []byte, o outcome, err error, req *Request) []byte {
	r := &c.rule
	switch o {
	case noActor:
		buf = append(buf, "actor "...)
		buf = append(buf, actorName(req.Actor)...)
		buf = append(buf, " is not in groups "...)
		buf = append(buf, c.grpList...)
		buf = append(buf, " or users "...)
		return append(buf, c.usrList...)
	case whenFalse:
		buf = append(buf, "; when `"...)
		buf = append(buf, r.When...)
		return append(buf, "` is false"...)
	case whenError:
		buf = append(buf, "; when `"...)
		buf = append(buf, r.When...)
		if r.Effect == EffectDeny {
			buf = append(buf, "` error (a deny rule that cannot be evaluated denies): "...)
		} else {
			buf = append(buf, "` error (counts as false): "...)
		}
		return append(buf, err.Error()...)
	}
	if c.prg != nil {
		buf = append(buf, "; when `"...)
		buf = append(buf, r.When...)
		buf = append(buf, "` is true"...)
	}
	if c.hours == nil {
		return buf
	}
	if o == outsideHours {
		buf = append(buf, "; outside hours "...)
	} else {
		buf = append(buf, "; inside hours "...)
	}
	buf = append(buf, c.hours.label...)
	buf = append(buf, " (local time "...)
	buf = req.Now.In(c.hours.loc).AppendFormat(buf, "Mon 2006-01-02 15:04")
	return append(buf, ')')
}

func describe(req Request) string {
	return actorName(req.Actor) + " to run job " + req.Job + " in channel " + req.Channel
}

func emptyExplanation(isNil bool, req Request) string {
	if isNil {
		return "no valid definitions: every request is denied"
	}
	return "denied: no rule allows " + describe(req) + " (the catalog has no rules)"
}

func actorName(a string) string {
	if a == "" {
		return "an unauthenticated request"
	}
	return a
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

func grantsText(g map[string]string) string {
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(g)) {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(k + "=" + g[k])
	}
	return b.String()
}
