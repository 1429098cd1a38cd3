package control

import (
	"context"
	"errors"
	"fmt"

	"github.com/jobplane/jobplane/internal/lease"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// RunOutcome is one item's outcome in RequestRuns: the run (created, or
// the earlier run its idempotency key names), or the refusal of that item
// alone.
type RunOutcome struct {
	View    *RunView
	Created bool
	Err     error
}

// RequestRuns requests several runs in one call and one transaction, each
// item decided, checked and recorded as RequestRun would do it alone, in
// the items' order: a later item sees the runs of the earlier ones (a
// reject key an earlier item took is held for it). An item RequestRun
// would refuse (denied, invalid parameters, a held key, an unknown job) is
// refused on its own and the others are recorded; an item that is not a
// run request at all refuses the whole call, and nothing is recorded.
func (s *Service) RequestRuns(ctx context.Context, actor principal.Actor, reqs []protocol.RunRequest) ([]RunOutcome, error) {
	if len(reqs) == 0 || len(reqs) > protocol.MaxRunBatch {
		return nil, fmt.Errorf("runs must hold 1 to %d items, not %d: %w", protocol.MaxRunBatch, len(reqs), protocol.ErrBadRequest)
	}
	keys := make(map[string]int, len(reqs))
	for i := range reqs {
		if err := checkRunRequest(&reqs[i]); err != nil {
			return nil, itemError("runs", i, err)
		}
		if k := reqs[i].IdempotencyKey; k != "" {
			if j, dup := keys[k]; dup {
				return nil, &protocol.FieldError{Field: fmt.Sprintf("runs[%d].idempotency_key", i), Err: fmt.Errorf("runs[%d]: idempotency key %q is also runs[%d]'s: %w", i, k, j, protocol.ErrBadRequest)}
			}
			keys[k] = i
		}
	}
	// A concurrent request that wins the insert of an item's idempotency
	// key fails this batch's transaction; nothing of it was committed, and
	// the next try finds that run by its key.
	for try := 0; ; try++ {
		out, err := s.requestRuns(ctx, actor, reqs)
		if errors.Is(err, store.ErrAlreadyExists) && try < 2 {
			continue
		}
		if errors.Is(err, store.ErrAlreadyExists) {
			return nil, fmt.Errorf("idempotency key race: %w", protocol.ErrRetry)
		}
		return out, err
	}
}

func (s *Service) requestRuns(ctx context.Context, actor principal.Actor, reqs []protocol.RunRequest) ([]RunOutcome, error) {
	out := make([]RunOutcome, len(reqs))
	prepared := make([]*preparedRun, len(reqs))
	batch := &requestBatch{catalogs: map[[2]string]Catalog{}}
	for i := range reqs {
		p, v, err := s.prepareRun(ctx, actor, &reqs[i], RequestOrigin{}, batch)
		switch {
		case protocol.IsRefusal(err):
			out[i].Err = err
		case err != nil:
			return nil, err
		case v != nil:
			out[i].View = v
		default:
			prepared[i] = p
		}
	}
	err := s.grouped.InTx(ctx, func(tx store.Tx) error {
		// The items' reject and once keys, all of them in order first
		// (keyorder.go); each item's check then finds them locked.
		var keys [][]store.LeaseKey
		for _, p := range prepared {
			if p != nil && p.decision.Allowed {
				keys = append(keys, lease.CheckedKeys(p.keys))
			}
		}
		if err := s.leases.LockKeysFirst(ctx, tx, actor.TenantID, keys); err != nil {
			return err
		}
		w := newRunWrites(tx)
		for i, p := range prepared {
			if p == nil {
				continue
			}
			out[i].Err = nil
			err := s.writeRun(ctx, tx, w, p)
			switch {
			case protocol.IsRefusal(err):
				// writeRun refuses only after reads: the transaction is
				// as the items before this one left it.
				out[i].Err = err
			case err != nil:
				return err
			}
		}
		return w.flush(ctx)
	})
	if errors.Is(err, store.ErrAlreadyExists) {
		return nil, err
	}
	if err != nil {
		return nil, store.Refusal(err)
	}
	for i, p := range prepared {
		if p == nil || out[i].Err != nil {
			continue
		}
		out[i].View, out[i].Err = s.requested(ctx, p)
		out[i].Created = out[i].Err == nil
	}
	return out, nil
}

// itemError names item i of a batch in a refusal and its field.
func itemError(list string, i int, err error) error {
	field := fmt.Sprintf("%s[%d]", list, i)
	if fe := (*protocol.FieldError)(nil); errors.As(err, &fe) {
		field += "." + fe.Field
	}
	return &protocol.FieldError{Field: field, Err: fmt.Errorf("%s: %w", field, err)}
}
