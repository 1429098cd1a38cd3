package container

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/executor"
	"github.com/jobplane/jobplane/internal/executor/process"
)

// runProcess runs spec's command with the process executor (no isolation):
// the broken variant that shows a test's job would succeed without the
// container.
func runProcess(t *testing.T, command ...string) ([]string, executor.Exit) {
	t.Helper()
	o := &output{}
	x := process.New(process.Options{Clock: clock.Real{}})
	spec := &executor.Spec{Runner: "r", Run: "run", Attempt: "a", Command: command,
		Env: []string{"PATH=/usr/bin:/bin"}, Layout: layout(t, t.TempDir()), Until: time.Now().Add(time.Minute), Output: o.add}
	j, err := x.Start(context.Background(), spec)
	require.NoError(t, err)
	exit := j.Wait()
	return append(o.get("stdout"), o.get("stderr")...), exit
}

func TestMemoryLimitEndsAsOutOfMemory(t *testing.T) {
	h := newHarness(t)
	o := &output{}
	spec := h.spec(t, o, "sh", "-c", `a=$(head -c 400000000 /dev/zero | tr '\0' x); echo "survived ${#a}"`)
	spec.Resources = executor.Resources{MemoryBytes: 64 << 20, MilliCPU: 500}
	j := h.start(t, spec)
	exit := j.Wait()
	require.Equal(t, executor.ReasonOOMKilled, exit.Reason, "%+v %q", exit, o.get("stdout"))
	require.NotContains(t, strings.Join(o.get("stdout"), "\n"), "survived")
	t.Logf("%+v", exit)
}

func TestNetworkNone(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "reached") }))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	// Loopback, and the host's other addresses, as a job would try them.
	// (busybox's static wget crashes here; nc does not resolve names.)
	script := ""
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil {
			script += fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 3 %s %d | tail -n 1; echo; `, ip.IP, port)
		}
	}
	script += "cat /proc/net/dev | tail -n +3 | cut -d: -f1"

	// The broken variant: without the container the job reaches the server.
	lines, _ := runProcess(t, "busybox", "sh", "-c", script)
	require.Contains(t, lines, "reached", "the job reaches the server when not isolated: %q", lines)

	h := newHarness(t)
	o := &output{}
	spec := h.spec(t, o, "sh", "-c", script)
	spec.Network = executor.NetworkNone
	j := h.start(t, spec)
	j.Wait()
	require.NotContains(t, o.get("stdout"), "reached", "%q %q", o.get("stdout"), o.get("stderr"))
	var ifaces []string
	for _, l := range o.get("stdout") {
		if l = strings.TrimSpace(l); l != "" {
			ifaces = append(ifaces, l)
		}
	}
	require.Equal(t, []string{"lo"}, ifaces, "the container has loopback only")
}

func TestJobCannotReachRunnerKeyOrWorker(t *testing.T) {
	state := t.TempDir()
	key := filepath.Join(state, "runner.key")
	require.NoError(t, os.WriteFile(key, []byte("PRIVATE-RUNNER-KEY\n"), 0o600))
	script := fmt.Sprintf(`cat %s; cat ../../runner.key; cat /proc/%d/environ >/dev/null && echo read-worker-env; kill -0 %d && echo signalled-worker; true`,
		key, os.Getpid(), os.Getpid())

	// The broken variant: the process executor's job, as the worker's own
	// user, reads the key and can signal the worker.
	lines, _ := runProcess(t, "busybox", "sh", "-c", script)
	require.Contains(t, lines, "PRIVATE-RUNNER-KEY")
	require.Contains(t, lines, "signalled-worker")

	h := newHarness(t)
	o := &output{}
	spec := h.spec(t, o, "sh", "-c", script)
	spec.Layout = layout(t, filepath.Join(state, "work", "a1"))
	j := h.start(t, spec)
	j.Wait()
	all := append(o.get("stdout"), o.get("stderr")...)
	require.NotContains(t, all, "PRIVATE-RUNNER-KEY", "%q", all)
	require.NotContains(t, all, "signalled-worker", "%q", all)
	require.NotContains(t, all, "read-worker-env", "%q", all)
}
