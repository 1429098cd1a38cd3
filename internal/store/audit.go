package store

import (
	"context"
	"time"
)

// AuditSeal is one link of the audit hash chain: the hash of the event with
// sequence number Seq, computed over the previous link's hash and the
// event's canonical encoding (internal/audit). Links live in their own
// append-only table, so sealing never rewrites an event row.
type AuditSeal struct {
	Seq      int64
	PrevHash string // hex SHA-256 of the previous link; 64 zeros for the first
	Hash     string // hex SHA-256
	SealedAt time.Time
}

// AuditMark is a candidate sealing horizon: every sequence number up to Seq
// has been drawn, and once the mark is reached (AuditHorizonReached) no
// transaction that drew one of them can still commit. Horizon is opaque
// backend state (a transaction ID on PostgreSQL).
type AuditMark struct {
	Seq     int64
	Horizon uint64
}

// AuditScanParams read events of every tenant in sequence order, for sealing
// and verification.
type AuditScanParams struct {
	After int64 // Seq > After
	UpTo  int64 // Seq <= UpTo; 0 means no bound
	Limit int
}

// AuditQueries are the audit chain methods of Queries.
type AuditQueries interface {
	// AuditChainHead returns the last link of the chain; ErrNotFound when
	// nothing is sealed yet.
	AuditChainHead(ctx context.Context) (*AuditSeal, error)
	// AuditChainList lists links with Seq > after in order.
	AuditChainList(ctx context.Context, after int64, limit int) ([]*AuditSeal, error)
	// AuditHorizon draws a candidate sealing horizon (see AuditMark). When
	// no number above after was drawn it returns Seq <= after and draws
	// nothing (an idle sealer costs PostgreSQL no transaction IDs).
	AuditHorizon(ctx context.Context, after int64) (AuditMark, error)
	// AuditHorizonReached reports whether every transaction that could still
	// commit an event with Seq <= m.Seq has ended. Call it outside a
	// transaction: the caller's own transaction would hold the horizon back.
	AuditHorizonReached(ctx context.Context, m AuditMark) (bool, error)
	// AuditScan reads events of every tenant in sequence order.
	AuditScan(ctx context.Context, p *AuditScanParams) ([]*AuditEvent, error)
	// AuditSealAppend appends links; a link for an already sealed Seq is
	// ErrAlreadyExists (two sealers can never fork the chain).
	AuditSealAppend(ctx context.Context, seals []AuditSeal) error
	// AuditSealLock serializes sealers (across replicas) until the
	// transaction ends; writers of events never take it.
	AuditSealLock(ctx context.Context) error
}
