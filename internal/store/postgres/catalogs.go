package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/jobplane/jobplane/internal/store"
)

// ---- catalogs ----

const catalogCols = "tenant, channel, branch, commit_sha, status, errors, author, committed_at, loaded_at"

func scanCatalog(r pgx.Row) (*store.Catalog, error) {
	c := &store.Catalog{}
	err := r.Scan(&c.Tenant, &c.Channel, &c.Branch, &c.Commit, &c.Status, jsonCol{&c.Errors}, &c.Author,
		&c.CommittedAt, &c.LoadedAt)
	if err != nil {
		return nil, interpretError(err)
	}
	utc(&c.CommittedAt)
	utc(&c.LoadedAt)
	return c, nil
}

func (q *queries) CatalogGet(ctx context.Context, tenant, channel, branch, commit string) (*store.Catalog, error) {
	return scanCatalog(q.db.QueryRow(ctx, `SELECT `+catalogCols+` FROM catalogs
		WHERE tenant = $1 AND channel = $2 AND branch = $3 AND commit_sha = $4`, tenant, channel, branch, commit))
}

func (q *queries) CatalogInsert(ctx context.Context, c *store.Catalog) error {
	err := q.insert(ctx, `INSERT INTO catalogs (`+catalogCols+`)
		VALUES ($2, $3, $4, $5, $6, $7, $8, $9, `+nowSQL+`) ON CONFLICT DO NOTHING RETURNING loaded_at`,
		[]any{timeArg(c.LoadedAt), c.Tenant, c.Channel, c.Branch, c.Commit, c.Status, jsonArg(c.Errors), c.Author, c.CommittedAt},
		&c.LoadedAt)
	utc(&c.LoadedAt)
	return err
}

// catalogListSQL writes only the filters p gives (andFilters), so that a
// tenant's list reaches its rows through catalogs_by_status: a row is kept
// for every commit of every channel, superseded ones included.
func catalogListSQL(p *store.CatalogListParams) (string, []any) {
	conds, args := andFilters(nil,
		filter{"tenant = $%d", p.Tenant, p.Tenant != ""}, filter{"channel = $%d", p.Channel, p.Channel != ""},
		filter{"status = $%d", string(p.Status), p.Status != ""})
	args = append(args, limit(p.Limit))
	return fmt.Sprintf(`SELECT %s FROM catalogs WHERE TRUE%s ORDER BY loaded_at DESC, channel, branch, commit_sha LIMIT $%d`,
		catalogCols, conds, len(args)), args
}

func (q *queries) CatalogList(ctx context.Context, p *store.CatalogListParams) ([]*store.Catalog, error) {
	sql, args := catalogListSQL(p)
	rows, err := q.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	return collect(rows, func(r pgx.Rows) (*store.Catalog, error) { return scanCatalog(r) })
}

func (q *queries) CatalogSetStatus(ctx context.Context, c *store.Catalog) error {
	err := q.db.QueryRow(ctx, `UPDATE catalogs SET status = $2, loaded_at = `+nowSQL+`
		WHERE tenant = $3 AND channel = $4 AND branch = $5 AND commit_sha = $6 RETURNING loaded_at`,
		timeArg(c.LoadedAt), c.Status, c.Tenant, c.Channel, c.Branch, c.Commit).Scan(&c.LoadedAt)
	utc(&c.LoadedAt)
	return interpretError(err)
}

func (q *queries) CatalogSupersede(ctx context.Context, tenant, channel, branch, keepCommit string) (int, error) {
	tag, err := q.db.Exec(ctx, `UPDATE catalogs SET status = 'superseded'
		WHERE tenant = $1 AND channel = $2 AND branch = $3 AND status = 'active' AND commit_sha <> $4`,
		tenant, channel, branch, keepCommit)
	if err != nil {
		return 0, interpretError(err)
	}
	return int(tag.RowsAffected()), nil
}
