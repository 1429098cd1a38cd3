package groupcommit

import (
	"context"
	"time"

	"github.com/jobplane/jobplane/internal/store"
)

// DefaultBatch bounds how many bodies share one transaction.
const DefaultBatch = 128

// DefaultConcurrency is how many group transactions may run their bodies
// at once on a store that runs writers concurrently (PostgreSQL), with as
// many more committing (see slot): calls only wait to be grouped when that
// many are already running, so a lightly loaded server answers as soon as
// its own transaction commits. A store with one writer (SQLite) gets one:
// the calls that arrive while it commits form the next group instead of
// queueing at the write lock one by one.
//
// Two, not more: with more transactions in flight each group is smaller
// and they wait on each other inside PostgreSQL (the same index pages, the
// same rows of a scope's queue, the write-ahead log's insertion locks).
// Measured with `jobplane bench` in shape E, alternated round by round
// (docs/benchmarks.md): two against four, PostgreSQL's CPU per lifecycle
// run fell by a quarter (998 -> 740 µs, medians of 6) and the lifecycle
// was faster in every round (1.07x); eight cost half as much again as
// four, and one left the database idle while each group's commit was
// flushed. The bound is on groups running their bodies, and as many more
// may be committing (slot), so the commits' flush waits do not leave the
// database idle. Operators with a larger database raise it
// (--commit-concurrency).
const DefaultConcurrency = 2

// singleWriterLinger: on a store with one writer, a group about to start
// with fewer than lingerBelow bodies waits this long, once, for more. Each
// commit writes every page the group dirtied to the log, and with a dozen
// callers most groups held one or two bodies. Measured with `jobplane
// bench` (alternated runs): 100 µs below 4 bodies halved the commits per run
// (3.8 → 2.1) and cut CPU per run by 8 %; 200 µs below 8 took them to 1.4
// and the lifecycle up another 8 % (8–20 % with claims of 4); 400 µs below
// 16 lost 15 % again on one-attempt claims, whose runners then mostly wait.
// A quiet server answers at most this much later.
const (
	singleWriterLinger = 200 * time.Microsecond
	lingerBelow        = 8
)

// Config tunes a Store.
type Config struct {
	// Batch bounds the calls that share one transaction; 0 is
	// DefaultBatch, 1 turns group commit off.
	Batch int
	// Concurrency bounds the group transactions running their bodies at
	// once on a store with concurrent writers, with as many more
	// committing; 0 is DefaultConcurrency. A store with one writer always
	// has one.
	Concurrency int
	// Refusal reports whether a body's error refuses its call on the
	// strength of what the transaction read (a 4xx answer), rather than
	// failing it. A refused body that followed others in its group runs
	// again alone before its caller is answered; nil counts every error
	// as a refusal.
	Refusal func(error) bool
}

// Store is a store.Store whose InTx and InTxNonce share one transaction
// among the calls waiting at that moment. Everything else is the
// underlying store's, except on a store whose one group transaction runs
// at a time (SQLite, or a concurrency of one), where NonceInsert and
// RunnerTouch go into the group transactions too: there even a
// single-statement write is a transaction of its own behind the write
// lock. On PostgreSQL an autocommit INSERT is one round trip where a
// transaction is three, and `jobplane bench` measured the grouped nonce
// slower there: it stays as it is.
type Store struct {
	store.Store
	c *committer
}

var _ store.Store = (*Store)(nil)

// New wraps st.
func New(st store.Store, cfg Config) *Store {
	return &Store{Store: st, c: newCommitter(st, cfg.Batch, cfg.Concurrency, cfg.Refusal)}
}

// InTx runs fn in a transaction shared with the other calls waiting now and
// returns once that transaction committed (nil) or fn's own error. As with
// any InTx, fn may run more than once and must have no effect outside tx.
func (s *Store) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	return s.c.do(ctx, nil, fn)
}

// InTxNonce is InTx for a signed request whose nonce n is still pending:
// n goes into the group's nonce statement, ahead of every body, and a
// known nonce refuses the call with store.ErrReplay before fn runs.
func (s *Store) InTxNonce(ctx context.Context, n *store.PendingNonce, fn func(tx store.Tx) error) error {
	return s.c.do(ctx, n, fn)
}

// NonceInsert records a nonce in a group transaction where one group
// runs at a time; ErrAlreadyExists when it is known, or when another call
// of the same group had it first.
func (s *Store) NonceInsert(ctx context.Context, runnerID, nonce string, expiresAt time.Time) error {
	if s.c.workers != 1 {
		return s.Store.NonceInsert(ctx, runnerID, nonce, expiresAt)
	}
	return s.c.doNonce(ctx, store.Nonce{RunnerID: runnerID, Nonce: nonce, ExpiresAt: expiresAt})
}

// RunnerTouch refreshes a runner's last-seen time, in a group transaction
// where one group runs at a time.
func (s *Store) RunnerTouch(ctx context.Context, id string, now *time.Time) error {
	if s.c.workers != 1 {
		return s.Store.RunnerTouch(ctx, id, now)
	}
	return s.c.do(ctx, nil, func(tx store.Tx) error { return tx.RunnerTouch(ctx, id, now) })
}

// Stats counts a Store's group transactions since it was made.
type Stats struct {
	Transactions int64 `json:"transactions"`
	Bodies       int64 `json:"bodies"`
}

// Stats reports the counters, for the benchmark's transactions per run.
func (s *Store) Stats() Stats {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return s.c.stats
}
