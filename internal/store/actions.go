package store

import (
	"context"
	"time"
)

// ActionsPool is the pool of the attempts of jobs run by GitHub Actions
// (catalog.ActionsPool). No runner can be registered in it (pool names of
// runners never start with "@"), so a claim never hands such an attempt to
// a runner: only the Actions exchange does.
const ActionsPool = "@github-actions"

// States of an ActionsDispatch.
const (
	// DispatchPending: not yet accepted by GitHub (retried on 5xx).
	DispatchPending = "pending"
	// DispatchSent: GitHub accepted the dispatch; waiting for the
	// workflow's exchange until NextAttemptAt.
	DispatchSent = "dispatched"
	// DispatchExchanged: a workflow run exchanged its token for the
	// attempt; no other exchange succeeds.
	DispatchExchanged = "exchanged"
	// DispatchFailed: GitHub refused the dispatch, the workflow never
	// called back, or the attempt ended before the exchange.
	DispatchFailed = "failed"
)

// ActionsDispatch is the GitHub Actions dispatch of one attempt, and the
// record of its exchange.
type ActionsDispatch struct {
	AttemptID      string
	RunID          string
	Tenant         string
	InstallationID int64
	Repo           string // owner/name
	Commit         string // the commit the run builds
	Workflow       string // file name under .github/workflows/
	// RepoID, OwnerID and Ref are what GitHub answered when dispatched: the
	// repository's and owner's IDs and the default branch's full ref.
	RepoID        int64
	OwnerID       int64
	Ref           string
	State         string
	Tries         int
	NextAttemptAt time.Time // pending: next send; dispatched: callback deadline
	LastError     string
	DispatchedAt  *time.Time
	ExchangedAt   *time.Time
	// WorkflowRunID and WorkflowRunAttempt name the workflow run that
	// exchanged; TokenID is its token's jti. Each is unique among
	// exchanged dispatches (ErrAlreadyExists), which is what refuses a
	// replay of a token or a second exchange by the same run.
	WorkflowRunID      int64
	WorkflowRunAttempt int64
	TokenID            string
	CreatedAt          time.Time // zero: now
}

// ActionsQueries are the GitHub Actions dispatch methods of Queries.
type ActionsQueries interface {
	// ActionsDispatchCreate records a dispatch (ErrAlreadyExists when the
	// attempt has one).
	ActionsDispatchCreate(ctx context.Context, d *ActionsDispatch) error
	// ActionsDispatchGet reads an attempt's dispatch.
	ActionsDispatchGet(ctx context.Context, attemptID string) (*ActionsDispatch, error)
	// ActionsDispatchUpdate writes the mutable fields (RepoID, OwnerID,
	// Ref, State, Tries, NextAttemptAt, LastError, DispatchedAt,
	// ExchangedAt, WorkflowRunID, WorkflowRunAttempt, TokenID);
	// ErrAlreadyExists when the workflow run or token was already
	// exchanged for another attempt.
	ActionsDispatchUpdate(ctx context.Context, d *ActionsDispatch) error
	// ActionsDispatchListDue lists pending or dispatched dispatches whose
	// NextAttemptAt is at or before now (nil: the database's clock),
	// oldest first.
	ActionsDispatchListDue(ctx context.Context, now *time.Time, limit int) ([]*ActionsDispatch, error)
	// ActionsAttemptsUndispatched lists queued, due, unblocked attempts of
	// ActionsPool that have no dispatch yet, oldest first.
	ActionsAttemptsUndispatched(ctx context.Context, now *time.Time, limit int) ([]*Attempt, error)
}
