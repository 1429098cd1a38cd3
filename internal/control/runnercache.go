package control

import (
	"context"
	"errors"
	"sync"

	"github.com/jobplane/jobplane/internal/store"
)

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

// RunnersChanged forgets the cached runner lists: a runner was registered
// or rekeyed elsewhere (admin.Service.OnRunnersChanged).
func (s *Service) RunnersChanged() { s.runnerLists.Invalidate() }
