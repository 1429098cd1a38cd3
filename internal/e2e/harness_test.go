package e2e

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/gitsync"
	"github.com/jobplane/jobplane/internal/openapi/openapitest"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// binary is the jobplane binary built by TestMain.
var binary string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// Jobs of some tests run this binary as a small client of a protected
	// resource (see fencedIncrement); it is not a test run then.
	if role := os.Getenv("E2E_HELPER"); role != "" {
		return helperMain(role)
	}
	flag.Parse()
	dir, err := os.MkdirTemp("", "jobplane-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: find module root:", err)
		return 1
	}
	if b := os.Getenv("JOBPLANE_E2E_BINARY"); b != "" {
		// Another build (an older release, for before/after figures).
		binary = b
		return m.Run()
	}
	binary = filepath.Join(dir, "jobplane")
	start := time.Now()
	// Built without -race on purpose: the race detector would slow every
	// server and worker process, and the tests check behaviour, not races.
	build := exec.Command("go", "build", "-o", binary, "./cmd/jobplane")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: go build ./cmd/jobplane: %v\n%s", err, out)
		return 1
	}
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "e2e: built %s in %s\n", binary, time.Since(start).Round(time.Millisecond))
	}
	return m.Run()
}

// moduleRoot is the directory of go.mod, from `go env GOMOD`, else ../..
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err == nil {
		if p := strings.TrimSpace(string(out)); p != "" && p != os.DevNull {
			return filepath.Dir(p), nil
		}
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return "", err
	}
	return root, nil
}

// testTimeout bounds every single wait of a test; no test may hang.
const testTimeout = 60 * time.Second

// eventually polls cond every 50 ms until it reports done or within
// elapses, then fails the test with what cond last said.
func eventually(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	last := ""
	for {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		if time.Now().After(deadline) {
			require.FailNowf(t, "timed out", "after %s waiting for %s; last: %s", within, what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// ---------------------------------------------------------------------------
// Child processes

// proc is one child process of the test; its stdout and stderr go to a file.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error // valid after done
}

// startProc starts the jobplane binary with args and extra environment. It
// is killed at cleanup, and its output is logged if the test failed.
func startProc(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), name+"-*.log")
	require.NoError(t, err)
	cmd := exec.Command(binary, args...)
	cmd.Dir = filepath.Dir(f.Name()) // never pick up ./.jobplane of the package dir
	cmd.Env = append(cleanEnv(), env...)
	cmd.Stdout = f
	cmd.Stderr = f
	require.NoError(t, cmd.Start(), "start %s", name)
	p := &proc{name: name, cmd: cmd, logPath: f.Name(), done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			b, _ := os.ReadFile(p.logPath)
			t.Logf("----- output of %s (pid %d, %s) -----\n%s", p.name, cmd.Process.Pid, strings.Join(args, " "), b)
		}
	})
	return p
}

// cleanEnv is the test's environment without JOBPLANE_* variables, so that a
// developer's settings do not leak into the processes.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "JOBPLANE_") {
			env = append(env, kv)
		}
	}
	return env
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL and waits for the process to be reaped.
func (p *proc) kill() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop sends SIGTERM and waits up to within for a clean exit; it returns
// the exit error (nil for status 0).
func (p *proc) stop(t *testing.T, within time.Duration) error {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(within):
		p.kill()
		require.FailNowf(t, "process did not stop", "%s did not exit within %s of SIGTERM", p.name, within)
		return nil
	}
}

func (p *proc) output() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// runCLI runs one CLI command to its end (bounded) and returns stdout,
// stderr and the exit code.
func runCLI(t *testing.T, srv *server, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(cleanEnv(), "JOBPLANE_SERVER="+srv.url, "JOBPLANE_TOKEN="+srv.adminToken)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "jobplane %s did not finish in time; stderr:\n%s", strings.Join(args, " "), e.String())
	code = 0
	if err != nil {
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "jobplane %s", strings.Join(args, " "))
		code = ee.ExitCode()
	}
	return o.String(), e.String(), code
}

// ---------------------------------------------------------------------------
// Databases

type backend struct {
	name string
	// dsn returns the --db value of a fresh, empty database for the test.
	dsn func(t *testing.T) string
}

var backends = []backend{
	{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "jobplane.db") }},
	// testdb skips the test when no PostgreSQL answers, or fails it when
	// JOBPLANE_TEST_REQUIRE_POSTGRES=1.
	// The server connects as the production app role (MT3).
	{"postgres", func(t *testing.T) string { return testdb.PostgresAppDSN(t) }},
}

// eachBackend runs fn as parallel subtests, one per database.
func eachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			fn(t, b)
		})
	}
}

// ---------------------------------------------------------------------------
// Definitions

// env is one test's world: a definitions repository and a directory where
// jobs record their effects.
type env struct {
	dir  string // effects and markers
	defs string // the definitions repository
}

// job describes a job definition in the temp repository.
type job struct {
	name        string
	script      string // run with sh -c
	leaseTTL    string // e.g. "2s"; empty for the default
	maxAttempts int
	backoff     string
	extra       string // more top-level YAML, appended as is
	timeout     string // run.timeout; empty for 2m
	runExtra    string // more YAML within run, appended as is ("  image: …\n")
}

func (j job) yaml() string {
	script, _ := json.Marshal(j.script) // a JSON string is a YAML double-quoted scalar
	var b strings.Builder
	timeout := j.timeout
	if timeout == "" {
		timeout = "2m"
	}
	fmt.Fprintf(&b, "name: %s\ndescription: e2e test job\nowners: [operators]\nrun:\n  command: [sh, -c, %s]\n  timeout: %s\n", j.name, script, timeout)
	b.WriteString(j.runExtra)
	if j.leaseTTL != "" {
		fmt.Fprintf(&b, "  lease_ttl: %s\n", j.leaseTTL)
	}
	n := j.maxAttempts
	if n == 0 {
		n = 1
	}
	if j.backoff != "" {
		fmt.Fprintf(&b, "retries: {max_attempts: %d, backoff: %s}\n", n, j.backoff)
	} else {
		fmt.Fprintf(&b, "retries: {max_attempts: %d}\n", n)
	}
	b.WriteString(j.extra)
	return b.String()
}

// newEnv makes a definitions repository holding jobs (made by mkJobs from
// the effects directory) and a policy that lets anyone run everything. A
// cleanup kills the process group of every job that recorded its PID in
// dir/pids, so no job outlives the test even when its worker was SIGKILLed.
func newEnv(t *testing.T, mkJobs func(dir string) []job) *env {
	t.Helper()
	e := &env{dir: t.TempDir(), defs: filepath.Join(t.TempDir(), "definitions")}
	files := map[string]string{
		"groups.yaml":       "groups:\n  operators:\n    members: [admin]\n",
		"policies/all.yaml": "rules:\n  - id: all\n    jobs: [\"*\"]\n    users: [\"*\"]\n",
	}
	for _, j := range mkJobs(e.dir) {
		files["jobs/"+j.name+".yaml"] = j.yaml()
	}
	_, err := gitsync.InitRepo(e.defs, "main", files, "e2e definitions")
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, pid := range e.pids() {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	})
	return e
}

// path is a file in the effects directory.
func (e *env) path(name string) string { return filepath.Join(e.dir, name) }

// pids are the process-group leaders jobs recorded with `echo $$ >> pids`.
func (e *env) pids() []int {
	b, _ := os.ReadFile(e.path("pids"))
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil && n > 1 {
			out = append(out, n)
		}
	}
	return out
}

// lines returns the non-empty lines of an effects file.
func (e *env) lines(name string) []string {
	b, _ := os.ReadFile(e.path(name))
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// Server and workers

type server struct {
	t          *testing.T
	addr, url  string
	db         string
	defs       string
	dataDir    string
	adminToken string
	proc       *proc
	admin      *apiclient.Client
	starts     int
	// args and env are given to every start, after the harness's own.
	args, env []string
}

// startServer starts `jobplane server` on a free port and waits for /readyz.
func startServer(t *testing.T, db string, e *env) *server {
	t.Helper()
	addr := freeAddr(t)
	s := &server{
		t: t, addr: addr, url: "http://" + addr, db: db, defs: e.defs,
		dataDir: t.TempDir(), adminToken: "jpt_e2e_" + randHex(16),
	}
	s.admin = &apiclient.Client{BaseURL: s.url, Token: s.adminToken, HTTP: checkedHTTP(t, 10*time.Second)}
	s.start()
	return s
}

// start launches the server process (again) and waits until it is ready.
func (s *server) start() {
	t := s.t
	t.Helper()
	s.starts++
	args := append([]string{"server", "--listen", s.addr, "--db", s.db, "--definitions", s.defs,
		"--channel", "prod=main", "--data-dir", s.dataDir, "--log-level", "debug"}, s.args...)
	s.proc = startProc(t, fmt.Sprintf("server-%d", s.starts), append([]string{"JOBPLANE_ADMIN_TOKEN=" + s.adminToken}, s.env...), args...)
	s.waitReady(30 * time.Second)
}

func (s *server) waitReady(within time.Duration) {
	t := s.t
	t.Helper()
	hc := checkedHTTP(t, time.Second)
	eventually(t, within, "server /readyz", func() (bool, string) {
		if s.proc.exited() {
			require.FailNowf(t, "server exited", "server exited before it was ready: %v\n%s", s.proc.err, s.proc.output())
		}
		resp, err := hc.Get(s.url + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
}

func (s *server) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	s.t.Cleanup(cancel)
	return ctx
}

// registrationToken makes a single-use registration token as admin.
func (s *server) registrationToken() string {
	s.t.Helper()
	tok, err := s.admin.CreateRegistrationToken(s.ctx(), protocol.RegistrationTokenRequest{Pool: "default", TTLSeconds: 600})
	require.NoError(s.t, err)
	require.NotEmpty(s.t, tok.Token)
	return tok.Token
}

// createRun requests a run of job as admin.
func (s *server) createRun(job string) *protocol.Run {
	s.t.Helper()
	r, err := s.admin.CreateRun(s.ctx(), &protocol.RunRequest{Job: job, Channel: "prod", Reason: "e2e"})
	require.NoError(s.t, err)
	return r
}

func (s *server) getRun(id string) *protocol.Run {
	s.t.Helper()
	r, err := s.admin.GetRun(s.ctx(), id)
	require.NoError(s.t, err)
	return r
}

// waitRun waits until the run satisfies cond and returns it.
func (s *server) waitRun(id string, within time.Duration, what string, cond func(*protocol.Run) bool) *protocol.Run {
	s.t.Helper()
	var last *protocol.Run
	eventually(s.t, within, what, func() (bool, string) {
		r, err := s.admin.GetRun(s.ctx(), id)
		if err != nil {
			return false, err.Error()
		}
		last = r
		return cond(r), runSummary(r)
	})
	return last
}

func (s *server) waitState(id string, within time.Duration, states ...string) *protocol.Run {
	s.t.Helper()
	return s.waitRun(id, within, "run "+id+" in state "+strings.Join(states, "|"), func(r *protocol.Run) bool {
		for _, st := range states {
			if r.State == st {
				return true
			}
		}
		return false
	})
}

func runSummary(r *protocol.Run) string {
	var b strings.Builder
	fmt.Fprintf(&b, "run %s state=%s", r.ID, r.State)
	for _, a := range r.Attempts {
		fmt.Fprintf(&b, " [#%d %s %s runner=%s result=%s]", a.Number, a.ID, a.State, a.Runner, a.Result)
	}
	return b.String()
}

// allLogs reads the run's whole stored log (without following).
func (s *server) allLogs(id string) []protocol.RunLogLine {
	s.t.Helper()
	var out []protocol.RunLogLine
	var after int64
	for range 1000 {
		page, err := s.admin.Logs(s.ctx(), id, after)
		require.NoError(s.t, err)
		out = append(out, page.Lines...)
		if len(page.Lines) == 0 {
			return out
		}
		after = page.Next
	}
	require.FailNow(s.t, "log paging did not end")
	return nil
}

type worker struct {
	name     string
	stateDir string
	proc     *proc
	runnerID string
}

// startWorker starts `jobplane worker` with concurrency 1; regToken may be
// empty for a worker that is already registered.
func startWorker(t *testing.T, s *server, name, stateDir, regToken string) *worker {
	t.Helper()
	return startWorkerVia(t, s.url, name, stateDir, regToken)
}

// startWorkerVia is startWorker talking to the server at url (a proxy).
func startWorkerVia(t *testing.T, url, name, stateDir, regToken string, extra ...string) *worker {
	t.Helper()
	args := []string{"worker", "--server", url, "--state-dir", stateDir, "--concurrency", "1", "--name", name, "--log-level", "debug"}
	args = append(args, extra...)
	if regToken != "" {
		args = append(args, "--registration-token", regToken)
	}
	w := &worker{name: name, stateDir: stateDir}
	w.proc = startProc(t, name, nil, args...)
	eventually(t, 20*time.Second, name+" registered (runner.json)", func() (bool, string) {
		if w.proc.exited() {
			require.FailNowf(t, "worker exited", "%s exited: %v\n%s", name, w.proc.err, w.proc.output())
		}
		id, err := readRunnerID(stateDir)
		if err != nil {
			return false, err.Error()
		}
		w.runnerID = id
		return true, ""
	})
	return w
}

func readRunnerID(stateDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(stateDir, "runner.json"))
	if err != nil {
		return "", err
	}
	var v struct {
		RunnerID string `json:"runner_id"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return "", err
	}
	if v.RunnerID == "" {
		return "", errors.New("runner.json has no runner_id")
	}
	return v.RunnerID, nil
}

// runnerClient signs as the runner whose identity is in stateDir, the way
// a resurrected copy of that worker would.
func runnerClient(t *testing.T, s *server, stateDir string) *apiclient.RunnerClient {
	t.Helper()
	id, err := readRunnerID(stateDir)
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(stateDir, "runner.key"))
	require.NoError(t, err)
	seed, err := base64.RawURLEncoding.DecodeString(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	require.Len(t, seed, ed25519.SeedSize)
	return &apiclient.RunnerClient{
		BaseURL: s.url, RunnerID: id, Key: ed25519.NewKeyFromSeed(seed),
		HTTP: checkedHTTP(t, 10*time.Second),
	}
}

// checkedHTTP is the client of every request a test sends a server: each
// request and answer is checked against the OpenAPI document.
func checkedHTTP(t *testing.T, timeout time.Duration) *http.Client {
	t.Helper()
	return openapitest.Client(t, &http.Client{Timeout: timeout})
}

// ---------------------------------------------------------------------------
// Processes of jobs

// parentOf returns the parent PID of pid (for a job's leader: its
// supervisor), or 0.
func parentOf(pid int) int {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// groupMembers lists the live (not zombie) processes of process group pgid,
// from /proc.
func groupMembers(pgid int) []string {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []string
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parens.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 3 {
			continue
		}
		state := f[0]
		pg, err := strconv.Atoi(f[2])
		if err != nil || pg != pgid || state == "Z" || state == "X" {
			continue
		}
		comm := s[strings.IndexByte(s, '(')+1 : i]
		out = append(out, fmt.Sprintf("%d(%s,%s)", pid, comm, state))
	}
	return out
}

// alive reports whether pid is a live (not zombie) process.
func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}
