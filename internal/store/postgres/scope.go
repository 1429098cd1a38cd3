package postgres

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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

// batcher is the pool or a transaction.
type batcher interface {
	dbtx
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// scopedDB gives each statement the scope of its context.
//
// On the pool (statements the store runs outside InTx), a scope and the
// statement go as one pipelined batch: the extended protocol runs
// everything before its Sync as one transaction, so set_config(..., true)
// covers the statement and ends with it, at no extra round trip. Without a
// scope the statement runs as is and fails closed.
//
// In a transaction, which declared its context's scope at BEGIN, a
// statement whose context declares another scope re-declares it first, in
// the same batch: the group committer runs the bodies of several callers,
// of several tenants, in one transaction, and each body keeps its own.
type scopedDB struct {
	db   batcher
	inTx bool
	cur  store.Scope // in a transaction: the scope declared last
}

// inTx reports whether q runs in a transaction (its statements commit with
// it, so a wake-up waits for the commit).
func (q *queries) inTx() bool {
	if d, ok := q.db.(*scopedDB); ok {
		return d.inTx
	}
	_, ok := q.db.(pgx.Tx)
	return ok
}

// declare reports the scope to declare before a statement with ctx, if any.
func (d *scopedDB) declare(ctx context.Context) (store.Scope, bool) {
	sc := store.ScopeOf(ctx)
	if d.inTx {
		if sc == d.cur {
			return sc, false
		}
		d.cur = sc
		return sc, true
	}
	return sc, !sc.IsZero()
}

// genericMark begins a statement that is to run with a generic plan:
// PostgreSQL then plans it once per connection instead of at every call.
// Left to choose, it plans a statement with array parameters anew each
// time (a custom plan knows each array's length, so it always looks
// cheaper); for the statements that move a call's rows in one go, that
// planning was a third of their cost. Only statements whose plan does not depend on
// a parameter's value may be marked: a generic plan cannot use a partial
// index whose predicate a parameter would have to prove.
//
// A marked statement is also planned with sequential scans disabled. Its
// plan is made at its first call on a connection and kept while the
// tables grow: only ANALYZE replaces it, and never where autovacuum is
// off. Planned on a new, empty table, a join by primary key is a hash
// join over the whole table, and that plan then reads the whole table at
// every call (LogAppends did: 4.5 ms a call at 8,000 log lines). Every
// marked statement reaches a bounded set of rows by key, so an index path
// is always the right one; TestGenericPlansProbeIndexes checks that each
// gets one.
const genericMark = "/* generic plan */ "

// generic marks sql to run with a generic plan (genericMark).
func generic(sql string) string { return genericMark + sql }

const (
	// setGenericSQL keeps the two settings' values to restore before it
	// changes them (CASE evaluates WHEN first), and resetGenericSQL puts
	// them back: one statement each way, and a setting the operator or the
	// transaction chose is what the next statement gets.
	setGenericSQL = `SELECT CASE WHEN set_config('jobplane.generic_restore',
		current_setting('plan_cache_mode') || ' ' || current_setting('enable_seqscan'), true) <> ''
		THEN set_config('plan_cache_mode', 'force_generic_plan', true) || set_config('enable_seqscan', 'off', true) END`
	resetGenericSQL = `SELECT set_config('plan_cache_mode', split_part(current_setting('jobplane.generic_restore'), ' ', 1), true),
		set_config('enable_seqscan', split_part(current_setting('jobplane.generic_restore'), ' ', 2), true)`
)

// send runs sql with what must precede it in the same batch (one round
// trip): the scope declaration when scoped, and for a statement marked
// generic the plan mode, set for it alone (the batch's statements share
// the transaction, or the one its Sync ends). It reads the results of
// what precedes sql; the caller reads the statement's and closes the
// batch, which reads what follows.
func (d *scopedDB) send(ctx context.Context, sc store.Scope, scoped, gen bool, sql string, args []any) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	if scoped {
		b.Queue(setScopeSQL(sc))
	}
	if gen {
		b.Queue(setGenericSQL)
	}
	before := b.Len()
	b.Queue(sql, args...)
	if gen {
		b.Queue(resetGenericSQL)
	}
	br := d.db.SendBatch(ctx, b)
	for range before {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return nil, err
		}
	}
	return br, nil
}

func (d *scopedDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	sc, ok := d.declare(ctx)
	gen := strings.HasPrefix(sql, genericMark)
	if !ok && !gen {
		return d.db.Exec(ctx, sql, args...)
	}
	br, err := d.send(ctx, sc, ok, gen, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	return tag, errors.Join(err, closeErr(br, err))
}

func (d *scopedDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	sc, ok := d.declare(ctx)
	gen := strings.HasPrefix(sql, genericMark)
	if !ok && !gen {
		return d.db.Query(ctx, sql, args...)
	}
	br, err := d.send(ctx, sc, ok, gen, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

func (d *scopedDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	sc, ok := d.declare(ctx)
	gen := strings.HasPrefix(sql, genericMark)
	if !ok && !gen {
		return d.db.QueryRow(ctx, sql, args...)
	}
	br, err := d.send(ctx, sc, ok, gen, sql, args)
	if err != nil {
		return &batchRow{err: err}
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return &batchRow{err: err}
	}
	return &batchRow{rows: &batchRows{Rows: rows, br: br}}
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
