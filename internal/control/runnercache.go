package control

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jobplane/jobplane/internal/store"
)

// runnerListTTL bounds how stale the runner list behind a queued run's
// explanation may be. The list is read for every queued run shown, and a
// tenant may have thousands of runners: reading them all per request made
// POST /v1/runs cost O(runners).
const runnerListTTL = time.Second

// runnerLists caches each tenant's runners for runnerWait. A runner
// registered, disabled or rekeyed through this server invalidates the cache
// at once; changes made through another server show within runnerListTTL.
// The explanation is best effort, and last_seen_at is only compared with a
// two-minute window, so a second's staleness changes nothing a user sees.
type runnerLists struct {
	mu      sync.Mutex
	gen     uint64
	entries map[string]runnerListEntry
}

type runnerListEntry struct {
	gen     uint64
	at      time.Time
	runners []*store.Runner
}

// invalidate forgets every cached list: called after a runner write commits.
func (c *runnerLists) invalidate() {
	c.mu.Lock()
	c.gen++
	clear(c.entries)
	c.mu.Unlock()
}

// get returns the tenant's runners, read through q when the cached list is
// older than runnerListTTL at now. The returned slice is shared: read only.
func (c *runnerLists) get(ctx context.Context, q store.Queries, tenant string, now time.Time) ([]*store.Runner, error) {
	c.mu.Lock()
	e, ok := c.entries[tenant]
	gen := c.gen
	c.mu.Unlock()
	if ok && e.gen == gen && !now.Before(e.at) && now.Sub(e.at) < runnerListTTL {
		return e.runners, nil
	}
	runners, err := q.RunnerList(ctx, tenant)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.gen == gen {
		if c.entries == nil {
			c.entries = map[string]runnerListEntry{}
		}
		c.entries[tenant] = runnerListEntry{gen: gen, at: now, runners: runners}
	}
	c.mu.Unlock()
	return runners, nil
}

// actorKinds remembers the kind (user or service) of the principals that
// requested runs, for the policy re-check at every claim. Principals are
// created and never changed or deleted, so a principal found stays as found;
// one not found is asked again (it may be created), and counts as a user.
type actorKinds struct {
	mu sync.Mutex
	m  map[string]string
}

// maxActorKinds bounds the map; past it, it starts over.
const maxActorKinds = 10000

func (c *actorKinds) kind(ctx context.Context, q store.Queries, tenant, name string) (string, error) {
	key := tenant + "\x00" + name
	c.mu.Lock()
	k, ok := c.m[key]
	c.mu.Unlock()
	if ok {
		return k, nil
	}
	p, err := q.PrincipalGetByName(ctx, tenant, name)
	if errors.Is(err, store.ErrNotFound) {
		return "user", nil
	}
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxActorKinds {
		c.m = map[string]string{}
	}
	c.m[key] = p.Kind
	c.mu.Unlock()
	return p.Kind, nil
}
