package process

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jobplane/jobplane/internal/executor"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(miniWorkerEnv); dir != "" {
		os.Exit(miniWorker(dir, os.Getenv(miniWorkerMode)))
	}
	goleak.VerifyTestMain(m)
}

// lines collects a job's output.
type lines struct {
	mu  sync.Mutex
	got map[string][]string
}

func (l *lines) add(stream, line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.got == nil {
		l.got = map[string][]string{}
	}
	l.got[stream] = append(l.got[stream], line)
}

func (l *lines) of(stream string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.got[stream]...)
}

func spec(t *testing.T, out *lines, command ...string) *executor.Spec {
	t.Helper()
	root := t.TempDir()
	ws := filepath.Join(root, "workspace")
	require.NoError(t, os.MkdirAll(filepath.Join(ws, "sub"), 0o700))
	return &executor.Spec{
		Command: command, Env: []string{"PATH=/usr/bin:/bin", "X=1"},
		Layout: executor.Layout{Root: root, Workspace: ws}, Output: out.add,
		Until: time.Now().Add(time.Minute),
	}
}

func TestOutputExitAndWorkdir(t *testing.T) {
	t.Parallel()
	var out lines
	s := spec(t, &out, "sh", "-c", `echo "x=$X"; pwd; echo oops >&2; exit 3`)
	s.Workdir = "sub"
	j, err := New(Options{}).Start(context.Background(), s)
	require.NoError(t, err)
	exit := j.Wait()
	require.Equal(t, executor.Exit{Code: 3, Summary: "exit status 3"}, exit)
	require.Equal(t, []string{"x=1", filepath.Join(s.Layout.Workspace, "sub")}, out.of("stdout"))
	require.Equal(t, []string{"oops"}, out.of("stderr"))
}

func TestStartRefusals(t *testing.T) {
	t.Parallel()
	var out lines
	for name, mod := range map[string]func(*executor.Spec){
		"no command":       func(s *executor.Spec) { s.Command = nil },
		"image":            func(s *executor.Spec) { s.Image = "busybox" },
		"memory limit":     func(s *executor.Spec) { s.Resources.MemoryBytes = 64 << 20 },
		"cpu limit":        func(s *executor.Spec) { s.Resources.MilliCPU = 500 },
		"no network":       func(s *executor.Spec) { s.Network = executor.NetworkNone },
		"absolute workdir": func(s *executor.Spec) { s.Workdir = "/etc" },
		"escaping workdir": func(s *executor.Spec) { s.Workdir = "../x" },
		"missing command":  func(s *executor.Spec) { s.Command = []string{"/nonexistent/cmd"} },
	} {
		s := spec(t, &out, "true")
		mod(s)
		_, err := New(Options{}).Start(context.Background(), s)
		var se *executor.StartError
		require.True(t, errors.As(err, &se), "%s: Start = %v, want a *StartError", name, err)
		require.Equal(t, executor.ReasonStartFailed, se.Reason, name)
	}
}

func TestStopKillsTheGroup(t *testing.T) {
	t.Parallel()
	var out lines
	// The shell ignores SIGTERM; the grace ends in SIGKILL.
	s := spec(t, &out, "sh", "-c", `trap '' TERM; sleep 60 & echo started; wait`)
	j, err := New(Options{}).Start(context.Background(), s)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(out.of("stdout")) == 1 }, 10*time.Second, 10*time.Millisecond)
	j.Stop(100 * time.Millisecond)
	exit := j.Wait()
	require.Equal(t, 137, exit.Code, exit.Summary)
}
