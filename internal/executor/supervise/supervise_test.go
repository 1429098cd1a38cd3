package supervise

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// lockedBuffer is a buffer the copying goroutines of exec.Cmd write to.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// supervised runs this test binary as a supervisor of command with a
// control pipe on fd 3 and a status pipe on fd 4.
type supervised struct {
	cmd      *exec.Cmd
	ctl      *os.File
	statuses chan Status
	out      lockedBuffer
	done     chan struct{}
}

func start(t *testing.T, o Options, env []string, command ...string) *supervised {
	t.Helper()
	ctlR, ctlW, err := os.Pipe()
	require.NoError(t, err)
	stR, stW, err := os.Pipe()
	require.NoError(t, err)
	o.ControlFD, o.StatusFD = 3, 4
	s := &supervised{ctl: ctlW, statuses: make(chan Status, 4), done: make(chan struct{})}
	s.cmd = &exec.Cmd{
		Path: "/proc/self/exe", Args: append([]string{Argv0}, Args(o, command)...),
		Env: env, Stdout: &s.out, Stderr: &s.out, ExtraFiles: []*os.File{ctlR, stW},
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	require.NoError(t, s.cmd.Start())
	ctlR.Close()
	stW.Close()
	go func() {
		defer close(s.statuses)
		sc := bufio.NewScanner(stR)
		for sc.Scan() {
			st, err := ReadStatus(sc.Bytes())
			if err == nil {
				s.statuses <- st
			}
		}
	}()
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		ctlW.Close()
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	})
	return s
}

// exit waits for the supervisor and returns its exit status line.
func (s *supervised) exit(t *testing.T) Status {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the supervisor did not end")
	}
	var last Status
	for st := range s.statuses {
		last = st
	}
	require.Equal(t, "exit", last.Event)
	require.Equal(t, last.Code, s.cmd.ProcessState.ExitCode(), "the supervisor exits with the job's code")
	return last
}

func TestExitCodeAndEnvFile(t *testing.T) {
	t.Parallel()
	envFile := filepath.Join(t.TempDir(), "env")
	require.NoError(t, os.WriteFile(envFile, []byte("PATH=/usr/bin:/bin\x00SECRET=s3cr3t\x00"), 0o600))
	s := start(t, Options{UntilMS: 60_000, EnvFile: envFile}, []string{"PATH=/usr/bin:/bin", "SUPERVISOR_ONLY=1"},
		"sh", "-c", `echo "secret=$SECRET only=$SUPERVISOR_ONLY"; if [ -e /proc/self/fd/3 ] || [ -e /proc/self/fd/4 ]; then echo leaked; fi; exit 3`)
	st := s.exit(t)
	require.Equal(t, Status{Event: "exit", Code: 3, Summary: "exit status 3"}, st)
	require.Equal(t, "secret=s3cr3t only=\n", s.out.String(), "the job's environment is the file's, and it holds no supervisor descriptor")
	_, err := os.Stat(envFile)
	require.True(t, os.IsNotExist(err), "the env file is removed once read")
}

func TestStopGraceThenKill(t *testing.T) {
	t.Parallel()
	s := start(t, Options{UntilMS: 60_000}, []string{"PATH=/usr/bin:/bin"}, "sh", "-c", `trap '' TERM; echo ready; sleep 60 & wait`)
	require.Eventually(t, func() bool { return strings.Contains(s.out.String(), "ready") }, 10*time.Second, 10*time.Millisecond)
	began := time.Now()
	_, err := s.ctl.WriteString("stop 200\n")
	require.NoError(t, err)
	st := s.exit(t)
	require.Equal(t, 137, st.Code, st.Summary)
	require.Equal(t, ReasonStopped, st.Reason)
	require.GreaterOrEqual(t, time.Since(began), 200*time.Millisecond, "SIGKILL only after the grace")
}

func TestControlEndKillsAtOnce(t *testing.T) {
	t.Parallel()
	s := start(t, Options{UntilMS: 60_000}, []string{"PATH=/usr/bin:/bin"}, "sh", "-c", `echo ready; sleep 60`)
	require.Eventually(t, func() bool { return strings.Contains(s.out.String(), "ready") }, 10*time.Second, 10*time.Millisecond)
	s.ctl.Close()
	st := s.exit(t)
	require.Equal(t, 137, st.Code)
	require.Equal(t, ReasonWorkerGone, st.Reason)
}

func TestUntilExtendsAndBoundKills(t *testing.T) {
	t.Parallel()
	s := start(t, Options{UntilMS: 300}, []string{"PATH=/usr/bin:/bin"}, "sleep", "60")
	began := time.Now()
	_, err := s.ctl.WriteString("until 1000\nuntil 10\n") // the earlier bound is ignored
	require.NoError(t, err)
	st := s.exit(t)
	require.Equal(t, ReasonLeaseBound, st.Reason)
	require.Equal(t, 137, st.Code)
	require.GreaterOrEqual(t, time.Since(began), time.Second)
}

func TestStartFailures(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		o       Options
		command []string
	}{
		"missing command":    {Options{}, []string{"/nonexistent/cmd"}},
		"not on PATH":        {Options{}, []string{"no-such-command-anywhere"}},
		"bad user":           {Options{User: "root"}, []string{"true"}},
		"missing env file":   {Options{EnvFile: "/nonexistent/env"}, []string{"true"}},
		"missing workdir":    {Options{Dir: "/nonexistent/dir"}, []string{"/bin/true"}},
		"directory not file": {Options{}, []string{"/bin"}},
	} {
		s := start(t, c.o, []string{"PATH=/usr/bin:/bin"}, c.command...)
		<-s.done
		first, ok := <-s.statuses
		require.True(t, ok, name)
		require.Equal(t, "start_failed", first.Event, name)
		require.NotEmpty(t, first.Error, name)
		require.Equal(t, codeStartFailed, s.cmd.ProcessState.ExitCode(), name)
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.Equal(t, codeUsage, Main(nil, &out))
	require.Contains(t, out.String(), "no command")
	out.Reset()
	require.Equal(t, codeUsage, Main([]string{"-status-fd=2", "--", "true"}, &out))
}

// TestControlOnStdin: a container's entrypoint reads its control lines from
// stdin (the engine's attach stream); the job still gets /dev/null.
func TestControlOnStdin(t *testing.T) {
	t.Parallel()
	ctlR, ctlW, err := os.Pipe()
	require.NoError(t, err)
	var out lockedBuffer
	cmd := &exec.Cmd{
		Path: "/proc/self/exe", Args: append([]string{Argv0}, Args(Options{ControlFD: 0, StatusFD: -1, UntilMS: 60_000}, []string{"sh", "-c", `cat; echo "read-stdin-done"; sleep 60`})...),
		Env: []string{"PATH=/usr/bin:/bin"}, Stdin: ctlR, Stdout: &out, Stderr: &out,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	require.NoError(t, cmd.Start())
	ctlR.Close()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		ctlW.Close()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	})
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "read-stdin-done") }, 10*time.Second, 10*time.Millisecond,
		"the job's stdin is /dev/null, not the control stream")
	_, err = ctlW.WriteString("stop 0\n")
	require.NoError(t, err)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a stop on stdin did not end the job")
	}
	require.Equal(t, 137, cmd.ProcessState.ExitCode())
}

func TestSetupFromControl(t *testing.T) {
	t.Parallel()
	s := start(t, Options{UntilMS: -1, Setup: true}, []string{"PATH=/usr/bin:/bin", "SUPERVISOR_ONLY=1"},
		"sh", "-c", `echo "secret=$SECRET only=$SUPERVISOR_ONLY"; sleep 60`)
	time.Sleep(100 * time.Millisecond)
	require.Empty(t, s.out.String(), "nothing starts before the setup")
	began := time.Now()
	_, err := s.ctl.WriteString(`env ["PATH=/usr/bin:/bin","SECRET=a\nb"]` + "\nuntil 300\n")
	require.NoError(t, err)
	st := s.exit(t)
	require.Equal(t, 137, st.Code, st.Summary)
	require.Equal(t, ReasonLeaseBound, st.Reason, "the setup's until is the bound")
	require.GreaterOrEqual(t, time.Since(began), 300*time.Millisecond)
	require.Equal(t, "secret=a\nb only=\n", s.out.String(), "the job's environment is the setup's")
}

func TestSetupRefused(t *testing.T) {
	t.Parallel()
	for name, in := range map[string]string{
		"control ends":   "",
		"bad env":        "env {\"A\":1}\nuntil 100\n",
		"entry no name":  "env [\"=x\"]\nuntil 100\n",
		"two env lines":  "env []\nenv []\nuntil 100\n",
		"negative until": "until -5\n",
		"other verb":     "stop 0\n",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := start(t, Options{UntilMS: -1, Setup: true}, []string{"PATH=/usr/bin:/bin"}, "sh", "-c", "echo started")
			_, err := s.ctl.WriteString(in)
			require.NoError(t, err)
			s.ctl.Close()
			select {
			case <-s.done:
			case <-time.After(20 * time.Second):
				t.Fatal("the supervisor did not end")
			}
			first := <-s.statuses
			require.Equal(t, "start_failed", first.Event)
			require.Equal(t, codeStartFailed, s.cmd.ProcessState.ExitCode())
			require.NotContains(t, s.out.String(), "started")
		})
	}
}
