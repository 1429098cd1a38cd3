package policy

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

var (
	genWhens = []string{
		"", "", "",
		`true`, `false`,
		`request.ref.protected`,
		`request.params.account in groups["payments-operators"].attributes.accounts`,
		`request.params.acount == "1001"`, // misspelled: errors at evaluation
		`actor.kind == "service"`,
		`now.getHours() < 12`,
	}
	genUsers = []string{"alice", "bob", "carol", "mallory", "scheduler", AnyUser}
)

func genRule(t *rapid.T, id string, effect string) Rule {
	r := Rule{
		ID: id, File: "policies/p.yaml", Effect: effect,
		Jobs:     rapid.SliceOfNDistinct(rapid.SampledFrom([]string{"a", "b", "b*", "*"}), 1, 2, rapid.ID).Draw(t, "jobs"),
		Channels: rapid.SliceOfNDistinct(rapid.SampledFrom([]string{"prod", "staging"}), 0, 2, rapid.ID).Draw(t, "channels"),
		Groups:   rapid.SliceOfNDistinct(rapid.SampledFrom([]string{"contractors", "payments-leads", "payments-operators"}), 0, 2, rapid.ID).Draw(t, "groups"),
		Users:    rapid.SliceOfNDistinct(rapid.SampledFrom(genUsers), 0, 2, rapid.ID).Draw(t, "users"),
		When:     rapid.SampledFrom(genWhens).Draw(t, "when"),
	}
	if len(r.Groups) == 0 && len(r.Users) == 0 {
		r.Users = []string{AnyUser}
	}
	if rapid.Bool().Draw(t, "hasHours") {
		r.Hours = &Hours{TZ: rapid.SampledFrom([]string{"UTC", "Asia/Kolkata", "America/New_York"}).Draw(t, "tz"), From: "22:00", To: "06:00"}
	}
	if effect == EffectAllow {
		if n := rapid.IntRange(0, 2).Draw(t, "approvals"); n > 0 {
			r.Approval = &Approval{Count: n, Groups: []string{"payments-leads"}}
		}
		r.Grants = rapid.MapOfN(rapid.SampledFrom([]string{"db", "api", "queue"}), rapid.SampledFrom([]string{GrantRead, GrantWrite}), 0, 3).Draw(t, "grants")
	}
	return r
}

func genRequest(t *rapid.T) Request {
	return Request{
		Job:       rapid.SampledFrom([]string{"a", "b", "bx", "c"}).Draw(t, "job"),
		Channel:   rapid.SampledFrom([]string{"prod", "staging", "sandbox"}).Draw(t, "channel"),
		Actor:     rapid.SampledFrom([]string{"alice", "bob", "carol", "mallory", "scheduler", ""}).Draw(t, "actor"),
		ActorKind: rapid.SampledFrom([]string{"user", "service"}).Draw(t, "kind"),
		Params:    map[string]any{"account": rapid.SampledFrom([]string{"1001", "9999"}).Draw(t, "account")},
		Ref:       Ref{Branch: "main", Protected: rapid.Bool().Draw(t, "protected")},
		Now:       time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(rapid.IntRange(0, 7*24*60).Draw(t, "minute")) * time.Minute),
	}
}

func genRules(t *rapid.T) []Rule {
	n := rapid.IntRange(0, 12).Draw(t, "n")
	rules := make([]Rule, n)
	for i := range rules {
		rules[i] = genRule(t, fmt.Sprintf("r%d", i), rapid.SampledFrom([]string{EffectAllow, EffectAllow, EffectDeny}).Draw(t, "effect"))
		rules[i].Line = i + 1
	}
	return rules
}

func mustCompile(t require.TestingT, rules []Rule) *Policy {
	p, probs := Compile(rules, testGroups)
	require.Empty(t, probs)
	return p
}

// TestPropertyGrants: an allowed decision's grants and approval are those of
// one single matching allow rule, the chosen one, and no matching allow rule
// needs fewer approvals; a denial grants nothing.
func TestPropertyGrants(t *testing.T) {
	t.Parallel()

	rapid.Check(t, func(t *rapid.T) {
		rules := genRules(t)
		req := genRequest(t)
		dec := mustCompile(t, rules).Decide(req)
		require.Equal(t, len(rules), len(dec.Rules)+dec.Unrelated, "every rule is traced or counted as unrelated")
		matched := map[string]bool{}
		for _, tr := range dec.Rules {
			matched[tr.ID] = tr.Matched
		}
		if !dec.Allowed {
			require.Nil(t, dec.Grants)
			require.Nil(t, dec.NeedsApproval)
			return
		}
		i := slices.IndexFunc(rules, func(r Rule) bool { return r.ID == dec.Rule })
		require.GreaterOrEqual(t, i, 0)
		chosen := rules[i]
		require.Equal(t, EffectAllow, chosen.Effect)
		require.True(t, matched[chosen.ID])
		require.True(t, maps.Equal(chosen.Grants, dec.Grants), "grants %v are not rule %s's %v", dec.Grants, chosen.ID, chosen.Grants)
		require.Equal(t, chosen.Approval, dec.NeedsApproval)
		for _, r := range rules {
			require.False(t, r.Effect == EffectDeny && matched[r.ID], "allowed although deny rule %s matched", r.ID)
			if r.Effect == EffectAllow && matched[r.ID] {
				require.LessOrEqual(t, approvalsOf(chosen), approvalsOf(r))
			}
		}
	})
}

func approvalsOf(r Rule) int {
	if r.Approval == nil {
		return 0
	}
	return r.Approval.Count
}

// TestPropertyDenyNeverGrants: adding a deny rule anywhere never turns a
// denial into an allow and never changes what an allow grants.
func TestPropertyDenyNeverGrants(t *testing.T) {
	t.Parallel()

	rapid.Check(t, func(t *rapid.T) {
		rules := genRules(t)
		req := genRequest(t)
		before := mustCompile(t, rules).Decide(req)
		deny := genRule(t, "extra-deny", EffectDeny)
		at := rapid.IntRange(0, len(rules)).Draw(t, "at")
		after := mustCompile(t, slices.Insert(slices.Clone(rules), at, deny)).Decide(req)
		if !before.Allowed {
			require.False(t, after.Allowed, "a deny rule turned a denial into an allow")
			return
		}
		if after.Allowed {
			require.Equal(t, before.Rule, after.Rule)
			require.Equal(t, before.Grants, after.Grants)
			require.Equal(t, before.NeedsApproval, after.NeedsApproval)
		} else {
			require.Empty(t, after.Grants)
		}
	})
}

// TestPropertyEmptyDenies: nil and empty policies deny every request.
func TestPropertyEmptyDenies(t *testing.T) {
	t.Parallel()

	rapid.Check(t, func(t *rapid.T) {
		req := genRequest(t)
		var nilPolicy *Policy
		require.False(t, nilPolicy.Decide(req).Allowed)
		require.False(t, New(nil, testGroups).Decide(req).Allowed)
		require.False(t, mustCompile(t, nil).Decide(req).Allowed)
	})
}
