package control

// Linearizability of run leases (acceptance case L1, checker P): concurrent
// clients on two control planes sharing one store acquire keys by claiming
// attempts, renew them, release them with a result, and let them expire
// while a clock goroutine advances the fake clock and reaps. Every operation
// is recorded with invocation and return stamps from one monotonic counter,
// and porcupine checks each key's history against a model of the lease
// semantics. A deliberately broken store (a claim that ignores the holder)
// must be caught.

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/lease"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// ---------------------------------------------------------------------------
// Shared helpers of the lease tests: a catalog of several jobs with lease
// keys, and an env built on it.

// multiDefs is a catalog of several jobs that allows everything and takes
// params as given.
type multiDefs struct{ jobs map[string]Spec }

func (d *multiDefs) Resolve(context.Context, string, string) (Catalog, error) { return d, nil }
func (d *multiDefs) Commit() string                                           { return testCommit }
func (d *multiDefs) Branch() string                                           { return "main" }
func (d *multiDefs) Protected() bool                                          { return true }
func (d *multiDefs) Job(name string) (Spec, bool) {
	s, ok := d.jobs[name]
	return s, ok
}

func (d *multiDefs) ValidateParams(_ string, p json.RawMessage) (json.RawMessage, error) {
	if len(p) == 0 {
		return json.RawMessage(`{}`), nil
	}
	return p, nil
}

func (d *multiDefs) Decide(DecisionRequest) Decision {
	return Decision{Allowed: true, Explanation: "test: always allowed"}
}

// leaseJob is a job of pool that holds keys; one attempt, an hour's timeout.
func leaseJob(name, pool string, ttl time.Duration, keys ...lease.Template) Spec {
	return Spec{Name: name, Command: []string{"true"}, Timeout: Duration(time.Hour), LeaseTTL: Duration(ttl),
		Pool: pool, Labels: []string{}, MaxAttempts: 1, Leases: keys}
}

// newLeaseEnv is newEnv with a catalog of several jobs; st may be a wrapper
// (for the broken variants), raw is the store the helpers read directly.
func newLeaseEnv(t *testing.T, st store.Store, jobs ...Spec) *env {
	t.Helper()
	defs := &multiDefs{jobs: map[string]Spec{}}
	for _, j := range jobs {
		defs.jobs[j.Name] = j
	}
	fc := clock.NewFake(testEpoch)
	e := &env{t: t, store: st, clock: fc, spec: jobs[0],
		actor: principal.Actor{TenantID: testTenant, Name: "alice", Kind: "user", Admin: true}}
	for _, s := range []**Service{&e.a, &e.b} {
		svc, err := New(Config{Store: st, Clock: fc, Definitions: defs, ReapBatch: 100000})
		require.NoError(t, err)
		*s = svc
	}
	return e
}

// runnerIn inserts an active runner of the test tenant in pool.
func (e *env) runnerIn(pool, name string) *store.Runner {
	e.t.Helper()
	return e.runnerOf(testTenant, pool, name)
}

// requestJob asks for a run of job; it returns the error instead of failing
// so that goroutines can use it.
func (e *env) requestJob(s *Service, job string) (*store.Run, error) {
	v, _, err := s.RequestRun(e.ctx(), e.actor, &protocol.RunRequest{Job: job, Channel: "prod"})
	if err != nil {
		return nil, err
	}
	return v.Run, nil
}

// tokenOf returns the assignment's fencing token of key (0 if none).
func tokenOf(asg *protocol.Assignment, key string) int64 {
	for _, f := range asg.Leases {
		if f.Key == key {
			return f.FencingToken
		}
	}
	return 0
}

// longRun reports JOBPLANE_LONG=1: the long, by-hand sizes.
func longRun() bool { return os.Getenv("JOBPLANE_LONG") == "1" }

// ---------------------------------------------------------------------------
// The model

const (
	opAcquire = "acquire"
	opRenew   = "renew"
	opRelease = "release"
	opAdvance = "advance" // the clock moves to At (in every partition)
	opReap    = "reap"    // the reaper ended the attempts of Tokens (expired)
)

// lkInput is an operation on one key (Key empty: advance, in every history).
type lkInput struct {
	Kind  string
	Key   string
	Token int64 // renew, release: the holder's token
	At    int64 // advance: the new clock (µs after testEpoch)
}

// lkOutput is an answer. Reap's Tokens are filled per key when the
// histories are split (Attempts are resolved to tokens after the run).
type lkOutput struct {
	OK       bool
	Token    int64 // acquire
	Exp      int64 // acquire, renew: expires_at (µs after testEpoch)
	Attempts []string
	Tokens   []int64
}

type lkHolder struct{ Token, Exp int64 }

// lkState is one key: the clock, the last token handed out, and the holds
// not known to be gone (some may have expired; expired holds free their
// slot for acquirers but are gone only once purged, reaped or released).
type lkState struct {
	Now     int64
	Last    int64
	Holders []lkHolder // by token
}

func (s lkState) live() int {
	n := 0
	for _, h := range s.Holders {
		if h.Exp > s.Now {
			n++
		}
	}
	return n
}

func (s lkState) find(token int64) int {
	return slices.IndexFunc(s.Holders, func(h lkHolder) bool { return h.Token == token })
}

func (s lkState) clone() lkState {
	s.Holders = slices.Clone(s.Holders)
	return s
}

// leaseModel is the per-key lease semantics: an acquire succeeds only with
// a free slot (expired holds count as free) and returns a token larger than
// every earlier one of the key and an expiry within one TTL; it fails only
// when every slot is taken by a hold not known to be gone; renew and release
// are refused only when the hold is not live, and succeed only while it has
// not been taken over or reaped; expiry is decided by the clock.
//
// A renewal or release may succeed on a hold whose expiry has passed but
// which nobody took: its validity check ran when it was live (each operation
// reads the clock when it starts, and may then wait on a row lock while the
// clock moves on), and no acquirer can take the hold meanwhile (it skips a
// hold whose attempt is locked). That is safe; a renewal after a takeover is
// not, and is Illegal here. That renewals after expiry are refused at all is
// pinned by TestL2_RefusedLeaseOperations.
//
// The model is nondeterministic in one place: which expired holds a
// successful acquire purged. An acquirer drops the expired holds it can lock
// and skips the ones a renewal or release is working on, so with a limit
// above one it may take a free slot and leave another expired hold in place
// for its renewal to revive. Any choice that leaves at most limit holds is a
// possible next state; with limit 1 the only choice is to purge them all.
func leaseModel(limit int, ttl time.Duration) porcupine.Model {
	ttlUS := ttl.Microseconds()
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{lkState{}} },
		Step: func(st, in, out any) []any {
			s, i, o := st.(lkState), in.(lkInput), out.(lkOutput)
			switch i.Kind {
			case opAdvance:
				if i.At < s.Now {
					return nil
				}
				s = s.clone()
				s.Now = i.At
				return []any{s}
			case opReap:
				s = s.clone()
				for _, tok := range o.Tokens {
					k := s.find(tok)
					if k >= 0 && s.Holders[k].Exp > s.Now {
						return nil // reaped a live hold
					}
					if k >= 0 {
						s.Holders = slices.Delete(s.Holders, k, k+1)
					}
				}
				return []any{s}
			case opAcquire:
				if !o.OK {
					if len(s.Holders) >= limit {
						return []any{s}
					}
					return nil
				}
				if s.live() >= limit || o.Token <= s.Last || o.Exp > s.Now+ttlUS {
					return nil
				}
				return s.acquired(limit, lkHolder{o.Token, o.Exp})
			case opRenew, opRelease:
				k := s.find(i.Token)
				live := k >= 0 && s.Holders[k].Exp > s.Now
				if !o.OK {
					if !live {
						return []any{s}
					}
					return nil
				}
				if k < 0 {
					return nil // the hold was taken over or reaped
				}
				s = s.clone()
				if i.Kind == opRelease {
					s.Holders = slices.Delete(s.Holders, k, k+1)
					return []any{s}
				}
				if o.Exp > s.Now+ttlUS || o.Exp < s.Holders[k].Exp {
					return nil
				}
				s.Holders[k].Exp = o.Exp
				return []any{s}
			}
			return nil
		},
		Equal: func(a, b any) bool {
			x, y := a.(lkState), b.(lkState)
			return x.Now == y.Now && x.Last == y.Last && slices.Equal(x.Holders, y.Holders)
		},
		Hash: func(st any) uint64 {
			s := st.(lkState)
			h := uint64(s.Now)*31 + uint64(s.Last)
			for _, x := range s.Holders {
				h = h*1000003 + uint64(x.Token)*7 + uint64(x.Exp)
			}
			return h
		},
		DescribeOperation: func(in, out any) string {
			i, o := in.(lkInput), out.(lkOutput)
			switch i.Kind {
			case opAdvance:
				return fmt.Sprintf("advance to %dµs", i.At)
			case opReap:
				return fmt.Sprintf("reap %v", o.Tokens)
			case opAcquire:
				return fmt.Sprintf("acquire %s -> ok=%v token=%d exp=%d", i.Key, o.OK, o.Token, o.Exp)
			}
			return fmt.Sprintf("%s %s token=%d -> ok=%v exp=%d", i.Kind, i.Key, i.Token, o.OK, o.Exp)
		},
		DescribeState: func(st any) string { return fmt.Sprintf("%+v", st.(lkState)) },
	}
	return nm.ToModel()
}

// acquired returns the states after an acquire that returned h: every way
// of purging expired holds (each kept or dropped) that leaves room for h.
func (s lkState) acquired(limit int, h lkHolder) []any {
	var expired []int
	for k, x := range s.Holders {
		if x.Exp <= s.Now {
			expired = append(expired, k)
		}
	}
	var next []any
	for mask := 0; mask < 1<<len(expired); mask++ {
		n := s.clone()
		n.Holders = n.Holders[:0]
		for k, x := range s.Holders {
			if j := slices.Index(expired, k); j >= 0 && mask&(1<<j) != 0 {
				continue // purged
			}
			n.Holders = append(n.Holders, x)
		}
		if len(n.Holders)+1 > limit {
			continue
		}
		n.Holders = append(n.Holders, h)
		n.Last = h.Token
		next = append(next, n)
	}
	return next
}

// ---------------------------------------------------------------------------
// The workload

type lkKey struct {
	name, job, pool string
	limit           int
}

var lkKeys = []lkKey{
	{"lk-a", "job-a", "pool-a", 1},
	{"lk-b", "job-b", "pool-b", 1},
	{"lk-c", "job-c", "pool-c", 2},
}

const lkTTL = 3 * time.Second

func lkJobs() []Spec {
	var out []Spec
	for _, k := range lkKeys {
		out = append(out, leaseJob(k.job, k.pool, lkTTL, lease.Template{Key: k.name, Limit: k.limit}))
	}
	return out
}

// recorder collects operations stamped with CLOCK_MONOTONIC, which is one
// clock for every process of the machine, so that histories recorded by
// separate client processes merge into one real-time order.
type recorder struct {
	mu  sync.Mutex
	ops []porcupine.Operation
}

func stamp() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

func (r *recorder) do(client int, in lkInput, f func() (lkOutput, error)) (lkOutput, error) {
	call := stamp()
	out, err := f()
	ret := stamp()
	if err == nil {
		r.mu.Lock()
		r.ops = append(r.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
		r.mu.Unlock()
	}
	return out, err
}

func usSince(t time.Time) int64 { return t.Sub(testEpoch).Microseconds() }

// lkClient is one client of the workload: it requests runs of its key's job
// and claims them (acquire), renews, posts results (release), renews with
// stale attempts, or walks away (the lease will expire).
type lkClient struct {
	id      int
	k       lkKey
	rn      *store.Runner
	sv      *Service
	actor   principal.Actor
	rec     *recorder
	claimed func(attemptID string, token int64)
}

// run performs opsPer operations and returns the first unexpected error;
// stop reports that another client failed.
func (c *lkClient) run(ctx context.Context, opsPer int, seed uint64, stop func() bool) error {
	rng := rand.New(rand.NewPCG(seed, uint64(c.id)))
	var held *protocol.Assignment
	var heldTok int64
	var old []*protocol.Assignment
	renew := func(asg *protocol.Assignment) (lkOutput, error) {
		resp, err := c.sv.Renew(ctx, call(c.rn, asg))
		if err != nil {
			return lkOutput{}, expectedRefusal(err)
		}
		return lkOutput{OK: true, Exp: usSince(resp.ExpiresAt)}, nil
	}
	for range opsPer {
		if stop() {
			return nil
		}
		if held == nil {
			if _, _, err := c.sv.RequestRun(ctx, c.actor, &protocol.RunRequest{Job: c.k.job, Channel: "prod"}); err != nil {
				return fmt.Errorf("request: %w", err)
			}
			var asg *protocol.Assignment
			if _, err := c.rec.do(c.id, lkInput{Kind: opAcquire, Key: c.k.name}, func() (lkOutput, error) {
				var err error
				asg, err = c.sv.Claim(ctx, call(c.rn, nil), &protocol.ClaimRequest{})
				if err != nil || asg == nil {
					return lkOutput{}, err
				}
				tok := tokenOf(asg, c.k.name)
				c.claimed(asg.AttemptID, tok)
				return lkOutput{OK: true, Token: tok, Exp: usSince(asg.Lease.ExpiresAt)}, nil
			}); err != nil {
				return fmt.Errorf("claim: %w", err)
			}
			if asg != nil {
				held, heldTok = asg, tokenOf(asg, c.k.name)
			}
			continue
		}
		switch p := rng.IntN(10); {
		case p < 4:
			if _, err := c.rec.do(c.id, lkInput{Kind: opRenew, Key: c.k.name, Token: heldTok}, func() (lkOutput, error) { return renew(held) }); err != nil {
				return fmt.Errorf("renew: %w", err)
			}
		case p < 7: // release: the result
			if _, err := c.rec.do(c.id, lkInput{Kind: opRelease, Key: c.k.name, Token: heldTok}, func() (lkOutput, error) {
				if _, err := c.sv.Result(ctx, call(c.rn, held), succeeded()); err != nil {
					return lkOutput{}, expectedRefusal(err)
				}
				return lkOutput{OK: true}, nil
			}); err != nil {
				return fmt.Errorf("result: %w", err)
			}
			old = append(old, held)
			held = nil
		case p < 8 && len(old) > 0: // a stale renew by an earlier holder
			o := old[rng.IntN(len(old))]
			if _, err := c.rec.do(c.id, lkInput{Kind: opRenew, Key: c.k.name, Token: tokenOf(o, c.k.name)}, func() (lkOutput, error) { return renew(o) }); err != nil {
				return fmt.Errorf("stale renew: %w", err)
			}
		default: // walk away: the lease will expire
			old = append(old, held)
			held = nil
		}
	}
	return nil
}

// newRunner makes an active runner of the test tenant in pool.
func newRunner(ctx context.Context, st store.Store, now time.Time, pool, name string) (*store.Runner, error) {
	r := &store.Runner{
		ID: id.New(id.Runner, now), Tenant: testTenant, Pool: pool, Name: name, Labels: []string{},
		PublicKey: protocol.EncodeKey(make([]byte, 32)), KeyFingerprint: "0000000000000000",
		Status: store.RunnerActive, AllowedRepos: []string{}, LastSeenAt: &now, CreatedAt: now,
	}
	// Through a transaction, as registration does: other tests' goroutines
	// may be writing, and an autocommit write would race BEGIN IMMEDIATE on
	// SQLite in its busy handler.
	return r, st.InTx(ctx, func(tx store.Tx) error { return tx.RunnerCreate(ctx, r) })
}

// lkProcs are the workload's client processes: procs copies of this test
// binary, each running perProc clients on its own control plane over the
// store at dsn, reading the fake time the parent publishes in a file.
type lkProcs struct {
	dsn            string
	procs, perProc int
}

// lkWorkload runs clients goroutine clients (and the clients of procs, if
// any) × opsPer operations on e (whose planes are e.a and e.b) and returns
// the recorded history, with reaped attempts resolved to tokens.
// Unexpected errors fail the test.
func lkWorkload(t *testing.T, e *env, clients, opsPer int, seed uint64, procs *lkProcs) []porcupine.Operation {
	t.Helper()
	rec := &recorder{}
	var tokens sync.Map // attempt ID -> fencing token
	var errs atomic.Int64
	fail := func(format string, args ...any) {
		if errs.Add(1) <= 5 {
			t.Errorf(format, args...)
		}
	}
	// The fake time, published for the client processes.
	// One 8-byte write at offset 0 of a file that is never truncated: a
	// reader sees the old time or the new one.
	clockFile := filepath.Join(t.TempDir(), "clock")
	cf, err := os.Create(clockFile)
	require.NoError(t, err)
	defer cf.Close()
	publish := func() {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], uint64(e.clock.Now().UnixNano()))
		if _, err := cf.WriteAt(b[:], 0); err != nil {
			panic(err)
		}
	}
	publish()
	// The history starts at the current time (a fresh model's clock is 0).
	_, _ = rec.do(clients, lkInput{Kind: opAdvance, At: usSince(e.clock.Now())}, func() (lkOutput, error) { return lkOutput{OK: true}, nil })

	cls := make([]*lkClient, clients)
	for i := range cls {
		k := lkKeys[i%len(lkKeys)]
		rn, err := newRunner(e.ctx(), e.store, e.clock.Now(), k.pool, fmt.Sprintf("lk-%d", i))
		require.NoError(t, err)
		cls[i] = &lkClient{id: i, k: k, rn: rn, sv: []*Service{e.a, e.b}[i%2], actor: e.actor, rec: rec,
			claimed: func(a string, tok int64) { tokens.Store(a, tok) }}
	}

	type reaper struct {
		st  *expiryRecStore
		svc *Service
	}
	var reapers [2]reaper
	for i := range reapers {
		rs := &expiryRecStore{Store: e.store}
		svc, err := New(Config{Store: rs, Clock: e.clock, Definitions: &multiDefs{jobs: map[string]Spec{}}, ReapBatch: 100000})
		require.NoError(t, err)
		reapers[i] = reaper{rs, svc}
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	var clockWG sync.WaitGroup
	clockWG.Add(1)
	clockID := clients + 1000
	go func() { // the clock and the reaper
		defer clockWG.Done()
		rng := rand.New(rand.NewPCG(seed, 99))
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Duration(1+rng.IntN(3)) * time.Millisecond):
			}
			if rng.IntN(2) == 0 {
				// The Advance is inside the recorded window: every client's
				// operation that saw the new time overlaps or follows it.
				call := stamp()
				e.clock.Advance(time.Second)
				publish()
				in := lkInput{Kind: opAdvance, At: usSince(e.clock.Now())}
				ret := stamp()
				rec.mu.Lock()
				rec.ops = append(rec.ops, porcupine.Operation{ClientId: clockID, Input: in, Call: call, Output: lkOutput{OK: true}, Return: ret})
				rec.mu.Unlock()
				continue
			}
			// The reapers run on a store that records the attempts they end.
			_, err := rec.do(clockID, lkInput{Kind: opReap}, func() (lkOutput, error) {
				k := rng.IntN(2)
				reapers[k].st.take()
				if _, err := reapers[k].svc.Reap(e.ctx()); err != nil {
					return lkOutput{}, err
				}
				return lkOutput{OK: true, Attempts: reapers[k].st.take()}, nil
			})
			if err != nil {
				fail("reap: %v", err)
			}
		}
	}()

	for _, c := range cls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.run(e.ctx(), opsPer, seed, func() bool { return errs.Load() > 0 }); err != nil {
				fail("client %d: %v", c.id, err)
			}
		}()
	}
	var children []*lkChild
	if procs != nil {
		for p := range procs.procs {
			children = append(children, startLKChild(t, procs.dsn, clockFile, clients+p*procs.perProc, procs.perProc, opsPer, seed))
		}
	}
	wg.Wait()
	for _, c := range children {
		if err := c.wait(); err != nil {
			fail("client process: %v", err)
		}
	}
	close(done)
	clockWG.Wait()
	for _, c := range children {
		if c.wait() != nil {
			continue
		}
		recs, err := c.records()
		if err != nil {
			fail("client process output: %v", err)
			continue
		}
		for _, r := range recs {
			if r.Attempt != "" {
				tokens.Store(r.Attempt, r.Token)
				continue
			}
			rec.ops = append(rec.ops, porcupine.Operation{ClientId: r.Client, Input: r.In, Call: r.Call, Output: r.Out, Return: r.Ret})
		}
	}
	require.Zero(t, errs.Load(), "unexpected errors in the workload")

	// Resolve reaped attempts to tokens (their claims had returned by now).
	for i := range rec.ops {
		o := rec.ops[i].Output.(lkOutput)
		if rec.ops[i].Input.(lkInput).Kind != opReap {
			continue
		}
		for _, a := range o.Attempts {
			tok, ok := tokens.Load(a)
			require.True(t, ok, "reaped attempt %s was never claimed", a)
			o.Tokens = append(o.Tokens, tok.(int64))
		}
		rec.ops[i].Output = o
	}
	return rec.ops
}

// expiryRecStore records the attempts its committed transactions ended as
// expired (the reaper's work).
type expiryRecStore struct {
	store.Store
	mu    sync.Mutex
	ended []string
}

type expiryRecTx struct {
	store.Tx
	ended *[]string
}

func (t expiryRecTx) AttemptUpdate(ctx context.Context, a *store.Attempt) error {
	if err := t.Tx.AttemptUpdate(ctx, a); err != nil {
		return err
	}
	if a.State == store.AttemptExpired {
		*t.ended = append(*t.ended, a.ID)
	}
	return nil
}

func (s *expiryRecStore) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	var ended []string
	err := s.Store.InTx(ctx, func(tx store.Tx) error {
		ended = ended[:0]
		return fn(expiryRecTx{tx, &ended})
	})
	if err == nil {
		s.mu.Lock()
		s.ended = append(s.ended, ended...)
		s.mu.Unlock()
	}
	return err
}

// take returns and forgets the recorded attempts.
func (s *expiryRecStore) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.ended
	s.ended = nil
	return out
}

// expectedRefusal maps the refusals of a non-holder (409 stale / expired)
// to "not OK" (nil) and keeps any other error.
func expectedRefusal(err error) error {
	if errors.Is(err, protocol.ErrAttemptStale) || errors.Is(err, protocol.ErrLeaseExpired) {
		return nil
	}
	return err
}

// checkLeaseHistory checks every key's history and returns the worst result.
func checkLeaseHistory(t *testing.T, ops []porcupine.Operation, attemptKey func(string) string) porcupine.CheckResult {
	t.Helper()
	worst := porcupine.Ok
	for _, k := range lkKeys {
		var hist []porcupine.Operation
		for _, op := range ops {
			in := op.Input.(lkInput)
			switch in.Kind {
			case opAdvance:
				hist = append(hist, op)
			case opReap:
				o := op.Output.(lkOutput)
				mine := lkOutput{OK: true}
				for i, a := range o.Attempts {
					if attemptKey(a) == k.name {
						mine.Tokens = append(mine.Tokens, o.Tokens[i])
					}
				}
				op.Output = mine
				hist = append(hist, op)
			default:
				if in.Key == k.name {
					hist = append(hist, op)
				}
			}
		}
		model := leaseModel(k.limit, lkTTL)
		res, info := porcupine.CheckOperationsVerbose(model, hist, 2*time.Minute)
		t.Logf("key %s (limit %d): %d operations: %s", k.name, k.limit, len(hist), res)
		if res == porcupine.Illegal {
			describeIllegal(t, model, hist, info)
		}
		if res == porcupine.Illegal || (res == porcupine.Unknown && worst == porcupine.Ok) {
			worst = res
		}
	}
	return worst
}

// attemptKeyFn reads each attempt's run lease key from the store.
func attemptKeyFn(t *testing.T, st store.Store) func(string) string {
	cache := map[string]string{}
	return func(attemptID string) string {
		if k, ok := cache[attemptID]; ok {
			return k
		}
		a, err := st.AttemptGetByID(context.Background(), attemptID, false)
		require.NoError(t, err)
		r, err := st.RunGetByID(context.Background(), a.RunID, false)
		require.NoError(t, err)
		keys, err := lease.RunKeys(r)
		require.NoError(t, err)
		require.Len(t, keys, 1)
		cache[attemptID] = keys[0].Key
		return keys[0].Key
	}
}

// lkSize is the workload of one store: the default keeps the package
// within about a minute under -race; JOBPLANE_LONG=1 is the by-hand size,
// as many rounds of a fresh database each, because porcupine's search grows
// steeply with the length of one history while many short histories cost
// only linearly (each round must still be linearizable on its own).
func lkSize(backend string) (clients, opsPer, rounds int) {
	switch {
	case longRun():
		return 8, 250, 40
	case backend == "sqlite":
		return 4, 50, 1
	}
	return 6, 80, 1
}

// lkProcSize is how many client processes join, with how many clients each.
func lkProcSize() (procs, perProc int) {
	if longRun() {
		return 2, 3
	}
	return 2, 1
}

// TestL1_LeaseLinearizability: the history of each key is linearizable with
// respect to the lease model, on both stores, through two control planes in
// the test process and, on PostgreSQL, client processes with control planes
// of their own (operations of all processes stamped with CLOCK_MONOTONIC);
// plus SQL invariants at the end (no slot held twice, at most limit holds,
// tokens below the key's counter, audit order of grants = token order).
func TestL1_LeaseLinearizability(t *testing.T) {
	t.Parallel()
	_, _, rounds := lkSize("")
	var total [2]atomic.Int64
	for r := range rounds {
		t.Run(fmt.Sprintf("round%02d", r), func(t *testing.T) {
			eachBackend(t, func(t *testing.T, b backend) {
				t.Parallel()
				e := newLeaseEnv(t, b.st, lkJobs()...)
				clients, opsPer, _ := lkSize(b.name)
				start := time.Now()
				// Client processes, each a control plane of its own, share
				// PostgreSQL; SQLite is embedded in one server process by
				// design (its write gate is in-process).
				var procs *lkProcs
				if b.name == "postgres" {
					n, per := lkProcSize()
					procs = &lkProcs{dsn: b.dsn, procs: n, perProc: per}
				}
				ops := lkWorkload(t, e, clients, opsPer, uint64(time.Now().UnixNano()), procs)
				t.Logf("%s: %d operations recorded in %s", b.name, len(ops), time.Since(start).Round(time.Millisecond))
				res := checkLeaseHistory(t, ops, attemptKeyFn(t, b.st))
				require.Equal(t, porcupine.Ok, res, "the lease history is not linearizable")
				checkLeaseInvariants(t, b)
				i := 0
				if b.name == "postgres" {
					i = 1
				}
				n := total[i].Add(int64(len(ops)))
				if r == rounds-1 {
					t.Logf("%s: %d operations checked so far", b.name, n)
				}
			})
		})
	}
}

// checkLeaseInvariants states the L1/L7 invariants in SQL and on the audit
// log: holds per key within the limit, one hold per slot, tokens distinct
// and not above the counter, and grants audited in token order per key.
func checkLeaseInvariants(t *testing.T, b backend) {
	t.Helper()
	require.Zero(t, b.count(t, `SELECT count(*) FROM (SELECT key, slot FROM leases GROUP BY tenant, key, slot HAVING count(*) > 1) x`))
	require.Zero(t, b.count(t, `SELECT count(*) FROM (SELECT key, fencing_token FROM leases GROUP BY tenant, key, fencing_token HAVING count(*) > 1) x`))
	require.Zero(t, b.count(t, `SELECT count(*) FROM leases l JOIN lease_keys k ON k.tenant = l.tenant AND k.key = l.key
		WHERE l.fencing_token > k.last_fencing_token`))
	checkAuditTokenOrder(t, b.st)
}

// checkAuditTokenOrder: per key, the lease.acquired events, in audit
// sequence (= commit) order, carry strictly increasing tokens.
func checkAuditTokenOrder(t *testing.T, st store.Store) {
	t.Helper()
	last := map[string]int64{}
	n := 0
	for _, ev := range auditAll(t, st) {
		if ev.Action != "lease.acquired" {
			continue
		}
		var d struct {
			Key   string `json:"key"`
			Token int64  `json:"fencing_token"`
		}
		require.NoError(t, json.Unmarshal(ev.Details, &d))
		require.Greater(t, d.Token, last[d.Key], "key %s: token %d granted (audit seq %d) after token %d", d.Key, d.Token, ev.Seq, last[d.Key])
		last[d.Key] = d.Token
		n++
	}
	require.NotZero(t, n, "no lease.acquired event")
}

// noHolderCheckStore is the broken variant: a claim that finds its key
// taken breaks the holder's hold (as a claim without the lock or the holder
// check would) and takes the key anyway. The old holder's lease still works.
type noHolderCheckStore struct{ store.Store }

func (s noHolderCheckStore) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	return s.Store.InTx(ctx, func(tx store.Tx) error { return fn(noHolderCheckTx{tx}) })
}

type noHolderCheckTx struct{ store.Tx }

func (t noHolderCheckTx) LeaseAcquire(ctx context.Context, p *store.LeaseAcquireParams) ([]store.LeaseHold, string, error) {
	held, blocked, err := t.Tx.LeaseAcquire(ctx, p)
	if err != nil || blocked == "" {
		return held, blocked, err
	}
	if _, _, err := t.Tx.LeaseForceRelease(ctx, p.Tenant, blocked); err != nil {
		return nil, "", err
	}
	return t.Tx.LeaseAcquire(ctx, p)
}

// TestL1_BrokenVariantIsCaught (N): the same workload on the broken store
// must be reported not linearizable.
func TestL1_BrokenVariantIsCaught(t *testing.T) {
	t.Parallel()
	st := testdb.Postgres(t)
	e := newLeaseEnv(t, noHolderCheckStore{st}, lkJobs()...)
	ops := lkWorkload(t, e, 6, 30, 7, nil)
	res := checkLeaseHistory(t, ops, attemptKeyFn(t, st))
	require.Equal(t, porcupine.Illegal, res, "porcupine must catch a claim that ignores the holder")
}

// describeIllegal logs the end of the longest linearizable prefix and the
// operations that could not follow it, so that a failure can be read.
func describeIllegal(t *testing.T, model porcupine.Model, hist []porcupine.Operation, info porcupine.LinearizationInfo) {
	t.Helper()
	var best []porcupine.Operation
	for _, part := range info.PartialLinearizationsOperations() {
		for _, lin := range part {
			if len(lin) > len(best) {
				best = lin
			}
		}
	}
	var b strings.Builder
	st := model.Init()
	for i, op := range best {
		_, st = model.Step(st, op.Input, op.Output)
		if i >= len(best)-12 {
			fmt.Fprintf(&b, "  ok   c%-4d [%d,%d] %s\n", op.ClientId, op.Call, op.Return, model.DescribeOperation(op.Input, op.Output))
		}
	}
	fmt.Fprintf(&b, "  state: %s\n", model.DescribeState(st))
	done := map[[2]int64]bool{}
	for _, op := range best {
		done[[2]int64{op.Call, op.Return}] = true
	}
	var rest []porcupine.Operation
	for _, op := range hist {
		if !done[[2]int64{op.Call, op.Return}] {
			rest = append(rest, op)
		}
	}
	slices.SortFunc(rest, func(x, y porcupine.Operation) int { return cmp.Compare(x.Call, y.Call) })
	for i, op := range rest {
		if i == 8 {
			break
		}
		fmt.Fprintf(&b, "  next c%-4d [%d,%d] %s\n", op.ClientId, op.Call, op.Return, model.DescribeOperation(op.Input, op.Output))
	}
	t.Logf("longest linearizable prefix: %d of %d operations\n%s", len(best), len(hist), b.String())
}

// TestLeaseModelSemaphorePurge pins the model's one nondeterministic step on
// hand-made sequential histories: a semaphore acquirer may leave an expired
// hold in place for its renewal to revive, but never so that more than limit
// holds exist, and with limit 1 a renewal after a takeover stays Illegal.
func TestLeaseModelSemaphorePurge(t *testing.T) {
	t.Parallel()
	const sec = int64(time.Second / time.Microsecond)
	type op struct {
		in  lkInput
		out lkOutput
	}
	acq := func(tok, exp int64) op {
		return op{lkInput{Kind: opAcquire, Key: "k"}, lkOutput{OK: true, Token: tok, Exp: exp}}
	}
	renew := func(tok, exp int64) op {
		return op{lkInput{Kind: opRenew, Key: "k", Token: tok}, lkOutput{OK: true, Exp: exp}}
	}
	advance := func(at int64) op { return op{lkInput{Kind: opAdvance, At: at}, lkOutput{OK: true}} }
	history := func(steps ...op) []porcupine.Operation {
		var ops []porcupine.Operation
		for i, s := range steps {
			ops = append(ops, porcupine.Operation{ClientId: i, Input: s.in, Output: s.out, Call: int64(2 * i), Return: int64(2*i + 1)})
		}
		return ops
	}
	// Two holds expire; a third acquirer takes one slot.
	a1, a2, tick, a3 := acq(1, 3*sec), acq(2, 3*sec), advance(4*sec), acq(3, 7*sec)
	cases := []struct {
		name         string
		limit        int
		ops          []porcupine.Operation
		linearizable bool
	}{
		{"semaphore: revive the expired hold the acquirer skipped", 2,
			history(a1, a2, tick, a3, renew(2, 7*sec)), true},
		{"semaphore: a third live hold", 2,
			history(a1, a2, tick, a3, renew(2, 7*sec), acq(4, 7*sec)), false},
		{"semaphore: revive after both slots were taken", 2,
			history(a1, a2, tick, a3, acq(4, 7*sec), renew(2, 7*sec)), false},
		{"limit 1: renewal after a takeover", 1,
			history(a1, tick, acq(2, 7*sec), renew(1, 7*sec)), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.linearizable, porcupine.CheckOperations(leaseModel(c.limit, lkTTL), c.ops))
		})
	}
}
