package control

import (
	"crypto/subtle"
	"encoding/json"
	"time"

	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/store"
)

func newAttempt(run *store.Run, spec Spec, number int, now, notBefore time.Time) *store.Attempt {
	return &store.Attempt{
		ID: id.New(id.Attempt, now), RunID: run.ID, Tenant: run.Tenant, Number: number,
		State: store.AttemptQueued, Pool: spec.Pool, Labels: spec.Labels,
		LeaseTTL: time.Duration(spec.LeaseTTL), Timeout: time.Duration(spec.Timeout),
		NotBefore: notBefore, CreatedAt: now, Repo: spec.Repo, ManagedOnly: spec.SafeMode,
	}
}

func finish(r *store.Run, state store.RunState, now time.Time) {
	r.State = state
	r.UpdatedAt = now
	r.FinishedAt = &now
}

func runSpec(r *store.Run) (Spec, error) {
	var s Spec
	err := json.Unmarshal(r.Spec, &s)
	return s, err
}

func digestEqual(a, b string) bool {
	return len(a) == len(b) && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
