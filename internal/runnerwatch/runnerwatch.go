package runnerwatch

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jobplane/jobplane/internal/store"
)

// OnlineWindow is how recently a runner must have called the control
// plane to count as online when a queued run explains what it waits for.
// Idle runners long-poll claims at least every 30 s.
const OnlineWindow = 2 * time.Minute

// Wait says why a queued run's attempt has no runner: "" when some
// online runner of its tenant is eligible for it (it is then merely next in
// line). It is computed when a run is read, never stored: runners come and
// go without touching runs. needs says in words what the attempt needs of
// a runner's executor.
func Wait(a *store.Attempt, runners []*store.Runner, now time.Time, needs []string) string {
	online, eligible := 0, 0
	for _, rn := range runners {
		if rn.Status != store.RunnerActive || rn.LastSeenAt == nil || now.Sub(*rn.LastSeenAt) > OnlineWindow {
			continue
		}
		online++
		if Eligible(rn, a) {
			eligible++
		}
	}
	if eligible > 0 {
		return ""
	}
	var need []string
	need = append(need, "pool "+a.Pool)
	if len(a.Labels) > 0 {
		need = append(need, "labels "+strings.Join(a.Labels, ","))
	}
	if a.ManagedOnly {
		need = append(need, "a managed runner (safe mode)")
	}
	if a.Repo != "" {
		need = append(need, "access to "+a.Repo)
	}
	need = append(need, needs...)
	return fmt.Sprintf("runner: none of the %d online runners is eligible (needs %s)", online, strings.Join(need, ", "))
}

// Eligible mirrors the claim's filter (store.AttemptClaimParams).
func Eligible(rn *store.Runner, a *store.Attempt) bool {
	if rn.Tenant != a.Tenant || rn.Pool != a.Pool {
		return false
	}
	for _, l := range a.Labels {
		if !slices.Contains(rn.Labels, l) {
			return false
		}
	}
	if a.ManagedOnly && rn.SelfHosted {
		return false
	}
	if !rn.Capabilities.Has(a.Needs) {
		return false
	}
	return len(rn.AllowedRepos) == 0 || slices.Contains(rn.AllowedRepos, a.Repo)
}

// Watch is what one server knows of runners' availability: it tells
// which tenants' pools gained or lost an online runner since it was last
// asked, so that what their queued runs wait for is said again.
type Watch struct {
	mu sync.Mutex
	// seen is every runner this server saw online: its tenant, pool and
	// when this server last saw it call.
	seen map[string]watched
	// dirty are the tenants and pools whose queued runs' Check Runs are to
	// be re-stated at the next pass.
	dirty map[Pool]bool
}

type watched struct {
	pool     Pool
	lastSeen time.Time
}

// Pool is a tenant's pool of runners.
type Pool struct{ Tenant, Pool string }

// Saw notes a runner's call at now; before is its last-seen time as the
// call found it. A runner this server did not know, or one silent for
// longer than OnlineWindow, has come online.
func (w *Watch) Saw(rn *store.Runner, before *time.Time, now time.Time) (cameOnline bool) {
	k := Pool{rn.Tenant, rn.Pool}
	w.mu.Lock()
	defer w.mu.Unlock()
	e, known := w.seen[rn.ID]
	back := before == nil || now.Sub(*before) > OnlineWindow
	if known && !back && now.Sub(e.lastSeen) < OnlineWindow/4 {
		// The common case: nothing to write, even in memory.
		return false
	}
	if w.seen == nil {
		w.seen = map[string]watched{}
	}
	w.seen[rn.ID] = watched{pool: k, lastSeen: now}
	if known && !back {
		return false
	}
	w.markLocked(k)
	return true
}

// Mark has the tenant's pool re-stated at the next pass.
func (w *Watch) Mark(tenant, pool string) {
	w.mu.Lock()
	w.markLocked(Pool{tenant, pool})
	w.mu.Unlock()
}

func (w *Watch) markLocked(k Pool) {
	if w.dirty == nil {
		w.dirty = map[Pool]bool{}
	}
	w.dirty[k] = true
}

// Silent lists the runners this server has not seen for OnlineWindow.
func (w *Watch) Silent(now time.Time) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for id, e := range w.seen {
		if now.Sub(e.lastSeen) > OnlineWindow {
			out = append(out, id)
		}
	}
	return out
}

// Update records what the store says of a silent runner: offline (it is
// forgotten and its pool marked) or seen through another server.
func (w *Watch) Update(id string, rn *store.Runner, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.seen[id]
	if !ok {
		return
	}
	if rn != nil && rn.Status == store.RunnerActive && rn.LastSeenAt != nil && now.Sub(*rn.LastSeenAt) <= OnlineWindow {
		e.lastSeen = *rn.LastSeenAt
		w.seen[id] = e
		return
	}
	delete(w.seen, id)
	w.markLocked(e.pool)
}

// Take empties the set of pools to re-state.
func (w *Watch) Take() []Pool {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]Pool, 0, len(w.dirty))
	for k := range w.dirty {
		out = append(out, k)
	}
	clear(w.dirty)
	return out
}

// ListTTL bounds how stale the runner list behind a queued run's
// explanation may be. The list is read for every queued run shown, and a
// tenant may have thousands of runners: reading them all per request made
// POST /v1/runs cost O(runners).
const ListTTL = time.Second

// Lists caches each tenant's runners for Wait. A runner
// registered, disabled or rekeyed through this server invalidates the cache
// at once; changes made through another server show within ListTTL.
// The explanation is best effort, and last_seen_at is only compared with a
// two-minute window, so a second's staleness changes nothing a user sees.
type Lists struct {
	mu      sync.Mutex
	gen     uint64
	entries map[string]listEntry
}

type listEntry struct {
	gen     uint64
	at      time.Time
	runners []*store.Runner
}

// Invalidate forgets every cached list: called after a runner write commits.
func (c *Lists) Invalidate() {
	c.mu.Lock()
	c.gen++
	clear(c.entries)
	c.mu.Unlock()
}

// Get returns the tenant's runners, read through q when the cached list is
// older than ListTTL at now. The returned slice is shared: read only.
func (c *Lists) Get(ctx context.Context, q store.Queries, tenant string, now time.Time) ([]*store.Runner, error) {
	c.mu.Lock()
	e, ok := c.entries[tenant]
	gen := c.gen
	c.mu.Unlock()
	if ok && e.gen == gen && !now.Before(e.at) && now.Sub(e.at) < ListTTL {
		return e.runners, nil
	}
	runners, err := q.RunnerList(ctx, tenant)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.gen == gen {
		if c.entries == nil {
			c.entries = map[string]listEntry{}
		}
		c.entries[tenant] = listEntry{gen: gen, at: now, runners: runners}
	}
	c.mu.Unlock()
	return runners, nil
}
