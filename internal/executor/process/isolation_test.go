package process

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/executor"
)

// probeJob tries what a job must not do to its runner and says what worked:
// read the key and identity, list the state directory, signal the worker,
// read the worker's and the supervisor's environment (the run token's way
// in). It also writes its HOME and artifacts directory, which it must.
const probeJob = `cat "$STATE/runner.key" >/dev/null 2>&1 && echo read-key
cat "$STATE/runner.json" >/dev/null 2>&1 && echo read-identity
ls "$STATE" >/dev/null 2>&1 && echo listed-state
kill -0 "$WORKER" 2>/dev/null && echo signalled-worker
kill -0 "$PPID" 2>/dev/null && echo signalled-supervisor
cat "/proc/$WORKER/environ" >/dev/null 2>&1 && echo read-worker-env
cat "/proc/$PPID/environ" >/dev/null 2>&1 && echo read-supervisor-env
touch "$HOME/h" && echo wrote-home
touch "$JOBPLANE_ARTIFACTS_DIR/a" && echo wrote-artifacts
touch "$TMPDIR/t" && echo wrote-tmp
mv "$JOBPLANE_ARTIFACTS_DIR" "$JOBPLANE_ARTIFACTS_DIR.x" 2>/dev/null && echo moved-artifacts-dir
echo "user=$(id -u)"`

// TestJobUserCannotReachTheRunner: with --job-user the job cannot read the
// runner's key or identity, list the state directory, signal the worker or
// its supervisor, or read their environments; without it (the not isolated
// variant) every one of those succeeds, which shows the probe can see them.
func TestJobUserCannotReachTheRunner(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("--job-user needs a worker running as root")
	}
	nobody := &JobUser{Name: "nobody", UID: 65534, GID: 65534}
	for _, c := range []struct {
		name string
		user *JobUser
	}{{"isolated", nobody}, {"not isolated", nil}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			state := t.TempDir()
			require.NoError(t, os.Chmod(state, 0o700)) // as the worker makes it
			require.NoError(t, os.WriteFile(filepath.Join(state, "runner.key"), []byte("key"), 0o600))
			require.NoError(t, os.WriteFile(filepath.Join(state, "runner.json"), []byte("{}"), 0o600))
			root := filepath.Join(state, "work", "att1")
			host := executor.Layout{Root: root, Workspace: filepath.Join(root, "workspace"), Artifacts: filepath.Join(root, "artifacts"), ParamsFile: filepath.Join(root, "params.json")}
			for _, d := range []string{host.Workspace, host.Artifacts} {
				require.NoError(t, os.MkdirAll(d, 0o700))
			}
			e := New(Options{JobUser: c.user})
			require.Equal(t, c.user != nil, e.Capabilities().Isolated)
			seen := e.Layout(host)
			var out lines
			j, err := e.Start(context.Background(), &executor.Spec{
				Command: []string{"sh", "-c", probeJob},
				Env: []string{"PATH=/usr/bin:/bin", "HOME=/root", "TMPDIR=/tmp", "STATE=" + state,
					"WORKER=" + strconv.Itoa(os.Getpid()), "JOBPLANE_ARTIFACTS_DIR=" + seen.Artifacts},
				Layout: host, Output: out.add, Until: time.Now().Add(time.Minute),
			})
			require.NoError(t, err)
			exit := j.Wait()
			require.Equal(t, 0, exit.Code, "%s %v", exit.Summary, out.of("stderr"))
			got := strings.Join(out.of("stdout"), " ")
			forbidden := []string{"read-key", "read-identity", "listed-state", "signalled-worker", "signalled-supervisor", "read-worker-env", "read-supervisor-env", "moved-artifacts-dir"}
			for _, f := range forbidden {
				if c.user != nil {
					require.NotContains(t, got, f, "an isolated job must not be able to do this")
				} else {
					require.Contains(t, got, f, "without isolation the probe must see this")
				}
			}
			for _, f := range []string{"wrote-artifacts", "wrote-tmp", "wrote-home"} {
				if c.user != nil || f == "wrote-artifacts" {
					require.Contains(t, got, f)
				}
			}
			if c.user != nil {
				require.Contains(t, got, "user=65534")
				fi, err := os.Stat(filepath.Join(state, "runner.key"))
				require.NoError(t, err)
				require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the key stays the worker's")
			}
		})
	}
}

func TestLookupUserRefusals(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"root", "0", "no-such-user-anywhere"} {
		_, err := LookupUser(name)
		require.Error(t, err, name)
	}
	if os.Geteuid() == 0 {
		u, err := LookupUser("nobody")
		require.NoError(t, err)
		require.Equal(t, uint32(65534), u.UID)
	}
}
