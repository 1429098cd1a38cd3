package sqlite

import (
	"context"
	"database/sql"
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

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/jobplane/jobplane/internal/store"
)

//go:embed migrations/*.sql
var migrations embed.FS

// nowSQL is the database clock in the stored representation.
const nowSQL = "CAST(unixepoch('subsec')*1000000 AS INTEGER)"

// Store is a SQLite-backed store.Store.
type Store struct {
	queries
	db *sql.DB
	// stmts keeps the store's statements prepared (stmtcache.go).
	stmts *stmtCache
	// gate serializes this process's write transactions before they reach
	// SQLite, so that they queue in Go instead of spinning in the busy handler.
	gate chan struct{}
	// writer is the one connection write transactions use. SQLite keeps a
	// page cache per connection, valid as long as no other connection
	// wrote: the writer's own cache therefore stays warm, where a write
	// transaction on whichever pooled connection was free found its cache
	// stale and read the pages again.
	writer *sql.Conn

	wake store.WakeSignal

	commits atomic.Int64

	// The cached reads (see store.ReadCache): this process should be the
	// file's only writer, whose own writes are all the invalidation they
	// need; MaxAge covers another process writing the file anyway.
	store.CachedReads

	stopCheckpoints chan struct{}
	checkpointsDone chan struct{}
}

var _ store.Store = (*Store)(nil)

// maxConns bounds the store's connections.
const maxConns = 32

// Open opens (creating if needed) the database file at path and migrates it.
func Open(ctx context.Context, path string) (*Store, error) {
	dsn := "file:" + path + "?_txlock=immediate&_pragma=busy_timeout(5000)&_pragma=journal_mode(wal)" +
		"&_pragma=synchronous(normal)&_pragma=foreign_keys(1)" +
		fmt.Sprintf("&_pragma=wal_autocheckpoint(%d)", walSafetyPages)
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	// SQLite gains nothing from hundreds of connections (one writer, and
	// readers share the CPU), while each costs file descriptors: thousands
	// of runners calling at once would otherwise open one each and run the
	// process out of descriptors. Calls beyond this wait for a connection.
	db.SetMaxOpenConns(maxConns)
	// Every connection that is opened again re-runs the pragmas and
	// prepares each statement anew (stmtcache.go): with 8 kept idle, a busy
	// server kept closing and reopening the others, and `jobplane bench`
	// spent 5 % of its CPU in sqlite3_prepare. All are kept.
	db.SetMaxIdleConns(maxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	s := &Store{db: db, stmts: &stmtCache{db: db}, gate: make(chan struct{}, 1)}
	s.queries = queries{db: cachedDB{c: s.stmts, db: db}, s: s}
	s.CachedReads.Q = &s.queries
	if s.writer, err = db.Conn(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if err := s.migrate(ctx); err != nil {
		_ = s.writer.Close()
		_ = db.Close()
		return nil, err
	}
	// A second process on the same file (no server should be one; tests'
	// client processes are) has no way to announce its changes: none is
	// missed for longer than this.
	s.CachedReads.SetMaxAge(2 * time.Second)
	s.CachedReads.Enable(true)
	s.stopCheckpoints, s.checkpointsDone = make(chan struct{}), make(chan struct{})
	go s.checkpoints()
	return s, nil
}

// Checkpoints. SQLite copies the write-ahead log back into the database
// file in whichever connection commits past wal_autocheckpoint pages: with
// one writer, that was the writer, which stalled every waiting call for the
// copy's reads, writes and fsyncs. A background connection does it instead,
// on the other core, while the writer goes on appending to the log (a
// PASSIVE checkpoint takes no lock a writer needs). The writers' own
// checkpoint stays as a backstop at walSafetyPages, should this one fall
// behind.
const (
	checkpointEvery = 200 * time.Millisecond
	walSafetyPages  = 10000
)

func (s *Store) checkpoints() {
	defer close(s.checkpointsDone)
	t := time.NewTicker(checkpointEvery)
	defer t.Stop()
	last := s.commits.Load()
	for {
		select {
		case <-s.stopCheckpoints:
			return
		case <-t.C:
		}
		if n := s.commits.Load(); n != last {
			last = n
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			// A failure leaves the log to the next round or the backstop.
			_, _ = s.db.ExecContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`)
			cancel()
		}
	}
}

func (s *Store) migrate(ctx context.Context) error {
	names, err := fs.Glob(migrations, "migrations/*.up.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, name := range names {
		base := strings.TrimPrefix(name, "migrations/")
		version, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return fmt.Errorf("sqlite: migration %s: bad version: %w", base, err)
		}
		body, err := migrations.ReadFile(name)
		if err != nil {
			return err
		}
		err = s.inTx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
				version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)`); err != nil {
				return err
			}
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations WHERE version = ?`, version).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return nil
			}
			if _, err := tx.ExecContext(ctx, string(body)); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (?, `+nowSQL+`)`, version)
			return err
		})
		if err != nil {
			return fmt.Errorf("sqlite: migration %s: %w", base, err)
		}
	}
	return nil
}

// inTx runs fn in one BEGIN IMMEDIATE transaction behind the gate.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	select {
	case s.gate <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.gate }()
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return interpretError(err)
	}
	// Every way out but a commit rolls back, a panic in fn included
	// (net/http recovers a handler's): an open transaction would hold the
	// write lock, and the one writer connection, until the process ends.
	// After a commit it does nothing.
	defer func() { _ = tx.Rollback() }()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return interpretError(err)
	}
	s.commits.Add(1)
	return nil
}

// SingleWriter reports that write transactions run one at a time, so that
// callers may group their work into fewer of them.
func (s *Store) SingleWriter() bool { return true }

// InTxNonce is InTx that records a signed request's pending nonce first.
func (s *Store) InTxNonce(ctx context.Context, n *store.PendingNonce, fn func(tx store.Tx) error) error {
	return store.InTxWithNonce(ctx, s, n, fn)
}

// Commits counts the write transactions this store committed (for `jobplane
// bench`'s transactions per run).
func (s *Store) Commits() int64 { return s.commits.Load() }

// InTx runs fn in one write transaction. Another process holding the write
// lock past busy_timeout surfaces as SQLITE_BUSY, which is retried a few times
// like a serialization failure on PostgreSQL.
func (s *Store) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	const maxTries = 4
	for try := 1; ; try++ {
		st := &txState{}
		err := s.inTx(ctx, func(sqlTx *sql.Tx) error {
			return fn(&queries{db: cachedDB{c: s.stmts, db: s.db, tx: sqlTx}, s: s, tx: st})
		})
		st.forgetAll() // committed or not: forgetting too much costs one read
		if err == nil {
			if st.wake {
				s.broadcast()
			}
			return nil
		}
		if try >= maxTries && isBusy(err) {
			return fmt.Errorf("%w: %w", store.ErrContention, err)
		}
		if try >= maxTries || !isBusy(err) || ctx.Err() != nil {
			return err
		}
		time.Sleep(time.Duration(rand.IntN(20*try)+1) * time.Millisecond)
	}
}

// Wake returns the channel the next wake-up closes.
func (s *Store) Wake() <-chan struct{} { return s.wake.Wake() }

func (s *Store) broadcast() { s.wake.Broadcast() }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return nil
}

// Close closes the database.
func (s *Store) Close() error {
	if s.stopCheckpoints != nil {
		close(s.stopCheckpoints)
		<-s.checkpointsDone
	}
	s.stmts.close()
	return errors.Join(s.writer.Close(), s.db.Close())
}

// interpretError is the one place driver errors become the store's sentinels.
func interpretError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return fmt.Errorf("%w: %w", store.ErrAlreadyExists, err)
		}
	}
	return err
}

func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}
