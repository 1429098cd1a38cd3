package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
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

// TestDevQuickStart runs the README's quick start in-process: `jobplane dev`
// with its example repository and local worker, then the client verbs with no
// flags at all (they find ./.jobplane/cli.json).
func TestDevQuickStart(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	ctx, cancel := context.WithCancel(context.Background())
	var devOut, devErr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"dev", "--listen", "127.0.0.1:0"}, strings.NewReader(""), &devOut, &devErr)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("dev did not stop")
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(devOut.String(), "Next,") {
		require.True(t, time.Now().Before(deadline), "dev did not start: %s %s", devOut.String(), devErr.String())
		time.Sleep(20 * time.Millisecond)
	}
	require.FileExists(t, filepath.Join(dir, ".jobplane", "cli.json"))
	info, err := os.Stat(filepath.Join(dir, ".jobplane", "cli.json"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "the file holds a token")

	code, out, errOut := run(t, "run", "hello", "--wait")
	require.Equal(t, 0, code, "stdout: %s\nstderr: %s", out, errOut)
	require.Contains(t, out, "hello, world")
	require.Contains(t, errOut, "succeeded")

	code, out, errOut = run(t, "run", "hello", "-p", "name=you", "--wait")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "hello, you")

	code, _, errOut = run(t, "run", "hello", "-p", "name=bad;rm")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "invalid_params")
	require.Contains(t, errOut, "field name")

	code, _, errOut = run(t, "run", "nope")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "unknown_job")

	code, out, _ = run(t, "runs", "--json")
	require.Equal(t, 0, code)
	var list struct {
		Runs []struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"runs"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list.Runs, 2)
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
	require.Equal(t, 1, code)
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
	deadline = time.Now().Add(20 * time.Second)
	for {
		_, out, _ = run(t, "runs", "show", r.ID, "--json")
		if strings.Contains(out, `"state": "cancelled"`) {
			break
		}
		require.True(t, time.Now().Before(deadline), "run not cancelled: %s", out)
		time.Sleep(100 * time.Millisecond)
	}

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
