package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jobplane/jobplane/internal/store"
)

// The batch writes below move the rows of a call that carries several
// runs (a run batch, a claim of several, a results call) with one
// statement each, not one per run. On this machine a statement costs PostgreSQL about
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
	cancel, keep         []bool
	updated, finished    []*time.Time
}

func newRunArrays(n int) *runArrays {
	return &runArrays{
		ids: make([]string, 0, n), states: make([]string, 0, n), waiting: make([]string, 0, n),
		decisions: make([]*string, 0, n), grants: make([]*string, 0, n), counted: make([]int64, 0, n),
		cancel: make([]bool, 0, n), keep: make([]bool, 0, n), updated: make([]*time.Time, 0, n), finished: make([]*time.Time, 0, n),
	}
}

func (x *runArrays) add(r *store.Run, keep bool) {
	x.ids = append(x.ids, r.ID)
	x.states = append(x.states, string(r.State))
	x.waiting = append(x.waiting, r.WaitingFor)
	x.keep = append(x.keep, keep)
	if keep {
		x.decisions = append(x.decisions, nil)
		x.grants = append(x.grants, nil)
	} else {
		x.decisions = append(x.decisions, jsonText(r.Decision))
		x.grants = append(x.grants, jsonText(r.Grants))
	}
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
		$%d::boolean[], $%d::timestamptz[], $%d::timestamptz[], $%d::boolean[])
		AS u(rid, rstate, waiting_for, decision, grants, counted_attempts, cancel_requested, updated_at, finished_at, keep)`,
		first, first+1, first+2, first+3, first+4, first+5, first+6, first+7, first+8, first+9)
}

func (x *runArrays) args() []any {
	return []any{x.ids, x.states, x.waiting, x.decisions, x.grants, x.counted, x.cancel, x.updated, x.finished, x.keep}
}

var runsSetSQL = `UPDATE runs SET state = u.rstate, ` + keptRecordsSQL("u.decision::json", "u.grants::jsonb", "u.keep") + `,
	waiting_for = u.waiting_for, counted_attempts = u.counted_attempts, cancel_requested = u.cancel_requested,
	updated_at = coalesce(u.updated_at, clock_timestamp()), finished_at = u.finished_at`

// runUpdatesSQL updates the runs of runArrays ($1…$10) by ID.
var runUpdatesSQL = generic(runsSetSQL + ` FROM ` + runsFromSQL(1) + ` WHERE runs.id = u.rid`)

// attemptRunUpdatesSQL updates the runs of runArrays ($1…$10) and the
// attempts of $11…$23, and counts the rows of each it found.
var attemptRunUpdatesSQL = generic(`WITH a AS (
		UPDATE attempts SET state = v.state, runner_id = v.runner_id, lease_digest = v.lease_digest,
			claim_request_id = v.claim_request_id, claimed_at = v.claimed_at, lease_expires_at = v.lease_expires_at,
			deadline = v.deadline, heartbeat_at = v.heartbeat_at, ended_at = v.ended_at, result = v.result::jsonb,
			not_before = v.not_before, blocked_on = v.blocked_on
		FROM unnest($11::text[], $12::text[], $13::text[], $14::text[], $15::text[], $16::timestamptz[],
			$17::timestamptz[], $18::timestamptz[], $19::timestamptz[], $20::timestamptz[], $21::text[],
			$22::timestamptz[], $23::text[])
			AS v(id, state, runner_id, lease_digest, claim_request_id, claimed_at, lease_expires_at, deadline,
			heartbeat_at, ended_at, result, not_before, blocked_on)
		WHERE attempts.id = v.id RETURNING 1),
		r AS (` + runsSetSQL + ` FROM ` + runsFromSQL(1) + ` WHERE runs.id = u.rid RETURNING 1)
		SELECT (SELECT count(*) FROM a), (SELECT count(*) FROM r)`)

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
		x.add(r, q.keepRecords(r))
	}
	tag, err := q.db.Exec(ctx, runUpdatesSQL, x.args()...)
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
		x.add(p.Run, q.keepRecords(p.Run))
	}
	args := append(x.args(), ids, states, runners, digests, requests, claimed, expires, deadlines, heartbeats, ended,
		results, notBefore, blocked)
	var na, nr int64
	err := q.db.QueryRow(ctx, attemptRunUpdatesSQL, args...).Scan(&na, &nr)
	if err != nil {
		return interpretError(err)
	}
	if na != int64(n) || nr != int64(n) {
		return store.ErrNotFound
	}
	return nil
}

// logAppendsSQL inserts lines, skipping those of a chunk (attempt, seq)
// already stored.
const logAppendsSQL = genericMark + `INSERT INTO log_lines (run_id, attempt_id, seq, idx, at, stream, text)
		SELECT u.run_id, u.attempt_id, u.seq, u.idx, coalesce(u.at, clock_timestamp()), u.stream, u.text
		FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::timestamptz[], $6::text[], $7::text[])
			WITH ORDINALITY AS u(run_id, attempt_id, seq, idx, at, stream, text, ord)
		WHERE NOT EXISTS (SELECT 1 FROM log_lines l WHERE l.attempt_id = u.attempt_id AND l.seq = u.seq)
		ORDER BY u.ord
		ON CONFLICT DO NOTHING`

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
	_, err := q.db.Exec(ctx, logAppendsSQL, runs, attempts, seqs, idxs, ats, streams, texts)
	return interpretError(err)
}

// runsCreateQueuedSQL inserts runs ($1…$23) and their first attempts
// ($24…$46); onConflict is empty or "ON CONFLICT DO NOTHING".
func runsCreateQueuedSQL(onConflict string) string {
	return generic(`WITH n AS (SELECT clock_timestamp() AS now),
		v AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
			$8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::text[],
			$16::text[], $17::text[], $18::bigint[], $19::bigint[], $20::boolean[], $21::timestamptz[],
			$22::timestamptz[], $23::timestamptz[])
			WITH ORDINALITY AS v(id, tenant, job, channel, ref, commit_sha, params, actor, reason, source,
			idempotency_key, state, decision, grants, lease_keys, waiting_for, spec, max_attempts, counted_attempts,
			cancel_requested, created_at, updated_at, finished_at, ord)),
		r AS (
		INSERT INTO runs (` + runCols + `)
		SELECT v.id, v.tenant, v.job, v.channel, v.ref, v.commit_sha, v.params::jsonb, v.actor, v.reason,
			v.source::jsonb, v.idempotency_key, v.state, v.decision::json, v.grants::jsonb, v.lease_keys::jsonb,
			v.waiting_for, v.spec::json, v.max_attempts, v.counted_attempts, v.cancel_requested,
			coalesce(v.created_at, n.now), coalesce(v.updated_at, v.created_at, n.now), v.finished_at
		FROM v, n ORDER BY v.ord
		` + onConflict + ` RETURNING id, created_at, updated_at),
		w AS (SELECT * FROM unnest($24::text[], $25::text[], $26::text[], $27::bigint[], $28::text[], $29::text[],
			$30::text[], $31::bigint[], $32::bigint[], $33::timestamptz[], $34::text[], $35::text[], $36::text[],
			$37::timestamptz[], $38::timestamptz[], $39::timestamptz[], $40::timestamptz[], $41::timestamptz[],
			$42::text[], $43::timestamptz[], $44::text[], $45::text[], $46::boolean[], $47::integer[])
			WITH ORDINALITY AS w(id, run_id, tenant, number, state, pool, labels, lease_ttl_us, timeout_us, not_before,
			runner_id, lease_digest, claim_request_id, claimed_at, lease_expires_at, deadline, heartbeat_at,
			ended_at, result, created_at, blocked_on, repo, managed_only, needs, ord)),
		a AS (
		INSERT INTO attempts (` + attemptCols + `)
		SELECT w.id, w.run_id, w.tenant, w.number, w.state, w.pool,
			ARRAY(SELECT jsonb_array_elements_text(w.labels::jsonb)), w.lease_ttl_us, w.timeout_us,
			coalesce(w.not_before, r.created_at), w.runner_id, w.lease_digest, w.claim_request_id, w.claimed_at,
			w.lease_expires_at, w.deadline, w.heartbeat_at, w.ended_at, w.result::jsonb,
			coalesce(w.created_at, r.created_at), w.blocked_on, w.repo, w.managed_only, w.needs
		FROM w JOIN r ON r.id = w.run_id ORDER BY w.ord
		RETURNING run_id, created_at, not_before)
		SELECT r.id, r.created_at, r.updated_at, a.created_at, a.not_before FROM r JOIN a ON a.run_id = r.id`)
}

// RunsCreateQueued inserts every run and its first attempt with one
// statement: the attempts' insert joins the runs' RETURNING, so an
// attempt is inserted only when its run was, at its run's time.
func (q *queries) RunsCreateQueued(ctx context.Context, pairs []store.AttemptRun) error {
	switch len(pairs) {
	case 0:
		return nil
	case 1:
		return q.RunCreateQueued(ctx, pairs[0].Run, pairs[0].Attempt)
	}
	n := len(pairs)
	var (
		rID, rTenant, rJob, rChannel, rRef, rCommit = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		rActor, rReason, rKey, rState, rWaiting     = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		rParams, rSource, rDecision, rGrants        = make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n)
		rLeaseKeys, rSpec                           = make([]*string, n), make([]*string, n)
		rMax, rCounted                              = make([]int64, n), make([]int64, n)
		rCancel                                     = make([]bool, n)
		rCreated, rUpdated, rFinished               = make([]*time.Time, n), make([]*time.Time, n), make([]*time.Time, n)

		aID, aTenant, aState, aPool, aLabels, aRunner = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		aDigest, aRequest, aBlocked, aRepo            = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		aNumber, aTTL, aTimeout                       = make([]int64, n), make([]int64, n), make([]int64, n)
		aNotBefore, aClaimed, aExpires, aDeadline     = make([]*time.Time, n), make([]*time.Time, n), make([]*time.Time, n), make([]*time.Time, n)
		aHeartbeat, aEnded, aCreated                  = make([]*time.Time, n), make([]*time.Time, n), make([]*time.Time, n)
		aResult                                       = make([]*string, n)
		aManaged                                      = make([]bool, n)
		aNeeds                                        = make([]int32, n)
	)
	opt := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	for i, p := range pairs {
		r, a := p.Run, p.Attempt
		queuedDefaults(r, a)
		a.RunID = r.ID
		rID[i], rTenant[i], rJob[i], rChannel[i], rRef[i], rCommit[i] = r.ID, r.Tenant, r.Job, r.Channel, r.Ref, r.Commit
		rActor[i], rReason[i], rKey[i], rState[i], rWaiting[i] = r.Actor, r.Reason, r.IdempotencyKey, string(r.State), r.WaitingFor
		rParams[i], rSource[i], rDecision[i], rGrants[i] = jsonText(r.Params), jsonText(r.Source), jsonText(r.Decision), jsonText(r.Grants)
		rLeaseKeys[i], rSpec[i] = jsonText(r.LeaseKeys), jsonText(r.Spec)
		rMax[i], rCounted[i], rCancel[i] = int64(r.MaxAttempts), int64(r.CountedAttempts), r.CancelRequested
		rCreated[i], rUpdated[i], rFinished[i] = opt(r.CreatedAt), opt(r.UpdatedAt), r.FinishedAt

		labels, err := json.Marshal(listArg(a.Labels))
		if err != nil {
			return err
		}
		aID[i], aTenant[i], aState[i], aPool[i], aLabels[i], aRunner[i] = a.ID, a.Tenant, string(a.State), a.Pool, string(labels), a.RunnerID
		aDigest[i], aRequest[i], aBlocked[i], aRepo[i] = a.LeaseDigest, a.ClaimRequestID, a.BlockedOn, a.Repo
		aNumber[i], aTTL[i], aTimeout[i] = int64(a.Number), a.LeaseTTL.Microseconds(), a.Timeout.Microseconds()
		aNotBefore[i], aClaimed[i], aExpires[i], aDeadline[i] = opt(a.NotBefore), a.ClaimedAt, a.LeaseExpiresAt, a.Deadline
		aHeartbeat[i], aEnded[i], aCreated[i] = a.HeartbeatAt, a.EndedAt, opt(a.CreatedAt)
		aResult[i], aManaged[i], aNeeds[i] = jsonText(a.Result), a.ManagedOnly, int32(a.Needs)
	}
	// A run with an idempotency key may find it taken, by a transaction
	// committed or in flight: its insert then does nothing, which the
	// count below reports. Without keys nothing can conflict but a
	// generated ID, and the insert is a plain one: ON CONFLICT makes every
	// row a speculative insertion that first probes each unique index.
	// The attempts are new rows of runs just inserted: none can conflict.
	onConflict := ""
	for _, p := range pairs {
		if p.Run.IdempotencyKey != "" {
			onConflict = "ON CONFLICT DO NOTHING"
			break
		}
	}
	rows, err := q.db.Query(ctx, runsCreateQueuedSQL(onConflict),
		rID, rTenant, rJob, rChannel, rRef, rCommit, rParams, rActor, rReason, rSource, rKey, rState, rDecision,
		rGrants, rLeaseKeys, rWaiting, rSpec, rMax, rCounted, rCancel, rCreated, rUpdated, rFinished,
		aID, rID, aTenant, aNumber, aState, aPool, aLabels, aTTL, aTimeout, aNotBefore, aRunner, aDigest, aRequest,
		aClaimed, aExpires, aDeadline, aHeartbeat, aEnded, aResult, aCreated, aBlocked, aRepo, aManaged, aNeeds)
	if err != nil {
		return interpretError(err)
	}
	byID := make(map[string]store.AttemptRun, n)
	for _, p := range pairs {
		byID[p.Run.ID] = p
	}
	got := 0
	for rows.Next() {
		var runID string
		var rc, ru, ac, anb time.Time
		if err := rows.Scan(&runID, &rc, &ru, &ac, &anb); err != nil {
			rows.Close()
			return interpretError(err)
		}
		p, ok := byID[runID]
		if !ok {
			continue
		}
		p.Run.CreatedAt, p.Run.UpdatedAt, p.Attempt.CreatedAt, p.Attempt.NotBefore = rc.UTC(), ru.UTC(), ac.UTC(), anb.UTC()
		got++
	}
	if err := rows.Err(); err != nil {
		return interpretError(err)
	}
	if got != n {
		// A run's idempotency key (or its ID) was taken, as RunCreateQueued
		// reports it: the caller's transaction is to be rolled back.
		return store.ErrAlreadyExists
	}
	return nil
}
