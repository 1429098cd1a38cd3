package sqlite

import (
	"context"
	"database/sql"
	"sync"
)

// SQLite parses a statement each time it is prepared, and database/sql
// prepares every query it is given as a string: profiles of `jobplane bench`
// showed a quarter of the server's CPU in sqlite3_prepare. The store's SQL is
// a fixed set of strings, so each is prepared once on the database and
// database/sql keeps it prepared on every connection that ran it (a
// transaction reuses the connection's prepared statement).

// maxCachedStmts bounds the cache should a query ever be built at run time.
const maxCachedStmts = 512

type stmtCache struct {
	db *sql.DB
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

func (c *stmtCache) get(ctx context.Context, query string) *sql.Stmt {
	c.mu.Lock()
	st, ok := c.m[query]
	c.mu.Unlock()
	if ok {
		return st
	}
	st, err := c.db.PrepareContext(ctx, query)
	if err != nil {
		return nil // the uncached path reports the error
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev, ok := c.m[query]; ok {
		_ = st.Close()
		return prev
	}
	if len(c.m) >= maxCachedStmts {
		_ = st.Close()
		return nil
	}
	if c.m == nil {
		c.m = map[string]*sql.Stmt{}
	}
	c.m[query] = st
	return st
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.m {
		_ = st.Close()
	}
	c.m = nil
}

// cachedDB runs queries through prepared statements of the cache; tx is nil
// outside a transaction.
type cachedDB struct {
	c  *stmtCache
	db *sql.DB
	tx *sql.Tx
}

func (d cachedDB) stmt(ctx context.Context, query string) *sql.Stmt {
	st := d.c.get(ctx, query)
	if st == nil || d.tx == nil {
		return st
	}
	return d.tx.StmtContext(ctx, st)
}

func (d cachedDB) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := d.stmt(ctx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	if d.tx != nil {
		return d.tx.ExecContext(ctx, query, args...)
	}
	return d.db.ExecContext(ctx, query, args...)
}

func (d cachedDB) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := d.stmt(ctx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	if d.tx != nil {
		return d.tx.QueryContext(ctx, query, args...)
	}
	return d.db.QueryContext(ctx, query, args...)
}

func (d cachedDB) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := d.stmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	if d.tx != nil {
		return d.tx.QueryRowContext(ctx, query, args...)
	}
	return d.db.QueryRowContext(ctx, query, args...)
}
