package store

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jobplane/jobplane/internal/clock"
)

// ReadCache keeps rows that every request reads and that rarely change:
// the runner behind each signed request, the GitHub installation (or its
// absence) behind each run request and claim. A store fills it only from
// reads outside transactions and empties an entry whenever the row may have
// changed: after a write through this process commits, and, on a store
// shared by several servers, when another server's change is announced
// (PostgreSQL: NOTIFY). While such announcements cannot arrive (the
// listening connection is down), the cache is off and every read goes to
// the database.
//
// An entry is stored only if nothing was forgotten between the start of
// its read and its end: a read that overlapped a change might have seen
// the row before it, and must not outlive the change's invalidation.
//
// MaxAge bounds what a lost announcement can cost: a listening connection
// that died without a word (a network cut the kernel has not noticed yet)
// delivers nothing, and no entry outlives MaxAge however quiet it is.
type ReadCache[V any] struct {
	MaxAge time.Duration // 0: no bound

	mu  sync.Mutex
	gen uint64
	on  bool
	m   map[string]readEntry[V]
}

type readEntry[V any] struct {
	v   V
	err error
	at  time.Time
}

// fresh reports whether an entry read at at may still be served. The
// bound is a safety net in wall time, not logic: the process clock is fine.
func (c *ReadCache[V]) fresh(at time.Time) bool {
	if c.MaxAge <= 0 {
		return true
	}
	age := clock.Real{}.Now().Sub(at)
	return age >= 0 && age < c.MaxAge
}

// Get returns the cached result for key, or load's, which it keeps when
// load succeeded or failed with an error keep accepts (a cached absence).
// V is returned by value: callers get their own copy.
func (c *ReadCache[V]) Get(key string, load func() (V, error), keep func(error) bool) (V, error) {
	c.mu.Lock()
	if c.on {
		if e, ok := c.m[key]; ok && c.fresh(e.at) {
			c.mu.Unlock()
			return e.v, e.err
		}
	}
	gen, on := c.gen, c.on
	c.mu.Unlock()
	at := clock.Real{}.Now()
	v, err := load()
	if on && (err == nil || (keep != nil && keep(err))) {
		c.mu.Lock()
		if c.on && c.gen == gen {
			if c.m == nil {
				c.m = map[string]readEntry[V]{}
			}
			c.m[key] = readEntry[V]{v: v, err: err, at: at}
		}
		c.mu.Unlock()
	}
	return v, err
}

// Forget drops key, and keeps any read in flight from storing what it saw.
func (c *ReadCache[V]) Forget(key string) {
	c.mu.Lock()
	c.gen++
	delete(c.m, key)
	c.mu.Unlock()
}

// Enable empties the cache and turns it on or off.
func (c *ReadCache[V]) Enable(on bool) {
	c.mu.Lock()
	c.gen++
	clear(c.m)
	c.on = on
	c.mu.Unlock()
}

// Update changes a cached entry in place (for a field only this process
// relies on, such as a runner's last-seen time); absent keys stay absent.
func (c *ReadCache[V]) Update(key string, f func(*V)) {
	c.mu.Lock()
	if e, ok := c.m[key]; ok && e.err == nil {
		f(&e.v)
		c.m[key] = e
	}
	c.mu.Unlock()
}

// Has reports whether key is cached and fresh (for tests and metrics).
func (c *ReadCache[V]) Has(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	return c.on && ok && c.fresh(e.at)
}

// TokenEntry is an API token with its principal, as a ReadCache keeps them.
type TokenEntry struct {
	Token     APIToken
	Principal Principal
}

// Caches are the read caches a store keeps, and the cached reads over its
// uncached queries.
type Caches struct {
	Runners  ReadCache[Runner]
	Installs ReadCache[GitHubInstallation]
	Tokens   ReadCache[TokenEntry]
}

// Enable empties every cache and turns them on or off.
func (c *Caches) Enable(on bool) {
	c.Runners.Enable(on)
	c.Installs.Enable(on)
	c.Tokens.Enable(on)
}

// SetMaxAge bounds every cache's entries (see ReadCache.MaxAge).
func (c *Caches) SetMaxAge(d time.Duration) {
	c.Runners.MaxAge, c.Installs.MaxAge, c.Tokens.MaxAge = d, d, d
}

// Runner reads a runner through the cache. Whatever the caller's scope,
// the entry is the row as it is.
func (c *Caches) Runner(ctx context.Context, q Queries, id string) (*Runner, error) {
	ctx = WithSystem(ctx, "runner cache")
	return c.Runners.getRow(id, func() (*Runner, error) { return q.RunnerGetByID(ctx, id, false) }, nil)
}

// Installation reads a tenant's GitHub installation, or its absence,
// through the cache.
func (c *Caches) Installation(ctx context.Context, q Queries, tenant string) (*GitHubInstallation, error) {
	ctx = WithSystem(ctx, "installation cache")
	return c.Installs.getRow(tenant, func() (*GitHubInstallation, error) { return q.GitHubInstallationGetByTenant(ctx, tenant) },
		func(err error) bool { return errors.Is(err, ErrNotFound) })
}

// Token reads an API token and its principal through the cache.
func (c *Caches) Token(ctx context.Context, q Queries, digest string) (*APIToken, *Principal, error) {
	ctx = WithSystem(ctx, "token cache")
	e, err := c.Tokens.getRow(digest, func() (*TokenEntry, error) {
		t, p, err := q.APITokenGetByDigest(ctx, digest)
		if err != nil {
			return nil, err
		}
		return &TokenEntry{Token: *t, Principal: *p}, nil
	}, nil)
	if err != nil {
		return nil, nil, err
	}
	return &e.Token, &e.Principal, nil
}

// getRow is Get for a load that returns a row by pointer: the cache keeps a
// copy, and each caller gets a copy of its own.
func (c *ReadCache[V]) getRow(key string, load func() (*V, error), keep func(error) bool) (*V, error) {
	v, err := c.Get(key, func() (V, error) {
		p, err := load()
		if err != nil {
			var zero V
			return zero, err
		}
		return *p, nil
	}, keep)
	if err != nil {
		return nil, err
	}
	return &v, nil
}

// CachedReads gives a store the cached reads of store.Store over its own
// queries: embedded, its methods are the store's.
type CachedReads struct {
	Caches
	Q Queries
}

// RunnerGetCached reads a runner through the cache.
func (c *CachedReads) RunnerGetCached(ctx context.Context, id string) (*Runner, error) {
	return c.Runner(ctx, c.Q, id)
}

// GitHubInstallationByTenantCached reads a tenant's installation, or its
// absence, through the cache.
func (c *CachedReads) GitHubInstallationByTenantCached(ctx context.Context, tenant string) (*GitHubInstallation, error) {
	return c.Installation(ctx, c.Q, tenant)
}

// APITokenGetCached reads a token and its principal through the cache.
func (c *CachedReads) APITokenGetCached(ctx context.Context, digest string) (*APIToken, *Principal, error) {
	return c.Token(ctx, c.Q, digest)
}
