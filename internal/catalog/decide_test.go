package catalog

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const decideGroups = `groups:
  operators: {members: [alice, bob]}
  contractors: {members: [mallory]}
`

const decidePolicyA = `rules:
  - id: anyone-hello
    jobs: [hello]
    users: ["*"]
  - id: ops-backfill-staging
    jobs: ["backfill-*"]
    channels: [staging]
    groups: [operators]
`

const decidePolicyB = `rules:
  - id: contractors-everything
    jobs: ["*"]
    groups: [contractors]
  - id: no-prod-contractors
    effect: deny
    jobs: ["*"]
    channels: [prod]
    groups: [contractors]
  - id: carol-report
    jobs: [report]
    users: [carol]
`

func TestDecide(t *testing.T) {
	t.Parallel()

	c := mustParse(t, files("groups.yaml", decideGroups, "policies/a.yaml", decidePolicyA, "policies/b.yaml", decidePolicyB))
	tests := []struct {
		name    string
		req     Request
		allowed bool
		rule    string
	}{
		{"users star", Request{Job: "hello", Channel: "prod", Actor: "zed"}, true, "anyone-hello"},
		{"users star needs an actor", Request{Job: "hello", Channel: "prod"}, false, ""},
		{"glob and group", Request{Job: "backfill-account", Channel: "staging", Actor: "alice"}, true, "ops-backfill-staging"},
		{"channel filter", Request{Job: "backfill-account", Channel: "prod", Actor: "alice"}, false, ""},
		{"glob does not match", Request{Job: "backfill", Channel: "staging", Actor: "alice"}, false, ""},
		{"not in group", Request{Job: "backfill-account", Channel: "staging", Actor: "carol"}, false, ""},
		{"named user", Request{Job: "report", Channel: "prod", Actor: "carol"}, true, "carol-report"},
		{"allow where no deny", Request{Job: "report", Channel: "staging", Actor: "mallory"}, true, "contractors-everything"},
		{"deny wins", Request{Job: "report", Channel: "prod", Actor: "mallory"}, false, "no-prod-contractors"},
		{"deny wins over users star", Request{Job: "hello", Channel: "prod", Actor: "mallory"}, false, "no-prod-contractors"},
		{"default deny", Request{Job: "other", Channel: "prod", Actor: "alice"}, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := c.Decide(tt.req)
			require.Equal(t, tt.allowed, got.Allowed, "Decide(%+v) = %+v", tt.req, got)
			require.Equal(t, tt.rule, got.Rule, "Decide(%+v) = %+v", tt.req, got)
			require.Equal(t, 5, len(got.Rules)+got.Unrelated, "every rule is traced or counted")
			require.NotEmpty(t, got.Explanation)
		})
	}
}

func TestDecideTrace(t *testing.T) {
	t.Parallel()

	c := mustParse(t, files("groups.yaml", decideGroups, "policies/b.yaml", decidePolicyB, "policies/a.yaml", decidePolicyA))
	got := c.Decide(Request{Job: "backfill-account", Channel: "prod", Actor: "bob", ActorKind: "user"})
	require.False(t, got.Allowed)
	require.Equal(t, "denied: no rule allows bob to run job backfill-account in channel prod", got.Explanation)
	// Rules that do not name the job (anyone-hello, carol-report) are
	// counted, not traced.
	require.Equal(t, []RuleTrace{
		{ID: "ops-backfill-staging", File: "policies/a.yaml", Line: 5, Effect: "allow", Reason: "channel not in [staging]"},
		{ID: "contractors-everything", File: "policies/b.yaml", Line: 2, Effect: "allow", Reason: "actor bob is not in groups [contractors] or users []"},
		{ID: "no-prod-contractors", File: "policies/b.yaml", Line: 5, Effect: "deny", Reason: "actor bob is not in groups [contractors] or users []"},
	}, got.Rules)
	require.Equal(t, 2, got.Unrelated)

	got = c.Decide(Request{Job: "backfill-x", Channel: "staging", Actor: "bob"})
	require.True(t, got.Allowed)
	require.Equal(t, "allowed: rule ops-backfill-staging (policies/a.yaml:5) allows bob to run job backfill-x in channel staging", got.Explanation)
	require.Equal(t, RuleTrace{ID: "ops-backfill-staging", File: "policies/a.yaml", Line: 5, Effect: "allow", Matched: true, Reason: "actor bob is in group operators"}, got.Rules[0])

	raw, err := json.Marshal(got)
	require.NoError(t, err)
	require.Contains(t, string(raw), `"rules":[{"id":"ops-backfill-staging","file":"policies/a.yaml","line":5,"effect":"allow","matched":true,`)
	require.Contains(t, string(raw), `"unrelated_rules":2`)
}

func TestDecideEmpty(t *testing.T) {
	t.Parallel()

	var nilCat *Catalog
	require.False(t, nilCat.Decide(Request{Job: "a", Actor: "b"}).Allowed)
	c := mustParse(t, files())
	got := c.Decide(Request{Job: "a", Channel: "prod", Actor: "b"})
	require.False(t, got.Allowed)
	require.Empty(t, got.Rules)
}

func TestDecidePolicyEngineFields(t *testing.T) {
	t.Parallel()

	c := mustParse(t, files(
		"groups.yaml", "groups:\n  payments-operators:\n    members: [alice, bob]\n    attributes: {accounts: [\"1001\", \"1002\"]}\n  payments-leads: {members: [carol]}\n  contractors: {members: [mallory]}\n",
		"policies/payments.yaml", `rules:
  - id: payments-backfill-staging
    jobs: [backfill-account]
    channels: [staging]
    groups: [payments-operators]
    when: 'request.params.account in groups["payments-operators"].attributes.accounts'
  - id: payments-backfill-prod
    jobs: [backfill-account]
    channels: [prod]
    groups: [payments-operators]
    when: 'request.ref.protected'
    hours: {tz: UTC, from: "01:00", to: "05:00", days: [mon, tue, wed, thu, fri]}
    approval: {count: 1, groups: [payments-leads]}
    grants: {warehouse: write}
`))
	friday := time.Date(2026, 5, 1, 2, 0, 0, 0, time.UTC)
	got := c.Decide(Request{Actor: "alice", Job: "backfill-account", Channel: "staging", Params: map[string]any{"account": "1001"}, Now: friday})
	require.True(t, got.Allowed, "%+v", got)
	got = c.Decide(Request{Actor: "alice", Job: "backfill-account", Channel: "staging", Params: map[string]any{"account": "9999"}, Now: friday})
	require.False(t, got.Allowed, "%+v", got)

	prod := Request{Actor: "bob", Job: "backfill-account", Channel: "prod", Ref: Ref{Branch: "main", Protected: true}, Now: friday}
	got = c.Decide(prod)
	require.True(t, got.Allowed, "%+v", got)
	require.Equal(t, "payments-backfill-prod", got.Rule)
	require.Equal(t, &Approval{Count: 1, Groups: []string{"payments-leads"}}, got.NeedsApproval)
	require.Equal(t, map[string]string{"warehouse": "write"}, got.Grants)

	prod.Now = friday.Add(24 * time.Hour) // Saturday
	got = c.Decide(prod)
	require.False(t, got.Allowed, "%+v", got)
	require.Contains(t, got.Rules[1].Reason, "outside hours")
}

// TestApprovers: an approval's groups expand to the sorted, distinct names
// of their members; an undefined group adds no one.
func TestApprovers(t *testing.T) {
	t.Parallel()

	c := mustParse(t, files("groups.yaml", "groups:\n  leads: {members: [carol, alice]}\n  oncall: {members: [bob, carol]}\n"))
	require.Equal(t, []string{"alice", "bob", "carol"}, c.Approvers([]string{"oncall", "leads", "missing"}))
	require.Equal(t, []string{"alice", "carol"}, c.Approvers([]string{"leads"}))
	require.Empty(t, c.Approvers([]string{"missing"}))
	require.Empty(t, c.Approvers(nil))
	var nilCat *Catalog
	require.Empty(t, nilCat.Approvers([]string{"leads"}))
}
