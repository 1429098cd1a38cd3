package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jobplane/jobplane/internal/audit"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// Store is what the lease service reads outside transactions, and where
// it runs its own (a store.Store).
type Store interface {
	InTx(ctx context.Context, fn func(tx store.Tx) error) error
	SingleWriter() bool
	Now(ctx context.Context, now *time.Time) (time.Time, error)
	AttemptGetByID(ctx context.Context, id string, forUpdate bool) (*store.Attempt, error)
	LeaseKeyGet(ctx context.Context, tenant, key string) (*store.LeaseKeyState, error)
	LeaseList(ctx context.Context, tenant, prefix string) ([]store.LeaseHold, error)
	LeaseWaiters(ctx context.Context, tenant, key string) ([]*store.Attempt, error)
}

// Tx is what the lease rules need of the caller's transaction: they
// check, take and release keys in the transaction that requests, claims
// or ends the run, and append their audit events to it.
type Tx interface {
	audit.Appender
	AttemptUpdate(ctx context.Context, a *store.Attempt) error
	LeaseAcquire(ctx context.Context, p *store.LeaseAcquireParams) (held []store.LeaseHold, blockedOn string, err error)
	LeaseBlockWaiters(ctx context.Context, tenant, key string, limit int) (int, error)
	LeaseKeyConsume(ctx context.Context, tenant, key, runID string) error
	LeaseKeyGet(ctx context.Context, tenant, key string) (*store.LeaseKeyState, error)
	LeaseKeyLock(ctx context.Context, tenant, key string) error
	LeaseLiveRun(ctx context.Context, tenant, key, exceptRun string) (string, error)
	LeaseReleaseAttempt(ctx context.Context, tenant, attemptID string) ([]string, error)
	RunUpdate(ctx context.Context, r *store.Run) error
	WakeClaimers(ctx context.Context) error
}

var (
	_ Store = store.Store(nil)
	_ Tx    = store.Tx(nil)
)

// Config configures the Service.
type Config struct {
	Store  Store
	Clock  clock.Clock
	Logger *slog.Logger
	// Batch bounds one pass of WakeStrandedWaiters (default 100).
	Batch int
}

// Service applies the run lease rules: it checks a request's keys, takes
// a claimed attempt's keys all or none, releases them when the attempt
// ends, and answers and breaks leases for people and downstream systems.
type Service struct {
	store Store
	clock clock.Clock
	log   *slog.Logger
	batch int
}

// New returns a Service.
func New(cfg Config) *Service {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 100
	}
	return &Service{store: cfg.Store, clock: cfg.Clock, log: cfg.Logger, batch: cfg.Batch}
}

func (s *Service) audit(ctx context.Context, tx audit.Appender, tenant, actor, action, subject string, details any) error {
	return audit.Recorder{Clock: s.clock}.Append(ctx, tx, tenant, actor, action, subject, details)
}

// Holder names who holds an attempt's lease in audit details (RELIABILITY
// AU1): the runner's registration, the incarnation of the claim (the
// runner's claim request ID, new for every claim a runner process makes,
// else the attempt number), and the lease itself (the first 16 hex digits of
// the lease token's digest, enough to tell two leases of one attempt apart
// without storing anything that could be replayed).
func Holder(a *store.Attempt) HolderDetails {
	inc := a.ClaimRequestID
	if inc == "" {
		inc = fmt.Sprintf("attempt-%d", a.Number)
	}
	lease := a.LeaseDigest
	if len(lease) > 16 {
		lease = lease[:16]
	}
	return HolderDetails{Registration: a.RunnerID, Incarnation: inc, Lease: lease}
}

// HolderDetails is Holder's answer; its fields are in key order, so it
// encodes as a map with the same entries would.
type HolderDetails struct {
	Incarnation  string `json:"incarnation"`
	Lease        string `json:"lease"`
	Registration string `json:"registration"`
}

func keyNames(keys []store.LeaseKey) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.Key
	}
	return out
}

// RunKeys are the lease keys a run was requested with.
func RunKeys(r *store.Run) ([]store.LeaseKey, error) {
	var keys []store.LeaseKey
	// Most runs have no keys, and this is read several times per claim and
	// per result.
	if len(r.LeaseKeys) == 0 || string(r.LeaseKeys) == "[]" || string(r.LeaseKeys) == "null" {
		return nil, nil
	}
	if err := json.Unmarshal(r.LeaseKeys, &keys); err != nil {
		return nil, fmt.Errorf("decode lease keys of run %s: %w", r.ID, err)
	}
	return keys, nil
}

// CheckedKeys are the keys Check locks, in order: the reject and once
// keys.
func CheckedKeys(keys []store.LeaseKey) []store.LeaseKey {
	var out []store.LeaseKey
	for _, k := range store.SortedLeaseKeys(keys) {
		if k.Once || k.OnConflict == "reject" {
			out = append(out, k)
		}
	}
	return out
}

// Check refuses a request whose keys are spoken for: a once key already
// consumed by a successful run, or a reject key held or waited for by a run
// that has not finished.
func (s *Service) Check(ctx context.Context, tx Tx, tenant string, keys []store.LeaseKey) error {
	// Two requests checking the same key at once would both find it free
	// and both be accepted: each locks the keys it checks first (sorted, as
	// claims lock them), so the second sees the first's run.
	checked := keyNames(CheckedKeys(keys))
	if err := lockKeyRows(ctx, tx, tenant, checked); err != nil {
		return err
	}
	for _, k := range keys {
		if k.Once {
			st, err := tx.LeaseKeyGet(ctx, tenant, k.Key)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
			if err == nil && st.ConsumedByRun != "" {
				return &protocol.RunRefError{RunID: st.ConsumedByRun, Err: fmt.Errorf("lease key %s was consumed by run %s, which succeeded: %w", k.Key, st.ConsumedByRun, protocol.ErrAlreadyDone)}
			}
		}
		if k.OnConflict == "reject" {
			other, err := tx.LeaseLiveRun(ctx, tenant, k.Key, "")
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
			if err == nil {
				return &protocol.RunRefError{RunID: other, Err: fmt.Errorf("lease key %s is held or waited for by run %s: %w", k.Key, other, protocol.ErrLeaseHeld)}
			}
		}
	}
	return nil
}

// Acquire takes the run's keys for its just-claimed attempt, all or none.
// When a key is not free the claim is undone: the attempt goes back to the
// queue marked as waiting for that key, and no claim looks at it again until
// the key is released.
func (s *Service) Acquire(ctx context.Context, tx Tx, r *store.Run, a *store.Attempt) (held []store.LeaseHold, blocked bool, err error) {
	keys, err := RunKeys(r)
	if err != nil || len(keys) == 0 {
		return nil, false, err
	}
	held, blockedOn, err := tx.LeaseAcquire(ctx, &store.LeaseAcquireParams{Tenant: r.Tenant, RunID: r.ID, AttemptID: a.ID, Keys: keys, Now: s.clock.NowOrNil()})
	if err != nil {
		return nil, false, err
	}
	if blockedOn == "" {
		if len(held) > 0 && held[0].ExpiresAt != nil {
			a.LeaseExpiresAt = held[0].ExpiresAt // restarted after the key locks
		}
		r.WaitingFor = ""
		for _, h := range held {
			if err := s.audit(ctx, tx, r.Tenant, "system:leases", "lease.acquired", r.ID, map[string]any{
				"key": h.Key, "slot": h.Slot, "fencing_token": h.FencingToken, "attempt": a.ID, "holder": Holder(a)}); err != nil {
				return nil, false, err
			}
		}
		return held, false, nil
	}
	a.State = store.AttemptQueued
	a.RunnerID, a.LeaseDigest, a.ClaimRequestID = "", "", ""
	a.ClaimedAt, a.LeaseExpiresAt, a.Deadline, a.HeartbeatAt = nil, nil, nil, nil
	a.BlockedOn = blockedOn
	if err := tx.AttemptUpdate(ctx, a); err != nil {
		return nil, false, err
	}
	// An attempt that waited for this key before was woken by its release,
	// with every other waiter: those are marked again now, in one
	// statement, rather than by claims one at a time, each under the key's
	// lock (15 s for 10,000 on SQLite, 214 s on PostgreSQL:
	// docs/benchmarks.md). Only then: the statement reads all the key's
	// live runs, too much for every claim of a held key.
	woken := r.WaitingFor == "lease "+blockedOn
	r.WaitingFor = "lease " + blockedOn
	if err := tx.RunUpdate(ctx, r); err != nil {
		return nil, false, err
	}
	if i := slices.IndexFunc(keys, func(k store.LeaseKey) bool { return k.Key == blockedOn }); woken && i >= 0 {
		if _, err := tx.LeaseBlockWaiters(ctx, r.Tenant, blockedOn, keys[i].Limit); err != nil {
			return nil, false, err
		}
	}
	return nil, true, nil
}

// Release drops the attempt's holds when it ends; a success consumes its
// once keys.
func (s *Service) Release(ctx context.Context, tx Tx, r *store.Run, a *store.Attempt) error {
	keys, err := RunKeys(r)
	if err != nil || len(keys) == 0 {
		return err
	}
	released, err := tx.LeaseReleaseAttempt(ctx, r.Tenant, a.ID)
	if err != nil {
		return err
	}
	if a.State == store.AttemptSucceeded {
		for _, k := range keys {
			if k.Once && slices.Contains(released, k.Key) {
				if err := tx.LeaseKeyConsume(ctx, r.Tenant, k.Key, r.ID); err != nil {
					return err
				}
			}
		}
	}
	if len(released) == 0 {
		return nil
	}
	if err := tx.WakeClaimers(ctx); err != nil { // waiters were unblocked
		return err
	}
	return s.audit(ctx, tx, r.Tenant, "system:leases", "lease.released", r.ID, map[string]any{
		"keys": released, "attempt": a.ID, "attempt_state": a.State, "holder": Holder(a), "reason": "attempt " + string(a.State)})
}

// StrandedWaiterInterval is how often a server sweeps for attempts waiting
// for a key that nobody holds (WakeStrandedWaiters).
const StrandedWaiterInterval = 5 * time.Second

// WakeStrandedWaiters makes claimable again the queued attempts waiting for
// a key that nobody holds, a batch at a time. A release does not wait for
// a waiter's row that another transaction has locked (on PostgreSQL that
// wait could close a cycle with a claim holding the row and waiting for
// the key); the key's next release wakes such a waiter, and this sweep
// does when there is no next release.
func (s *Service) WakeStrandedWaiters(ctx context.Context) (int, error) {
	ctx = store.WithSystem(ctx, "lease waiters") // cross-tenant by nature (docs/operations.md)
	total := 0
	for {
		var n int
		err := s.store.InTx(ctx, func(tx store.Tx) error {
			var err error
			if n, err = tx.LeaseWakeStranded(ctx, s.batch); err != nil || n == 0 {
				return err
			}
			return tx.WakeClaimers(ctx)
		})
		if err != nil {
			return total, store.Refusal(err)
		}
		total += n
		if n < s.batch {
			if total > 0 {
				s.log.InfoContext(ctx, "lease: woke attempts waiting for keys nobody holds", "attempts", total)
			}
			return total, nil
		}
	}
}

func holderView(h store.LeaseHold) protocol.LeaseHolder {
	v := protocol.LeaseHolder{Key: h.Key, Slot: h.Slot, RunID: h.RunID, AttemptID: h.AttemptID, Runner: h.RunnerID,
		FencingToken: h.FencingToken, AcquiredAt: h.AcquiredAt.UTC()}
	if h.ExpiresAt != nil {
		t := h.ExpiresAt.UTC()
		v.ExpiresAt = &t
	}
	return v
}

// List lists the held keys whose name starts with prefix.
func (s *Service) List(ctx context.Context, actor principal.Actor, prefix string) ([]protocol.LeaseHolder, error) {
	holds, err := s.store.LeaseList(ctx, actor.TenantID, prefix)
	if err != nil {
		return nil, store.Refusal(err)
	}
	out := make([]protocol.LeaseHolder, 0, len(holds))
	for _, h := range holds {
		out = append(out, holderView(h))
	}
	return out, nil
}

// Show returns a key's holders, its waiting runs and its counter.
func (s *Service) Show(ctx context.Context, actor principal.Actor, key string) (*protocol.LeaseView, error) {
	v := &protocol.LeaseView{Key: key, Holders: []protocol.LeaseHolder{}, Waiting: []protocol.LeaseWaiter{}}
	st, err := s.store.LeaseKeyGet(ctx, actor.TenantID, key)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, store.Refusal(err)
	}
	if err == nil {
		v.LastFencingToken, v.ConsumedByRun = st.LastFencingToken, st.ConsumedByRun
	}
	holds, err := s.store.LeaseList(ctx, actor.TenantID, key)
	if err != nil {
		return nil, store.Refusal(err)
	}
	for _, h := range holds {
		if h.Key == key {
			v.Holders = append(v.Holders, holderView(h))
		}
	}
	waiters, err := s.store.LeaseWaiters(ctx, actor.TenantID, key)
	if err != nil {
		return nil, store.Refusal(err)
	}
	for _, a := range waiters {
		v.Waiting = append(v.Waiting, protocol.LeaseWaiter{RunID: a.RunID, AttemptID: a.ID, Since: a.CreatedAt.UTC()})
	}
	return v, nil
}

// Verify tells a downstream system whether a fencing token is still
// its key's current holder's: held by a live attempt, not expired.
func (s *Service) Verify(ctx context.Context, tenant, key string, token int64) (bool, string, error) {
	ctx = store.WithTenant(ctx, tenant)
	now, err := s.store.Now(ctx, s.clock.NowOrNil())
	if err != nil {
		return false, "", store.Refusal(err)
	}
	holds, err := s.store.LeaseList(ctx, tenant, key)
	if err != nil {
		return false, "", store.Refusal(err)
	}
	for _, h := range holds {
		if h.Key == key && h.FencingToken == token {
			live := h.ExpiresAt != nil && now.Before(*h.ExpiresAt)
			if live {
				a, err := s.store.AttemptGetByID(ctx, h.AttemptID, false)
				if err != nil {
					return false, "", store.Refusal(err)
				}
				live = a.State == store.AttemptLeased
			}
			return live, h.RunID, nil
		}
	}
	return false, "", nil
}

// ForceRelease is the break-glass release of a key (admin): every holder is
// dropped and its run told to stop at its next renewal, the key's fencing
// token moves on so the old holders are refused downstream, waiters are
// unblocked, and who did it and why is audited.
func (s *Service) ForceRelease(ctx context.Context, actor principal.Actor, key, reason string) (*protocol.LeaseView, error) {
	if err := principal.RequireAdmin(actor); err != nil {
		return nil, err
	}
	if len(reason) < 3 || len(reason) > 1000 {
		return nil, &protocol.FieldError{Field: "reason", Err: fmt.Errorf("a reason (3 to 1000 characters) is required: %w", protocol.ErrBadRequest)}
	}
	err := s.store.InTx(ctx, func(tx store.Tx) error {
		// The holders' runs are locked before the key's row, the order a
		// result takes them in (its run, then its keys): the other way
		// round, breaking a key while its holder reports its result
		// deadlocks. A holder that took the key since is locked after it.
		holds, err := tx.LeaseList(ctx, actor.TenantID, key)
		if err != nil {
			return err
		}
		var ids []string
		for _, h := range holds {
			if h.Key == key {
				ids = append(ids, h.RunID)
			}
		}
		slices.Sort(ids)
		locked := map[string]*store.Run{}
		for _, id := range slices.Compact(ids) {
			if locked[id], err = tx.RunGetByID(ctx, id, true); err != nil {
				return err
			}
		}
		dropped, token, err := tx.LeaseForceRelease(ctx, actor.TenantID, key)
		if err != nil {
			return err
		}
		runs := []string{}
		for _, h := range dropped {
			r := locked[h.RunID]
			if r == nil {
				if r, err = tx.RunGetByID(ctx, h.RunID, true); err != nil {
					return err
				}
				locked[h.RunID] = r
			}
			runs = append(runs, r.ID)
			if !r.State.Terminal() && !r.CancelRequested {
				r.CancelRequested = true
				if err := tx.RunUpdate(ctx, r); err != nil {
					return err
				}
			}
		}
		if err := tx.WakeClaimers(ctx); err != nil {
			return err
		}
		return s.audit(ctx, tx, actor.TenantID, actor.Name, "lease.force_released", key, map[string]any{
			"reason": reason, "runs": runs, "fencing_token": token})
	})
	if err != nil {
		return nil, store.Refusal(err)
	}
	return s.Show(ctx, actor, key)
}

// FencedKeys are an assignment's keys and tokens.
func FencedKeys(held []store.LeaseHold) []protocol.FencedKey {
	out := make([]protocol.FencedKey, 0, len(held))
	for _, h := range held {
		out = append(out, protocol.FencedKey{Key: h.Key, FencingToken: h.FencingToken})
	}
	return out
}
