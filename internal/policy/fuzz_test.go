package policy

import (
	"maps"
	"testing"
	"time"
)

// FuzzEvalPolicy (RELIABILITY M2): arbitrary conditions and requests never
// panic; a condition that does not compile fails validation, so it can never
// grant; an allowed decision grants exactly its one rule's grants.
func FuzzEvalPolicy(f *testing.F) {
	for _, w := range genWhens {
		f.Add(w, "alice", "a", "1001", int64(0))
	}
	f.Add("request.params.account.size() > 3", "bob", "a", "x", int64(1e9))
	f.Add("1 +", "alice", "a", "", int64(0))
	f.Add(`"\xff" == request.job`, "", "", "", int64(-1))
	f.Add("[1,2].all(x, [1,2].all(y, x < y))", "alice", "a", "", int64(0))
	f.Add("request.params.account.matches('(a+)+$')", "alice", "a", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!", int64(0))
	f.Add("dyn(request.params).account / 0 == 1", "alice", "a", "1", int64(0))
	f.Add("timestamp(request.params.account) < now", "alice", "a", "2026-01-01T00:00:00Z", int64(0))
	f.Fuzz(func(t *testing.T, when, actor, job, account string, unix int64) {
		grants := map[string]string{"db": GrantWrite}
		rules := []Rule{
			{ID: "fuzzed", File: "policies/f.yaml", Line: 1, Effect: EffectAllow, Jobs: []string{"*"}, Users: []string{AnyUser}, When: when, Grants: grants},
			{ID: "fuzzed-deny", File: "policies/f.yaml", Line: 2, Effect: EffectDeny, Jobs: []string{"never"}, Users: []string{AnyUser}, When: when},
		}
		req := Request{Actor: actor, Job: job, Channel: "prod", Params: map[string]any{"account": account}, Now: time.Unix(unix%(1<<40), 0)}
		p, probs := Compile(rules, testGroups)
		if len(probs) > 0 {
			if p != nil {
				t.Fatalf("Compile(%q) returned a policy and problems %v", when, probs)
			}
			if p.Decide(req).Allowed {
				t.Fatalf("a condition that failed validation granted: %q", when)
			}
			return
		}
		dec := p.Decide(req)
		if dec.Allowed && (dec.Rule != "fuzzed" || !maps.Equal(dec.Grants, grants) || actor == "") {
			t.Fatalf("Decide(%+v) with when %q = %+v", req, when, dec)
		}
		if len(dec.Rules)+dec.Unrelated != len(rules) {
			t.Fatalf("trace has %d rules and %d unrelated, want %d", len(dec.Rules), dec.Unrelated, len(rules))
		}
	})
}
