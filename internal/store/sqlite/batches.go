package sqlite

import (
	"context"

	"github.com/jobplane/jobplane/internal/store"
)

// The batch writes are loops here: a statement costs no round trip in
// process, and SQLite has one writer, so there is no lock order to keep.

// RunUpdates is RunUpdate of each run.
func (q *queries) RunUpdates(ctx context.Context, runs []*store.Run) error {
	for _, r := range runs {
		if err := q.RunUpdate(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// AttemptRunUpdates is AttemptRunUpdate of each pair.
func (q *queries) AttemptRunUpdates(ctx context.Context, pairs []store.AttemptRun) error {
	for _, p := range pairs {
		if err := q.AttemptRunUpdate(ctx, p.Attempt, p.Run); err != nil {
			return err
		}
	}
	return nil
}

// LogAppends is LogAppend of each chunk.
func (q *queries) LogAppends(ctx context.Context, ps []*store.LogAppendParams) error {
	for _, p := range ps {
		if _, err := q.LogAppend(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// RunsCreateQueued is RunCreateQueued of each pair.
func (q *queries) RunsCreateQueued(ctx context.Context, pairs []store.AttemptRun) error {
	for _, p := range pairs {
		if err := q.RunCreateQueued(ctx, p.Run, p.Attempt); err != nil {
			return err
		}
	}
	return nil
}
