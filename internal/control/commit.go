package control

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/store"
)

// Group commit. The number of transactions per run, not the SQL, bounds
// throughput (ARCHITECTURE.md, "Performance design"): every hot call — a
// claim, a result, a renewal, a log chunk, a request, the nonce of a signed
// request — hands its transaction body to the committer, which runs the
// bodies waiting at that moment one after another in ONE transaction and
// commits them together. Each caller is answered only after that commit.
//
// Running bodies back to back in one transaction is the same as running
// them serially and committing each: a body sees the writes of the bodies
// before it, row locks are the transaction's own, and PostgreSQL's
// clock_timestamp() / the Go clock give each body its own time. What a
// shared transaction changes is failure: when one body fails, the
// transaction is rolled back, the bodies before it are run again as a group,
// the failing body gets its own error (it failed after those bodies, as it
// would have serially), and the bodies after it are run as another group.
// A failed COMMIT fails every body of the group, as it would have failed
// each of them.

// DefaultCommitBatch bounds how many bodies share one transaction.
const DefaultCommitBatch = 128

// DefaultCommitConcurrency is how many group transactions may run their
// bodies at once on a store that runs writers concurrently (PostgreSQL),
// with as many more committing (see slot): calls only wait to be grouped
// when that many are already running, so a lightly loaded server answers
// as soon as its own transaction commits. A store
// with one writer (SQLite) gets one: the calls that arrive while it commits
// form the next group instead of queueing at the write lock one by one.
//
// Two, not more: with more transactions in flight each group is smaller
// and they wait on each other inside PostgreSQL (the same index pages, the
// same rows of a scope's queue, the write-ahead log's insertion locks).
// Measured with `jobplane bench` in shape E, alternated round by round
// (docs/benchmarks.md, "Session 11"): two against four, PostgreSQL's CPU
// per lifecycle run fell by a quarter (998 -> 740 µs, medians of 6) and
// the lifecycle was faster in every round (1.07x); eight cost half as much
// again as four, and one left the database idle while each group's commit
// was flushed. Since session 15 the bound is on groups running their
// bodies, and as many more may be committing (slot): the commits' flush
// waits no longer leave the database idle. Operators with a larger
// database raise it (--commit-concurrency).
const DefaultCommitConcurrency = 2

// singleWriterLinger: on a store with one writer, a group about to start
// with fewer than lingerBelow bodies waits this long, once, for more. Each
// commit writes every page the group dirtied to the log, and with a dozen
// callers most groups held one or two bodies. Measured with `jobplane
// bench` (alternated runs): 100 µs below 4 bodies halved the commits per run
// (3.8 → 2.1) and cut CPU per run by 8 %; 200 µs below 8 took them to 1.4
// and the lifecycle up another 8 % (8–20 % with claims of 4); 400 µs below
// 16 lost 15 % again on one-attempt claims, whose runners then mostly wait.
// A quiet server answers at most this much later.
const (
	singleWriterLinger = 200 * time.Microsecond
	lingerBelow        = 8
)

type commitOp struct {
	ctx context.Context
	fn  func(tx store.Tx) error
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

	// Batches and Bodies count group transactions and the bodies they
	// carried, for the benchmark's transactions-per-run figure.
	stats CommitStats
}

// CommitStats counts the committer's work since the server started.
type CommitStats struct {
	Transactions int64 `json:"transactions"`
	Bodies       int64 `json:"bodies"`
}

func newCommitter(st store.Store, max, concurrency int) *committer {
	if max <= 0 {
		max = DefaultCommitBatch
	}
	workers := concurrency
	if workers <= 0 {
		workers = DefaultCommitConcurrency
	}
	locks := true
	if sw, ok := st.(interface{ SingleWriter() bool }); ok && sw.SingleWriter() {
		workers, locks = 1, false
	}
	c := &committer{st: st, max: max, workers: workers, locks: locks, overlap: locks}
	c.slotFree = sync.NewCond(&c.mu)
	if workers == 1 {
		c.linger = singleWriterLinger
	}
	return c
}

// do runs fn in a transaction shared with the other calls waiting now and
// returns once that transaction committed (nil) or fn's own error. Like
// InTx, fn may run more than once and must have no effect outside tx.
func (c *committer) do(ctx context.Context, fn func(tx store.Tx) error) error {
	if c.max == 1 {
		return inTx(ctx, c.st, fn)
	}
	return c.enqueue(&commitOp{ctx: ctx, fn: fn, done: make(chan struct{})})
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
	// nonces of bodies whose route records its nonce in its own transaction
	// (authn.VerifyRunnerDeferred): such a body does not run when its nonce
	// is known, and its call is refused as a replay.
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
	pending := make([]*authn.PendingNonce, len(bodies))
	at := make([]int, len(bodies)) // a body's pending nonce in list, or -1
	for i, o := range bodies {
		at[i] = -1
		if p := authn.PendingNonceOf(o.ctx); p != nil {
			pending[i], at[i] = p, len(list)
			list = append(list, p.Nonce)
		}
	}
	if len(list) == 0 && len(bodies) == 1 {
		c.count(1)
		// Alone, a body has no other body's lock order to keep (keys off);
		// its batchTx tells whether it took lease keys (slot).
		bt := &batchTx{}
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
	last := len(bodies) - 1 // the last body run: a group ends after lease keys (keyorder.go)
	bt := &batchTx{}
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
					o.finish(authn.ErrReplay())
					continue
				}
				// Recorded with this group: a body left for the next one
				// does not record it again (PendingNonceOf).
				pending[i].SetRecorded()
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
		if failed > 0 && isRefusal(ferr) {
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

// batchTx is the transaction the bodies of one group share. It remembers,
// for the group, which runner scopes found nothing to claim, so that a herd
// of idle long-polling runners woken together costs one claim query, not
// one each. Anything that may make work eligible (WakeClaimers) forgets it.
type batchTx struct {
	store.Tx
	empty map[string]bool
	// keysTouched: a body took, checked or released lease keys; the group
	// ends with that body (where rows are locked) and keeps its commit
	// slot until it has committed (slot). See keyorder.go.
	keysTouched bool
}

func (b *batchTx) reset(tx store.Tx) {
	b.Tx = tx
	clear(b.empty)
	b.keysTouched = false
}

func (b *batchTx) WakeClaimers(ctx context.Context) error {
	clear(b.empty)
	return b.Tx.WakeClaimers(ctx)
}

func claimScope(p *store.AttemptClaimParams) string {
	labels := slices.Clone(p.RunnerLabels)
	slices.Sort(labels)
	// Self-hosted runners and allow-lists see less of the queue (GitHub
	// safe mode, docs/github.md): they are scopes of their own.
	repos := slices.Clone(p.AllowedRepos)
	slices.Sort(repos)
	return p.Tenant + "\x00" + p.Pool + "\x00" + strings.Join(labels, "\x00") + "\x01" + strconv.FormatBool(p.SelfHosted) +
		"\x01" + strings.Join(repos, "\x00")
}

// attemptClaim claims through tx, with the claimed attempt's run locked,
// skipping the query when an earlier body of the same group found nothing
// in the same scope.
func attemptClaim(ctx context.Context, tx store.Tx, p *store.AttemptClaimParams) (*store.Attempt, *store.Run, error) {
	bt, k, skip := emptyScope(tx, p)
	if skip {
		return nil, nil, store.ErrNotFound
	}
	a, r, err := tx.AttemptClaimRun(ctx, p)
	if errors.Is(err, store.ErrNotFound) {
		bt.markEmpty(k)
	}
	return a, r, err
}

// attemptClaims is attemptClaim for several slots: a claim that found
// fewer than it asked for leaves the scope empty for the rest of the group.
func attemptClaims(ctx context.Context, tx store.Tx, p *store.AttemptClaimParams, slots []store.ClaimSlot) ([]store.ClaimedRun, error) {
	bt, k, skip := emptyScope(tx, p)
	if skip {
		return nil, nil
	}
	cs, err := tx.AttemptClaimRuns(ctx, p, slots)
	if err == nil && len(cs) < len(slots) {
		bt.markEmpty(k)
	}
	return cs, err
}

// emptyScope reports whether an earlier body of tx's group found p's scope
// empty; bt is nil outside a group transaction.
func emptyScope(tx store.Tx, p *store.AttemptClaimParams) (bt *batchTx, k string, empty bool) {
	bt, ok := tx.(*batchTx)
	if !ok {
		return nil, "", false
	}
	k = claimScope(p)
	return bt, k, bt.empty[k]
}

// markEmpty notes that scope k has nothing to claim until the group wakes
// claimers; nothing outside a group transaction.
func (b *batchTx) markEmpty(k string) {
	if b == nil {
		return
	}
	if b.empty == nil {
		b.empty = map[string]bool{}
	}
	b.empty[k] = true
}

// CommitStats reports the group committer's counters.
func (s *Service) CommitStats() CommitStats {
	s.commits.mu.Lock()
	defer s.commits.mu.Unlock()
	return s.commits.stats
}

// AuthStore is the store the runner authenticator should use. On a store
// with one writer (SQLite), where even a single-statement write is a
// transaction of its own behind the write lock, it records the nonce of each
// signed request, and refreshes the runner's last-seen time, in the group
// transactions of the other hot calls instead of a commit of their own; the
// nonce is still committed before the route runs. On PostgreSQL an
// autocommit INSERT is one round trip where a transaction is three, and
// `jobplane bench` measured the grouped nonce slower there: it stays as it
// was.
func (s *Service) AuthStore() authn.Store {
	if s.commits.workers != 1 {
		return s.store
	}
	return authStore{Store: s.store, c: s.commits}
}

type authStore struct {
	store.Store
	c *committer
}

func (a authStore) NonceInsert(ctx context.Context, runnerID, nonce string, expiresAt time.Time) error {
	return a.c.doNonce(ctx, store.Nonce{RunnerID: runnerID, Nonce: nonce, ExpiresAt: expiresAt})
}

func (a authStore) RunnerTouch(ctx context.Context, id string, now *time.Time) error {
	return a.c.do(ctx, func(tx store.Tx) error { return tx.RunnerTouch(ctx, id, now) })
}

// inTx is st.InTx for a call whose nonce may still be pending
// (authn.VerifyRunnerDeferred): the nonce is inserted first, in the same
// transaction, and a known one refuses the call before fn runs.
func inTx(ctx context.Context, st store.Store, fn func(tx store.Tx) error) error {
	p := authn.PendingNonceOf(ctx)
	if p == nil {
		return st.InTx(ctx, fn)
	}
	err := st.InTx(ctx, func(tx store.Tx) error {
		err := tx.NonceInsert(ctx, p.RunnerID, p.Nonce.Nonce, p.ExpiresAt)
		if errors.Is(err, store.ErrAlreadyExists) {
			return authn.ErrReplay()
		}
		if err != nil {
			return err
		}
		return fn(tx)
	})
	if err == nil {
		p.SetRecorded()
	}
	return err
}
