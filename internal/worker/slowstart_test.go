package worker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/executor"
	"github.com/jobplane/jobplane/internal/executor/process"
)

// slowStart is an executor whose Start takes hold (an image pull through a
// slow registry) unless its context ends first; the job it then returns
// exits 0 at once.
type slowStart struct {
	executor.Executor
	hold time.Duration
	// renewsDuring reads how many renewals the server has seen.
	renewsDuring func() int

	mu        sync.Mutex
	spec      *executor.Spec
	renews    int       // renewals seen when the start returned
	latest    time.Time // spec.LatestUntil() as the start returned
	cancelled bool      // the start's context ended before hold
	job       *quickJob
}

func (s *slowStart) Start(ctx context.Context, spec *executor.Spec) (executor.Job, error) {
	t := time.NewTimer(s.hold)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spec, s.renews, s.latest = spec, s.renewsDuring(), spec.LatestUntil()
	if ctx.Err() != nil {
		s.cancelled = true
		return nil, &executor.StartError{Reason: executor.ReasonImageMissing, Err: ctx.Err()}
	}
	s.job = &quickJob{}
	return s.job, nil
}

// quickJob exits 0 as soon as it is waited for, recording its bounds.
type quickJob struct {
	mu      sync.Mutex
	extends []time.Time
}

func (j *quickJob) Extend(until time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.extends = append(j.extends, until)
}

func (*quickJob) Stop(time.Duration) {}

func (*quickJob) Wait() executor.Exit { return executor.Exit{Code: 0, Summary: "exit status 0"} }

// TestRenewalsGoOnDuringALongStart: an executor's start that takes more
// than a lease's TTL (a long image pull) does not cost the lease: the
// worker renews meanwhile, the executor reads a bound those renewals
// moved, the job's first bound is at least that, and the attempt
// succeeds. A stop that lands during the start (a cancel) cancels it.
func TestRenewalsGoOnDuringALongStart(t *testing.T) {
	t.Parallel()
	t.Run("renewed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		a := assignment(b.out, "true") // TTL 3 s: a trust window of 2 s
		b.srv.enqueue(a)
		slow := &slowStart{Executor: process.New(process.Options{}), hold: 5 * time.Second,
			renewsDuring: func() int { b.srv.mu.Lock(); defer b.srv.mu.Unlock(); return b.srv.renews[a.AttemptID] }}
		cfg := testConfig(t, b.ts.URL, b.dir, b.clk)
		cfg.Executor = slow
		startWorker(t, cfg)
		b.srv.waitFor(t, "result", 20*time.Second, func() bool { return len(b.srv.results[a.AttemptID]) > 0 })
		b.srv.mu.Lock()
		res := b.srv.results[a.AttemptID][0]
		b.srv.mu.Unlock()
		slow.mu.Lock()
		defer slow.mu.Unlock()
		require.Equal(t, "succeeded", res.Outcome, "%+v", res)
		require.False(t, slow.cancelled, "the start was cancelled")
		// Every 2/3 s over 5 s.
		require.GreaterOrEqual(t, slow.renews, 4, "renewals stopped during the start")
		require.Greater(t, slow.latest.Sub(slow.spec.Until), 3*time.Second, "the bound read at the start's end is the renewed one")
		slow.job.mu.Lock()
		defer slow.job.mu.Unlock()
		require.NotEmpty(t, slow.job.extends, "the job was told the latest bound once started")
		require.False(t, slow.job.extends[0].Before(slow.latest))
	})
	t.Run("cancelled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		a := assignment(b.out, "true")
		b.srv.enqueue(a)
		b.srv.renew = func(string, int) (int, string, bool) { return 200, "", true }
		slow := &slowStart{Executor: process.New(process.Options{}), hold: 30 * time.Second,
			renewsDuring: func() int { b.srv.mu.Lock(); defer b.srv.mu.Unlock(); return b.srv.renews[a.AttemptID] }}
		cfg := testConfig(t, b.ts.URL, b.dir, b.clk)
		cfg.Executor = slow
		startWorker(t, cfg)
		began := time.Now()
		b.srv.waitFor(t, "result", 20*time.Second, func() bool { return len(b.srv.results[a.AttemptID]) > 0 })
		b.srv.mu.Lock()
		res := b.srv.results[a.AttemptID][0]
		b.srv.mu.Unlock()
		slow.mu.Lock()
		defer slow.mu.Unlock()
		require.True(t, slow.cancelled, "a cancel during the start did not cancel it")
		require.Less(t, time.Since(began), 10*time.Second)
		require.Equal(t, "failed", res.Outcome)
		require.Equal(t, reasonCancelled, res.Summary)
	})
}
