package store

import (
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
