package sqlite

import (
	"context"
	"encoding/json"
	"math"

	"github.com/jobplane/jobplane/internal/store"
)

// ---- audit ----

func (q *queries) AuditAppend(ctx context.Context, e *store.AuditEvent) error {
	return interpretError(q.db.QueryRowContext(ctx, `INSERT INTO audit_events (tenant, at, actor, action, subject, details)
		VALUES (?, coalesce(?, `+nowSQL+`), ?, ?, ?, ?) RETURNING seq, at`,
		e.Tenant, micros(e.At), e.Actor, e.Action, e.Subject, jsonText(e.Details)).Scan(&e.Seq, timeCol{&e.At}))
}

const auditCols = `e.seq, e.tenant, e.at, e.actor, e.action, e.subject, e.details, coalesce(c.hash, ''), coalesce(c.prev_hash, '')`

func (q *queries) auditEvents(ctx context.Context, sql string, args ...any) ([]*store.AuditEvent, error) {
	rows, err := q.db.QueryContext(ctx, sql, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []*store.AuditEvent
	for rows.Next() {
		e := &store.AuditEvent{}
		if err := rows.Scan(&e.Seq, &e.Tenant, timeCol{&e.At}, &e.Actor, &e.Action, &e.Subject, jsonCol{&e.Details}, &e.Hash, &e.PrevHash); err != nil {
			return nil, interpretError(err)
		}
		out = append(out, e)
	}
	return out, interpretError(rows.Err())
}

// auditListSQL is AuditList's statement and arguments, with only the
// filters p gives (andFilters): with the subject a filter, a run's
// timeline read every event of its tenant.
func auditListSQL(p *store.AuditListParams) (string, []any) {
	conds, args := andFilters([]any{p.Tenant, p.After},
		filter{"e.subject = ?", p.RunID, p.RunID != ""}, filter{"e.actor = ?", p.Actor, p.Actor != ""},
		filter{"e.at >= ?", micros(p.Since), !p.Since.IsZero()}, filter{"e.seq < ?", p.Before, p.Before > 0})
	order := ""
	if p.Desc {
		order = " DESC"
	}
	return `SELECT ` + auditCols + ` FROM audit_events e LEFT JOIN audit_chain c ON c.seq = e.seq
		WHERE e.tenant = ? AND e.seq > ?` + conds + ` ORDER BY e.seq` + order + ` LIMIT ?`, append(args, limit(p.Limit))
}

func (q *queries) AuditList(ctx context.Context, p *store.AuditListParams) ([]*store.AuditEvent, error) {
	sql, args := auditListSQL(p)
	return q.auditEvents(ctx, sql, args...)
}

// auditScanSQL reads the events in (?1, ?2]; AuditScan passes the largest
// number for "no upper bound".
const auditScanSQL = `SELECT ` + auditCols + ` FROM audit_events e LEFT JOIN audit_chain c ON c.seq = e.seq
		WHERE e.seq > ?1 AND e.seq <= ?2 ORDER BY e.seq LIMIT ?3`

// AuditScan bounds the sequence on both sides in the index's terms (no
// upper bound is the largest number), so that events written after UpTo
// are not read to be thrown away.
func (q *queries) AuditScan(ctx context.Context, p *store.AuditScanParams) ([]*store.AuditEvent, error) {
	upTo := p.UpTo
	if upTo == 0 {
		upTo = math.MaxInt64
	}
	return q.auditEvents(ctx, auditScanSQL, p.After, upTo, limit(p.Limit))
}

func (q *queries) AuditChainHead(ctx context.Context) (*store.AuditSeal, error) {
	l := &store.AuditSeal{}
	err := q.db.QueryRowContext(ctx, `SELECT seq, prev_hash, hash, sealed_at FROM audit_chain ORDER BY seq DESC LIMIT 1`).
		Scan(&l.Seq, &l.PrevHash, &l.Hash, timeCol{&l.SealedAt})
	return l, interpretError(err)
}

func (q *queries) AuditChainList(ctx context.Context, after int64, n int) ([]*store.AuditSeal, error) {
	rows, err := q.db.QueryContext(ctx, `SELECT seq, prev_hash, hash, sealed_at FROM audit_chain WHERE seq > ? ORDER BY seq LIMIT ?`,
		after, limit(n))
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []*store.AuditSeal
	for rows.Next() {
		l := &store.AuditSeal{}
		if err := rows.Scan(&l.Seq, &l.PrevHash, &l.Hash, timeCol{&l.SealedAt}); err != nil {
			return nil, interpretError(err)
		}
		out = append(out, l)
	}
	return out, interpretError(rows.Err())
}

// AuditHorizon is the highest committed sequence number: SQLite has one
// writer at a time, so no transaction still running can hold a lower one
// (and a rolled-back number is drawn again by the next writer).
func (q *queries) AuditHorizon(ctx context.Context, _ int64) (store.AuditMark, error) {
	var m store.AuditMark
	err := q.db.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0) FROM audit_events`).Scan(&m.Seq)
	return m, interpretError(err)
}

// AuditHorizonReached is always true: see AuditHorizon.
func (q *queries) AuditHorizonReached(context.Context, store.AuditMark) (bool, error) {
	return true, nil
}

// AuditSealAppend writes a batch of links in one statement: the sealer
// holds the only write lock while it runs, so a statement per link would
// stall every other writer for the length of the batch.
func (q *queries) AuditSealAppend(ctx context.Context, seals []store.AuditSeal) error {
	if len(seals) == 0 {
		return nil
	}
	type link struct {
		Seq      int64  `json:"q"`
		Prev     string `json:"p"`
		Hash     string `json:"h"`
		SealedAt *int64 `json:"a,omitempty"`
	}
	rows := make([]link, len(seals))
	for i, l := range seals {
		rows[i] = link{Seq: l.Seq, Prev: l.PrevHash, Hash: l.Hash}
		if m, ok := micros(l.SealedAt).(int64); ok {
			rows[i].SealedAt = &m
		}
	}
	body, err := json.Marshal(rows)
	if err != nil {
		return err
	}
	_, err = q.db.ExecContext(ctx, `INSERT INTO audit_chain (seq, prev_hash, hash, sealed_at)
		SELECT json_extract(j.value, '$.q'), json_extract(j.value, '$.p'), json_extract(j.value, '$.h'),
			coalesce(json_extract(j.value, '$.a'), `+nowSQL+`)
		FROM json_each(?) AS j ORDER BY j.key`, string(body))
	return interpretError(err)
}

// AuditSealLock is a no-op: the write transaction already excludes every
// other writer.
func (q *queries) AuditSealLock(context.Context) error { return nil }
