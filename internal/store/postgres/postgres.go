package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/store"
)

//go:embed migrations/*.sql
var migrations embed.FS

// channelBase is the NOTIFY channel of the default schema. A store in another
// schema is another installation and gets its own channel, so that neither
// wakes the other's claimers (and parallel tests stay independent).
const channelBase = "jobplane_work"

// Store is a PostgreSQL-backed store.Store.
type Store struct {
	queries
	pool    *pgxpool.Pool
	channel string

	wake store.WakeSignal

	stopListen context.CancelFunc
	listenDone chan struct{}

	// instance is the NOTIFY payload of this process's wake-ups: the
	// process wakes its own claimers right after its commit, and the
	// listener ignores the echo (see WakeClaimers).
	instance string

	commits atomic.Int64

	// runners and installs cache rows read on every request (see
	// store.ReadCache). A change is announced on the wake-up channel with
	// a payload naming the row (notifyRunner, notifyInstallation), so that
	// every server forgets it at the writer's commit; the caches are on
	// only while the listener is connected.
	store.CachedReads
}

// cacheMaxAge bounds the staleness of a cached runner or installation
// when announcements are lost without the listener noticing (store.ReadCache).
const cacheMaxAge = 10 * time.Second

// Payload prefixes of cache announcements (any other payload is a wake-up).
const (
	notifyRunner       = "runner:"
	notifyInstallation = "installation:"
	notifyToken        = "token:"
)

// announced forgets what a notification payload names; false for a wake-up.
func (s *Store) announced(payload string) bool {
	switch {
	case strings.HasPrefix(payload, notifyRunner):
		s.CachedReads.Runners.Forget(strings.TrimPrefix(payload, notifyRunner))
	case strings.HasPrefix(payload, notifyInstallation):
		s.CachedReads.Installs.Forget(strings.TrimPrefix(payload, notifyInstallation))
	case strings.HasPrefix(payload, notifyToken):
		s.CachedReads.Tokens.Forget(strings.TrimPrefix(payload, notifyToken))
	default:
		return false
	}
	return true
}

func (s *Store) enableCaches(on bool) { s.CachedReads.Enable(on) }

var _ store.Store = (*Store)(nil)

// Open connects, migrates, and starts the LISTEN connection.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse dsn: %w", err)
	}
	// pgxpool's default (max(4, CPUs)) starves a server whose long-polling
	// claims and log followers each hold a request: unless the DSN says
	// otherwise (pool_max_conns), allow more.
	if !strings.Contains(dsn, "pool_max_conns") {
		cfg.MaxConns = max(cfg.MaxConns, 20)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	s := &Store{pool: pool, listenDone: make(chan struct{}), instance: id.Secret(16)}
	s.queries = queries{db: &scopedDB{db: pool}, s: s}
	s.CachedReads.Q = &s.queries
	fail := func(err error) (*Store, error) {
		pool.Close()
		return nil, err
	}
	if err := s.migrate(ctx); err != nil {
		return fail(err)
	}
	var schema string
	if err := pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return fail(interpretError(err))
	}
	s.channel = channelBase
	if schema != "public" {
		s.channel = channelBase + "_" + schema
	}
	// The first LISTEN is synchronous so that a NOTIFY sent right after Open
	// is not missed.
	conn, err := s.listenConn(ctx, cfg.ConnConfig)
	if err != nil {
		return fail(fmt.Errorf("%w: listen: %w", store.ErrUnavailable, err))
	}
	s.CachedReads.SetMaxAge(cacheMaxAge)
	s.enableCaches(true)
	lctx, cancel := context.WithCancel(context.Background())
	s.stopListen = cancel
	go s.listen(lctx, cfg.ConnConfig, conn)
	return s, nil
}

func (s *Store) migrate(ctx context.Context) error {
	names, err := fs.Glob(migrations, "migrations/*.up.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	applied, err := s.appliedMigrations(ctx)
	if err != nil {
		return fmt.Errorf("postgres: read applied migrations: %w", interpretError(err))
	}
	for _, name := range names {
		base := strings.TrimPrefix(name, "migrations/")
		version, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return fmt.Errorf("postgres: migration %s: bad version: %w", base, err)
		}
		if applied[version] {
			continue
		}
		body, err := migrations.ReadFile(name)
		if err != nil {
			return err
		}
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			// Concurrent server starts on one schema wait here instead of
			// racing to create the same tables.
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('jobplane.migrations:' || current_schema()))`); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
				version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT clock_timestamp())`); err != nil {
				return err
			}
			var done bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)`, version).Scan(&done); err != nil {
				return err
			}
			if done {
				return nil
			}
			// The owner is bound by row-level security too (FORCE, 012): a
			// migration that moves data must see every tenant's rows.
			if _, err := tx.Exec(ctx, setScopeSQL(store.Scope{System: "migrate"})); err != nil {
				return err
			}
			// Simple protocol: a migration file holds several statements.
			if _, err := tx.Exec(ctx, string(body), pgx.QueryExecModeSimpleProtocol); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version) VALUES ($1)`, version)
			return err
		})
		if err != nil {
			return fmt.Errorf("postgres: migration %s: %w", base, interpretError(err))
		}
	}
	return nil
}

func (s *Store) listenConn(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg.Copy())
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, `LISTEN `+pgx.Identifier{s.channel}.Sanitize()); err != nil {
		_ = conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

// listen owns one dedicated connection. After a reconnect it broadcasts once:
// notifications sent while it was away are lost, and a spurious wake only
// costs claimers one empty poll.
func (s *Store) listen(ctx context.Context, cfg *pgx.ConnConfig, conn *pgx.Conn) {
	defer close(s.listenDone)
	backoff := 50 * time.Millisecond
	for {
		if conn != nil {
			for {
				n, err := conn.WaitForNotification(ctx)
				if err != nil {
					break
				}
				if !s.announced(n.Payload) && n.Payload != s.instance {
					s.broadcast()
				}
			}
			// Changes announced from now on would be missed.
			s.enableCaches(false)
			closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = conn.Close(closeCtx)
			cancel()
			conn = nil
		}
		if ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff + time.Duration(rand.Int64N(int64(backoff)))):
		}
		var err error
		if conn, err = s.listenConn(ctx, cfg); err != nil {
			conn = nil
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		s.enableCaches(true)
		s.broadcast()
	}
}

// InTx runs fn in one READ COMMITTED transaction, retrying it on
// serialization failures and deadlocks.
func (s *Store) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	const maxTries = 5
	for try := 1; ; try++ {
		err := s.tryTx(ctx, fn)
		if err != nil && try >= maxTries && retryable(err) {
			return fmt.Errorf("%w: %w", store.ErrContention, err)
		}
		if err == nil || try >= maxTries || !retryable(err) || ctx.Err() != nil {
			return err
		}
		d := time.Duration(rand.Int64N(int64(5*time.Millisecond)*int64(try))) + time.Millisecond
		select {
		case <-ctx.Done():
			return err
		case <-time.After(d):
		}
	}
}

// InTxNonce is InTx that records a signed request's pending nonce first.
func (s *Store) InTxNonce(ctx context.Context, n *store.PendingNonce, fn func(tx store.Tx) error) error {
	return store.InTxWithNonce(ctx, s, n, fn)
}

// SingleWriter reports that writers run concurrently and wait for each
// other's row locks.
func (s *Store) SingleWriter() bool { return false }

func (s *Store) tryTx(ctx context.Context, fn func(tx store.Tx) error) error {
	tx, err := s.pool.BeginTx(ctx, beginOptions(ctx))
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			return interpretError(err)
		}
		return fmt.Errorf("%w: begin: %w", store.ErrUnavailable, err)
	}
	// Every way out but a commit rolls back, panics included: net/http
	// recovers a handler's panic and goes on, and t.FailNow in a test ends
	// the goroutine; either would otherwise leave the connection checked
	// out with its transaction open and its row locks held, and the pool
	// unable to close. After a commit it does nothing.
	defer func() { _ = tx.Rollback(ctx) }()
	q := &queries{db: &scopedDB{db: tx, inTx: true, cur: store.ScopeOf(ctx)}, s: s, read: map[*store.Run]runRecords{}}
	if err := fn(q); err != nil {
		return err
	}
	if err := q.flushLater(ctx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		q.forgetAll()
		var pgErr *pgconn.PgError
		switch {
		case errors.Is(err, pgx.ErrTxCommitRollback), errors.As(err, &pgErr):
			// The server answered: the transaction did not commit.
			return interpretError(err)
		default:
			if q.woke || q.wokeHere {
				s.broadcast() // it may have committed: a spurious wake is harmless
			}
			return fmt.Errorf("%w: %w", store.ErrCommitUnknown, err)
		}
	}
	s.commits.Add(1)
	q.forgetAll()
	if q.woke || q.wokeHere {
		s.broadcast()
	}
	return nil
}

// Commits counts the transactions InTx committed (for `jobplane bench`'s
// transactions per run).
func (s *Store) Commits() int64 { return s.commits.Load() }

func retryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}

// Wake returns the channel the next wake-up closes.
func (s *Store) Wake() <-chan struct{} { return s.wake.Wake() }

func (s *Store) broadcast() { s.wake.Broadcast() }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return nil
}

// Close stops the listener and closes the pool.
func (s *Store) Close() error {
	s.stopListen()
	<-s.listenDone
	s.pool.Close()
	return nil
}

// interpretError is the one place driver errors become the store's sentinels.
// The driver error stays in the chain for logs and for retry decisions.
func interpretError(err error) error {
	if err == nil {
		return nil
	}
	for _, sentinel := range []error{store.ErrNotFound, store.ErrAlreadyExists, store.ErrCommitUnknown, store.ErrUnavailable} {
		if errors.Is(err, sentinel) {
			return err
		}
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if pgErr.Code == "23505" {
			return fmt.Errorf("%w: %w", store.ErrAlreadyExists, err)
		}
		if store.ConnectionLost(err) {
			return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		}
		return err
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) || store.ConnectionLost(err) {
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return err
}
