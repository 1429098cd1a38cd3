package control

import (
	"crypto/subtle"
	"encoding/json"
	"sync"
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
		Needs: attemptNeeds(run, spec),
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

// specCache holds pinned specs decoded for claim answers, by their bytes:
// the runs of a job at one commit share one spec, and every claimed
// attempt needs its run's. What it returns shares its maps and slices
// with every other caller: only for readers (an answer copies them out).
type specCache struct {
	mu sync.Mutex
	m  map[string]Spec
}

// specCacheMax bounds the cache; a full cache starts over.
const specCacheMax = 512

// get is runSpec(r), decoded once per distinct spec.
func (c *specCache) get(r *store.Run) (Spec, error) {
	c.mu.Lock()
	sp, ok := c.m[string(r.Spec)]
	c.mu.Unlock()
	if ok {
		return sp, nil
	}
	sp, err := runSpec(r)
	if err != nil {
		return sp, err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= specCacheMax {
		c.m = make(map[string]Spec)
	}
	c.m[string(r.Spec)] = sp
	c.mu.Unlock()
	return sp, nil
}

func digestEqual(a, b string) bool {
	return len(a) == len(b) && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
