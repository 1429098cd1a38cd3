package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite" // the database/sql driver of the raw SQLite loop

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/config"
)

// The raw loop is the ceiling the issue compares jobplane with: a queue
// table with nothing but an id and a state, claimed with SKIP LOCKED and
// completed, in the same database the server used, with as many workers as
// the benchmark has runners. Per claim it spends one transaction (claim) and
// one autocommit statement (complete): one row per transaction. With Batch
// > 1 each worker claims and completes that many rows per statement, which
// is how queues such as River reach their rates.

// rawTable is created (and emptied) in the benchmark's database.
const rawTable = "jobplane_bench_raw"

// Raw is the outcome of the raw loop.
type Raw struct {
	// Batch is the rows claimed and completed per statement.
	Batch int   `json:"batch"`
	Phase Phase `json:"phase"`
	// Transactions is the number of commits the loop made (claims and
	// completions; the empty claims at the end included).
	Transactions int `json:"transactions"`
}

// RunRaw fills the raw table with n rows and has `workers` workers claim and
// complete them, batch rows at a time. It checks that every row was claimed
// exactly once and completed.
func RunRaw(ctx context.Context, dsn string, n, workers, batch int) (*Raw, error) {
	driver, rest, err := config.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	batch = max(batch, 1)
	var q rawQueue
	switch driver {
	case "postgres":
		pcfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			return nil, fmt.Errorf("raw loop: %w", err)
		}
		pcfg.MaxConns = int32(workers + 1)
		pool, err := pgxpool.NewWithConfig(ctx, pcfg)
		if err != nil {
			return nil, fmt.Errorf("raw loop: %w", err)
		}
		defer pool.Close()
		q = &pgRaw{pool: pool}
	case "sqlite":
		db, err := sql.Open("sqlite", "file:"+rest+"?_txlock=immediate&_pragma=busy_timeout(5000)&_pragma=journal_mode(wal)&_pragma=synchronous(normal)")
		if err != nil {
			return nil, fmt.Errorf("raw loop: %w", err)
		}
		defer db.Close()
		q = &sqliteRaw{db: db}
	default:
		return nil, fmt.Errorf("raw loop: store %q", driver)
	}
	if err := q.setup(ctx, n); err != nil {
		return nil, fmt.Errorf("raw loop: set up %s: %w", rawTable, err)
	}
	var txs atomic.Int64
	g, gctx := newGroup(ctx)
	dbm := newDBMeter(dsn)
	cpu0, db0 := processCPU(), dbm.now()
	start := clock.Real{}.Now()
	for range workers {
		g.Go(func() error {
			for {
				ids, err := q.claim(gctx, batch)
				txs.Add(1)
				if err != nil {
					return fmt.Errorf("raw loop: claim: %w", err)
				}
				if len(ids) == 0 {
					return nil
				}
				if err := q.complete(gctx, ids); err != nil {
					return fmt.Errorf("raw loop: complete: %w", err)
				}
				txs.Add(1)
			}
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	elapsed := clock.Real{}.Now().Sub(start)
	phase := newPhase(n, elapsed)
	phase.CPUPerOpUs, phase.DBCPUPerOpUs = cpuPerRun(cpu0, n), dbm.perRun(db0, n)
	done, bad, err := q.check(ctx)
	if err != nil {
		return nil, fmt.Errorf("raw loop: check: %w", err)
	}
	if done != n || bad != 0 {
		return nil, fmt.Errorf("raw loop: %d of %d rows completed, %d claimed other than once: %w", done, n, bad, ErrVerify)
	}
	return &Raw{Batch: batch, Phase: phase, Transactions: int(txs.Load())}, nil
}

type rawQueue interface {
	setup(ctx context.Context, n int) error
	claim(ctx context.Context, batch int) ([]int64, error)
	complete(ctx context.Context, ids []int64) error
	// check counts completed rows and rows not claimed exactly once.
	check(ctx context.Context) (done, bad int, err error)
}

type pgRaw struct{ pool *pgxpool.Pool }

func (p *pgRaw) setup(ctx context.Context, n int) error {
	_, err := p.pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+rawTable+` (
		id bigserial PRIMARY KEY, state text NOT NULL DEFAULT 'queued',
		claims int NOT NULL DEFAULT 0, finished_at timestamptz)`)
	if err != nil {
		return err
	}
	// The claim's index, the queued rows in claim order, as a queue would
	// have it: without one each claim walks the primary key past every row
	// claimed before, and the ceiling drops to about a third below a
	// queue's (docs/benchmarks.md). An index on
	// (state, id), as the SQLite table has, is not used here: planned when
	// every row is queued, the primary key looks as good, and the index
	// only costs the updates.
	if _, err := p.pool.Exec(ctx, `CREATE INDEX IF NOT EXISTS `+rawTable+`_queued ON `+rawTable+` (id) WHERE state = 'queued'`); err != nil {
		return err
	}
	if _, err := p.pool.Exec(ctx, `TRUNCATE `+rawTable); err != nil {
		return err
	}
	if _, err := p.pool.Exec(ctx, `INSERT INTO `+rawTable+` (state) SELECT 'queued' FROM generate_series(1, $1)`, n); err != nil {
		return err
	}
	_, err = p.pool.Exec(ctx, `ANALYZE `+rawTable)
	return err
}

// claim is one autocommit statement: a transaction of its own in one
// round trip, the least a claim can cost.
func (p *pgRaw) claim(ctx context.Context, batch int) ([]int64, error) {
	rows, err := p.pool.Query(ctx, `UPDATE `+rawTable+` SET state = 'running', claims = claims + 1
		WHERE id = ANY(ARRAY(SELECT id FROM `+rawTable+` WHERE state = 'queued' ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED))
		RETURNING id`, batch)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

func (p *pgRaw) complete(ctx context.Context, ids []int64) error {
	_, err := p.pool.Exec(ctx, `UPDATE `+rawTable+` SET state = 'done', finished_at = now() WHERE id = ANY($1)`, ids)
	return err
}

func (p *pgRaw) check(ctx context.Context) (done, bad int, err error) {
	err = p.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'done'), count(*) FILTER (WHERE claims <> 1) FROM `+rawTable).Scan(&done, &bad)
	return done, bad, err
}

// sqliteRaw queues its writers in Go, as the store does (one writer), rather
// than in SQLite's busy handler.
type sqliteRaw struct {
	db *sql.DB
	mu sync.Mutex
}

func (s *sqliteRaw) setup(ctx context.Context, n int) error {
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS ` + rawTable + ` (id INTEGER PRIMARY KEY, state TEXT NOT NULL DEFAULT 'queued',
			claims INTEGER NOT NULL DEFAULT 0, finished_at INTEGER)`,
		`CREATE INDEX IF NOT EXISTS ` + rawTable + `_state ON ` + rawTable + ` (state, id)`,
		`DELETE FROM ` + rawTable,
	} {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	_, err := s.db.ExecContext(ctx, `WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < ?)
		INSERT INTO `+rawTable+` (state) SELECT 'queued' FROM g`, n)
	return err
}

// claim takes the write lock (BEGIN IMMEDIATE): SQLite has one writer, so
// there is nothing to skip.
func (s *sqliteRaw) claim(ctx context.Context, batch int) ([]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.QueryContext(ctx, `UPDATE `+rawTable+` SET state = 'running', claims = claims + 1
		WHERE id IN (SELECT id FROM `+rawTable+` WHERE state = 'queued' ORDER BY id LIMIT ?) RETURNING id`, batch)
	if err != nil {
		return nil, err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			_ = rows.Close()
			return nil, err
		}
		ids = append(ids, id)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, err
	}
	return ids, tx.Commit()
}

func (s *sqliteRaw) complete(ctx context.Context, ids []int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	_, err := s.db.ExecContext(ctx, `UPDATE `+rawTable+` SET state = 'done', finished_at = unixepoch()
		WHERE id IN (?`+strings.Repeat(", ?", len(ids)-1)+`)`, args...)
	return err
}

func (s *sqliteRaw) check(ctx context.Context) (done, bad int, err error) {
	err = s.db.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE state = 'done'), count(*) FILTER (WHERE claims <> 1) FROM `+rawTable).Scan(&done, &bad)
	return done, bad, err
}
