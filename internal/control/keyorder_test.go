package control

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/lease"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/groupcommit"
	"github.com/jobplane/jobplane/internal/store/postgres"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

func keyRow(tenant, key string) string { return tenant + "\x00" + key }

// lockRecorder wraps a store: each transaction records the lease-key rows
// it locks, and one that locks a row below another it already holds is
// noted — the order two transactions need to deadlock.
type lockRecorder struct {
	store.Store
	mu  sync.Mutex
	bad []string
	txs atomic.Int64
}

func (l *lockRecorder) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	return l.Store.InTx(ctx, func(tx store.Tx) error {
		l.txs.Add(1)
		return fn(&lockTx{Tx: tx, l: l, held: map[string]bool{}})
	})
}

type lockTx struct {
	store.Tx
	l     *lockRecorder
	held  map[string]bool
	order []string
	top   string
}

func (t *lockTx) lock(tenant string, keys ...string) {
	for _, k := range keys {
		r := keyRow(tenant, k)
		if t.held[r] {
			continue
		}
		t.order = append(t.order, k)
		if r < t.top {
			t.l.mu.Lock()
			t.l.bad = append(t.l.bad, fmt.Sprint(t.order))
			t.l.mu.Unlock()
		}
		t.held[r], t.top = true, max(t.top, r)
	}
}

func (t *lockTx) LeaseKeyLock(ctx context.Context, tenant, key string) error {
	t.lock(tenant, key)
	return t.Tx.LeaseKeyLock(ctx, tenant, key)
}

func (t *lockTx) LeaseAcquire(ctx context.Context, p *store.LeaseAcquireParams) ([]store.LeaseHold, string, error) {
	held, blockedOn, err := t.Tx.LeaseAcquire(ctx, p)
	for _, k := range store.SortedLeaseKeys(p.Keys) {
		t.lock(p.Tenant, k.Key)
		if k.Key == blockedOn {
			break
		}
	}
	return held, blockedOn, err
}

func (t *lockTx) LeaseReleaseAttempt(ctx context.Context, tenant, attemptID string) ([]string, error) {
	keys, err := t.Tx.LeaseReleaseAttempt(ctx, tenant, attemptID)
	t.lock(tenant, keys...)
	return keys, err
}

func (t *lockTx) LeaseKeyConsume(ctx context.Context, tenant, key, runID string) error {
	t.lock(tenant, key)
	return t.Tx.LeaseKeyConsume(ctx, tenant, key, runID)
}

// TestLeaseKeyLockOrder: on PostgreSQL, whatever the committer puts in one
// transaction — requests (one or a batch) checking reject keys, claims of
// one or several taking keys, results (one or a batch) releasing them —
// every transaction locks lease-key rows in ascending order. Before
// keyorder.go, a group whose bodies took overlapping key sets one after the
// other deadlocked with another group (L11 failed in CI that way).
func TestLeaseKeyLockOrder(t *testing.T) {
	t.Parallel()
	st, err := postgres.Open(context.Background(), testdb.PostgresDSN(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	rec := &lockRecorder{Store: st}
	groups := map[string][]lease.Template{
		"o-abc": {{Key: "ka"}, {Key: "kb"}, {Key: "kc"}},
		"o-ca":  {{Key: "kc"}, {Key: "ka"}},
		"o-b":   {{Key: "kb"}},
		"o-rej": {{Key: "kd", OnConflict: "reject"}, {Key: "ka"}},
		"o-rc":  {{Key: "ke", OnConflict: "reject"}, {Key: "kd", Once: false, OnConflict: "reject"}},
	}
	var jobs []Spec
	var names []string
	for name, ts := range groups {
		jobs = append(jobs, leaseJob(name, "pool-order", 30*time.Second, ts...))
		names = append(names, name)
	}
	slices.Sort(names)
	// Two runs of one runner holding a key each, the later run's key the
	// lower: disabling the runner ends both in one transaction.
	jobs = append(jobs, leaseJob("o-x", "pool-disable", 30*time.Second, lease.Template{Key: "kx"}),
		leaseJob("o-w", "pool-disable", 30*time.Second, lease.Template{Key: "kw"}))
	e := newLeaseEnv(t, rec, jobs...)
	rounds := 6
	if longRun() {
		rounds = 60
	}
	var wg sync.WaitGroup
	errs := make(chan error, 12)
	for g := range 12 {
		rn := e.runnerIn("pool-order", fmt.Sprintf("order-%d", g))
		svc := []*Service{e.a, e.b}[g%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 12))
			errs <- func() error {
				for range rounds {
					reqs := make([]protocol.RunRequest, 1+rng.IntN(3))
					for i := range reqs {
						reqs[i] = protocol.RunRequest{Job: names[rng.IntN(len(names))], Channel: "prod"}
					}
					if len(reqs) == 1 {
						if _, _, err := svc.RequestRun(e.ctx(), e.actor, &reqs[0]); err != nil && !protocol.IsRefusal(err) {
							return fmt.Errorf("request: %w", err)
						}
					} else if _, err := svc.RequestRuns(e.ctx(), e.actor, reqs); err != nil {
						return fmt.Errorf("request batch: %w", err)
					}
					var asgs []*protocol.Assignment
					if g%3 == 0 {
						a, err := svc.Claim(e.ctx(), call(rn, nil), &protocol.ClaimRequest{})
						if err != nil {
							return fmt.Errorf("claim: %w", err)
						}
						if a != nil {
							asgs = append(asgs, a)
						}
					} else {
						var err error
						if asgs, err = svc.ClaimBatch(e.ctx(), call(rn, nil), &protocol.ClaimRequest{Max: 4}); err != nil {
							return fmt.Errorf("claim batch: %w", err)
						}
					}
					if g%2 == 0 {
						for _, a := range asgs {
							if _, err := svc.Result(e.ctx(), call(rn, a), succeeded()); err != nil {
								return fmt.Errorf("result: %w", err)
							}
						}
						continue
					}
					if len(asgs) == 0 {
						continue
					}
					req := &protocol.ResultsRequest{}
					for _, a := range asgs {
						req.Results = append(req.Results, protocol.ResultItem{RunID: a.RunID, AttemptID: a.AttemptID, LeaseToken: a.Lease.Token, ResultRequest: *succeeded()})
					}
					outs, err := svc.Results(e.ctx(), call(rn, nil), req)
					if err != nil {
						return fmt.Errorf("results: %w", err)
					}
					for _, o := range outs {
						if o.Err != nil {
							return fmt.Errorf("result of %s: %w", o.AttemptID, o.Err)
						}
					}
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, job := range []string{"o-x", "o-w"} {
		_, err := e.requestJob(e.a, job)
		require.NoError(t, err)
		e.clock.Advance(time.Second) // o-x's attempt is listed first
	}
	rn := e.runnerIn("pool-disable", "order-disable")
	asgs, err := e.a.ClaimBatch(e.ctx(), call(rn, nil), &protocol.ClaimRequest{Max: 2})
	require.NoError(t, err)
	require.Len(t, asgs, 2)
	_, err = e.a.SetRunnerStatus(e.ctx(), e.actor, rn.ID, string(store.RunnerDisabled))
	require.NoError(t, err)
	holds, err := st.LeaseList(e.ctx(), testTenant, "k")
	require.NoError(t, err)
	for _, h := range holds {
		require.NotContains(t, []string{"kx", "kw"}, h.Key, "released when the runner was disabled")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Empty(t, rec.bad, "transactions that locked lease keys out of order")
	t.Logf("%d transactions, committer %+v", rec.txs.Load(), e.a.grouped.(*groupcommit.Store).Stats())
}

// orderRecorder notes, per transaction, the run rows locked and the keys
// broken, in order.
type orderRecorder struct {
	store.Store
	mu  sync.Mutex
	txs [][]string
}

func (o *orderRecorder) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	return o.Store.InTx(ctx, func(tx store.Tx) error {
		ot := &orderTx{Tx: tx}
		err := fn(ot)
		o.mu.Lock()
		o.txs = append(o.txs, ot.events)
		o.mu.Unlock()
		return err
	})
}

type orderTx struct {
	store.Tx
	events []string
}

func (t *orderTx) RunGetByID(ctx context.Context, id string, forUpdate bool) (*store.Run, error) {
	if forUpdate {
		t.events = append(t.events, "run "+id)
	}
	return t.Tx.RunGetByID(ctx, id, forUpdate)
}

func (t *orderTx) LeaseForceRelease(ctx context.Context, tenant, key string) ([]store.LeaseHold, int64, error) {
	t.events = append(t.events, "key "+key)
	return t.Tx.LeaseForceRelease(ctx, tenant, key)
}

// TestBreakGlassLockOrder: breaking a key locks its holders' runs before
// the key's row, as a result does (its run, then its keys); the other way
// round, a break-glass release and the holder's result deadlock.
func TestBreakGlassLockOrder(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		t.Parallel()
		rec := &orderRecorder{Store: b.st}
		e := newLeaseEnv(t, rec, leaseJob("bg", "pool-bg", 30*time.Second, lease.Template{Key: "deploy-bg"}))
		run, err := e.requestJob(e.a, "bg")
		require.NoError(t, err)
		rn := e.runnerIn("pool-bg", "bg-1")
		asg, err := e.a.Claim(e.ctx(), call(rn, nil), &protocol.ClaimRequest{})
		require.NoError(t, err)
		require.NotNil(t, asg)
		_, err = e.a.Leases().ForceRelease(e.ctx(), e.actor, "deploy-bg", "stuck deploy")
		require.NoError(t, err)
		rec.mu.Lock()
		defer rec.mu.Unlock()
		var got []string
		for _, ev := range rec.txs {
			if slices.Contains(ev, "key deploy-bg") {
				got = ev
			}
		}
		require.Equal(t, []string{"run " + run.ID, "key deploy-bg"}, got)
		r, err := b.st.RunGetByID(e.ctx(), run.ID, false)
		require.NoError(t, err)
		require.True(t, r.CancelRequested)
	})
}
