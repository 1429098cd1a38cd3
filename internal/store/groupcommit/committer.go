package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jobplane/jobplane/internal/store"
)

type commitOp struct {
	ctx context.Context
	fn  func(tx store.Tx) error
	// pending, with fn: the call's nonce when it is still to be recorded
	// (InTxNonce). The body does not run when it is known.
	pending *store.PendingNonce
	// nonce, instead of fn: a signed request's nonce, inserted with the
	// group's other nonces in one statement before its bodies run.
	nonce *store.Nonce
	err   error
	done  chan struct{}
}

func (o *commitOp) finish(err error) {
	o.err = err
	close(o.done)
}

// committer has no goroutine of its own while idle: the first waiting call
// starts a worker, which drains the queue in batches and exits when it is
// empty.
type committer struct {
	st      store.Store
	max     int
	workers int
	// locks: the store's writers run concurrently and wait for each
	// other's row locks (PostgreSQL), not one at a time (SQLite).
	locks bool

	linger time.Duration
	// overlap: a group hands its slot on once its bodies have run, and the
	// next group runs while it commits (see slot).
	overlap bool
	// handedOn, when set (by tests only), is called with a group's
	// transaction as the group hands its slot on before its commit: the
	// moment its bodies stop counting against the concurrency.
	handedOn func(tx store.Tx)

	mu    sync.Mutex
	queue []*commitOp
	// running counts the worker goroutines; executing, those holding a slot
	// (at most workers). slotFree is signalled when a slot is given up.
	running   int
	executing int
	slotFree  *sync.Cond

	// refusal tells a body's refusal from its failure (Config.Refusal).
	refusal func(error) bool

	// stats counts group transactions and the bodies they carried, for
	// the benchmark's transactions-per-run figure.
	stats Stats
}

func newCommitter(st store.Store, max, concurrency int, refusal func(error) bool) *committer {
	if max <= 0 {
		max = DefaultBatch
	}
	workers := concurrency
	if workers <= 0 {
		workers = DefaultConcurrency
	}
	locks := true
	if st.SingleWriter() {
		workers, locks = 1, false
	}
	if refusal == nil {
		refusal = func(error) bool { return true }
	}
	c := &committer{st: st, max: max, workers: workers, locks: locks, overlap: locks, refusal: refusal}
	c.slotFree = sync.NewCond(&c.mu)
	if workers == 1 {
		c.linger = singleWriterLinger
	}
	return c
}

// do runs fn in a transaction shared with the other calls waiting now and
// returns once that transaction committed (nil) or fn's own error. Like
// InTx, fn may run more than once and must have no effect outside tx. A
// pending nonce is recorded with the group's nonces (InTxNonce).
func (c *committer) do(ctx context.Context, pending *store.PendingNonce, fn func(tx store.Tx) error) error {
	if c.max == 1 {
		return c.st.InTxNonce(ctx, pending, fn)
	}
	return c.enqueue(&commitOp{ctx: ctx, fn: fn, pending: pending, done: make(chan struct{})})
}

// doNonce records a nonce in a group transaction; ErrAlreadyExists when it
// is known, or when another call of the same group had it first.
func (c *committer) doNonce(ctx context.Context, n store.Nonce) error {
	if c.max == 1 {
		return c.st.InTx(ctx, func(tx store.Tx) error { return tx.NonceInsert(ctx, n.RunnerID, n.Nonce, n.ExpiresAt) })
	}
	return c.enqueue(&commitOp{ctx: ctx, nonce: &n, done: make(chan struct{})})
}

func (c *committer) enqueue(o *commitOp) error {
	c.mu.Lock()
	c.queue = append(c.queue, o)
	if c.running < c.maxWorkers() {
		c.running++
		go c.work()
	}
	c.mu.Unlock()
	// The answer waits for the commit even when the caller has gone: a body
	// taken into a transaction may still commit.
	<-o.done
	return o.err
}

// maxWorkers: with overlap, a worker whose group is committing has handed
// its slot on, and another must be there to take it.
func (c *committer) maxWorkers() int {
	if c.overlap {
		return 2 * c.workers
	}
	return c.workers
}

// A slot is what a group transaction holds while its bodies run: at most
// workers groups run bodies at once. On a store with concurrent writers
// (PostgreSQL) a group hands its slot on when its last body has run, just
// before its COMMIT, so that the next group runs its bodies while this
// one's commit waits for the log to be flushed: that wait costs no CPU,
// and with two slots held through it the database sat idle while both
// groups waited (more slots instead make more groups run at once, and
// they wait on each other inside PostgreSQL: DefaultCommitConcurrency).
// So at most workers groups run bodies and at most as many more commit.
//
// Except a group that took, checked or released lease keys: it keeps its
// slot through the commit, as every group did before. A hot key's rows are
// locked by group after group, each waiting for the one before to commit;
// with more groups in flight more of them queued on the row and ran into
// each other, and 64 acquirers of one key on two servers
// (TestL1_ConcurrentAcquirers, long tier) went at half the rate.
//
// A group that runs again (a retry of its transaction, or the split of a
// failed group) takes a slot again first. Nothing changes for the callers:
// each is still answered after its group's commit.
type slot struct {
	c    *committer
	held bool
}

// take waits for a slot unless s holds one.
func (s *slot) take() {
	if s.held {
		return
	}
	c := s.c
	c.mu.Lock()
	for c.executing >= c.workers {
		c.slotFree.Wait()
	}
	c.executing++
	s.held = true
	c.mu.Unlock()
}

// handOn gives s's slot up before tx's commit, where commits overlap.
func (s *slot) handOn(tx store.Tx) {
	if s.c.overlap {
		if s.c.handedOn != nil {
			s.c.handedOn(tx)
		}
		s.giveUp()
	}
}

func (s *slot) giveUp() {
	if !s.held {
		return
	}
	s.c.mu.Lock()
	s.c.executing--
	s.held = false
	s.c.mu.Unlock()
	s.c.slotFree.Broadcast()
}

func (c *committer) work() {
	lingered := false
	s := &slot{c: c}
	for {
		c.mu.Lock()
		for !s.held && c.executing >= c.workers && len(c.queue) > 0 {
			c.slotFree.Wait()
		}
		if len(c.queue) == 0 {
			c.running--
			c.mu.Unlock()
			s.giveUp()
			return
		}
		if !s.held {
			c.executing++
			s.held = true
		}
		if c.linger > 0 && !lingered && len(c.queue) < lingerBelow {
			c.mu.Unlock()
			time.Sleep(c.linger)
			lingered = true
			continue
		}
		lingered = false
		n := min(len(c.queue), c.max)
		batch := slices.Clone(c.queue[:n])
		c.queue = slices.Delete(c.queue, 0, n)
		c.mu.Unlock()
		live := batch[:0]
		for _, o := range batch {
			if err := o.ctx.Err(); err != nil {
				o.finish(err)
				continue
			}
			live = append(live, o)
		}
		c.group(live, s)
	}
}

// errBodyFailed stops a group transaction at the first failing body;
// errNoncesFailed, at its nonces' statement.
var (
	errBodyFailed   = errors.New("a body of the group failed")
	errNoncesFailed = errors.New("the group's nonces could not be recorded")
)

func (c *committer) group(ops []*commitOp, s *slot) {
	if len(ops) == 0 {
		return
	}
	// A group's nonces go in one statement ahead of its bodies: a body never
	// depends on another call's nonce, and one statement for all of them
	// spares the writer one per signed request. They are the nonces of
	// signed requests waiting to be recorded (doNonce) and the pending
	// nonces of bodies that record theirs in their own transaction
	// (InTxNonce): such a body does not run when its nonce is known, and
	// its call is refused as a replay.
	var nonces []*commitOp
	var bodies []*commitOp
	for _, o := range ops {
		if o.nonce != nil {
			nonces = append(nonces, o)
		} else {
			bodies = append(bodies, o)
		}
	}
	list := make([]store.Nonce, 0, len(nonces))
	for _, o := range nonces {
		list = append(list, *o.nonce)
	}
	at := make([]int, len(bodies)) // a body's pending nonce in list, or -1
	for i, o := range bodies {
		at[i] = -1
		if p := o.pending; p != nil && !p.Recorded() {
			at[i] = len(list)
			list = append(list, p.Nonce)
		}
	}
	if len(list) == 0 && len(bodies) == 1 {
		c.count(1)
		// Alone, a body has no other body's lock order to keep (keys off);
		// its groupTx tells whether it took lease keys (slot).
		bt := &groupTx{}
		bodies[0].finish(c.st.InTx(bodies[0].ctx, func(tx store.Tx) error {
			s.take()
			bt.reset(tx)
			if err := bodies[0].fn(bt); err != nil {
				return err
			}
			if !bt.keysTouched {
				s.handOn(tx)
			}
			return nil
		}))
		return
	}
	// The nonces are inserted in the group's own scope when they are all of
	// its tenant's runners (no scope to switch to and back on PostgreSQL),
	// else as the system: the runners of a group may be of several tenants,
	// and every signature was verified before its nonce got here.
	nctx := context.WithoutCancel(ops[0].ctx)
	for _, o := range ops {
		if store.ScopeOf(o.ctx) != store.ScopeOf(nctx) {
			nctx = store.WithSystem(nctx, "nonces")
			break
		}
	}
	var fresh []bool
	failed, ferr := -1, error(nil)
	last := len(bodies) - 1 // the last body run: a group ends after lease keys (groupTx)
	bt := &groupTx{}
	err := c.st.InTx(context.WithoutCancel(ops[0].ctx), func(tx store.Tx) error {
		s.take()
		failed, ferr, fresh, last = -1, nil, nil, len(bodies)-1
		bt.reset(tx)
		if len(list) > 0 {
			var err error
			if fresh, err = tx.NonceInsertMany(nctx, list); err != nil {
				return fmt.Errorf("%w: %w", errNoncesFailed, err)
			}
		}
		for i, o := range bodies {
			if at[i] >= 0 && !fresh[at[i]] {
				continue // a replay: refused once the group committed
			}
			if err := o.fn(bt); err != nil {
				failed, ferr = i, err
				// Wrapped so that InTx still retries the whole group on a
				// serialization failure or deadlock.
				return fmt.Errorf("%w: %w", errBodyFailed, err)
			}
			if bt.keysTouched && c.locks {
				last = i
				break
			}
		}
		if !bt.keysTouched {
			s.handOn(tx)
		}
		return nil
	})
	switch {
	case err == nil:
		c.count(last + 1 + len(nonces))
		for i, o := range nonces {
			if fresh[i] {
				o.finish(nil)
			} else {
				o.finish(store.ErrAlreadyExists)
			}
		}
		var rest []*commitOp
		for i, o := range bodies {
			if at[i] >= 0 {
				if !fresh[at[i]] {
					o.finish(store.ErrReplay)
					continue
				}
				// Recorded with this group: a body left for the next one
				// does not record it again.
				o.pending.SetRecorded()
			}
			if i > last {
				rest = append(rest, o)
			} else {
				o.finish(nil)
			}
		}
		c.group(rest, s)
	case errors.Is(err, errNoncesFailed) && len(bodies) > 0:
		// The nonces' statement failed: each gets that error, and so does
		// each body whose nonce was in it; the other bodies go on without
		// them.
		for _, o := range nonces {
			o.finish(err)
		}
		var rest []*commitOp
		for i, o := range bodies {
			if at[i] >= 0 {
				o.finish(fmt.Errorf("record nonce: %w: %w", store.ErrUnavailable, err))
			} else {
				rest = append(rest, o)
			}
		}
		c.group(rest, s)
	case errors.Is(err, store.ErrContention) && len(ops) > 1:
		// The group kept deadlocking with other transactions: each body
		// takes its locks in a consistent order, a group of them does not.
		// Nothing was committed; each call runs again on its own.
		for _, o := range ops {
			c.group([]*commitOp{o}, s)
		}
	case failed < 0 || !errors.Is(err, errBodyFailed):
		// The commit (or a retry of the whole group) failed: every call
		// shares that outcome.
		c.count(len(ops))
		for _, o := range ops {
			o.finish(err)
		}
	default:
		c.group(append(nonces, bodies[:failed]...), s)
		if failed > 0 && c.refusal(ferr) {
			// A refusal may rest on what the bodies before it wrote (a
			// run holding the key it asked for, say), and those just ran
			// again in a transaction of their own, where what they wrote
			// can differ: another transaction may have gone in between.
			// Answering the refusal could name a run that never existed;
			// the refused body runs again, alone, against what was
			// committed.
			c.group([]*commitOp{bodies[failed]}, s)
		} else {
			bodies[failed].finish(ferr)
		}
		c.group(bodies[failed+1:], s)
	}
}

func (c *committer) count(bodies int) {
	c.mu.Lock()
	c.stats.Transactions++
	c.stats.Bodies += int64(bodies)
	c.mu.Unlock()
}
