package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jobplane/jobplane/internal/store"
)

// The batch writes below move the rows of a call that carries several
// runs (a claim of several, a results call) with one statement each,
// not one per run. On this machine a statement costs PostgreSQL about
// as much CPU again as the row it writes (docs/benchmarks.md, "Session
// 9"), and the client a round trip. The rows arrive as parallel arrays
// and are matched by primary key; the caller has locked them already,
// so the order the join visits them in cannot deadlock.

// runArrays are the mutable fields of several runs, as RunUpdate writes
// them, column by column.
type runArrays struct {
	ids, states, waiting []string
	decisions, grants    []*string
	counted              []int64
	cancel               []bool
	updated, finished    []*time.Time
}

func newRunArrays(n int) *runArrays {
	return &runArrays{
		ids: make([]string, 0, n), states: make([]string, 0, n), waiting: make([]string, 0, n),
		decisions: make([]*string, 0, n), grants: make([]*string, 0, n), counted: make([]int64, 0, n),
		cancel: make([]bool, 0, n), updated: make([]*time.Time, 0, n), finished: make([]*time.Time, 0, n),
	}
}

func (x *runArrays) add(r *store.Run) {
	x.ids = append(x.ids, r.ID)
	x.states = append(x.states, string(r.State))
	x.waiting = append(x.waiting, r.WaitingFor)
	x.decisions = append(x.decisions, jsonText(r.Decision))
	x.grants = append(x.grants, jsonText(r.Grants))
	x.counted = append(x.counted, int64(r.CountedAttempts))
	x.cancel = append(x.cancel, r.CancelRequested)
	var updated *time.Time
	if !r.UpdatedAt.IsZero() {
		u := r.UpdatedAt
		updated = &u
	}
	x.updated = append(x.updated, updated)
	x.finished = append(x.finished, r.FinishedAt)
}

// jsonText is a jsonb value sent inside a text array (cast back in SQL):
// nil for none, as jsonArg sends a single one.
func jsonText(m json.RawMessage) *string {
	if len(m) == 0 {
		return nil
	}
	s := string(m)
	return &s
}

// runsFromSQL is the unnest of runArrays' columns as rows u(...), from
// parameter $first on.
func runsFromSQL(first int) string {
	return fmt.Sprintf(`unnest($%d::text[], $%d::text[], $%d::text[], $%d::text[], $%d::text[], $%d::bigint[],
		$%d::boolean[], $%d::timestamptz[], $%d::timestamptz[])
		AS u(rid, rstate, waiting_for, decision, grants, counted_attempts, cancel_requested, updated_at, finished_at)`,
		first, first+1, first+2, first+3, first+4, first+5, first+6, first+7, first+8)
}

func (x *runArrays) args() []any {
	return []any{x.ids, x.states, x.waiting, x.decisions, x.grants, x.counted, x.cancel, x.updated, x.finished}
}

const runsSetSQL = `UPDATE runs SET state = u.rstate, decision = u.decision::jsonb, grants = u.grants::jsonb,
	waiting_for = u.waiting_for, counted_attempts = u.counted_attempts, cancel_requested = u.cancel_requested,
	updated_at = coalesce(u.updated_at, clock_timestamp()), finished_at = u.finished_at`

// RunUpdates updates every run with one statement.
func (q *queries) RunUpdates(ctx context.Context, runs []*store.Run) error {
	switch len(runs) {
	case 0:
		return nil
	case 1:
		return q.RunUpdate(ctx, runs[0])
	}
	x := newRunArrays(len(runs))
	for _, r := range runs {
		x.add(r)
	}
	tag, err := q.db.Exec(ctx, runsSetSQL+` FROM `+runsFromSQL(1)+` WHERE runs.id = u.rid`, x.args()...)
	if err != nil {
		return interpretError(err)
	}
	if tag.RowsAffected() != int64(len(runs)) {
		return store.ErrNotFound
	}
	return nil
}

// AttemptRunUpdates updates every attempt and every run with one
// statement: both updates run to completion whatever the other found, and
// the counts tell whether each row was there.
func (q *queries) AttemptRunUpdates(ctx context.Context, pairs []store.AttemptRun) error {
	switch len(pairs) {
	case 0:
		return nil
	case 1:
		return q.AttemptRunUpdate(ctx, pairs[0].Attempt, pairs[0].Run)
	}
	n := len(pairs)
	x := newRunArrays(n)
	var (
		ids, states, runners, digests, requests, blocked = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		claimed, expires, deadlines, heartbeats, ended   = make([]*time.Time, n), make([]*time.Time, n), make([]*time.Time, n), make([]*time.Time, n), make([]*time.Time, n)
		results                                          = make([]*string, n)
		notBefore                                        = make([]time.Time, n)
	)
	for i, p := range pairs {
		a := p.Attempt
		ids[i], states[i], runners[i], digests[i], requests[i], blocked[i] = a.ID, string(a.State), a.RunnerID, a.LeaseDigest, a.ClaimRequestID, a.BlockedOn
		claimed[i], expires[i], deadlines[i], heartbeats[i], ended[i] = a.ClaimedAt, a.LeaseExpiresAt, a.Deadline, a.HeartbeatAt, a.EndedAt
		results[i], notBefore[i] = jsonText(a.Result), a.NotBefore
		x.add(p.Run)
	}
	args := append(x.args(), ids, states, runners, digests, requests, claimed, expires, deadlines, heartbeats, ended,
		results, notBefore, blocked)
	var na, nr int64
	err := q.db.QueryRow(ctx, `WITH a AS (
		UPDATE attempts SET state = v.state, runner_id = v.runner_id, lease_digest = v.lease_digest,
			claim_request_id = v.claim_request_id, claimed_at = v.claimed_at, lease_expires_at = v.lease_expires_at,
			deadline = v.deadline, heartbeat_at = v.heartbeat_at, ended_at = v.ended_at, result = v.result::jsonb,
			not_before = v.not_before, blocked_on = v.blocked_on
		FROM unnest($10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::timestamptz[],
			$16::timestamptz[], $17::timestamptz[], $18::timestamptz[], $19::timestamptz[], $20::text[],
			$21::timestamptz[], $22::text[])
			AS v(id, state, runner_id, lease_digest, claim_request_id, claimed_at, lease_expires_at, deadline,
			heartbeat_at, ended_at, result, not_before, blocked_on)
		WHERE attempts.id = v.id RETURNING 1),
		r AS (`+runsSetSQL+` FROM `+runsFromSQL(1)+` WHERE runs.id = u.rid RETURNING 1)
		SELECT (SELECT count(*) FROM a), (SELECT count(*) FROM r)`, args...).Scan(&na, &nr)
	if err != nil {
		return interpretError(err)
	}
	if na != int64(n) || nr != int64(n) {
		return store.ErrNotFound
	}
	return nil
}

// LogAppends inserts the lines of every chunk with one statement; a chunk
// already stored is skipped as LogAppend skips it.
func (q *queries) LogAppends(ctx context.Context, ps []*store.LogAppendParams) error {
	if len(ps) == 1 {
		_, err := q.LogAppend(ctx, ps[0])
		return err
	}
	var (
		runs, attempts, streams, texts []string
		seqs, idxs                     []int64
		ats                            []*time.Time
	)
	for _, p := range ps {
		for i, l := range p.Lines {
			var at *time.Time
			if !l.At.IsZero() {
				t := l.At
				at = &t
			}
			runs, attempts, seqs, idxs = append(runs, p.RunID), append(attempts, p.AttemptID), append(seqs, p.Seq), append(idxs, int64(i))
			ats, streams, texts = append(ats, at), append(streams, l.Stream), append(texts, l.Text)
		}
	}
	if len(runs) == 0 {
		return nil // chunks without lines store nothing
	}
	_, err := q.db.Exec(ctx, `INSERT INTO log_lines (run_id, attempt_id, seq, idx, at, stream, text)
		SELECT u.run_id, u.attempt_id, u.seq, u.idx, coalesce(u.at, clock_timestamp()), u.stream, u.text
		FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::timestamptz[], $6::text[], $7::text[])
			WITH ORDINALITY AS u(run_id, attempt_id, seq, idx, at, stream, text, ord)
		WHERE NOT EXISTS (SELECT 1 FROM log_lines l WHERE l.attempt_id = u.attempt_id AND l.seq = u.seq)
		ORDER BY u.ord
		ON CONFLICT DO NOTHING`, runs, attempts, seqs, idxs, ats, streams, texts)
	return interpretError(err)
}
