package storetest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/store"
)

// testBatchWrites: RunUpdates, AttemptRunUpdates and LogAppends store what
// as many RunUpdate, AttemptRunUpdate and LogAppend calls store, each row
// its own values (NULLs included); a missing row is ErrNotFound.
func testBatchWrites(t *testing.T, s store.Store) {
	f := newFixture(t, s)
	const n = 4
	change := func(i int, a *store.Attempt, r *store.Run) {
		ended := t0.Add(time.Duration(i+1) * time.Minute)
		a.State, a.RunnerID, a.LeaseDigest, a.ClaimRequestID = store.AttemptSucceeded, fmt.Sprintf("rnr_%d", i), fmt.Sprintf("d%d", i), fmt.Sprintf("req%d", i)
		a.ClaimedAt, a.LeaseExpiresAt, a.Deadline, a.EndedAt = at(time.Duration(i)*time.Second), at(time.Hour), at(2*time.Hour), &ended
		a.Result, a.NotBefore, a.BlockedOn = json.RawMessage(fmt.Sprintf(`{"outcome":"succeeded","n":%d}`, i)), t0.Add(time.Duration(i)*time.Millisecond), ""
		r.State, r.Decision, r.Grants = store.RunSucceeded, json.RawMessage(fmt.Sprintf(`{"dispatch":{"n":%d}}`, i)), json.RawMessage(`{"db":"ro"}`)
		r.WaitingFor, r.CountedAttempts, r.CancelRequested, r.UpdatedAt, r.FinishedAt = fmt.Sprintf("w%d", i), i, i%2 == 1, ended, &ended
		switch i {
		case 1: // NULLs where the columns allow them
			a.Result, a.ClaimedAt, a.HeartbeatAt = nil, nil, nil
			r.Grants, r.FinishedAt = nil, nil
		case 2:
			a.HeartbeatAt = at(time.Minute)
			a.BlockedOn = "k"
		}
	}
	read := func(a *store.Attempt) (*store.Attempt, *store.Run) {
		t.Helper()
		gotA, err := s.AttemptGetByID(bg(), a.ID, false)
		require.NoError(t, err)
		gotR, err := s.RunGetByID(bg(), a.RunID, false)
		require.NoError(t, err)
		return gotA, gotR
	}
	// same reports whether the batch's rows hold what the single writes'
	// rows hold, the IDs and creation aside.
	same := func(what string, wantA *store.Attempt, wantR *store.Run, gotA *store.Attempt, gotR *store.Run) {
		t.Helper()
		ga, gr := *gotA, *gotR
		ga.ID, ga.RunID, ga.CreatedAt = wantA.ID, wantA.RunID, wantA.CreatedAt
		gr.ID, gr.CreatedAt = wantR.ID, wantR.CreatedAt
		require.Empty(t, cmp.Diff(wantA, &ga, cmpOpts...), what+": attempt")
		require.Empty(t, cmp.Diff(wantR, &gr, cmpOpts...), what+": run")
	}

	var single, batch []store.AttemptRun
	for i := range n {
		for _, l := range []*[]store.AttemptRun{&single, &batch} {
			a := f.attempt(t, nil)
			_, r := read(a)
			change(i, a, r)
			*l = append(*l, store.AttemptRun{Attempt: a, Run: r})
		}
	}
	require.NoError(t, s.InTx(bg(), func(tx store.Tx) error {
		for _, p := range single {
			if err := tx.AttemptRunUpdate(bg(), p.Attempt, p.Run); err != nil {
				return err
			}
		}
		return tx.AttemptRunUpdates(bg(), batch)
	}))
	for i := range n {
		wantA, wantR := read(single[i].Attempt)
		gotA, gotR := read(batch[i].Attempt)
		require.Equal(t, batch[i].Run.ID, gotR.ID)
		same(fmt.Sprintf("AttemptRunUpdates item %d", i), wantA, wantR, gotA, gotR)
	}

	// RunUpdates: the same, runs alone; a zero UpdatedAt takes the clock.
	single, batch = single[:0], batch[:0]
	for i := range n {
		for _, l := range []*[]store.AttemptRun{&single, &batch} {
			a := f.attempt(t, nil)
			_, r := read(a)
			change(i, &store.Attempt{}, r)
			r.State = store.RunRunning
			*l = append(*l, store.AttemptRun{Attempt: a, Run: r})
		}
	}
	batch[3].Run.UpdatedAt = time.Time{}
	runs := make([]*store.Run, n)
	for i := range batch {
		runs[i] = batch[i].Run
	}
	require.NoError(t, s.InTx(bg(), func(tx store.Tx) error {
		for _, p := range single[:3] {
			if err := tx.RunUpdate(bg(), p.Run); err != nil {
				return err
			}
		}
		return tx.RunUpdates(bg(), runs)
	}))
	for i := range 3 {
		wantA, wantR := read(single[i].Attempt)
		gotA, gotR := read(batch[i].Attempt)
		same(fmt.Sprintf("RunUpdates item %d", i), wantA, wantR, gotA, gotR)
	}
	_, clocked := read(batch[3].Attempt)
	require.Equal(t, store.RunRunning, clocked.State)
	require.True(t, clocked.UpdatedAt.After(t0), "a zero UpdatedAt is the database's clock: %s", clocked.UpdatedAt)

	// A missing row fails the batch (and the caller's transaction).
	ghost := *batch[0].Run
	ghost.ID = id.New(id.Run, t0)
	err := s.InTx(bg(), func(tx store.Tx) error { return tx.RunUpdates(bg(), []*store.Run{batch[1].Run, &ghost}) })
	require.ErrorIs(t, err, store.ErrNotFound)
	ghostA := *batch[2].Attempt
	ghostA.ID = id.New(id.Attempt, t0)
	err = s.InTx(bg(), func(tx store.Tx) error {
		return tx.AttemptRunUpdates(bg(), []store.AttemptRun{batch[1], {Attempt: &ghostA, Run: batch[2].Run}})
	})
	require.ErrorIs(t, err, store.ErrNotFound, "a missing attempt")
	err = s.InTx(bg(), func(tx store.Tx) error {
		return tx.AttemptRunUpdates(bg(), []store.AttemptRun{{Attempt: batch[2].Attempt, Run: &ghost}, batch[1]})
	})
	require.ErrorIs(t, err, store.ErrNotFound, "a missing run")

	// LogAppends: chunks of several attempts, in order; a chunk stored
	// before, or without lines, adds nothing.
	la, lb := batch[0].Attempt, batch[1].Attempt
	line := func(text string, d time.Duration) store.LogLine {
		return store.LogLine{At: t0.Add(d), Stream: "stdout", Text: text}
	}
	_, err = s.LogAppend(bg(), &store.LogAppendParams{RunID: la.RunID, AttemptID: la.ID, Seq: 0, Lines: []store.LogLine{line("a0", 0)}})
	require.NoError(t, err)
	require.NoError(t, s.InTx(bg(), func(tx store.Tx) error {
		return tx.LogAppends(bg(), []*store.LogAppendParams{
			{RunID: la.RunID, AttemptID: la.ID, Seq: 0, Lines: []store.LogLine{line("again", 0), line("and more", 0)}},
			{RunID: la.RunID, AttemptID: la.ID, Seq: 1, Lines: []store.LogLine{line("a1", time.Second), {Stream: "stderr", Text: "a1b"}}},
			{RunID: lb.RunID, AttemptID: lb.ID, Seq: 0, Lines: []store.LogLine{line("b0", 2*time.Second)}},
			{RunID: lb.RunID, AttemptID: lb.ID, Seq: 1},
		})
	}))
	texts := func(runID string) []string {
		t.Helper()
		lines, err := s.LogList(bg(), &store.LogListParams{RunID: runID, Limit: 100})
		require.NoError(t, err)
		var out []string
		for _, l := range lines {
			out = append(out, fmt.Sprintf("%d/%d %s %s", l.Seq, l.Idx, l.Stream, l.Text))
			require.False(t, l.At.IsZero())
		}
		return out
	}
	require.Equal(t, []string{"0/0 stdout a0", "1/0 stdout a1", "1/1 stderr a1b"}, texts(la.RunID))
	require.Equal(t, []string{"0/0 stdout b0"}, texts(lb.RunID))
	_, err = s.LogAppend(bg(), &store.LogAppendParams{RunID: lb.RunID, AttemptID: lb.ID, Seq: 1, Lines: []store.LogLine{line("b1", 0)}})
	require.NoError(t, err)
	require.Equal(t, []string{"0/0 stdout b0", "1/0 stdout b1"}, texts(lb.RunID), "a chunk without lines stores nothing, not even its seq")
}

// testRunsCreateQueued: runs and first attempts inserted in one batch read
// back as RunCreateQueued's would, each with its own values (an attempt
// at its run's time when it names none, labels of any length); a taken
// idempotency key fails the batch.
func testRunsCreateQueued(t *testing.T, s store.Store) {
	f := newFixture(t, s)
	newPair := func(i int, key string) store.AttemptRun {
		f.n++
		now := t0.Add(time.Duration(f.n) * time.Millisecond)
		r := &store.Run{
			ID: id.New(id.Run, now), Tenant: f.tenant, Job: fmt.Sprintf("job%d", i), Channel: "prod", Ref: "main", Commit: "abc123",
			Params: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), Actor: "alice", Reason: fmt.Sprintf("why %d", i),
			Source: json.RawMessage(`{"kind":"api"}`), IdempotencyKey: key, State: store.RunQueued, MaxAttempts: 3,
			Spec: json.RawMessage(`{"pool":"default"}`), Decision: json.RawMessage(`{"request":{"allowed":true}}`),
			LeaseKeys: json.RawMessage(`[]`),
		}
		a := &store.Attempt{ID: id.New(id.Attempt, now), RunID: r.ID, Tenant: f.tenant, Number: 1, State: store.AttemptQueued,
			Pool: "default", LeaseTTL: time.Duration(i+1) * time.Second, Timeout: time.Hour, Repo: "acme/defs"}
		switch i {
		case 1:
			a.Labels = []string{"linux", "x86, \"quoted\"", "{braces}"}
			r.Grants, r.LeaseKeys = json.RawMessage(`{"db":"ro"}`), nil
			a.Needs = store.CapIsolated
		case 2: // a fixed clock
			r.CreatedAt, r.UpdatedAt, a.CreatedAt, a.NotBefore = t0.Add(time.Minute), t0.Add(time.Minute), t0.Add(time.Minute), t0.Add(2*time.Minute)
			a.Labels, a.ManagedOnly, a.BlockedOn = []string{}, true, "k"
			a.Needs = store.CapImages | store.CapIsolated
		}
		return store.AttemptRun{Attempt: a, Run: r}
	}
	// One batch whose runs have idempotency keys, one whose runs have
	// none (the store may insert those without conflict handling), each
	// compared with runs inserted one by one.
	var single, keyed, plain []store.AttemptRun
	for i := range 4 {
		single = append(single, newPair(i, ""))
		keyed = append(keyed, newPair(i, fmt.Sprintf("key%d", i)))
		plain = append(plain, newPair(i, ""))
	}
	require.NoError(t, s.InTx(bg(), func(tx store.Tx) error {
		for _, p := range single {
			if err := tx.RunCreateQueued(bg(), p.Run, p.Attempt); err != nil {
				return err
			}
		}
		if err := tx.RunsCreateQueued(bg(), keyed); err != nil {
			return err
		}
		return tx.RunsCreateQueued(bg(), plain)
	}))
	for _, batch := range [][]store.AttemptRun{keyed, plain} {
		for i := range batch {
			p, q := single[i], batch[i]
			require.False(t, q.Run.CreatedAt.IsZero())
			require.Equal(t, q.Run.CreatedAt, q.Attempt.CreatedAt, "item %d: the attempt at its run's time", i)
			if i == 2 {
				require.True(t, q.Run.CreatedAt.Equal(t0.Add(time.Minute)))
				require.True(t, q.Attempt.NotBefore.Equal(t0.Add(2*time.Minute)))
			} else {
				require.Equal(t, q.Run.CreatedAt, q.Attempt.NotBefore)
			}
			wantR, err := s.RunGetByID(bg(), p.Run.ID, false)
			require.NoError(t, err)
			gotR, err := s.RunGetByID(bg(), q.Run.ID, false)
			require.NoError(t, err)
			wantA, err := s.AttemptGetByID(bg(), p.Attempt.ID, false)
			require.NoError(t, err)
			gotA, err := s.AttemptGetByID(bg(), q.Attempt.ID, false)
			require.NoError(t, err)
			require.Empty(t, cmp.Diff(q.Attempt, gotA, cmpOpts...), "item %d: the attempt as returned", i)
			require.Equal(t, q.Run.CreatedAt, gotR.CreatedAt)
			require.Equal(t, q.Run.UpdatedAt, gotR.UpdatedAt)
			gotR.ID, gotR.IdempotencyKey, gotA.ID, gotA.RunID = wantR.ID, wantR.IdempotencyKey, wantA.ID, wantA.RunID
			if i != 2 { // the database's clock: each row its own moment
				gotR.CreatedAt, gotR.UpdatedAt, gotA.CreatedAt, gotA.NotBefore = wantR.CreatedAt, wantR.UpdatedAt, wantA.CreatedAt, wantA.NotBefore
			}
			require.Empty(t, cmp.Diff(wantR, gotR, cmpOpts...), "item %d: run", i)
			require.Empty(t, cmp.Diff(wantA, gotA, cmpOpts...), "item %d: attempt", i)
		}
	}

	// A taken idempotency key, before or within the batch: the batch
	// fails and its transaction stores none of its rows.
	for _, keys := range [][2]string{{"key1", "fresh1"}, {"fresh2", "fresh2"}} {
		again := []store.AttemptRun{newPair(0, keys[0]), newPair(1, keys[1]), newPair(3, "other"+keys[1])}
		err := s.InTx(bg(), func(tx store.Tx) error { return tx.RunsCreateQueued(bg(), again) })
		require.ErrorIs(t, err, store.ErrAlreadyExists, "keys %v", keys)
		for _, p := range again {
			_, err := s.RunGetByID(bg(), p.Run.ID, false)
			require.ErrorIs(t, err, store.ErrNotFound)
			_, err = s.AttemptGetByID(bg(), p.Attempt.ID, false)
			require.ErrorIs(t, err, store.ErrNotFound)
		}
	}
}

// testRecordsKept: an update leaves a run's decision and grants as the
// caller holds them, whichever way it is written (RunUpdate, RunUpdates,
// AttemptRunUpdate, AttemptRunUpdates): unchanged since the transaction
// read them, changed there (a new slice, as the re-check at dispatch
// assigns), cleared, or on a run the transaction did not read (a store
// may leave unchanged records unwritten, and must tell them apart).
func testRecordsKept(t *testing.T, s store.Store) {
	f := newFixture(t, s)
	decision, grants := json.RawMessage(`{"request":{"allowed":true,"rule":"r"}}`), json.RawMessage(`{"db":"rw"}`)
	type write func(tx store.Tx, rs []*store.Run, as []*store.Attempt) error
	writes := map[string]write{
		"RunUpdate": func(tx store.Tx, rs []*store.Run, _ []*store.Attempt) error {
			for _, r := range rs {
				if err := tx.RunUpdate(bg(), r); err != nil {
					return err
				}
			}
			return nil
		},
		"RunUpdates": func(tx store.Tx, rs []*store.Run, _ []*store.Attempt) error { return tx.RunUpdates(bg(), rs) },
		"AttemptRunUpdate": func(tx store.Tx, rs []*store.Run, as []*store.Attempt) error {
			for i := range rs {
				if err := tx.AttemptRunUpdate(bg(), as[i], rs[i]); err != nil {
					return err
				}
			}
			return nil
		},
		"AttemptRunUpdates": func(tx store.Tx, rs []*store.Run, as []*store.Attempt) error {
			pairs := make([]store.AttemptRun, len(rs))
			for i := range rs {
				pairs[i] = store.AttemptRun{Attempt: as[i], Run: rs[i]}
			}
			return tx.AttemptRunUpdates(bg(), pairs)
		},
	}
	// Each case changes the run as read (or as built in Go) and says what
	// must then be stored.
	type change struct {
		name         string
		readInTx     bool
		mod          func(r *store.Run)
		wantD, wantG string // "" for NULL
	}
	changes := []change{
		{"unchanged", true, func(r *store.Run) {}, string(decision), string(grants)},
		{"decision replaced", true, func(r *store.Run) {
			r.Decision = json.RawMessage(`{"request":{"allowed":true},"dispatch":{"allowed":true}}`)
		},
			`{"request":{"allowed":true},"dispatch":{"allowed":true}}`, string(grants)},
		{"grants replaced", true, func(r *store.Run) { r.Grants = json.RawMessage(`{"db":"ro"}`) }, string(decision), `{"db":"ro"}`},
		{"grants cleared", true, func(r *store.Run) { r.Grants = nil }, string(decision), ""},
		{"same bytes, new slice", true, func(r *store.Run) {
			r.Decision = append(json.RawMessage(nil), r.Decision...)
			r.Grants = json.RawMessage(`{"db":"rw"}`)
		}, string(decision), string(grants)},
		{"read outside the transaction", false, func(r *store.Run) {}, string(decision), string(grants)},
		{"built in Go", false, func(r *store.Run) { *r = *cloneRun(r); r.Decision, r.Grants = nil, json.RawMessage(`{"x":"y"}`) }, "", `{"x":"y"}`},
	}
	for name, w := range writes {
		t.Run(name, func(t *testing.T) {
			var rs []*store.Run
			var as []*store.Attempt
			for range changes {
				a := f.attempt(t, nil)
				r, err := s.RunGetByID(bg(), a.RunID, false)
				require.NoError(t, err)
				r.Decision, r.Grants = decision, grants
				require.NoError(t, s.RunUpdate(bg(), r))
				as, rs = append(as, a), append(rs, r)
			}
			require.NoError(t, s.InTx(bg(), func(tx store.Tx) error {
				held := make([]*store.Run, len(changes))
				for i, c := range changes {
					r := rs[i]
					if c.readInTx {
						var err error
						if r, err = tx.RunGetByID(bg(), r.ID, true); err != nil {
							return err
						}
					} else {
						r = cloneRun(r)
					}
					c.mod(r)
					r.State, r.WaitingFor = store.RunRunning, "w-"+c.name
					held[i] = r
				}
				return w(tx, held, as)
			}))
			for i, c := range changes {
				got, err := s.RunGetByID(bg(), rs[i].ID, false)
				require.NoError(t, err)
				require.Equal(t, store.RunRunning, got.State, c.name)
				require.Equal(t, "w-"+c.name, got.WaitingFor, c.name)
				for _, x := range []struct {
					what, want string
					got        json.RawMessage
				}{{"decision", c.wantD, got.Decision}, {"grants", c.wantG, got.Grants}} {
					if x.want == "" {
						require.Empty(t, x.got, "%s: %s", c.name, x.what)
						continue
					}
					require.JSONEq(t, x.want, string(x.got), "%s: %s", c.name, x.what)
				}
			}
		})
	}
}

// cloneRun is a copy of r that shares none of its JSON.
func cloneRun(r *store.Run) *store.Run {
	c := *r
	for _, m := range []*json.RawMessage{&c.Params, &c.Source, &c.Decision, &c.Grants, &c.LeaseKeys, &c.Spec} {
		if *m != nil {
			*m = append(json.RawMessage(nil), (*m)...)
		}
	}
	return &c
}
