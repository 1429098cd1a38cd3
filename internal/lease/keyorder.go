package lease

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
// a runner) locks all of them first, in order (LockKeysFirst). A group
// transaction of several calls keeps the order by ending with its first
// body that touched keys (package groupcommit).

// LockKeysFirst locks, in order, the key rows of every run a body is about
// to check, take or release keys of, when there are several such runs: each
// run's own keys are locked in order, the runs' one after the other would
// not be. All runs are of one tenant. Nothing on a store without row locks.
func (s *Service) LockKeysFirst(ctx context.Context, tx Tx, tenant string, runs [][]store.LeaseKey) error {
	if s.store.SingleWriter() {
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
func lockKeyRows(ctx context.Context, tx Tx, tenant string, keys []string) error {
	for _, k := range keys {
		if err := tx.LeaseKeyLock(ctx, tenant, k); err != nil {
			return err
		}
	}
	return nil
}
