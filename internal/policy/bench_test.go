package policy

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkDecide200Rules decides one request against 200 rules shaped like a
// real catalog: each job has a few rules, a third of the rules carry a `when`,
// some carry hours, approvals and grants, and a few deny rules cover every
// job. The request's job is named by 10 rules, so about ten rules reach the
// actor check and a few evaluate CEL.
func BenchmarkDecide200Rules(b *testing.B) {
	whens := []string{
		`request.params.account in groups["payments-operators"].attributes.accounts`,
		`request.ref.protected`,
		`actor.kind == "user" && request.channel != "sandbox"`,
	}
	rules := make([]Rule, 0, 200)
	for i := range 200 {
		r := Rule{
			ID: fmt.Sprintf("rule-%03d", i), File: fmt.Sprintf("policies/p%02d.yaml", i/20), Line: 2 + 6*(i%20),
			Effect: EffectAllow, Jobs: []string{fmt.Sprintf("job-%02d", i%20)}, Channels: []string{"prod", "staging"},
			Groups: []string{"payments-operators"},
		}
		switch i % 6 {
		case 0, 3:
			r.When = whens[i%len(whens)]
		case 1:
			r.Hours = &Hours{TZ: "Europe/Paris", From: "01:00", To: "23:00", Days: []string{"mon", "tue", "wed", "thu", "fri"}}
			r.Approval = &Approval{Count: 1, Groups: []string{"payments-leads"}}
		case 2:
			r.Grants = map[string]string{"warehouse": GrantWrite}
		case 4:
			r.Users, r.Groups = []string{"carol"}, nil
		}
		if i%50 == 49 {
			r.Effect, r.Jobs, r.Groups, r.Users, r.Grants, r.Approval = EffectDeny, []string{"*"}, []string{"contractors"}, nil, nil, nil
		}
		rules = append(rules, r)
	}
	p := mustCompile(b, rules)
	req := Request{
		Job: "job-06", Channel: "prod", Actor: "alice", ActorKind: "user",
		Params: map[string]any{"account": "1001"}, Ref: Ref{Branch: "main", Protected: true},
		Now: time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC),
	}
	if !p.Decide(req).Allowed {
		b.Fatal("benchmark request should be allowed")
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = p.Decide(req)
	}
}
