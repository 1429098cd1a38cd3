package policy

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var testGroups = []Group{
	{Name: "contractors", Members: []string{"mallory"}},
	{Name: "payments-leads", Members: []string{"carol"}},
	{Name: "payments-operators", Members: []string{"alice", "bob"}, Attributes: map[string]any{"accounts": []any{"1001", "1002"}}},
}

type testBundle struct {
	policy *Policy
}

func setup(t *testing.T, rules ...Rule) *testBundle {
	t.Helper()
	for i := range rules {
		if rules[i].Effect == "" {
			rules[i].Effect = EffectAllow
		}
		if rules[i].File == "" {
			rules[i].File = "policies/a.yaml"
		}
		if rules[i].Line == 0 {
			rules[i].Line = i + 1
		}
	}
	p, probs := Compile(rules, testGroups)
	require.Empty(t, probs)
	return &testBundle{policy: p}
}

// Friday 2026-05-01 is a weekday; times below are given in UTC.
var friday0300UTC = time.Date(2026, 5, 1, 3, 0, 0, 0, time.UTC)

func req(actor, job, channel string) Request {
	return Request{Actor: actor, ActorKind: "user", Job: job, Channel: channel, Now: friday0300UTC}
}

func TestWhen(t *testing.T) {
	t.Parallel()

	tb := setup(t, Rule{
		ID: "own-accounts", Jobs: []string{"backfill-account"}, Channels: []string{"staging"}, Groups: []string{"payments-operators"},
		When: `request.params.account in groups["payments-operators"].attributes.accounts`,
	})
	tests := []struct {
		name    string
		params  map[string]any
		allowed bool
		reason  string
	}{
		{"true", map[string]any{"account": "1001"}, true, "actor alice is in group payments-operators; when `request.params.account in groups[\"payments-operators\"].attributes.accounts` is true"},
		{"false", map[string]any{"account": "9999"}, false, "actor alice is in group payments-operators; when `request.params.account in groups[\"payments-operators\"].attributes.accounts` is false"},
		{"misspelled key errors", map[string]any{"acount": "1001"}, false, "actor alice is in group payments-operators; when `request.params.account in groups[\"payments-operators\"].attributes.accounts` error (counts as false): no such key: account"},
		{"no params errors", nil, false, "error (counts as false): no such key: account"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := req("alice", "backfill-account", "staging")
			r.Params = tt.params
			got := tb.policy.Decide(r)
			require.Equal(t, tt.allowed, got.Allowed, "Decide(%+v) = %+v", r, got)
			require.Contains(t, got.Rules[0].Reason, tt.reason)
			if !tt.allowed {
				require.Contains(t, got.Explanation, "rule own-accounts", "a denial names the condition that failed")
			}
		})
	}
}

func TestWhenVariables(t *testing.T) {
	t.Parallel()

	tests := []struct {
		when string
		req  func(*Request)
		want bool
	}{
		{`request.ref.protected && request.ref.branch == "main" && request.ref.commit.startsWith("abc")`, func(r *Request) { r.Ref = Ref{Branch: "main", Protected: true, Commit: "abc123"} }, true},
		{`request.ref.protected`, func(r *Request) {}, false},
		{`actor.name == "alice" && actor.kind == "user" && "payments-operators" in actor.groups`, func(r *Request) {}, true},
		{`request.job == "j" && request.channel == "c"`, func(r *Request) {}, true},
		{`request.source.sender == "octocat"`, func(r *Request) { r.Source = map[string]any{"sender": "octocat"} }, true},
		{`now.getDayOfWeek() == 5 && now.getHours() == 3`, func(r *Request) {}, true},
		{`now.getHours("Europe/Paris") == 5`, func(r *Request) {}, true},
		{`"alice" in groups["payments-operators"].members`, func(r *Request) {}, true},
		{`request.params.n == 3`, func(r *Request) { r.Params = map[string]any{"n": 3.0} }, true},
		{`has(request.params.dry_run) && request.params.dry_run`, func(r *Request) {}, false},
		{`request.params.flag`, func(r *Request) { r.Params = map[string]any{"flag": "yes"} }, false},                                                     // not a bool: error
		{`request.params.l.all(x, request.params.l.all(y, x == y || x != y))`, func(r *Request) { r.Params = map[string]any{"l": bigList(2000)} }, false}, // over the cost budget: stops early, counts as false
	}
	for _, tt := range tests {
		t.Run(tt.when, func(t *testing.T) {
			t.Parallel()
			tb := setup(t, Rule{ID: "r", Jobs: []string{"*"}, Users: []string{AnyUser}, When: tt.when})
			r := req("alice", "j", "c")
			tt.req(&r)
			got := tb.policy.Decide(r)
			require.Equal(t, tt.want, got.Allowed, "Decide(%+v) = %+v", r, got)
		})
	}
}

func bigList(n int) []any {
	l := make([]any, n)
	for i := range l {
		l[i] = float64(i)
	}
	return l
}

func TestHours(t *testing.T) {
	t.Parallel()

	// Europe/Paris is UTC+2 in May.
	tb := setup(t,
		Rule{ID: "weekday-night", Jobs: []string{"day"}, Users: []string{AnyUser}, Hours: &Hours{TZ: "Europe/Paris", From: "01:00", To: "05:00", Days: []string{"mon", "tue", "wed", "thu", "fri"}}},
		Rule{ID: "friday-late", Jobs: []string{"wrap"}, Users: []string{AnyUser}, Hours: &Hours{TZ: "Europe/Paris", From: "22:00", To: "02:00", Days: []string{"fri"}}},
		Rule{ID: "whole-day", Jobs: []string{"all"}, Users: []string{AnyUser}, Hours: &Hours{TZ: "America/New_York", From: "00:00", To: "24:00"}},
	)
	paris := func(d, h, m int) time.Time {
		loc, err := time.LoadLocation("Europe/Paris")
		require.NoError(t, err)
		return time.Date(2026, 5, d, h, m, 0, 0, loc)
	}
	tests := []struct {
		name string
		job  string
		now  time.Time
		want bool
	}{
		{"inside, in zone", "day", friday0300UTC.Add(-time.Hour), true}, // 04:00 in Paris
		{"outside, in zone", "day", friday0300UTC, false},               // 05:00 in Paris, to is exclusive
		{"from is inclusive", "day", paris(1, 1, 0), true},
		{"to is exclusive", "day", paris(1, 5, 0), false},
		{"just before to", "day", paris(1, 4, 59), true},
		{"UTC time inside but Paris time outside", "day", time.Date(2026, 5, 1, 23, 30, 0, 0, time.UTC), false}, // 01:30 Sat Paris
		{"day filter uses the local date", "day", time.Date(2026, 5, 3, 23, 30, 0, 0, time.UTC), true},          // Sun UTC, 01:30 Mon Paris
		{"weekend excluded", "day", paris(2, 2, 0), false},
		{"wrap: start day evening", "wrap", paris(1, 23, 0), true},
		{"wrap: next morning belongs to the start day", "wrap", paris(2, 1, 30), true},
		{"wrap: to is exclusive", "wrap", paris(2, 2, 0), false},
		{"wrap: friday morning is thursday's window", "wrap", paris(1, 1, 30), false},
		{"wrap: saturday evening", "wrap", paris(2, 23, 0), false},
		{"whole day", "all", paris(2, 5, 59), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := req("alice", tt.job, "prod")
			r.Now = tt.now
			got := tb.policy.Decide(r)
			require.Equal(t, tt.want, got.Allowed, "Decide(now=%v) = %+v", tt.now, got)
		})
	}

	r := req("alice", "day", "prod")
	r.Now = paris(2, 2, 0)
	got := tb.policy.Decide(r)
	require.Equal(t, `users "*" matches any authenticated actor; outside hours mon,tue,wed,thu,fri 01:00-05:00 Europe/Paris (local time Sat 2026-05-02 02:00)`, got.Rules[0].Reason)
}

func TestDenyOverrides(t *testing.T) {
	t.Parallel()

	tb := setup(t,
		Rule{ID: "everyone", Jobs: []string{"*"}, Users: []string{AnyUser}, Grants: map[string]string{"db": "write"}},
		Rule{ID: "no-prod-contractors", Effect: EffectDeny, Jobs: []string{"*"}, Channels: []string{"prod"}, Groups: []string{"contractors"}},
		Rule{ID: "no-night-deploys", Effect: EffectDeny, Jobs: []string{"deploy"}, Users: []string{AnyUser}, Hours: &Hours{TZ: "UTC", From: "22:00", To: "06:00"}},
		Rule{ID: "no-unprotected-prod", Effect: EffectDeny, Jobs: []string{"*"}, Channels: []string{"prod"}, Users: []string{AnyUser}, When: `!request.ref.protected`},
	)
	tests := []struct {
		name    string
		req     Request
		allowed bool
		rule    string
	}{
		{"deny by group", Request{Actor: "mallory", Job: "x", Channel: "prod", Ref: Ref{Protected: true}, Now: friday0300UTC.Add(8 * time.Hour)}, false, "no-prod-contractors"},
		{"deny by hours", Request{Actor: "alice", Job: "deploy", Channel: "staging", Now: friday0300UTC}, false, "no-night-deploys"},
		{"deny by when", Request{Actor: "alice", Job: "x", Channel: "prod", Now: friday0300UTC.Add(8 * time.Hour)}, false, "no-unprotected-prod"},
		{"no deny applies", Request{Actor: "alice", Job: "x", Channel: "prod", Ref: Ref{Protected: true}, Now: friday0300UTC.Add(8 * time.Hour)}, true, "everyone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tb.policy.Decide(tt.req)
			require.Equal(t, tt.allowed, got.Allowed, "Decide(%+v) = %+v", tt.req, got)
			require.Equal(t, tt.rule, got.Rule)
			if !tt.allowed {
				require.Nil(t, got.Grants, "a denial grants nothing")
				require.Nil(t, got.NeedsApproval)
			}
		})
	}
}

func TestChoiceAmongAllows(t *testing.T) {
	t.Parallel()

	approval := func(n int) *Approval { return &Approval{Count: n, Groups: []string{"payments-leads"}} }
	tests := []struct {
		name  string
		rules []Rule
		want  string
	}{
		{"fewest approvals", []Rule{
			{ID: "two", Approval: approval(2), Grants: map[string]string{"db": "write"}},
			{ID: "one", Approval: approval(1)},
			{ID: "one-b", Approval: approval(1)},
		}, "one"},
		{"no approval beats any approval", []Rule{
			{ID: "one", Approval: approval(1), Grants: map[string]string{"db": "write", "api": "write"}},
			{ID: "none"},
		}, "none"},
		{"then most write grants", []Rule{
			{ID: "reads", Grants: map[string]string{"a": "read", "b": "read", "c": "read"}},
			{ID: "write", Grants: map[string]string{"a": "write"}},
		}, "write"},
		{"then most grants", []Rule{
			{ID: "one", Grants: map[string]string{"a": "write"}},
			{ID: "two", Grants: map[string]string{"a": "write", "b": "read"}},
		}, "two"},
		{"then first position", []Rule{
			{ID: "first", Grants: map[string]string{"a": "read"}},
			{ID: "second", Grants: map[string]string{"b": "read"}},
		}, "first"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for i := range tt.rules {
				tt.rules[i].Jobs, tt.rules[i].Users = []string{"j"}, []string{"alice"}
			}
			tb := setup(t, tt.rules...)
			got := tb.policy.Decide(req("alice", "j", "prod"))
			require.True(t, got.Allowed)
			require.Equal(t, tt.want, got.Rule)
			var chosen Rule
			for _, r := range tt.rules {
				if r.ID == tt.want {
					chosen = r
				}
			}
			require.Equal(t, chosen.Approval, got.NeedsApproval)
			if len(chosen.Grants) == 0 {
				require.Empty(t, got.Grants)
			} else {
				require.Equal(t, chosen.Grants, got.Grants, "grants are the chosen rule's, never a union")
			}
		})
	}
}

func TestUsersAndGroups(t *testing.T) {
	t.Parallel()

	tb := setup(t,
		Rule{ID: "anyone-hello", Jobs: []string{"hello"}, Users: []string{AnyUser}},
		Rule{ID: "ops-backfill", Jobs: []string{"backfill-*"}, Channels: []string{"staging"}, Groups: []string{"payments-operators"}},
		Rule{ID: "carol-report", Jobs: []string{"report"}, Users: []string{"carol"}},
	)
	tests := []struct {
		name    string
		req     Request
		allowed bool
	}{
		{"star matches a user", req("zed", "hello", "prod"), true},
		{"star matches a service principal", Request{Actor: "scheduler", ActorKind: "service", Job: "hello"}, true},
		{"star needs an actor", Request{Job: "hello"}, false},
		{"glob and group", req("bob", "backfill-account", "staging"), true},
		{"channel filter", req("bob", "backfill-account", "prod"), false},
		{"not in group", req("carol", "backfill-account", "staging"), false},
		{"named user", req("carol", "report", "prod"), true},
		{"default deny", req("alice", "other", "prod"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tb.policy.Decide(tt.req)
			require.Equal(t, tt.allowed, got.Allowed, "Decide(%+v) = %+v", tt.req, got)
			require.Equal(t, 3, len(got.Rules)+got.Unrelated, "every rule is traced or counted")
		})
	}
}

func TestTrace(t *testing.T) {
	t.Parallel()

	tb := setup(t,
		Rule{ID: "a", Jobs: []string{"hello"}, Users: []string{AnyUser}},
		Rule{ID: "b", Jobs: []string{"*"}, Channels: []string{"staging"}, Users: []string{AnyUser}},
		Rule{ID: "c", Jobs: []string{"*"}, Groups: []string{"contractors"}, Users: []string{"dave"}},
		Rule{ID: "d", Jobs: []string{"*"}, Groups: []string{"payments-operators"}, When: `request.ref.protected`},
		Rule{ID: "e", Jobs: []string{"*"}, Users: []string{"bob"}, Approval: &Approval{Count: 1, Groups: []string{"payments-leads"}}, Grants: map[string]string{"warehouse": "write"}},
	)
	got := tb.policy.Decide(req("bob", "backfill", "prod"))
	require.True(t, got.Allowed)
	require.Equal(t, "e", got.Rule)
	require.Equal(t, &Approval{Count: 1, Groups: []string{"payments-leads"}}, got.NeedsApproval)
	require.Equal(t, map[string]string{"warehouse": "write"}, got.Grants)
	require.Equal(t, "allowed: rule e (policies/a.yaml:5) allows bob to run job backfill in channel prod, once approved by 1 of [payments-leads], granting warehouse=write", got.Explanation)
	require.Equal(t, []RuleTrace{
		{ID: "b", File: "policies/a.yaml", Line: 2, Effect: "allow", Reason: "channel not in [staging]"},
		{ID: "c", File: "policies/a.yaml", Line: 3, Effect: "allow", Reason: "actor bob is not in groups [contractors] or users [dave]"},
		{ID: "d", File: "policies/a.yaml", Line: 4, Effect: "allow", Reason: "actor bob is in group payments-operators; when `request.ref.protected` is false"},
		{ID: "e", File: "policies/a.yaml", Line: 5, Effect: "allow", Matched: true, Reason: "actor bob is listed in users"},
	}, got.Rules)

	raw, err := json.Marshal(got)
	require.NoError(t, err)
	require.Contains(t, string(raw), `"needs_approval":{"count":1,"groups":["payments-leads"]},"grants":{"warehouse":"write"}`)

	got = tb.policy.Decide(req("alice", "backfill", "prod"))
	require.False(t, got.Allowed)
	require.Equal(t, "denied: no rule allows alice to run job backfill in channel prod (rule d (policies/a.yaml:4): actor alice is in group payments-operators; when `request.ref.protected` is false)", got.Explanation)
}

func TestEmptyDenies(t *testing.T) {
	t.Parallel()

	var nilPolicy *Policy
	got := nilPolicy.Decide(req("alice", "a", "prod"))
	require.False(t, got.Allowed)
	require.Equal(t, "no valid definitions: every request is denied", got.Explanation)
	got = New(nil, nil).Decide(req("alice", "a", "prod"))
	require.False(t, got.Allowed)
	require.Empty(t, got.Rules)
	require.NotNil(t, got.Rules, "rules marshal as [] not null")
}

func TestCompileProblems(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		rule Rule
		want []Problem
	}{
		{"syntax error with position", Rule{When: "request.job ==\n  "}, []Problem{{Field: "when", Line: 2, Column: 3, Message: "Syntax error: mismatched input '<EOF>'"}}},
		{"unknown field", Rule{When: `actor.nmae == "x"`}, []Problem{{Field: "when", Line: 1, Column: 6, Message: "undefined field 'nmae'"}}},
		{"unknown variable", Rule{When: `user == "x"`}, []Problem{{Field: "when", Line: 1, Column: 1, Message: "undeclared reference to 'user'"}}},
		{"not a bool", Rule{When: `request.job`}, []Problem{{Field: "when", Message: "must be a boolean expression, this one is string"}}},
		{"too long", Rule{When: string(make([]byte, MaxWhenLength+1))}, []Problem{{Field: "when", Message: "is longer than"}}},
		{"hours", Rule{Hours: &Hours{TZ: "Local", From: "1:00", To: "24:01", Days: []string{"monday"}}}, []Problem{
			{Field: "hours.tz", Message: "not Local"},
			{Field: "hours.from", Message: "HH:MM"},
			{Field: "hours.to", Message: "HH:MM"},
			{Field: "hours.days[0]", Message: `got "monday"`},
		}},
		{"empty window", Rule{Hours: &Hours{TZ: "UTC", From: "00:00", To: "24:00"[:0] + "00:00"}}, []Problem{{Field: "hours.to", Message: "must differ"}}},
		{"approval", Rule{Approval: &Approval{Count: 0}}, []Problem{{Field: "approval.count", Message: "from 1 to"}, {Field: "approval.groups", Message: "is required"}}},
		{"grants", Rule{Grants: map[string]string{"Bad_Name": "read", "db": "admin"}}, []Problem{{Field: "grants.Bad_Name", Message: "must match"}, {Field: "grants.db", Message: "read or write"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := tt.rule
			r.ID, r.Effect, r.Jobs, r.Users = "r", EffectAllow, []string{"*"}, []string{"*"}
			c, probs := CompileRule(r)
			require.Nil(t, c)
			require.Len(t, probs, len(tt.want), "CompileRule(%+v) = %v", r, probs)
			for i, w := range tt.want {
				require.Equal(t, w.Field, probs[i].Field, "problem %d: %v", i, probs[i])
				require.Equal(t, w.Line, probs[i].Line, "problem %d: %v", i, probs[i])
				require.Equal(t, w.Column, probs[i].Column, "problem %d: %v", i, probs[i])
				require.Contains(t, probs[i].Message, w.Message, "problem %d: %v", i, probs[i])
			}
		})
	}
}

// TestDenyFailsClosed: a deny rule whose condition cannot be evaluated
// denies; an evaluation error must never be what lets a request through.
func TestDenyFailsClosed(t *testing.T) {
	t.Parallel()
	tb := setup(t,
		Rule{ID: "everyone", Jobs: []string{"*"}, Users: []string{AnyUser}},
		Rule{ID: "no-big-backfills", Effect: EffectDeny, Jobs: []string{"backfill"}, Users: []string{AnyUser}, When: `request.params.rows > 1000`},
	)
	r := req("alice", "backfill", "prod")
	r.Params = map[string]any{"row": 5} // misspelled: the condition errors
	got := tb.policy.Decide(r)
	require.False(t, got.Allowed, "Decide(%+v) = %+v", r, got)
	require.Equal(t, "no-big-backfills", got.Rule)
	require.True(t, got.Rules[1].Matched)
	require.Contains(t, got.Rules[1].Reason, "a deny rule that cannot be evaluated denies")
	r.Params = map[string]any{"rows": 5}
	require.True(t, tb.policy.Decide(r).Allowed)
}
