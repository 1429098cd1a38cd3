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
	"unicode/utf8"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/executor"
	"github.com/jobplane/jobplane/internal/id"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/redact"
	"github.com/jobplane/jobplane/internal/tracing"
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
	// traceparent puts the job in its run's trace (TRACEPARENT).
	traceparent string
	logs        *shipper
	finished    chan struct{}

	mu         sync.Mutex
	trust      time.Time    // stop acting at this instant unless renewed
	lost       bool         // lease gone or trust ended: send nothing more
	exited     bool         // the job has ended; its result is being reported
	reason     string       // first stop reason
	relinquish bool         // give the attempt back instead of a result
	job        executor.Job // nil until started
	// startCancel aborts a start under way (an image pull, say) when the
	// job is stopped before it runs; nil outside a start.
	startCancel context.CancelFunc
	artifacts   []string // stored artifact IDs, for the result
	// masker hides the credentials the job holds; atomic because lines are
	// emitted with and without mu held.
	masker atomic.Pointer[redact.Masker]
	// pending holds, per stream, the end of a long line not yet shipped:
	// it may begin a credential that the next piece completes.
	pendMu  sync.Mutex
	pending map[string]string
}

// withTraceparent sets the job's TRACEPARENT (W3C trace context), in place
// of any the job's definition set: the job's spans belong in its run's
// trace.
func withTraceparent(env []string, tp string) []string {
	out := env[:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "TRACEPARENT=") {
			out = append(out, kv)
		}
	}
	if tp != "" {
		out = append(out, "TRACEPARENT="+tp)
	}
	return out
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
func (w *Worker) runAttempt(ctx context.Context, asg *protocol.Assignment, claimSent time.Time) (outcome string) {
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
	// They run in the run's trace, which the job joins through TRACEPARENT.
	actx, endSpan := w.tracing.StartAttempt(context.WithoutCancel(ctx), asg.RunID, asg.AttemptID, asg.Job.Name)
	a.traceparent = tracing.Traceparent(actx)
	a.logs = newShipper(w.clk.Now, w.flushEvery, func(req protocol.LogsRequest) bool {
		return a.call(actx, "send logs", func(c context.Context) error { return w.rc.Logs(c, a.ref, req) })
	})
	unhook := context.AfterFunc(ctx, func() { a.stop(reasonShutdown, false) })
	defer unhook()

	lastSent, ok := a.freshen(actx, claimSent)
	if !ok {
		a.logs.drop()
		a.logs.close()
		return ""
	}
	var keepers sync.WaitGroup
	keepers.Go(func() { a.renewLoop(actx, lastSent) })
	keepers.Go(a.watchdog)

	outcome, code, summary := a.execute()
	// A stream that ended in the middle of a long line leaves its end.
	for _, stream := range []string{"stdout", "stderr"} {
		a.pendMu.Lock()
		open := a.pending[stream] != ""
		a.pendMu.Unlock()
		if open {
			a.emitPiece(stream, "", false)
		}
	}
	a.mu.Lock()
	a.exited = true
	a.mu.Unlock()
	a.finish(actx, outcome, code, summary, a.logs.closeKeepingLast())
	endSpan(outcome)
	close(a.finished)
	keepers.Wait()
	return outcome
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

// emitPiece takes the job's output as the executor cuts it: a line longer
// than executor.MaxLineBytes comes in pieces (more: the line goes on). The
// pieces of one line are masked as one text before they are cut again, so
// a credential that straddles the executor's cut is masked whole rather
// than shipped in two unmasked halves: what is shipped of a long line stops
// short of any credential that could go on in the next piece.
func (a *attempt) emitPiece(stream, piece string, more bool) {
	a.pendMu.Lock()
	defer a.pendMu.Unlock()
	if a.pending == nil {
		a.pending = map[string]string{}
	}
	buf := a.pending[stream] + piece
	m := a.masker.Load()
	cut := len(buf)
	if more {
		cut = m.SafeCut(buf, len(buf)-max(m.Longest()-1, 0))
	}
	a.pending[stream] = buf[cut:]
	if cut == 0 {
		return
	}
	text := buf[:cut]
	if m != nil {
		text = m.Mask(text)
	}
	for len(text) > executor.MaxLineBytes {
		n := executor.MaxLineBytes
		for n > 0 && !utf8.RuneStart(text[n]) {
			n--
		}
		a.logs.add(stream, text[:n])
		text = text[n:]
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
		// A cancel or a shutdown is someone's decision, not a fault.
		level := slog.LevelWarn
		if reason == reasonCancelled || reason == reasonShutdown {
			level = slog.LevelInfo
		}
		a.log.Log(context.Background(), level, "worker: stopping job", "reason", reason)
		if !lost {
			a.system("jobplane: stopping job: " + reason)
		}
	}
	if job == nil {
		a.mu.Lock()
		cancelStart := a.startCancel
		a.mu.Unlock()
		if cancelStart != nil {
			cancelStart()
		}
		return
	}
	if !first && !hard {
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
	if a.exited && !a.lost {
		// The job has ended and its result is on its way: a renewal
		// answered stale most likely raced that result, which ended the
		// attempt. Nothing is left to kill; the result's own answer says
		// whether it was taken (finish logs it either way).
		a.mu.Unlock()
		a.log.Debug("worker: renewal refused after the job ended", "reason", reason, "error", cause)
		return
	}
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
	own := a.w.exec.Capabilities().OwnFiles
	env, err := a.prepare(host, !own)
	if err != nil {
		a.system("jobplane: cannot start job: " + err.Error())
		return "failed", -1, "setup: " + err.Error()
	}
	spec := &executor.Spec{
		Runner: a.w.rc.RunnerID, Run: a.asg.RunID, Attempt: a.asg.AttemptID, Job: a.asg.Job.Name,
		AttemptNumber: a.asg.AttemptNumber, Command: a.asg.Job.Command, Env: env, Layout: host,
		Output:      func(stream, line string) { a.emit(stream, line) },
		OutputPiece: a.emitPiece,
		Tenant:      a.asg.Tenant, Image: a.asg.Job.Image, Network: a.asg.Job.Network, Workdir: a.asg.Job.Workdir,
	}
	if r := a.asg.Job.Resources; r != nil {
		spec.Resources = executor.Resources{MilliCPU: r.CPUMillis, MemoryBytes: r.MemoryBytes}
	}
	if own {
		// The executor's side fetches and uploads with the run token.
		if src := a.asg.Source; src != nil {
			spec.Source = &executor.Source{Repo: src.Repo, Commit: src.Commit}
		}
		for _, d := range a.asg.Artifacts {
			spec.Artifacts = append(spec.Artifacts, executor.Artifact{Name: d.Name, Role: d.Role, MaxBytes: d.MaxBytes})
		}
	}

	a.mu.Lock()
	if a.reason != "" {
		reason := a.reason
		a.mu.Unlock()
		return "failed", -1, reason
	}
	spec.Until = a.trust
	spec.Renewed = func() time.Time {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.trust
	}
	// The start runs without the attempt's lock: it can take long (an
	// image pull), and renewals, the watchdog and stops need the lock
	// meanwhile. A stop during the start cancels it; one that lands as
	// the start returns is applied below.
	startCtx, cancelStart := context.WithCancel(context.Background())
	defer cancelStart()
	a.startCancel = cancelStart
	a.mu.Unlock()
	a.system(fmt.Sprintf("jobplane: starting attempt %d of job %s on runner %s: %s",
		a.asg.AttemptNumber, a.asg.Job.Name, a.w.rc.RunnerID, strings.Join(a.asg.Job.Command, " ")))
	job, err := a.w.exec.Start(startCtx, spec)
	a.mu.Lock()
	a.startCancel = nil
	a.job = job
	trust, reason, lost := a.trust, a.reason, a.lost
	grace := min(a.w.killGrace, trust.Sub(a.w.clk.Now()))
	a.mu.Unlock()
	if err != nil {
		a.system("jobplane: cannot start job: " + err.Error())
		if reason != "" {
			return "failed", 127, reason
		}
		return "failed", 127, "start: " + err.Error()
	}
	// Renewals made while the start was under way, after the executor
	// read the bound.
	job.Extend(trust)
	switch {
	case lost:
		job.Stop(0)
	case reason != "":
		job.Stop(grace)
	}

	exit := job.Wait()
	code, summary = exit.Code, exit.Summary
	if len(a.asg.Artifacts) == 0 || own {
		// Nothing is left to do before the result: the last lines go with
		// it (closeKeepingLast), one call less, whatever the ticker does.
		// Uploads can take long; their lines are not held back.
		a.logs.hold()
	}
	a.system("jobplane: process ended: " + summary)
	a.mu.Lock()
	reason = a.reason
	a.mu.Unlock()
	switch {
	case !own:
		a.artifacts = a.uploadArtifacts(host.Artifacts)
	case reason == "" && exit.Artifacts != nil:
		a.artifacts = exit.Artifacts
	default:
		a.artifacts = []string{}
	}
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
// environment, with the paths as the executor's job sees them. With
// fetch, the job's source is unpacked into the workspace.
func (a *attempt) prepare(host executor.Layout, fetch bool) ([]string, error) {
	if err := os.RemoveAll(host.Root); err != nil {
		return nil, err
	}
	for _, d := range []string{host.Workspace, host.Artifacts} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	if fetch {
		if err := a.fetchSource(host.Workspace); err != nil {
			return nil, err
		}
	}
	if err := writeParamsFile(host.ParamsFile, a.asg.Params); err != nil {
		return nil, err
	}
	seen := a.w.exec.Layout(host)
	env, err := jobEnv(os.Getenv, a.w.rc.Current().URL, a.asg, seen.ParamsFile, seen.Artifacts)
	if err != nil {
		return nil, err
	}
	env = append(env, sourceEnv(a.asg)...)
	env = withTraceparent(env, a.traceparent)
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
		cur := a.w.rc.Current()
		rc := &apiclient.Client{BaseURL: cur.URL, Token: a.asg.RunToken.Token, HTTP: cur.HTTP}
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
	a.masker.Store(redact.NewMasker(mask...))
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
