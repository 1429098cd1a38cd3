package supervise

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jobplane/jobplane/internal/clock"
	"golang.org/x/sys/unix"
)

// killPoll is how often the supervisor looks for descendants again while
// it ends the job's tree.
const killPoll = 10 * time.Millisecond

// Main runs the supervisor with args (the flags, `--`, the command) and
// returns its exit code.
func Main(args []string, stderr io.Writer) int {
	o, command, err := parse(args, stderr)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return codeUsage
	}
	if o.Install != "" {
		if err := installSelf(o.Install); err != nil {
			fmt.Fprintln(stderr, "jobplane supervise:", err)
			return codeStartFailed
		}
		return 0
	}
	// The job's parent-death signal is tied to the thread that forks it:
	// this goroutine keeps its thread for the supervisor's whole life.
	runtime.LockOSThread()
	var status statusWriter
	if o.StatusFD >= 0 {
		syscall.CloseOnExec(o.StatusFD)
		status.f = os.NewFile(uintptr(o.StatusFD), "status")
	}
	fail := func(err error) int {
		status.write(Status{Event: "start_failed", Error: err.Error()})
		fmt.Fprintln(stderr, "jobplane supervise:", err)
		return codeStartFailed
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("become a child subreaper: %w", err))
	}
	var ctl *bufio.Reader
	if o.ControlFD >= 0 {
		syscall.CloseOnExec(o.ControlFD)
		ctl = bufio.NewReader(os.NewFile(uintptr(o.ControlFD), "control"))
	}
	env := os.Environ()
	if o.EnvFile != "" {
		if env, err = readEnvFile(o.EnvFile); err != nil {
			return fail(err)
		}
	}
	if o.Setup {
		setEnv, until, err := readSetup(ctl)
		if err != nil {
			return fail(err)
		}
		if setEnv != nil {
			env = setEnv
		}
		o.UntilMS = until
	}
	var cred *syscall.Credential
	if o.User != "" {
		if cred, err = parseUser(o.User); err != nil {
			return fail(err)
		}
	}
	// -lease-poll: the job starts only under a bound, the server's if it
	// answers, else -until-ms; an attempt the server says ended never
	// starts.
	var polled *leaseAnswer
	var lease leaseSource
	if o.LeasePoll {
		lease, err = leaseSourceOf(env)
		switch {
		case err != nil && o.UntilMS < 0:
			return fail(err)
		case err != nil:
			fmt.Fprintf(stderr, "jobplane supervise: %v; bound %d ms from now\n", err, o.UntilMS)
			o.LeasePoll = false
		}
	}
	if o.LeasePoll {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		a := lease.ask(ctx, &http.Client{})
		cancel()
		switch {
		case a.ended:
			return fail(fmt.Errorf("the attempt's lease is not held: %v", a.err))
		case a.refused:
			return fail(fmt.Errorf("the server refused to confirm the attempt's lease: %v", a.err))
		case a.err != nil && o.UntilMS < 0:
			return fail(fmt.Errorf("cannot confirm the attempt's lease: %v", a.err))
		case a.err != nil:
			fmt.Fprintf(stderr, "jobplane supervise: cannot confirm the attempt's lease yet (%v); bound %d ms from now\n", a.err, o.UntilMS)
		default:
			polled = &a
		}
	}
	params, pv, hasParams := takeParams(env)
	env = params
	if o.ParamsFile != "" && hasParams {
		if err := os.MkdirAll(filepath.Dir(o.ParamsFile), 0o755); err != nil {
			return fail(err)
		}
		if err := os.WriteFile(o.ParamsFile, []byte(pv), 0o644); err != nil {
			return fail(err)
		}
	}
	// The source and the artifacts go through the server with the run
	// token, like the lease.
	specs, _ := ParseArtifacts(o.Artifacts) // checked by parse
	if (o.SourceCommit != "" || len(specs) > 0) && lease.api == "" {
		if lease, err = leaseSourceOf(env); err != nil {
			return fail(fmt.Errorf("the source and artifacts: %v", err))
		}
	}
	for _, d := range []string{o.Workspace, o.ArtifactsDir} {
		if d != "" {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return fail(err)
			}
		}
	}
	if o.SourceCommit != "" {
		ctx, cancel := context.WithDeadline(context.Background(), fileDeadline(polled, o.UntilMS))
		err := lease.fetchSource(ctx, o.Workspace, o.SourceCommit, stderr)
		cancel()
		if err != nil {
			return fail(err)
		}
	}
	// The command may come with the source.
	path, err := LookPath(command[0], env, o.Dir)
	if err != nil {
		return fail(err)
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return fail(err)
	}
	ppid := os.Getppid()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	pid, err := syscall.ForkExec(path, command, &syscall.ProcAttr{
		Dir: o.Dir, Env: env, Files: []uintptr{devnull.Fd(), 1, 2},
		Sys: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred},
	})
	devnull.Close()
	if err != nil {
		return fail(fmt.Errorf("start %s: %w", command[0], err))
	}
	status.write(Status{Event: "started", PID: pid})

	s := &supervisor{pgid: pid}
	leader := make(chan syscall.WaitStatus, 1)
	empty := make(chan struct{})
	go reap(pid, leader, empty)
	ctlc := make(chan control, 1)
	if ctl != nil {
		go readControl(ctl, ctlc)
	}

	never := make(<-chan time.Time)
	bound, kill := never, never
	var boundAt time.Time
	if o.UntilMS >= 0 {
		boundAt = wall.Now().Add(time.Duration(o.UntilMS) * time.Millisecond)
	}
	if polled != nil {
		boundAt = polled.until
	}
	if !boundAt.IsZero() {
		t := time.NewTimer(time.Until(boundAt))
		defer t.Stop()
		bound = t.C
	}
	var leasec chan leaseAnswer
	if o.LeasePoll {
		leasec = make(chan leaseAnswer, 1)
		stopPoll := make(chan struct{})
		defer close(stopPoll)
		var ttl time.Duration
		if polled != nil {
			ttl = polled.ttl
		}
		go lease.pollLease(time.Duration(o.LeasePollMS)*time.Millisecond, ttl, leasec, stopPoll)
	}
	var killAt time.Time
	var reason string
	killing := false
	killNow := func(why string) {
		if reason == "" || reason == ReasonStopped {
			reason = why
		}
		s.signalTree(syscall.SIGKILL)
		if !killing {
			// Keep killing until the leader is reaped: a process caught
			// between the scan and its fork's return is found next time.
			killing = true
			kill = time.NewTicker(killPoll).C
		}
	}
	var ws syscall.WaitStatus
loop:
	for {
		select {
		case ws = <-leader:
			break loop
		case c := <-ctlc:
			switch c.verb {
			case "":
				ctlc = nil
				killNow(ReasonWorkerGone)
			case "until":
				at := wall.Now().Add(time.Duration(c.ms) * time.Millisecond)
				if !boundAt.IsZero() && at.After(boundAt) {
					boundAt = at
					bound = time.After(time.Until(boundAt))
				}
			case "stop":
				if reason == "" {
					reason = ReasonStopped
				}
				at := wall.Now().Add(time.Duration(c.ms) * time.Millisecond)
				switch {
				case killing:
				case c.ms == 0:
					killNow(ReasonStopped)
				case killAt.IsZero() || at.Before(killAt):
					s.signalTree(syscall.SIGTERM)
					killAt = at
					kill = time.After(time.Until(killAt))
				}
			}
		case a := <-leasec:
			switch {
			case a.ended:
				if !killing {
					fmt.Fprintf(stderr, "jobplane supervise: the attempt no longer holds its lease (%v); killing the job\n", a.err)
				}
				killNow(ReasonLeaseEnded)
			case a.err == nil && a.until.After(boundAt):
				boundAt = a.until
				bound = time.After(time.Until(boundAt))
			}
		case <-bound:
			bound = never
			if o.LeasePoll && !killing {
				fmt.Fprintln(stderr, "jobplane supervise: no later lease expiry confirmed in time; killing the job")
			}
			killNow(ReasonLeaseBound)
		case <-kill:
			if killing {
				s.signalTree(syscall.SIGKILL)
			} else {
				killNow(ReasonStopped)
			}
		case sig := <-sigs:
			switch sig {
			case syscall.SIGHUP:
				if os.Getppid() != ppid {
					killNow(ReasonWorkerGone)
				}
			default:
				if reason == "" {
					reason = ReasonStopped
				}
				s.signalTree(syscall.SIGTERM)
			}
		}
	}
	// The leader is gone; nothing it started may stay.
	s.leaderGone = true
	for done := false; !done; {
		s.signalTree(syscall.SIGKILL)
		select {
		case <-empty:
			done = true
		case <-time.After(killPoll):
		}
	}
	code, summary := describe(ws)
	if reason == ReasonLeaseBound {
		summary += " (the supervisor's lease bound passed)"
	}
	// A job that ended of itself has its artifacts uploaded, as its
	// worker would; a stopped or killed one has none.
	stored := []string{}
	if reason == "" && len(specs) > 0 {
		deadline := boundAt
		if deadline.IsZero() {
			deadline = wall.Now().Add(fileWait)
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		stored = lease.uploadArtifacts(ctx, o.ArtifactsDir, specs, stderr)
		cancel()
	}
	if o.Report != "" {
		if err := writeReport(o.Report, Report{Artifacts: stored}); err != nil {
			fmt.Fprintln(stderr, "jobplane supervise: report:", err)
		}
	}
	status.write(Status{Event: "exit", Code: code, Summary: summary, Reason: reason})
	return code
}

// supervisor ends the job's process tree.
type supervisor struct {
	pgid       int
	leaderGone bool // the group's ID may be reused: signal descendants only
}

// signalTree sends sig to the job's process group and to every descendant
// of the supervisor.
func (s *supervisor) signalTree(sig syscall.Signal) {
	if !s.leaderGone {
		_ = syscall.Kill(-s.pgid, sig)
	}
	for _, pid := range descendants(os.Getpid()) {
		_ = syscall.Kill(pid, sig)
	}
}

// reap waits for every child: it sends the leader's status to leader and
// closes empty when no child is left after the leader ended.
func reap(leaderPID int, leader chan<- syscall.WaitStatus, empty chan<- struct{}) {
	leaderDone := false
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.ECHILD:
			if leaderDone {
				close(empty)
				return
			}
			// Only before the leader's status is in: cannot happen, since the
			// leader is a child until reaped.
			time.Sleep(killPoll)
			continue
		case err != nil:
			time.Sleep(killPoll)
			continue
		}
		if pid == leaderPID {
			leaderDone = true
			leader <- ws
		}
	}
}

// descendants lists the live (not zombie) descendants of root from /proc.
func descendants(root int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 || f[0] == "Z" {
			continue
		}
		ppid, err := strconv.Atoi(f[1])
		if err != nil {
			continue
		}
		children[ppid] = append(children[ppid], pid)
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// describe turns a wait status into an exit code and summary.
func describe(ws syscall.WaitStatus) (int, string) {
	if ws.Signaled() {
		return 128 + int(ws.Signal()), "killed by signal " + unix.SignalName(ws.Signal())
	}
	return ws.ExitStatus(), fmt.Sprintf("exit status %d", ws.ExitStatus())
}

// parseUser parses UID:GID.
func parseUser(s string) (*syscall.Credential, error) {
	u, g, ok := strings.Cut(s, ":")
	uid, err1 := strconv.ParseUint(u, 10, 32)
	gid, err2 := strconv.ParseUint(g, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return nil, fmt.Errorf("-user %q is not UID:GID", s)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// LookPath finds name as exec.LookPath would with the job's environment
// env; a name with a slash is taken relative to dir.
func LookPath(name string, env []string, dir string) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) && dir != "" {
			p = filepath.Join(dir, p)
		}
		if err := executable(p); err != nil {
			return "", fmt.Errorf("start %s: %w", name, err)
		}
		return p, nil
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, name)
		if !filepath.IsAbs(p) && dir != "" {
			p = filepath.Join(dir, p)
		}
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("start %s: %w", name, exec.ErrNotFound)
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}

// wall is the real clock: the supervisor is its own process and bounds real processes in real time
var wall clock.Clock = clock.Real{}

// installSelf copies the running binary to path (the Kubernetes executor's
// init container puts the supervisor into the pod this way).
func installSelf(path string) error {
	src, err := os.Open("/proc/self/exe")
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// fileWait bounds fetching the source or uploading artifacts when no lease
// bound is known.
const fileWait = 10 * time.Minute

// fileDeadline is when fetching the source must be done: the lease bound
// the server confirmed, else -until-ms, else fileWait.
func fileDeadline(polled *leaseAnswer, untilMS int64) time.Time {
	switch {
	case polled != nil:
		return polled.until
	case untilMS >= 0:
		return wall.Now().Add(time.Duration(untilMS) * time.Millisecond)
	}
	return wall.Now().Add(fileWait)
}
