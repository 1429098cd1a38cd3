package e2e

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/gitsync"
)

// podman returns the podman binary, or skips the test when there is none
// that works, unless JOBPLANE_TEST_REQUIRE_PODMAN=1 (CI) makes that a
// failure.
func podman(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("podman")
	if err == nil {
		err = exec.Command(p, "info", "--format", "{{.Host.OCIRuntime.Name}}").Run()
	}
	if err != nil {
		if os.Getenv("JOBPLANE_TEST_REQUIRE_PODMAN") == "1" {
			t.Fatalf("podman does not work (JOBPLANE_TEST_REQUIRE_PODMAN=1): %v; install it with apt-get install -y podman runc", err)
		}
		t.Skipf("podman does not work here (%v); set JOBPLANE_TEST_REQUIRE_PODMAN=1 to make this a failure", err)
	}
	return p
}

// run runs podman with args and returns its standard output.
func runPodman(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "podman %s: %s", strings.Join(args, " "), stderr.String())
	return strings.TrimSpace(string(out))
}

// TestContainerImage builds the image with deploy/build-image.sh and runs
// `jobplane server` in it: it must answer /readyz, as an unprivileged
// user, logging JSON lines, from an image that has no shell.
func TestContainerImage(t *testing.T) {
	t.Parallel()
	bin := podman(t)
	root, err := moduleRoot()
	require.NoError(t, err)
	tag := "localhost/jobplane-e2e:" + randHex(6)
	build := exec.Command(filepath.Join(root, "deploy", "build-image.sh"), tag)
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, "deploy/build-image.sh: %s", out)
	t.Cleanup(func() { _ = exec.Command(bin, "rmi", "--force", tag).Run() })

	require.Equal(t, "65532:65532", runPodman(t, bin, "image", "inspect", "--format", "{{.Config.User}}", tag))
	// No shell: nothing in the image but jobplane can be run.
	shell := exec.Command(bin, "run", "--rm", "--runtime", "runc", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
		"--network", "none", "--entrypoint", "/bin/sh", tag, "-c", "true")
	require.Error(t, shell.Run(), "the image has a shell")

	// The definitions are mounted read-only; the container's user is not
	// the test's, so they must be readable by others.
	defs := filepath.Join(t.TempDir(), "defs")
	_, err = gitsync.InitRepo(defs, "main", map[string]string{"jobs/hello.yaml": "name: hello\nrun:\n  command: [\"true\"]\n"}, "init")
	require.NoError(t, err)
	require.NoError(t, filepath.Walk(filepath.Dir(defs), func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chmod(p, fi.Mode().Perm()|0o055)
	}))
	addr := freeAddr(t)
	id := runPodman(t, bin, "run", "--detach", "--runtime", "runc", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
		"--network", "host", "--volume", defs+":/defs:ro", tag, "server", "--listen", addr, "--data-dir", "/var/lib/jobplane", "--definitions", "/defs")
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := exec.Command(bin, "logs", id).CombinedOutput()
			t.Logf("container log:\n%s", logs)
		}
		_ = exec.Command(bin, "rm", "--force", "--time", "2", id).Run()
	})

	hc := checkedHTTP(t, time.Second)
	eventually(t, 60*time.Second, "the container's /readyz", func() (bool, string) {
		resp, err := hc.Get("http://" + addr + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	require.Equal(t, "65532", runPodman(t, bin, "top", id, "user")[len("USER\n"):])

	logs, err := exec.Command(bin, "logs", id).CombinedOutput()
	require.NoError(t, err)
	sc := bufio.NewScanner(strings.NewReader(string(logs)))
	lines := 0
	for sc.Scan() {
		var line map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line), "the image logs JSON lines: %q", sc.Text())
		lines++
	}
	require.Positive(t, lines)
}
