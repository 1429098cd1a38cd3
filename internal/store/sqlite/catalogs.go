package sqlite

import (
	"context"

	"github.com/jobplane/jobplane/internal/store"
)

// ---- catalogs ----

const catalogCols = "tenant, channel, branch, commit_sha, status, errors, author, committed_at, loaded_at"

func scanCatalog(r scanner) (*store.Catalog, error) {
	c := &store.Catalog{}
	err := r.Scan(&c.Tenant, &c.Channel, &c.Branch, &c.Commit, &c.Status, jsonCol{&c.Errors}, &c.Author,
		timeCol{&c.CommittedAt}, timeCol{&c.LoadedAt})
	if err != nil {
		return nil, interpretError(err)
	}
	return c, nil
}

func (q *queries) CatalogGet(ctx context.Context, tenant, channel, branch, commit string) (*store.Catalog, error) {
	return scanCatalog(q.db.QueryRowContext(ctx, `SELECT `+catalogCols+` FROM catalogs
		WHERE tenant = ? AND channel = ? AND branch = ? AND commit_sha = ?`, tenant, channel, branch, commit))
}

func (q *queries) CatalogInsert(ctx context.Context, c *store.Catalog) error {
	return q.insert(ctx, `INSERT INTO catalogs (`+catalogCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, coalesce(?, `+nowSQL+`)) ON CONFLICT DO NOTHING RETURNING loaded_at`,
		[]any{c.Tenant, c.Channel, c.Branch, c.Commit, c.Status, jsonText(c.Errors), c.Author,
			microsZero(c.CommittedAt), micros(c.LoadedAt)}, timeCol{&c.LoadedAt})
}

// catalogListSQL writes only the filters p gives (andFilters), so that a
// tenant's list can use its index: a row is kept for every commit of every
// channel, superseded ones included.
func catalogListSQL(p *store.CatalogListParams) (string, []any) {
	conds, args := andFilters(nil,
		filter{"tenant = ?", p.Tenant, p.Tenant != ""}, filter{"channel = ?", p.Channel, p.Channel != ""},
		filter{"status = ?", string(p.Status), p.Status != ""})
	return `SELECT ` + catalogCols + ` FROM catalogs WHERE 1` + conds +
		` ORDER BY loaded_at DESC, channel, branch, commit_sha LIMIT ?`, append(args, limit(p.Limit))
}

func (q *queries) CatalogList(ctx context.Context, p *store.CatalogListParams) ([]*store.Catalog, error) {
	sql, args := catalogListSQL(p)
	rows, err := q.db.QueryContext(ctx, sql, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []*store.Catalog
	for rows.Next() {
		c, err := scanCatalog(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, interpretError(rows.Err())
}

func (q *queries) CatalogSetStatus(ctx context.Context, c *store.Catalog) error {
	return interpretError(q.db.QueryRowContext(ctx, `UPDATE catalogs SET status = ?, loaded_at = coalesce(?, `+nowSQL+`)
		WHERE tenant = ? AND channel = ? AND branch = ? AND commit_sha = ? RETURNING loaded_at`,
		c.Status, micros(c.LoadedAt), c.Tenant, c.Channel, c.Branch, c.Commit).Scan(timeCol{&c.LoadedAt}))
}

func (q *queries) CatalogSupersede(ctx context.Context, tenant, channel, branch, keepCommit string) (int, error) {
	res, err := q.db.ExecContext(ctx, `UPDATE catalogs SET status = 'superseded'
		WHERE tenant = ? AND channel = ? AND branch = ? AND status = 'active' AND commit_sha <> ?`,
		tenant, channel, branch, keepCommit)
	if err != nil {
		return 0, interpretError(err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}
