package policy

import "time"

// Rule effects.
const (
	EffectAllow = "allow"
	EffectDeny  = "deny"
)

// AnyUser in a rule's users matches every authenticated principal, people and
// service principals alike.
const AnyUser = "*"

// Grant levels of a connector.
const (
	GrantRead  = "read"
	GrantWrite = "write"
)

// Rule is one authorization rule as written in a policy file. File and Line
// only label the rule in decisions; the order rules are given to New is what
// decides ties.
type Rule struct {
	ID       string   `json:"id"`
	File     string   `json:"file"`
	Line     int      `json:"line"`
	Effect   string   `json:"effect"`
	Jobs     []string `json:"jobs"`
	Channels []string `json:"channels,omitempty"` // empty: every channel
	Groups   []string `json:"groups,omitempty"`
	Users    []string `json:"users,omitempty"`

	When     string            `json:"when,omitempty"` // CEL, must evaluate to true
	Hours    *Hours            `json:"hours,omitempty"`
	Approval *Approval         `json:"approval,omitempty"`
	Grants   map[string]string `json:"grants,omitempty"` // connector → read | write
	// Forks is what a run this rule allows may do when it comes from an
	// untrusted source (a pull request from a fork): "" or "safe" keeps it
	// in safe mode, "full" lifts it (docs/github.md).
	Forks string `json:"forks,omitempty"`
}

// Fork modes of a rule.
const (
	ForksSafe = "safe"
	ForksFull = "full"
)

// Hours restricts a rule to a weekly time window in a time zone.
type Hours struct {
	TZ   string   `json:"tz"`
	From string   `json:"from"`           // HH:MM, inclusive
	To   string   `json:"to"`             // HH:MM, exclusive; 24:00 allowed
	Days []string `json:"days,omitempty"` // mon..sun; empty: every day
}

// Approval is the approvals a rule requires before the run starts.
type Approval struct {
	Count  int      `json:"count"`
	Groups []string `json:"groups"`
}

// Group is a named set of principals, with free-form attributes for `when`
// conditions.
type Group struct {
	Name       string         `json:"name"`
	Members    []string       `json:"members"`
	Attributes map[string]any `json:"attributes,omitempty"`
}

// Ref is the Git reference a request runs from.
type Ref struct {
	Branch    string `json:"branch,omitempty"`
	Protected bool   `json:"protected,omitempty"`
	Commit    string `json:"commit,omitempty"`
}

// Request is what an authorization decision is about. Now is an input rather
// than read from a clock so that a decision is a pure function of its inputs
// and can be replayed; a zero Now is the zero time (a Monday, 00:00 UTC of
// year 1), which callers must not rely on.
type Request struct {
	Job       string         `json:"job"`
	Channel   string         `json:"channel"`
	Actor     string         `json:"actor"`
	ActorKind string         `json:"actor_kind,omitempty"` // user | service
	Params    map[string]any `json:"params,omitempty"`     // decoded, validated params
	Ref       Ref            `json:"ref,omitzero"`
	Source    map[string]any `json:"source,omitempty"` // e.g. {"kind": "webhook", "sender": "octocat"}
	Now       time.Time      `json:"now,omitzero"`
}

// Decision is the outcome of Decide, kept with the run so that anyone can see
// why it was allowed or refused.
type Decision struct {
	Allowed bool `json:"allowed"`
	// Rule is the id of the deciding rule: the first matching deny, or else
	// the chosen allow; empty when no rule matched.
	Rule string `json:"rule,omitempty"`
	// NeedsApproval is the chosen rule's approval requirement, if any.
	NeedsApproval *Approval `json:"needs_approval,omitempty"`
	// Grants are the chosen rule's grants, never a union of several rules.
	Grants map[string]string `json:"grants,omitempty"`
	// ForksFull is set when the chosen rule lifts safe mode for runs from
	// untrusted sources (forks: full).
	ForksFull   bool   `json:"forks_full,omitempty"`
	Explanation string `json:"explanation"`
	// Rules are the rules considered — every rule that names the job — with
	// whether each matched and why not, in file then position order.
	Rules []RuleTrace `json:"rules"`
	// Unrelated counts the rules that do not name the job.
	Unrelated int `json:"unrelated_rules"`
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
