package control

import (
	"context"

	"github.com/jobplane/jobplane/internal/store"
)

// runWriter is where a transaction body writes new runs, run and attempt
// updates and log chunks: straight into the transaction (writeNow), or
// held back so that each kind reaches the store in one statement
// (runWrites). Everything else a body writes (a next attempt, released
// keys, audit events) goes to the transaction in place.
type runWriter interface {
	// runCreateQueued is tx.RunCreateQueued. ErrAlreadyExists (a taken
	// idempotency key) may come from flush.
	runCreateQueued(ctx context.Context, r *store.Run, a *store.Attempt) error
	// runUpdate is tx.RunUpdate.
	runUpdate(ctx context.Context, r *store.Run) error
	// attemptRunUpdate is tx.AttemptRunUpdate.
	attemptRunUpdate(ctx context.Context, a *store.Attempt, r *store.Run) error
	// logAppend is tx.LogAppend; a repeated chunk is ignored.
	logAppend(ctx context.Context, p *store.LogAppendParams) error
	// flush writes whatever is held back. A body calls it last.
	flush(ctx context.Context) error
}

// writeNow writes in place: the body of a call that moves one run.
type writeNow struct{ tx store.Tx }

func (w writeNow) runCreateQueued(ctx context.Context, r *store.Run, a *store.Attempt) error {
	return w.tx.RunCreateQueued(ctx, r, a)
}

func (w writeNow) runUpdate(ctx context.Context, r *store.Run) error { return w.tx.RunUpdate(ctx, r) }

func (w writeNow) attemptRunUpdate(ctx context.Context, a *store.Attempt, r *store.Run) error {
	return w.tx.AttemptRunUpdate(ctx, a, r)
}

func (w writeNow) logAppend(ctx context.Context, p *store.LogAppendParams) error {
	_, err := w.tx.LogAppend(ctx, p)
	return err
}

func (writeNow) flush(context.Context) error { return nil }

// runWrites holds back the new runs, the run and attempt updates and the
// log chunks of a call that moves several runs (a run batch, a claim of
// several, a results call), so that each kind reaches the store in one
// statement at flush (store.RunsCreateQueued, RunUpdates,
// AttemptRunUpdates, LogAppends), in the same transaction: a statement
// costs PostgreSQL about as much as the row it writes. Only writes of rows
// the transaction has locked, and that nothing later in it reads, are held
// back.
//
// It must be made inside the transaction's body (newRunWrites), so that a
// body run again (a retry, a group split) starts with none held.
type runWrites struct {
	tx    store.Tx
	added []store.AttemptRun // queued runs with their first attempts
	runs  []*store.Run
	pairs []store.AttemptRun
	logs  []*store.LogAppendParams
}

func newRunWrites(tx store.Tx) *runWrites { return &runWrites{tx: tx} }

func (w *runWrites) runCreateQueued(_ context.Context, r *store.Run, a *store.Attempt) error {
	w.added = append(w.added, store.AttemptRun{Attempt: a, Run: r})
	return nil
}

func (w *runWrites) runUpdate(ctx context.Context, r *store.Run) error {
	if w.holds(r.ID) {
		if err := w.flush(ctx); err != nil {
			return err
		}
	}
	w.runs = append(w.runs, r)
	return nil
}

func (w *runWrites) attemptRunUpdate(ctx context.Context, a *store.Attempt, r *store.Run) error {
	if w.holds(r.ID) || w.holdsAttempt(a.ID) {
		if err := w.flush(ctx); err != nil {
			return err
		}
	}
	w.pairs = append(w.pairs, store.AttemptRun{Attempt: a, Run: r})
	return nil
}

func (w *runWrites) logAppend(ctx context.Context, p *store.LogAppendParams) error {
	for _, q := range w.logs {
		if q.AttemptID == p.AttemptID && q.Seq == p.Seq {
			if err := w.flush(ctx); err != nil {
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
func (w *runWrites) flush(ctx context.Context) error {
	if len(w.added) > 0 {
		if err := w.tx.RunsCreateQueued(ctx, w.added); err != nil {
			return err
		}
		w.added = w.added[:0]
	}
	if len(w.logs) > 0 {
		if err := w.tx.LogAppends(ctx, w.logs); err != nil {
			return err
		}
		w.logs = w.logs[:0]
	}
	if len(w.pairs) > 0 {
		if err := w.tx.AttemptRunUpdates(ctx, w.pairs); err != nil {
			return err
		}
		w.pairs = w.pairs[:0]
	}
	if len(w.runs) > 0 {
		if err := w.tx.RunUpdates(ctx, w.runs); err != nil {
			return err
		}
		w.runs = w.runs[:0]
	}
	return nil
}
