package postgres

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobplane/jobplane/internal/store"
)

// Row-level security (migration 012, RELIABILITY MT3): every transaction
// declares the scope its context carries with set_config(..., true), which
// ends with the transaction, so a pooled connection never hands a tenant to
// the next one. A context without a scope declares nothing and the policies
// show it no tenant-owned row: a forgotten scope fails closed.

// setScopeSQL is the statement that declares a scope; both settings are
// always written, so that neither can survive from anywhere else.
func setScopeSQL(sc store.Scope) string {
	return "SELECT set_config('app.tenant_id', " + quoteLiteral(sc.Tenant) + ", true), set_config('app.system', " + quoteLiteral(sc.System) + ", true)"
}

// beginOptions opens a transaction and declares its scope in one
// simple-protocol message, so the scope costs no extra round trip.
func beginOptions(ctx context.Context) pgx.TxOptions {
	sc := store.ScopeOf(ctx)
	if sc.IsZero() {
		return pgx.TxOptions{}
	}
	return pgx.TxOptions{BeginQuery: "BEGIN; " + setScopeSQL(sc)}
}

// quoteLiteral quotes s as an SQL string literal. Scopes are tenant IDs and
// fixed names, but the begin statement is text, so it must not trust them.
func quoteLiteral(s string) string {
	s = strings.ReplaceAll(s, "\x00", "")
	if strings.Contains(s, `\`) {
		return "E'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", "''") + "'"
	}
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// scopedPool runs the statements the store sends outside InTx. With a
// scope, the scope and the statement go as one pipelined batch: the
// extended protocol runs everything before its Sync as one transaction, so
// set_config(..., true) covers the statement and ends with it, at no extra
// round trip. Without a scope the statement runs as is and fails closed.
type scopedPool struct{ pool *pgxpool.Pool }

func (p scopedPool) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	sc := store.ScopeOf(ctx)
	if sc.IsZero() {
		return p.pool.Exec(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	b.Queue(setScopeSQL(sc))
	b.Queue(sql, args...)
	br := p.pool.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	return tag, errors.Join(err, closeErr(br, err))
}

func (p scopedPool) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	sc := store.ScopeOf(ctx)
	if sc.IsZero() {
		return p.pool.Query(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	b.Queue(setScopeSQL(sc))
	b.Queue(sql, args...)
	br := p.pool.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

func (p scopedPool) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if store.ScopeOf(ctx).IsZero() {
		return p.pool.QueryRow(ctx, sql, args...)
	}
	rows, err := p.Query(ctx, sql, args...)
	return &batchRow{rows: rows, err: err}
}

// closeErr closes the batch; its error matters only when the statement
// itself succeeded (the commit at Sync can still fail).
func closeErr(br pgx.BatchResults, stmtErr error) error {
	err := br.Close()
	if stmtErr != nil {
		return nil
	}
	return err
}

// batchRows releases the batch (and its connection) with the rows.
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	closed bool
	err    error
}

func (r *batchRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	r.err = closeErr(r.br, r.Rows.Err())
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// batchRow is QueryRow over batchRows: ErrNoRows when empty, like pgx.
type batchRow struct {
	rows pgx.Rows
	err  error
}

func (r *batchRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}
