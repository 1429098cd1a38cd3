package worker

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/creds"
	"github.com/jobplane/jobplane/internal/executor"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/protocol"
)

// Why a job was stopped; recorded as a system log line and, where a result
// is still posted, as its summary.
const (
	reasonCancelled  = "cancelled"
	reasonTimedOut   = "timed out"
	reasonLeaseLost  = "lease lost"
	reasonNotRenewed = "lease not renewed in time"
	reasonShutdown   = "worker shutting down"
)

// attempt is one assigned attempt being executed.
type attempt struct {
	w        *Worker
	asg      *protocol.Assignment
	ref      apiclient.AttemptRef
	log      *slog.Logger
	ttl      time.Duration
	deadline time.Time // local job deadline; zero when none
	resultID string    // one request_id for every try of the result
	logs     *shipper
	finished chan struct{}

	mu         sync.Mutex
	trust      time.Time    // stop acting at this instant unless renewed
	lost       bool         // lease gone or trust ended: send nothing more
	reason     string       // first stop reason
	relinquish bool         // give the attempt back instead of a result
	job        executor.Job // nil until started
	artifacts  []string     // stored artifact IDs, for the result
	// masker hides the credentials the job holds; atomic because lines are
	// emitted with and without mu held.
	masker atomic.Pointer[creds.Masker]
}

// leaseGone reports whether an answer means this runner no longer holds the
// attempt: continuing would act without a lease.
func leaseGone(err error) bool {
	return apiclient.IsCode(err, protocol.CodeLeaseExpired) ||
		apiclient.IsCode(err, protocol.CodeAttemptStale) ||
		apiclient.IsCode(err, protocol.CodeRunnerDisabled) ||
		apiclient.StatusOf(err) == http.StatusGone
}

// runAttempt executes one assignment from claim to result. claimSent is
// when the claim that returned it was first sent.
func (w *Worker) runAttempt(ctx context.Context, asg *protocol.Assignment, claimSent time.Time) {
	ttl := leaseTTL(asg.Lease.TTLSeconds)
	a := &attempt{
		w:        w,
		asg:      asg,
		ref:      apiclient.AttemptRef{RunID: asg.RunID, AttemptID: asg.AttemptID, LeaseToken: asg.Lease.Token},
		log:      w.log.With("run_id", asg.RunID, "attempt_id", asg.AttemptID),
		ttl:      ttl,
		deadline: jobDeadline(claimSent, asg.Job.TimeoutSeconds, ttl),
		resultID: id.Secret(16),
		finished: make(chan struct{}),
	}
	a.trust = capAt(trustUntil(claimSent, ttl), a.deadline)
	a.log.Info("worker: attempt assigned", "job", asg.Job.Name, "attempt_number", asg.AttemptNumber, "ttl", ttl)

	w.mu.Lock()
	w.running[asg.AttemptID] = a
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.running, asg.AttemptID)
		w.mu.Unlock()
	}()

	// The attempt's own requests (final logs, result, relinquish) must
	// outlive a shutdown; they are bounded by the trust window instead.
	actx := context.WithoutCancel(ctx)
	a.logs = newShipper(w.clk.Now, w.flushEvery, func(req protocol.LogsRequest) bool {
		return a.call(actx, "send logs", func(c context.Context) error { return w.rc.Logs(c, a.ref, req) })
	})
	unhook := context.AfterFunc(ctx, func() { a.stop(reasonShutdown, false) })
	defer unhook()

	lastSent, ok := a.freshen(actx, claimSent)
	if !ok {
		a.logs.drop()
		a.logs.close()
		return
	}
	var keepers sync.WaitGroup
	keepers.Go(func() { a.renewLoop(actx, lastSent) })
	keepers.Go(a.watchdog)

	outcome, code, summary := a.execute()
	a.finish(actx, outcome, code, summary, a.logs.closeKeepingLast())
	close(a.finished)
	keepers.Wait()
}

// freshen renews before the job starts when the claim's trust window is
// already half spent (a long poll can take most of a TTL): the renew is sent
// later, so its window is longer. It returns the send time of the lease's
// latest grant, or false when the attempt must not start.
func (a *attempt) freshen(ctx context.Context, claimSent time.Time) (time.Time, bool) {
	clk := a.w.clk
	for n := 0; n < 3; n++ {
		a.mu.Lock()
		fresh := clk.Now().Add(a.ttl / 2).Before(a.trust)
		a.mu.Unlock()
		if fresh {
			return claimSent, true
		}
		sent := clk.Now()
		rctx, cancel := context.WithTimeout(ctx, max(a.ttl/3, time.Second))
		resp, err := a.w.rc.Renew(rctx, a.ref)
		cancel()
		switch {
		case err == nil:
			a.extend(sent)
			if resp.CancelRequested {
				a.stop(reasonCancelled, false)
			}
			return sent, true
		case leaseGone(err):
			a.log.Warn("worker: lease gone before start", "error", err)
			return time.Time{}, false
		}
		a.log.Warn("worker: renew before start failed", "error", err)
		a.w.sleep(ctx, a.w.backoff(n))
	}
	a.log.Error("worker: cannot confirm the lease; not starting the job")
	return time.Time{}, false
}

// extend moves the trust window after a renew sent at sent succeeded, and
// tells the executor, whose job must be gone by the window's end.
func (a *attempt) extend(sent time.Time) {
	t := capAt(trustUntil(sent, a.ttl), a.deadline)
	a.mu.Lock()
	if t.After(a.trust) {
		a.trust = t
	}
	job, trust := a.job, a.trust
	a.mu.Unlock()
	if job != nil {
		job.Extend(trust)
	}
}

// trusted reports whether the worker may still act for the attempt.
func (a *attempt) trusted() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return !a.lost && a.w.clk.Now().Before(a.trust)
}

// system records a line of the worker's own in the attempt's log.
func (a *attempt) system(text string) { a.emit("system", text) }

// emit ships a line with every credential the job holds replaced by ***,
// before it leaves the machine.
func (a *attempt) emit(stream, text string) {
	if m := a.masker.Load(); m != nil {
		text = m.Mask(text)
	}
	a.logs.add(stream, text)
}

// stop stops the job for reason: SIGTERM then SIGKILL within the trust
// window, or SIGKILL at once when hard. Only the first reason is recorded.
func (a *attempt) stop(reason string, hard bool) {
	a.mu.Lock()
	first := a.reason == ""
	if first {
		a.reason = reason
		a.relinquish = reason == reasonShutdown
	}
	job := a.job
	grace := min(a.w.killGrace, a.trust.Sub(a.w.clk.Now()))
	lost := a.lost
	a.mu.Unlock()
	if first {
		a.log.Warn("worker: stopping job", "reason", reason)
		if !lost {
			a.system("jobplane: stopping job: " + reason)
		}
	}
	if job == nil || (!first && !hard) {
		return
	}
	if hard {
		grace = 0
	}
	job.Stop(grace)
}

// loseLease ends the attempt at once: the server says another runner may
// already hold it, so the job is killed and nothing more is sent.
func (a *attempt) loseLease(reason string, cause error) {
	a.mu.Lock()
	already := a.lost
	a.lost = true
	a.mu.Unlock()
	if already {
		return
	}
	a.log.Error("worker: lease lost; killing job, no result will be posted", "reason", reason, "error", cause)
	a.logs.drop()
	a.stop(reason, true)
}

// call runs one attempt-scoped request, retrying transient failures while
// the lease is trusted. It returns false when the lease is lost or the
// trust window ended, true otherwise (including a refusal that retrying
// cannot fix, which is logged).
func (a *attempt) call(ctx context.Context, what string, f func(context.Context) error) bool {
	for n := 0; ; n++ {
		a.mu.Lock()
		left := a.trust.Sub(a.w.clk.Now())
		lost := a.lost
		a.mu.Unlock()
		if lost || left <= 0 {
			return false
		}
		rctx, cancel := context.WithTimeout(ctx, left)
		err := f(rctx)
		cancel()
		switch {
		case err == nil:
			return true
		case leaseGone(err):
			a.loseLease(reasonLeaseLost, err)
			return false
		case !apiclient.Retryable(err):
			a.log.Error("worker: "+what+" refused", "error", err)
			return true
		}
		a.log.Warn("worker: "+what+" failed, retrying", "error", err)
		a.w.sleep(ctx, min(a.w.backoff(n), a.ttl/3))
	}
}

// renewLoop renews every third of the trust window from the last grant's send time, and retries
// failures quickly until the watchdog ends the trust window.
func (a *attempt) renewLoop(ctx context.Context, lastSent time.Time) {
	clk := a.w.clk
	next := lastSent.Add(renewEvery(a.ttl))
	retry := min(max(a.ttl/10, 200*time.Millisecond), 2*time.Second)
	for {
		wait := min(max(next.Sub(clk.Now()), 0), a.w.tick)
		t := time.NewTimer(wait)
		select {
		case <-a.finished:
			t.Stop()
			return
		case <-t.C:
		}
		if clk.Now().Before(next) {
			continue
		}
		a.mu.Lock()
		lost := a.lost
		a.mu.Unlock()
		if lost {
			return
		}
		sent := clk.Now()
		rctx, cancel := context.WithTimeout(ctx, max(a.ttl/3, time.Second))
		resp, err := a.w.rc.Renew(rctx, a.ref)
		cancel()
		switch {
		case err == nil:
			a.extend(sent)
			next = sent.Add(renewEvery(a.ttl))
			if resp.CancelRequested {
				a.stop(reasonCancelled, false)
			}
		case leaseGone(err):
			a.loseLease(reasonLeaseLost, err)
			return
		default:
			a.log.Warn("worker: renew failed", "error", err)
			next = clk.Now().Add(retry)
		}
	}
}

// watchdog enforces the trust window: SIGTERM shortly before it ends, and
// at its end SIGKILL and silence, whatever the renew requests are doing.
func (a *attempt) watchdog() {
	clk := a.w.clk
	grace := stopGrace(a.w.killGrace, a.ttl)
	for {
		a.mu.Lock()
		trust, lost := a.trust, a.lost
		a.mu.Unlock()
		if lost {
			return
		}
		reason := reasonNotRenewed
		if !a.deadline.IsZero() && !trust.Before(a.deadline) {
			reason = reasonTimedOut
		}
		now := clk.Now()
		if !now.Before(trust) {
			a.loseLease(reason, nil)
			return
		}
		if !now.Before(trust.Add(-grace)) {
			a.stop(reason, false)
		}
		t := time.NewTimer(min(trust.Sub(now), a.w.tick))
		select {
		case <-a.finished:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// workName turns an attempt ID into a safe directory name.
func workName(attemptID string) string {
	ok := attemptID != ""
	for _, c := range attemptID {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			ok = false
		}
	}
	if ok {
		return attemptID
	}
	return "h" + protocol.SHA256Hex([]byte(attemptID))[:32]
}

// execute prepares the attempt's directory and environment, runs the job
// through the executor to its end and uploads its artifacts. It returns the
// result to report.
func (a *attempt) execute() (outcome string, code int, summary string) {
	root := filepath.Join(a.w.cfg.StateDir, "work", workName(a.asg.AttemptID))
	defer os.RemoveAll(root)
	host := executor.Layout{
		Root:       root,
		Workspace:  filepath.Join(root, "workspace"),
		Artifacts:  filepath.Join(root, "artifacts"),
		ParamsFile: filepath.Join(root, "params.json"),
	}
	env, err := a.prepare(host)
	if err != nil {
		a.system("jobplane: cannot start job: " + err.Error())
		return "failed", -1, "setup: " + err.Error()
	}
	spec := &executor.Spec{
		Runner: a.w.rc.RunnerID, Run: a.asg.RunID, Attempt: a.asg.AttemptID, Job: a.asg.Job.Name,
		AttemptNumber: a.asg.AttemptNumber, Command: a.asg.Job.Command, Env: env, Layout: host,
		Output: func(stream, line string) { a.emit(stream, line) },
	}

	a.mu.Lock()
	if a.reason != "" {
		reason := a.reason
		a.mu.Unlock()
		return "failed", -1, reason
	}
	spec.Until = a.trust
	a.system(fmt.Sprintf("jobplane: starting attempt %d of job %s on runner %s: %s",
		a.asg.AttemptNumber, a.asg.Job.Name, a.w.rc.RunnerID, strings.Join(a.asg.Job.Command, " ")))
	job, err := a.w.exec.Start(context.Background(), spec)
	a.job = job
	a.mu.Unlock()
	if err != nil {
		a.system("jobplane: cannot start job: " + err.Error())
		return "failed", 127, "start: " + err.Error()
	}

	exit := job.Wait()
	code, summary = exit.Code, exit.Summary
	if len(a.asg.Artifacts) == 0 {
		// Nothing is left to do before the result: the last lines go with
		// it (closeKeepingLast), one call less, whatever the ticker does.
		// Uploads can take long; their lines are not held back.
		a.logs.hold()
	}
	a.system("jobplane: process ended: " + summary)
	a.artifacts = a.uploadArtifacts(host.Artifacts)
	a.mu.Lock()
	reason := a.reason
	a.mu.Unlock()
	switch {
	case reason != "":
		// A job stopped on purpose did not complete, even if it exited 0.
		return "failed", code, reason
	case code == 0:
		return "succeeded", 0, summary
	default:
		return "failed", code, summary
	}
}

// prepare makes the attempt's directory at host and returns the job's
// environment, with the paths as the executor's job sees them.
func (a *attempt) prepare(host executor.Layout) ([]string, error) {
	if err := os.RemoveAll(host.Root); err != nil {
		return nil, err
	}
	for _, d := range []string{host.Workspace, host.Artifacts} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	if err := a.fetchSource(host.Workspace); err != nil {
		return nil, err
	}
	if err := writeParamsFile(host.ParamsFile, a.asg.Params); err != nil {
		return nil, err
	}
	seen := a.w.exec.Layout(host)
	env, err := jobEnv(os.Getenv, a.w.cfg.Server, a.asg, seen.ParamsFile, seen.Artifacts)
	if err != nil {
		return nil, err
	}
	env = append(env, sourceEnv(a.asg)...)
	mask := []string{}
	if a.asg.RunToken != nil {
		mask = append(mask, a.asg.RunToken.Token)
	}
	if len(a.asg.Connectors) > 0 {
		if a.asg.RunToken == nil {
			return nil, fmt.Errorf("the job declares connectors %v but the assignment carries no run token", a.asg.Connectors)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		rc := &apiclient.Client{BaseURL: a.w.cfg.Server, Token: a.asg.RunToken.Token, HTTP: a.w.cfg.HTTP}
		conns, err := rc.RunConnectors(ctx)
		if err != nil {
			return nil, fmt.Errorf("fetch connector credentials: %w", err)
		}
		for k, v := range conns.Env {
			if !strings.HasPrefix(k, "JOBPLANE_CONNECTOR_") {
				return nil, fmt.Errorf("the server sent connector variable %q outside JOBPLANE_CONNECTOR_", k)
			}
			env = append(env, k+"="+v)
		}
		mask = append(mask, conns.Mask...)
	}
	a.masker.Store(creds.NewMasker(mask...))
	return env, nil
}

// finish reports the attempt: a result, or a relinquish on shutdown. Neither
// is sent once the lease is lost or the trust window has ended.
// The last log chunk, when there is one, goes with the result (or, before a
// relinquish, on its own).
func (a *attempt) finish(ctx context.Context, outcome string, code int, summary string, last *protocol.LogsRequest) {
	a.mu.Lock()
	relinquish, reason := a.relinquish, a.reason
	a.mu.Unlock()
	if !a.trusted() {
		a.log.Warn("worker: lease not held; no result posted", "outcome", outcome, "summary", summary)
		return
	}
	if relinquish {
		if last != nil && !a.call(ctx, "send logs", func(c context.Context) error { return a.w.rc.Logs(c, a.ref, *last) }) {
			return
		}
		if a.call(ctx, "relinquish", func(c context.Context) error { return a.w.rc.Relinquish(c, a.ref, reason) }) {
			a.log.Info("worker: attempt relinquished", "reason", reason)
		}
		return
	}
	req := protocol.ResultRequest{Outcome: outcome, ExitCode: code, Summary: summary, Artifacts: a.artifacts, RequestID: a.resultID, Logs: last}
	var state string
	ok := a.call(ctx, "post result", func(c context.Context) error {
		var err error
		state, err = a.w.results.send(c, a.ref, req)
		return err
	})
	if ok {
		a.log.Info("worker: attempt finished", "outcome", outcome, "exit_code", code, "summary", summary, "run_state", state)
	} else {
		a.log.Warn("worker: result not posted: lease not held", "outcome", outcome, "summary", summary)
	}
}
