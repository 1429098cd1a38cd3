package review

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/jobplane/jobplane/internal/catalog"
	"github.com/jobplane/jobplane/internal/policy"
)

// AnyPrincipal stands for "any authenticated user" among the principals Diff
// compares: what a rule with users ["*"] lets in, beyond the names written
// in the repository.
const AnyPrincipal = catalog.AnyUser

// Impact is what a change of definitions does to who may run what. Only
// jobs with a change are listed; the JSON form is what `jobplane diff
// --json` prints and is meant to stay stable.
type Impact struct {
	// ReferenceTime is the `now` of the neutral requests. Conditions on
	// time (`hours`, `when` over now) are not evaluated but reported, so it
	// matters only to say what was asked.
	ReferenceTime time.Time `json:"reference_time"`
	Channels      []string  `json:"channels"`
	Principals    []string  `json:"principals"`
	// JobsCompared counts the jobs of either side.
	JobsCompared int         `json:"jobs_compared"`
	Jobs         []JobImpact `json:"jobs"`
}

// JobImpact is the change to one job.
type JobImpact struct {
	Job string `json:"job"`
	// Status is "added" or "removed" when the job exists on one side only.
	Status string `json:"status,omitempty"`
	// Leases are the job's lease key templates on each side, when they
	// differ.
	Leases *Change `json:"leases,omitempty"`
	// Hours are the time windows of the rules that name the job, on each
	// side, when they differ.
	Hours *Change `json:"hours,omitempty"`
	// Retention is the job's retention periods on each side ("logs 30d",
	// "artifacts 7d"; none: the server's default), when they differ.
	Retention *Change `json:"retention,omitempty"`
	// Execution is where and with what the job runs on each side ("image
	// busybox:1.36", "cpu 500m", "memory 256Mi", "network none", "workdir
	// src", "isolation required"; defaults are not listed), when they
	// differ.
	Execution *Change         `json:"execution,omitempty"`
	Channels  []ChannelImpact `json:"channels,omitempty"`
}

// Change is a list of values before and after.
type Change struct {
	Before []string `json:"before"`
	After  []string `json:"after"`
}

// ChannelImpact is the change to one job in one channel.
type ChannelImpact struct {
	Channel string  `json:"channel"`
	Entries []Entry `json:"entries"`
}

// Entry changes.
const (
	Gained  = "gained"
	Lost    = "lost"
	Changed = "changed"
)

// Entry is the change of one principal's right to run a job in a channel.
type Entry struct {
	Principal string `json:"principal"`
	Change    string `json:"change"` // gained | lost | changed
	// What lists what changed of a right kept: approval, grants,
	// conditions.
	What []string `json:"what,omitempty"`
	// Conditional is true when a side depends on a `when` or `hours`,
	// which no single request can decide for every input: the entry then
	// shows the conditions of each side instead of a verdict.
	Conditional bool   `json:"conditional"`
	Before      Access `json:"before"`
	After       Access `json:"after"`
}

// Access is one side's answer for a principal, job and channel.
type Access struct {
	// Allowed is true when some allow rule lets the principal in, its
	// conditions (if any) holding, and no unconditional deny rule applies.
	Allowed bool `json:"allowed"`
	// Rule is the deciding rule: the allow rule used, or the deny rule.
	Rule string `json:"rule,omitempty"`
	// Via is how the principal is named by the allow rule: "group X",
	// "users" or "users \"*\"".
	Via      string            `json:"via,omitempty"`
	Approval *catalog.Approval `json:"approval,omitempty"`
	Grants   map[string]string `json:"grants,omitempty"`
	// Conditions are the `when` and `hours` of the allow rule used.
	Conditions []string `json:"conditions,omitempty"`
	// DeniedIf are the conditions of deny rules that apply to this
	// principal, job and channel but only under a condition.
	DeniedIf []string `json:"denied_if,omitempty"`
	// Otherwise is the answer when no condition holds (only rules without
	// `when` or `hours` count), given when Conditions is not empty: a
	// conditional rule may only change the terms of a right the
	// principal has anyway.
	Otherwise *Access `json:"otherwise,omitempty"`
}

// side is one commit's catalog, with its rules recompiled for Diff.
type side struct {
	cat *catalog.Catalog
	// pol has every allow rule's conditions removed and every conditional
	// deny rule left out: it answers "who is let in when the conditions
	// hold", with the real selection of the policy engine (fewest
	// approvals, most grants, first).
	pol *policy.Policy
	// plain has only the rules without conditions: the answer when no
	// condition holds.
	plain *policy.Policy
	// conds are the removed conditions of each allow rule, by id.
	conds map[string][]string
	// condDeny are the conditional deny rules left out of pol.
	condDeny []*catalog.Rule
	rules    map[string]*catalog.Rule
}

func newSide(cat *catalog.Catalog) (*side, error) {
	s := &side{cat: cat, conds: map[string][]string{}, rules: map[string]*catalog.Rule{}}
	var rules, plain []policy.Rule
	for _, r := range cat.Rules() {
		s.rules[r.ID] = r
		c := conditions(r)
		if len(c) == 0 {
			plain = append(plain, *r)
		}
		if r.Effect == catalog.EffectDeny && len(c) > 0 {
			s.condDeny = append(s.condDeny, r)
			continue
		}
		stripped := *r
		stripped.When, stripped.Hours = "", nil
		s.conds[r.ID] = c
		rules = append(rules, stripped)
	}
	var groups []policy.Group
	for _, g := range cat.Groups() {
		groups = append(groups, *g)
	}
	var probs map[int][]policy.Problem
	if s.pol, probs = policy.Compile(rules, groups); probs == nil {
		s.plain, probs = policy.Compile(plain, groups)
	}
	if probs != nil {
		// Cannot happen for a catalog that parsed: removing conditions
		// only removes things to check.
		return nil, fmt.Errorf("recompile rules: %v", probs)
	}
	return s, nil
}

// conditions are the parts of a rule a neutral request cannot decide.
func conditions(r *catalog.Rule) []string {
	var out []string
	if r.When != "" {
		out = append(out, "when `"+r.When+"`")
	}
	if r.Hours != nil {
		out = append(out, "within hours "+hoursLabel(r.Hours))
	}
	return out
}

func hoursLabel(h *catalog.Hours) string {
	days := "every day"
	if len(h.Days) > 0 {
		days = strings.ToLower(strings.Join(h.Days, ","))
	}
	return fmt.Sprintf("%s %s-%s %s", days, h.From, h.To, h.TZ)
}

// access answers for one principal. The request is neutral: the job's
// parameter defaults, the protected main branch, ReferenceTime. Since every
// condition is taken out of the decision, those values only make the
// request well-formed.
func (s *side) access(job, channel, principal string) Access {
	j, ok := s.cat.Job(job)
	if !ok {
		return Access{}
	}
	kind := "user"
	if principal == "scheduler" || principal == "github" {
		kind = "service"
	}
	req := catalog.Request{Job: job, Channel: channel, Actor: principal, ActorKind: kind,
		Params: defaults(j), Ref: catalog.ReferenceRef, Now: catalog.ReferenceTime}
	a := s.decide(s.pol, req)
	if !a.Allowed {
		return a
	}
	a.Conditions = s.conds[a.Rule]
	if len(a.Conditions) > 0 {
		o := s.decide(s.plain, req)
		a.Otherwise = &o
	}
	for _, dr := range s.condDeny {
		if namesJobAndChannel(dr, job, channel) && s.via(dr, principal) != "" {
			a.DeniedIf = append(a.DeniedIf, strings.Join(conditions(dr), " and "))
		}
	}
	slices.Sort(a.DeniedIf)
	a.DeniedIf = slices.Compact(a.DeniedIf)
	return a
}

func (s *side) decide(pol *policy.Policy, req catalog.Request) Access {
	d := pol.Decide(req)
	if !d.Allowed {
		return Access{Rule: d.Rule}
	}
	a := Access{Allowed: true, Rule: d.Rule, Via: s.via(s.rules[d.Rule], req.Actor), Grants: d.Grants}
	if d.NeedsApproval != nil && d.NeedsApproval.Count > 0 {
		a.Approval = d.NeedsApproval
	}
	return a
}

// via says how a rule names the principal; empty when it does not.
func (s *side) via(r *catalog.Rule, principal string) string {
	if r == nil {
		return ""
	}
	mine := s.cat.GroupsOf(principal)
	for _, g := range r.Groups {
		if slices.Contains(mine, g) {
			return "group " + g
		}
	}
	switch {
	case principal != AnyPrincipal && slices.Contains(r.Users, principal):
		return "users"
	case slices.Contains(r.Users, catalog.AnyUser):
		return `users "*"`
	}
	return ""
}

// defaults are the top-level defaults of the job's params schema.
func defaults(j *catalog.Job) map[string]any {
	out := map[string]any{}
	var schema struct {
		Properties map[string]struct {
			Default any `json:"default"`
		} `json:"properties"`
	}
	if j.Params != nil && json.Unmarshal(j.Params, &schema) == nil {
		for k, p := range schema.Properties {
			if p.Default != nil {
				out[k] = p.Default
			}
		}
	}
	return out
}

// Diff compares what two catalogs let each principal do. channels are
// compared in addition to every channel a rule of either side names;
// principals are every member of a group and every user named by a rule on
// either side, plus AnyPrincipal. Both catalogs must be non-nil.
func Diff(before, after *catalog.Catalog, channels []string) (Impact, error) {
	b, err := newSide(before)
	if err != nil {
		return Impact{}, err
	}
	a, err := newSide(after)
	if err != nil {
		return Impact{}, err
	}
	imp := Impact{ReferenceTime: catalog.ReferenceTime, Jobs: []JobImpact{}}
	chans := map[string]bool{}
	for _, c := range channels {
		chans[c] = true
	}
	principals := map[string]bool{AnyPrincipal: true}
	jobs := map[string]bool{}
	for _, cat := range []*catalog.Catalog{before, after} {
		for _, r := range cat.Rules() {
			for _, c := range r.Channels {
				chans[c] = true
			}
			for _, u := range r.Users {
				principals[u] = true
			}
		}
		for _, g := range cat.Groups() {
			for _, m := range g.Members {
				principals[m] = true
			}
		}
		for _, j := range cat.Jobs() {
			jobs[j.Name] = true
		}
	}
	imp.Channels = slices.Sorted(maps.Keys(chans))
	imp.Principals = slices.Sorted(maps.Keys(principals))
	imp.JobsCompared = len(jobs)
	for _, job := range slices.Sorted(maps.Keys(jobs)) {
		ji := JobImpact{Job: job}
		jb, inBefore := before.Job(job)
		ja, inAfter := after.Job(job)
		switch {
		case !inBefore:
			ji.Status = "added"
		case !inAfter:
			ji.Status = "removed"
		}
		if inBefore && inAfter {
			if lb, la := leaseKeys(jb), leaseKeys(ja); !slices.Equal(lb, la) {
				ji.Leases = &Change{Before: lb, After: la}
			}
			if hb, ha := windows(before, job), windows(after, job); !sameLabels(hb, ha) {
				ji.Hours = &Change{Before: hb, After: ha}
			}
			if rb, ra := retention(jb), retention(ja); !slices.Equal(rb, ra) {
				ji.Retention = &Change{Before: rb, After: ra}
			}
			if eb, ea := execution(jb), execution(ja); !slices.Equal(eb, ea) {
				ji.Execution = &Change{Before: eb, After: ea}
			}
		}
		for _, ch := range imp.Channels {
			ci := ChannelImpact{Channel: ch}
			for _, p := range imp.Principals {
				e, changed := compare(b.access(job, ch, p), a.access(job, ch, p))
				if changed {
					e.Principal = p
					ci.Entries = append(ci.Entries, e)
				}
			}
			if len(ci.Entries) > 0 {
				ji.Channels = append(ji.Channels, ci)
			}
		}
		if ji.Status != "" || ji.Leases != nil || ji.Hours != nil || ji.Retention != nil || ji.Execution != nil || len(ji.Channels) > 0 {
			imp.Jobs = append(imp.Jobs, ji)
		}
	}
	return imp, nil
}

func compare(b, a Access) (Entry, bool) {
	e := Entry{Before: b, After: a}
	switch {
	case !b.Allowed && !a.Allowed:
		return e, false
	case !b.Allowed:
		e.Change = Gained
	case !a.Allowed:
		e.Change = Lost
	default:
		if approvalText(b.Approval) != approvalText(a.Approval) {
			e.What = append(e.What, "approval")
		}
		if !maps.Equal(b.Grants, a.Grants) {
			e.What = append(e.What, "grants")
		}
		if !slices.Equal(b.Conditions, a.Conditions) || !slices.Equal(b.DeniedIf, a.DeniedIf) || !sameRight(b.Otherwise, a.Otherwise) {
			e.What = append(e.What, "conditions")
		}
		if len(e.What) == 0 {
			return e, false
		}
		e.Change = Changed
	}
	e.Conditional = len(b.Conditions)+len(b.DeniedIf)+len(a.Conditions)+len(a.DeniedIf) > 0
	return e, true
}

// sameRight compares the fallbacks of two conditional answers.
func sameRight(b, a *Access) bool {
	switch {
	case b == nil || a == nil:
		return b == a
	case !b.Allowed || !a.Allowed:
		return b.Allowed == a.Allowed
	}
	return approvalText(b.Approval) == approvalText(a.Approval) && maps.Equal(b.Grants, a.Grants)
}

// leaseKeys renders a job's leases, sorted: their order does not matter.
func leaseKeys(j *catalog.Job) []string {
	out := []string{}
	for _, l := range j.Leases {
		var opts []string
		if l.OnConflict != "" && l.OnConflict != "queue" {
			opts = append(opts, "on_conflict "+l.OnConflict)
		}
		if l.Limit > 1 {
			opts = append(opts, fmt.Sprintf("limit %d", l.Limit))
		}
		if l.Once {
			opts = append(opts, "once")
		}
		s := l.Key
		if len(opts) > 0 {
			s += " (" + strings.Join(opts, ", ") + ")"
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// execution lists where and with what a job runs; what is left to the
// default is not listed.
func execution(j *catalog.Job) []string {
	out := []string{}
	if j.Run.Image != "" {
		out = append(out, "image "+j.Run.Image)
	}
	if r := j.Run.Resources; r != nil {
		if r.CPUMillis > 0 {
			out = append(out, "cpu "+catalog.FormatCPU(r.CPUMillis))
		}
		if r.MemoryBytes > 0 {
			out = append(out, "memory "+catalog.FormatMemory(r.MemoryBytes))
		}
	}
	if j.Run.Network != "" && j.Run.Network != catalog.NetworkDefault {
		out = append(out, "network "+j.Run.Network)
	}
	if j.Run.Workdir != "" {
		out = append(out, "workdir "+j.Run.Workdir)
	}
	if j.Isolation == catalog.IsolationRequired {
		out = append(out, "isolation "+j.Isolation)
	}
	return out
}

// retention lists a job's retention periods ("logs 30d"); a period the
// job leaves to the server's default is not listed.
func retention(j *catalog.Job) []string {
	out := []string{}
	if r := j.Retention; r != nil {
		if r.Logs > 0 {
			out = append(out, "logs "+catalog.FormatRetention(r.Logs))
		}
		if r.Artifacts > 0 {
			out = append(out, "artifacts "+catalog.FormatRetention(r.Artifacts))
		}
	}
	return out
}

// windows are the hours of every rule naming the job, "label (rule id)",
// sorted by label.
func windows(cat *catalog.Catalog, job string) []string {
	out := []string{}
	for _, r := range cat.Rules() {
		if r.Hours == nil || !namesJob(r, job) {
			continue
		}
		out = append(out, hoursLabel(r.Hours)+" (rule "+r.ID+")")
	}
	slices.Sort(out)
	return out
}

func namesJob(r *catalog.Rule, job string) bool {
	return slices.ContainsFunc(r.Jobs, func(pat string) bool {
		ok, err := path.Match(pat, job)
		return pat == job || (err == nil && ok)
	})
}

// sameLabels compares windows without their rule ids, so moving or renaming
// a rule is no change.
func sameLabels(a, b []string) bool {
	strip := func(xs []string) []string {
		out := make([]string, len(xs))
		for i, x := range xs {
			out[i], _, _ = strings.Cut(x, " (rule ")
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(strip(a), strip(b))
}

func approvalText(a *catalog.Approval) string {
	if a == nil || a.Count == 0 {
		return "none"
	}
	return fmt.Sprintf("%d of [%s]", a.Count, strings.Join(a.Groups, ", "))
}

func principalText(p string) string {
	if p == AnyPrincipal {
		return "any authenticated user (*)"
	}
	return p
}

// WriteText prints the impact for people, grouped by job then channel.
func (imp Impact) WriteText(w io.Writer) {
	if len(imp.Jobs) == 0 {
		fmt.Fprintf(w, "no change: %s in channels [%s], for %s\n", plural(imp.JobsCompared, "job"), strings.Join(imp.Channels, ", "), plural(len(imp.Principals), "principal"))
		return
	}
	for _, j := range imp.Jobs {
		if j.Status != "" || j.Leases != nil || j.Hours != nil || j.Retention != nil || j.Execution != nil {
			fmt.Fprintf(w, "job %s:\n", j.Job)
			if j.Status != "" {
				fmt.Fprintf(w, "  %s\n", map[string]string{"added": "+ new job", "removed": "- job removed"}[j.Status])
			}
			if j.Leases != nil {
				writeListChange(w, "lease keys", j.Leases)
			}
			if j.Hours != nil {
				writeListChange(w, "hours", j.Hours)
			}
			if j.Retention != nil {
				writeListChange(w, "retention", j.Retention)
			}
			if j.Execution != nil {
				writeListChange(w, "execution", j.Execution)
			}
		}
		for _, c := range j.Channels {
			fmt.Fprintf(w, "job %s, channel %s:\n", j.Job, c.Channel)
			for _, e := range c.Entries {
				writeEntry(w, e)
			}
		}
	}
}

func writeListChange(w io.Writer, what string, c *Change) {
	fmt.Fprintf(w, "  ~ %s:\n", what)
	for _, x := range c.Before {
		if !slices.Contains(c.After, x) {
			fmt.Fprintf(w, "      - %s\n", x)
		}
	}
	for _, x := range c.After {
		if !slices.Contains(c.Before, x) {
			fmt.Fprintf(w, "      + %s\n", x)
		}
	}
}

func writeEntry(w io.Writer, e Entry) {
	who := principalText(e.Principal)
	switch e.Change {
	case Gained:
		via := ""
		if e.After.Via != "" {
			via = " (" + e.After.Via + ")"
		}
		fmt.Fprintf(w, "  + %s%s may now run it%s\n", who, via, terms(e.After))
	case Lost:
		why := ""
		if e.After.Rule != "" {
			why = " (denied by rule " + e.After.Rule + ")"
		}
		fmt.Fprintf(w, "  - %s may no longer run it%s\n", who, why)
	default:
		for _, what := range e.What {
			switch what {
			case "approval":
				fmt.Fprintf(w, "  ~ %s: approval %s → %s\n", who, approvalText(e.Before.Approval), approvalText(e.After.Approval))
			case "grants":
				fmt.Fprintf(w, "  ~ %s: grants %s\n", who, grantsChange(e.Before.Grants, e.After.Grants))
			case "conditions":
				fmt.Fprintf(w, "  ~ %s: conditions changed\n", who)
			}
		}
	}
	if e.Conditional {
		fmt.Fprintf(w, "      conditional; before: %s\n", sideText(e.Before))
		fmt.Fprintf(w, "                   after:  %s\n", sideText(e.After))
	}
}

// terms are the approval and grants a right comes with.
func terms(a Access) string {
	var s string
	if a.Approval != nil {
		s += ", once approved by " + approvalText(a.Approval)
	}
	if len(a.Grants) > 0 {
		s += ", granting " + grantsText(a.Grants)
	}
	return s
}

func sideText(a Access) string {
	if !a.Allowed {
		return "may not run it"
	}
	s := "may run it" + terms(a)
	if len(a.Conditions) > 0 {
		if terms(a) != "" {
			s += ","
		}
		s += " " + strings.Join(a.Conditions, " and ")
		if o := a.Otherwise; o != nil && o.Allowed {
			s += "; otherwise may run it" + terms(*o)
		} else {
			s += "; otherwise may not"
		}
	}
	if len(a.DeniedIf) > 0 {
		s += "; but denied " + strings.Join(a.DeniedIf, " or ")
	}
	return s
}

func grantsChange(b, a map[string]string) string {
	keys := map[string]bool{}
	for k := range b {
		keys[k] = true
	}
	for k := range a {
		keys[k] = true
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if b[k] == a[k] {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s → %s", k, orNone(b[k]), orNone(a[k])))
	}
	return strings.Join(parts, ", ")
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
