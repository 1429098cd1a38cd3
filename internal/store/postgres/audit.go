package postgres

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/jobplane/jobplane/internal/store"
)

// ---- audit ----

// AuditAppend draws the transaction's ID before the event's sequence number:
// the materialized CTE yields its row (assigning the ID) before the INSERT
// projects that row, which evaluates the seq default. The sealer's horizon
// (AuditHorizon) depends on that order: a transaction that holds a sequence
// number always has an ID the snapshot can see running.
//
// In a transaction the event is written just before the commit, with the
// transaction's other events (flushLater), and e.Seq is set then; an
// event without a time gets the database clock of that moment.
func (q *queries) AuditAppend(ctx context.Context, e *store.AuditEvent) error {
	if q.inTx() {
		q.later.audit = append(q.later.audit, laterAudit{ctx: context.WithoutCancel(ctx), e: e})
		return nil
	}
	err := q.db.QueryRow(ctx, `WITH x AS MATERIALIZED (SELECT pg_current_xact_id() AS xid)
		INSERT INTO audit_events (xid, tenant, at, actor, action, subject, details)
		SELECT x.xid, $2, `+nowSQL+`, $3, $4, $5, $6 FROM x RETURNING seq, at`,
		timeArg(e.At), e.Tenant, e.Actor, e.Action, e.Subject, jsonArg(e.Details)).Scan(&e.Seq, &e.At)
	utc(&e.At)
	return interpretError(err)
}

// The reads of events join their links in audit_chain with a condition
// that repeats the events' lower bound on seq (c.seq > after): PostgreSQL
// does not carry e.seq's bound across the join, and without it a merge
// join reads the chain's index from its first link, so that each sealing
// round cost time in proportion to the whole history.
//
// Every other bound is written only when it is given, so that it is an
// index condition of the statement's generic plan, which a prepared
// statement gets after a few calls. A condition that also holds when its
// filter is empty (e.subject = $3 OR $3 is the empty string) is a filter
// there: a run's timeline read every event of its tenant (40 ms at 60,000
// events), and the sealer's scan, whose upper bound was such a condition
// ($2 = 0 OR e.seq <= $2), read every event written after its horizon at
// each call (11 ms for 500 events with 30,000 beyond them).
const auditCols = `e.seq, e.tenant, e.at, e.actor, e.action, e.subject, e.details, coalesce(c.hash, ''), coalesce(c.prev_hash, '')`

// auditListSQL is AuditList's statement for the filters p gives, and its
// arguments.
func auditListSQL(p *store.AuditListParams) (string, []any) {
	conds, args := andFilters([]any{p.Tenant, p.After},
		filter{"e.subject = $%d", p.RunID, p.RunID != ""}, filter{"e.actor = $%d", p.Actor, p.Actor != ""},
		filter{"e.at >= $%d", p.Since, !p.Since.IsZero()}, filter{"e.seq < $%d", p.Before, p.Before > 0})
	args = append(args, limit(p.Limit))
	return fmt.Sprintf(`SELECT %s FROM audit_events e LEFT JOIN audit_chain c ON c.seq = e.seq AND c.seq > $2
		WHERE e.tenant = $1 AND e.seq > $2%s ORDER BY e.seq%s LIMIT $%d`, auditCols, conds, auditOrder(p), len(args)), args
}

func auditOrder(p *store.AuditListParams) string {
	if p.Desc {
		return " DESC"
	}
	return ""
}

// auditScanSQL reads the events in (after, upTo]; AuditScan passes the
// largest sequence number for "no upper bound".
const auditScanSQL = `SELECT ` + auditCols + ` FROM audit_events e LEFT JOIN audit_chain c ON c.seq = e.seq AND c.seq > $1
		WHERE e.seq > $1 AND e.seq <= $2 ORDER BY e.seq LIMIT $3`

func (q *queries) auditEvents(ctx context.Context, sql string, args ...any) ([]*store.AuditEvent, error) {
	rows, err := q.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []*store.AuditEvent
	for rows.Next() {
		e := &store.AuditEvent{}
		if err := rows.Scan(&e.Seq, &e.Tenant, &e.At, &e.Actor, &e.Action, &e.Subject, jsonCol{&e.Details}, &e.Hash, &e.PrevHash); err != nil {
			return nil, interpretError(err)
		}
		utc(&e.At)
		out = append(out, e)
	}
	return out, interpretError(rows.Err())
}

func (q *queries) AuditList(ctx context.Context, p *store.AuditListParams) ([]*store.AuditEvent, error) {
	if err := q.flushAudit(); err != nil {
		return nil, err
	}
	sql, args := auditListSQL(p)
	return q.auditEvents(ctx, sql, args...)
}

func (q *queries) AuditScan(ctx context.Context, p *store.AuditScanParams) ([]*store.AuditEvent, error) {
	if err := q.flushAudit(); err != nil {
		return nil, err
	}
	upTo := p.UpTo
	if upTo == 0 {
		upTo = math.MaxInt64
	}
	return q.auditEvents(ctx, auditScanSQL, p.After, upTo, limit(p.Limit))
}

func (q *queries) AuditChainHead(ctx context.Context) (*store.AuditSeal, error) {
	l := &store.AuditSeal{}
	err := q.db.QueryRow(ctx, `SELECT seq, prev_hash, hash, sealed_at FROM audit_chain ORDER BY seq DESC LIMIT 1`).
		Scan(&l.Seq, &l.PrevHash, &l.Hash, &l.SealedAt)
	utc(&l.SealedAt)
	return l, interpretError(err)
}

func (q *queries) AuditChainList(ctx context.Context, after int64, n int) ([]*store.AuditSeal, error) {
	rows, err := q.db.Query(ctx, `SELECT seq, prev_hash, hash, sealed_at FROM audit_chain WHERE seq > $1 ORDER BY seq LIMIT $2`,
		after, limit(n))
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []*store.AuditSeal
	for rows.Next() {
		l := &store.AuditSeal{}
		if err := rows.Scan(&l.Seq, &l.PrevHash, &l.Hash, &l.SealedAt); err != nil {
			return nil, interpretError(err)
		}
		utc(&l.SealedAt)
		out = append(out, l)
	}
	return out, interpretError(rows.Err())
}

// AuditHorizon reads the sequence first and then assigns itself a
// transaction ID, in two statements: every transaction that drew a number
// up to Seq had its ID before the number (AuditAppend), so before ours, so
// below it. Once the oldest running transaction is at or above our ID, all
// of them have ended. (A snapshot's xmax would not do: it is the latest
// completed ID plus one, and a running transaction can be above it.) The
// cost is one transaction ID per sealing round.
func (q *queries) AuditHorizon(ctx context.Context, after int64) (store.AuditMark, error) {
	if err := q.flushAudit(); err != nil {
		return store.AuditMark{}, err
	}
	var m store.AuditMark
	var last *int64
	if err := q.db.QueryRow(ctx, `SELECT pg_sequence_last_value(pg_get_serial_sequence('audit_events', 'seq'))`).Scan(&last); err != nil {
		return m, interpretError(err)
	}
	if last != nil {
		m.Seq = *last
	}
	if m.Seq <= after {
		return m, nil
	}
	var xid string
	if err := q.db.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&xid); err != nil {
		return m, interpretError(err)
	}
	h, err := strconv.ParseUint(xid, 10, 64)
	if err != nil {
		return m, err
	}
	m.Horizon = h
	return m, nil
}

func (q *queries) AuditHorizonReached(ctx context.Context, m store.AuditMark) (bool, error) {
	var ok bool
	err := q.db.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot()) >= $1::text::xid8`,
		strconv.FormatUint(m.Horizon, 10)).Scan(&ok)
	return ok, interpretError(err)
}

func (q *queries) AuditSealAppend(ctx context.Context, seals []store.AuditSeal) error {
	if len(seals) == 0 {
		return nil
	}
	seqs := make([]int64, len(seals))
	prev := make([]string, len(seals))
	hash := make([]string, len(seals))
	for i, l := range seals {
		seqs[i], prev[i], hash[i] = l.Seq, l.PrevHash, l.Hash
	}
	_, err := q.db.Exec(ctx, `INSERT INTO audit_chain (seq, prev_hash, hash, sealed_at)
		SELECT s, p, h, clock_timestamp() FROM unnest($1::bigint[], $2::text[], $3::text[]) AS u(s, p, h)`, seqs, prev, hash)
	return interpretError(err)
}

// AuditSealLock is a transaction-scoped advisory lock per schema: sealers of
// one installation take turns, writers never wait for it.
func (q *queries) AuditSealLock(ctx context.Context) error {
	_, err := q.db.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('jobplane.audit.seal:' || current_schema()))`)
	return interpretError(err)
}

// laterWrites is what a transaction writes at its end (queries.later).
type laterWrites struct {
	audit []laterAudit
}

type laterAudit struct {
	ctx context.Context // the event's scope
	e   *store.AuditEvent
}

// laterAuditSQL inserts a transaction's events in their order. The
// transaction's ID is drawn before their sequence numbers (AuditAppend);
// $7 and $8, when $9, are the wake-up notification, sent by the same
// statement (its scalar subquery runs once).
const laterAuditSQL = `WITH x AS MATERIALIZED (SELECT pg_current_xact_id() AS xid),
		w AS MATERIALIZED (SELECT pg_notify($7, $8) WHERE $9)
	INSERT INTO audit_events (xid, tenant, at, actor, action, subject, details)
	SELECT x.xid, u.tenant, coalesce(u.at, clock_timestamp()), u.actor, u.action, u.subject, u.details::json
	FROM x, unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::text[])
		WITH ORDINALITY AS u(tenant, at, actor, action, subject, details, ord)
	WHERE (SELECT count(*) FROM w) >= 0
	ORDER BY u.ord
	RETURNING seq, at`

// flushLater writes what the transaction kept for its end: its audit
// events, in runs of one scope, each run one statement, the last of them
// carrying the wake-up notification (or that alone when there are none).
func (q *queries) flushLater(ctx context.Context) error {
	if len(q.later.audit) == 0 {
		if q.woke {
			_, err := q.db.Exec(ctx, `SELECT pg_notify($1, $2)`, q.s.channel, q.s.instance)
			return interpretError(err)
		}
		return nil
	}
	return q.writeAudit(q.woke)
}

// flushAudit writes the events kept so far, before a read of the audit log
// in the same transaction (the notification still waits for the end).
func (q *queries) flushAudit() error { return q.writeAudit(false) }

// writeAudit writes the events kept so far, one statement per run of one
// scope, the last carrying the notification when notify.
//
// Outside a transaction nothing is kept, and the store's shared queries
// value must not be written: concurrent reads of the audit log (the sealer,
// a verification) all come through it.
func (q *queries) writeAudit(notify bool) error {
	if len(q.later.audit) == 0 {
		return nil
	}
	evs := q.later.audit
	q.later.audit = nil
	for len(evs) > 0 {
		n := 1
		for n < len(evs) && store.ScopeOf(evs[n].ctx) == store.ScopeOf(evs[0].ctx) {
			n++
		}
		if err := q.insertAudit(evs[:n], notify && n == len(evs)); err != nil {
			return err
		}
		evs = evs[n:]
	}
	return nil
}

func (q *queries) insertAudit(evs []laterAudit, notify bool) error {
	tenant := make([]string, len(evs))
	at := make([]*time.Time, len(evs))
	actor := make([]string, len(evs))
	action := make([]string, len(evs))
	subject := make([]string, len(evs))
	details := make([]*string, len(evs))
	for i, l := range evs {
		e := l.e
		tenant[i], actor[i], action[i], subject[i] = e.Tenant, e.Actor, e.Action, e.Subject
		if !e.At.IsZero() {
			at[i] = &e.At
		}
		if len(e.Details) > 0 {
			d := string(e.Details)
			details[i] = &d
		}
	}
	rows, err := q.db.Query(evs[0].ctx, laterAuditSQL, tenant, at, actor, action, subject, details, q.s.channel, q.s.instance, notify)
	if err != nil {
		return interpretError(err)
	}
	defer rows.Close()
	type row struct {
		seq int64
		at  time.Time
	}
	var got []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.seq, &r.at); err != nil {
			return interpretError(err)
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		return interpretError(err)
	}
	if len(got) != len(evs) {
		return fmt.Errorf("audit: %d events inserted of %d", len(got), len(evs))
	}
	// Numbers were drawn in the events' order.
	slices.SortFunc(got, func(a, b row) int { return cmp.Compare(a.seq, b.seq) })
	for i, l := range evs {
		l.e.Seq, l.e.At = got[i].seq, got[i].at
		utc(&l.e.At)
	}
	return nil
}
