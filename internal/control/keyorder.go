package control

import (
	"context"
	"errors"
	"slices"

	"github.com/jobplane/jobplane/internal/store"
)

// Lease-key lock order. On PostgreSQL every transaction that waits for
// lease-key rows (a request checking a reject or once key, a claim taking
// keys, a result releasing them) locks them in one order, (tenant, key)
// ascending, so that no two can each hold a row the other waits for. A
// body sorts its own keys; what it cannot see is the group around it: a
// group transaction whose second body takes key "a" after its first took
// "b" deadlocks with one that releases "a" then "b", and PostgreSQL breaks
// that only after a second by failing one of them (found by L11 in CI). So
// a group transaction tracks the rows its bodies locked, and a body that
// would lock a row below one an earlier body locked stops with
// errLockOrder: the committer commits the bodies before it and runs it in
// a transaction of its own.
//
// A body that locks the keys of several runs (a claim or a results call of
// several, a batch of run requests, disabling a runner) locks all of them
// first, in order (lockKeysFirst), for the same reason.

// errLockOrder: a body of a group transaction would lock a lease key's row
// out of the group's order.
var errLockOrder = errors.New("lease keys out of the group transaction's lock order")

// keyLocks is what a group transaction's bodies locked so far.
type keyLocks struct {
	on     bool            // the store has row locks (PostgreSQL)
	held   map[string]bool // tenant "\x00" key
	before string          // the greatest row locked by the bodies before this one
	body   string          // the greatest row locked by this body
	// touched: a body of the group took, checked or released lease keys;
	// such a group keeps its commit slot until it has committed (slot).
	touched bool
}

func (k *keyLocks) reset() {
	clear(k.held)
	k.before, k.body = "", ""
	k.touched = false
}

// nextBody is called before each body of the group.
func (k *keyLocks) nextBody() { k.before = max(k.before, k.body) }

func keyRow(tenant, key string) string { return tenant + "\x00" + key }

// keysInOrder says whether tx may lock the rows of keys (of one tenant)
// now: errLockOrder when tx is a group transaction and one of them, not
// locked already, is below a row an earlier body locked.
func keysInOrder(tx store.Tx, tenant string, keys []string) error {
	bt, ok := tx.(*batchTx)
	if ok && len(keys) > 0 {
		// Not for none: every run request checks its keys, most have none.
		bt.keys.touched = true
	}
	if !ok || !bt.keys.on || bt.keys.before == "" {
		return nil
	}
	for _, k := range keys {
		if r := keyRow(tenant, k); !bt.keys.held[r] && r <= bt.keys.before {
			return errLockOrder
		}
	}
	return nil
}

// keysLocked notes the rows tx just locked; only those actually locked, or
// a later body would take a row it believes held out of order.
func keysLocked(tx store.Tx, tenant string, keys []string) {
	bt, ok := tx.(*batchTx)
	if !ok || !bt.keys.on {
		return
	}
	if bt.keys.held == nil {
		bt.keys.held = map[string]bool{}
	}
	for _, k := range keys {
		r := keyRow(tenant, k)
		bt.keys.held[r] = true
		bt.keys.body = max(bt.keys.body, r)
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

// lockKeyRows locks the rows of keys (sorted, of one tenant) in tx, within
// its group's order.
func lockKeyRows(ctx context.Context, tx store.Tx, tenant string, keys []string) error {
	if err := keysInOrder(tx, tenant, keys); err != nil {
		return err
	}
	for i, k := range keys {
		if err := tx.LeaseKeyLock(ctx, tenant, k); err != nil {
			keysLocked(tx, tenant, keys[:i])
			return err
		}
	}
	keysLocked(tx, tenant, keys)
	return nil
}
