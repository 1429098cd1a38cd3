package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/protocol"
)

// syncBuffer is a bytes.Buffer safe for the dev command's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code = Main(ctx, args, strings.NewReader(stdinFor(args)), &out, &errb)
	return code, out.String(), errb.String()
}

// startDev runs `jobplane dev` in a fresh current directory until the test
// ends, and returns that directory and dev's standard output once it
// printed its hints.
func startDev(t *testing.T, args ...string) (string, *syncBuffer) {
	t.Helper()
	dir := t.TempDir()
	t.Chdir(dir)
	ctx, cancel := context.WithCancel(context.Background())
	var devOut, devErr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, append([]string{"dev", "--listen", "127.0.0.1:0"}, args...), strings.NewReader(""), &devOut, &devErr)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("dev did not stop")
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(devOut.String(), "Stop with Ctrl-C.") {
		require.True(t, time.Now().Before(deadline), "dev did not start: %s %s", devOut.String(), devErr.String())
		time.Sleep(20 * time.Millisecond)
	}
	return dir, &devOut
}

// waitState polls a run until it reaches state.
func waitState(t *testing.T, id, state string, args ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, out, _ := run(t, append([]string{"runs", "show", id, "--json"}, args...)...)
		if strings.Contains(out, `"state": "`+state+`"`) {
			return
		}
		require.True(t, time.Now().Before(deadline), "run %s not %s: %s", id, state, out)
		time.Sleep(100 * time.Millisecond)
	}
}

// TestDevQuickStart runs the README's quick start in-process: `jobplane dev`
// with its example repository and local worker, then the client verbs with no
// flags at all (they find ./.jobplane/cli.json).
func TestDevQuickStart(t *testing.T) {
	dir, devOut := startDev(t)

	// Every hint dev prints works as printed.
	var pending string
	for _, line := range strings.Split(devOut.String(), "\n") {
		cmdline, _, _ := strings.Cut(strings.TrimSpace(line), "   ")
		if !strings.HasPrefix(line, "  jobplane ") {
			continue
		}
		args := strings.Fields(cmdline)[1:]
		code, out, errOut := run(t, args...)
		require.Equal(t, 0, code, "%s\nstdout: %s\nstderr: %s", cmdline, out, errOut)
		if args[0] == "approve" {
			pending = args[1]
		}
	}
	// alice's migration, approved by the admin, ends in success; the web
	// UI's run page does not offer alice as its approver.
	require.NotEmpty(t, pending, "dev prints an approval to give: %s", devOut.String())
	waitState(t, pending, "succeeded")
	code, out, errOut := run(t, "runs", "show", pending)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "actor     alice")
	require.Contains(t, out, "approval  admin approved")
	code, out, errOut = run(t, "schedules")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "tidy")
	code, out, errOut = run(t, "validate", filepath.Join(".jobplane", "definitions"))
	require.Equal(t, 0, code, out+errOut)
	alice, err := os.ReadFile(filepath.Join(dir, ".jobplane", "alice-token"))
	require.NoError(t, err)
	code, _, errOut = run(t, "run", "count", "--token", strings.TrimSpace(string(alice)))
	require.Equal(t, ExitRefused, code, errOut)

	require.FileExists(t, filepath.Join(dir, ".jobplane", "cli.json"))
	info, err := os.Stat(filepath.Join(dir, ".jobplane", "cli.json"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "the file holds a token")

	code, out, errOut = run(t, "run", "hello", "--wait")
	require.Equal(t, 0, code, "stdout: %s\nstderr: %s", out, errOut)
	require.Contains(t, out, "hello, world")
	require.Contains(t, errOut, "succeeded")

	code, out, errOut = run(t, "run", "hello", "-p", "name=you", "--wait")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "hello, you")

	code, _, errOut = run(t, "run", "hello", "-p", "name=bad;rm")
	require.Equal(t, ExitRefused, code)
	require.Contains(t, errOut, "invalid_params")
	require.Contains(t, errOut, "field name")

	code, _, errOut = run(t, "run", "nope")
	require.Equal(t, ExitRefused, code)
	require.Contains(t, errOut, "unknown_job")

	code, out, _ = run(t, "runs", "--job", "hello", "--json")
	require.Equal(t, 0, code)
	var list struct {
		Runs []struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"runs"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list.Runs, 4, "two from dev's hints, two here")
	require.Equal(t, "succeeded", list.Runs[0].State)

	code, out, _ = run(t, "runs", "show", list.Runs[0].ID)
	require.Equal(t, 0, code)
	require.Contains(t, out, "state     succeeded")
	require.Contains(t, out, "#1 att_")

	code, out, _ = run(t, "logs", list.Runs[0].ID)
	require.Equal(t, 0, code)
	require.Contains(t, out, "hello, you")

	code, out, _ = run(t, "runners")
	require.Equal(t, 0, code)
	require.Contains(t, out, "dev-worker")

	code, out, errOut = run(t, "principals", "create", "bob")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "principal bob")
	code, out, _ = run(t, "tokens", "create", "--principal", "bob")
	require.Equal(t, 0, code)
	bobToken := strings.TrimSpace(out)
	require.True(t, strings.HasPrefix(bobToken, "jpt_"))

	// bob may run hello (users: ["*"]) but not count (operators only).
	code, _, errOut = run(t, "run", "count", "--token", bobToken)
	require.Equal(t, ExitRefused, code)
	require.Contains(t, errOut, "denied")

	// A long run can be cancelled.
	code, out, _ = run(t, "run", "count", "-p", "to=60", "--json")
	require.Equal(t, 0, code)
	var r struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	code, _, errOut = run(t, "cancel", r.ID)
	require.Equal(t, 0, code, errOut)
	waitState(t, r.ID, "cancelled")

	// Ctrl-C while following: the run goes on, and the CLI says how to
	// follow or stop it.
	ctx, interrupt := context.WithCancel(context.Background())
	var wOut, wErr syncBuffer
	waited := make(chan int, 1)
	go func() {
		waited <- Main(ctx, []string{"run", "count", "-p", "to=60", "--wait"}, strings.NewReader(""), &wOut, &wErr)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(wOut.String(), "1\n") {
		require.True(t, time.Now().Before(deadline), "no log line: %s %s", wOut.String(), wErr.String())
		time.Sleep(20 * time.Millisecond)
	}
	interrupt()
	require.Equal(t, ExitInterrupted, <-waited, wErr.String())
	require.Contains(t, wErr.String(), "goes on")
	m := regexp.MustCompile(`jobplane cancel (run_\S+)`).FindStringSubmatch(wErr.String())
	require.NotNil(t, m, wErr.String())
	require.Contains(t, wErr.String(), "jobplane logs -f "+m[1])
	_, out, _ = run(t, "runs", "show", m[1], "--json")
	require.Contains(t, out, `"state": "running"`, "interrupting the CLI does not stop the run")
	code, _, errOut = run(t, "cancel", m[1])
	require.Equal(t, 0, code, errOut)
	waitState(t, m[1], "cancelled")

	// A backfill: one run per line, refused lines reported and the exit
	// status 1; the same command again requests nothing twice.
	pf := filepath.Join(dir, "names.jsonl")
	require.NoError(t, os.WriteFile(pf, []byte("{\"name\":\"ann\"}\n\n# skipped\n{\"name\":\"bad;rm\"}\n{\"name\":\"bo\"}\n"), 0o600))
	code, out, errOut = run(t, "run", "hello", "--params-file", pf, "--idempotency-key", "names")
	require.Equal(t, 1, code, "stdout: %s\nstderr: %s", out, errOut)
	require.Regexp(t, `(?m)^line 1: run run_\S+ queued$`, out)
	require.Regexp(t, `(?m)^line 4: refused: .*invalid_params`, out)
	require.Regexp(t, `(?m)^line 5: run run_\S+ queued$`, out)
	require.Contains(t, errOut, "3 of 3 requested")
	require.Contains(t, errOut, "1 of 3 lines refused")
	code, out, _ = run(t, "run", "hello", "--params-file", pf, "--idempotency-key", "names")
	require.Equal(t, 1, code)
	require.Regexp(t, `(?m)^line 1: run run_\S+ \w+ \(requested before, same idempotency key\)$`, out)
	// A file with a bad line is refused before anything is requested.
	require.NoError(t, os.WriteFile(pf, []byte("{\"name\":\"cy\"}\n{\"name\":\n"), 0o600))
	code, _, errOut = run(t, "run", "hello", "--params-file", pf)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, pf+":2:")
	code, _, errOut = run(t, "run", "hello", "--params-file", pf, "-p", "name=x", "--wait")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "--wait")

	// Retention: the dev server keeps everything, so nothing is due.
	code, out, errOut = run(t, "admin", "prune", "--dry-run")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "nothing is due for deletion")
	code, out, errOut = run(t, "admin", "prune", "--json")
	require.Equal(t, 0, code, errOut)
	var rep protocol.PruneReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Zero(t, rep.LogLines)
	code, _, errOut = run(t, "admin", "prune", "--dry-run", "--token", bobToken)
	require.Equal(t, ExitRefused, code)
	require.Contains(t, errOut, "forbidden")
}

// TestDevExampleDefinitions: `jobplane dev --definitions
// examples/definitions` serves a directory that is not a Git repository,
// and the example's approval flow (a platform engineer's production
// migration, approved by a second one) ends in a succeeded run.
func TestDevExampleDefinitions(t *testing.T) {
	examples, err := filepath.Abs(filepath.Join("..", "..", "examples", "definitions"))
	require.NoError(t, err)
	_, devOut := startDev(t, "--definitions", examples)
	require.Contains(t, devOut.String(), "is not a Git repository")
	require.Contains(t, devOut.String(), "billing-admin-token")

	tokens := map[string]string{}
	for _, who := range []string{"dave", "erin"} {
		code, _, errOut := run(t, "principals", "create", who)
		require.Equal(t, 0, code, errOut)
		code, out, errOut := run(t, "tokens", "create", "--principal", who)
		require.Equal(t, 0, code, errOut)
		tokens[who] = strings.TrimSpace(out)
	}
	code, out, errOut := run(t, "run", "migrate-schema", "-p", "target_version=42", "--json", "--token", tokens["dave"])
	require.Equal(t, 0, code, errOut)
	var r struct {
		ID    string `json:"id"`
		State string `json:"state"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Equal(t, "pending_approval", r.State)
	code, _, errOut = run(t, "approve", r.ID, "--token", tokens["dave"])
	require.Equal(t, ExitRefused, code, "not their own run: %s", errOut)
	code, _, errOut = run(t, "approve", r.ID, "--token", tokens["erin"])
	require.Equal(t, 0, code, errOut)
	waitState(t, r.ID, "succeeded")
	code, out, _ = run(t, "logs", r.ID)
	require.Equal(t, 0, code)
	require.Contains(t, out, "migrating to 42")
}

func TestParseParams(t *testing.T) {
	t.Parallel()
	got, err := parseParams([]string{"a=1", "b=x y", "c=true", `d="007"`, "e=[1,2]"})
	require.NoError(t, err)
	require.JSONEq(t, `{"a":1,"b":"x y","c":true,"d":"007","e":[1,2]}`, string(got))
	_, err = parseParams([]string{"novalue"})
	require.Error(t, err)
	_, err = parseParams([]string{"a=1", "a=2"})
	require.Error(t, err)
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	code, _, errOut := run(t, "server")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--definitions")
	code, _, errOut = run(t, "frobnicate")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "unexpected argument")
	code, _, errOut = run(t, "server", "--definitions", t.TempDir(), "--commit-concurrency", "-1")
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "--commit-concurrency")
	for _, cmd := range [][]string{{"server", "--definitions", t.TempDir()}, {"dev", "--data-dir", t.TempDir()}, {"bench"}} {
		code, _, errOut = run(t, append(cmd, "--gc-heap-floor=-1")...)
		require.NotEqual(t, 0, code, cmd[0])
		require.Contains(t, errOut, "--gc-heap-floor", cmd[0])
		require.Contains(t, errOut, "negative", cmd[0])
	}
	// The Kubernetes executor needs its namespace and a usable kubeconfig;
	// both are refused before the worker contacts its server.
	worker := []string{"worker", "--server", "http://127.0.0.1:1", "--state-dir", t.TempDir(), "--executor", "kubernetes"}
	code, _, errOut = run(t, worker...)
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "--namespace")
	code, _, errOut = run(t, append(worker, "--namespace", "jobs", "--kubeconfig", filepath.Join(t.TempDir(), "missing"))...)
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "--kubeconfig")
	code, _, errOut = run(t, "worker", "--server", "http://127.0.0.1:1", "--executor", "frobnicate")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--executor")
}

// stdinFor feeds "secrets set" a value; other commands read nothing.
func stdinFor(args []string) string {
	if len(args) > 1 && args[0] == "secrets" {
		return "s3cret-value\n"
	}
	return ""
}

// A backfill's calls hold at most 100 requests and stay under the body
// limit: large parameter lines make smaller calls, in order, none lost.
func TestRunBatches(t *testing.T) {
	t.Parallel()
	reqs := make([]protocol.RunRequest, 250)
	for i := range reqs {
		reqs[i] = protocol.RunRequest{Job: "j", Channel: "prod", Params: json.RawMessage(`{"n":1}`)}
	}
	require.Equal(t, [][2]int{{0, 100}, {100, 200}, {200, 250}}, batches(reqs, 100, runBatchBytes))
	big := json.RawMessage(`{"blob":"` + strings.Repeat("x", 60<<10) + `"}`)
	for i := range reqs {
		reqs[i].Params = big
	}
	spans := batches(reqs, 100, runBatchBytes)
	next := 0
	for _, s := range spans {
		require.Equal(t, next, s[0], "spans are consecutive")
		require.Greater(t, s[1], s[0])
		b, err := json.Marshal(protocol.RunsRequest{Runs: reqs[s[0]:s[1]]})
		require.NoError(t, err)
		require.LessOrEqual(t, len(b), protocol.MaxBodyBytes, "span %v", s)
		next = s[1]
	}
	require.Equal(t, len(reqs), next)
	require.Greater(t, len(spans), 10)
	require.Empty(t, batches(nil, 100, runBatchBytes))
}
