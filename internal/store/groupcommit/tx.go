package groupcommit

import (
	"context"
	"errors"

	"github.com/jobplane/jobplane/internal/store"
)

// groupTx is the transaction the bodies of one group share.
//
// It remembers, for the group, which claim scopes found nothing to claim,
// so that a herd of idle long-polling runners woken together costs one
// claim query, not one each. Anything that may make work claimable wakes
// claimers (store.Queries.WakeClaimers), which forgets it.
//
// It also notes a body that took, checked or released lease keys
// (keysTouched). Where rows are locked (PostgreSQL), every transaction that
// waits for lease-key rows locks them in one order, (tenant, key)
// ascending, so that no two can each hold a row the other waits for (see
// package lease); a group of bodies does not keep that order across its
// bodies, so a group ends with its first body that touched keys, and the
// bodies after it form the next group. A group whose second body took key
// "a" after its first took "b" deadlocked with one that released "a" then
// "b". The cut also keeps a group that holds key rows from waiting for
// anything but its commit: every body waits for attempt rows before key
// rows (a result or a renewal locks its attempts first; a claim skips
// locked attempts), but a claim may hold an attempt's row it did not take
// (its SKIP LOCKED statement locked the row, found on its latest version
// that another claim had just taken it, and kept the lock to its end).
// Such a claim waiting for a key's row, held by a group whose next body
// then waited for that attempt's row (the runner's renewal, say), was a
// deadlock that PostgreSQL broke after a second by failing one of them.
// Groups of calls without lease keys, the common case, are not cut, and a
// group that touched keys keeps its commit slot until it committed (slot).
type groupTx struct {
	store.Tx
	empty       map[string]bool
	keysTouched bool
}

func (b *groupTx) reset(tx store.Tx) {
	b.Tx = tx
	clear(b.empty)
	b.keysTouched = false
}

func (b *groupTx) markEmpty(k string) {
	if b.empty == nil {
		b.empty = map[string]bool{}
	}
	b.empty[k] = true
}

// AttemptClaimRun skips the query when an earlier body of the group found
// nothing in the same scope.
func (b *groupTx) AttemptClaimRun(ctx context.Context, p *store.AttemptClaimParams) (*store.Attempt, *store.Run, error) {
	k := p.Scope()
	if b.empty[k] {
		return nil, nil, store.ErrNotFound
	}
	a, r, err := b.Tx.AttemptClaimRun(ctx, p)
	if errors.Is(err, store.ErrNotFound) {
		b.markEmpty(k)
	}
	return a, r, err
}

// AttemptClaimRuns is AttemptClaimRun for several slots: a claim that found
// fewer than it asked for leaves the scope empty for the rest of the group.
func (b *groupTx) AttemptClaimRuns(ctx context.Context, p *store.AttemptClaimParams, slots []store.ClaimSlot) ([]store.ClaimedRun, error) {
	k := p.Scope()
	if b.empty[k] {
		return nil, nil
	}
	cs, err := b.Tx.AttemptClaimRuns(ctx, p, slots)
	if err == nil && len(cs) < len(slots) {
		b.markEmpty(k)
	}
	return cs, err
}

// WakeClaimers forgets the empty scopes: work may have become claimable.
func (b *groupTx) WakeClaimers(ctx context.Context) error {
	clear(b.empty)
	return b.Tx.WakeClaimers(ctx)
}

// LeaseKeyLock locks a key's row: the group ends with this body.
func (b *groupTx) LeaseKeyLock(ctx context.Context, tenant, key string) error {
	b.keysTouched = true
	return b.Tx.LeaseKeyLock(ctx, tenant, key)
}

// LeaseAcquire takes keys: the group ends with this body.
func (b *groupTx) LeaseAcquire(ctx context.Context, p *store.LeaseAcquireParams) ([]store.LeaseHold, string, error) {
	if len(p.Keys) > 0 {
		b.keysTouched = true
	}
	return b.Tx.LeaseAcquire(ctx, p)
}

// LeaseReleaseAttempt releases keys: the group ends with this body.
func (b *groupTx) LeaseReleaseAttempt(ctx context.Context, tenant, attemptID string) ([]string, error) {
	b.keysTouched = true
	return b.Tx.LeaseReleaseAttempt(ctx, tenant, attemptID)
}

// LeaseForceRelease breaks a key: the group ends with this body.
func (b *groupTx) LeaseForceRelease(ctx context.Context, tenant, key string) ([]store.LeaseHold, int64, error) {
	b.keysTouched = true
	return b.Tx.LeaseForceRelease(ctx, tenant, key)
}
