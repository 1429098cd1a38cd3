package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/protocol"
)

// The idle measurement with IdleProcs: the waiting runners live in child
// processes, so that this process is the server alone and its memory is the
// server's, and so that 10,000 runners fit: one process may hold 20,000
// descriptors here, and a waiting runner costs one socket at each end.
//
// A child is this program again (Config.IdleCommand) with the parameters in
// its environment; it registers its runners, has each wait in a long poll,
// works whatever it is handed (renew, one log chunk, success), and reports
// on stdout, one line per event:
//
//	claimed RUN_ID UNIX_NANOS
//	done RUN_ID
//
// It stops when its stdin closes. Both processes read the same wall clock,
// so request→claimed is measured across them.

// Environment of a child: the server's URL, an admin token to make
// registration tokens with, and how many runners to register.
const (
	envIdleURL     = "JOBPLANE_BENCH_IDLE_URL"
	envIdleToken   = "JOBPLANE_BENCH_IDLE_TOKEN"
	envIdleRunners = "JOBPLANE_BENCH_IDLE_RUNNERS"
)

// IsIdleChild reports whether this process was started as an idle child.
func IsIdleChild() bool { return os.Getenv(envIdleURL) != "" }

// IdleChild is the body of an idle child process: it returns when stdin
// closes or ctx ends.
func IdleChild(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	n, err := strconv.Atoi(os.Getenv(envIdleRunners))
	if err != nil || n < 1 {
		return fmt.Errorf("%s: want a positive number of runners, got %q", envIdleRunners, os.Getenv(envIdleRunners))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		cancel()
	}()
	hc := &http.Client{Timeout: apiclient.DefaultTimeout, Transport: &http.Transport{
		Proxy: nil, MaxIdleConns: n + 8, MaxIdleConnsPerHost: n + 8, IdleConnTimeout: 90 * time.Second,
	}}
	defer hc.CloseIdleConnections()
	url := os.Getenv(envIdleURL)
	e := &Env{URL: url, HTTP: hc, Admin: &apiclient.Client{BaseURL: url, Token: os.Getenv(envIdleToken), HTTP: hc}}
	runners, err := e.registerParallel(ctx, n, 8)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(stdout, format+"\n", args...)
	}
	g, gctx := newGroup(ctx)
	for _, r := range runners {
		g.Go(func() error {
			for gctx.Err() == nil {
				asg, err := r.Client.Claim(gctx, IdleWait, "")
				if gctx.Err() != nil {
					return nil
				}
				if err != nil {
					return fmt.Errorf("runner %s: idle claim: %w", r.ID, err)
				}
				if asg == nil {
					continue
				}
				at := clock.Real{}.Now()
				say("claimed %s %d", asg.RunID, at.UnixNano())
				if err := r.finish(gctx, asg, at); err != nil {
					return err
				}
				say("done %s", asg.RunID)
			}
			return nil
		})
	}
	return g.Wait()
}

// child is one idle child process as the parent sees it.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr bytes.Buffer
	exited chan error
}

// childEvent is one line of a child: a claim (At set) or a finished run.
// One channel carries both, so that a child's claim is read before its
// finish.
type childEvent struct {
	Run  string
	At   time.Time
	Done bool
}

// RunIdleProcs is RunIdle with the n runners spread over `procs` child
// processes started with command (argv).
func (e *Env) RunIdleProcs(ctx context.Context, n, procs, runs int, command []string) (out *Idle, err error) {
	if len(command) == 0 {
		return nil, errors.New("idle child processes need a command")
	}
	procs = min(procs, n)
	out = &Idle{Runners: n, Procs: procs, BaselineRSSMiB: rssMiB()}
	events := make(chan childEvent, 2*runs+procs)
	var children []*child
	defer func() {
		for _, c := range children {
			_ = c.stdin.Close()
		}
		for _, c := range children {
			select {
			case cerr := <-c.exited:
				if cerr != nil && err == nil {
					err = fmt.Errorf("idle child %d: %w: %s", c.cmd.Process.Pid, cerr, strings.TrimSpace(c.stderr.String()))
				}
			case <-time.After(30 * time.Second):
				_ = c.cmd.Process.Kill()
			}
		}
	}()
	for i := range procs {
		per := n / procs
		if i < n%procs {
			per++
		}
		cmd := exec.CommandContext(ctx, command[0], command[1:]...)
		cmd.Env = append(os.Environ(), envIdleURL+"="+e.URL, envIdleToken+"="+e.Admin.Token, envIdleRunners+"="+strconv.Itoa(per))
		c := &child{cmd: cmd, exited: make(chan error, 1)}
		cmd.Stderr = &c.stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if c.stdin, err = cmd.StdinPipe(); err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start idle child: %w", err)
		}
		children = append(children, c)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				switch {
				case len(f) == 3 && f[0] == "claimed":
					ns, _ := strconv.ParseInt(f[2], 10, 64)
					events <- childEvent{Run: f[1], At: time.Unix(0, ns)}
				case len(f) == 2 && f[0] == "done":
					events <- childEvent{Run: f[1], Done: true}
				}
			}
			c.exited <- cmd.Wait()
		}()
	}
	// Every child runner must wait on the server before anything is read.
	if err := e.awaitWaiting(ctx, n); err != nil {
		return nil, err
	}
	time.Sleep(2 * time.Second)
	cpu0, t0 := processCPU(), clock.Real{}.Now()
	time.Sleep(5 * time.Second)
	out.IdleCPU = float64(processCPU()-cpu0) / float64(clock.Real{}.Now().Sub(t0))
	out.Waiting = e.Server.Control().ClaimsWaiting()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	out.HeapMiB, out.StackMiB, out.SysMiB = mib(ms.HeapInuse), mib(ms.StackInuse), mib(ms.Sys)
	out.RSSMiB = rssMiB()
	for _, c := range children {
		out.RunnersRSSMiB += pidRSSMiB(c.cmd.Process.Pid)
	}

	// Dispatch: one run at a time, handed to whichever child runner heads
	// the claim line.
	requested := map[string]time.Time{}
	claimedAt := map[string]time.Time{}
	claims := map[string]int{}
	finished := map[string]bool{}
	start := clock.Real{}.Now()
	var last time.Time
	for range runs {
		t0 := clock.Real{}.Now()
		run, err := e.Admin.CreateRun(ctx, &protocol.RunRequest{Job: Job, Channel: Channel})
		if err != nil {
			return nil, fmt.Errorf("request run: %w", err)
		}
		requested[run.ID] = t0
		for !finished[run.ID] {
			select {
			case ev := <-events:
				if ev.Done {
					finished[ev.Run] = true
					last = clock.Real{}.Now()
				} else {
					claims[ev.Run]++
					claimedAt[ev.Run] = ev.At
				}
			case <-time.After(time.Minute):
				return nil, fmt.Errorf("run %s: not finished a minute after its request", run.ID)
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	var r2c []time.Duration
	want := map[string]struct{}{}
	for id, t := range requested {
		want[id] = struct{}{}
		if c, ok := claimedAt[id]; ok {
			r2c = append(r2c, max(c.Sub(t), 0))
		}
	}
	out.Dispatch, out.DispatchLatency = newPhase(runs, last.Sub(start)), Summarize(r2c)
	v, err := e.Verify(ctx, want, claims)
	if err != nil {
		return nil, err
	}
	return out, v.Err()
}

// finish works a claimed attempt as the lifecycle phase does, which is what
// `jobplane worker` does for a job with no output but one line: one log
// chunk and a successful result, the chunk carried by the result as the
// worker sends a job's last output (or on its own with LogsApart); with
// Renew, one renewal first.
func (r *Runner) finish(ctx context.Context, asg *protocol.Assignment, at time.Time) error {
	ref := apiclient.AttemptRef{RunID: asg.RunID, AttemptID: asg.AttemptID, LeaseToken: asg.Lease.Token}
	if r.Renew {
		if _, err := r.Client.Renew(ctx, ref); err != nil {
			return fmt.Errorf("runner %s: renew run %s: %w", r.ID, asg.RunID, err)
		}
	}
	chunk := &protocol.LogsRequest{Seq: 0, Lines: []protocol.LogLine{{At: at, Stream: "stdout", Text: "bench"}}}
	if r.LogsApart {
		if err := r.Client.Logs(ctx, ref, *chunk); err != nil {
			return fmt.Errorf("runner %s: logs of run %s: %w", r.ID, asg.RunID, err)
		}
		chunk = nil
	}
	res, err := r.Client.Result(ctx, ref, protocol.ResultRequest{Outcome: "succeeded", Summary: "bench", Logs: chunk})
	if err != nil {
		return fmt.Errorf("runner %s: result of run %s: %w", r.ID, asg.RunID, err)
	}
	if res.RunState != "succeeded" {
		return fmt.Errorf("runner %s: run %s is %s after its result, want succeeded", r.ID, asg.RunID, res.RunState)
	}
	return nil
}

// finishBatch works attempts claimed together as finish works one, and
// reports their results in one call (POST /v1/runner/results); with logs,
// each result carries its log chunk (renewals and chunks apart, when
// asked for, are still a call per attempt).
func (r *Runner) finishBatch(ctx context.Context, asgs []*protocol.Assignment, at time.Time, logs bool) error {
	items := make([]apiclient.ResultItem, len(asgs))
	for i, asg := range asgs {
		ref := apiclient.AttemptRef{RunID: asg.RunID, AttemptID: asg.AttemptID, LeaseToken: asg.Lease.Token}
		if r.Renew {
			if _, err := r.Client.Renew(ctx, ref); err != nil {
				return fmt.Errorf("runner %s: renew run %s: %w", r.ID, asg.RunID, err)
			}
		}
		items[i] = apiclient.ResultItem{Ref: ref, Result: protocol.ResultRequest{Outcome: "succeeded", Summary: "bench"}}
		if !logs {
			continue
		}
		chunk := &protocol.LogsRequest{Seq: 0, Lines: []protocol.LogLine{{At: at, Stream: "stdout", Text: "bench"}}}
		if r.LogsApart {
			if err := r.Client.Logs(ctx, ref, *chunk); err != nil {
				return fmt.Errorf("runner %s: logs of run %s: %w", r.ID, asg.RunID, err)
			}
			continue
		}
		items[i].Result.Logs = chunk
	}
	answers, err := r.Client.Results(ctx, items)
	if err != nil {
		return fmt.Errorf("runner %s: results of %d runs: %w", r.ID, len(items), err)
	}
	for i, a := range answers {
		if a.Err != nil {
			return fmt.Errorf("runner %s: result of run %s: %w", r.ID, asgs[i].RunID, a.Err)
		}
		if a.RunState != "succeeded" {
			return fmt.Errorf("runner %s: run %s is %s after its result, want succeeded", r.ID, asgs[i].RunID, a.RunState)
		}
	}
	return nil
}

// pidRSSMiB reads another process's VmRSS (Linux); 0 elsewhere.
func pidRSSMiB(pid int) float64 {
	return statusRSSMiB("/proc/" + strconv.Itoa(pid) + "/status")
}
