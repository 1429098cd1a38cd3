package review

import (
	"maps"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/catalog"
)

// Without conditions, Diff's answer must be exactly the policy engine's: it
// recompiles the rules, it must not reinterpret them.
func TestAccessAgreesWithDecide(t *testing.T) {
	t.Parallel()
	files := map[string][]byte{}
	for k, v := range with(base, "policies/a.yaml", "rules:\n"+ruleHello+ruleBackfillProd, "policies/deny.yaml", `rules:
  - {id: d, effect: deny, jobs: [hello], channels: [prod], groups: [contractors]}
  - {id: e, jobs: ["back*"], users: [mallory, "*"], grants: {warehouse: write}, approval: {count: 2, groups: [payments-leads]}}
`) {
		files[k] = []byte(v)
	}
	cat, errs := catalog.Parse(files)
	require.Empty(t, errs)
	s, err := newSide(cat)
	require.NoError(t, err)
	for _, job := range []string{"hello", "backfill-account"} {
		for _, ch := range []string{"prod", "staging"} {
			for _, p := range []string{"*", "alice", "bob", "carol", "mallory", "nobody"} {
				a := s.access(job, ch, p)
				d := cat.Decide(catalog.Request{Job: job, Channel: ch, Actor: p, Ref: catalog.ReferenceRef, Now: catalog.ReferenceTime})
				require.Equal(t, d.Allowed, a.Allowed, "%s %s %s", job, ch, p)
				require.Equal(t, d.Rule, a.Rule)
				require.True(t, maps.Equal(d.Grants, a.Grants))
				require.Equal(t, approvalText(d.NeedsApproval), approvalText(a.Approval))
				require.Empty(t, a.Conditions)
			}
		}
	}
}
