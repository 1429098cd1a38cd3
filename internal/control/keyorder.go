package control

import (
	"context"
	"slices"

	"github.com/jobplane/jobplane/internal/store"
)

// Lease-key lock order. On PostgreSQL every transaction that waits for
// lease-key rows (a request checking a reject or once key, a claim taking
// keys, a result releasing them) locks them in one order, (tenant, key)
// ascending, so that no two can each hold a row the other waits for. A
// body sorts its own keys, and one that locks the keys of several runs (a
// claim or a results call of several, a batch of run requests, disabling
// a runner) locks all of them first, in order (lockKeysFirst).
//
// A group transaction ends with its first body that took, checked or
// released lease keys; the bodies after it form the next group (the cut
// in committer.group, on batchTx.keysTouched). That keeps the order across
// bodies too: a group whose second body took key "a" after its first took
// "b" deadlocked with one that released "a" then "b" (L11 in CI, before
// session 8, when a group still tracked its bodies' keys and ran a body
// alone that would have locked one out of order). It also keeps a group that holds key rows from
// waiting for anything but its commit. Every body waits for attempt rows
// before key rows (a result or a renewal locks its attempts first; a claim
// skips locked attempts), but a claim may hold an attempt's row it did not
// take: its SKIP LOCKED statement locked the row, found on its latest
// version that another claim had just taken it, and passed over it,
// keeping the lock to its end. Such a claim waiting for a key's row, held
// by a group whose next body then waited for that attempt's row (the
// runner's renewal, say), was a deadlock, which PostgreSQL broke after a
// second by failing one of them (17 in two and a half minutes of the
// long lease linearizability test; none since). Groups of calls without
// lease keys, the common case, are not cut.

// keysTouched notes that a body of tx is about to take, check or release
// n lease keys. Not for none: every run request checks its keys, most
// have none.
func keysTouched(tx store.Tx, n int) {
	if bt, ok := tx.(*batchTx); ok && n > 0 {
		bt.keysTouched = true
	}
}

// lockKeysFirst locks, in order, the key rows of every run a body is about
// to check, take or release keys of, when there are several such runs: each
// run's own keys are locked in order, the runs' one after the other would
// not be. All runs are of one tenant. Nothing on a store without row locks.
func (s *Service) lockKeysFirst(ctx context.Context, tx store.Tx, tenant string, runs [][]store.LeaseKey) error {
	if !s.commits.locks {
		return nil
	}
	var keys []string
	n := 0
	for _, ks := range runs {
		if len(ks) > 0 {
			n++
		}
		for _, k := range ks {
			keys = append(keys, k.Key)
		}
	}
	if n < 2 {
		return nil
	}
	slices.Sort(keys)
	return lockKeyRows(ctx, tx, tenant, slices.Compact(keys))
}

// lockKeyRows locks the rows of keys (sorted, of one tenant) in tx.
func lockKeyRows(ctx context.Context, tx store.Tx, tenant string, keys []string) error {
	keysTouched(tx, len(keys))
	for _, k := range keys {
		if err := tx.LeaseKeyLock(ctx, tenant, k); err != nil {
			return err
		}
	}
	return nil
}
