package control

// Shared helpers of the reliability acceptance tests (cases
// C1–C11). The service is driven directly, without HTTP: runners are store
// rows and signed calls are *authn.SignedCall values, because the signature
// layer is tested on its own (internal/authn, internal/api).

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" for raw checks
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/postgres"
	"github.com/jobplane/jobplane/internal/store/sqlite"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

func TestMain(m *testing.M) {
	// The L1 workload runs copies of this binary as client processes.
	if os.Getenv("LK_CHILD") == "1" {
		os.Exit(lkChildMain())
	}
	goleak.VerifyTestMain(m)
}

const (
	testTenant = "tnt_reliability"
	testPool   = "default"
	testJob    = "work"
	testCommit = "0123456789abcdef0123456789abcdef01234567"
)

var testEpoch = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// fakeDefs is a one-job catalog that allows everything. The catalog is pure
// and tested elsewhere; here it only feeds the run service a spec.
type fakeDefs struct{ spec Spec }

func (d *fakeDefs) Resolve(context.Context, string, string) (Catalog, error) { return d, nil }
func (d *fakeDefs) Commit() string                                           { return testCommit }
func (d *fakeDefs) Branch() string                                           { return "main" }
func (d *fakeDefs) Protected() bool                                          { return true }
func (d *fakeDefs) Job(name string) (Spec, bool)                             { return d.spec, name == d.spec.Name }
func (d *fakeDefs) ValidateParams(string, json.RawMessage) (json.RawMessage, error) {
	return json.RawMessage(`{}`), nil
}
func (d *fakeDefs) Decide(DecisionRequest) Decision {
	return Decision{Allowed: true, Explanation: "test: always allowed"}
}

// jobSpec is the test job: lease TTL, timeout and attempts as given.
func jobSpec(ttl, timeout time.Duration, maxAttempts int) Spec {
	return Spec{
		Name: testJob, Command: []string{"true"}, Timeout: Duration(timeout), LeaseTTL: Duration(ttl),
		Pool: testPool, Labels: []string{}, MaxAttempts: maxAttempts,
	}
}

// env is one store with two control planes (two Service instances) sharing
// a fake clock, as two server replicas share a database.
type env struct {
	t     *testing.T
	store store.Store
	clock *clock.Fake
	spec  Spec
	a, b  *Service
	actor principal.Actor
}

type envOpt func(*Config)

func withReapBatch(n int) envOpt { return func(c *Config) { c.ReapBatch = n } }

func newEnv(t *testing.T, st store.Store, spec Spec, opts ...envOpt) *env {
	t.Helper()
	fc := clock.NewFake(testEpoch)
	e := &env{t: t, store: st, clock: fc, spec: spec,
		actor: principal.Actor{TenantID: testTenant, Name: "alice", Kind: "user", Admin: true}}
	e.a = e.newService(st, opts...)
	e.b = e.newService(st, opts...)
	return e
}

// newService builds another control plane on st (st may wrap e.store).
func (e *env) newService(st store.Store, opts ...envOpt) *Service {
	e.t.Helper()
	cfg := Config{Store: st, Clock: e.clock, Definitions: &fakeDefs{spec: e.spec}}
	for _, o := range opts {
		o(&cfg)
	}
	s, err := New(cfg)
	require.NoError(e.t, err)
	return s
}

func (e *env) ctx() context.Context { return context.Background() }

// runner inserts an active runner of the test tenant and pool.
func (e *env) runner(name string) *store.Runner {
	e.t.Helper()
	return e.runnerOf(testTenant, testPool, name)
}

// runnerOf inserts an active runner of tenant in pool.
func (e *env) runnerOf(tenant, pool, name string) *store.Runner {
	e.t.Helper()
	now := e.clock.Now()
	r := &store.Runner{
		ID: id.New(id.Runner, now), Tenant: tenant, Pool: pool, Name: name, Labels: []string{},
		PublicKey: protocol.EncodeKey(make([]byte, 32)), KeyFingerprint: "0000000000000000",
		Status: store.RunnerActive, AllowedRepos: []string{}, LastSeenAt: &now, CreatedAt: now,
	}
	// Through a transaction, as registration does: other tests' goroutines
	// may be writing, and an autocommit write would race BEGIN IMMEDIATE on
	// SQLite in its busy handler.
	require.NoError(e.t, e.store.InTx(e.ctx(), func(tx store.Tx) error { return tx.RunnerCreate(e.ctx(), r) }))
	return r
}

// request asks for a run through the service (queued, attempt 1).
func (e *env) request() *store.Run {
	e.t.Helper()
	v, created, err := e.a.RequestRun(e.ctx(), e.actor, &protocol.RunRequest{Job: testJob, Channel: "prod"})
	require.NoError(e.t, err)
	require.True(e.t, created)
	return v.Run
}

// call is the signed call a runner makes; attempt-scoped when asg is set.
func call(r *store.Runner, asg *protocol.Assignment) *authn.SignedCall {
	c := &authn.SignedCall{Runner: r}
	if asg != nil {
		c.Run, c.Attempt, c.Lease = asg.RunID, asg.AttemptID, asg.Lease.Token
	}
	return c
}

// claim claims with wait 0 and requires an assignment.
func (e *env) claim(s *Service, r *store.Runner, requestID string) *protocol.Assignment {
	e.t.Helper()
	asg, err := s.Claim(e.ctx(), call(r, nil), &protocol.ClaimRequest{RequestID: requestID})
	require.NoError(e.t, err)
	require.NotNil(e.t, asg, "expected an assignment")
	return asg
}

func succeeded() *protocol.ResultRequest {
	return &protocol.ResultRequest{Outcome: "succeeded", ExitCode: 0, Summary: "ok", Artifacts: []string{}}
}

func (e *env) attempts(runID string) []*store.Attempt {
	e.t.Helper()
	atts, err := e.store.AttemptListByRun(e.ctx(), runID)
	require.NoError(e.t, err)
	return atts
}

func (e *env) run(runID string) *store.Run {
	e.t.Helper()
	r, err := e.store.RunGetByID(e.ctx(), runID, false)
	require.NoError(e.t, err)
	return r
}

// auditCount counts the run's audit events with this action.
func (e *env) auditCount(runID, action string) int {
	e.t.Helper()
	evs, err := e.store.AuditList(e.ctx(), &store.AuditListParams{Tenant: testTenant, RunID: runID, Limit: 10000})
	require.NoError(e.t, err)
	n := 0
	for _, ev := range evs {
		if ev.Action == action {
			n++
		}
	}
	return n
}

// auditAll pages through every audit event of the test tenant.
func auditAll(t *testing.T, st store.Store) []*store.AuditEvent {
	t.Helper()
	var out []*store.AuditEvent
	after := int64(0)
	for {
		evs, err := st.AuditList(context.Background(), &store.AuditListParams{Tenant: testTenant, After: after, Limit: 5000})
		require.NoError(t, err)
		if len(evs) == 0 {
			return out
		}
		out = append(out, evs...)
		after = evs[len(evs)-1].Seq
	}
}

// seedRuns inserts n queued runs with their first attempt in large
// transactions, bypassing RequestRun (C1 and C10 need thousands). mutate may
// change each attempt before it is inserted (for instance to lease it).
func seedRuns(t *testing.T, st store.Store, spec Spec, n int, mutate func(i int, a *store.Attempt, r *store.Run)) []*store.Attempt {
	t.Helper()
	specJSON, err := json.Marshal(spec)
	require.NoError(t, err)
	out := make([]*store.Attempt, 0, n)
	const batch = 1000
	base := testEpoch.Add(-time.Hour)
	for start := 0; start < n; start += batch {
		end := min(start+batch, n)
		var made []*store.Attempt
		err := st.InTx(context.Background(), func(tx store.Tx) error {
			made = made[:0]
			for i := start; i < end; i++ {
				at := base.Add(time.Duration(i) * time.Millisecond)
				r := &store.Run{
					ID: id.New(id.Run, at), Tenant: testTenant, Job: testJob, Channel: "prod", Ref: "main", Commit: testCommit,
					Params: json.RawMessage(`{}`), Actor: "seed", Source: json.RawMessage(`{}`), State: store.RunQueued,
					Decision: json.RawMessage(`{"allowed":true}`), Grants: json.RawMessage(`{}`), LeaseKeys: json.RawMessage(`[]`),
					Spec: specJSON, MaxAttempts: max(spec.MaxAttempts, 1), CreatedAt: at, UpdatedAt: at,
				}
				a := newAttempt(r, spec, 1, at, at)
				if mutate != nil {
					mutate(i, a, r)
				}
				if err := tx.RunCreate(context.Background(), r); err != nil {
					return err
				}
				if err := tx.AttemptCreate(context.Background(), a); err != nil {
					return err
				}
				made = append(made, a)
			}
			return nil
		})
		require.NoError(t, err)
		out = append(out, made...)
	}
	return out
}

// commitUnknownStore is a store whose next InTx reports a lost COMMIT
// (store.ErrCommitUnknown), as a connection broken during COMMIT would.
// With commit set the transaction really commits first (the common, nasty
// case); without, it is rolled back (the other possibility).
type commitUnknownStore struct {
	store.Store
	armed  atomic.Bool
	commit bool
}

func (s *commitUnknownStore) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	if !s.armed.CompareAndSwap(true, false) {
		return s.Store.InTx(ctx, fn)
	}
	if !s.commit {
		_ = s.Store.InTx(ctx, func(tx store.Tx) error {
			if err := fn(tx); err != nil {
				return err
			}
			return errRollback
		})
		return fmt.Errorf("test: connection reset during COMMIT: %w", store.ErrCommitUnknown)
	}
	if err := s.Store.InTx(ctx, fn); err != nil {
		return err
	}
	return fmt.Errorf("test: connection reset during COMMIT: %w", store.ErrCommitUnknown)
}

var errRollback = errors.New("test: roll back")

// blocker is a failpoint action that parks its first caller until released.
type blocker struct {
	used    atomic.Bool
	reached chan struct{}
	release chan struct{}
}

func newBlocker() *blocker {
	return &blocker{reached: make(chan struct{}), release: make(chan struct{})}
}

func (b *blocker) fn() error {
	if !b.used.CompareAndSwap(false, true) {
		return nil // only the first caller is paused
	}
	close(b.reached)
	<-b.release
	return nil
}

func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// backend is a store together with a raw SQL handle on the same database,
// for bulk seeding and for invariants stated in SQL.
type backend struct {
	name string
	st   store.Store
	raw  *sql.DB
	dsn  string // "sqlite:PATH" or a PostgreSQL DSN, for other processes
}

// eachBackend is testdb.Each with a raw handle.
func eachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "jobplane.db")
		st, err := sqlite.Open(context.Background(), path)
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		raw, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
		require.NoError(t, err)
		t.Cleanup(func() { _ = raw.Close() })
		fn(t, backend{"sqlite", st, raw, "sqlite:" + path})
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := testdb.PostgresDSN(t)
		st, err := postgres.Open(context.Background(), dsn)
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		raw, err := sql.Open("pgx", dsn)
		require.NoError(t, err)
		t.Cleanup(func() { _ = raw.Close() })
		fn(t, backend{"postgres", st, raw, dsn})
	})
}

func (b backend) columns(t *testing.T, table string) []string {
	t.Helper()
	q := `SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = '` + table + `' AND is_generated = 'NEVER' ORDER BY ordinal_position`
	if b.name == "sqlite" {
		q = `SELECT name FROM pragma_table_info('` + table + `') ORDER BY cid`
	}
	rows, err := b.raw.Query(q)
	require.NoError(t, err)
	defer rows.Close()
	var cols []string
	for rows.Next() {
		var c string
		require.NoError(t, rows.Scan(&c))
		cols = append(cols, c)
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, cols)
	return cols
}

// cloneRuns seeds runs fast: it inserts one run with its first attempt
// through the store (so every column is encoded by the store itself), then
// copies that pair n-1 times in two INSERT … SELECT statements. The copies'
// IDs are the template's with a numeric suffix, so they sort after it and in
// copy order. It returns the attempt and run IDs in that order.
func (b backend) cloneRuns(t *testing.T, spec Spec, n int, mutate func(a *store.Attempt, r *store.Run)) (attempts, runs []string) {
	t.Helper()
	tmpl := seedRuns(t, b.st, spec, 1, func(_ int, a *store.Attempt, r *store.Run) {
		if mutate != nil {
			mutate(a, r)
		}
	})[0]
	attempts, runs = []string{tmpl.ID}, []string{tmpl.RunID}
	if n <= 1 {
		return attempts, runs
	}
	gen := fmt.Sprintf(`WITH RECURSIVE g(x) AS (SELECT 100001 UNION ALL SELECT x + 1 FROM g WHERE x < %d) `, 100000+n-1)
	clone := func(table string, override map[string]string, where string) {
		cols := b.columns(t, table)
		exprs := make([]string, len(cols))
		for i, c := range cols {
			if e, ok := override[c]; ok {
				exprs[i] = e
			} else {
				exprs[i] = "t." + c
			}
		}
		q := gen + `INSERT INTO ` + table + ` (` + strings.Join(cols, ", ") + `) SELECT ` + strings.Join(exprs, ", ") +
			` FROM ` + table + ` t, g WHERE ` + where
		_, err := b.raw.Exec(q)
		require.NoError(t, err, q)
	}
	clone("runs", map[string]string{"id": "t.id || '-' || g.x"}, "t.id = '"+tmpl.RunID+"'")
	clone("attempts", map[string]string{"id": "t.id || '-' || g.x", "run_id": "t.run_id || '-' || g.x"}, "t.id = '"+tmpl.ID+"'")
	for x := 100001; x < 100000+n; x++ {
		attempts = append(attempts, fmt.Sprintf("%s-%d", tmpl.ID, x))
		runs = append(runs, fmt.Sprintf("%s-%d", tmpl.RunID, x))
	}
	return attempts, runs
}

// count runs a counting query on the raw handle.
func (b backend) count(t *testing.T, q string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.raw.QueryRow(q, args...).Scan(&n), q)
	return n
}
