package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/jobplane/jobplane/internal/store"
)

// Writes made outside a transaction go through the write gate too: without
// it they would collide with BEGIN IMMEDIATE and sleep in SQLite's busy
// handler (which backs off up to 100 ms), and the hottest of them — the
// nonce of every signed request — would set the tail latency of every call.

func (s *Store) gated(ctx context.Context, fn func(q *queries) error) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		return fn(&queries{db: cachedDB{c: s.stmts, db: s.db, tx: tx}, s: s, tx: &txState{}})
	})
}

// NonceInsert records a nonce behind the write gate.
func (s *Store) NonceInsert(ctx context.Context, runnerID, nonce string, expiresAt time.Time) error {
	return s.gated(ctx, func(q *queries) error { return q.NonceInsert(ctx, runnerID, nonce, expiresAt) })
}

// NoncePurge deletes expired nonces behind the write gate.
func (s *Store) NoncePurge(ctx context.Context, now *time.Time) (n int, err error) {
	err = s.gated(ctx, func(q *queries) error {
		n, err = q.NoncePurge(ctx, now)
		return err
	})
	return n, err
}

// RunnerTouch refreshes a runner's last-seen time behind the write gate.
func (s *Store) RunnerTouch(ctx context.Context, runnerID string, now *time.Time) error {
	return s.gated(ctx, func(q *queries) error { return q.RunnerTouch(ctx, runnerID, now) })
}

// CredentialCreate records a credential behind the write gate.
func (s *Store) CredentialCreate(ctx context.Context, c *store.Credential) error {
	return s.gated(ctx, func(q *queries) error { return q.CredentialCreate(ctx, c) })
}

// CredentialMarkFailed counts a failed revocation behind the write gate.
func (s *Store) CredentialMarkFailed(ctx context.Context, id string) error {
	return s.gated(ctx, func(q *queries) error { return q.CredentialMarkFailed(ctx, id) })
}

// CredentialMarkRevoked marks a credential revoked behind the write gate.
func (s *Store) CredentialMarkRevoked(ctx context.Context, id string, now *time.Time) error {
	return s.gated(ctx, func(q *queries) error { return q.CredentialMarkRevoked(ctx, id, now) })
}

// SigningKeyDelete removes a signing key behind the write gate.
func (s *Store) SigningKeyDelete(ctx context.Context, kid string) error {
	return s.gated(ctx, func(q *queries) error { return q.SigningKeyDelete(ctx, kid) })
}
