package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jobplane/jobplane/internal/clock"
)

// Config is one measurement.
type Config struct {
	// DB is the store: "sqlite:PATH" or a postgres:// URL; empty is a
	// temporary SQLite database. The benchmark inserts rows: point it at a
	// database or schema of its own.
	DB string
	// Runs is the number of runs requested and then claimed (default 2000).
	Runs int
	// Workers is the number of runner identities claiming concurrently
	// (default 8).
	Workers int
	// Clients is the number of concurrent callers requesting runs
	// (default 4).
	Clients int
	// Backlog, when positive, replaces the phases by the backlog
	// measurement (backlog.go): that many queued runs, then Runs of them
	// claimed and finished. PostgreSQL only.
	Backlog int
	// Idle, when positive, replaces the phases by the idle measurement
	// (idle.go): that many runners wait in long polls; memory, then
	// dispatch latency over Dispatch runs.
	Idle int
	// IdleProcs, with Idle, puts the idle runners in that many child
	// processes started with IdleCommand (idleproc.go), so that the memory
	// measured is the server's alone.
	IdleProcs   int
	IdleCommand []string
	// Dispatch is the number of runs of the paced dispatch-latency phase
	// (default 200).
	Dispatch int
	// Raw also runs the raw SKIP LOCKED claim+complete loop (raw.go) on the
	// same database, one row per transaction and RawBatch rows per
	// statement, and reports jobplane's rates as ratios of them.
	Raw bool
	// RawBatch is the batched raw loop's rows per statement (default 10).
	RawBatch int
	// ClaimMax, above 1, makes the runners of the claim+result and
	// lifecycle phases claim up to that many attempts per signed claim and
	// work on them at once (see Env.ClaimMax); 1 (the default) claims one
	// at a time.
	ClaimMax int
	// BatchResults has a runner report the results of the attempts it
	// claimed together in one signed call (POST /v1/runner/results), as a
	// queue's client completes jobs in batches, instead of one call each.
	BatchResults bool
	// RequestBatch, above 1, has the request and lifecycle phases' clients
	// request that many runs per call (POST /v1/runs/batch), as a backfill
	// would (Env.RequestBatch); 1 (the default) requests one per call.
	RequestBatch int
	// LogsApart sends the lifecycle's log chunk in a call of its own
	// rather than with the result (Runner.LogsApart).
	LogsApart bool
	// Renew has each lifecycle run renew its lease once before its result
	// (Runner.Renew), a heavier lifecycle kept for comparison. `jobplane
	// worker` renews every third of a lease's TTL, so a no-op job, done
	// long before that, never does.
	Renew bool
	// CommitBatch bounds the calls of one group transaction; 1 turns group
	// commit off (for comparison), 0 is the server's default.
	CommitBatch int
	// CommitConcurrency bounds the server's group transactions running
	// their bodies at once; 0 is the server's default.
	CommitConcurrency int
	// Logger receives the server's log; nil discards it.
	Logger *slog.Logger
	// Progress, when set, is called from one goroutine about five times a
	// second with the phase name and its progress, and once at each
	// phase's end.
	Progress func(phase string, done, total int)
	// PhaseHook, when set, is called as each phase starts and ends (for a
	// profile of one phase).
	PhaseHook func(phase string, start bool)
}

func (c *Config) defaults() {
	if c.Runs <= 0 {
		c.Runs = 2000
	}
	if c.Workers <= 0 {
		c.Workers = 8
	}
	if c.Clients <= 0 {
		c.Clients = 4
	}
	if c.Dispatch <= 0 {
		c.Dispatch = 200
	}
	if c.RawBatch <= 0 {
		c.RawBatch = 10
	}
}

// Result is a measurement's report. Fields are only ever added.
type Result struct {
	Store   string `json:"store"`
	Runs    int    `json:"runs"`
	Workers int    `json:"workers"`
	// ClaimMax is Config.ClaimMax (1: one attempt per claim).
	ClaimMax int `json:"claim_max"`
	// LogsApart is Config.LogsApart.
	LogsApart bool `json:"logs_apart,omitempty"`
	// Renew is Config.Renew.
	Renew bool `json:"renew,omitempty"`
	// BatchResults is Config.BatchResults.
	BatchResults bool `json:"batch_results,omitempty"`
	// RequestBatch is Config.RequestBatch (0 or 1: one run per request).
	RequestBatch int `json:"request_batch,omitempty"`
	Clients      int `json:"clients"`
	// GoVersion, CPUs and StartedAt describe where and when.
	GoVersion string    `json:"go_version"`
	CPUs      int       `json:"cpus"`
	StartedAt time.Time `json:"started_at"`

	// Request is the request phase: POST /v1/runs.
	Request        Phase   `json:"request"`
	RequestLatency Latency `json:"request_latency"`

	// ClaimResult is the claim+result phase: one op is one run claimed and
	// its result accepted.
	ClaimResult   Phase   `json:"claim_result"`
	ClaimLatency  Latency `json:"claim_latency"`
	ResultLatency Latency `json:"result_latency"`
	// RequestToClaimed is from created_at to the claim's answer. All runs
	// are requested before any is claimed, so this is mostly time spent
	// waiting in the queue, not dispatch latency.
	RequestToClaimed Latency `json:"request_to_claimed"`
	EmptyClaims      int     `json:"empty_claims"`

	// Lifecycle is the lifecycle phase: runs requested while runners wait
	// in long polls, each claimed, renewed, logged and finished.
	Lifecycle                 Phase   `json:"lifecycle"`
	LifecycleClaimLatency     Latency `json:"lifecycle_claim_latency"`
	LifecycleRequestToClaimed Latency `json:"lifecycle_request_to_claimed"`

	// Dispatch is the paced phase: one run at a time, requested while every
	// runner waits idle; DispatchLatency is its request→claimed.
	Dispatch        Phase   `json:"dispatch"`
	DispatchLatency Latency `json:"dispatch_latency"`

	// Transactions counts what the server committed over the whole
	// benchmark (all phases, registration and verification included).
	Transactions Transactions `json:"transactions"`

	// Idle is the idle-runners measurement, when asked for.
	Idle *Idle `json:"idle,omitempty"`

	// Backlog is the backlog measurement, when asked for.
	Backlog *Backlog `json:"backlog,omitempty"`

	// Raw holds the raw loops (one row per transaction, then a batch per
	// statement) when asked for.
	Raw []Raw `json:"raw,omitempty"`

	Verification Verification `json:"verification"`
}

// Transactions is what the server committed during the benchmark.
type Transactions struct {
	// Store counts the write transactions the store committed (InTx and, on
	// SQLite, every write).
	Store int64 `json:"store"`
	// Groups and Bodies are the group committer's transactions and the
	// calls they carried (a subset of Store).
	Groups int64 `json:"groups"`
	Bodies int64 `json:"bodies"`
	// PerRun is Store divided by the runs the benchmark created.
	PerRun float64 `json:"per_run"`
}

// Run performs one measurement on a fresh server. A run that did not
// succeed exactly once makes the error wrap ErrVerify; the Result is then
// returned too.
func Run(ctx context.Context, cfg Config) (res *Result, err error) {
	cfg.defaults()
	env, err := StartEnv(ctx, EnvConfig{DB: cfg.DB, Logger: cfg.Logger, CommitBatch: cfg.CommitBatch, CommitConcurrency: cfg.CommitConcurrency, MaxConns: 2*(cfg.Workers+cfg.Clients) + cfg.Idle})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, env.Close()) }()
	env.ClaimMax, env.RequestBatch = cfg.ClaimMax, cfg.RequestBatch
	res = &Result{
		Store: env.Driver, Runs: cfg.Runs, Workers: cfg.Workers, Clients: cfg.Clients, ClaimMax: max(cfg.ClaimMax, 1),
		GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), StartedAt: clock.Real{}.Now().UTC().Truncate(time.Second),
	}
	var commits0 int64
	if c, ok := env.Server.Store().(interface{ Commits() int64 }); ok {
		commits0 = c.Commits()
	}
	runners, err := env.RegisterRunners(ctx, cfg.Workers)
	if err != nil {
		return nil, err
	}
	for _, r := range runners {
		r.LogsApart, r.Renew, r.BatchResults = cfg.LogsApart, cfg.Renew, cfg.BatchResults
	}
	res.LogsApart, res.Renew, res.BatchResults = cfg.LogsApart, cfg.Renew, cfg.BatchResults
	if cfg.RequestBatch > 1 {
		res.RequestBatch = cfg.RequestBatch
	}
	if err := env.Settle(ctx); err != nil {
		return nil, err
	}

	if cfg.Idle > 0 {
		run := env.RunIdle
		if cfg.IdleProcs > 0 {
			run = func(ctx context.Context, n, runs int) (*Idle, error) {
				return env.RunIdleProcs(ctx, n, cfg.IdleProcs, runs, cfg.IdleCommand)
			}
		}
		idle, err := run(ctx, cfg.Idle, cfg.Dispatch)
		if err != nil {
			return nil, err
		}
		res.Idle = idle
		return res, nil
	}
	if cfg.Backlog > 0 {
		bl, err := env.RunBacklog(ctx, runners, cfg.Backlog, cfg.Runs)
		if err != nil {
			return nil, err
		}
		res.Backlog = bl
		return res, nil
	}

	var done atomic.Int64
	dbm := newDBMeter(cfg.DB)
	stop := cfg.phase("request", cfg.Runs, &done)
	cpu0, db0 := processCPU(), dbm.now()
	req, err := env.RequestRuns(ctx, cfg.Runs, cfg.Clients, &done)
	req.Phase.CPUPerOpUs, req.Phase.DBCPUPerOpUs = cpuPerRun(cpu0, cfg.Runs), dbm.perRun(db0, cfg.Runs)
	stop()
	if err != nil {
		return nil, err
	}
	res.Request, res.RequestLatency = req.Phase, req.Latency

	done.Store(0)
	stop = cfg.phase("claim+result", cfg.Runs, &done)
	cpu0, db0 = processCPU(), dbm.now()
	dr, err := env.Drain(ctx, runners, req.CreatedAt, &done)
	stop()
	if dr != nil {
		dr.Phase.CPUPerOpUs, dr.Phase.DBCPUPerOpUs = cpuPerRun(cpu0, cfg.Runs), dbm.perRun(db0, cfg.Runs)
	}
	if err != nil {
		return nil, err
	}
	res.ClaimResult, res.ClaimLatency, res.ResultLatency = dr.Phase, dr.ClaimLatency, dr.ResultLatency
	res.RequestToClaimed, res.EmptyClaims = dr.RequestToClaimed, dr.EmptyClaims

	done.Store(0)
	stop = cfg.phase("lifecycle", cfg.Runs, &done)
	cpu0, db0 = processCPU(), dbm.now()
	lc, err := env.RunLifecycle(ctx, runners, cfg.Runs, cfg.Clients, false, &done)
	stop()
	if lc != nil {
		lc.Phase.CPUPerOpUs, lc.Phase.DBCPUPerOpUs = cpuPerRun(cpu0, cfg.Runs), dbm.perRun(db0, cfg.Runs)
	}
	if err != nil {
		return nil, err
	}
	res.Lifecycle, res.LifecycleClaimLatency, res.LifecycleRequestToClaimed = lc.Phase, lc.ClaimLatency, lc.RequestToClaimed

	done.Store(0)
	stop = cfg.phase("dispatch", cfg.Dispatch, &done)
	dl, err := env.RunLifecycle(ctx, runners, cfg.Dispatch, 1, true, &done)
	stop()
	if err != nil {
		return nil, err
	}
	res.Dispatch, res.DispatchLatency = dl.Phase, dl.RequestToClaimed

	want := make(map[string]struct{}, len(req.CreatedAt))
	for id := range req.CreatedAt {
		want[id] = struct{}{}
	}
	v, err := env.Verify(ctx, want, dr.Claims)
	if err != nil {
		return nil, err
	}
	lv, err := env.Verify(ctx, lc.Requested, lc.Claims)
	if err != nil {
		return nil, err
	}
	dv, err := env.Verify(ctx, dl.Requested, dl.Claims)
	if err != nil {
		return nil, err
	}
	v.Checked += lv.Checked + dv.Checked
	v.Problems = append(append(v.Problems, lv.Problems...), dv.Problems...)
	res.Verification = *v
	if c, ok := env.Server.Store().(interface{ Commits() int64 }); ok {
		res.Transactions.Store = c.Commits() - commits0
	}
	cs := env.Server.Commits()
	res.Transactions.Groups, res.Transactions.Bodies = cs.Transactions, cs.Bodies
	res.Transactions.PerRun = math.Round(float64(res.Transactions.Store)/float64(2*cfg.Runs+cfg.Dispatch)*100) / 100
	if err := v.Err(); err != nil {
		return res, err
	}
	if cfg.Raw {
		if err := env.StopServer(); err != nil {
			return res, err
		}
		for _, batch := range []int{1, cfg.RawBatch} {
			raw, err := RunRaw(ctx, env.DSN, cfg.Runs, cfg.Workers, batch)
			if err != nil {
				return res, err
			}
			res.Raw = append(res.Raw, *raw)
		}
	}
	return res, nil
}

// phase reports a phase's progress and brackets it with PhaseHook.
func (cfg *Config) phase(name string, total int, done *atomic.Int64) (stop func()) {
	if cfg.PhaseHook != nil {
		cfg.PhaseHook(name, true)
	}
	stopProgress := progress(cfg.Progress, name, total, done)
	return func() {
		stopProgress()
		if cfg.PhaseHook != nil {
			cfg.PhaseHook(name, false)
		}
	}
}

// progress calls fn every 200 ms with done's value until the returned stop
// is called, which makes a last call. A nil fn does nothing.
func progress(fn func(string, int, int), phase string, total int, done *atomic.Int64) (stop func()) {
	if fn == nil {
		return func() {}
	}
	quit := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				fn(phase, int(done.Load()), total)
				return
			case <-t.C:
				fn(phase, int(done.Load()), total)
			}
		}
	}()
	return func() { close(quit); <-finished }
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return math.Round(a/b*1000) / 1000
}

// String is a short human summary.
func (r *Result) String() string {
	s := fmt.Sprintf("jobplane bench: %s, %d runs, %d workers, %d clients (%s, %d CPUs)\n",
		r.Store, r.Runs, r.Workers, r.Clients, r.GoVersion, r.CPUs)
	if r.ClaimMax > 1 {
		s += fmt.Sprintf("  claims         up to %d attempts per claim, worked on at once\n", r.ClaimMax)
	}
	if r.RequestBatch > 1 {
		s += fmt.Sprintf("  requests       up to %d runs per call (POST /v1/runs/batch)\n", r.RequestBatch)
	}
	if r.BatchResults {
		s += "  results        the results of attempts claimed together in one call (POST /v1/runner/results)\n"
	}
	if i := r.Idle; i != nil {
		s += fmt.Sprintf("  idle runners   %d registered, %d waiting in a long poll at once\n", i.Runners, i.Waiting)
		who := "server and runners together"
		if i.Procs > 0 {
			who = fmt.Sprintf("the server alone; the runners, in %d other processes, %.1f MiB", i.Procs, i.RunnersRSSMiB)
		}
		s += fmt.Sprintf("  memory         RSS %.1f MiB (%.1f MiB before they waited); Go heap %.1f MiB, stacks %.1f MiB, runtime total %.1f MiB — %s\n",
			i.RSSMiB, i.BaselineRSSMiB, i.HeapMiB, i.StackMiB, i.SysMiB, who)
		s += fmt.Sprintf("  idle CPU       %.2f cores while they waited\n", i.IdleCPU)
		s += fmt.Sprintf("  dispatch       request→claimed p50 %.2f ms, p99 %.2f ms, max %.2f ms (%d runs one at a time, all runners waiting)\n",
			i.DispatchLatency.P50ms, i.DispatchLatency.P99ms, i.DispatchLatency.MaxMs, i.Dispatch.Ops)
		return s
	}
	if b := r.Backlog; b != nil {
		for _, rd := range []BacklogRound{b.Small, b.Big} {
			s += fmt.Sprintf("  queue of %-8d claim+result %7.1f runs/s (%d claimed; claim p50 %.2f ms, p99 %.2f ms, max %.2f ms; filled in %.1fs)\n",
				rd.Queued, rd.ClaimResult.PerSecond, rd.ClaimResult.Ops, rd.ClaimLatency.P50ms, rd.ClaimLatency.P99ms, rd.ClaimLatency.MaxMs, rd.InsertSecs)
		}
		s += fmt.Sprintf("  claim p99 ratio %.2f (big queue / small queue)\n", b.P99Ratio)
		s += "  verified: each claimed run was claimed once and ended succeeded\n"
		for _, rd := range []BacklogRound{b.Small, b.Big} {
			if rd.Explain != "" {
				s += fmt.Sprintf("  EXPLAIN (ANALYZE, BUFFERS) of the claim statement, %d queued:\n    %s\n", rd.Queued, strings.ReplaceAll(rd.Explain, "\n", "\n    "))
			}
		}
		return s
	}
	s += fmt.Sprintf("  request        %8.1f runs/s   (%d in %.2fs; call p50 %.2f ms, p99 %.2f ms; %s)\n",
		r.Request.PerSecond, r.Request.Ops, r.Request.Seconds, r.RequestLatency.P50ms, r.RequestLatency.P99ms, cpuText(r.Request, "run"))
	s += fmt.Sprintf("  claim+result   %8.1f runs/s   (%d in %.2fs; claim p50 %.2f ms, p99 %.2f ms; result p50 %.2f ms, p99 %.2f ms; %s)\n",
		r.ClaimResult.PerSecond, r.ClaimResult.Ops, r.ClaimResult.Seconds,
		r.ClaimLatency.P50ms, r.ClaimLatency.P99ms, r.ResultLatency.P50ms, r.ResultLatency.P99ms, cpuText(r.ClaimResult, "run"))
	s += fmt.Sprintf("  request→claimed p50 %.0f ms, p99 %.0f ms (queueing: all runs are requested before the first claim)\n",
		r.RequestToClaimed.P50ms, r.RequestToClaimed.P99ms)
	steps := "request, long-poll claim, "
	if r.Renew {
		steps += "renew, "
	}
	if r.LogsApart {
		steps += "log chunk, result"
	} else {
		steps += "result carrying a log chunk"
	}
	s += fmt.Sprintf("  lifecycle      %8.1f runs/s   (%d in %.2fs; %s; %s; claim p50 %.2f ms, p99 %.2f ms; %s)\n",
		r.Lifecycle.PerSecond, r.Lifecycle.Ops, r.Lifecycle.Seconds, steps, claimsText(r.Lifecycle.Ops, r.LifecycleClaimLatency.Count),
		r.LifecycleClaimLatency.P50ms, r.LifecycleClaimLatency.P99ms, cpuText(r.Lifecycle, "run"))
	s += fmt.Sprintf("  request→claimed p50 %.2f ms, p99 %.2f ms (lifecycle: requests outpace the runners, so this includes queueing)\n",
		r.LifecycleRequestToClaimed.P50ms, r.LifecycleRequestToClaimed.P99ms)
	s += fmt.Sprintf("  dispatch       request→claimed p50 %.2f ms, p99 %.2f ms, max %.2f ms (%d runs one at a time, every runner idle in a long poll)\n",
		r.DispatchLatency.P50ms, r.DispatchLatency.P99ms, r.DispatchLatency.MaxMs, r.Dispatch.Ops)
	t := r.Transactions
	s += fmt.Sprintf("  transactions   %d committed by the store, %.2f per run (%d group transactions carried %d calls)\n",
		t.Store, t.PerRun, t.Groups, t.Bodies)
	for _, raw := range r.Raw {
		s += fmt.Sprintf("  raw loop       %8.1f jobs/s   (%d rows per transaction, %d workers, %d transactions; %s; lifecycle/raw %.3f, claim+result/raw %.3f",
			raw.Phase.PerSecond, raw.Batch, r.Workers, raw.Transactions, cpuText(raw.Phase, "job"),
			ratio(r.Lifecycle.PerSecond, raw.Phase.PerSecond), ratio(r.ClaimResult.PerSecond, raw.Phase.PerSecond))
		if c := ratio(cpuTotal(raw.Phase), cpuTotal(r.Lifecycle)); c > 0 {
			s += fmt.Sprintf("; by CPU lifecycle/raw %.3f", c)
		}
		s += ")\n"
	}
	if r.Verification.OK() {
		s += fmt.Sprintf("  verified: all %d runs succeeded on their only attempt, each claimed once\n", r.Verification.Checked)
	} else {
		s += fmt.Sprintf("  VERIFICATION FAILED (%d runs checked):\n", r.Verification.Checked)
		for _, p := range r.Verification.Problems {
			s += "    " + p + "\n"
		}
	}
	return s
}

// claimsText says how many claims answered with work carried a phase's
// runs: with --claim-max, whether the runners' batches were full.
func claimsText(runs, claims int) string {
	if claims == 0 {
		return "no claims"
	}
	return fmt.Sprintf("%d claims, %.1f runs each", claims, float64(runs)/float64(claims))
}
