package worker

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/executor"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/tracing"
)

// Worker is the runner agent. Make one with New and start it with Run.
type Worker struct {
	cfg     Config
	log     *slog.Logger
	tracing *tracing.Tracing
	clk     clock.Clock
	rc      *apiclient.RunnerClient
	// exec starts and stops the jobs.
	exec executor.Executor
	// results coalesces the results of attempts that end together.
	results *resultSender
	// disabledSaid: the WARN that this runner is disabled was logged since
	// the last successful claim.
	disabledSaid atomic.Bool

	// Timing knobs; tests shorten them.
	heartbeatEvery time.Duration
	backoffBase    time.Duration
	backoffMax     time.Duration
	killGrace      time.Duration // SIGTERM → SIGKILL, capped by the trust window
	tick           time.Duration // longest real sleep between clock checks
	flushEvery     time.Duration // log batching

	mu      sync.Mutex
	running map[string]*attempt // by attempt ID
}

// New checks cfg and returns a Worker. It does no I/O.
func New(cfg Config) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	cfg.Labels = append([]string{}, cfg.Labels...)
	hc := cfg.HTTP
	if cfg.Tracing.Enabled() {
		hc = withTracing(hc)
	}
	urls := cfg.serverURLs()
	rc := &apiclient.RunnerClient{BaseURL: urls[0], HTTP: hc, Clock: cfg.Clock}
	if len(urls) > 1 {
		for _, u := range urls {
			rc.Servers = append(rc.Servers, apiclient.Server{URL: u})
		}
	}
	rc.OnFailover = func(from, to string, err error) {
		cfg.Logger.Warn("worker: server unreachable or unavailable; failing over", "server", from, "next", to, "error", err)
	}
	return &Worker{
		cfg:            cfg,
		log:            cfg.Logger,
		tracing:        cfg.Tracing,
		clk:            cfg.Clock,
		rc:             rc,
		exec:           cfg.Executor,
		results:        &resultSender{rc: rc},
		heartbeatEvery: 10 * time.Second,
		backoffBase:    500 * time.Millisecond,
		backoffMax:     30 * time.Second,
		killGrace:      5 * time.Second,
		tick:           200 * time.Millisecond,
		flushEvery:     200 * time.Millisecond,
		running:        map[string]*attempt{},
	}, nil
}

// Run registers (once) and serves until ctx is cancelled. It then stops
// gracefully: no new claims, running jobs are stopped with the reason
// "worker shutting down" and their attempts relinquished. It returns nil
// after a graceful stop, or an error if the runner has no usable identity.
func (w *Worker) Run(ctx context.Context) error {
	w.resolveServers(ctx)
	if err := w.ensureIdentity(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	// From here on every line is about this runner, and says which.
	w.log = w.log.With("runner_id", w.rc.RunnerID)
	w.log.Info("worker: started", "pool", w.cfg.Pool, "concurrency", w.cfg.Concurrency)
	// A starting worker holds no attempt: whatever the executor left of an
	// earlier incarnation's attempts (Kubernetes Jobs, containers) goes.
	if err := w.exec.Sweep(ctx, w.rc.RunnerID, func(string) bool { return false }); err != nil {
		w.log.Warn("worker: cannot remove what earlier attempts left", "executor", w.exec.Name(), "err", err)
	}
	if !w.stateExecutor(ctx) {
		return nil
	}
	var wg sync.WaitGroup
	wg.Go(func() { w.heartbeatLoop(ctx) })
	if w.cfg.Concurrency == 1 {
		wg.Go(func() { w.claimLoop(ctx, 0) })
	} else {
		wg.Go(func() { w.claimBatchLoop(ctx, &wg) })
	}
	wg.Wait()
	w.log.Info("worker: stopped")
	return nil
}

// executorState is what the runner tells the server of its executor: the
// server hands it only attempts these capabilities cover.
func (w *Worker) executorState() (string, *protocol.Capabilities) {
	c := w.exec.Capabilities()
	return w.exec.Name(), &protocol.Capabilities{Images: c.Images, Isolated: c.Isolated}
}

// stateExecutor tells the server, before the first claim, what this
// runner's executor is: a worker restarted with another executor (or
// without its job user) keeps its identity, and must not be handed what
// only its previous executor could run. A heartbeat carries it; it is
// retried until the server answers, like registration. False: ctx ended.
func (w *Worker) stateExecutor(ctx context.Context) bool {
	req := protocol.HeartbeatRequest{Status: "idle", Attempts: []string{}}
	req.Executor, req.Capabilities = w.executorState()
	for n := 0; ; n++ {
		hctx, cancel := context.WithTimeout(ctx, w.heartbeatEvery)
		_, err := w.rc.Heartbeat(hctx, req)
		cancel()
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if !apiclient.Retryable(err) {
			// The claims will meet the same refusal and report it.
			w.log.Warn("worker: cannot state the executor", "error", err)
			return true
		}
		w.log.Warn("worker: stating the executor failed, retrying", "error", err)
		if !w.sleep(ctx, w.backoff(n)) {
			return false
		}
	}
}

// backoff is capped exponential backoff with jitter in [d/2, d], so that
// runners restarted together do not retry in lockstep.
func (w *Worker) backoff(n int) time.Duration {
	d := w.backoffMax
	if n < 30 {
		d = min(w.backoffBase<<n, w.backoffMax)
	}
	return d/2 + rand.N(d/2+1)
}

// sleep waits d of real time; false means ctx ended first.
func (w *Worker) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// heartbeatLoop reports status and stops the attempts the server lists.
func (w *Worker) heartbeatLoop(ctx context.Context) {
	for {
		w.mu.Lock()
		ids := make([]string, 0, len(w.running))
		for id := range w.running {
			ids = append(ids, id)
		}
		w.mu.Unlock()
		sort.Strings(ids)
		status := "idle"
		if len(ids) > 0 {
			status = "busy"
		}
		hctx, cancel := context.WithTimeout(ctx, w.heartbeatEvery)
		req := protocol.HeartbeatRequest{Status: status, Attempts: ids}
		req.Executor, req.Capabilities = w.executorState()
		resp, err := w.rc.Heartbeat(hctx, req)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			w.log.Warn("worker: heartbeat failed", "error", err)
		default:
			for _, aid := range resp.CancelAttempts {
				w.mu.Lock()
				a := w.running[aid]
				w.mu.Unlock()
				if a != nil {
					a.stop(reasonCancelled, false)
				}
			}
		}
		// Jitter spreads the heartbeats of many runners.
		if !w.sleep(ctx, w.heartbeatEvery*9/10+rand.N(w.heartbeatEvery/5+1)) {
			return
		}
	}
}

// logRefusedClaim logs a claim the server refused. A disabled runner is an
// operator's decision, not a fault: it is said once at WARN (and again
// only at debug) until a claim succeeds; any other refusal is an ERROR.
func (w *Worker) logRefusedClaim(log *slog.Logger, err error) {
	if apiclient.IsCode(err, protocol.CodeRunnerDisabled) {
		if w.disabledSaid.CompareAndSwap(false, true) {
			log.Warn("worker: this runner is disabled; claiming again until an admin enables it", "error", err)
		} else {
			log.Debug("worker: claim refused: runner disabled", "error", err)
		}
		return
	}
	log.Error("worker: claim refused", "error", err)
}

// claimLoop is one claim slot: it claims and runs one attempt at a time.
func (w *Worker) claimLoop(ctx context.Context, slot int) {
	log := w.log.With("slot", slot)
	var (
		requestID string
		firstSent time.Time // when the current request_id was first sent
		failures  int
	)
	for ctx.Err() == nil {
		if requestID == "" {
			requestID = id.Secret(16)
			firstSent = w.clk.Now()
		}
		asg, err := w.rc.Claim(ctx, w.cfg.WaitSeconds, requestID)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if apiclient.Retryable(err) {
				// The answer may be lost: ask again with the same request_id
				// so the server returns the assignment it may have leased.
				log.Warn("worker: claim failed, retrying", "error", err, "failures", failures+1)
			} else {
				w.logRefusedClaim(log, err)
				requestID = ""
			}
			if !w.sleep(ctx, w.backoff(failures)) {
				return
			}
			failures++
			continue
		}
		failures = 0
		w.disabledSaid.Store(false)
		requestID = ""
		if asg == nil {
			continue
		}
		// The lease may have been granted as early as the first send of this
		// request_id, so the trust window starts there.
		w.runAttempt(ctx, asg, firstSent)
	}
}

// claimBatchLoop serves a worker with several slots: one signed long poll
// asks for as many attempts as slots are free ("max"), and each assignment
// runs in a slot of its own. A claim whose answer was lost is repeated with
// the same request_id and the same max, so the server hands back what it
// leased; the slots stay reserved until it answers.
func (w *Worker) claimBatchLoop(ctx context.Context, wg *sync.WaitGroup) {
	free := make(chan struct{}, w.cfg.Concurrency) // one token per free slot
	for range w.cfg.Concurrency {
		free <- struct{}{}
	}
	release := func(n int) {
		for range n {
			free <- struct{}{}
		}
	}
	var (
		requestID string
		firstSent time.Time
		failures  int
		n         int // slots reserved for the claim in flight
	)
	for ctx.Err() == nil {
		if requestID == "" {
			select {
			case <-ctx.Done():
				return
			case <-free:
			}
			n = 1
		take:
			for n < min(w.cfg.Concurrency, protocol.MaxClaimBatch) {
				select {
				case <-free:
					n++
				default:
					break take
				}
			}
			requestID = id.Secret(16)
			firstSent = w.clk.Now()
		}
		asgs, err := w.rc.ClaimMany(ctx, w.cfg.WaitSeconds, n, requestID)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if apiclient.Retryable(err) {
				w.log.Warn("worker: claim failed, retrying", "error", err, "failures", failures+1)
			} else {
				w.logRefusedClaim(w.log, err)
				requestID = ""
				release(n)
			}
			if !w.sleep(ctx, w.backoff(failures)) {
				return
			}
			failures++
			continue
		}
		failures, requestID = 0, ""
		w.disabledSaid.Store(false)
		release(n - len(asgs))
		for _, asg := range asgs {
			sent := firstSent
			wg.Go(func() {
				defer release(1)
				w.runAttempt(ctx, asg, sent)
			})
		}
	}
}
