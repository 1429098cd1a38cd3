package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// stores names the --db value of each store; PostgreSQL gets a fresh
// schema (and is skipped when no server answers, as elsewhere).
func stores() map[string]func(testing.TB) string {
	return map[string]func(testing.TB) string{
		"sqlite":   func(testing.TB) string { return "" },
		"postgres": func(tb testing.TB) string { return testdb.PostgresDSN(tb) },
	}
}

func TestRunSmoke(t *testing.T) {
	for _, name := range []string{"sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) {
			db := stores()[name](t)
			var calls atomic.Int64
			res, err := Run(context.Background(), Config{
				DB: db, Runs: 30, Workers: 4, Clients: 2, Dispatch: 5, Raw: true, RawBatch: 4,
				Progress: func(string, int, int) { calls.Add(1) },
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.Store != name {
				t.Errorf("store %q, want %q", res.Store, name)
			}
			if res.Request.Ops != 30 || res.ClaimResult.Ops != 30 || res.Lifecycle.Ops != 30 || res.Dispatch.Ops != 5 {
				t.Errorf("ops: request %d, claim+result %d, lifecycle %d, dispatch %d; want 30, 30, 30, 5",
					res.Request.Ops, res.ClaimResult.Ops, res.Lifecycle.Ops, res.Dispatch.Ops)
			}
			if res.Verification.Checked != 30+30+5 {
				t.Errorf("checked %d runs, want %d (every phase's)", res.Verification.Checked, 30+30+5)
			}
			if res.DispatchLatency.Count != 5 || res.LifecycleRequestToClaimed.Count != 30 {
				t.Errorf("latency counts: dispatch %+v, lifecycle %+v", res.DispatchLatency, res.LifecycleRequestToClaimed)
			}
			// Per run at least a request, a claim and a result commit; the
			// group committer carried calls.
			if res.Transactions.Store < 65 || res.Transactions.Bodies == 0 || res.Transactions.PerRun <= 0 {
				t.Errorf("transactions: %+v", res.Transactions)
			}
			if len(res.Raw) != 2 || res.Raw[0].Batch != 1 || res.Raw[1].Batch != 4 || res.Raw[0].Phase.Ops != 30 || res.Raw[1].Phase.PerSecond <= 0 {
				t.Errorf("raw loops: %+v", res.Raw)
			}
			if res.Raw[0].Phase.CPUPerOpUs <= 0 || res.Lifecycle.CPUPerOpUs <= 0 {
				t.Errorf("CPU per operation not measured: raw %+v, lifecycle %+v", res.Raw[0].Phase, res.Lifecycle)
			} else if !strings.Contains(res.String(), "by CPU lifecycle/raw") {
				t.Errorf("summary without the ratio by CPU:\n%s", res.String())
			}
			if res.Request.PerSecond <= 0 || res.ClaimResult.PerSecond <= 0 {
				t.Errorf("rates: %+v %+v", res.Request, res.ClaimResult)
			}
			if res.ClaimLatency.Count != 30 || res.RequestToClaimed.Count != 30 || res.RequestLatency.Count != 30 {
				t.Errorf("latency counts: %+v %+v %+v", res.ClaimLatency, res.RequestToClaimed, res.RequestLatency)
			}
			if res.EmptyClaims < 2*4 {
				t.Errorf("empty claims %d, want at least %d (two per worker)", res.EmptyClaims, 2*4)
			}
			if calls.Load() < 2 {
				t.Errorf("progress called %d times, want at least once per phase", calls.Load())
			}
			if res.String() == "" {
				t.Error("empty summary")
			}
		})
	}
}

// With --request-batch the request and lifecycle phases request runs
// several per call (31 runs in calls of 8: the last call carries 7), and
// every run is still requested, claimed and verified exactly once.
func TestRunRequestBatch(t *testing.T) {
	for _, name := range []string{"sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) {
			res, err := Run(context.Background(), Config{
				DB: stores()[name](t), Runs: 31, Workers: 2, Clients: 2, Dispatch: 3, RequestBatch: 8, ClaimMax: 4, BatchResults: true,
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.RequestBatch != 8 || res.Request.Ops != 31 || res.Lifecycle.Ops != 31 || res.Verification.Checked != 31+31+3 {
				t.Errorf("request batch %d, ops %d/%d, checked %d", res.RequestBatch, res.Request.Ops, res.Lifecycle.Ops, res.Verification.Checked)
			}
			if res.RequestLatency.Count != 31 {
				t.Errorf("request latency samples %d, want one per run", res.RequestLatency.Count)
			}
			if !strings.Contains(res.String(), "up to 8 runs per call") {
				t.Errorf("summary does not say the requests were batched:\n%s", res)
			}
		})
	}
}

// The docs say a database may be measured again: a second benchmark on
// the database of a first opens the signing keys the first sealed there
// (every benchmark server seals with the same key) and verifies only its
// own runs.
func TestRunAgainOnTheSameDatabase(t *testing.T) {
	for _, name := range []string{"sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) {
			db := stores()[name](t)
			if db == "" {
				db = "sqlite:" + filepath.Join(t.TempDir(), "bench.db")
			}
			for round := 1; round <= 2; round++ {
				res, err := Run(context.Background(), Config{DB: db, Runs: 10, Workers: 2, Clients: 1, Dispatch: 2})
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				if res.Verification.Checked != 10+10+2 {
					t.Errorf("round %d checked %d runs, want %d (its own)", round, res.Verification.Checked, 10+10+2)
				}
			}
		})
	}
}

// TestVerifyFindsProblems checks that the verify phase refuses what it must:
// a run claimed twice, a run that did not succeed, and a claimed run the
// benchmark did not create.
func TestVerifyFindsProblems(t *testing.T) {
	ctx := context.Background()
	env, err := StartEnv(ctx, EnvConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := env.Close(); err != nil {
			t.Error(err)
		}
	}()
	req, err := env.RequestRuns(ctx, 3, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct{}{}
	for id := range req.CreatedAt {
		want[id] = struct{}{}
	}
	// Nothing claimed yet: every run is queued and was claimed 0 times.
	v, err := env.Verify(ctx, want, map[string]int{})
	if err != nil {
		t.Fatal(err)
	}
	if v.OK() || v.Checked != 3 || !errors.Is(v.Err(), ErrVerify) {
		t.Fatalf("queued runs passed verification: %+v", v)
	}
	// An extra run outside the set is claimed along with the others.
	if _, err := env.RequestRuns(ctx, 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	runners, err := env.RegisterRunners(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	dr, err := env.Drain(ctx, runners, req.CreatedAt, nil)
	if err != nil {
		t.Fatal(err)
	}
	if dr.Phase.Ops != 4 || dr.RequestToClaimed.Count != 3 {
		t.Fatalf("drain: %+v", dr)
	}
	v, err = env.Verify(ctx, want, dr.Claims)
	if err != nil {
		t.Fatal(err)
	}
	if v.OK() || len(v.Problems) != 1 {
		t.Fatalf("foreign claim not reported: %+v", v)
	}
	for id := range dr.Claims {
		if _, ok := want[id]; !ok {
			delete(dr.Claims, id)
		}
	}
	if v, _ := env.Verify(ctx, want, dr.Claims); !v.OK() {
		t.Fatalf("clean drain failed verification: %+v", v)
	}
	for id := range want {
		dr.Claims[id] = 2
		break
	}
	if v, _ := env.Verify(ctx, want, dr.Claims); v.OK() {
		t.Fatal("double claim passed verification")
	}
}

func TestSummarize(t *testing.T) {
	var s []time.Duration
	for i := 100; i >= 1; i-- {
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	l := Summarize(s)
	if l.Count != 100 || l.P50ms != 50 || l.P99ms != 99 || l.MaxMs != 100 {
		t.Fatalf("%+v", l)
	}
	if (Summarize(nil) != Latency{}) {
		t.Fatal("empty samples")
	}
}

// BenchmarkClaimResult measures one run claimed and its result accepted
// through the HTTP API by 8 concurrent runners; b.N runs are requested
// before the timer starts. ns/op is wall time per run across all workers.
func BenchmarkClaimResult(b *testing.B) {
	for _, name := range []string{"sqlite", "postgres"} {
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			env, err := StartEnv(ctx, EnvConfig{DB: stores()[name](b)})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = env.Close() })
			runners, err := env.RegisterRunners(ctx, 8)
			if err != nil {
				b.Fatal(err)
			}
			req, err := env.RequestRuns(ctx, b.N, 4, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			dr, err := env.Drain(ctx, runners, nil, nil)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			if dr.Phase.Ops != b.N || len(dr.Claims) != len(req.CreatedAt) {
				b.Fatalf("drained %d runs (%d distinct), want %d", dr.Phase.Ops, len(dr.Claims), b.N)
			}
			b.ReportMetric(dr.Phase.PerSecond, "runs/s")
		})
	}
}

// BenchmarkRequest measures POST /v1/runs with 4 concurrent clients.
func BenchmarkRequest(b *testing.B) {
	for _, name := range []string{"sqlite", "postgres"} {
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			env, err := StartEnv(ctx, EnvConfig{DB: stores()[name](b)})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = env.Close() })
			b.ResetTimer()
			req, err := env.RequestRuns(ctx, b.N, 4, nil)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(req.Phase.PerSecond, "runs/s")
		})
	}
}

// TestBacklogSmoke runs the backlog measurement with a small big queue.
func TestBacklogSmoke(t *testing.T) {
	db := testdb.PostgresDSN(t)
	res, err := Run(context.Background(), Config{DB: db, Runs: 20, Workers: 3, Backlog: 1500})
	if err != nil {
		t.Fatal(err)
	}
	b := res.Backlog
	if b == nil || b.Small.Queued != 20+SmallBacklog+1 || b.Big.Queued != 1501 {
		t.Fatalf("backlog: %+v", b)
	}
	for _, rd := range []BacklogRound{b.Small, b.Big} {
		if rd.ClaimResult.Ops != 20 || rd.ClaimLatency.Count != 20 {
			t.Errorf("round %d: %+v", rd.Queued, rd)
		}
		if !strings.Contains(rd.Explain, "attempts_claimable") {
			t.Errorf("the claim does not use its index with %d queued:\n%s", rd.Queued, rd.Explain)
		}
	}
	if _, err := Run(context.Background(), Config{Backlog: 10}); err == nil {
		t.Error("--backlog on SQLite was accepted")
	}
}

// TestIdleSmoke runs the idle measurement with a few runners.
func TestIdleSmoke(t *testing.T) {
	res, err := Run(context.Background(), Config{Workers: 1, Idle: 20, Dispatch: 3})
	if err != nil {
		t.Fatal(err)
	}
	i := res.Idle
	if i == nil || i.Runners != 20 || i.Waiting != 20 || i.Dispatch.Ops != 3 || i.DispatchLatency.Count != 3 || i.RSSMiB <= 0 {
		t.Fatalf("idle: %+v", i)
	}
}

// TestIdleProcsSmoke runs the idle measurement with the runners in two
// child processes (this test binary again, as TestIdleChildProcess).
func TestIdleProcsSmoke(t *testing.T) {
	if IsIdleChild() {
		t.Skip("in an idle child")
	}
	res, err := Run(context.Background(), Config{Workers: 1, Idle: 21, IdleProcs: 2, Dispatch: 4,
		IdleCommand: []string{os.Args[0], "-test.run=^TestIdleChildProcess$"}})
	if err != nil {
		t.Fatal(err)
	}
	i := res.Idle
	if i == nil || i.Runners != 21 || i.Procs != 2 || i.Waiting != 21 || i.Dispatch.Ops != 4 || i.DispatchLatency.Count != 4 ||
		i.RSSMiB <= 0 || i.RunnersRSSMiB <= 0 {
		t.Fatalf("idle: %+v", i)
	}
}

// TestIdleChildProcess is the body of TestIdleProcsSmoke's children; it
// does nothing in a normal test run.
func TestIdleChildProcess(t *testing.T) {
	if !IsIdleChild() {
		t.Skip("only as a child of TestIdleProcsSmoke")
	}
	err := IdleChild(context.Background(), os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// countingTransport counts requests by path.
type countingTransport struct {
	base http.RoundTripper
	mu   sync.Mutex
	n    map[string]int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.n[r.URL.Path]++
	c.mu.Unlock()
	return c.base.RoundTrip(r)
}

// TestFinishRenews: a lifecycle run renews its lease only with Renew, and
// carries its log chunk on the result unless LogsApart.
func TestFinishRenews(t *testing.T) {
	ctx := context.Background()
	env, err := StartEnv(ctx, EnvConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	runners, err := env.RegisterRunners(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	r := runners[0]
	ct := &countingTransport{base: r.Client.HTTP.Transport, n: map[string]int{}}
	if ct.base == nil {
		ct.base = http.DefaultTransport
	}
	hc := *r.Client.HTTP
	hc.Transport = ct
	r.Client.HTTP = &hc
	for _, tc := range []struct{ renew, apart bool }{{false, false}, {true, false}, {false, true}} {
		clear(ct.n)
		r.Renew, r.LogsApart = tc.renew, tc.apart
		if _, err := env.Admin.CreateRun(ctx, &protocol.RunRequest{Job: Job, Channel: Channel}); err != nil {
			t.Fatal(err)
		}
		asg, err := r.Client.Claim(ctx, 5, "")
		if err != nil || asg == nil {
			t.Fatalf("claim: %v %v", asg, err)
		}
		if err := r.finish(ctx, asg, time.Now()); err != nil {
			t.Fatal(err)
		}
		want := map[string]int{"/v1/runner/claim": 1, "/v1/runner/attempt/result": 1}
		if tc.renew {
			want["/v1/runner/attempt/renew"] = 1
		}
		if tc.apart {
			want["/v1/runner/attempt/logs"] = 1
		}
		if !maps.Equal(ct.n, want) {
			t.Errorf("renew %v, logs apart %v: calls %v, want %v", tc.renew, tc.apart, ct.n, want)
		}
	}
}
