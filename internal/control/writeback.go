package control

import (
	"context"

	"github.com/jobplane/jobplane/internal/store"
)

// runWrites holds back the new runs, the run and attempt updates and the
// log chunks of a call that moves several runs (a run batch, a claim of
// several, a results call), so that each kind reaches the store in one
// statement at flush (store.RunsCreateQueued, RunUpdates,
// AttemptRunUpdates, LogAppends), in the same transaction: a statement
// costs PostgreSQL about as much as the row it writes. Only writes of rows the transaction has locked, and that
// nothing later in it reads, are held back; everything else (a next
// attempt, released keys, audit events) is written in place. A nil
// *runWrites writes at once.
//
// It must be made inside the transaction's body, so that a body run again
// (a retry, a group split) starts with none held.
type runWrites struct {
	added []store.AttemptRun // queued runs with their first attempts
	runs  []*store.Run
	pairs []store.AttemptRun
	logs  []*store.LogAppendParams
}

// runCreateQueued is tx.RunCreateQueued, held back. ErrAlreadyExists
// (a taken idempotency key) then comes from flush.
func (w *runWrites) runCreateQueued(ctx context.Context, tx store.Tx, r *store.Run, a *store.Attempt) error {
	if w == nil {
		return tx.RunCreateQueued(ctx, r, a)
	}
	w.added = append(w.added, store.AttemptRun{Attempt: a, Run: r})
	return nil
}

// runUpdate is tx.RunUpdate, held back.
func (w *runWrites) runUpdate(ctx context.Context, tx store.Tx, r *store.Run) error {
	if w == nil {
		return tx.RunUpdate(ctx, r)
	}
	if w.holds(r.ID) {
		if err := w.flush(ctx, tx); err != nil {
			return err
		}
	}
	w.runs = append(w.runs, r)
	return nil
}

// attemptRunUpdate is tx.AttemptRunUpdate, held back.
func (w *runWrites) attemptRunUpdate(ctx context.Context, tx store.Tx, a *store.Attempt, r *store.Run) error {
	if w == nil {
		return tx.AttemptRunUpdate(ctx, a, r)
	}
	if w.holds(r.ID) || w.holdsAttempt(a.ID) {
		if err := w.flush(ctx, tx); err != nil {
			return err
		}
	}
	w.pairs = append(w.pairs, store.AttemptRun{Attempt: a, Run: r})
	return nil
}

// logAppend is tx.LogAppend, held back; a repeated chunk is ignored
// either way.
func (w *runWrites) logAppend(ctx context.Context, tx store.Tx, p *store.LogAppendParams) error {
	if w == nil {
		_, err := tx.LogAppend(ctx, p)
		return err
	}
	for _, q := range w.logs {
		if q.AttemptID == p.AttemptID && q.Seq == p.Seq {
			if err := w.flush(ctx, tx); err != nil {
				return err
			}
			break
		}
	}
	w.logs = append(w.logs, p)
	return nil
}

// holds reports whether an update of run id is held back: the batches
// name each row once, so a second update flushes the first.
func (w *runWrites) holds(id string) bool {
	for _, r := range w.runs {
		if r.ID == id {
			return true
		}
	}
	for _, p := range w.pairs {
		if p.Run.ID == id {
			return true
		}
	}
	return false
}

func (w *runWrites) holdsAttempt(id string) bool {
	for _, p := range w.pairs {
		if p.Attempt.ID == id {
			return true
		}
	}
	return false
}

// flush writes what is held back: new runs first, then the log chunks,
// as a single result writes its chunk before it ends the attempt.
func (w *runWrites) flush(ctx context.Context, tx store.Tx) error {
	if w == nil {
		return nil
	}
	if len(w.added) > 0 {
		if err := tx.RunsCreateQueued(ctx, w.added); err != nil {
			return err
		}
		w.added = w.added[:0]
	}
	if len(w.logs) > 0 {
		if err := tx.LogAppends(ctx, w.logs); err != nil {
			return err
		}
		w.logs = w.logs[:0]
	}
	if len(w.pairs) > 0 {
		if err := tx.AttemptRunUpdates(ctx, w.pairs); err != nil {
			return err
		}
		w.pairs = w.pairs[:0]
	}
	if len(w.runs) > 0 {
		if err := tx.RunUpdates(ctx, w.runs); err != nil {
			return err
		}
		w.runs = w.runs[:0]
	}
	return nil
}
