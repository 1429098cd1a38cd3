package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
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
	// Logger receives the server's log; nil discards it.
	Logger *slog.Logger
	// Progress, when set, is called from one goroutine about five times a
	// second with the phase name and its progress, and once at each
	// phase's end.
	Progress func(phase string, done, total int)
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
}

// Result is a measurement's report. Fields are only ever added.
type Result struct {
	Store   string `json:"store"`
	Runs    int    `json:"runs"`
	Workers int    `json:"workers"`
	Clients int    `json:"clients"`
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

	Verification Verification `json:"verification"`
}

// Run performs one measurement on a fresh server. A run that did not
// succeed exactly once makes the error wrap ErrVerify; the Result is then
// returned too.
func Run(ctx context.Context, cfg Config) (res *Result, err error) {
	cfg.defaults()
	env, err := StartEnv(ctx, EnvConfig{DB: cfg.DB, Logger: cfg.Logger, MaxConns: 2 * (cfg.Workers + cfg.Clients)})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, env.Close()) }()
	res = &Result{
		Store: env.Driver, Runs: cfg.Runs, Workers: cfg.Workers, Clients: cfg.Clients,
		GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), StartedAt: clock.Real{}.Now().UTC().Truncate(time.Second),
	}
	runners, err := env.RegisterRunners(ctx, cfg.Workers)
	if err != nil {
		return nil, err
	}

	var done atomic.Int64
	stop := progress(cfg.Progress, "request", cfg.Runs, &done)
	req, err := env.RequestRuns(ctx, cfg.Runs, cfg.Clients, &done)
	stop()
	if err != nil {
		return nil, err
	}
	res.Request, res.RequestLatency = req.Phase, req.Latency

	done.Store(0)
	stop = progress(cfg.Progress, "claim+result", cfg.Runs, &done)
	dr, err := env.Drain(ctx, runners, req.CreatedAt, &done)
	stop()
	if err != nil {
		return nil, err
	}
	res.ClaimResult, res.ClaimLatency, res.ResultLatency = dr.Phase, dr.ClaimLatency, dr.ResultLatency
	res.RequestToClaimed, res.EmptyClaims = dr.RequestToClaimed, dr.EmptyClaims

	want := make(map[string]struct{}, len(req.CreatedAt))
	for id := range req.CreatedAt {
		want[id] = struct{}{}
	}
	v, err := env.Verify(ctx, want, dr.Claims)
	if err != nil {
		return nil, err
	}
	res.Verification = *v
	return res, v.Err()
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

// String is a short human summary.
func (r *Result) String() string {
	s := fmt.Sprintf("jobplane bench: %s, %d runs, %d workers, %d clients (%s, %d CPUs)\n",
		r.Store, r.Runs, r.Workers, r.Clients, r.GoVersion, r.CPUs)
	s += fmt.Sprintf("  request        %8.1f runs/s   (%d in %.2fs; call p50 %.2f ms, p99 %.2f ms)\n",
		r.Request.PerSecond, r.Request.Ops, r.Request.Seconds, r.RequestLatency.P50ms, r.RequestLatency.P99ms)
	s += fmt.Sprintf("  claim+result   %8.1f runs/s   (%d in %.2fs; claim p50 %.2f ms, p99 %.2f ms; result p50 %.2f ms, p99 %.2f ms)\n",
		r.ClaimResult.PerSecond, r.ClaimResult.Ops, r.ClaimResult.Seconds,
		r.ClaimLatency.P50ms, r.ClaimLatency.P99ms, r.ResultLatency.P50ms, r.ResultLatency.P99ms)
	s += fmt.Sprintf("  request→claimed p50 %.0f ms, p99 %.0f ms (queueing: all runs are requested before the first claim)\n",
		r.RequestToClaimed.P50ms, r.RequestToClaimed.P99ms)
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
